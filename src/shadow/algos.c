/* The dense sync algorithms (DESIGN §3) and their table.
 * A round reads w_i once (s, its snapshot) and, when its answer t is back,
 * sets the live w_i <- (1-a) s + a t + (w_i - s): the blend, with the steps
 * the workers took while the round ran kept whole (a round of a slow link
 * spans many of them).
 *   none:  no dense sync.
 *   easgd: w_PS <- (1-a) w_PS + a s (at the center), t = w_PS.
 *          The final round only pushes (a pull there would blend a center
 *          behind the trainer's last steps into its output); then, while
 *          other trainers train on, it follows, t = w_PS with the center
 *          left as it is (alpha 0 at the center).
 *   ma:    t = AllReduce(s)/n.
 *   bmuf:  c <- AllReduce(s)/n, d <- c - w_global, v <- mu v + eta d,
 *          w_global <- w_global + v, t = w_global (Nesterov: w_global + mu v).
 *   allreduce: t = AllReduce(s)/n with a = 1: every trainer ends the round
 *          at the exact mean, with its workers' steps of the round on top
 *          (ma with a = 1, which does not read sync.alpha). With sync.mode = foreground,
 *          sync.gap = 1 and one worker per trainer, each step waits for its
 *          round: fully synchronous dense training beside asynchronous
 *          embeddings (Persia's hybrid, DESIGN §9), the accuracy reference
 *          for the others.
 * The all-reduce carries one extra float, the count of trainers with data
 * left, so every member runs the same number of rounds and all stop
 * together after a round in which nobody had data: the final sync. */
#include "shadowsync/shadow.h"

#include <stdlib.h>
#include <string.h>

/* w <- (1-a) snap + a target + (w - snap), on the live buffer (Hogwild):
 * in that order, so that where no step came between (w = snap) it is the
 * blend exactly, and with a = 1 exactly the target (every replica equal). */
SS_HOGWILD static void pull(float *w, const float *target, const float *snap, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        w[i] = ((1.0f - a) * snap[i] + a * target[i]) + (w[i] - snap[i]);
}

static int none_sync(struct sync_ctx *c, int active, struct ss_err *e)
{
    (void)c, (void)e;
    return active;
}

static int easgd_init(struct sync_ctx *c, struct ss_err *e)
{
    if (!c->center)
        return ss_fail(e, SS_EINVAL, "sync.algo = easgd needs a central copy (sync PS)");
    return 0;
}

static int easgd_sync(struct sync_ctx *c, int active, struct ss_err *e)
{
    float a = (float)c->cfg->sync.alpha;
    int push = active || !c->pushed;
    ss_copy(c->snap, c->w, c->n);
    int rc = c->center->ops->elastic(c->center, c->snap, c->buf, c->n, push ? a : 0.0f, e);
    if (rc < 0)
        return rc;
    if (active || c->pushed) /* not the final push */
        pull(c->w, c->buf, c->snap, c->n, a);
    c->pushed |= !active;
    return active || c->others_on;
}

static int collective_init(struct sync_ctx *c, struct ss_err *e)
{
    if (!c->coll)
        return ss_fail(e, SS_EINVAL, "sync.algo = %s needs a collective among trainers",
                       c->cfg->sync.algo);
    return 0;
}

/* buf <- mean over trainers of src (n floats), but for the summed tail
 * the sum of their changes since the last round; returns the count of
 * active trainers. */
static int average_of(struct sync_ctx *c, const float *src, int active, struct ss_err *e)
{
    size_t nd = c->n - c->n_sum;
    ss_copy(c->buf, src, nd);
    for (size_t k = 0; k < c->n_sum; k++) {
        c->tail_snap[k] = src[nd + k];
        c->buf[nd + k] = c->tail_agreed ? c->tail_snap[k] - c->base[k] : c->tail_snap[k];
    }
    c->buf[c->n] = active ? 1.0f : 0.0f;
    __atomic_store_n(&c->coll->idle, !active && c->others_on, __ATOMIC_RELAXED);
    int rc = c->coll->ops->allreduce_sum(c->coll, c->buf, c->n + 1, e);
    if (rc < 0)
        return rc;
    float inv = 1.0f / c->coll->size;
    size_t mean = c->tail_agreed ? nd : c->n; /* the first round after a resume: the mean */
    for (size_t i = 0; i < mean; i++)
        c->buf[i] *= inv;
    return (int)(c->buf[c->n] + 0.5f);
}

/* After a round: the summed tail takes every trainer's change, keeping the
 * steps its workers took meanwhile (Hogwild on the live buffer). */
SS_HOGWILD static void sum_tail(struct sync_ctx *c)
{
    size_t nd = c->n - c->n_sum;
    float *w = c->w + nd;
    const float *sum = c->buf + nd;
    for (size_t k = 0; k < c->n_sum; k++) {
        float to = c->tail_agreed ? c->base[k] + sum[k] : sum[k]; /* sum: the mean, unagreed */
        w[k] = to + (w[k] - c->tail_snap[k]);
        c->base[k] = to;
    }
    c->tail_agreed = 1;
}

/* buf <- the mean of the trainers' snapshots (c->snap <- w). */
static int average(struct sync_ctx *c, int active, struct ss_err *e)
{
    ss_copy(c->snap, c->w, c->n);
    return average_of(c, c->snap, active, e);
}

static int mean_pulled(struct sync_ctx *c, int active, float a, struct ss_err *e)
{
    int act = average(c, active, e);
    if (act >= 0) {
        pull(c->w, c->buf, c->snap, c->n - c->n_sum, a);
        sum_tail(c);
    }
    return act;
}

static int ma_sync(struct sync_ctx *c, int active, struct ss_err *e)
{
    return mean_pulled(c, active, (float)c->cfg->sync.alpha, e);
}

static int allreduce_sync(struct sync_ctx *c, int active, struct ss_err *e)
{
    return mean_pulled(c, active, 1.0f, e);
}

struct bmuf { float *global, *v, *target; };

static int bmuf_init(struct sync_ctx *c, struct ss_err *e)
{
    int rc = collective_init(c, e);
    if (rc < 0)
        return rc;
    struct bmuf *b = ss_xcalloc(1, sizeof *b);
    b->global = ss_aligned(c->n * sizeof(float));
    b->v = ss_aligned(c->n * sizeof(float));
    b->target = ss_aligned(c->n * sizeof(float));
    memcpy(b->global, c->w, c->n * sizeof(float)); /* every trainer starts from the same init */
    c->state = b;
    return 0;
}

static int bmuf_sync(struct sync_ctx *c, int active, struct ss_err *e)
{
    struct bmuf *b = c->state;
    int act = average(c, active, e);
    if (act < 0)
        return act;
    float mu = (float)c->cfg->sync.bmuf_momentum, eta = (float)c->cfg->sync.bmuf_lr;
    int nesterov = c->cfg->sync.bmuf_nesterov;
    size_t nd = c->n - c->n_sum;
    for (size_t i = 0; i < nd; i++) {
        /* the block's change, from where it started: under Nesterov the
         * look-ahead the trainers were sent, w_global + mu v */
        float start = nesterov ? b->global[i] + mu * b->v[i] : b->global[i];
        float d = c->buf[i] - start;
        float v = mu * b->v[i] + eta * d;
        b->v[i] = v;
        b->global[i] += v;
        b->target[i] = nesterov ? b->global[i] + mu * v : b->global[i];
    }
    pull(c->w, b->target, c->snap, nd, (float)c->cfg->sync.alpha);
    sum_tail(c);
    return act;
}

static void bmuf_free(struct sync_ctx *c)
{
    struct bmuf *b = c->state;
    if (b) {
        free(b->global);
        free(b->v);
        free(b->target);
        free(b);
    }
    c->state = NULL;
}

static int bmuf_state(struct sync_ctx *c, float **arrays)
{
    struct bmuf *b = c->state;
    arrays[0] = b->global;
    arrays[1] = b->v;
    return 2;
}

static const struct sync_algo_ops algos[] = {
    {"none", SYNC_NEEDS_NOTHING, 0, NULL, NULL, none_sync, NULL, NULL},
    {"easgd", SYNC_NEEDS_CENTER, SYNC_ROUNDS | SYNC_USES_ALPHA, NULL, easgd_init, easgd_sync,
     NULL, NULL},
    {"ma", SYNC_NEEDS_COLLECTIVE, SYNC_ROUNDS | SYNC_USES_ALPHA | SYNC_MEAN, NULL,
     collective_init, ma_sync, NULL, NULL},
    {"bmuf", SYNC_NEEDS_COLLECTIVE, SYNC_ROUNDS | SYNC_USES_ALPHA | SYNC_USES_BMUF,
     "lower optim.dense_lr or optim.emb_lr, add an optim.warmup_examples, or lower "
     "sync.bmuf_lr or sync.bmuf_momentum, which the schedule does not scale", bmuf_init,
     bmuf_sync, bmuf_free, bmuf_state},
    {"allreduce", SYNC_NEEDS_COLLECTIVE, SYNC_ROUNDS | SYNC_MEAN, NULL, collective_init,
     allreduce_sync, NULL, NULL},
};

const struct sync_algo_ops *sync_algo_find(const char *name)
{
    for (size_t i = 0; i < sizeof algos / sizeof *algos; i++)
        if (strcmp(algos[i].name, name) == 0)
            return &algos[i];
    return NULL;
}

int sync_algo_needs(const char *name)
{
    const struct sync_algo_ops *a = sync_algo_find(name);
    return a ? a->needs : SYNC_NEEDS_NOTHING;
}

/* An unknown name (refused by the config's check): as none. */
static unsigned uses_of(const char *name)
{
    const struct sync_algo_ops *a = sync_algo_find(name);
    return a ? a->uses : 0;
}

const char *sync_diverged_advice(const struct ss_config *c)
{
    const struct sync_algo_ops *a = sync_algo_find(c->sync.algo);
    return a && a->advice ? a->advice
                          : "lower optim.dense_lr or optim.emb_lr, or add an optim.warmup_examples";
}

int sync_foreground_gap(const struct ss_config *c)
{
    return c->sync.mode == SYNC_FOREGROUND && (uses_of(c->sync.algo) & SYNC_ROUNDS)
               ? c->sync.gap : 0;
}

void sync_config_notes(const struct ss_config *c, int trainers, FILE *out)
{
    const char *algo = c->sync.algo;
    unsigned uses = uses_of(algo);
    int fg = c->sync.mode == SYNC_FOREGROUND;
    if (trainers == 1 && (uses & SYNC_MEAN))
        fprintf(out, "# sync: %s with 1 trainer averages it with itself, so its rounds change "
                "nothing (job.trainers above 1 to sync; sync.algo = none spares the rounds)\n",
                algo);
    if ((uses & SYNC_USES_ALPHA) && (uses & SYNC_ROUNDS) && c->sync.alpha == 0)
        fprintf(out, "# sync: sync.alpha = 0 leaves every replica as it is, so the %s rounds "
                "change nothing a trainer trains on (sync.alpha above 0 to sync)\n", algo);
    else if (sync_algo_needs(algo) == SYNC_NEEDS_CENTER && c->sync.alpha == 1)
        fprintf(out, "# sync: easgd with sync.alpha = 1: the center takes a trainer's vector, "
                "then the trainer the center's, its own: no trainer sees another's (the pull "
                "is alpha x (1 - alpha); 0.5 pulls most)\n");
    struct ss_config d;
    struct ss_err ignored;
    if (ss_config_load(&d, NULL, NULL, 0, &ignored) < 0)
        return;
    if (!(uses & SYNC_ROUNDS) && fg)
        fprintf(out, "# sync: sync.mode = foreground with sync.algo = %s: there is no round to "
                "wait for, so the workers never stop (sync.gap is not used)\n", algo);
    else if (!fg && c->sync.gap != d.sync.gap)
        fprintf(out, "# sync: sync.gap = %d applies to sync.mode = foreground; shadow rounds "
                "follow each other sync.shadow_sleep_ms apart\n", c->sync.gap);
    if (!(uses & SYNC_ROUNDS) && trainers > 1)
        fprintf(out, "# sync: sync.algo = %s with %d trainers: each trains a replica of its own, "
                "never synced; the saved model is trainer 0's (sync.output = average: their "
                "mean)\n", algo, trainers);
    if (!(uses & SYNC_USES_ALPHA) && c->sync.alpha != d.sync.alpha)
        fprintf(out, "# sync: sync.alpha is not used by sync.algo = %s\n", algo);
    if (!(uses & SYNC_USES_BMUF) && (c->sync.bmuf_momentum != d.sync.bmuf_momentum ||
                                     c->sync.bmuf_lr != d.sync.bmuf_lr ||
                                     c->sync.bmuf_nesterov != d.sync.bmuf_nesterov))
        fprintf(out, "# sync: sync.bmuf_momentum, sync.bmuf_lr and sync.bmuf_nesterov apply to "
                "sync.algo = bmuf only (this job's is %s)\n", algo);
    ss_config_free(&d);
}
