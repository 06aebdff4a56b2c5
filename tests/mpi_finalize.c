/* Run under mpirun by tests/e2e_mpi.sh: the job's end (rpc_finalize) with
 * a rank that stalls before it (argv[1] = "stall": rank 1 stops itself
 * with SIGSTOP): MPI_Finalize waits for every rank, and past twice
 * end_wait_s the stall guard ends the job, naming the wait, rather than
 * hang it for good. Without "stall" every rank finalizes and exits 0. */
#include "shadowsync/rpc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    struct job_plan p;
    memset(&p, 0, sizeof p);
    MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p.size);
    p.count[ROLE_TRAINER] = p.size;
    p.trainers = MPI_COMM_NULL;
    p.end_wait_s = 1;
    p.hosts = calloc((size_t)p.size, sizeof *p.hosts);
    for (int r = 0; r < p.size; r++)
        snprintf(p.hosts[r], sizeof p.hosts[r], "node%d", r);
    MPI_Barrier(MPI_COMM_WORLD);
    if (argc > 1 && !strcmp(argv[1], "stall") && p.rank == 1)
        raise(SIGSTOP);
    rpc_finalize(&p);
    if (p.rank == 0)
        printf("finalized\n");
    return 0;
}
