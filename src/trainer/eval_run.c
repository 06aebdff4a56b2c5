/* The evals of a run: the mid-run thread (output.eval_every), the
 * end-of-run eval over the run's clients, DES's collective eval, and the
 * `eval` command on a saved model or checkpoint. The scoring itself is
 * trainer_eval (eval.c). */
#include "job.h"

#define CALIBRATION_LO 0.9
#define CALIBRATION_HI 1.1

static void *des_serve_main(void *arg)
{
    struct ss_err e;
    emb_des_finish(arg, &e);
    return NULL;
}

/* DES: the master scores path as member 0 of a group of its own while the
 * other trainers serve their shards to it (collective over the trainers:
 * in the embedded default, threads here serve for them). */
int job_des_eval(const struct eval_src *s, const struct ss_config *c, const float *w,
                 const char *path, FILE *pred, struct eval_result *ev, struct ss_err *e)
{
    int n = s->n_tr, rc = 0;
    struct exchange **x = ss_xcalloc(n, sizeof *x);
    struct emb_client **cs = ss_xcalloc(n, sizeof *cs);
    pthread_t *th = ss_xcalloc(n, sizeof *th);
    if (s->env)
        rc = s->env->des.make_exchange(s->env->arg, &x[0], e);
    else
        exchange_local_group(x, n, NULL);
    for (int t = 0; rc == 0 && t < n; t++)
        cs[t] = emb_client_des(x[t], s->des, s->l->dim, s->shards[t], NULL, NULL);
    for (int t = 1; rc == 0 && t < n; t++)
        if (pthread_create(&th[t], NULL, des_serve_main, cs[t]) != 0)
            abort();
    if (rc == 0 && s->is_master) {
        rc = trainer_eval(s->l, w, cs, 1, c, path, pred, NULL, ev, e);
        struct ss_err fe;
        int frc = emb_des_finish(cs[0], &fe); /* the others end with it */
        if (rc == 0 && frc < 0)
            rc = frc, *e = fe;
    } else if (rc == 0) {
        rc = emb_des_finish(cs[0], e);
    }
    for (int t = 1; cs[0] && t < n; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < n; t++)
        if (cs[t])
            cs[t]->ops->free(cs[t]);
    free(th);
    free(cs);
    free(x);
    return rc;
}

struct eval_src job_eval_src(const struct job *j)
{
    return (struct eval_src){.l = &j->l, .emb = j->emb, .env = j->env, .hot = j->hot,
                             .des = j->des, .shards = j->shards, .n_tr = j->n_tr,
                             .is_master = j->is_master};
}

/* An eval that read no example of path. */
int job_noeval(struct ss_err *e, const char *path, const char *so)
{
    return ss_fail(e, SS_EINVAL, "no eval example was read from data.eval = %s: %s; check its "
                   "format and columns", path, so);
}

/* An eval whose predictions were NaN: the model diverged in when (after
 * the advice: what became of its checkpoint, or ""). */
static int nan_model(struct ss_err *e, const struct ss_config *c, const struct eval_result *ev,
                     const char *when, const char *ckpt)
{
    return ss_fail(e, SS_EINVAL, "the model diverged: %lld of its %lld predictions on %s are "
                   "NaN (its parameters overflow a forward pass) in %s; %s%s",
                   (long long)ev->nan_preds, (long long)ev->examples, c->data.eval, when,
                   sync_diverged_advice(c), ckpt);
}

/* Threads for an eval with the workers done: the cores this process may
 * run on (at most 32). */
static int eval_threads(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > 32 ? 32 : n;
}

/* Scores path with the model w (its hot rows, if any, from w too) under
 * the config c (the run's, or the mid-run evals' copy) on threads threads
 * (one with DES); cancel as trainer_eval's. Each thread looks up through
 * s->emb or, in a cluster job, a client of its own to the embedding PSs. */
static int eval_with(const struct eval_src *s, const struct ss_config *c, const float *w,
                     const char *path, FILE *pred, const int *cancel, int threads,
                     struct eval_result *ev, struct ss_err *e)
{
    if (s->des)
        return job_des_eval(s, c, w, path, pred, ev, e);
    int n = threads < 1 ? 1 : threads;
    struct emb_client **own = ss_xcalloc((size_t)n, sizeof *own);
    struct emb_client **emb = ss_xcalloc((size_t)n, sizeof *emb);
    for (int t = 0; t < n; t++) {
        emb[t] = s->emb;
        struct ss_err me;
        if (t > 0 && s->env && s->env->make_emb(s->env->arg, 1, &own[t], &me) < 0) {
            fprintf(stderr, "shadowsync: the eval runs on %d thread(s), not %d: another client "
                    "to the embedding PSs could not be made: %s\n", t, n, me.msg);
            n = t; /* (a limit on open files, say) */
            break;
        }
        if (own[t])
            emb[t] = own[t];
        if (s->hot) { /* only looks up: the replica is not written */
            struct hot_replica r = {s->hot, (float *)w + s->l->n_params, NULL, OPT_SGD, 0, 0};
            emb[t] = emb_client_hot(emb[t], own[t] != NULL, &r, c->trainer.batch_size, NULL);
            own[t] = emb[t];
        }
    }
    int rc = trainer_eval(s->l, w, emb, n, c, path, pred, cancel, ev, e);
    for (int t = 0; t < n; t++)
        if (own[t])
            own[t]->ops->free(own[t]);
    free(emb);
    free(own);
    return rc;
}

/* output.eval_every: while the job trains, the master scores data.eval
 * with a copy of the model (eval_model) each time the job has trained that
 * many more examples, on a thread of its own, so no worker waits: the
 * copy is taken as the shadow thread takes its own (a Hogwild read; a GPU
 * trainer's through its staging transfer), and the eval's lookups read the
 * tables as the workers write them (the job's own client j->emb, which no
 * worker of a cluster job uses). One eval at a time: one due while another
 * runs starts once it has ended. Each is a line and a row of eval.csv,
 * the end-of-run eval the last. */
static void *mid_eval_main(void *arg)
{
    struct job *j = arg;
    struct mid_eval *m = &j->mid;
    struct eval_src src = job_eval_src(j);
    m->rc = eval_with(&src, &m->c, m->w, j->c->data.eval, NULL, &m->cancel, 1, &m->ev, &m->err);
    __atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&j->mu);
    pthread_cond_broadcast(&j->cv); /* the main thread reports it */
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Reports an ended mid-run eval (joined here). */
static void mid_eval_report(struct job *j)
{
    struct mid_eval *m = &j->mid;
    pthread_join(m->th, NULL);
    m->running = 0;
    if (m->rc < 0) {
        fprintf(stderr, "shadowsync: warning: the eval at %lld examples failed, training goes "
                "on: %s\n", (long long)m->at, m->err.msg);
    } else if (m->rc == 0) {
        char what[64];
        snprintf(what, sizeof what, "eval (trained %lld)", (long long)m->at);
        if (!j->c->output.quiet)
            job_print_eval(what, &m->ev);
        fflush(stdout);
        job_eval_row(j, m->at, m->elapsed, &m->ev);
    }
}

/* What a mid-run eval scores, into w: the model the run would output now.
 * That is trainer 0's replica, or with sync.output = average the replicas'
 * mean where they are all in this process (the embedded default); a
 * cluster job's master has only its own, as averaging would hold up the
 * other trainers. */
static int eval_model(struct job *j, float *w, struct ss_err *e)
{
    if (j->c->sync.output != OUT_AVERAGE || j->env || j->n_tr < 2)
        return job_model_of(j, &j->tr[0], w, NULL, e);
    size_t n = j->n_sync;
    float *one = ss_aligned(n * sizeof(float));
    memset(w, 0, n * sizeof(float));
    int rc = 0;
    for (int t = 0; rc == 0 && t < j->n_tr; t++)
        if ((rc = job_model_of(j, &j->tr[t], one, NULL, e)) == 0)
            job_mean_add(w, one, n, j->n_tr);
    free(one);
    return rc;
}

/* Every worker of this process sends on the updates its embedding cache
 * holds back, at the edge of its batch (it goes on at once); returns once
 * each has, or has ended (then it sent them all). */
static void flush_workers(struct job *j)
{
    pthread_mutex_lock(&j->mu);
    int64_t gen = __atomic_add_fetch(&j->flush_gen, 1, __ATOMIC_ACQ_REL);
    for (;;) {
        int all = 1;
        for (int t = 0; all && t < j->n_tr; t++)
            for (int k = 0; all && k < j->n_wk; k++)
                all = j->tr[t].workers[k].ended || j->tr[t].workers[k].flushed_gen == gen;
        if (all || __atomic_load_n(&j->stop, __ATOMIC_RELAXED))
            break;
        pthread_cond_wait(&j->cv, &j->mu);
    }
    pthread_mutex_unlock(&j->mu);
}

/* The master, from its waits: reports an eval that has ended, and starts
 * one that is due at `examples` (the job's count), also once its own
 * data has ended while other workers or trainers train on (uneven
 * shares); one that turns out to be near the end is dropped there. */
void job_mid_eval_poll(struct job *j, int64_t examples)
{
    struct mid_eval *m = &j->mid;
    if (m->running && __atomic_load_n(&m->done, __ATOMIC_ACQUIRE))
        mid_eval_report(j);
    if (!m->every || m->running || examples < m->next || ss_halt_signal())
        return;
    if (!m->w)
        m->w = ss_aligned(j->n_sync * sizeof(float));
    if (j->c->embedding_cache.rows > 0) /* (a cluster job's other trainers hold theirs) */
        flush_workers(j);
    if (eval_model(j, m->w, &m->err) < 0) {
        fprintf(stderr, "shadowsync: warning: no eval at %lld examples: a trainer's model "
                "could not be read from its GPU: %s\n", (long long)examples, m->err.msg);
        m->next += m->every;
        return;
    }
    m->at = examples;
    m->elapsed = ss_now() - j->t0;
    m->next = (examples / m->every + 1) * m->every;
    m->done = 0;
    m->running = 1;
    if (pthread_create(&m->th, NULL, mid_eval_main, j) != 0) {
        fprintf(stderr, "shadowsync: cannot start the eval thread\n");
        abort();
    }
}

/* The end of training, at `examples`: the eval under way is waited for and
 * reported, or with cancel ended at once, its figures dropped; also one
 * of a copy taken within half an interval of the end, whose row the
 * end-of-run eval's all but repeats (the end need not wait for it). */
void job_mid_eval_end(struct job *j, int cancel, int64_t examples)
{
    struct mid_eval *m = &j->mid;
    if (!m->running)
        return;
    if (cancel || examples - m->at < m->every / 2)
        __atomic_store_n(&m->cancel, 1, __ATOMIC_RELAXED);
    mid_eval_report(j);
}

/* `eval --predictions PATH`: PATH.part, renamed to PATH once whole (or
 * standard output for "-"); opened before the model loads, so a path that
 * cannot take it fails at once. */
static FILE *open_predictions(const char *path, char *part, size_t cap, struct ss_err *e)
{
    if (!strcmp(path, "-"))
        return stdout;
    snprintf(part, cap, "%s.part", path);
    FILE *f = fopen(part, "w");
    if (!f)
        ss_fail(e, SS_EIO, "--predictions %s: cannot write %s: %s", path, part, strerror(errno));
    return f;
}

static int close_predictions(FILE *f, const char *path, const char *part, int rc, struct ss_err *e)
{
    if (!f || f == stdout)
        return f && fflush(f) != 0 && rc == 0
                   ? ss_fail(e, SS_EIO, "--predictions -: writing them failed: %s", strerror(errno))
                   : rc;
    int bad = ferror(f);
    errno = 0;
    bad |= fclose(f) != 0; /* the buffer's last write: its errno is the cause */
    if (rc == 0 && bad)
        rc = ss_fail(e, SS_EIO, "--predictions %s: writing %s failed%s%s", path, part,
                     errno ? ": " : "", errno ? strerror(errno) : "");
    if (rc == 0 && rename(part, path) != 0)
        rc = ss_fail(e, SS_EIO, "--predictions %s: %s", path, strerror(errno));
    if (rc < 0)
        unlink(part);
    return rc;
}

/* A final calibration outside [0.9, 1.1] (predicted clicks over real
 * ones), said with what usually brings it back: a decay over the end of
 * the pass, or eval data of another click rate than the training's. */
static void warn_calibration(const struct ss_config *c, const struct figures *f,
                             const struct eval_result *ev)
{
    if (!(ev->calibration < CALIBRATION_LO || ev->calibration > CALIBRATION_HI))
        return; /* NaN (one class) included */
    double train_ctr = f->ne.n > 0 ? f->ne.label_sum / (double)f->ne.n : NAN;
    int other_rate = train_ctr > 0 && fabs(ev->ctr / train_ctr - 1) > 0.1;
    const char *fix =
        other_rate ? "the eval data's click rate is not the training's: score data of the same "
                     "period and sampling (a negative downsampling's eval must be sampled alike)"
        : c->optim.decay_examples == 0
            ? "a run that ends at a constant rate ends off: optim.schedule = auto (the default) or "
              "optim.decay_start and optim.decay_examples decay the rates over the end of the pass"
            : "a decay that ends earlier or lower (optim.decay_to), lower learning rates, or more "
              "data usually bring it within 0.1";
    fprintf(stderr, "shadowsync: warning: the model's calibration on data.eval is %.3f (it "
            "predicts %.0f%% of the clicks there are: eval click rate %.4f, the training's %.4f): "
            "%s\n", ev->calibration, 100 * ev->calibration, ev->ctr, train_ctr, fix);
}

/* The end-of-run eval of the output model w (the master): its line and
 * eval.csv's row. A failed eval keeps the training's figures (metrics.json
 * without an eval) and says where the model is; NaN predictions (weights
 * so large a forward overflows) leave no usable model nor final
 * checkpoint. */
int job_final_eval(struct job *j, const struct figures *f, const struct reader_stats *rs,
                   const float *w, struct eval_result *ev, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    double t0 = ss_now();
    int threads = j->des ? 1 : eval_threads(); /* DES: a collective, one thread */
    struct eval_src src = job_eval_src(j);
    int rc = eval_with(&src, c, w, c->data.eval, NULL, NULL, threads, ev, e);
    if (rc < 0) {
        struct ss_err why = *e, ignored;
        *ev = (struct eval_result)NO_EVAL;
        int kept = job_write_metrics(j, f, ev, rs, &ignored) == 0;
        char model[4400] = "";
        if (c->output.save_model)
            snprintf(model, sizeof model, "; `shadowsync eval CONFIG --model %s/model` "
                     "scores the model once it is fixed", c->output.dir);
        const char *what = c->output.save_model
                               ? kept ? "model and figures (metrics.json, no eval) are"
                                      : "model is"
                               : kept ? "figures (metrics.json, no eval) are" : NULL;
        if (what)
            return ss_fail(e, rc, "data.eval: %s; the training's %s kept in %s%s", why.msg,
                           what, c->output.dir, model);
        return ss_fail(e, rc, "data.eval: %s", why.msg);
    }
    j->eval_s = ss_now() - t0;
    j->eval_threads = ev->threads; /* fewer where a thread's client could not be made */
    job_print_eval("eval", ev);
    if (ev->nan_preds) {
        if (c->output.save_model && !j->env)
            job_stale_files(c->output.dir, MODEL_FILES, 1);
        char ckpt[4500] = "";
        if (j->final_ckpt[0]) { /* a resume goes back to the one before */
            ckpt_remove(j->final_ckpt);
            snprintf(ckpt, sizeof ckpt, "; its final checkpoint %s is removed", j->final_ckpt);
        }
        return nan_model(e, c, ev, !c->output.save_model ? "the training (none saved)"
                                   : j->env ? "the training (the model saved is not usable)"
                                            : "the training: no model saved", ckpt);
    }
    job_eval_row(j, f->examples, f->elapsed, ev);
    reader_warn_bad_share("data.eval", c->data.eval, ev->bad_lines, ev->examples,
                          c->data.report_bad_lines);
    warn_calibration(c, f, ev);
    return 0;
}

/* The model under --model dir, into src: dir itself (its dense.bin, or a
 * checkpoint: *is_ckpt), its model/ (a run directory), or the newest
 * complete checkpoint of a checkpoint.dir (checked as a resume checks it). */
static int find_model(const char *dir, char *src, size_t cap, int *is_ckpt, FILE *say,
                      struct ss_err *e)
{
    char p[4500];
    struct ckpt_meta_set m;
    struct ss_err ignore;
    int skipped, rc;
    snprintf(p, sizeof p, "%s/MANIFEST", dir);
    *is_ckpt = access(p, F_OK) == 0;
    if (*is_ckpt && (rc = ckpt_verify(dir, &m, e)) < 0)
        return rc;
    if (*is_ckpt || ckpt_latest(dir, src, cap, &m, &skipped, &ignore) != 0) {
        if (!*is_ckpt && skipped > 0) /* a checkpoint.dir whose checkpoints are all refused */
            return ss_fail(e, SS_EFORMAT, "--model %s: %s", dir, ignore.msg);
        snprintf(src, cap, "%s", dir);
    } else {
        *is_ckpt = 1;
    }
    if (*is_ckpt) {
        fprintf(say, "# model: checkpoint %s\n", src);
        return 0;
    }
    snprintf(p, sizeof p, "%s/dense.bin", src);
    if (access(p, F_OK) == 0)
        return 0;
    snprintf(p, sizeof p, "%s/model/dense.bin", dir); /* a run directory: its model/ */
    if (access(p, F_OK) != 0)
        return ss_fail(e, SS_EINVAL, "--model %s: no dense.bin there or in its model/ (a run "
                       "with output.save_model = false saves none; a checkpoint or "
                       "checkpoint.dir scores too)", dir);
    snprintf(src, cap, "%s/model", dir);
    fprintf(say, "# model: %s\n", src);
    return 0;
}

/* A saved model to score: its layout, tables and client, hot rows, and w
 * (n floats: the dense parameters, then the hot rows' values). */
struct saved {
    struct model_layout l;
    struct emb_tables *tables;
    struct emb_client *emb;
    struct hot_set *hot;
    size_t n;
    float *w;
};

static void saved_free(struct saved *m)
{
    free(m->w);
    hot_free(m->hot);
    if (m->emb)
        m->emb->ops->free(m->emb);
    embps_free(m->tables);
    model_layout_free(&m->l);
}

/* A checkpoint's model as the run would output it with sync.output =
 * average: the mean of its trainers' dense vectors, summed as the run's
 * job_output_model does. */
static int average_replicas(struct saved *m, const char *src, FILE *say, struct ss_err *e)
{
    char p[4500];
    int k = 1, rc = 0;
    for (;; k++) {
        snprintf(p, sizeof p, "%s/dense-%d.bin", src, k);
        if (access(p, F_OK) != 0)
            break;
    }
    float *one = ss_aligned(m->n * sizeof(float));
    for (size_t i = 0; i < m->n; i++)
        one[i] = m->w[i], m->w[i] = 0;
    for (int t = 0; rc == 0 && t < k; t++) {
        snprintf(p, sizeof p, "%s/dense-%d.bin", src, t);
        if (t == 0 || (rc = dense_load(one, m->n, &m->l, p, e)) == 0)
            job_mean_add(m->w, one, m->n, k);
    }
    free(one);
    if (rc == 0)
        fprintf(say, "# model: the mean of its %d trainer%s dense vector%s (sync.output = "
                "average)\n", k, k > 1 ? "s'" : "'s", k > 1 ? "s" : "");
    return rc;
}

/* The model in src under the config c: the tables, trainer 0's dense
 * vector (a checkpoint's, with its replica of the hot rows when
 * hot-rows.bin is there; a model directory has their values in hot.bin). */
static int load_saved_model(struct saved *m, const struct ss_config *c, const char *src,
                            int is_ckpt, FILE *say, struct ss_err *e)
{
    char p[4500];
    int rc = model_layout_init(&m->l, c, e);
    if (rc < 0 || (rc = job_dense_room(c, &m->l, 0, 0, e)) < 0 ||
        (rc = job_local_tables(c, &m->l, say, &m->tables, e)) < 0)
        return rc;
    m->emb = emb_client_local(m->tables);
    openblas_set_num_threads(1);
    size_t np = m->l.n_params;
    m->n = np;
    snprintf(p, sizeof p, "%s/hot-rows.bin", src);
    if (access(p, F_OK) == 0) {
        if ((rc = hot_load(&m->hot, p, &m->l, e)) < 0)
            return rc;
        m->n += (size_t)m->hot->n * m->l.dim;
    }
    m->w = ss_aligned(m->n * sizeof(float));
    snprintf(p, sizeof p, "%s/%s", src, is_ckpt ? "dense-0.bin" : "dense.bin");
    if ((rc = dense_load(m->w, is_ckpt ? m->n : np, &m->l, p, e)) < 0 ||
        (rc = embps_load_dir(m->tables, src, e)) < 0)
        return rc;
    if (is_ckpt && c->sync.output == OUT_AVERAGE && (rc = average_replicas(m, src, say, e)) < 0)
        return rc;
    snprintf(p, sizeof p, "%s/hot.bin", src);
    if (m->hot && !is_ckpt)
        return dense_load(m->w + np, m->n - np, &m->l, p, e);
    return 0;
}

/* The eval command's figures: its line and a JSON line (null where a
 * figure is undefined: eval data of one class); data without labels is
 * only counted. */
static int report_saved_eval(const struct ss_config *c, const struct eval_result *ev, FILE *say,
                             struct ss_err *e)
{
    if (!ev->labeled) {
        fprintf(say, "{\"eval_examples\": %lld}\n", (long long)ev->examples);
        return ev->examples == 0 ? job_noeval(e, c->data.eval, "nothing is scored") : 0;
    }
    job_print_eval_to(say, "eval", ev);
    reader_warn_bad_share("data.eval", c->data.eval, ev->bad_lines, ev->examples,
                          c->data.report_bad_lines);
    char v[4][32];
    const double x[4] = {ev->ne, ev->logloss, ev->auc, ev->calibration};
    for (int i = 0; i < 4; i++)
        snprintf(v[i], sizeof v[i], isfinite(x[i]) ? "%.6f" : "null", x[i]);
    fprintf(say, "{\"eval_examples\": %lld, \"eval_ne\": %s, \"eval_logloss\": %s, "
            "\"eval_auc\": %s, \"eval_calibration\": %s, \"eval_bad_lines\": %lld}\n",
            (long long)ev->examples, v[0], v[1], v[2], v[3], (long long)ev->bad_lines);
    if (ev->nan_preds)
        return nan_model(e, c, ev, "its training", "");
    return ev->examples == 0 ? job_noeval(e, c->data.eval, "nothing is scored") : 0;
}

/* What --model and --predictions name, checked before a model loads. */
static int check_eval_args(const struct ss_config *c, const char *dir, const char *predictions,
                           struct ss_err *e)
{
    struct stat st;
    int found = stat(dir, &st) == 0, why = errno;
    if (!found || !S_ISDIR(st.st_mode))
        return ss_fail(e, SS_EINVAL, "--model %s: %s: name a run's directory (or its model/, a "
                       "checkpoint, a checkpoint.dir)", dir,
                       found ? "not a directory" : why == ENOENT ? "no such directory"
                                                             : strerror(why));
    if (!c->data.eval || !*c->data.eval)
        return ss_fail(e, SS_EINVAL, "config: data.eval is empty: nothing to score");
    if (predictions && !*predictions)
        return ss_fail(e, SS_EINVAL, "--predictions needs a file name (or - for standard "
                       "output)");
    if (predictions && strcmp(predictions, "-"))
        return reader_check_output("--predictions", predictions, "data.eval", c->data.eval, e);
    return 0;
}

int trainer_eval_saved(const struct ss_config *c, const char *dir, const char *predictions,
                       struct ss_err *e)
{
    struct saved m = {0};
    FILE *pred = NULL, *say = predictions && !strcmp(predictions, "-") ? stderr : stdout;
    struct eval_result ev;
    char part[4200], src[4400] = "";
    int is_ckpt = 0, rc = check_eval_args(c, dir, predictions, e);
    if (rc == 0 && predictions && !(pred = open_predictions(predictions, part, sizeof part, e)))
        rc = SS_EIO;
    if (rc == 0)
        rc = find_model(dir, src, sizeof src, &is_ckpt, say, e);
    /* the tables' rows as saved (model.rows = auto: theirs), with or
     * without rowwise_adagrad's state float: scoring reads none, so a model
     * of either optim.emb scores */
    struct ss_config cc = *c;
    char *rows = NULL;
    if (rc == 0 && (rc = trainer_rows_auto(c, src, say, &rows, e)) == 0 && rows)
        cc.model.rows = rows;
    int stride = rc == 0 ? embps_saved_stride(src) : 0;
    if (stride == c->model.dim || stride == c->model.dim + 1)
        cc.optim.emb = stride == c->model.dim ? OPT_SGD : OPT_ROWWISE_ADAGRAD;
    if (rc == 0)
        rc = load_saved_model(&m, &cc, src, is_ckpt, say, e);
    struct eval_src s = {.l = &m.l, .emb = m.emb, .hot = m.hot, .n_tr = 1, .is_master = 1};
    if (rc == 0)
        rc = eval_with(&s, &cc, m.w, cc.data.eval, pred, NULL, eval_threads(), &ev, e);
    if (pred) /* whole, or removed */
        rc = close_predictions(pred, predictions, part, rc, e);
    if (rc == 0 && predictions)
        fprintf(say, "# predictions: %lld examples scored into %s\n", (long long)ev.examples,
                strcmp(predictions, "-") ? predictions : "standard output");
    if (rc == 0)
        rc = report_saved_eval(&cc, &ev, say, e);
    saved_free(&m);
    g_free(rows);
    return rc;
}
