/* Run under mpirun by tests/e2e_mpi.sh: the MPI all-reduce behind the
 * collective interface, and MA over it with ranks whose data ends at
 * different rounds (all must stop after the same final round). */
#include "check.h"
#include "shadowsync/shadow.h"

#include <math.h>
#include <string.h>

#define LEN 1000

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct collective *c = collective_mpi(MPI_COMM_WORLD, NULL);
    struct ss_err e = {0};
    static float buf[LEN + 1], w[LEN], snap[LEN];
    for (int i = 0; i < LEN; i++)
        buf[i] = (float)(rank + i);
    int rc = c->ops->allreduce_sum(c, buf, LEN, &e);
    int ok = rc == 0;
    for (int i = 0; i < LEN; i++) /* sum over ranks of rank + i */
        ok &= buf[i] == (float)(size * (size - 1) / 2 + size * i);
    struct ss_config cfg = {0};
    cfg.sync.alpha = 1.0;
    for (int i = 0; i < LEN; i++)
        w[i] = (float)rank;
    struct sync_ctx ctx = {&cfg, w, LEN, c, NULL, buf, NULL, 0, NULL, NULL, 1, 0, 0, snap};
    const struct sync_algo_ops *ma = sync_algo_find("ma");
    int rounds = 0;
    for (;;) {
        int r = ma->sync(&ctx, rounds < rank + 1, &e); /* rank k has data for k+1 rounds */
        rounds++;
        if (r <= 0)
            break;
    }
    int all_ok = 0, max_rounds = 0, min_rounds = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&rounds, &max_rounds, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&rounds, &min_rounds, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK(all_ok, "MPI all-reduce sums every rank's buffer", "a rank saw a wrong sum");
        CHECK(max_rounds == size + 1 && min_rounds == size + 1,
              "ma over MPI: every rank stops after the same final round",
              "rounds %d..%d, expected %d", min_rounds, max_rounds, size + 1);
        CHECK(fabsf(w[0] - (size - 1) / 2.0f) < 1e-5, "ma over MPI averages the replicas",
              "w %g", w[0]);
    }
    c->ops->free(c);
    MPI_Finalize();
    CHECK_DONE();
}
