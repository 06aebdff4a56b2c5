/* The all-reduce among trainer ranks of a cluster job (DESIGN §2 "Wires"):
 * MPI_Iallreduce in place, completed by polling MPI_Test with a 50 us sleep.
 * A blocked MPI_Wait spins at 100 % CPU in Open MPI 4.1 and would steal a
 * worker's core; polling costs ~7 % of one core instead (TOOLCHAIN.md). */
#include "shadowsync/shadow.h"

#include <stdlib.h>
#include <time.h>

static int mpi_allreduce(struct collective *c, float *buf, size_t n, struct ss_err *e)
{
    MPI_Comm comm = *(MPI_Comm *)c->impl;
    if (n > (size_t)INT32_MAX)
        return ss_fail(e, SS_EINVAL, "all-reduce of %zu floats exceeds MPI's count", n);
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &req);
    if (rc != MPI_SUCCESS)
        return ss_fail(e, SS_EIO, "MPI_Iallreduce failed on rank %d (code %d)", c->rank, rc);
    const struct timespec pause = {0, 50000};
    for (int done = 0;;) {
        if ((rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return ss_fail(e, SS_EIO, "MPI_Test failed on rank %d (code %d)", c->rank, rc);
        if (done)
            return 0;
        nanosleep(&pause, NULL);
    }
}

static void mpi_free(struct collective *c)
{
    free(c->impl);
    free(c);
}

static const struct collective_ops mpi_ops = {"mpi", mpi_allreduce, mpi_free};

struct collective *collective_mpi(MPI_Comm comm)
{
    struct collective *c = ss_xcalloc(1, sizeof *c);
    MPI_Comm *keep = ss_xmalloc(sizeof *keep);
    *keep = comm;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    *c = (struct collective){&mpi_ops, c->rank, c->size, keep};
    return c;
}
