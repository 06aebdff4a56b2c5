/* The embedded default (DESIGN §2, §3, §7): job.trainers trainers in this
 * process, each with its own dense buffer, trainer.worker_threads Hogwild
 * workers and one shadow thread; one reader and one copy of the embedding
 * tables shared by all, so every example is consumed exactly once.
 *
 * A worker's batch loop: next batch -> lookup -> forward (scored for the
 * progressive train NE before it is trained on) -> backward -> dense step
 * on the shared buffer, no locks -> push embedding gradients. It allocates
 * nothing; its batch and scratch are sized once. The main thread prints a
 * progress line every output.log_interval_s and writes the run directory. */
#include "job.h"

/* A resume of a run's final checkpoint (taken after its final sync) whose
 * job trained nothing: the checkpoint's replicas are its model, as the
 * shadow threads' rounds meanwhile would change them (MA's again), and a
 * resume of a finished job (a requeue) must leave it as it was. In a
 * cluster job every trainer takes part in the count (ok or not: it is
 * collective), and each keeps its own replica. */
static int keep_resumed(struct job *j, const struct figures *f, int ok, struct ss_err *e)
{
    if (!j->resumed_final)
        return 0;
    double v[1] = {(double)(f->examples - j->base.examples)}; /* this run's, here */
    if (j->env)
        j->env->sum(j->env->arg, v, 1);
    if (!ok || v[0] != 0)
        return 0;
    for (int t = 0; t < j->n_tr; t++) {
        int rc = job_resumed_vector(j, t, "dense", j->tr[t].w, e);
        if (rc < 0)
            return rc;
    }
    j->kept_resumed = 1;
    return 0;
}

/* The job's sums at the end, in one collective (every trainer alike, ok
 * or not): its NaN or infinite dense parameters and hot rows (a model
 * diverged in its last steps, or one whose NaNs no prediction showed,
 * neither checkpointed nor saved; into j->nonfinite), and whether it was
 * stopped before it trained an example (returns 1: no final checkpoint,
 * as embedded; a resumed one's stays). */
static int end_sums(struct job *j, const struct figures *f)
{
    double v[3] = {0, (double)(f->examples - j->base.examples), ss_halt_signal() != 0};
    for (int t = 0; t < j->n_tr; t++)
        for (size_t i = 0; i < j->n_sync; i++)
            v[0] += !isfinite(j->tr[t].w[i]);
    if (j->env)
        j->env->sum(j->env->arg, v, 3);
    j->nonfinite = v[0];
    return v[1] == 0 && v[2] > 0;
}

static int refuse_nonfinite(const struct job *j, struct ss_err *e)
{
    if (j->nonfinite == 0)
        return 0;
    return ss_fail(e, SS_EINVAL, "the model diverged: %.0f of the trainers' %d x %zu dense "
                   "parameters are NaN or infinite at the end of the training: no model saved, "
                   "no final checkpoint (steps too large: %s)", j->nonfinite,
                   j->env ? j->env->count : j->n_tr, j->n_sync, job_diverged_advice(j->c));
}

/* A stop (ss_halt_signal) seen: the workers end as at the end of their
 * data, a feed once its queue is drained, and the job ends as it would
 * then (final sync, checkpoint, eval, model, metrics). */
static void halt_note(struct job *j)
{
    if (j->halt_noted || !ss_halt_signal())
        return;
    j->halt_noted = 1;
    if (j->env && j->env->feed)
        feed_halt(j->env->feed);
    if (j->is_master)
        fprintf(stderr, "# stopping (%s): the workers end at their next batch; then the final "
                "sync%s, eval and model as at the end of the data%s\n", ss_halt_name(),
                j->c->checkpoint.dir[0] ? ", checkpoint" : "",
                j->env ? "" : " (SIGINT or SIGTERM again: at once)");
}

/* The job's examples: this process's count, or in a cluster job the sum of
 * the trainers' last reports. */
static int64_t job_examples(struct job *j)
{
    if (j->env)
        return j->seen;
    struct figures f;
    job_collect(j, &f);
    return f.examples;
}

/* Snapshots every checkpoint.interval_s while the data lasts. */
static int periodic_checkpoints(const struct ss_config *c)
{
    return c->checkpoint.dir[0] && c->checkpoint.interval_s > 0;
}

static void wait_final_pushes(struct job *j);

/* Waits for every worker, printing progress lines and taking checkpoints
 * and mid-run evals meanwhile. */
static void wait_workers(struct job *j)
{
    double interval = j->c->output.log_interval_s, next = ss_now() + interval;
    double ck_every = j->c->checkpoint.interval_s;
    int ck_on = periodic_checkpoints(j->c);
    j->ck_next = ss_now() + ck_every;
    int serve = ck_on && j->env && !j->is_master; /* answer the master's requests */
    int ended = 0;              /* ...until it says it takes no more */
    pthread_mutex_lock(&j->mu);
    while (j->workers_left > 0) {
        double now = ss_now();
        if (!j->halt_noted && ss_halt_signal()) {
            pthread_mutex_unlock(&j->mu);
            halt_note(j);
            pthread_mutex_lock(&j->mu);
        }
        if (serve) {
            pthread_mutex_unlock(&j->mu);
            if (!ended && job_serve_checkpoints(j) == 2) /* the master's data ended first */
                ended = 1;
            pthread_mutex_lock(&j->mu);
        } else if (ck_on && now >= j->ck_next) {
            pthread_mutex_unlock(&j->mu);
            job_checkpoint_now(j, 0);
            j->ck_next = ss_now() + ck_every;
            pthread_mutex_lock(&j->mu);
            continue;
        }
        if (j->mid.every) {
            pthread_mutex_unlock(&j->mu);
            job_mid_eval_poll(j, job_examples(j));
            pthread_mutex_lock(&j->mu);
        }
        if (now >= next) {
            pthread_mutex_unlock(&j->mu);
            job_progress(j, 0, 1);
            next += interval * (1 + floor((ss_now() - next) / interval));
            pthread_mutex_lock(&j->mu);
            continue;
        }
        /* a serving trainer polls every 20 ms and keeps no schedule of its own
         * (a due time in the past once made it sleep up to 1 s: the negative
         * wait's fraction went into tv_nsec) */
        double wait = (ck_on && !serve && j->ck_next < next ? j->ck_next : next) - now;
        if (serve && wait > 0.02)
            wait = 0.02;
        if (wait > 0.25) /* a stop is seen soon */
            wait = 0.25;
        if (j->mid.every && wait > 0.02) /* an eval starts near its count */
            wait = 0.02;
        struct timespec ts = ss_deadline(wait); /* (a negative wait: now) */
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    pthread_mutex_unlock(&j->mu);
    halt_note(j); /* the workers may have seen the stop first */
    const struct timespec pause = {0, 5000000};
    if (serve && j->env->beat) /* before its data's end is said below */
        wait_final_pushes(j);
    /* the master's data may go on; a failed worker (stop) ends the job now,
     * in wait_other_trainers, not when the master's data ends */
    while (serve && !ended && !__atomic_load_n(&j->stop, __ATOMIC_RELAXED) &&
           job_serve_checkpoints(j) != 2) {
        if (j->env->beat) /* its data has ended: it says so, and hears the others */
            job_progress(j, 1, 0);
        nanosleep(&pause, NULL);
    }
}

/* EASGD: every trainer's final push is in the center before any says its
 * data has ended (a cluster job's final report) or a following trainer
 * makes its last pull (shadow_wait). */
static void wait_final_pushes(struct job *j)
{
    if (sync_algo_needs(j->c->sync.algo) == SYNC_NEEDS_CENTER)
        for (int t = 0; t < j->n_tr; t++)
            shadow_wait_final(j->tr[t].shadow);
}

/* A cluster job, this trainer's data ended: until every other trainer's
 * has, the master prints the job's progress and takes the snapshots
 * (checkpoint.interval_s) and evals due, and one that stalls ends the
 * job (env->beat) rather than hold the others in the collectives below.
 * A failed worker ends the job at once (env->fatal), naming its error: a
 * DES group cannot go on without it, and the others need not train on. */
static void wait_other_trainers(struct job *j)
{
    if (!j->env || !j->env->beat)
        return;
    wait_final_pushes(j);
    double ck_every = j->c->checkpoint.interval_s;
    int ck_on = periodic_checkpoints(j->c) && j->is_master;
    for (int k = 0; k < j->n_wk; k++) /* the others would wait on it (DES) or for its end */
        if (j->tr[0].workers[k].rc < 0)
            j->env->fatal(j->env->arg, &j->tr[0].workers[k].err);
    double interval = j->c->output.log_interval_s, next = ss_now() + interval;
    const struct timespec nap = {0, 10000000};
    for (;;) {
        int due = ss_now() >= next;
        if (!j->halt_noted && ss_halt_signal()) /* its own, or another's (the reports) */
            halt_note(j);
        if (job_progress(j, 1, due))
            return;
        if (j->mid.every) /* the others train on: their count goes on */
            job_mid_eval_poll(j, j->seen);
        if (ck_on && !ss_halt_signal() && ss_now() >= j->ck_next) { /* ...and their snapshots */
            job_checkpoint_now(j, 0);
            j->ck_next = ss_now() + ck_every;
        }
        if (due)
            next += interval * (1 + floor((ss_now() - next) / interval));
        nanosleep(&nap, NULL);
    }
}

/* Joins workers then shadow threads (the final sync). A shadow thread's
 * error wins (the workers' then only say that they stopped, or that a
 * foreground round failed), else the first worker's. */
static int finish_trainers(struct job *j, struct ss_err *e)
{
    int rc = 0;
    for (int t = 0; t < j->n_tr; t++) {
        struct trainer *tr = &j->tr[t];
        for (int k = 0; k < j->n_wk; k++) {
            pthread_join(tr->workers[k].th, NULL);
            if (tr->workers[k].rc < 0 && rc == 0) {
                rc = tr->workers[k].rc;
                *e = tr->workers[k].err;
            }
        }
    }
    wait_final_pushes(j);
    if (j->env && j->env->figures) { /* its examples, and where its rates' clock ended */
        double n = 0, at = 0;
        for (int k = 0; k < j->n_wk; k++) {
            n += (double)j->tr[0].workers[k].examples;
            at = j->tr[0].workers[k].clock > at ? (double)j->tr[0].workers[k].clock : at;
        }
        j->env->figures[0] = n, j->env->figures[1] = j->sched_on ? at : 0;
    }
    int from_shadow = 0;
    for (int t = 0; t < j->n_tr; t++) {
        struct ss_err se = {0};
        /* joined only in free_trainers: its state goes into the final checkpoint */
        int src = shadow_wait(j->tr[t].shadow, &j->tr[t].syncs, &se);
        if (src < 0 && !from_shadow) {
            rc = src, from_shadow = 1;
            *e = se;
        }
    }
    if (from_shadow && j->sync_err.code) /* the round that failed first */
        *e = j->sync_err, rc = j->sync_err.code;
    return rc;
}

static int run(const struct ss_config *c, const struct trainer_env *env, const char *resume,
               struct ss_err *e)
{
    struct job j = {0};
    j.c = c;
    j.env = env;
    j.resume = resume;
    j.is_master = !env || env->is_master;
    j.n_tr = env ? 1 : c->job.trainers;
    j.n_wk = c->trainer.worker_threads;
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    pthread_cond_init(&j.resume_cv, NULL);
    struct eval_result ev = NO_EVAL;
    struct figures f = {0};
    struct reader_stats rs = {0};
    float *w = NULL;
    int rc;
    if (!c->data.train || !*c->data.train) {
        rc = ss_fail(e, SS_EINVAL, "config: data.train is empty: give the training data "
                                   "(a file, a directory of shards or a glob)");
        goto out;
    }
    j.sched_on = c->optim.warmup_examples > 0 || c->optim.decay_examples > 0;
    j.sched_times = env && !env->feed ? env->count : 1;
    j.gpu_dev = -1;
    if (env && env->gpu) {
        j.gpu_dev = env->gpu_dev, j.gpu_count = 1;
    } else if (!env && (rc = trainer_device(c, !c->output.quiet, 0, &j.gpu_dev, &j.gpu_count, e)) < 0) {
        goto out;
    }
    if (!env && (int64_t)c->job.trainers * (c->trainer.worker_threads + 1) > SS_MAX_THREADS) {
        rc = ss_fail(e, SS_EINVAL, "config: job.trainers = %d x (trainer.worker_threads = %d + "
                     "a shadow thread) is %lld threads in one process, more than the %d one "
                     "process of shadowsync runs: fewer trainers or workers (a cluster job runs "
                     "each trainer in its own process)", c->job.trainers, c->trainer.worker_threads,
                     (long long)c->job.trainers * (c->trainer.worker_threads + 1), SS_MAX_THREADS);
        goto out;
    }
    if (c->optim.decay_start && !c->optim.decay_examples) {
        rc = ss_fail(e, SS_EINVAL, "config: optim.decay_start = %lld starts a decay that "
                     "optim.decay_examples = 0 leaves out: set how many examples it lasts, or "
                     "optim.decay_start = 0", (long long)c->optim.decay_start);
        goto out;
    }
    if (c->optim.decay_to && !c->optim.decay_examples) {
        rc = ss_fail(e, SS_EINVAL, "config: optim.decay_to = %g is the end of a decay that "
                     "optim.decay_examples = 0 leaves out: set how many examples it lasts, or "
                     "optim.decay_to = 0", c->optim.decay_to);
        goto out;
    }
    if (c->output.eval_every && (!c->data.eval || !*c->data.eval)) {
        rc = ss_fail(e, SS_EINVAL, "config: output.eval_every = %lld scores data.eval while the "
                     "job trains, but data.eval is empty: give the eval data, or set "
                     "output.eval_every = 0", (long long)c->output.eval_every);
        goto out;
    }
    if (c->output.eval_every && c->embedding.placement == EMB_ON_TRAINERS) {
        rc = ss_fail(e, SS_EINVAL, "config: output.eval_every needs the tables on embedding PSs "
                     "(embedding.placement = ps): with them on the trainers (DES) every trainer "
                     "takes part in an eval, which only the end of the run allows; set "
                     "output.eval_every = 0");
        goto out;
    }
    if ((j.is_master && (rc = job_check_room(c, e)) < 0) || (rc = job_setup_model(&j, e)) < 0)
        goto out;
    if (c->embedding_cache.rows > 0) { /* (the tables are made: the room is what they left) */
        int64_t rows = emb_cache_rows(c, &j.l), avail = ss_mem_available();
        double need = emb_cache_bytes(c, &j.l) * j.n_tr * j.n_wk;
        if (avail >= 0 && need > (double)avail) {
            rc = ss_fail(e, SS_ENOMEM, "the embedding caches here need %.0f MB (%d worker "
                         "thread(s) x %lld rows of model.dim %d and their deltas), more than "
                         "the %lld MB of memory free here: fewer embedding_cache.rows",
                         need / 1048576, j.n_tr * j.n_wk, (long long)rows, j.l.dim,
                         (long long)(avail >> 20));
            goto out;
        }
    }
    if (env && c->embedding.placement != EMB_ON_TRAINERS &&
        (double)c->trainer.batch_size * j.l.n_tables * j.l.dim * 4 > SS_MAX_FIELD_BYTES) {
        rc = ss_fail(e, SS_EINVAL, "config: trainer.batch_size = %d x %d tables x model.dim = %d "
                     "floats is more than the %u bytes one message between a trainer and an "
                     "embedding PS holds: a smaller trainer.batch_size", c->trainer.batch_size,
                     j.l.n_tables, j.l.dim, SS_MAX_FIELD_BYTES);
        goto out;
    }
    if ((rc = schema_from_config(&j.schema, c, c->data.train, e)) < 0 ||
        (rc = job_check_schema(&j.schema, &j.l, "data.train", c->data.train, e)) < 0)
        goto out;
    struct schema es; /* the eval data too: else it fails only after the training */
    if (j.is_master && c->data.eval && *c->data.eval &&
        ((rc = schema_from_config(&es, c, c->data.eval, e)) < 0 ||
         (rc = job_check_schema(&es, &j.l, "data.eval", c->data.eval, e)) < 0))
        goto out;
    if (j.is_master && (rc = job_open_run_dir(&j, e)) < 0)
        goto out;
    if (!(env && env->feed)) {
        struct ss_err why = {0};
        if ((rc = reader_open(&j.reader, c->data.train, &j.schema, c->data.max_examples,
                              c->data.report_bad_lines, &why)) < 0) {
            rc = ss_fail(e, rc, "data.train: %s (checked before training)", why.msg);
            goto out;
        }
    }
    if (j.reader && (rc = reader_check_passes(j.reader, c->data.epochs, e)) < 0)
        goto out;
    if (j.reader)
        reader_set_epochs(j.reader, c->data.epochs);
    if (env && !env->feed)
        reader_set_share(j.reader, env->index, env->count, c->data.split, NULL);
    if (env && j.is_master && !c->output.quiet)
        reader_split_say(c->data.train, &j.schema, env->feed ? c->job.readers : env->count,
                         env->feed ? "readers" : "trainers", c->data.split);
    if ((resume || (env && env->resume_from)) && (rc = job_load_checkpoint(&j, e)) < 0)
        goto out;
    if ((rc = job_setup_hot(&j, e)) < 0)
        goto out;
    if (j.resumed_from[0]) { /* its model's shape and pooling, checked before anything goes */
        float *v = ss_aligned(j.n_sync * sizeof(float));
        rc = job_resumed_vector(&j, 0, "dense", v, e);
        if (rc == 0)
            rc = job_resumed_vector(&j, 0, "state", v, e);
        free(v);
        if (rc < 0)
            goto out;
    }
    if (j.is_master) /* the run has started well: the earlier run's files go */
        job_clear_stale(&j);
    if (j.is_master && (rc = job_open_csvs(&j, e)) < 0)
        goto out;
    if (j.is_master && c->output.eval_every) {
        j.mid.every = c->output.eval_every;
        j.mid.next = (j.base.examples / j.mid.every + 1) * j.mid.every;
        j.mid.c = *c;
        j.mid.c.data.report_bad_lines = 0; /* named by the first */
    }
    if (c->embedding_cache.rows > 0 && j.is_master && !c->output.quiet) {
        int64_t rows = emb_cache_rows(c, &j.l);
        double each = emb_cache_bytes(c, &j.l);
        printf("# embedding cache: %lld rows per worker thread (%.1f MB each%s), "
               "staleness %d\n", (long long)rows, each / 1048576,
               rows < c->embedding_cache.rows ? ": twice every table's rows, the most that "
               "raises its hits" : "", c->embedding_cache.staleness);
    }
    int copies = (env ? env->count : j.n_tr) * j.n_wk; /* caches that train one row apart */
    if (c->embedding_cache.rows > 0 && c->embedding_cache.staleness > 100 && copies > 1 &&
        j.is_master)
        fprintf(stderr, "shadowsync: warning: embedding_cache.staleness = %d with %d worker "
                "caches: copies that far behind train apart, and their deltas add up at the "
                "PS (in a sweep 1000000 scored an eval NE of 1.85 against 0.96); a few updates "
                "(the default 2) keep them close\n", c->embedding_cache.staleness, copies);
    job_blas_note(c, &j.l);
    if (!c->output.quiet && j.is_master)
        printf("# training: %d trainer(s) x %d worker(s), sync %s/%s, %zu dense params, "
               "%d tables\n", env ? env->count : j.n_tr, j.n_wk, c->sync.algo,
               c->sync.mode == SYNC_FOREGROUND ? "foreground" : "shadow", j.l.n_params,
               j.l.n_tables);
    if (j.sched_on && !c->output.quiet && j.is_master)
        job_schedule_note(&j);
    if ((env ? env->count : j.n_tr) == 1 && sync_algo_needs(c->sync.algo) == SYNC_NEEDS_COLLECTIVE &&
        strcmp(c->sync.algo, "bmuf") && !c->output.quiet && j.is_master)
        printf("# sync: %s with 1 trainer averages it with itself, so its rounds change "
               "nothing (job.trainers above 1 to sync; sync.algo = none spares the rounds)\n",
               c->sync.algo);
    int blends = !strcmp(c->sync.algo, "easgd") || !strcmp(c->sync.algo, "ma") ||
                 !strcmp(c->sync.algo, "bmuf");
    if (blends && c->sync.alpha == 0 && !c->output.quiet && j.is_master)
        printf("# sync: sync.alpha = 0 leaves every replica as it is, so the %s rounds change "
               "nothing a trainer trains on (sync.alpha above 0 to sync)\n", c->sync.algo);
    else if (!strcmp(c->sync.algo, "easgd") && c->sync.alpha == 1 && !c->output.quiet &&
             j.is_master)
        printf("# sync: easgd with sync.alpha = 1: the center takes a trainer's vector, then the "
               "trainer the center's, its own: no trainer sees another's (the pull is alpha x "
               "(1 - alpha); 0.5 pulls most)\n");
    if (!c->output.quiet && j.is_master)
        job_unused_sync_notes(c, env ? env->count : j.n_tr);
    if ((rc = job_start_trainers(&j, e)) < 0) {
        if (env) /* a cluster job ends here, before a shadow thread's buffers are freed */
            env->fatal(env->arg, e);
        goto out;
    }
    wait_workers(&j);
    wait_other_trainers(&j);
    if (periodic_checkpoints(c) && env && j.is_master)
        env->ckpt_end(env->arg); /* every trainer's data has ended: no more snapshots until
                                  * the final one */
    ss_halt_freeze(); /* the training has ended: a signal from here on stops nothing */
    rc = finish_trainers(&j, e);
    struct ss_err rbe = {0};
    if (job_read_back(&j, &rbe) < 0 && rc == 0) /* the model and final checkpoint read w */
        rc = rbe.code, *e = rbe;
    job_collect(&j, &f); /* the training's figures: the final checkpoint's time is not in them */
    int krc = keep_resumed(&j, &f, rc == 0, e);
    if (rc == 0 && (rc = krc) == 0 && j.kept_resumed)
        job_collect(&j, &f);
    job_client_figures(&j, &f);
    int none = end_sums(&j, &f); /* no final checkpoint of a job stopped before it trained */
    if (c->checkpoint.dir[0] && env && !j.is_master && !none) /* collective, even after a failure */
        job_final_checkpoint_part(&j);
    else if (c->checkpoint.dir[0] && !none &&
             (env || (rc == 0 && f.examples > (j.resumed_from[0] ? j.base.examples : 0))))
        job_checkpoint_now(&j, 1); /* the reader at its end: a resume has nothing left to train
                                * (none when this run trained nothing: the one it resumed is it) */
    if (j.reader)
        reader_stats(j.reader, &rs);
    job_progress(&j, 1, 1); /* every other trainer's final report is in */
    if (env)
        job_sum_over_trainers(&j, &f, &rs);
    if (env && env->feed) /* the readers' counts, not a sum: every trainer saw them all */
        rs.bad_lines = feed_bad_lines(env->feed);
    f.spread = job_replica_spread(&j); /* collective, even after a failure */
    if (rc < 0)
        goto out;
    if (f.examples == 0 && ss_halt_signal()) {
        rc = ss_fail(e, SS_EINVAL, "stopped (%s) before any example was trained: no model "
                     "saved%s", ss_halt_name(), c->checkpoint.dir[0] && !j.resumed_from[0]
                     ? ", no checkpoint taken (run it again without --resume)" : "");
        goto out;
    }
    if (f.examples == 0) { /* the job's sum: every trainer stops here alike (DES serves no eval) */
        rc = ss_fail(e, SS_EINVAL, "no training example was read from data.train = %s (%lld bad "
                     "lines%s): nothing trained, no model saved; check data.format, "
                     "data.separator, data.header (%lld) and the columns (data.*_cols)",
                     c->data.train, (long long)rs.bad_lines,
                     rs.bad_lines && c->data.report_bad_lines ? ", the first ones named above" : "",
                     (long long)c->data.header);
        goto out;
    }
    if ((rc = refuse_nonfinite(&j, e)) < 0)
        goto out;
    w = job_output_model(&j); /* collective for sync.output = average */
    if (j.des && c->output.save_model) { /* every trainer its shards */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/model", c->output.dir);
        if ((rc = ss_mkdir_p(dir, e)) < 0 || (rc = job_save_shards(&j, dir, e)) < 0)
            goto out;
    }
    if (!j.is_master) { /* DES: serve the master's eval */
        if (j.des && c->data.eval && *c->data.eval)
            rc = job_des_eval(&j, w, c->data.eval, NULL, &ev, e);
        goto out;
    }
    if (j.resumed_from[0] && f.examples == j.base.examples && !c->output.quiet &&
        c->data.max_examples > 0 && f.examples >= c->data.max_examples)
        printf("# nothing left to train: %s had trained %lld examples, at or past data.max_examples "
               "= %lld (raise it to train on); the train figures are its\n", j.resumed_from,
               (long long)f.examples, (long long)c->data.max_examples);
    else if (j.resumed_from[0] && f.examples == j.base.examples && !c->output.quiet)
        printf("# nothing left to train: %s had trained on all of data.train (%lld examples); "
               "the train figures are its\n", j.resumed_from, (long long)f.examples);
    char gap[32];
    printf("train: examples %lld  seconds %.2f  eps %.0f  train_ne %.5f  syncs %lld  "
           "sync_gap %s  bad_lines %lld\n", (long long)f.examples, f.elapsed, f.eps,
           f.train_ne, (long long)f.syncs, job_gap_text(f.sync_gap, 0, gap), (long long)rs.bad_lines);
    fflush(stdout); /* seen before the eval, which may take a while */
    /* both the job's so far: a resumed reader's bad lines go on from its checkpoint's */
    reader_warn_bad_share("data.train", c->data.train, rs.bad_lines, f.examples,
                          c->data.report_bad_lines);
    if (j.hot)
        job_print_hot(&j, &f.hot);
    if (c->embedding_cache.rows > 0)
        job_print_cache(&f.cache);
    if (j.des)
        job_print_des(&f.des);
    job_mid_eval_end(&j, ss_halt_signal() != 0, f.examples);
    if (c->output.save_model && (rc = job_save_model(&j, w, e)) < 0) { /* kept if the eval fails */
        if (!env) /* no half-written model passes for one */
            job_stale_files(c->output.dir, MODEL_FILES, 1);
        if (j.final_ckpt[0]) { /* the way back to the model: the training is not lost */
            struct ss_err why = *e;
            rc = ss_fail(e, rc, "%s; the final checkpoint %s holds the model: once there is "
                         "room, `%s CONFIG ... --resume %s` %s", why.msg, j.final_ckpt,
                         env ? "tools/submit" : "shadowsync train", c->checkpoint.dir,
                         ss_halt_signal() ? "trains on from it (stopped short of the data) and "
                                            "saves the model at its end"
                                          : "saves it (and scores it) without training again");
        }
        goto out;
    }
    if (c->data.eval && *c->data.eval) {
        double t0 = ss_now();
        int threads = j.des ? 1 : job_eval_threads(); /* DES: a collective, one thread */
        if ((rc = job_eval_with(&j, c, w, c->data.eval, NULL, NULL, threads, &ev, e)) < 0) {
            /* the training's figures are kept, and where its model is said */
            struct ss_err why = *e, ignored;
            ev = (struct eval_result)NO_EVAL;
            int kept = job_write_metrics(&j, &f, &ev, &rs, &ignored) == 0;
            char model[4400] = "";
            if (c->output.save_model)
                snprintf(model, sizeof model, "; `shadowsync eval CONFIG --model %s/model` "
                         "scores the model once it is fixed", c->output.dir);
            const char *what = c->output.save_model
                                   ? kept ? "model and figures (metrics.json, no eval) are"
                                          : "model is"
                                   : kept ? "figures (metrics.json, no eval) are" : NULL;
            if (what)
                rc = ss_fail(e, rc, "data.eval: %s; the training's %s kept in %s%s", why.msg,
                             what, c->output.dir, model);
            else
                rc = ss_fail(e, rc, "data.eval: %s", why.msg);
            goto out;
        }
        j.eval_s = ss_now() - t0;
        j.eval_threads = ev.threads; /* fewer where a thread's client could not be made */
        job_print_eval("eval", &ev);
        if (ev.nan_preds) { /* weights so large that a forward overflows: no usable model */
            if (c->output.save_model && !env)
                job_stale_files(c->output.dir, MODEL_FILES, 1);
            char ckpt[4500] = "";
            if (j.final_ckpt[0]) { /* a resume goes back to the one before */
                ckpt_remove(j.final_ckpt);
                snprintf(ckpt, sizeof ckpt, "; its final checkpoint %s is removed", j.final_ckpt);
            }
            rc = job_nan_model(e, c, &ev, !c->output.save_model ? "the training (none saved)"
                                      : env ? "the training (the model saved is not usable)"
                                            : "the training: no model saved", ckpt);
            goto out;
        }
        job_eval_row(&j, f.examples, f.elapsed, &ev);
        reader_warn_bad_share("data.eval", c->data.eval, ev.bad_lines, ev.examples,
                              c->data.report_bad_lines);
    }
    rc = job_write_metrics(&j, &f, &ev, &rs, e);
    if (rc == 0 && !c->output.quiet)
        printf("# run directory: %s\n", c->output.dir);
    if (rc == 0 && ss_halt_signal()) {
        fflush(stdout);
        if (c->checkpoint.dir[0] && j.final_ckpt_failed && !j.checkpoints && !j.resumed_from[0])
            rc = ss_fail(e, SS_EIO, "stopped (%s) after %lld examples, but no checkpoint could "
                         "be written (the final one failed, above): no resume can continue "
                         "this run (its model so far: %s/model)", ss_halt_name(),
                         (long long)f.examples, c->output.dir);
        else if (c->checkpoint.dir[0])
            fprintf(stderr, "shadowsync: stopped (%s) after %lld examples: `%s CONFIG ... "
                    "--resume` continues from checkpoint.dir = %s%s\n", ss_halt_name(),
                    (long long)f.examples,
                    rpc_under_mpirun() ? "tools/submit" : "shadowsync train",
                    c->checkpoint.dir, j.final_ckpt_failed ? ", its last good checkpoint (the "
                    "final one failed, above: the training after it is done again)" : "");
        else
            fprintf(stderr, "shadowsync: stopped (%s) after %lld examples; no checkpoint.dir "
                    "was set, so no resume can continue this run (its model so far: %s/model)"
                    "\n", ss_halt_name(), (long long)f.examples, c->output.dir);
    } else if (rc == 0 && j.final_ckpt_failed) { /* never a success with its last one missing */
        rc = ss_fail(e, SS_EIO, "the run's final checkpoint could not be written (above): its "
                     "model is saved in %s/model, but checkpoint.dir = %s %s", c->output.dir,
                     c->checkpoint.dir, j.checkpoints || j.resumed_from[0]
                         ? "holds an earlier one only (a --resume trains again from there)"
                         : "holds none");
    }
    if (rc == 0 && c->data.eval && *c->data.eval && ev.examples == 0) /* the model is kept */
        rc = job_noeval(e, c->data.eval, "the model is saved, but not scored");
out:
    job_mid_eval_end(&j, 1, 0);
    free(j.mid.w);
    free(w);
    if (j.csv)
        fclose(j.csv);
    if (j.eval_csv)
        fclose(j.eval_csv);
    job_free_trainers(&j);
    if (j.reader)
        reader_close(j.reader);
    job_teardown_model(&j);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    pthread_cond_destroy(&j.resume_cv);
    return rc;
}

int trainer_run(const struct ss_config *c, const char *resume, struct ss_err *e)
{
    return run(c, NULL, resume, e);
}

int trainer_run_env(const struct ss_config *c, const struct trainer_env *env, struct ss_err *e)
{
    return run(c, env, NULL, e);
}
