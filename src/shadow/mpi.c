/* The collectives among trainer ranks of a cluster job over MPI (DESIGN §2
 * "Wires"): the all-reduce (MPI_Iallreduce in place) and a DES group's
 * all-to-all (MPI_Ialltoallv), each completed by polling MPI_Test
 * (peer_wait_req, src/core/waits.c), so a trainer that waits past
 * sync.timeout_s on the others ends the job naming the wait. */
#include "shadowsync/shadow.h"

#include <stdlib.h>

enum { spin_none = 0, spin_some = 64 }; /* peer_wait_req's spins */

struct mpi_coll {
    MPI_Comm comm;              /* borrowed */
    struct peer_wait pw;
};

static int mpi_allreduce(struct collective *c, float *buf, size_t n, struct ss_err *e)
{
    struct mpi_coll *m = c->impl;
    if (n > (size_t)INT32_MAX)
        return ss_fail(e, SS_EINVAL, "all-reduce of %zu floats exceeds MPI's count", n);
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m->comm, &req);
    if (rc != MPI_SUCCESS)
        return ss_fail(e, SS_EIO, "MPI_Iallreduce failed on rank %d (code %d)", c->rank, rc);
    struct peer_wait pw = m->pw; /* joined for the others: no deadline while c->idle */
    pw.patient = &c->idle;
    return peer_wait_req(&req, spin_none, &pw, "the trainers' all-reduce (a sync round)",
                         m->pw.others, e);
}

static void mpi_free(struct collective *c)
{
    free(c->impl);
    free(c);
}

static const struct collective_ops mpi_ops = {"mpi", mpi_allreduce, mpi_free, NULL};

struct collective *collective_mpi(MPI_Comm comm, const struct peer_wait *pw)
{
    struct collective *c = ss_xcalloc(1, sizeof *c);
    struct mpi_coll *m = ss_xcalloc(1, sizeof *m);
    m->comm = comm;
    if (pw)
        m->pw = *pw;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    *c = (struct collective){&mpi_ops, c->rank, c->size, m, 0};
    return c;
}

/* ---- the all-to-all of a DES group over MPI ---------------------------- */

struct mpi_x {
    struct exchange x;
    MPI_Comm comm;              /* its own: groups' rounds never mix */
    struct peer_wait pw;
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
    return peer_wait_req(&req, spin_some, &m->pw, "a DES exchange (the tables' all-to-all)",
                         m->pw.others, e);
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

struct exchange *exchange_mpi(MPI_Comm comm, const struct peer_wait *pw)
{
    struct mpi_x *m = ss_xcalloc(1, sizeof *m);
    MPI_Comm_dup(comm, &m->comm);
    MPI_Comm_rank(m->comm, &m->x.rank);
    MPI_Comm_size(m->comm, &m->x.size);
    if (pw)
        m->pw = *pw;
    m->x.ops = &mpi_x_ops;
    m->sc = ss_xcalloc(m->x.size, sizeof(int));
    m->sd = ss_xcalloc(m->x.size, sizeof(int));
    m->rc = ss_xcalloc(m->x.size, sizeof(int));
    m->rd = ss_xcalloc(m->x.size, sizeof(int));
    return &m->x;
}
