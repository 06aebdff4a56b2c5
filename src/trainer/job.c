/* A trainer process's run (DESIGN §2, §3, §7): in the embedded default
 * job.trainers trainers in this process, each with its own dense buffer,
 * trainer.worker_threads Hogwild workers and one shadow thread, sharing one
 * reader and one copy of the embedding tables, so every example is
 * consumed exactly once; in a cluster job one trainer, whose peers, tables
 * and readers are behind env (struct trainer_env, cluster.c).
 *
 * run() is the phases: check the keys, prepare the model, the data and the
 * state to start from, train (the main thread waits, printing progress
 * lines, taking checkpoints and mid-run evals, then joins the workers and
 * shadow threads and takes the final checkpoint), then the output model,
 * its save, the end-of-run eval and metrics.json. */
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
                   j->env ? j->env->count : j->n_tr, j->n_sync, sync_diverged_advice(j->c));
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

/* The training data is named (the config's own checks and the pre-run
 * checks, precheck.c, have passed). */
static int check_keys(const struct ss_config *c, struct ss_err *e)
{
    if (!c->data.train || !*c->data.train)
        return ss_fail(e, SS_EINVAL, "config: data.train is empty: give the training data "
                       "(a file, a directory of shards or a glob)");
    return 0;
}

/* The model here: its device, the room for it, its tables or their
 * clients, the caches' room. */
static int prepare_model(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    const struct trainer_env *env = j->env;
    int rc = 0;
    j->gpu_dev = -1;
    if (env && env->gpu)
        j->gpu_dev = env->gpu_dev, j->gpu_count = 1;
    else if (!env)
        rc = trainer_device(c, !c->output.quiet, 0, &j->gpu_dev, &j->gpu_count, e);
    if (rc < 0 || (j->is_master && (rc = job_check_room(c, e)) < 0) ||
        (rc = job_setup_model(j, e)) < 0)
        return rc;
    if (c->embedding_cache.rows > 0) { /* (the tables are made: the room is what they left) */
        int64_t rows = emb_cache_rows(c, &j->l), avail = ss_mem_available();
        double need = emb_cache_bytes(c, &j->l) * j->n_tr * j->n_wk;
        if (avail >= 0 && need > (double)avail)
            return ss_fail(e, SS_ENOMEM, "the embedding caches here need %.0f MB (%d worker "
                           "thread(s) x %lld rows of model.dim %d and their deltas), more than "
                           "the %lld MB of memory free here: fewer embedding_cache.rows",
                           need / 1048576, j->n_tr * j->n_wk, (long long)rows, j->l.dim,
                           (long long)(avail >> 20));
    }
    return 0;
}

/* The data: its columns against the model (the eval data's too, else it
 * fails only after the training), the run directory, this process's reader
 * (none where reader services feed it) and its share. */
static int prepare_data(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    const struct trainer_env *env = j->env;
    struct schema es;
    int rc;
    if ((rc = schema_from_config(&j->schema, c, c->data.train, e)) < 0 ||
        (rc = job_check_schema(&j->schema, &j->l, "data.train", c->data.train, e)) < 0)
        return rc;
    if (j->is_master && c->data.eval && *c->data.eval &&
        ((rc = schema_from_config(&es, c, c->data.eval, e)) < 0 ||
         (rc = job_check_schema(&es, &j->l, "data.eval", c->data.eval, e)) < 0))
        return rc;
    if (j->is_master && (rc = job_open_run_dir(j, e)) < 0)
        return rc;
    if (env && env->feed)
        return 0;
    struct ss_err why = {0};
    if ((rc = reader_open(&j->reader, c->data.train, &j->schema, c->data.max_examples,
                          c->data.report_bad_lines, &why)) < 0)
        return ss_fail(e, rc, "data.train: %s (checked before training)", why.msg);
    if ((rc = reader_check_passes(j->reader, c->data.epochs, e)) < 0)
        return rc;
    reader_set_epochs(j->reader, c->data.epochs);
    if (env)
        reader_set_share(j->reader, env->index, env->count, c->data.split, NULL);
    return 0;
}

/* A cluster job's master says how data.train is split. */
static void split_note(const struct job *j)
{
    const struct ss_config *c = j->c;
    const struct trainer_env *env = j->env;
    if (env && j->is_master && !c->output.quiet)
        reader_split_say(c->data.train, &j->schema, env->feed ? c->job.readers : env->count,
                         env->feed ? "readers" : "trainers", c->data.split);
}

/* Where training starts: a resumed checkpoint's state (its model's shape
 * and pooling checked before anything goes), the hot rows, the run
 * directory's files (an earlier run's go), the mid-run evals. */
static int prepare_state(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int rc = 0;
    split_note(j);
    if ((j->resume || (j->env && j->env->resume_from)) && (rc = job_load_checkpoint(j, e)) < 0)
        return rc;
    if ((rc = job_setup_hot(j, e)) < 0)
        return rc;
    if (j->resumed_from[0]) {
        float *v = ss_aligned(j->n_sync * sizeof(float));
        rc = job_resumed_vector(j, 0, "dense", v, e);
        if (rc == 0)
            rc = job_resumed_vector(j, 0, "state", v, e);
        free(v);
        if (rc < 0)
            return rc;
    }
    if (!j->is_master)
        return 0;
    job_clear_stale(j); /* the run has started well: the earlier run's files go */
    if ((rc = job_open_csvs(j, e)) < 0)
        return rc;
    if (c->output.eval_every) {
        j->mid.every = c->output.eval_every;
        j->mid.next = (j->base.examples / j->mid.every + 1) * j->mid.every;
        j->mid.c = *c;
        j->mid.c.data.report_bad_lines = 0; /* named by the first */
    }
    return 0;
}

/* The figures a run ends with. */
struct run_end {
    struct figures f;
    struct eval_result ev;
    struct reader_stats rs;
    float *w;                   /* the output model */
};

/* The training, from the trainers' start to their figures: waits (progress
 * lines, checkpoints, mid-run evals), the final sync and checkpoint, the
 * job's sums. Once the trainers started, its collectives run on every
 * trainer even after a failure. */
static int train(struct job *j, struct run_end *r, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    const struct trainer_env *env = j->env;
    int rc = job_start_trainers(j, e);
    if (rc < 0) {
        if (env) /* a cluster job ends here, before a shadow thread's buffers are freed */
            env->fatal(env->arg, e);
        return rc;
    }
    wait_workers(j);
    wait_other_trainers(j);
    if (periodic_checkpoints(c) && env && j->is_master)
        env->ckpt.end(env->arg); /* every trainer's data has ended: no more snapshots until
                                  * the final one */
    ss_halt_freeze(); /* the training has ended: a signal from here on stops nothing */
    rc = finish_trainers(j, e);
    struct ss_err rbe = {0};
    if (job_read_back(j, &rbe) < 0 && rc == 0) /* the model and final checkpoint read w */
        rc = rbe.code, *e = rbe;
    job_collect(j, &r->f); /* the training's figures: the final checkpoint's time is not in them */
    int krc = keep_resumed(j, &r->f, rc == 0, e);
    if (rc == 0 && (rc = krc) == 0 && j->kept_resumed)
        job_collect(j, &r->f);
    job_client_figures(j, &r->f);
    int none = end_sums(j, &r->f); /* no final checkpoint of a job stopped before it trained */
    if (c->checkpoint.dir[0] && env && !j->is_master && !none) /* collective, even after a failure */
        job_final_checkpoint_part(j);
    else if (c->checkpoint.dir[0] && !none &&
             (env || (rc == 0 && r->f.examples > (j->resumed_from[0] ? j->base.examples : 0))))
        job_checkpoint_now(j, 1); /* the reader at its end: a resume has nothing left to train
                                   * (none when this run trained nothing: the one it resumed is it) */
    if (j->reader)
        reader_stats(j->reader, &r->rs);
    job_progress(j, 1, 1); /* every other trainer's final report is in */
    if (env)
        job_sum_over_trainers(j, &r->f, &r->rs);
    if (env && env->feed) /* the readers' counts, not a sum: every trainer saw them all */
        r->rs.bad_lines = feed_bad_lines(env->feed);
    r->f.spread = job_replica_spread(j); /* collective, even after a failure */
    return rc;
}

/* A run that trained nothing has no model to save. */
static int refuse_empty(const struct job *j, const struct run_end *r, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    if (r->f.examples == 0 && ss_halt_signal())
        return ss_fail(e, SS_EINVAL, "stopped (%s) before any example was trained: no model "
                       "saved%s", ss_halt_name(), c->checkpoint.dir[0] && !j->resumed_from[0]
                       ? ", no checkpoint taken (run it again without --resume)" : "");
    if (r->f.examples == 0) /* the job's sum: every trainer stops here alike (DES serves no eval) */
        return ss_fail(e, SS_EINVAL, "no training example was read from data.train = %s (%lld "
                       "bad lines%s): nothing trained, no model saved; check data.format, "
                       "data.separator, data.header (%lld) and the columns (data.*_cols)",
                       c->data.train, (long long)r->rs.bad_lines,
                       r->rs.bad_lines && c->data.report_bad_lines ? ", the first ones named above"
                                                                   : "",
                       (long long)c->data.header);
    return refuse_nonfinite(j, e);
}

/* The model saved into output.dir/model; a failure says where the
 * training is kept (the final checkpoint), and leaves no half-written
 * model that would pass for one. */
static int save_output(struct job *j, const float *w, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int rc = c->output.save_model ? job_save_model(j, w, e) : 0;
    if (rc == 0)
        return 0;
    if (rc != SS_ESTOPPED) /* (given up on a stop: nothing more is written) the parts written,
                            * a cluster job's PSs' too where output.dir is shared */
        job_stale_files(c->output.dir, MODEL_FILES, 1);
    if (!j->final_ckpt[0])
        return rc;
    struct ss_err why = *e;
    return ss_fail(e, rc, "%s; the final checkpoint %s holds the model: once output.dir can "
                   "be written, `%s CONFIG ... --resume %s` %s", why.msg, j->final_ckpt,
                   j->env ? "tools/submit" : "shadowsync train", c->checkpoint.dir,
                   ss_halt_signal() ? "trains on from it (stopped short of the data) and saves "
                                      "the model at its end"
                                    : "saves it (and scores it) without training again");
}

/* The run's end on the master: the train line and notes, the model saved,
 * the end-of-run eval, metrics.json, and what a stop or a failed final
 * checkpoint leaves. */
static int conclude(struct job *j, struct run_end *r, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    job_end_notes(j, &r->f, &r->rs);
    job_mid_eval_end(j, ss_halt_signal() != 0, r->f.examples);
    int rc = save_output(j, r->w, e);
    if (rc == SS_ESTOPPED && ss_halt_signal()) { /* a stop: 75 where a checkpoint is kept */
        j->model_lost = 1;
        fprintf(stderr, "shadowsync: the model is not saved (%s/model may hold part of it: "
                "not a model), nor the run's figures: %s\n", c->output.dir, e->msg);
        return job_stop_message(j, &r->f, e); /* it says where the training is kept */
    }
    if (rc == 0 && c->data.eval && *c->data.eval)
        rc = job_final_eval(j, &r->f, &r->rs, r->w, &r->ev, e);
    if (rc == 0)
        rc = job_write_metrics(j, &r->f, &r->ev, &r->rs, e);
    if (rc == 0 && !c->output.quiet)
        printf("# run directory: %s\n", c->output.dir);
    if (rc == 0 && c->output.plot)
        trainer_plot_own(c);
    if (rc == 0)
        rc = job_stop_message(j, &r->f, e);
    if (rc == 0 && c->data.eval && *c->data.eval && r->ev.examples == 0) /* the model is kept */
        rc = job_noeval(e, c->data.eval, "the model is saved, but not scored");
    return rc;
}

static void job_init(struct job *j, const struct ss_config *c, const struct trainer_env *env,
                     const char *resume)
{
    memset(j, 0, sizeof *j);
    j->c = c;
    j->env = env;
    j->resume = resume;
    j->is_master = !env || env->is_master;
    j->n_tr = env ? 1 : c->job.trainers;
    j->n_wk = c->trainer.worker_threads;
    j->sched_on = c->optim.warmup_examples > 0 || c->optim.decay_examples > 0;
    j->sched_times = env && !env->feed ? env->count : 1;
    j->gpu_dev = -1;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    pthread_cond_init(&j->resume_cv, NULL);
}

static void job_free(struct job *j)
{
    job_mid_eval_end(j, 1, 0);
    free(j->mid.w);
    job_close_csvs(j);
    free(j->tr_each);
    free(j->tr_seen);
    job_free_trainers(j);
    if (j->reader)
        reader_close(j->reader);
    job_teardown_model(j);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    pthread_cond_destroy(&j->resume_cv);
}

/* A run: checks, the model and data prepared, the training, then (every
 * trainer) the output model and DES's shards, and (the master) its end. */
static int run(const struct ss_config *c, const struct trainer_env *env, const char *resume,
               struct ss_err *e)
{
    struct job j;
    job_init(&j, c, env, resume);
    struct run_end r = {.ev = NO_EVAL};
    int rc = check_keys(c, e);
    if (rc == 0 && (rc = prepare_model(&j, e)) == 0 && (rc = prepare_data(&j, e)) == 0 &&
        (rc = prepare_state(&j, e)) == 0) {
        job_start_notes(&j);
        rc = train(&j, &r, e);
    }
    if (rc == 0 && (rc = refuse_empty(&j, &r, e)) == 0) {
        r.w = job_output_model(&j); /* collective for sync.output = average */
        if (j.des && c->output.save_model) /* every trainer its shards */
            rc = job_save_des_shards(&j, e);
        if (rc == 0 && j.is_master)
            rc = conclude(&j, &r, e);
        else if (rc == 0 && j.des && c->data.eval && *c->data.eval) { /* serve the master's */
            struct eval_src src = job_eval_src(&j);
            rc = job_des_eval(&src, c, r.w, c->data.eval, NULL, &r.ev, e);
        }
    }
    free(r.w);
    job_free(&j);
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
