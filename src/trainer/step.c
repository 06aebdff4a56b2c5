/* The worker: Hogwild threads of a trainer (docs/design.md §3). Each loops
 * "wait at the gate, then step": next batch -> lookup -> forward (scored
 * for the progressive train NE before it is trained on) -> backward ->
 * dense step on the trainer's shared buffer, no locks -> push the
 * embedding gradients. It allocates nothing in its loop; its batch and
 * scratch are sized once. */
#include "job.h"

/* Under j->mu: the worker counts as paused until the trainer goes on. */
static void paused_until_resumed(struct job *j)
{
    int64_t gen = j->resumes;
    j->paused++;
    pthread_cond_broadcast(&j->cv);
    while (j->resumes == gen)
        pthread_cond_wait(&j->resume_cv, &j->mu);
    j->paused--;
}

/* A worker at the edge of a batch while a checkpoint is taken. */
static void wait_while_paused(struct job *j)
{
    pthread_mutex_lock(&j->mu);
    if (j->pause)
        paused_until_resumed(j);
    pthread_mutex_unlock(&j->mu);
}

/* A DES group stopped for a checkpoint (every group pauses at a round of
 * its own, maybe before this trainer's flag is up). */
void job_des_wait(void *arg)
{
    struct job *j = ((struct worker *)arg)->tr->job;
    pthread_mutex_lock(&j->mu);
    paused_until_resumed(j);
    pthread_mutex_unlock(&j->mu);
}

/* Foreground sync of a DES worker: after the group's rounds, so every
 * member of the group asks its trainer's round at once. */
int job_des_sync(void *arg, struct ss_err *e)
{
    struct worker *wk = arg;
    int rc = shadow_request(wk->tr->shadow);
    return rc < 0 ? ss_fail(e, rc, "sync failed in a foreground round") : 0;
}

/* Sends on what the worker's client holds back (its cache's updates). */
static int flush_emb(struct worker *wk)
{
    return wk->emb->ops->flush ? wk->emb->ops->flush(wk->emb, &wk->err) : 0;
}

/* What to change when the model diverged: the rates, and BMUF's own step
 * (which the schedule does not scale). */
const char *job_diverged_advice(const struct ss_config *c)
{
    return strcmp(c->sync.algo, "bmuf")
               ? "lower optim.dense_lr or optim.emb_lr, or add an optim.warmup_examples"
               : "lower optim.dense_lr or optim.emb_lr, add an optim.warmup_examples, or lower "
                 "sync.bmuf_lr or sync.bmuf_momentum, which the schedule does not scale";
}

void *job_worker_main(void *arg)
{
    struct worker *wk = arg;
    struct trainer *tr = wk->tr;
    struct job *j = tr->job;
    const struct ss_config *c = j->c;
    const struct model_layout *l = &j->l;
    struct batch b;
    struct model_scratch s;
    struct gpu_worker *gw = NULL;
    batch_init(&b, c->trainer.batch_size, l->n_dense, l->n_tables);
    memset(&s, 0, sizeof s);
    int foreground = c->sync.mode == SYNC_FOREGROUND && strcmp(c->sync.algo, "none") != 0;
    float lr = (float)c->optim.dense_lr, eps = (float)c->optim.eps;
    int rc = tr->gpu ? gpu_worker_create(&gw, tr->gpu, c->trainer.batch_size, &wk->err) : 0;
    wk->gpu = gw;
    if (!tr->gpu) /* a GPU worker keeps its scratch on the device */
        model_scratch_init(&s, l, c->trainer.batch_size);
    /* on a GPU the lookup and push use the worker's pinned buffers */
    float *emb = gw ? gpu_worker_emb(gw) : s.emb, *d_emb = gw ? gpu_worker_d_emb(gw) : s.d_emb;
    const float *prob = gw ? gpu_worker_prob(gw) : s.prob;
    int des = j->des != NULL; /* the group decides when to pause */
    int64_t stepped = 0;        /* this worker's examples so far */
    for (int64_t it = 1; rc == 0 && !__atomic_load_n(&j->stop, __ATOMIC_RELAXED); it++) {
        struct batch_feed *feed = j->env ? j->env->feed : NULL;
        if (!feed && ss_halt_signal()) /* stopped: as at the end of the data (a feed drains) */
            break;
        if (des && !feed && (rc = emb_des_gate(wk->emb, &wk->err)) < 0)
            break;
        int64_t gen = __atomic_load_n(&j->flush_gen, __ATOMIC_ACQUIRE);
        if (gen != wk->flushed_gen) {
            if ((rc = flush_emb(wk)) < 0) /* a mid-run eval scores every update made */
                break;
            pthread_mutex_lock(&j->mu);
            wk->flushed_gen = gen;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
        }
        if (!des && !feed && __atomic_load_n(&j->pause, __ATOMIC_ACQUIRE)) {
            if ((rc = flush_emb(wk)) < 0) /* a checkpoint holds every update made */
                break;
            wait_while_paused(j);
        }
        double t[5]; /* the step's part boundaries */
        t[0] = ss_now();
        rc = feed ? feed_next(feed, &b, &wk->err) : reader_next(j->reader, &b, &wk->err);
        if (rc == FEED_PAUSED && des) { /* a round without a batch: the group pauses */
            if ((rc = emb_des_idle(wk->emb, &wk->err)) < 0)
                break;
            continue;
        }
        if (rc == FEED_PAUSED) { /* the queue drained for a checkpoint: wait for its end */
            if ((rc = flush_emb(wk)) < 0) /* (pause_workers may not have raised j->pause yet) */
                break;
            pthread_mutex_lock(&j->mu);
            paused_until_resumed(j);
            pthread_mutex_unlock(&j->mu);
            continue;
        }
        if (rc < 0 || b.n == 0)
            break;
        float rate = lr; /* the dense rate of this batch's step; the rows' go with b */
        if (j->sched_on) { /* the batch's place in the job's data (not known: this worker's
                            * own count, as if every worker and trainer kept its pace) */
            double times, r;
            __atomic_load(&j->sched_ratio, &r, __ATOMIC_RELAXED);
            times = r > 0 ? r : j->sched_times;
            int64_t at = b.at < 0 ? j->sched_base + stepped * j->n_wk * j->sched_times
                         : j->reader /* its own reader: the job's count at its start, on */
                             ? j->sched_base + (int64_t)((double)(b.at - j->sched_at0) * times)
                             : (int64_t)((double)b.at * times);
            b.lr_scale = (float)optim_lr_scale(c, at);
            rate = lr * b.lr_scale;
            wk->clock = at > wk->clock ? at : wk->clock;
        }
        stepped += b.n;
        t[1] = ss_now();
        if ((rc = wk->emb->ops->lookup(wk->emb, &b, emb, &wk->err)) < 0)
            break;
        t[2] = ss_now();
        model_pool_scale(l, &b, emb); /* mean pooling: here and on the gradients below */
        struct ne_acc scored = {0}; /* scored before it is trained on */
        if (gw) { /* forward, backward and step on the device; prob from its forward */
            if ((rc = gpu_worker_train(gw, &b, c->optim.dense, rate, eps, &wk->err)) < 0)
                break;
            ne_add(&scored, prob, b.label, b.n);
        } else {
            model_forward(l, tr->w, &b, &s);
            ne_add(&scored, prob, b.label, b.n);
        }
        if (!isfinite(scored.loss_sum)) { /* nothing good trains on from here */
            rc = ss_fail(&wk->err, SS_EINVAL, "the model diverged: its predictions are NaN "
                         "after %lld examples of this worker (steps too large: %s)",
                         (long long)stepped, job_diverged_advice(c));
            break;
        }
        if (!gw) {
            if (c->optim.dense == OPT_SGD) {
                model_backward_sgd(l, tr->w, &b, &s, rate);
            } else {
                model_backward(l, tr->w, &b, &s);
                optim_dense_step(c->optim.dense, tr->w, tr->state, s.grad, l->n_params, rate, eps);
            }
        }
        model_pool_scale(l, &b, d_emb);
        t[3] = ss_now();
        if ((rc = wk->emb->ops->push(wk->emb, &b, d_emb, &wk->err)) < 0)
            break;
        t[4] = ss_now();
        pthread_mutex_lock(&wk->mu);
        wk->examples += b.n;
        wk->iterations++;
        for (int p = 0; p < 4; p++)
            wk->t_part[p] += t[p + 1] - t[p];
        ne_merge(&wk->ne, &scored);
        pthread_mutex_unlock(&wk->mu);
        if (!des && foreground && it % c->sync.gap == 0 &&
            (rc = shadow_request(tr->shadow)) < 0) {
            ss_fail(&wk->err, rc, "sync failed in a foreground round");
            break;
        }
    }
    if (rc == 0 && des && !__atomic_load_n(&j->stop, __ATOMIC_RELAXED))
        rc = emb_des_finish(wk->emb, &wk->err); /* the other trainers may have data left */
    else if (rc == 0)
        rc = flush_emb(wk);
    wk->rc = rc;
    if (rc < 0) {
        __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
        if (j->env && j->env->feed) /* nobody drains its queue now: a checkpoint's pause */
            feed_stop(j->env->feed); /* must not wait on the pull that waits for room */
    }
    if (s.mm && wk->iterations > 0) {
        pthread_mutex_lock(&j->mu);
        dense_describe(s.mm, j->dense_desc, sizeof j->dense_desc);
        pthread_mutex_unlock(&j->mu);
    }
    model_scratch_free(&s);
    batch_free(&b);
    pthread_mutex_lock(&j->mu);
    wk->ended = 1;
    j->workers_left--;
    int trainer_done = --tr->workers_left == 0;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    /* This trainer's data has ended: its shadow thread may now run the
     * rounds other trainers' foreground workers wait on, then the final one. */
    if (trainer_done)
        shadow_data_done(tr->shadow);
    return NULL;
}
