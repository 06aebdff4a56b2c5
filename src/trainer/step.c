/* The worker: Hogwild threads of a trainer (docs/design.md §3). Each loops
 * "wait at the gate, then step": next batch -> lookup -> forward (scored
 * for the progressive train NE before it is trained on) -> backward ->
 * dense step on the trainer's shared buffer, no locks -> push the
 * embedding gradients. It allocates nothing in its loop; its batch and
 * scratch are sized once. */
#include "job.h"
#include "step.h"

int step_init(struct step *st, const struct model_layout *l, int opt, float eps, float *w,
              float *state, struct gpu_dense *gpu, int cap, struct ss_err *e)
{
    *st = (struct step){.l = l, .opt = opt, .eps = eps, .w = w, .state = state,
                        .advice = "lower the learning rates"};
    if (gpu) { /* a GPU worker keeps its scratch on the device */
        int rc = gpu_worker_create(&st->gw, gpu, cap, e);
        if (rc < 0)
            return rc;
        st->emb = gpu_worker_emb(st->gw), st->d_emb = gpu_worker_d_emb(st->gw);
        st->prob = gpu_worker_prob(st->gw);
        return 0;
    }
    model_scratch_init(&st->s, l, cap);
    st->emb = st->s.emb, st->d_emb = st->s.d_emb, st->prob = st->s.prob;
    return 0;
}

void step_free(struct step *st)
{
    model_scratch_free(&st->s);
}

/* The dense half: forward (scored), backward and the optimizer's step. */
static int dense_step(struct step *st, const struct batch *b, float rate, struct ne_acc *scored,
                      struct ss_err *e)
{
    if (st->gw) { /* all three on the device; prob from its forward */
        int rc = gpu_worker_train(st->gw, b, st->opt, rate, st->eps, e);
        if (rc < 0)
            return rc;
        ne_add(scored, st->prob, b->label, b->n);
    } else {
        model_forward(st->l, st->w, b, &st->s);
        ne_add(scored, st->prob, b->label, b->n);
    }
    if (!isfinite(scored->loss_sum)) /* nothing good trains on from here */
        return ss_fail(e, SS_EINVAL, "the model diverged: its predictions are NaN after %lld "
                       "examples of this worker (steps too large: %s)",
                       (long long)st->examples, st->advice);
    if (st->gw)
        return 0;
    if (st->opt == OPT_SGD) {
        model_backward_sgd(st->l, st->w, b, &st->s, rate);
    } else {
        model_backward(st->l, st->w, b, &st->s);
        optim_dense_step(st->opt, st->w, st->state, st->s.grad, st->l->n_params, rate, st->eps);
    }
    return 0;
}

int step_train(struct step *st, struct emb_client *emb, struct batch *b, float rate,
               struct ne_acc *scored, double t[3], struct ss_err *e)
{
    st->examples += b->n;
    int rc = emb->ops->lookup(emb, b, st->emb, e);
    if (rc < 0)
        return rc;
    t[0] = ss_now();
    model_pool_scale(st->l, b, st->emb); /* mean pooling: here and on the gradients below */
    if ((rc = dense_step(st, b, rate, scored, e)) < 0)
        return rc;
    model_pool_scale(st->l, b, st->d_emb);
    t[1] = ss_now();
    if ((rc = emb->ops->push(emb, b, st->d_emb, e)) < 0)
        return rc;
    t[2] = ss_now();
    return 0;
}

/* ---- the worker loop ----------------------------------------------------
 * One pause: a worker holds (hold) until the checkpoint that paused it
 * resumes the workers, whichever way the pause reached it: the trainer's
 * flag at its gate, its queue drained for the checkpoint (a feed), or its
 * DES group pausing at a round (job_des_wait). */

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

/* Sends on what the worker's client holds back (its cache's updates). */
static int flush_emb(struct worker *wk)
{
    return wk->emb->ops->flush ? wk->emb->ops->flush(wk->emb, &wk->err) : 0;
}

/* The worker holds for a checkpoint, every update it made sent on first
 * (flush: a checkpoint holds them all; a DES group has sent them). */
static int hold(struct worker *wk, int flush)
{
    struct job *j = wk->tr->job;
    int rc = flush ? flush_emb(wk) : 0;
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&j->mu);
    paused_until_resumed(j);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

/* A DES group stopped for a checkpoint (every group pauses at a round of
 * its own, maybe before this trainer's flag is up). */
void job_des_wait(void *arg)
{
    hold(arg, 0);
}

/* Foreground sync of a DES worker: after the group's rounds, so every
 * member of the group asks its trainer's round at once. */
int job_des_sync(void *arg, struct ss_err *e)
{
    struct worker *wk = arg;
    int rc = shadow_request(wk->tr->shadow);
    return rc < 0 ? ss_fail(e, rc, "sync failed in a foreground round") : 0;
}

/* The gate at the edge of a batch: 1 where the worker leaves (a worker
 * failed, or a stop: as at the end of the data; a feed drains its queue
 * first), else 0 once it may read on. A DES group's round and pause, a
 * flush a mid-run eval asked for, and a checkpoint's pause are passed here. */
static int gate(struct worker *wk)
{
    struct job *j = wk->tr->job;
    int feed = j->env && j->env->feed, des = j->des != NULL; /* DES: the group pauses */
    if (__atomic_load_n(&j->stop, __ATOMIC_RELAXED) || (!feed && ss_halt_signal()))
        return 1;
    int rc = des && !feed ? emb_des_gate(wk->emb, &wk->err) : 0;
    int64_t gen = __atomic_load_n(&j->flush_gen, __ATOMIC_ACQUIRE);
    if (rc == 0 && gen != wk->flushed_gen) { /* a mid-run eval scores every update made */
        if ((rc = flush_emb(wk)) < 0)
            return rc;
        pthread_mutex_lock(&j->mu);
        wk->flushed_gen = gen;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    if (rc == 0 && !des && !feed && __atomic_load_n(&j->pause, __ATOMIC_ACQUIRE))
        rc = hold(wk, 1);
    return rc;
}

/* The worker's next batch into b past the gate: 0, 1 at the end of its
 * data (or a stop), or an error. A queue drained for a checkpoint holds
 * the worker (pause_workers may not have raised j->pause yet), or in DES
 * takes its part in the group's rounds without a batch. */
static int next_batch(struct worker *wk, struct batch *b)
{
    struct job *j = wk->tr->job;
    struct batch_feed *feed = j->env ? j->env->feed : NULL;
    for (;;) {
        int rc = gate(wk);
        if (rc != 0)
            return rc;
        rc = feed ? feed_next(feed, b, &wk->err) : reader_next(j->reader, b, &wk->err);
        if (rc != FEED_PAUSED)
            return rc < 0 ? rc : b->n == 0;
        rc = j->des ? emb_des_idle(wk->emb, &wk->err) : hold(wk, 1);
        if (rc < 0)
            return rc;
    }
}

/* The dense rate of batch b's step (the rows' go with b): the schedule's
 * at the batch's place in the job's data; where that is not known, this
 * worker's own count (`stepped`), as if every worker and trainer kept its
 * pace. */
static float batch_rate(struct worker *wk, struct batch *b, int64_t stepped)
{
    struct job *j = wk->tr->job;
    float lr = (float)j->c->optim.dense_lr;
    if (!j->sched_on)
        return lr;
    double times, r;
    __atomic_load(&j->sched_ratio, &r, __ATOMIC_RELAXED);
    times = r > 0 ? r : j->sched_times;
    int64_t at = b->at < 0 ? j->sched_base + stepped * j->n_wk * j->sched_times
                 : j->reader /* its own reader: the job's count at its start, on */
                     ? j->sched_base + (int64_t)((double)(b->at - j->sched_at0) * times)
                     : (int64_t)((double)b->at * times);
    b->lr_scale = (float)optim_lr_scale(j->c, at);
    wk->clock = at > wk->clock ? at : wk->clock;
    return lr * b->lr_scale;
}

/* A step's figures into the worker's (read by progress lines). */
static void account(struct worker *wk, const struct batch *b, const struct ne_acc *scored,
                    const double t[5])
{
    pthread_mutex_lock(&wk->mu);
    wk->examples += b->n;
    wk->iterations++;
    for (int p = 0; p < 4; p++)
        wk->t_part[p] += t[p + 1] - t[p];
    ne_merge(&wk->ne, scored);
    pthread_mutex_unlock(&wk->mu);
}

/* The worker's data has ended (rc 0), or it failed: its updates sent on (a
 * DES member serves the others until their data ends too); a failure stops
 * the job's other workers and its feed (nobody drains the queue now: a
 * checkpoint's pause must not wait on the pull that waits for room). */
static int end_of_data(struct worker *wk, int rc)
{
    struct job *j = wk->tr->job;
    if (rc == 0 && j->des && !__atomic_load_n(&j->stop, __ATOMIC_RELAXED))
        rc = emb_des_finish(wk->emb, &wk->err);
    else if (rc == 0)
        rc = flush_emb(wk);
    if (rc < 0) {
        __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
        if (j->env && j->env->feed)
            feed_stop(j->env->feed);
    }
    return rc;
}

void *job_worker_main(void *arg)
{
    struct worker *wk = arg;
    struct trainer *tr = wk->tr;
    struct job *j = tr->job;
    const struct ss_config *c = j->c;
    struct step st;
    struct batch b;
    batch_init(&b, c->trainer.batch_size, j->l.n_dense, j->l.n_tables);
    int rc = step_init(&st, &j->l, c->optim.dense, (float)c->optim.eps, tr->w, tr->state, tr->gpu,
                       c->trainer.batch_size, &wk->err);
    wk->gpu = st.gw;
    st.advice = sync_diverged_advice(c);
    int gap = j->des ? 0 : sync_foreground_gap(c); /* DES: its group asks (job_des_sync) */
    double t[5]; /* the step's part boundaries: read, lookup, dense, push */
    for (int64_t it = 1; rc == 0; it++) {
        t[0] = ss_now();
        if ((rc = next_batch(wk, &b)) != 0)
            break;
        t[1] = ss_now();
        float rate = batch_rate(wk, &b, st.examples);
        struct ne_acc scored = {0};
        if ((rc = step_train(&st, wk->emb, &b, rate, &scored, t + 2, &wk->err)) < 0)
            break;
        account(wk, &b, &scored, t);
        if (gap && it % gap == 0 && (rc = shadow_request(tr->shadow)) < 0)
            ss_fail(&wk->err, rc, "sync failed in a foreground round");
    }
    wk->rc = end_of_data(wk, rc > 0 ? 0 : rc);
    if (st.s.mm && wk->iterations > 0) {
        pthread_mutex_lock(&j->mu);
        dense_describe(st.s.mm, j->dense_desc, sizeof j->dense_desc);
        pthread_mutex_unlock(&j->mu);
    }
    step_free(&st);
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
