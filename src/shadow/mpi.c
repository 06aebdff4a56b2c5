/* The all-reduce among trainer ranks of a cluster job (DESIGN §2 "Wires"):
 * MPI_Iallreduce in place, completed by polling MPI_Test with a 50 us sleep.
 * A blocked MPI_Wait spins at 100 % CPU in Open MPI 4.1 and would steal a
 * worker's core; polling costs ~7 % of one core instead (TOOLCHAIN.md). */
#include "shadowsync/shadow.h"
#include "shadowsync/trainer.h"

#include <stdlib.h>
#include <time.h>

enum { spin_none = 0, spin_some = 64 };

/* Polls req: spins tests first (a DES round is short), then sleeps 50 us
 * between them. */
static int wait_req(MPI_Request *req, int spins, int rank, struct ss_err *e)
{
    const struct timespec pause = {0, 50000};
    for (int done = 0, i = 0;; i++) {
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return ss_fail(e, SS_EIO, "MPI_Test failed on rank %d (code %d)", rank, rc);
        if (done)
            return 0;
        if (i >= spins)
            nanosleep(&pause, NULL);
    }
}

static int mpi_allreduce(struct collective *c, float *buf, size_t n, struct ss_err *e)
{
    MPI_Comm comm = *(MPI_Comm *)c->impl;
    if (n > (size_t)INT32_MAX)
        return ss_fail(e, SS_EINVAL, "all-reduce of %zu floats exceeds MPI's count", n);
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &req);
    if (rc != MPI_SUCCESS)
        return ss_fail(e, SS_EIO, "MPI_Iallreduce failed on rank %d (code %d)", c->rank, rc);
    return wait_req(&req, spin_none, c->rank, e);
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

/* ---- the all-to-all of a DES group over MPI ---------------------------- */

struct mpi_x {
    struct exchange x;
    MPI_Comm comm;              /* its own: groups' rounds never mix */
    int *sc, *sd, *rc, *rd;     /* [size] counts and displacements, bytes */
};

static int counts(const size_t *bytes, int n, int *c, int *d)
{
    size_t at = 0;
    for (int q = 0; q < n; q++) {
        if (bytes[q] > INT32_MAX || at > INT32_MAX)
            return -1;
        c[q] = (int)bytes[q], d[q] = (int)at;
        at += bytes[q];
    }
    return at > INT32_MAX ? -1 : 0;
}

static int mpi_alltoallv(struct exchange *x, const void *send, const size_t *sbytes, void *recv,
                         const size_t *rbytes, struct ss_err *e)
{
    struct mpi_x *m = (struct mpi_x *)x;
    if (counts(sbytes, x->size, m->sc, m->sd) < 0 || counts(rbytes, x->size, m->rc, m->rd) < 0)
        return ss_fail(e, SS_EINVAL, "DES: a round of over 2 GiB on rank %d of the trainers "
                       "(lower trainer.batch_size)", x->rank);
    MPI_Request req;
    int rc = MPI_Ialltoallv(send, m->sc, m->sd, MPI_BYTE, recv, m->rc, m->rd, MPI_BYTE, m->comm,
                            &req);
    if (rc != MPI_SUCCESS)
        return ss_fail(e, SS_EIO, "MPI_Ialltoallv failed on rank %d (code %d)", x->rank, rc);
    return wait_req(&req, spin_some, x->rank, e);
}

static void mpi_x_free(struct exchange *x)
{
    struct mpi_x *m = (struct mpi_x *)x;
    MPI_Comm_free(&m->comm);
    free(m->sc);
    free(m->sd);
    free(m->rc);
    free(m->rd);
    free(m);
}

static const struct exchange_ops mpi_x_ops = {mpi_alltoallv, mpi_x_free};

struct exchange *exchange_mpi(MPI_Comm comm)
{
    struct mpi_x *m = ss_xcalloc(1, sizeof *m);
    MPI_Comm_dup(comm, &m->comm);
    MPI_Comm_rank(m->comm, &m->x.rank);
    MPI_Comm_size(m->comm, &m->x.size);
    m->x.ops = &mpi_x_ops;
    m->sc = ss_xcalloc(m->x.size, sizeof(int));
    m->sd = ss_xcalloc(m->x.size, sizeof(int));
    m->rc = ss_xcalloc(m->x.size, sizeof(int));
    m->rd = ss_xcalloc(m->x.size, sizeof(int));
    return &m->x;
}
