/* The all-to-all of a DES group whose members are threads of this process
 * (the embedded default): each member publishes where its send buffer and
 * counts are, all meet at a barrier, each copies its parts out of the
 * others' buffers, and all meet again before any buffer is reused. A
 * member that waits checks the job's stop flag, so a failed worker does
 * not leave the others waiting for good. */
#include "shadowsync/shadow.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct local_group {
    int size, refs;
    const int *stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    int64_t gen;
    const char **send;          /* [size] each member's send buffer, this round */
    const size_t **sbytes;      /* [size] ...and its counts */
};

struct local_x {
    struct exchange x;
    struct local_group *g;
};

static int barrier(struct local_group *g, struct ss_err *e)
{
    pthread_mutex_lock(&g->mu);
    int64_t gen = g->gen;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    }
    while (g->gen == gen) {
        if (g->stop && __atomic_load_n(g->stop, __ATOMIC_RELAXED)) {
            pthread_mutex_unlock(&g->mu);
            return ss_fail(e, SS_ESTATE, "DES exchange: the job stopped (another worker failed)");
        }
        struct timespec ts = ss_deadline(0.02);
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static int local_alltoallv(struct exchange *x, const void *send, const size_t *sbytes, void *recv,
                           const size_t *rbytes, struct ss_err *e)
{
    struct local_group *g = ((struct local_x *)x)->g;
    int me = x->rank, bad = -1;
    g->send[me] = send;
    g->sbytes[me] = sbytes;
    int rc = barrier(g, e);
    if (rc < 0)
        return rc;
    char *to = recv;
    for (int p = 0; p < g->size; p++) {
        size_t at = 0;
        for (int q = 0; q < me; q++)
            at += g->sbytes[p][q];
        if (g->sbytes[p][me] != rbytes[p] && bad < 0)
            bad = p;
        else if (rbytes[p])
            memcpy(to, g->send[p] + at, rbytes[p]);
        to += rbytes[p];
    }
    size_t sent = bad >= 0 ? g->sbytes[bad][me] : 0; /* read before the others go on */
    if ((rc = barrier(g, e)) < 0)
        return rc;
    if (bad >= 0)
        return ss_fail(e, SS_ESTATE, "DES exchange: member %d sent member %d %zu bytes, %zu "
                       "expected", bad, me, sent, rbytes[bad]);
    return 0;
}

static void local_free(struct exchange *x)
{
    struct local_group *g = ((struct local_x *)x)->g;
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g->send);
        free(g->sbytes);
        free(g);
    }
    free(x);
}

static const struct exchange_ops local_ops = {local_alltoallv, local_free};

void exchange_local_group(struct exchange **x, int size, const int *stop)
{
    struct local_group *g = ss_xcalloc(1, sizeof *g);
    g->size = g->refs = size;
    g->stop = stop;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->send = ss_xcalloc(size, sizeof *g->send);
    g->sbytes = ss_xcalloc(size, sizeof *g->sbytes);
    for (int m = 0; m < size; m++) {
        struct local_x *lx = ss_xcalloc(1, sizeof *lx);
        lx->x = (struct exchange){&local_ops, m, size};
        lx->g = g;
        x[m] = &lx->x;
    }
}
