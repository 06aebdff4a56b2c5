/* What a run tells: the job's figures (summed over workers, trainers and,
 * in a cluster job, the others' reports), the progress lines, the run
 * directory with its CSVs and metrics.json, and the notes said at start. */
#include "job.h"

/* The rates and NE of f from its counts and ne (f->elapsed set). */
static void derive(struct figures *f, const struct ne_acc *ne)
{
    f->eps = f->elapsed > 0 ? f->examples / f->elapsed : 0;
    f->train_ne = ne_value(ne);
    f->train_logloss = ne_logloss(ne);
    f->syncs_per_s = f->elapsed > 0 ? f->syncs / f->elapsed : 0;
    f->sync_gap = f->syncs ? (double)f->iterations / f->syncs : NAN;
    f->ne = *ne;
}

/* Adds trainer t's counts of this run to f and ne. */
static void add_trainer(struct job *j, int t, struct figures *f, struct ne_acc *ne)
{
    struct trainer *tr = &j->tr[t];
    for (int k = 0; k < j->n_wk; k++) {
        struct worker *wk = &tr->workers[k];
        pthread_mutex_lock(&wk->mu);
        f->examples += wk->examples;
        f->iterations += wk->iterations;
        ne_merge(ne, &wk->ne);
        pthread_mutex_unlock(&wk->mu);
    }
    f->syncs += j->kept_resumed ? 0 : tr->shadow ? shadow_syncs(tr->shadow) : tr->syncs;
}

void job_collect(struct job *j, struct figures *f)
{
    memset(f, 0, sizeof *f);
    struct ne_acc ne = j->base.ne;
    f->examples = j->base.examples;
    f->iterations = j->base.iterations;
    f->syncs = j->base.syncs;
    for (int t = 0; t < j->n_tr; t++)
        add_trainer(j, t, f, &ne);
    f->elapsed = ss_now() - j->t0;
    derive(f, &ne);
}

/* A cluster job: the figures over every trainer's latest report (env->beat);
 * returns 1 once every other trainer's data has ended. */
static int beat_figures(struct job *j, struct figures *f, int final)
{
    double weight = j->reader ? reader_share_bytes(j->reader) : 0;
    double run = (double)(f->examples - j->base.examples), el = ss_now() - j->start;
    int known = final || (el >= 0.5 && run > 0); /* its pace: over half a second at least */
    double mine[3] = {known && !final ? run / el : 0, final ? run : 0, known};
    double v[BEAT_FIGS] = {(double)f->examples, (double)f->iterations, (double)f->syncs,
                           f->ne.loss_sum, f->ne.label_sum, (double)f->ne.n,
                           ss_halt_signal() != 0,
                           j->reader ? reader_fraction(j->reader) * weight : 0,
                           mine[0], mine[1], mine[2], weight,
                           ss_now() - j->t0 - j->base.elapsed};
    int all = j->env->beat(j->env->arg, v, final, j->tr_each);
    if (v[6] > 0) /* a trainer was stopped: every one stops */
        ss_halt_request();
    if (j->reader && v[11] > 0) /* each its share of the files: how far they are together */
        j->frac_all = v[7] / v[11];
    /* The rates' clock (job_worker_main): the job's examples now over this
     * trainer's, the others' extrapolated at their pace (their reports are
     * up to an interval old), an ended one's as it ended; once every other
     * one has reported a pace. Shares of other sizes or paces then keep the
     * job's count, where count x its own place would not. */
    if (j->reader && j->sched_on && !final && known && v[10] - mine[2] >= j->env->count - 1) {
        double r = (run + (v[8] - mine[0]) * el + (v[9] - mine[1])) / run;
        __atomic_store(&j->sched_ratio, &r, __ATOMIC_RELAXED);
    }
    f->examples = (int64_t)v[0], f->iterations = (int64_t)v[1], f->syncs = (int64_t)v[2];
    struct ne_acc ne = {v[3], v[4], (int64_t)v[5]};
    derive(f, &ne);
    return all;
}

/* The progress line of the job (in a cluster job, over every trainer: the
 * others' reports are taken in here, so every trainer calls it); final: this
 * trainer's data has ended. Returns 1 once every other trainer's has. */
/* A sync gap for a line ("-" before any sync, as with sync.algo = none;
 * csv: an empty field). */
/* A figure in fmt, or "-" (the CSV: nothing) where it is NAN (not known,
 * or of no example yet). */
static const char *num_text(double v, int csv, const char *fmt, char buf[32])
{
    if (isnan(v))
        snprintf(buf, 32, "%s", csv ? "" : "-");
    else
        snprintf(buf, 32, fmt, v);
    return buf;
}

static const char *gap_text(double gap, int csv, char buf[32])
{
    return num_text(gap, csv, csv ? "%.4f" : "%.2f", buf);
}

/* How far through data.train the job is (NAN: not known here): its own
 * reader's place (the trainers' mean, where each reads its share), or the
 * reader services' (the first seen starts the pace; a resumed job's start
 * is past 0). */
static double done_fraction(struct job *j)
{
    if (j->reader)
        return j->env && j->env->beat ? j->frac_all : reader_fraction(j->reader);
    if (!j->env || !j->env->feed)
        return NAN;
    double f = feed_fraction(j->env->feed);
    if (j->frac0 < 0 && f > 0)
        j->frac0 = f, j->start = ss_now();
    return f;
}

/* f as a line's "  done 12.3%  eta 4m05s" (the time left at this run's
 * pace; none before it has moved), or the fraction alone for the csv;
 * empty where f is not known. */
static const char *done_text(struct job *j, double f, int csv, char buf[64])
{
    buf[0] = 0;
    if (isnan(f))
        return buf;
    double t = ss_now() - j->start;
    if (csv) {
        snprintf(buf, 64, "%.4f", f);
        return buf;
    }
    int n = snprintf(buf, 64, "  done %.1f%%", 100 * f);
    if (j->frac0 >= 0 && f > j->frac0 && f < 1 && t > 0 && !ss_halt_signal()) { /* stopped: none */
        double left = t * (1 - f) / (f - j->frac0);
        long s = left < 3.6e7 ? (long)(left + 0.5) : 36000000L;
        if (s >= 3600)
            snprintf(buf + n, 64 - (size_t)n, "  eta %ldh%02ldm", s / 3600, s / 60 % 60);
        else if (s >= 60)
            snprintf(buf + n, 64 - (size_t)n, "  eta %ldm%02lds", s / 60, s % 60);
        else
            snprintf(buf + n, 64 - (size_t)n, "  eta %lds", s);
    }
    return buf;
}

/* A report file's buffered lines written (close: and the file closed) on
 * the process's writer, so that a hung output.dir holds no stop; a
 * stream a stop gave up is dropped (NULL). */
static void csv_flush(const struct job *j, FILE **f, const char *name, int close)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", j->c->output.dir, name);
    ss_file_flush(f, p, close);
}

void job_close_csvs(struct job *j)
{
    csv_flush(j, &j->csv, "progress.csv", 1);
    csv_flush(j, &j->eval_csv, "eval.csv", 1);
    csv_flush(j, &j->tr_csv, "trainers.csv", 1);
}

/* trainers.csv: a row for each trainer with figures new since its last
 * row (a cluster job's as its reports came, on its own clock; in one
 * process, every trainer's now), over this run's counts and seconds. */
static void trainer_rows(struct job *j)
{
    int count = j->env ? j->env->count : j->n_tr;
    for (int t = 0; j->tr_csv && t < count; t++) {
        struct figures f = {0};
        struct ne_acc ne = {0};
        double run = ss_now() - j->t0 - j->base.elapsed;
        if (j->env) { /* the master's own report holds a resumed run's figures */
            const double *v = j->tr_each + (size_t)t * BEAT_FIGS;
            int own = t == j->env->index;
            f.examples = (int64_t)v[0] - (own ? j->base.examples : 0);
            f.iterations = (int64_t)v[1] - (own ? j->base.iterations : 0);
            f.syncs = (int64_t)v[2] - (own ? j->base.syncs : 0);
            ne = (struct ne_acc){v[3], v[4], (int64_t)v[5]};
            if (own)
                ne = (struct ne_acc){ne.loss_sum - j->base.ne.loss_sum,
                                     ne.label_sum - j->base.ne.label_sum, ne.n - j->base.ne.n};
            run = v[BEAT_CLOCK];
        } else {
            add_trainer(j, t, &f, &ne);
        }
        if (run <= j->tr_seen[t]) /* none yet, or nothing new */
            continue;
        j->tr_seen[t] = run;
        f.elapsed = run;
        derive(&f, &ne);
        char gap[32], nes[32];
        fprintf(j->tr_csv, "%.3f,%d,%lld,%.1f,%s,%.3f,%s\n", j->base.elapsed + run, t,
                (long long)f.examples, f.eps, num_text(f.train_ne, 1, "%.6f", nes),
                f.syncs_per_s, gap_text(f.sync_gap, 1, gap));
    }
    csv_flush(j, &j->tr_csv, "trainers.csv", 0);
}

int job_progress(struct job *j, int final, int print)
{
    struct figures f;
    job_collect(j, &f);
    int all = j->env && j->env->beat ? beat_figures(j, &f, final) : 1;
    j->seen = f.examples;
    if (!j->is_master || !print)
        return all;
    char gap[32], ne[32], done[64], rate[32] = "";
    double frac = done_fraction(j);
    if (j->sched_on) /* the rates' factor at the job's count (a cluster job's: as beaten) */
        snprintf(rate, sizeof rate, "  lr x%.3g", optim_lr_scale(j->c, f.examples));
    if (!j->c->output.quiet)
        printf("[%8.1fs] examples %lld  eps %.0f  train_ne %s  syncs/s %.1f  sync_gap %s%s%s\n",
               f.elapsed, (long long)f.examples, f.eps, num_text(f.train_ne, 0, "%.4f", ne),
               f.syncs_per_s,
               gap_text(f.sync_gap, 0, gap), rate, done_text(j, frac, 0, done));
    fflush(stdout);
    if (j->csv) {
        fprintf(j->csv, "%.3f,%lld,%.1f,%s,%.3f,%s,", f.elapsed, (long long)f.examples, f.eps,
                num_text(f.train_ne, 1, "%.6f", ne), f.syncs_per_s, gap_text(f.sync_gap, 1, gap));
        fprintf(j->csv, "%s\n", done_text(j, frac, 1, done));
        csv_flush(j, &j->csv, "progress.csv", 0);
    }
    trainer_rows(j);
    return all;
}

/* The rates' schedule, said at start: where it is, and what it does. */
static void schedule_note(const struct job *j)
{
    const struct ss_config *c = j->c;
    printf("# learning rates x%.3g at %lld examples:", optim_lr_scale(c, j->sched_base),
           (long long)j->sched_base);
    if (c->optim.warmup_examples)
        printf(" up over the first %lld;", (long long)c->optim.warmup_examples);
    if (c->optim.decay_examples)
        printf(" down to x%g over %lld from %lld;", c->optim.decay_to,
               (long long)c->optim.decay_examples, (long long)c->optim.decay_start);
    if (j->sched_times > 1)
        printf(" counted as %d trainers x each one's place in its share, until their "
               "progress reports give the job's count\n", j->sched_times);
    else if (j->env && j->env->feed)
        printf(" counted over the examples the reader services have handed out\n");
    else
        printf(" counted over the job's examples\n");
}

/* The files a run writes at its end in its directory, the model's (the
 * first MODEL_FILES) first. */
static const char *const run_end_files[] = {"model/tables*.bin", "model/dense.bin",
                                            "model/hot.bin",     "model/hot-rows.bin",
                                            "metrics.json",      "roles.json",
                                            "placement.txt",     "placement.json"};

/* Removes the first n of run_end_files in dir (remove = 1), or sums their
 * bytes. */
double job_stale_files(const char *dir, int n, int remove)
{
    char p[4200];
    double bytes = 0;
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, run_end_files[i]);
        glob_t g;
        struct stat st;
        if (glob(p, 0, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc; k++)
                if (remove)
                    unlink(g.gl_pathv[k]);
                else if (stat(g.gl_pathv[k], &st) == 0)
                    bytes += (double)st.st_size;
            globfree(&g);
        }
    }
    return bytes;
}

int job_open_run_dir(struct job *j, struct ss_err *e)
{
    const char *dir = j->c->output.dir;
    if (!*dir)
        return ss_fail(e, SS_EINVAL, "config: output.dir is empty: name the run directory");
    int rc = ss_mkdir_p(dir, e);
    if (rc < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return ss_fail(e, rc, "output.dir: %s", why);
    }
    char p[4096];
    if ((rc = ss_dir_lock("output.dir", dir, ".run.lock", e)) < 0) /* two mixed their files */
        return rc;
    snprintf(p, sizeof p, "%s/config.ini", dir);
    if ((rc = ss_config_save(j->c, p, e)) < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg); /* e->msg is written below */
        return ss_fail(e, SS_EIO, "output.dir = %s is not writable: %s", dir, why);
    }
    return 0;
}

/* An earlier run's files must not pass for this run's: its model (tables
 * of another count of PSs or trainers, hot rows this run may not have:
 * eval would load them with this run's), what it wrote at its end (a run
 * that fails writes none), and its plan where this run makes none (a
 * cluster job's master and one-process DES wrote theirs already). Once
 * the run has started well: a resume refused keeps the earlier model. */
void job_clear_stale(struct job *j)
{
    int planned = j->env || j->c->embedding.placement == EMB_ON_TRAINERS;
    job_stale_files(j->c->output.dir, planned ? 6 : 8, 1);
}

/* dir/name for the run's rows under header. A resumed run's file goes on
 * from the checkpoint: the earlier run's rows up to its examples (column
 * col) are kept, those past it (trained after it, then lost) dropped. */
static FILE *csv_open(const char *dir, const char *name, const char *header, int col,
                      double upto, int64_t *last_at, off_t *last_off, struct ss_err *e)
{
    char p[4200], tmp[4300], *line = NULL;
    size_t cap = 0;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *out = fopen(tmp, "w"), *old = upto >= 0 && out ? fopen(p, "r") : NULL;
    if (!out) {
        ss_fail(e, SS_EIO, "%s: cannot write: %s", tmp, strerror(errno));
        return NULL;
    }
    fputs(header, out);
    for (int first = 1; old && getline(&line, &cap, old) > 0; first = 0) {
        if (first && strcmp(line, header)) /* another layout: none kept */
            break;
        const char *f = line;
        for (int k = 0; k < col && f; k++)
            if ((f = strchr(f, ',')))
                f++;
        double at = f ? strtod(f, NULL) : 0;
        if (!first && f && at <= upto && strchr(line, '\n')) {
            if (last_at) /* (where the last kept row starts, and its figure) */
                *last_at = (int64_t)at, *last_off = ftello(out);
            fputs(line, out);
        }
    }
    free(line);
    if (old)
        fclose(old);
    if (fflush(out) != 0 || rename(tmp, p) != 0) {
        ss_fail(e, SS_EIO, "%s: cannot write: %s", p, strerror(errno));
        fclose(out);
        unlink(tmp);
        return NULL;
    }
    return out;
}

/* progress.csv, trainers.csv with several trainers, and eval.csv when
 * there is eval data (after a resume's checkpoint is loaded: j->base). */
int job_open_csvs(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int64_t upto = j->resumed_from[0] ? j->base.examples : -1;
    /* the rows of output.dir go on only where they are the checkpoint's run's: a resume
     * into another run's directory starts them anew (it spliced the two runs' curves) */
    char p[4200];
    snprintf(p, sizeof p, "%s/run.id", c->output.dir);
    double there = -1;
    FILE *f = fopen(p, "r");
    if (f) {
        if (fscanf(f, "%lf", &there) != 1)
            there = -1;
        fclose(f);
    }
    if (upto >= 0 && j->run_id != 0 && there != j->run_id) {
        upto = -1;
        if (!c->output.quiet)
            printf("# %s/progress.csv%s: not of the checkpoint's run, started anew\n",
                   c->output.dir, c->data.eval && *c->data.eval ? " and eval.csv" : "");
    }
    if (j->run_id == 0) { /* a fresh run's, or one resumed from a checkpoint without one */
        uint64_t s = (uint64_t)(ss_now() * 1e6) ^ (uint64_t)getpid() << 32;
        j->run_id = (double)(ss_splitmix(&s) >> 12 | 1); /* 52 bits, exact in a double */
    }
    if ((f = fopen(p, "w"))) {
        fprintf(f, "%.0f\n", j->run_id);
        fclose(f);
    }
    j->csv = csv_open(c->output.dir, "progress.csv",
                      "elapsed_s,examples,eps,train_ne,syncs_per_s,sync_gap,done\n", 1, upto,
                      NULL, NULL, e);
    if (!j->csv)
        return SS_EIO;
    int count = j->env ? j->env->count : j->n_tr;
    snprintf(p, sizeof p, "%s/trainers.csv", c->output.dir);
    if (count > 1) { /* a resume's rows up to its checkpoint's seconds */
        j->tr_csv = csv_open(c->output.dir, "trainers.csv", "elapsed_s,trainer,examples,eps,"
                             "train_ne,syncs_per_s,sync_gap\n", 0, upto < 0 ? -1 :
                             j->base.elapsed, NULL, NULL, e);
        if (!j->tr_csv)
            return SS_EIO;
        j->tr_seen = ss_xcalloc(count, sizeof *j->tr_seen);
        if (j->env)
            j->tr_each = ss_xcalloc((size_t)count * BEAT_FIGS, sizeof *j->tr_each);
    } else if (upto < 0) {
        unlink(p);
    }
    if (!c->data.eval || !*c->data.eval) { /* an earlier run's rows are not this one's */
        snprintf(p, sizeof p, "%s/eval.csv", c->output.dir);
        if (upto < 0)
            unlink(p);
        return 0;
    }
    /* a row of this run at the examples of the earlier run's last replaces it (a
     * resume that trained nothing scores the same count again) */
    j->eval_last_off = -1;
    j->eval_csv = csv_open(c->output.dir, "eval.csv",
                           "examples,elapsed_s,eval_examples,eval_ne,eval_logloss,eval_auc,"
                           "eval_calibration\n", 0, upto, &j->eval_last_at, &j->eval_last_off, e);
    return j->eval_csv ? 0 : SS_EIO;
}

/* An OPENBLAS_CORETYPE from the environment is kept (some machines set it
 * because other kernels misbehave there), but a user should know when it
 * holds an AVX-512 CPU to a kernel without AVX-512: on this project's AMD
 * machines, Haswell trained 1.4-1.6x slower than SkylakeX (docs/benchmarks.md). */
static int blas_kernel_below_cpu(const char *core)
{
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (strcasecmp(core, avx512[i]) == 0)
            return 0;
    return ss_cpu_has_avx512();
}

static void blas_note(const struct ss_config *c, const struct model_layout *l)
{
    openblas_set_num_threads(1);
    if (c->output.quiet)
        return;
    if (c->trainer.device == DEV_CPU)
        printf("# dense: %s, %s, 1 thread per worker\n",
               l->backend == DENSE_ONEDNN ? "oneDNN" : "OpenBLAS",
               l->precision == PREC_BF16 ? "bf16 matmuls (fp32 accumulation and master weights)"
                                         : "fp32");
    const char *core = openblas_get_corename(), *env = getenv("OPENBLAS_CORETYPE");
    printf("# blas: OpenBLAS %s kernel, 1 thread per worker\n", core);
    if (env && *env && blas_kernel_below_cpu(core))
        printf("# blas: OPENBLAS_CORETYPE=%s from the environment is kept; this CPU has AVX-512, "
               "where the SkylakeX kernel is usually much faster (unset it, or set SkylakeX, "
               "if that kernel works here)\n", env);
}

/* The hot clients' and caches' figures, summed over every worker (all
 * have ended). */
void job_client_figures(struct job *j, struct figures *f)
{
    for (int t = 0; t < j->n_tr; t++)
        for (int k = 0; k < j->n_wk; k++) {
            hot_stats_add(&f->hot, &j->tr[t].workers[k].hot);
            cache_stats_add(&f->cache, &j->tr[t].workers[k].cache);
            des_stats_add(&f->des, &j->tr[t].workers[k].des);
        }
}

static double share(int64_t part, int64_t whole)
{
    return whole > 0 ? (double)part / (double)whole : NAN;
}

/* A share as a percentage for a line ("-" of nothing: a resume that
 * trained nothing). */
static const char *pct(char buf[24], int64_t part, int64_t whole, int digits)
{
    if (whole > 0)
        snprintf(buf, 24, "%.*f %%", digits, 100 * share(part, whole));
    else
        snprintf(buf, 24, "-");
    return buf;
}

static void print_cache(const struct cache_stats *k)
{
    char a[24], b[24];
    printf("cache: hits %s  rows fetched %lld  refreshed %lld  deltas pushed %lld  "
           "uncached %s  wire MB %.1f of %.1f\n", pct(a, k->hits, k->lookups, 1),
           (long long)k->fetched, (long long)k->refreshed, (long long)k->rows_pushed,
           pct(b, k->uncached, k->lookups, 2), k->bytes_sent / 1e6, k->bytes_plain / 1e6);
}

static void print_des(const struct des_stats *d)
{
    printf("des: rounds %lld  lookups %lld  pushes %lld  wire MB %.1f (the rows would be %.1f)  "
           "in the exchange %.1f s\n", (long long)d->rounds, (long long)d->lookups,
           (long long)d->pushes, d->bytes_sent / 1e6, d->bytes_rows / 1e6, d->wait_s);
}

static void print_hot(const struct job *j, const struct hot_stats *h)
{
    char a[24], b[24];
    printf("hot: rows %lld  lookups %s  examples without the tables %s  batches "
           "without them %lld of %lld  wire MB saved %.1f\n", (long long)j->hot->n,
           pct(a, h->hot_lookups, h->lookups, 1), pct(b, h->hot_examples, h->examples, 1),
           (long long)h->ps_skipped, (long long)h->batches, h->bytes_saved / 1e6);
}

static void json_num(FILE *f, const char *k, double v, int last)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 9007199254740992.0) /* a count: exact */
        fprintf(f, "  \"%s\": %.0f%s\n", k, v, last ? "" : ",");
    else if (isfinite(v))
        fprintf(f, "  \"%s\": %.8g%s\n", k, v, last ? "" : ",");
    else
        fprintf(f, "  \"%s\": null%s\n", k, last ? "" : ",");
}

int job_write_metrics(struct job *j, const struct figures *f, const struct eval_result *ev,
                      const struct reader_stats *rs, struct ss_err *e)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/metrics.json", j->c->output.dir);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len); /* written on the writer: a stop gives it up */
    if (!out)
        return ss_fail(e, SS_ENOMEM, "%s: %s", p, strerror(errno));
    fprintf(out, "{\n");
    json_num(out, "examples", (double)f->examples, 0);
    json_num(out, "seconds", f->elapsed, 0);
    json_num(out, "eps", f->eps, 0);
    json_num(out, "train_ne", f->train_ne, 0);
    json_num(out, "train_logloss", f->train_logloss, 0);
    json_num(out, "eval_ne", ev->ne, 0);
    json_num(out, "eval_logloss", ev->logloss, 0);
    json_num(out, "eval_auc", ev->auc, 0);
    json_num(out, "eval_calibration", ev->calibration, 0);
    json_num(out, "eval_examples", (double)ev->examples, 0);
    json_num(out, "eval_bad_lines", (double)ev->bad_lines, 0);
    json_num(out, "eval_seconds", j->eval_s, 0);
    json_num(out, "eval_threads", j->eval_threads, 0);
    json_num(out, "syncs", (double)f->syncs, 0);
    json_num(out, "avg_sync_gap", f->sync_gap, 0);
    json_num(out, "replica_spread", f->spread, 0);
    json_num(out, "iterations", (double)f->iterations, 0);
    json_num(out, "bad_lines", (double)rs->bad_lines, 0);
    json_num(out, "checkpoints", (double)j->checkpoints, 0);
    json_num(out, "checkpoint_failures", (double)j->checkpoint_failures, 0);
    json_num(out, "epochs", j->c->data.epochs, 0);
    json_num(out, "lr_scale", optim_lr_scale(j->c, f->examples), 0); /* the rates' factor at the end */
    if (j->resumed_from[0])
        fprintf(out, "  \"resumed_from\": \"%s\",\n", j->resumed_from);
    if (ss_halt_signal()) /* stopped by a signal, maybe before the end of data.train */
        fprintf(out, "  \"stopped_by\": \"%s\",\n", ss_halt_name());
    /* where the workers' time went, summed over them: reading batches, the
     * embedding lookup, the dense half (on the CPU or the device), the push */
    static const char *const part[4] = {"worker_read_s", "worker_lookup_s", "worker_dense_s",
                                        "worker_push_s"};
    for (int p = 0; p < 4; p++) {
        double sum = 0;
        for (int t = 0; t < j->n_tr; t++)
            for (int k = 0; k < j->n_wk; k++) /* the workers have ended */
                sum += j->tr[t].workers[k].t_part[p];
        json_num(out, part[p], sum, 0);
    }
    json_num(out, "dense_params", (double)j->l.n_params, 0);
    struct hot_stats h = f->hot; /* hot embeddings: all zero without them */
    json_num(out, "hot_rows", j->hot ? (double)j->hot->n : 0, 0);
    json_num(out, "hot_lookup_share", j->hot ? share(h.hot_lookups, h.lookups) : 0, 0);
    json_num(out, "hot_example_share", j->hot ? share(h.hot_examples, h.examples) : 0, 0);
    json_num(out, "hot_batches_without_tables", (double)h.ps_skipped, 0);
    json_num(out, "hot_bytes_saved", h.bytes_saved, 0);
    const struct cache_stats *k = &f->cache; /* the embedding cache: zero without it */
    int on = j->c->embedding_cache.rows > 0;
    int64_t crows = j->c->embedding_cache.rows > 0 ? emb_cache_rows(j->c, &j->l) : 0;
    json_num(out, "cache_rows_per_worker", /* as made: capped, in whole sets of 8 */
             (double)((crows + 7) / 8 * 8), 0);
    json_num(out, "cache_hit_rate", on ? share(k->hits, k->lookups) : 0, 0);
    json_num(out, "cache_uncached_share", on ? share(k->uncached, k->lookups) : 0, 0);
    json_num(out, "cache_rows_fetched", (double)k->fetched, 0);
    json_num(out, "cache_rows_refreshed", (double)k->refreshed, 0);
    json_num(out, "cache_deltas_pushed", (double)k->rows_pushed, 0);
    json_num(out, "cache_bytes_sent", k->bytes_sent, 0);
    json_num(out, "cache_bytes_saved", k->bytes_plain - k->bytes_sent, 0);
    const struct des_stats *d = &f->des; /* DES: zero without it */
    json_num(out, "des_rounds", (double)d->rounds, 0);
    json_num(out, "des_bytes_sent", d->bytes_sent, 0);
    json_num(out, "des_bytes_rows", d->bytes_rows, 0);
    json_num(out, "des_exchange_s", d->wait_s, 0);
    double eb = j->tables ? (double)embps_bytes(j->tables) : j->shards ? 0 : NAN;
    for (int t = 0; j->shards && t < j->n_tr; t++)
        eb += j->shards[t] ? (double)embps_bytes(j->shards[t]) : 0;
    json_num(out, "embedding_bytes", eb, 0);
    fprintf(out, "  \"embedding_placement\": \"%s\",\n", j->des ? "trainers" : "ps");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    json_num(out, "peak_rss_mb", ru.ru_maxrss / 1024.0, 0);
    fprintf(out, "  \"sync_algo\": \"%s\",\n", j->c->sync.algo);
    fprintf(out, "  \"sync_mode\": \"%s\",\n",
            j->c->sync.mode == SYNC_FOREGROUND ? "foreground" : "shadow");
    fprintf(out, "  \"blas_kernel\": \"%s\",\n", openblas_get_corename());
    fprintf(out, "  \"dense_backend\": \"%s\",\n", j->l.backend == DENSE_ONEDNN ? "onednn" : "openblas");
    fprintf(out, "  \"precision\": \"%s\",\n", j->l.precision == PREC_BF16 ? "bf16" : "fp32");
    fprintf(out, "  \"dense_kernels\": \"%s\",\n", j->dense_desc);
    json_num(out, "trainers", j->env ? j->env->count : j->n_tr, 0);
    json_num(out, "worker_threads", j->n_wk, 1);
    fprintf(out, "}\n");
    fclose(out);
    struct ss_span whole = {text, len};
    return ss_write_file(p, &whole, 1, 0, text, e);
}

/* A NaN printed as "nan", not glibc's "-nan" for one of sign bit set. */
static double fabs_nan(double v)
{
    return isnan(v) ? fabs(v) : v;
}

void job_print_eval_to(FILE *f, const char *what, const struct eval_result *ev)
{
    fprintf(f, "%s: examples %lld  ne %.5f  logloss %.5f  auc %.5f  calibration %.4f", what,
            (long long)ev->examples, fabs_nan(ev->ne), fabs_nan(ev->logloss), fabs_nan(ev->auc),
            fabs_nan(ev->calibration));
    if (ev->bad_lines)
        fprintf(f, "  bad_lines %lld", (long long)ev->bad_lines);
    if (ev->nan_preds)
        fprintf(f, "  nan_predictions %lld", (long long)ev->nan_preds);
    fputc('\n', f);
}

void job_print_eval(const char *what, const struct eval_result *ev)
{
    job_print_eval_to(stdout, what, ev);
}

/* A row of eval.csv: the examples trained when the model was copied, the
 * run's seconds then, and the eval's figures. */
void job_eval_row(struct job *j, int64_t at, double elapsed, const struct eval_result *ev)
{
    if (!j->eval_csv)
        return;
    /* a mid-run eval of a copy taken at the end's own count, which ended
     * before the end could drop it: the end-of-run eval's row replaces it */
    if (at == j->eval_last_at && j->eval_last_off >= 0 && fflush(j->eval_csv) == 0 &&
        ftruncate(fileno(j->eval_csv), j->eval_last_off) == 0)
        fseeko(j->eval_csv, j->eval_last_off, SEEK_SET);
    j->eval_last_at = at;
    j->eval_last_off = ftello(j->eval_csv);
    char v[4][32]; /* empty where a figure is undefined (eval data of one class) */
    fprintf(j->eval_csv, "%lld,%.3f,%lld,%s,%s,%s,%s\n", (long long)at, elapsed,
            (long long)ev->examples, num_text(ev->ne, 1, "%.6f", v[0]),
            num_text(ev->logloss, 1, "%.6f", v[1]), num_text(ev->auc, 1, "%.6f", v[2]),
            num_text(ev->calibration, 1, "%.6f", v[3]));
    csv_flush(j, &j->eval_csv, "eval.csv", 0);
}

/* Cluster job: the figures of every trainer, summed onto each. */
void job_sum_over_trainers(struct job *j, struct figures *f, struct reader_stats *rs)
{
    struct ne_acc ne = f->ne; /* with a resumed run's figures, on the master */
    struct hot_stats *h = &f->hot;
    struct cache_stats *k = &f->cache;
    struct des_stats *d = &f->des;
    double v[28] = {(double)f->examples, (double)f->iterations, (double)f->syncs, ne.loss_sum,
                    ne.label_sum, (double)ne.n, (double)rs->bad_lines, (double)h->batches,
                    (double)h->ps_skipped, (double)h->examples, (double)h->hot_examples,
                    (double)h->lookups, (double)h->hot_lookups, h->bytes_saved,
                    (double)k->lookups, (double)k->hits, (double)k->fetched, (double)k->refreshed,
                    (double)k->uncached, (double)k->rows_pushed, k->bytes_plain, k->bytes_sent,
                    (double)d->rounds, (double)d->lookups, (double)d->pushes, d->bytes_sent,
                    d->bytes_rows, d->wait_s}; /* a stop came with the beats, or too late */
    j->env->sum(j->env->arg, v, 28);
    *h = (struct hot_stats){(int64_t)v[7], (int64_t)v[8], (int64_t)v[9], (int64_t)v[10],
                            (int64_t)v[11], (int64_t)v[12], v[13]};
    *k = (struct cache_stats){(int64_t)v[14], (int64_t)v[15], (int64_t)v[16], (int64_t)v[17],
                              (int64_t)v[18], (int64_t)v[19], v[20], v[21]};
    *d = (struct des_stats){(int64_t)v[22], (int64_t)v[23], (int64_t)v[24], v[25], v[26], v[27]};
    f->examples = (int64_t)v[0];
    f->iterations = (int64_t)v[1];
    f->syncs = (int64_t)v[2];
    ne = (struct ne_acc){v[3], v[4], (int64_t)v[5]};
    rs->bad_lines = (int64_t)v[6];
    derive(f, &ne);
}

/* The larger of a and b, NaN if either is. */
static double max_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* How far the trainers' dense replicas are apart at the end: the largest
 * |w_t[i] - w_0[i]| over trainers t and parameters i (0: they hold one
 * model; NaN if any is NaN). Collective in a cluster job. */
double job_replica_spread(struct job *j)
{
    size_t n = j->n_sync;
    int count = j->env ? j->env->count : j->n_tr;
    double spread = 0;
    if (count < 2)
        return 0;
    float *w0 = j->tr[0].w;
    if (j->env) { /* trainer 0's vector on every trainer: x + 0 + ... + 0 is x */
        w0 = ss_aligned(n * sizeof(float));
        if (j->env->index == 0)
            memcpy(w0, j->tr[0].w, n * sizeof(float));
        else
            memset(w0, 0, n * sizeof(float));
        j->env->sum_floats(j->env->arg, w0, n);
    }
    for (int t = 0; t < j->n_tr; t++)
        for (size_t i = 0; i < n; i++)
            spread = max_nan(spread, fabs((double)j->tr[t].w[i] - w0[i]));
    if (j->env) { /* the largest over the trainers: each sends its own in its slot */
        free(w0);
        double *v = ss_xcalloc(count, sizeof *v);
        v[j->env->index] = spread;
        j->env->sum(j->env->arg, v, count);
        spread = 0;
        for (int t = 0; t < count; t++)
            spread = max_nan(spread, v[t]);
        free(v);
    }
    return spread;
}

/* The notes said at start, on the master: the embedding cache, the dense
 * backend and BLAS kernel, the training's shape, the rates' schedule, and
 * sync settings that do nothing in this job. */
void job_start_notes(struct job *j)
{
    const struct ss_config *c = j->c;
    int trainers = j->env ? j->env->count : j->n_tr, say = j->is_master && !c->output.quiet;
    if (c->embedding_cache.rows > 0 && say) {
        int64_t rows = emb_cache_rows(c, &j->l);
        double each = emb_cache_bytes(c, &j->l);
        printf("# embedding cache: %lld rows per worker thread (%.1f MB each%s), "
               "staleness %d\n", (long long)rows, each / 1048576,
               rows < c->embedding_cache.rows ? ": twice every table's rows, the most that "
               "raises its hits" : "", c->embedding_cache.staleness);
    }
    int copies = trainers * j->n_wk; /* caches that train one row apart */
    if (c->embedding_cache.rows > 0 && c->embedding_cache.staleness > 100 && copies > 1 &&
        j->is_master)
        fprintf(stderr, "shadowsync: warning: embedding_cache.staleness = %d with %d worker "
                "caches: copies that far behind train apart, and their deltas add up at the "
                "PS (in a sweep 1000000 scored an eval NE of 1.85 against 0.96); a few updates "
                "(the default 2) keep them close\n", c->embedding_cache.staleness, copies);
    blas_note(c, &j->l);
    if (say)
        printf("# training: %d trainer(s) x %d worker(s), sync %s/%s, %zu dense params, "
               "%d tables\n", trainers, j->n_wk, c->sync.algo,
               c->sync.mode == SYNC_FOREGROUND ? "foreground" : "shadow", j->l.n_params,
               j->l.n_tables);
    if (j->sched_on && say)
        schedule_note(j);
    if (say)
        sync_config_notes(c, trainers, stdout);
}

/* The train line of the run's end, with the notes and figures beside it
 * (a resume that had nothing left, bad lines, hot rows, cache, DES). */
void job_end_notes(struct job *j, const struct figures *f, const struct reader_stats *rs)
{
    const struct ss_config *c = j->c;
    int nothing = j->resumed_from[0] && f->examples == j->base.examples && !c->output.quiet;
    if (nothing && c->data.max_examples > 0 && f->examples >= c->data.max_examples)
        printf("# nothing left to train: %s had trained %lld examples, at or past "
               "data.max_examples = %lld (raise it to train on); the train figures are its\n",
               j->resumed_from, (long long)f->examples, (long long)c->data.max_examples);
    else if (nothing)
        printf("# nothing left to train: %s had trained on all of data.train (%lld examples); "
               "the train figures are its\n", j->resumed_from, (long long)f->examples);
    char gap[32];
    printf("train: examples %lld  seconds %.2f  eps %.0f  train_ne %.5f  syncs %lld  "
           "sync_gap %s  bad_lines %lld\n", (long long)f->examples, f->elapsed, f->eps,
           f->train_ne, (long long)f->syncs, gap_text(f->sync_gap, 0, gap),
           (long long)rs->bad_lines);
    fflush(stdout); /* seen before the eval, which may take a while */
    /* both the job's so far: a resumed reader's bad lines go on from its checkpoint's */
    reader_warn_bad_share("data.train", c->data.train, rs->bad_lines, f->examples,
                          c->data.report_bad_lines);
    if (j->hot)
        print_hot(j, &f->hot);
    if (c->embedding_cache.rows > 0)
        print_cache(&f->cache);
    if (j->des)
        print_des(&f->des);
}

/* A run stopped by a signal says how it goes on (and fails where nothing
 * can continue it); one whose final checkpoint failed never ends as a
 * success with its last checkpoint missing. */
int job_stop_message(struct job *j, const struct figures *f, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    const char *ck = c->checkpoint.dir;
    if (!ss_halt_signal() && j->final_ckpt_failed)
        return ss_fail(e, SS_EIO, "the run's final checkpoint could not be written (above): its "
                       "model is saved in %s/model, but checkpoint.dir = %s %s", c->output.dir,
                       ck, j->checkpoints || j->resumed_from[0]
                           ? "holds an earlier one only (a --resume trains again from there)"
                           : "holds none");
    if (!ss_halt_signal())
        return 0;
    fflush(stdout);
    if (j->model_lost && (!ck[0] || (j->final_ckpt_failed && !j->checkpoints &&
                                     !j->resumed_from[0])))
        return ss_fail(e, SS_EIO, "stopped (%s) after %lld examples, but neither %s nor the "
                       "model could be written (above): nothing of this run is kept",
                       ss_halt_name(), (long long)f->examples,
                       ck[0] ? "a checkpoint" : "a checkpoint (no checkpoint.dir)");
    if (ck[0] && j->final_ckpt_failed && !j->checkpoints && !j->resumed_from[0])
        return ss_fail(e, SS_EIO, "stopped (%s) after %lld examples, but no checkpoint could "
                       "be written (the final one failed, above): no resume can continue "
                       "this run (its model so far: %s/model)", ss_halt_name(),
                       (long long)f->examples, c->output.dir);
    if (ck[0])
        fprintf(stderr, "shadowsync: stopped (%s) after %lld examples: `%s CONFIG ... "
                "--resume` continues from checkpoint.dir = %s%s\n", ss_halt_name(),
                (long long)f->examples, rpc_under_mpirun() ? "tools/submit" : "shadowsync train",
                ck, j->final_ckpt_failed ? ", its last good checkpoint (the final one failed, "
                "above: the training after it is done again)" : "");
    else
        fprintf(stderr, "shadowsync: stopped (%s) after %lld examples; no checkpoint.dir "
                "was set, so no resume can continue this run (its model so far: %s/model)\n",
                ss_halt_name(), (long long)f->examples, c->output.dir);
    return 0;
}
