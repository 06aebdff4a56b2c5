/* In-process transports for the embedded default: an all-reduce among the
 * trainers of one process and the EASGD central copy (DESIGN §2: "an
 * in-process collective and central EASGD copy"). The cluster job swaps in
 * MPI and the sync PS behind the same interfaces. */
#include "shadowsync/shadow.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Round r accumulates into acc[r % 2]; a member can be at most one round
 * ahead of the slowest reader, so the other buffer is never overwritten
 * while being read. */
struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived, members_left;
    int broken;                 /* a member's sync failed: no round completes any more */
    int64_t round;              /* rounds completed */
    float *acc[2];
    size_t max_len;
};

static int local_allreduce(struct collective *c, float *buf, size_t n, struct ss_err *e)
{
    struct group *g = c->impl;
    if (n > g->max_len)
        return ss_fail(e, SS_EINVAL, "in-process all-reduce of %zu floats exceeds %zu", n,
                       g->max_len);
    pthread_mutex_lock(&g->mu);
    int64_t my = g->round;
    float *acc = g->acc[my % 2];
    if (!g->broken) {
        if (g->arrived == 0)
            memcpy(acc, buf, n * sizeof(float));
        else
            for (size_t i = 0; i < n; i++)
                acc[i] += buf[i];
        if (++g->arrived == g->size) {
            g->arrived = 0;
            g->round++;
            pthread_cond_broadcast(&g->cv);
        }
    }
    while (g->round == my && !g->broken)
        pthread_cond_wait(&g->cv, &g->mu);
    int done = g->round != my;
    pthread_mutex_unlock(&g->mu);
    if (!done)
        return ss_fail(e, SS_ESTATE, "in-process all-reduce: another trainer's sync failed");
    memcpy(buf, acc, n * sizeof(float));
    return 0;
}

void collective_local_break(struct collective *c)
{
    struct group *g = c->impl;
    pthread_mutex_lock(&g->mu);
    g->broken = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void local_free(struct collective *c)
{
    struct group *g = c->impl;
    pthread_mutex_lock(&g->mu);
    int last = --g->members_left == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g->acc[0]);
        free(g->acc[1]);
        free(g);
    }
    free(c);
}

static const struct collective_ops local_ops = {"in-process", local_allreduce, local_free, NULL};

void collective_local_group(struct collective **m, int n, size_t max_len)
{
    struct group *g = ss_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->size = g->members_left = n;
    g->max_len = max_len;
    g->acc[0] = ss_aligned(max_len * sizeof(float));
    g->acc[1] = ss_aligned(max_len * sizeof(float));
    for (int i = 0; i < n; i++) {
        m[i] = ss_xcalloc(1, sizeof **m);
        *m[i] = (struct collective){&local_ops, i, n, g, 0};
    }
}

struct local_center {
    pthread_mutex_t mu;
    float *w;
    size_t n;
};

static int center_elastic(struct center *c, const float *w, float *out, size_t n, float alpha,
                          struct ss_err *e)
{
    struct local_center *lc = c->impl;
    if (n != lc->n)
        return ss_fail(e, SS_EINVAL, "elastic sync of %zu floats against a center of %zu", n,
                       lc->n);
    pthread_mutex_lock(&lc->mu);
    for (size_t i = 0; i < n; i++) {
        float v = (1.0f - alpha) * lc->w[i] + alpha * w[i];
        lc->w[i] = v;
        out[i] = v;
    }
    pthread_mutex_unlock(&lc->mu);
    return 0;
}

static void center_free(struct center *c)
{
    struct local_center *lc = c->impl;
    pthread_mutex_destroy(&lc->mu);
    free(lc->w);
    free(lc);
    free(c);
}

static void center_get(struct center *c, float *out)
{
    struct local_center *lc = c->impl;
    pthread_mutex_lock(&lc->mu);
    memcpy(out, lc->w, lc->n * sizeof(float));
    pthread_mutex_unlock(&lc->mu);
}

static void center_set(struct center *c, const float *in)
{
    struct local_center *lc = c->impl;
    pthread_mutex_lock(&lc->mu);
    memcpy(lc->w, in, lc->n * sizeof(float));
    pthread_mutex_unlock(&lc->mu);
}

static const struct center_ops center_local_ops = {center_elastic, center_free, center_get,
                                                   center_set};

struct center *center_local_create(const float *init, size_t n)
{
    struct local_center *lc = ss_xcalloc(1, sizeof *lc);
    pthread_mutex_init(&lc->mu, NULL);
    lc->w = ss_aligned(n * sizeof(float));
    memcpy(lc->w, init, n * sizeof(float));
    lc->n = n;
    struct center *c = ss_xcalloc(1, sizeof *c);
    *c = (struct center){&center_local_ops, lc};
    return c;
}
