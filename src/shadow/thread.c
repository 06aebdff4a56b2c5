/* The shadow thread (DESIGN §3): one per trainer, looping sync rounds in
 * the background while the workers train, or, in foreground mode, running
 * a round only when a worker asks and holding that worker until it ends.
 * It stops after the round in which no trainer had data left (the final
 * sync; an EASGD trainer follows the center until shadow_wait). With
 * sync.algo = none it only waits for the data to end. Rounds after this
 * trainer's final one (joined or followed for the others) are no syncs
 * of its own. */
#include "shadowsync/shadow.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct shadow {
    struct shadow_opts o;
    const struct sync_algo_ops *algo;
    struct sync_ctx ctx;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int data_done, pending, failed;
    int all_done;               /* shadow_wait: no trainer trains on */
    int final_done;             /* this trainer's final round has ended (or the thread) */
    int held;                   /* the workers are paused: run rounds without being asked */
    int64_t started, done;      /* rounds begun, rounds finished */
    int64_t unasked;            /* ...of which run only because the workers were held */
    int64_t joined;             /* ...or after this trainer's final round */
    int hold_rounds;            /* held workers make rounds: a peer's may wait on this one */
    int rc;
    struct ss_err err;
    int ended;                  /* the thread joined (shadow_wait) */
};

static void pause_ms(double ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (time_t)(ms / 1000) * 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

/* The shadow thread's sleep between rounds (sync.shadow_sleep_ms), cut
 * short when *flag is set (the data's end: the final rounds follow at
 * once; the job's: a following trainer's last round). */
static void pause_until(struct shadow *s, double ms, const int *flag)
{
    if (ms <= 0)
        return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = until.tv_nsec + (long long)(ms * 1e6);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&s->mu);
    while (!*flag && pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
        ;
    pthread_mutex_unlock(&s->mu);
}

/* Foreground: waits for a worker's request or the end of the data;
 * returns 1 where the round is run only because the workers are held. */
static int wait_for_request(struct shadow *s)
{
    pthread_mutex_lock(&s->mu);
    int held = 0;
    while (!s->pending && !s->data_done && !(held = s->hold_rounds && s->held))
        pthread_cond_wait(&s->cv, &s->mu);
    int unasked = !s->pending && !s->data_done && held; /* not a sync the workers asked for */
    s->pending = 0;
    s->started++;
    pthread_mutex_unlock(&s->mu);
    return unasked;
}

/* The pause after a round of cpu CPU seconds and wall seconds: the
 * configured sleep, or longer where the thread's CPU is paced, so that a
 * round and its pause take cpu / allowance. */
static double paced_ms(const struct shadow *s, double cpu, double wall)
{
    double ms = s->o.cfg->sync.shadow_sleep_ms;
    if (s->o.cpu_allowance > 0) {
        double need = (cpu / s->o.cpu_allowance - wall) * 1e3;
        ms = need > ms ? need : ms;
    }
    return ms > 60000 ? 60000 : ms;
}

static void *shadow_main(void *arg)
{
    struct shadow *s = arg;
    int foreground = s->o.cfg->sync.mode == SYNC_FOREGROUND;
    int is_none = strcmp(s->algo->name, "none") == 0;
    for (;;) {
        int unasked = 0;
        if (foreground || is_none) {
            unasked = wait_for_request(s);
        } else {
            pthread_mutex_lock(&s->mu);
            s->started++;
            pthread_mutex_unlock(&s->mu);
        }
        pthread_mutex_lock(&s->mu);
        int active = !s->data_done;
        int joined = !active && s->final_done; /* after its final round (its first without data) */
        s->ctx.others_on = s->o.trainers > 1 && !s->all_done;
        pthread_mutex_unlock(&s->mu);
        struct timespec c0, c1;
        double t0 = ss_now();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        int rc = s->o.stage.pull ? s->o.stage.pull(s->o.stage.arg, &s->err) : 0;
        if (rc >= 0)
            rc = s->algo->sync(&s->ctx, active, &s->err);
        if (rc >= 0 && s->o.stage.push) {
            int prc = s->o.stage.push(s->o.stage.arg, &s->err);
            rc = prc < 0 ? prc : rc;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        double wall = ss_now() - t0, cpu = (double)(c1.tv_sec - c0.tv_sec) +
                                          (c1.tv_nsec - c0.tv_nsec) * 1e-9;
        pthread_mutex_lock(&s->mu);
        s->done++;
        s->unasked += unasked && !joined; /* with done: syncs never count a round under way */
        s->joined += joined;
        s->final_done |= !active || rc <= 0;
        if (rc < 0)
            s->failed = 1, s->rc = rc;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (rc < 0 && s->o.failed.call)
            s->o.failed.call(s->o.failed.arg, &s->err);
        if (rc <= 0)
            break;
        if (!active && !s->hold_rounds) /* following: paced by its own sleep, to the job's end */
            pause_until(s, s->o.cfg->sync.shadow_sleep_ms > 1 ? s->o.cfg->sync.shadow_sleep_ms : 1,
                        &s->all_done);
        else if (!foreground)
            pause_until(s, paced_ms(s, cpu, wall), &s->data_done);
        else if (__atomic_load_n(&s->held, __ATOMIC_RELAXED))
            pause_ms(1);
    }
    return NULL;
}

static void free_ctx(struct sync_ctx *c)
{
    free(c->buf);
    free(c->snap);
    free(c->base);
    free(c->tail_snap);
}

int shadow_start(struct shadow **out, const struct shadow_opts *o, struct ss_err *e)
{
    const struct sync_algo_ops *algo = sync_algo_find(o->cfg->sync.algo);
    if (!algo)
        return ss_fail(e, SS_EINVAL, "config: sync.algo = %s is not an algorithm", o->cfg->sync.algo);
    struct shadow *s = ss_xcalloc(1, sizeof *s);
    s->o = *o;
    s->algo = algo;
    s->ctx = (struct sync_ctx){.cfg = o->cfg, .w = o->w, .n = o->n, .coll = o->coll,
                               .center = o->center};
    s->hold_rounds = algo->needs == SYNC_NEEDS_COLLECTIVE;
    s->ctx.buf = ss_aligned((o->n + 1) * sizeof(float));
    s->ctx.snap = ss_aligned((o->n ? o->n : 1) * sizeof(float));
    if (algo->needs == SYNC_NEEDS_COLLECTIVE && o->tail.n > 0 && o->tail.n <= o->n) {
        s->ctx.n_sum = o->tail.n; /* every trainer starts from the same tail */
        s->ctx.base = ss_aligned(o->tail.n * sizeof(float));
        s->ctx.tail_snap = ss_aligned(o->tail.n * sizeof(float));
        memcpy(s->ctx.base, o->w + o->n - o->tail.n, o->tail.n * sizeof(float));
        s->ctx.tail_agreed = !o->tail.resumed;
    }
    int rc = algo->init ? algo->init(&s->ctx, e) : 0;
    if (rc < 0) {
        free_ctx(&s->ctx);
        free(s);
        return rc;
    }
    if (o->restore.arrays && algo->state) {
        float *arrays[4];
        int k = algo->state(&s->ctx, arrays);
        for (int i = 0; i < k && i < o->restore.n; i++)
            memcpy(arrays[i], o->restore.arrays[i], o->n * sizeof(float));
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca; /* timed waits on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->th, NULL, shadow_main, s) != 0) {
        if (algo->free)
            algo->free(&s->ctx);
        free_ctx(&s->ctx);
        free(s);
        return ss_fail(e, SS_ESTATE, "cannot start the shadow thread");
    }
    *out = s;
    return 0;
}

int shadow_request(struct shadow *s)
{
    pthread_mutex_lock(&s->mu);
    int64_t target = s->started + 1;
    s->pending = 1;
    pthread_cond_broadcast(&s->cv);
    while (s->done < target && !s->failed)
        pthread_cond_wait(&s->cv, &s->mu);
    int rc = s->failed ? s->rc : 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void shadow_data_done(struct shadow *s)
{
    pthread_mutex_lock(&s->mu);
    s->data_done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void shadow_hold(struct shadow *s, int held)
{
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->held, held, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int shadow_state(struct shadow *s, float **arrays)
{
    return s->algo->state ? s->algo->state(&s->ctx, arrays) : 0;
}

int64_t shadow_syncs(struct shadow *s)
{
    pthread_mutex_lock(&s->mu);
    int64_t n = s->done - s->unasked - s->joined;
    pthread_mutex_unlock(&s->mu);
    return strcmp(s->algo->name, "none") ? n : 0; /* none moves nothing */
}

void shadow_wait_final(struct shadow *s)
{
    pthread_mutex_lock(&s->mu);
    while (!s->final_done && !s->ended)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

int shadow_wait(struct shadow *s, int64_t *syncs, struct ss_err *e)
{
    if (!s->ended) {
        pthread_mutex_lock(&s->mu);
        s->all_done = 1;
        if (s->ctx.coll) /* no one watches the others' progress now: a round's wait is timed */
            __atomic_store_n(&s->ctx.coll->idle, 0, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    s->ended = 1;
    if (s->rc < 0 && e)
        *e = s->err;
    if (syncs)
        *syncs = strcmp(s->algo->name, "none") ? s->done - s->unasked - s->joined : 0;
    return s->rc;
}

int shadow_join(struct shadow *s, int64_t *syncs, struct ss_err *e)
{
    int rc = shadow_wait(s, syncs, e);
    if (s->algo->free)
        s->algo->free(&s->ctx);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free_ctx(&s->ctx);
    free(s);
    return rc;
}
