/* How a rank of a cluster job waits on the others (DESIGN §2 "Wires"):
 * requests completed by polling MPI_Test with a 50 us sleep
 * (peer_wait_req): polling costs ~7 % of one core where a blocked MPI_Wait
 * would spin one (TOOLCHAIN.md). A rank that waits past sync.timeout_s on
 * the others ends the job naming the wait: a rank that stalls without
 * exiting would otherwise hang every other one for good. Stall guards put
 * the same kind of deadline on calls that take none (NCCL's start,
 * MPI_Finalize, the job's start and end): a thread of their own ends the
 * job past it. */
#include "shadowsync/core.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

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
    double timeout_s;
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

/* g's deadline, seconds from now. */
static void set_deadline(struct stall_guard *g, double seconds)
{
    clock_gettime(CLOCK_MONOTONIC, &g->deadline);
    double at = (double)g->deadline.tv_sec + g->deadline.tv_nsec * 1e-9 + seconds;
    g->deadline.tv_sec = (time_t)at;
    g->deadline.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
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
    g->timeout_s = timeout_s;
    set_deadline(g, timeout_s);
    if (pthread_create(&g->th, NULL, guard_run, g) != 0) { /* no guard rather than no run */
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    return g;
}

void stall_guard_hold(struct stall_guard *g, int hold)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    set_deadline(g, hold ? 1e9 : g->timeout_s);
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
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
