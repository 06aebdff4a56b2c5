/* Every rank's heartbeat (DESIGN §8 "Reliability"): a thread of each rank
 * of a cluster job sends the next rank (in a ring over MPI_COMM_WORLD, on a
 * communicator of its own) a byte every `every` seconds and takes in the
 * previous rank's, from the start of its role to its MPI_Finalize (where it
 * sends a last byte that says so: the next rank stops judging it, as it may
 * itself still wait on others), whatever its main thread does meanwhile. So a rank whose
 * process stops (SIGSTOP, a paused VM, a node swapping) is found where no
 * wait on it has a deadline of its own: a checkpoint's release, the final
 * checkpoint, the master's final eval, a service the trainers no longer
 * call, the job's last barrier. Silent for twice sync.timeout_s while this
 * rank listened (and once heard from: one may still be starting), it ends
 * the job naming it; the waits that have a deadline (sync.timeout_s,
 * job.rpc_timeout_s) name themselves first. Off with sync.timeout_s = 0.
 * A ring: each rank sends one byte a period, however many ranks. */
#include "shadowsync/rpc.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* the bytes sent, never freed (a send may outlive the pulse) */
static const char beat_byte = 'b', leaving_byte = 'L';

struct rpc_pulse {
    MPI_Comm comm;
    int prev, next, alone, stop, running;
    int prev_left;              /* the previous rank said it stops pulsing: no more judged */
    pthread_t th;
    MPI_Request req, bye;
    double heard, every, after, deaf;
    char me[128], prev_name[128];
};

int rpc_sends_release(MPI_Request *req, int n)
{
    int in_flight = 0;
    for (int r = 0; r < n; r++) {
        int done = 1;
        if (req[r] != MPI_REQUEST_NULL)
            MPI_Test(&req[r], &done, MPI_STATUS_IGNORE);
        if (!done)
            MPI_Request_free(&req[r]), in_flight = 1;
    }
    return in_flight;
}

void rpc_rank_name(const struct job_plan *p, int rank, char *out, size_t cap)
{
    int role, idx;
    rpc_assign_role(p->count, rank, &role, &idx);
    snprintf(out, cap, "%s %d (rank %d on %s)", rpc_role_name(role), idx, rank, p->hosts[rank]);
}

struct rpc_pulse *rpc_pulse_new(const struct job_plan *p, double timeout_s)
{
    struct rpc_pulse *h = ss_xcalloc(1, sizeof *h);
    MPI_Comm_dup(MPI_COMM_WORLD, &h->comm); /* before any thread of this rank calls MPI */
    h->next = (p->rank + 1) % p->size;
    h->prev = (p->rank + p->size - 1) % p->size;
    h->alone = p->size < 2;
    h->req = h->bye = MPI_REQUEST_NULL;
    h->after = 2 * timeout_s;
    h->every = h->after / 8 < 1 ? h->after / 8 : 1;
    h->deaf = 2 * h->every + 1 < h->after / 2 ? 2 * h->every + 1 : h->after / 2;
    rpc_rank_name(p, p->rank, h->me, sizeof h->me);
    rpc_rank_name(p, h->prev, h->prev_name, sizeof h->prev_name);
    return h;
}

static void *pulse_run(void *arg)
{
    struct rpc_pulse *h = arg;
    double polled = 0, next_send = 0;
    const struct timespec nap = {0, (long)(h->every / 4 * 1e9)};
    while (!__atomic_load_n(&h->stop, __ATOMIC_RELAXED)) {
        double now = ss_now();
        if (polled && now - polled > h->deaf && h->heard > 0) /* its own silence says nothing */
            h->heard = now;
        polled = now;
        for (int flag = 1; flag;) {
            char in;
            MPI_Iprobe(h->prev, 0, h->comm, &flag, MPI_STATUS_IGNORE);
            if (flag) {
                MPI_Recv(&in, 1, MPI_CHAR, h->prev, 0, h->comm, MPI_STATUS_IGNORE);
                h->heard = now;
                h->prev_left |= in == leaving_byte;
            }
        }
        if (now >= next_send) {
            int done = 1;
            if (h->req != MPI_REQUEST_NULL)
                MPI_Test(&h->req, &done, MPI_STATUS_IGNORE);
            if (done)
                MPI_Isend(&beat_byte, 1, MPI_CHAR, h->next, 0, h->comm, &h->req);
            next_send = now + h->every;
        }
        if (h->heard > 0 && !h->prev_left && now - h->heard > h->after) {
            fprintf(stderr, "shadowsync: %s: %s has not been heard from for %g s (twice "
                    "sync.timeout_s): its process has stalled (stopped, or swapped out); "
                    "ending the job\n", h->me, h->prev_name, h->after);
            job_abort();
        }
        nanosleep(&nap, NULL);
    }
    /* the next rank listens to this one no more: it may still wait (a barrier, the
     * figures) where this one no longer pulses, and would take the silence for a stall */
    MPI_Isend(&leaving_byte, 1, MPI_CHAR, h->next, 0, h->comm, &h->bye);
    return NULL;
}

void rpc_pulse_start(struct rpc_pulse *h)
{
    if (h && !h->running && h->after > 0 && !h->alone)
        h->running = pthread_create(&h->th, NULL, pulse_run, h) == 0;
}

static void pulse_stop(struct rpc_pulse *h)
{
    if (!h || !h->running)
        return;
    __atomic_store_n(&h->stop, 1, __ATOMIC_RELAXED);
    pthread_join(h->th, NULL);
    h->running = 0;
}

void rpc_pulse_free(struct rpc_pulse *h)
{
    if (!h)
        return;
    pulse_stop(h);
    MPI_Request sends[2] = {h->req, h->bye};
    rpc_sends_release(sends, 2);
    MPI_Comm_free(&h->comm);
    free(h);
}
