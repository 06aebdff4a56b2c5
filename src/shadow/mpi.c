/* The all-reduce among trainer ranks of a cluster job (DESIGN §2 "Wires"):
 * MPI_Iallreduce in place, completed by polling MPI_Test with a 50 us sleep
 * (peer_wait_req): polling costs ~7 % of one core where a blocked MPI_Wait
 * would spin one (TOOLCHAIN.md). A trainer that waits past sync.timeout_s
 * on the others ends the job naming the wait: a trainer that stalls
 * without exiting would otherwise hang every other one for good. Stall
 * guards put the same kind of deadline on calls that take none (NCCL's
 * start, MPI_Finalize): a thread of their own ends the job past it. */
#include "shadowsync/shadow.h"
#include "shadowsync/trainer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

enum { spin_none = 0, spin_some = 64 };

int peer_wait_req(MPI_Request *req, int spins, const struct peer_wait *pw, const char *what,
                  const char *who, struct ss_err *e)
{
    const struct timespec pause = {0, 50000};
    double deadline = pw && pw->timeout_s > 0 ? ss_now() + pw->timeout_s : 0;
    int watch = deadline && pw->patient;
    for (int done = 0, i = 0;; i++) {
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return ss_fail(e, SS_EIO, "%s: MPI_Test failed (code %d)", what, rc);
        if (done)
            return 0;
        if (i >= spins) {
            nanosleep(&pause, NULL);
            if (watch && (i & 255) == 0 && __atomic_load_n(pw->patient, __ATOMIC_RELAXED))
                deadline = ss_now() + pw->timeout_s; /* patient: the deadline starts later */
            else if (deadline && (i & 255) == 0 && ss_now() > deadline)
                peer_stalled(pw, what, who);
        }
    }
}

struct stall_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    struct timespec deadline;   /* CLOCK_MONOTONIC */
    int done;
    char msg[512];
};

static void *guard_run(void *arg)
{
    struct stall_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    int late = 0;
    while (!g->done && !late)
        late = pthread_cond_timedwait(&g->cv, &g->mu, &g->deadline) == ETIMEDOUT;
    int fire = !g->done;
    pthread_mutex_unlock(&g->mu);
    if (!fire)
        return NULL;
    fprintf(stderr, "shadowsync: %s\n", g->msg);
    job_abort_pause();
    pthread_mutex_lock(&g->mu);
    fire = !g->done; /* the call returned just now (MPI_Finalize: MPI_Abort no longer may) */
    pthread_mutex_unlock(&g->mu);
    if (fire)
        MPI_Abort(MPI_COMM_WORLD, 1);
    return NULL;
}

struct stall_guard *stall_guard_arm(double timeout_s, const char *msg)
{
    if (timeout_s <= 0)
        return NULL;
    struct stall_guard *g = ss_xcalloc(1, sizeof *g);
    snprintf(g->msg, sizeof g->msg, "%s", msg);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->mu, NULL);
    clock_gettime(CLOCK_MONOTONIC, &g->deadline);
    double at = (double)g->deadline.tv_sec + g->deadline.tv_nsec * 1e-9 + timeout_s;
    g->deadline.tv_sec = (time_t)at;
    g->deadline.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
    if (pthread_create(&g->th, NULL, guard_run, g) != 0) { /* no guard rather than no run */
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    return g;
}

void stall_guard_disarm(struct stall_guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->done = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

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
