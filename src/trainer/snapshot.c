/* The state a run saves: checkpoints (docs/design.md §8) taken with the
 * workers paused at the edge of a batch, their resume, and the model saved
 * at the end. */
#include "job.h"

/* trainer0's vector, or the mean of the replicas (sync.output = average). */
/* w += v / count: one replica's share of their mean, summed the same way
 * wherever a mean is taken (the saved model, a mid-run eval's, a
 * checkpoint's), so each scores as the others. */
void job_mean_add(float *w, const float *v, size_t n, int count)
{
    for (size_t i = 0; i < n; i++)
        w[i] += v[i] / count;
}

float *job_output_model(struct job *j)
{
    size_t n = j->n_sync;
    float *w = ss_aligned(n * sizeof(float));
    if (j->c->sync.output == OUT_AVERAGE && j->env) {
        memcpy(w, j->tr[0].w, n * sizeof(float));
        j->env->sum_floats(j->env->arg, w, n);
        for (size_t i = 0; i < n; i++)
            w[i] /= j->env->count;
    } else if (j->c->sync.output == OUT_AVERAGE) {
        for (int t = 0; t < j->n_tr; t++)
            job_mean_add(w, j->tr[t].w, n, j->n_tr);
    } else {
        memcpy(w, j->tr[0].w, n * sizeof(float));
    }
    return w;
}

/* The embedded tables take the output model's hot rows (and trainer 0's
 * optimizer state for them), so tables.bin is the whole model. */
static void write_back_hot(struct job *j, const float *w)
{
    if (!j->hot || !j->tables)
        return;
    int d = j->l.dim;
    struct hot_replica r = job_replica_of(j, &j->tr[0]);
    for (int64_t i = 0; i < j->hot->n; i++) {
        float *row = embps_row(j->tables, j->hot->table[i], (uint64_t)j->hot->row[i]);
        memcpy(row, w + j->l.n_params + (size_t)i * d, (size_t)d * sizeof(float));
        if (r.opt == OPT_ROWWISE_ADAGRAD)
            row[d] = r.acc[i];
    }
}

/* DES: each of this process's trainers' shards, as dir/tables-trainerT.bin. */
static int save_shards(struct job *j, const char *dir, struct ss_err *e)
{
    int first = j->env ? j->env->index : 0, rc = 0;
    char p[4500];
    for (int t = 0; rc == 0 && j->shards && t < j->n_tr; t++) {
        if (!j->shards[t])
            continue;
        snprintf(p, sizeof p, "%s/tables-trainer%d.bin", dir, first + t);
        rc = embps_save(j->shards[t], p, e);
    }
    return rc;
}

int job_save_model(struct job *j, const float *w, struct ss_err *e)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model", j->c->output.dir);
    int rc = ss_file_mkdir_p(p, e); /* on the writer: a stop gives it up */
    if (rc < 0)
        return rc;
    snprintf(p, sizeof p, "%s/model/dense.bin", j->c->output.dir);
    if ((rc = dense_save(w, j->l.n_params, &j->l, p, e)) < 0)
        return rc;
    if (j->hot) { /* which rows are hot, and their values (the tables' copies are stale) */
        snprintf(p, sizeof p, "%s/model/hot-rows.bin", j->c->output.dir);
        if ((rc = hot_save(j->hot, p, e)) < 0)
            return rc;
        snprintf(p, sizeof p, "%s/model/hot.bin", j->c->output.dir);
        size_t np = j->l.n_params;
        if ((rc = dense_save(w + np, j->n_sync - np, &j->l, p, e)) < 0)
            return rc;
    }
    snprintf(p, sizeof p, "%s/model", j->c->output.dir);
    if (!j->tables) /* cluster job: each embedding PS its shards (tables-psK.bin), asked now
                     * while it serves; DES: each trainer its own (save_shards) */
        return j->env && j->env->save_tables ? j->env->save_tables(j->env->arg, p, e) : 0;
    write_back_hot(j, w);
    snprintf(p, sizeof p, "%s/model/tables.bin", j->c->output.dir);
    return embps_save(j->tables, p, e);
}

/* ---- checkpoints (DESIGN §8) -------------------------------------------
 * The workers stop at the edge of a batch (the shadow threads held, so a
 * foreground round another trainer waits on still runs), the snapshot is
 * written (tables with their optimizer state, each trainer's dense vector
 * and optimizer state, the reader's position, the figures), then they go
 * on. No batch is in flight at the snapshot: resuming repeats and loses
 * nothing. The EASGD center and each trainer's BMUF state (global model,
 * momentum) are saved too. The shadow threads keep syncing meanwhile, so
 * a replica or the sync state may be caught mid-round (as Hogwild reads
 * are). */

/* How long a checkpoint waits for the workers to reach the edge of a batch:
 * a step's calls to services (lookup, push) each end within
 * job.rpc_timeout_s, a foreground round within sync.timeout_s; 10 s more for
 * the step's own work. The feed's pull in flight: one call. */
static double pause_wait_s(const struct ss_config *c)
{
    double sync = c->sync.mode == SYNC_FOREGROUND ? c->sync.timeout_s : 0;
    return 2 * c->job.rpc_timeout_s + (sync > 0 ? sync : 0) + 10;
}

static void resume_workers(struct job *j);

/* 0 once every worker waits at the edge of a batch; past pause_wait_s, the
 * pause is undone and the checkpoint fails naming what it waited on. */
static int pause_workers(struct job *j, struct ss_err *e)
{
    for (int t = 0; !j->des && t < j->n_tr; t++) /* DES: no round waits on a paused trainer */
        if (j->tr[t].shadow)
            shadow_hold(j->tr[t].shadow, 1);
    double wait = pause_wait_s(j->c);
    int rc = 0;
    if (j->env && j->env->feed) /* no new batch; the workers drain the queue, then wait */
        rc = feed_pause(j->env->feed, 1, j->c->job.rpc_timeout_s + 10, e);
    struct timespec until = ss_deadline(wait);
    pthread_mutex_lock(&j->mu);
    __atomic_store_n(&j->pause, 1, __ATOMIC_RELEASE);
    while (rc == 0 && j->paused < j->workers_left)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT &&
            j->paused < j->workers_left)
            rc = ss_fail(e, SS_ESTATE, "%d of %d worker(s) did not reach the edge of a batch "
                         "within %.0f s (2 x job.rpc_timeout_s%s + 10 s): a step's call to a "
                         "service hangs", j->workers_left - j->paused, j->workers_left, wait,
                         j->c->sync.mode == SYNC_FOREGROUND ? " + sync.timeout_s" : "");
    pthread_mutex_unlock(&j->mu);
    if (rc == 0 && __atomic_load_n(&j->stop, __ATOMIC_RELAXED))
        rc = ss_fail(e, SS_ESTATE, "a worker failed (below): this state, short of its batch, "
                     "is not saved");
    if (rc < 0)
        resume_workers(j);
    return rc;
}

static void resume_workers(struct job *j)
{
    if (j->env && j->env->feed) /* before the workers go: none gets FEED_PAUSED again */
        feed_pause(j->env->feed, 0, 0, NULL);
    pthread_mutex_lock(&j->mu);
    __atomic_store_n(&j->pause, 0, __ATOMIC_RELEASE);
    j->resumes++;
    pthread_cond_broadcast(&j->resume_cv);
    pthread_mutex_unlock(&j->mu);
    for (int t = 0; !j->des && t < j->n_tr; t++)
        if (j->tr[t].shadow)
            shadow_hold(j->tr[t].shadow, 0);
}

/* This process's figures for a snapshot: examples, iterations, NE sums
 * (loss, labels, count), syncs. */
static void snapshot_figures(struct job *j, double *fig)
{
    struct figures f;
    job_collect(j, &f);
    double v[8] = {(double)f.examples, (double)f.iterations, f.ne.loss_sum, f.ne.label_sum,
                   (double)f.ne.n, (double)f.syncs, f.elapsed, 0};
    memcpy(fig, v, sizeof v);
}

/* This process's parts of a snapshot, into dir: each of its trainers'
 * dense vector, optimizer state and sync state; its reader's position; in
 * the embedded default also the tables and the EASGD center. Trainer t of
 * the job writes dense-t.bin, state-t.bin, sync-t-K.bin, reader-t.pos. */
static int write_own_parts(struct job *j, const char *dir, struct ss_err *e)
{
    int first = j->env ? j->env->index : 0, rc = job_read_back(j, e); /* a GPU's live copy */
    size_t n = j->n_sync;
    char p[4500];
    if (rc == 0 && j->tables) {
        snprintf(p, sizeof p, "%s/tables.bin", dir);
        rc = embps_save(j->tables, p, e);
    }
    if (rc == 0)
        rc = save_shards(j, dir, e);
    if (rc == 0 && j->hot && first == 0) { /* which rows the replicas hold */
        snprintf(p, sizeof p, "%s/hot-rows.bin", dir);
        rc = hot_save(j->hot, p, e);
    }
    for (int t = 0; rc == 0 && t < j->n_tr; t++) {
        snprintf(p, sizeof p, "%s/dense-%d.bin", dir, first + t);
        rc = dense_save(j->tr[t].w, n, &j->l, p, e);
        snprintf(p, sizeof p, "%s/state-%d.bin", dir, first + t);
        if (rc == 0)
            rc = dense_save(j->tr[t].state, n, &j->l, p, e);
        float *arrays[4];
        int m = rc == 0 && j->tr[t].shadow ? shadow_state(j->tr[t].shadow, arrays) : 0;
        for (int i = 0; rc == 0 && i < m; i++) {
            snprintf(p, sizeof p, "%s/sync-%d-%d.bin", dir, first + t, i);
            rc = dense_save(arrays[i], n, &j->l, p, e);
        }
    }
    if (rc == 0 && j->center && j->center->ops->get) {
        float *v = ss_aligned(n * sizeof(float));
        j->center->ops->get(j->center, v);
        snprintf(p, sizeof p, "%s/center.bin", dir);
        rc = dense_save(v, n, &j->l, p, e);
        free(v);
    }
    if (rc == 0 && j->reader) {
        snprintf(p, sizeof p, "%s/reader-%d.pos", dir, first);
        rc = reader_save_pos(j->reader, p, e);
    }
    if (rc == 0 && j->env && j->env->feed) { /* which reader is next, each one's count */
        snprintf(p, sizeof p, "%s/feed-%d.pos", dir, first);
        rc = feed_save(j->env->feed, p, e);
    }
    return rc;
}

/* The master's (or the embedded default's) end of a snapshot: every part
 * in the directory hashed, the figures of the whole job, the commit. */
static int commit_snapshot(struct job *j, struct ckpt *k, const double *fig, int final, double t0,
                           struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int rc = ckpt_add_all(k, e);
    const char *final_dir = NULL;
    if (rc == 0) {
        static const char *const keys[7] = {"examples", "iterations", "ne_loss_sum",
                                            "ne_label_sum", "ne_n", "syncs", "elapsed_s"};
        for (int i = 0; i < 7; i++)
            ckpt_meta(k, keys[i], fig[i]);
        ckpt_meta(k, "trainers", j->env ? j->env->count : j->n_tr);
        ckpt_meta(k, "embedding_ps", j->env ? c->job.embedding_ps : 0);
        ckpt_meta(k, "sync_ps", j->env ? c->job.sync_ps : 0);
        ckpt_meta(k, "readers", j->env ? c->job.readers : 0);
        ckpt_meta(k, "in_flight_batches", 0);
        ckpt_meta(k, "final", final);
        /* whether its center-*.bin are a center (easgd's), or only the start the sync PSs
         * of another algorithm kept */
        ckpt_meta(k, "center", sync_algo_needs(c->sync.algo) == SYNC_NEEDS_CENTER);
        ckpt_meta(k, "run", j->run_id);
        if (c->optim.auto_examples > 0) /* the size optim.schedule = auto fitted to */
            ckpt_meta(k, "auto_examples", (double)c->optim.auto_examples);
        rc = ckpt_commit(k, 2, &final_dir, e);
    }
    if (rc == 0 && final)
        snprintf(j->final_ckpt, sizeof j->final_ckpt, "%s", final_dir);
    if (rc == 0 && !c->output.quiet)
        printf("# checkpoint %s: %lld examples (%.1f s)\n", final_dir, (long long)fig[0],
               ss_now() - t0), fflush(stdout);
    return rc;
}

/* A snapshot taken by the master of a cluster job or the embedded
 * default; it pauses the workers (they are done for the final one). */
static int write_checkpoint(struct job *j, int final, struct ss_err *e)
{
    const struct trainer_env *env = j->env;
    double t0 = ss_now(), fig[8], others[8] = {0};
    snapshot_figures(j, fig);
    struct ckpt *k = NULL; /* a diverged model's: none (the cluster's others told by tmp "") */
    int rc = final && j->nonfinite ? ss_fail(e, SS_EINVAL, "the model's parameters are NaN or "
                                             "infinite (below)")
                                   : ckpt_begin(&k, j->c->checkpoint.dir, e);
    char tmp[4400] = "";
    int paused = 0; /* the final one: the workers are done */
    if (rc == 0)
        snprintf(tmp, sizeof tmp, "%s", ckpt_tmp_dir(k));
    if (env && final) {         /* collective: every trainer is here */
        env->ckpt.final(env->arg, tmp, sizeof tmp, NULL, 0); /* tmp to all ("": failed) */
        if (rc == 0)
            rc = write_own_parts(j, tmp, e);
        double elapsed = fig[6]; /* the master's time, not a sum */
        int worst = env->ckpt.final(env->arg, NULL, 0, fig, rc);
        fig[6] = elapsed;
        if (rc == 0 && worst < 0)
            rc = ss_fail(e, worst, "another trainer could not write its part");
    } else if (env && rc == 0) {
        env->ckpt.ask(env->arg, tmp); /* first: DES groups pause once every trainer has */
        rc = pause_workers(j, e);
        paused = rc == 0;
        snapshot_figures(j, fig);
        if (rc == 0)
            rc = write_own_parts(j, tmp, e);
        int worst = env->ckpt.wait(env->arg, others);
        if (rc == 0 && worst < 0)
            rc = ss_fail(e, worst, "another trainer could not write its part");
        for (int i = 0; i < 6; i++)
            fig[i] += others[i];
    } else if (rc == 0) {
        rc = pause_workers(j, e);
        paused = rc == 0;
        if (rc == 0) {
            snapshot_figures(j, fig);
            rc = write_own_parts(j, tmp, e);
        }
    }
    if (rc == 0 && env)
        rc = env->ckpt.services(env->arg, tmp, e);
    if (rc == 0)
        rc = commit_snapshot(j, k, fig, final, t0, e);
    if (paused)
        resume_workers(j);
    if (env && !final && k)
        env->ckpt.release(env->arg);
    if (env && final)
        env->ckpt.final_done(env->arg);
    ckpt_free(k);
    return rc;
}

/* A checkpoint that cannot be written is reported; training goes on and
 * the last good one is kept. */
void job_checkpoint_now(struct job *j, int final)
{
    struct ss_err e = {0};
    int rc = write_checkpoint(j, final, &e);
    if (rc < 0) {
        char kept[4400];
        if (j->checkpoints)
            snprintf(kept, sizeof kept, "the last good one is kept");
        else if (j->resumed_from[0]) /* the newest complete one is never removed */
            snprintf(kept, sizeof kept, "the one it resumed from, %s, is kept", j->resumed_from);
        else
            snprintf(kept, sizeof kept, "none has been written yet");
        j->checkpoint_failures++;
        j->final_ckpt_failed |= final;
        fprintf(stderr, "shadowsync: %s checkpoint failed, %s (%s): %s\n",
                final ? "the final" : "a", final ? "the run ends without it" : "training goes on",
                kept, e.msg);
    } else {
        j->checkpoints++;
    }
}

/* A trainer of a cluster job other than the master: answers the master's
 * checkpoint requests (returns 2 once the master takes no more). */
int job_serve_checkpoints(struct job *j)
{
    const struct trainer_env *env = j->env;
    char tmp[4400];
    int r = env->ckpt.poll(env->arg, tmp, sizeof tmp);
    if (r == 1) {
        struct ss_err e = {0};
        double fig[8] = {0};
        int rc = pause_workers(j, &e), paused = rc == 0;
        snapshot_figures(j, fig);
        if (rc == 0)
            rc = write_own_parts(j, tmp, &e);
        if (rc < 0)
            fprintf(stderr, "shadowsync: trainer %d: checkpoint part failed: %s\n", env->index,
                    e.msg);
        env->ckpt.done(env->arg, rc, fig); /* waits for the master's commit */
        if (paused) /* a pause that failed has resumed them */
            resume_workers(j);
    }
    return r;
}

/* The final checkpoint of a trainer other than the master (collective). */
void job_final_checkpoint_part(struct job *j)
{
    const struct trainer_env *env = j->env;
    char tmp[4400] = "";
    struct ss_err e = {0};
    double fig[8];
    env->ckpt.final(env->arg, tmp, sizeof tmp, NULL, 0);
    snapshot_figures(j, fig);
    int rc = tmp[0] ? write_own_parts(j, tmp, &e) : SS_EIO;
    env->ckpt.final(env->arg, NULL, 0, fig, rc);
    env->ckpt.final_done(env->arg);
}

/* Before the trainers start: the tables (embedded), the reader's position
 * (when this process reads) and the figures (on the master) of the newest
 * complete checkpoint, or in a cluster job of the one the master chose;
 * start_trainers loads the dense vectors and the sync state. */
int job_load_checkpoint(struct job *j, struct ss_err *e)
{
    double t0 = ss_now();
    const struct trainer_env *env = j->env;
    struct ckpt_meta_set m;
    int skipped, rc;
    if (env) {
        snprintf(j->resumed_from, sizeof j->resumed_from, "%s", env->resume_from);
        rc = ckpt_read_meta(j->resumed_from, &m, e);
    } else {
        rc = ckpt_latest(j->resume, j->resumed_from, sizeof j->resumed_from, &m, &skipped, e);
    }
    if (rc < 0)
        return rc;
    j->resumed_trainers = (int)ckpt_meta_get(&m, "trainers", 1);
    j->resumed_final = ckpt_meta_get(&m, "final", 0) != 0;
    j->run_id = ckpt_meta_get(&m, "run", 0); /* 0: written before runs had one */
    if (j->resumed_trainers < 1)
        return ss_fail(e, SS_EFORMAT, "%s: no trainer in the checkpoint", j->resumed_from);
    char p[4500];
    /* the tables as any split wrote them: tables.bin, or one file per PS or
     * per trainer (DES) */
    if (j->tables && (rc = embps_load_dir(j->tables, j->resumed_from, e)) < 0)
        return rc;
    for (int t = 0; j->shards && t < j->n_tr; t++)
        if (j->shards[t] && (rc = embps_load_dir(j->shards[t], j->resumed_from, e)) < 0)
            return rc;
    if (j->reader) {
        snprintf(p, sizeof p, "%s/reader-0.pos", j->resumed_from);
        if (access(p, F_OK) != 0) /* read through reader services (feed-*.pos): so again */
            return ss_fail(e, SS_EINVAL, "%s was written by a job that read data.train through "
                           "reader services: resume it with job.readers >= 1 (tools/submit "
                           "CONFIG ... --resume)", j->resumed_from);
        snprintf(p, sizeof p, "%s/reader-1.pos", j->resumed_from);
        int one_reader = access(p, F_OK) != 0; /* the embedded default's, or one trainer's */
        if (env && one_reader && env->count > 1)
            return ss_fail(e, SS_EINVAL, "%s was written by one reader over all of data.train "
                           "(%d trainer%s in one process, or one trainer rank): a cluster job "
                           "resumes it with job.trainers = 1 (its trainers' dense vectors "
                           "taken in turn), or resume it in one process", j->resumed_from,
                           j->resumed_trainers, j->resumed_trainers == 1 ? "" : "s");
        if (env && !one_reader && j->resumed_trainers != env->count)
            return ss_fail(e, SS_EINVAL, "%s was written by %d trainers reading their own shares "
                           "of data.train: resuming them needs job.trainers = %d (a job read "
                           "through reader services, job.readers >= 1, may resume with other "
                           "trainers; this one was not)",
                           j->resumed_from, j->resumed_trainers, j->resumed_trainers);
        if (!env && !one_reader) /* one reader here cannot take up several shares */
            return ss_fail(e, SS_EINVAL, "%s was written by a cluster job whose %d trainers read "
                           "their own shares of data.train: resume it as one (tools/submit "
                           "CONFIG ... --resume), not in one process", j->resumed_from,
                           j->resumed_trainers);
        snprintf(p, sizeof p, "%s/reader-%d.pos", j->resumed_from, env ? env->index : 0);
        if ((rc = reader_load_pos(j->reader, p, e)) < 0)
            return rc;
    }
    j->sched_base = (int64_t)ckpt_meta_get(&m, "examples", 0);
    if (j->is_master) { /* the job's figures so far, counted once */
        j->base.examples = (int64_t)ckpt_meta_get(&m, "examples", 0);
        j->base.iterations = (int64_t)ckpt_meta_get(&m, "iterations", 0);
        j->base.syncs = (int64_t)ckpt_meta_get(&m, "syncs", 0);
        j->base.ne = (struct ne_acc){ckpt_meta_get(&m, "ne_loss_sum", 0),
                                     ckpt_meta_get(&m, "ne_label_sum", 0),
                                     (int64_t)ckpt_meta_get(&m, "ne_n", 0)};
        j->base.elapsed = ckpt_meta_get(&m, "elapsed_s", 0);
    }
    int now_trainers = env ? env->count : j->n_tr;
    if (sync_algo_needs(j->c->sync.algo) == SYNC_NEEDS_CENTER && !ckpt_meta_get(&m, "center", 1) &&
        j->is_master && !j->c->output.quiet)
        printf("# sync: %s keeps no EASGD center (taken under another sync.algo): the center "
               "starts as trainer 0's replica\n", j->resumed_from);
    if (!j->c->output.quiet)
        printf("# resuming from %s: %lld examples done, %.0f batches in flight at the snapshot "
               "(0: none lost or repeated)%s (checked and loaded in %.1f s)\n", j->resumed_from,
               (long long)j->base.examples, ckpt_meta_get(&m, "in_flight_batches", 0),
               j->resumed_trainers != now_trainers ? "; trainers' dense vectors reassigned" : "",
               ss_now() - t0),
            fflush(stdout);
    return 0;
}

/* DES: every trainer saves its shards into output.dir/model. */
int job_save_des_shards(struct job *j, struct ss_err *e)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/model", j->c->output.dir);
    int rc = ss_file_mkdir_p(dir, e);
    return rc < 0 ? rc : save_shards(j, dir, e);
}
