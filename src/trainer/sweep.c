/* `shadowsync sweep`: a grid of settings (every combination of the --vary
 * values, the first --vary the slowest to change), each run --repeat
 * times into a run directory of its own (OUT/runs/SETTING/repN), then a
 * table over the settings (results.csv, results.md: the varied keys, EPS,
 * train and eval NE, AUC, syncs/s, sync gap as mean ± sd over the runs,
 * the best trade-offs marked) and a picture (sweep.png: eval NE against
 * EPS, a point per setting, the Pareto front drawn).
 *
 * Each run is a process of its own, `shadowsync train` of this binary, or
 * tools/submit (mpirun, the cluster job's launch) where the setting's
 * config asks for a cluster job's roles (embedding PSs, sync PSs,
 * readers): a run that crashes, MPI (which starts once per process) and a
 * stop's state stay the run's. Its output goes to train.log beside it.
 *
 * Started again on the same OUT, a sweep keeps every run whose metrics.json
 * is whole and whose sweep.setting (the config's path and text, the --set
 * and the setting's values) is the same, and runs the rest. A run that
 * failed keeps its reason in failed.txt and is reported again, not run,
 * unless --retry-failed; a setting the config refuses is refused anew.
 * SIGINT and SIGTERM are passed on to the run under way and stop the
 * sweep once it has stopped, with the table of what had finished. */
#include "plot.h"
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A run's figures, as metrics.json holds them (syncs/s: syncs / seconds). */
enum { F_EPS, F_TRAIN_NE, F_EVAL_NE, F_AUC, F_SYNCS, F_GAP, N_FIGS };
static const char *const fig_csv[N_FIGS] = {"eps", "train_ne", "eval_ne", "eval_auc",
                                            "syncs_per_s", "sync_gap"};
static const char *const fig_md[N_FIGS] = {"EPS", "train NE", "eval NE", "AUC", "syncs/s",
                                           "sync gap"};
static const char *const fig_fmt[N_FIGS] = {"%.0f", "%.4f", "%.4f", "%.4f", "%.1f", "%.2f"};
static const char *const fig_csv_fmt[N_FIGS] = {"%.1f", "%.6f", "%.6f", "%.6f", "%.3f", "%.4f"};

enum { RUN_MISSING, RUN_DONE, RUN_FAILED };
struct outcome {
    int state;
    double fig[N_FIGS];
    char *why;                  /* RUN_FAILED's reason */
};

struct vary {
    char *key;
    char **values;
    int n;
};

struct setting {
    const char **values;        /* one per vary, into its values */
    char *name;                 /* "sync.alpha=0.3 trainer.worker_threads=2" */
    char *dir;                  /* OUT/runs/<name, as a file name> */
    char *refused;              /* the config's error for this setting, or NULL */
    int64_t seed;               /* its job.seed, which repeat r adds r - 1 to */
    int cluster;                /* its runs go through tools/submit */
    struct outcome *runs;       /* one per repeat */
    double mean[N_FIGS], sd[N_FIGS];
    int done, failed, best;
    const char *why;            /* a failed run's reason */
};

struct sweep {
    const struct sweep_opts *o;
    struct vary *v;
    struct setting *s;
    int n_set;
    char *config_sum;           /* the config file's text's SHA-1 */
};

static volatile sig_atomic_t stop_sig, child_pgid;

/* SIGINT, SIGTERM: passed on to the run under way; the sweep stops after it. */
static void on_stop(int sig)
{
    stop_sig = sig;
    if (child_pgid > 0)
        kill(-(pid_t)child_pgid, sig);
}

/* ---- the grid ------------------------------------------------------------ */

static int parse_vary(const struct sweep_opts *o, struct vary *v, struct ss_err *e)
{
    for (int i = 0; i < o->n_vary; i++) {
        const char *eq = strchr(o->vary[i], '=');
        if (!eq || eq == o->vary[i] || !eq[1])
            return ss_fail(e, SS_EINVAL, "--vary %s: give section.key=v1,v2,...", o->vary[i]);
        v[i].key = g_strstrip(g_strndup(o->vary[i], (size_t)(eq - o->vary[i])));
        int rc = ss_config_key_known(v[i].key, e);
        if (rc < 0)
            return ss_fail(e, rc, "--vary %s: %s", o->vary[i], e->msg);
        if (!strcmp(v[i].key, "output.dir"))
            return ss_fail(e, SS_EINVAL, "--vary output.dir: the sweep names each run's "
                           "directory (under --out)");
        for (int k = 0; k < i; k++)
            if (!strcmp(v[k].key, v[i].key))
                return ss_fail(e, SS_EINVAL, "--vary %s is given twice: give its values in one "
                               "--vary, comma-separated", v[i].key);
        v[i].values = g_strsplit(eq + 1, ",", -1);
        v[i].n = (int)g_strv_length(v[i].values);
        for (int k = 0; k < v[i].n; k++) {
            g_strstrip(v[i].values[k]);
            if (!*v[i].values[k])
                return ss_fail(e, SS_EINVAL, "--vary %s: value %d of %d is empty", o->vary[i],
                               k + 1, v[i].n);
        }
    }
    return 0;
}

/* The setting's name as a file name: its characters outside [A-Za-z0-9._,=+-]
 * as '_', then (where any was, or it is long) a hash of the name, so no two
 * settings share a directory. */
static char *dir_name(const char *name)
{
    GString *s = g_string_new("");
    int changed = 0;
    for (const char *c = name; *c; c++) {
        int keep = g_ascii_isalnum(*c) || strchr("._,=+-", *c);
        g_string_append_c(s, keep ? *c : *c == ' ' ? ',' : '_');
        changed |= !keep && *c != ' ';
    }
    if (s->len > 120)
        g_string_truncate(s, 120), changed = 1;
    if (changed)
        g_string_append_printf(s, "-%08x", g_str_hash(name));
    return g_string_free(s, FALSE);
}

/* The base overrides and the setting's values, in the order train gets them. */
static GPtrArray *setting_sets(const struct sweep *w, const struct setting *st)
{
    GPtrArray *a = g_ptr_array_new_with_free_func(g_free);
    for (int i = 0; i < w->o->n_sets; i++)
        g_ptr_array_add(a, g_strdup(w->o->sets[i]));
    for (int i = 0; i < w->o->n_vary; i++)
        g_ptr_array_add(a, g_strdup_printf("%s=%s", w->v[i].key, st->values[i]));
    return a;
}

/* Setting k of the grid; the config as it resolves for it (refused: its error). */
static void make_setting(struct sweep *w, int k)
{
    struct setting *st = &w->s[k];
    int n = w->o->n_vary;
    st->values = ss_xcalloc((size_t)n, sizeof *st->values);
    GString *name = g_string_new("");
    for (int i = n - 1, rest = k; i >= 0; i--) { /* the last --vary the fastest to change */
        st->values[i] = w->v[i].values[rest % w->v[i].n];
        rest /= w->v[i].n;
    }
    for (int i = 0; i < n; i++)
        g_string_append_printf(name, "%s%s=%s", i ? " " : "", w->v[i].key, st->values[i]);
    st->name = g_string_free(name, FALSE);
    char *file = dir_name(st->name);
    st->dir = g_build_filename(w->o->out, "runs", file, NULL);
    g_free(file);
    st->runs = ss_xcalloc((size_t)w->o->repeat, sizeof *st->runs);
    GPtrArray *sets = setting_sets(w, st);
    struct ss_config c;
    struct ss_err e = {0};
    if (ss_config_load(&c, w->o->config, (char **)sets->pdata, (int)sets->len, &e) < 0) {
        st->refused = g_strdup(e.msg);
    } else {
        st->seed = c.job.seed;
        st->cluster = c.job.embedding_ps > 0 || c.job.sync_ps > 0 || c.job.readers > 0;
        ss_config_free(&c);
    }
    g_ptr_array_free(sets, TRUE);
}

/* ---- one run ------------------------------------------------------------- */

/* What makes a run the same run: the config's path and text, every
 * override; kept in its directory as sweep.setting. */
static char *run_identity(const struct sweep *w, const struct setting *st, GPtrArray *sets)
{
    GString *s = g_string_new("");
    g_string_append_printf(s, "config = %s\nconfig_sha1 = %s\n", w->o->config, w->config_sum);
    for (guint i = 0; i < sets->len; i++)
        g_string_append_printf(s, "set = %s\n", (char *)sets->pdata[i]);
    g_string_append_printf(s, "launch = %s\n", st->cluster ? "tools/submit" : "train");
    return g_string_free(s, FALSE);
}

static void read_figures(struct outcome *r, const char *metrics)
{
    char *m = plot_read_text(metrics);
    double seconds = plot_json_number(m, "seconds");
    r->fig[F_EPS] = plot_json_number(m, "eps");
    r->fig[F_TRAIN_NE] = plot_json_number(m, "train_ne");
    r->fig[F_EVAL_NE] = plot_json_number(m, "eval_ne");
    r->fig[F_AUC] = plot_json_number(m, "eval_auc");
    r->fig[F_SYNCS] = seconds > 0 ? plot_json_number(m, "syncs") / seconds : NAN;
    r->fig[F_GAP] = plot_json_number(m, "avg_sync_gap");
    g_free(m);
}

/* Why a run failed: the last error its log names ("shadowsync: ..." or
 * submit's), else how it ended. g_free it. */
static char *failure_reason(const char *log, int status)
{
    char *t = plot_read_text(log), *why = NULL;
    char **lines = g_strsplit(t ? t : "", "\n", -1);
    g_free(t);
    for (int i = 0; lines[i]; i++) {
        const char *l = g_strstrip(lines[i]);
        if ((g_str_has_prefix(l, "shadowsync: ") || g_str_has_prefix(l, "submit: ")) &&
            !strstr(l, ": warning: ") && !g_str_has_prefix(l, "submit: note")) {
            g_free(why);
            why = g_strdup(g_str_has_prefix(l, "shadowsync: ") ? l + 12 : l);
        }
    }
    g_strfreev(lines);
    if (why)
        return why;
    if (WIFSIGNALED(status))
        return g_strdup_printf("killed by signal %d (%s)", WTERMSIG(status),
                               strsignal(WTERMSIG(status)));
    return g_strdup_printf("exit status %d, no error named (see its train.log)",
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* This binary's path, and tools/submit's beside its build folder (build:
 * that folder's name, submit's BUILD). g_free them. */
static void our_paths(char **exe, char **submit, char **build)
{
    *exe = g_file_read_link("/proc/self/exe", NULL);
    if (!*exe)
        *exe = g_strdup("/proc/self/exe");
    char *dir = g_path_get_dirname(*exe), *root = g_path_get_dirname(dir);
    *submit = g_build_filename(root, "tools", "submit", NULL);
    *build = g_path_get_basename(dir);
    g_free(dir);
    g_free(root);
}

/* Runs argv with its output in log, in a process group of its own (so a
 * stop reaches mpirun's ranks too) that dies with the sweep; its wait
 * status, or -1 where it could not start. The child calls only what is
 * safe after a fork of a process with threads (OpenBLAS starts its own). */
static int spawn(char **argv, const char *log)
{
    char no_exec[512];
    snprintf(no_exec, sizeof no_exec, "shadowsync: cannot run %s\n", argv[0]);
    sigset_t all;
    sigemptyset(&all);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644), null = open("/dev/null", O_RDONLY);
        if (fd < 0 || null < 0)
            _exit(127);
        dup2(null, 0), dup2(fd, 1), dup2(fd, 2);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &all, NULL);
        execv(argv[0], argv);
        ssize_t said = write(2, no_exec, strlen(no_exec));
        (void)said;
        _exit(127);
    }
    setpgid(pid, pid);
    child_pgid = pid;
    if (stop_sig) /* it came before the child was known */
        kill(-pid, stop_sig);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    child_pgid = 0;
    return status;
}

/* Launches run r of st into dir (its sets the setting's, job.seed and
 * output.dir added); its outcome. */
static void launch(struct sweep *w, struct setting *st, const char *dir, GPtrArray *sets,
                   const char *ident, struct outcome *r)
{
    char *p_fail = g_build_filename(dir, "failed.txt", NULL);
    char *p_metrics = g_build_filename(dir, "metrics.json", NULL);
    char *p_log = g_build_filename(dir, "train.log", NULL);
    char *p_ident = g_build_filename(dir, "sweep.setting", NULL);
    char *exe, *submit, *build;
    our_paths(&exe, &submit, &build);
    struct ss_err e = {0};
    unlink(p_fail);
    unlink(p_metrics);
    if (ss_mkdir_p(dir, &e) < 0 || !g_file_set_contents(p_ident, ident, -1, NULL)) {
        r->state = RUN_FAILED;
        r->why = g_strdup_printf("%s: cannot write: %s", dir, *e.msg ? e.msg : strerror(errno));
    } else if (st->cluster && access(submit, X_OK) != 0) {
        r->state = RUN_FAILED;
        r->why = g_strdup_printf("the setting asks for a cluster job's roles, which run through "
                                 "tools/submit, not found at %s", submit);
    }
    if (r->state != RUN_FAILED) {
        GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
        g_ptr_array_add(argv, g_strdup(st->cluster ? submit : exe));
        if (!st->cluster)
            g_ptr_array_add(argv, g_strdup("train"));
        g_ptr_array_add(argv, g_strdup(w->o->config));
        for (guint i = 0; i < sets->len; i++) {
            g_ptr_array_add(argv, g_strdup("--set"));
            g_ptr_array_add(argv, g_strdup(sets->pdata[i]));
        }
        g_ptr_array_add(argv, NULL);
        setenv("BUILD", build, 1); /* submit's mpirun starts this binary */
        int status = spawn((char **)argv->pdata, p_log);
        g_ptr_array_free(argv, TRUE);
        if (status == 0 && plot_metrics_complete(p_metrics)) {
            r->state = RUN_DONE;
            read_figures(r, p_metrics);
        } else if (!stop_sig) {
            r->state = RUN_FAILED;
            r->why = status < 0 ? g_strdup_printf("cannot start a run: %s", strerror(errno))
                                : failure_reason(p_log, status);
            char *text = g_strdup_printf("%s\n", r->why);
            g_file_set_contents(p_fail, text, -1, NULL);
            g_free(text);
        }
    }
    g_free(exe), g_free(submit), g_free(build);
    g_free(p_fail), g_free(p_metrics), g_free(p_log), g_free(p_ident);
}

/* Run rep (0-based) of st, number k of total: kept where an earlier sweep
 * finished it (or failed it, unless retry_failed), else run. */
static void one_run(struct sweep *w, struct setting *st, int rep, int k, int total)
{
    struct outcome *r = &st->runs[rep];
    int repeat = w->o->repeat;
    char what[64] = "";
    if (repeat > 1)
        snprintf(what, sizeof what, " (repeat %d of %d)", rep + 1, repeat);
    printf("sweep: run %d of %d: %s%s", k, total, st->name, what);
    if (st->refused) {
        r->state = RUN_FAILED;
        r->why = g_strdup(st->refused);
        printf(": refused: %s\n", r->why);
        fflush(stdout);
        return;
    }
    char *dir = g_strdup_printf("%s/rep%d", st->dir, rep + 1);
    GPtrArray *sets = setting_sets(w, st);
    if (repeat > 1)
        g_ptr_array_add(sets, g_strdup_printf("job.seed=%lld", (long long)(st->seed + rep)));
    g_ptr_array_add(sets, g_strdup_printf("output.dir=%s", dir));
    char *ident = run_identity(w, st, sets);
    char *p = g_build_filename(dir, "sweep.setting", NULL), *had = plot_read_text(p);
    g_free(p);
    int same = had && !strcmp(had, ident);
    p = g_build_filename(dir, "metrics.json", NULL);
    int finished = same && plot_metrics_complete(p);
    g_free(p);
    p = g_build_filename(dir, "failed.txt", NULL);
    char *failed = same && !finished && !w->o->retry_failed ? plot_read_text(p) : NULL;
    g_free(p);
    if (finished) {
        p = g_build_filename(dir, "metrics.json", NULL);
        r->state = RUN_DONE;
        read_figures(r, p);
        g_free(p);
        printf(": kept (finished earlier)\n");
    } else if (failed) {
        r->state = RUN_FAILED;
        r->why = g_strdup(g_strstrip(failed));
        printf(": failed earlier (--retry-failed runs it again): %s\n", r->why);
    } else {
        printf("\n");
        fflush(stdout);
        double t0 = ss_now();
        launch(w, st, dir, sets, ident, r);
        printf("sweep: run %d of %d: ", k, total);
        if (r->state == RUN_DONE)
            printf("done in %.1f s: eps %.0f  train_ne %.4f  eval_ne %.4f  auc %.4f\n",
                   ss_now() - t0, r->fig[F_EPS], r->fig[F_TRAIN_NE], r->fig[F_EVAL_NE],
                   r->fig[F_AUC]);
        else if (r->state == RUN_FAILED)
            printf("failed: %s (its output: %s/train.log)\n", r->why, dir);
        else
            printf("stopped (%s): not finished, run again by the next sweep\n",
                   strsignal(stop_sig));
    }
    fflush(stdout);
    g_free(failed), g_free(had), g_free(ident), g_free(dir);
    g_ptr_array_free(sets, TRUE);
}

/* ---- the table and the picture ------------------------------------------- */

/* Mean and sample sd (NAN of fewer than 2) of each figure over st's
 * finished runs (the figures a run has: no sync gap without syncs). */
static void summarize(struct sweep *w, struct setting *st)
{
    st->done = st->failed = 0;
    st->why = NULL;
    for (int r = 0; r < w->o->repeat; r++) {
        st->done += st->runs[r].state == RUN_DONE;
        st->failed += st->runs[r].state == RUN_FAILED;
        if (st->runs[r].state == RUN_FAILED && !st->why)
            st->why = st->runs[r].why;
    }
    for (int f = 0; f < N_FIGS; f++) {
        double sum = 0, sq = 0;
        int n = 0;
        for (int r = 0; r < w->o->repeat; r++)
            if (st->runs[r].state == RUN_DONE && isfinite(st->runs[r].fig[f]))
                sum += st->runs[r].fig[f], n++;
        st->mean[f] = n ? sum / n : NAN;
        for (int r = 0; r < w->o->repeat; r++)
            if (st->runs[r].state == RUN_DONE && isfinite(st->runs[r].fig[f]))
                sq += (st->runs[r].fig[f] - st->mean[f]) * (st->runs[r].fig[f] - st->mean[f]);
        st->sd[f] = n > 1 ? sqrt(sq / (n - 1)) : NAN;
    }
}

static int comparable(const struct setting *s)
{
    return isfinite(s->mean[F_EPS]) && isfinite(s->mean[F_EVAL_NE]);
}

/* The best trade-offs: the settings no other beats on both EPS (higher)
 * and eval NE (lower), the Pareto front. */
static void mark_best(struct sweep *w)
{
    for (int i = 0; i < w->n_set; i++) {
        struct setting *a = &w->s[i];
        a->best = comparable(a);
        for (int k = 0; a->best && k < w->n_set; k++) {
            const struct setting *b = &w->s[k];
            if (k != i && comparable(b) && b->mean[F_EPS] >= a->mean[F_EPS] &&
                b->mean[F_EVAL_NE] <= a->mean[F_EVAL_NE] &&
                (b->mean[F_EPS] > a->mean[F_EPS] || b->mean[F_EVAL_NE] < a->mean[F_EVAL_NE]))
                a->best = 0;
        }
    }
}

/* "ok", "not run", "failed: why", "1 of 2 failed: why". g_free it. */
static char *status_text(const struct sweep *w, const struct setting *st)
{
    int runs = w->o->repeat;
    if (st->failed == runs)
        return g_strdup_printf("failed: %s", st->why);
    if (st->failed)
        return g_strdup_printf("%d of %d failed: %s", st->failed, runs, st->why);
    if (st->done < runs)
        return st->done ? g_strdup_printf("%d of %d not run", runs - st->done, runs)
                        : g_strdup("not run");
    return g_strdup("ok");
}

static void csv_field(GString *s, const char *text)
{
    g_string_append_c(s, '"');
    for (const char *c = text; *c; c++)
        g_string_append(s, *c == '"' ? "\"\"" : *c == '\n' ? " " : (char[]){*c, 0});
    g_string_append_c(s, '"');
}

static void md_field(GString *s, const char *text)
{
    g_string_append(s, " ");
    for (const char *c = text; *c; c++)
        g_string_append(s, *c == '|' ? "\\|" : *c == '\n' ? " " : (char[]){*c, 0});
    g_string_append(s, " |");
}

static void csv_number(GString *s, const char *fmt, double v)
{
    g_string_append_c(s, ',');
    if (isfinite(v))
        g_string_append_printf(s, fmt, v);
}

static int write_text(const char *path, const GString *s)
{
    GError *ge = NULL;
    if (g_file_set_contents(path, s->str, (gssize)s->len, &ge))
        return 0;
    fprintf(stderr, "shadowsync: sweep: %s\n", ge->message);
    g_error_free(ge);
    return -1;
}

static void write_tables(struct sweep *w)
{
    const struct sweep_opts *o = w->o;
    GString *csv = g_string_new(""), *md = g_string_new("");
    for (int i = 0; i < o->n_vary; i++)
        g_string_append_printf(csv, "%s,", w->v[i].key);
    g_string_append(csv, "runs,failed");
    for (int f = 0; f < N_FIGS; f++)
        g_string_append_printf(csv, ",%s,%s_sd", fig_csv[f], fig_csv[f]);
    g_string_append(csv, ",best,status\n");
    g_string_append_printf(md, "# shadowsync sweep of %s\n\n%d setting%s x %d run%s each", o->config,
                           w->n_set, w->n_set == 1 ? "" : "s", o->repeat, o->repeat == 1 ? "" : "s");
    if (o->repeat > 1)
        g_string_append(md, " (job.seed + 0, 1, ...): mean ± sd (sample) over a setting's "
                        "finished runs");
    for (int i = 0; i < o->n_sets; i++)
        g_string_append_printf(md, "%s--set %s", i ? " " : "; every run with ", o->sets[i]);
    g_string_append(md, ". **best**: the best trade-offs, on the Pareto front of EPS (higher) "
                    "and eval NE (lower): no other setting has both a higher EPS and a lower "
                    "eval NE.\n\n|");
    for (int i = 0; i < o->n_vary; i++)
        md_field(md, w->v[i].key);
    md_field(md, "runs");
    for (int f = 0; f < N_FIGS; f++)
        md_field(md, fig_md[f]);
    g_string_append(md, " best | status |\n|");
    for (int i = 0; i < o->n_vary + N_FIGS + 3; i++)
        g_string_append(md, "---|");
    g_string_append_c(md, '\n');
    for (int k = 0; k < w->n_set; k++) {
        const struct setting *st = &w->s[k];
        char *status = status_text(w, st), cellv[96];
        g_string_append(md, "|");
        for (int i = 0; i < o->n_vary; i++) {
            csv_field(csv, st->values[i]);
            g_string_append_c(csv, ',');
            md_field(md, st->values[i]);
        }
        g_string_append_printf(csv, "%d,%d", st->done, st->failed);
        g_string_append_printf(md, " %d |", st->done);
        for (int f = 0; f < N_FIGS; f++) {
            csv_number(csv, fig_csv_fmt[f], st->mean[f]);
            csv_number(csv, fig_csv_fmt[f], st->sd[f]);
            int n = 0;
            if (isfinite(st->mean[f]))
                n = snprintf(cellv, sizeof cellv, fig_fmt[f], st->mean[f]);
            else
                n = snprintf(cellv, sizeof cellv, "-");
            if (isfinite(st->sd[f])) {
                n += snprintf(cellv + n, sizeof cellv - (size_t)n, " ± ");
                snprintf(cellv + n, sizeof cellv - (size_t)n, fig_fmt[f], st->sd[f]);
            }
            md_field(md, cellv);
        }
        g_string_append_printf(csv, ",%s,", st->best ? "yes" : "");
        csv_field(csv, status);
        g_string_append_c(csv, '\n');
        md_field(md, st->best ? "**best**" : "");
        md_field(md, status);
        g_string_append_c(md, '\n');
        g_free(status);
    }
    char *p = g_build_filename(o->out, "results.csv", NULL);
    write_text(p, csv);
    g_free(p);
    p = g_build_filename(o->out, "results.md", NULL);
    write_text(p, md);
    g_free(p);
    g_string_free(csv, TRUE);
    g_string_free(md, TRUE);
}

/* A setting's values for the picture: "0.3, 2". */
static void point_label(GString *s, const struct sweep *w, const struct setting *st)
{
    g_string_append_c(s, '"');
    for (int i = 0; i < w->o->n_vary; i++) {
        if (i)
            g_string_append(s, ", ");
        for (const char *c = st->values[i]; *c; c++)
            g_string_append_c(s, *c == '"' ? '\'' : *c);
    }
    g_string_append(s, "\"\n");
}

static void point(GString *s, double v)
{
    g_string_append_printf(s, isfinite(v) ? "%.9g " : "0 ", v);
}

/* sweep.png: eval NE against EPS, a point per setting with its sd as error
 * bars, the best trade-offs joined; a failure (no gnuplot) is a warning. */
static void draw_picture(struct sweep *w)
{
    GString *s = g_string_new("set encoding utf8\n$all << EOD\n"), *keys = g_string_new("");
    int n = 0;
    for (int k = 0; k < w->n_set; k++) {
        const struct setting *st = &w->s[k];
        if (!comparable(st))
            continue;
        point(s, st->mean[F_EPS]), point(s, st->sd[F_EPS]);
        point(s, st->mean[F_EVAL_NE]), point(s, st->sd[F_EVAL_NE]);
        point_label(s, w, st);
        n++;
    }
    g_string_append(s, "EOD\n$best << EOD\n");
    int *order = ss_xcalloc((size_t)w->n_set + 1, sizeof *order), nb = 0;
    for (int k = 0; k < w->n_set; k++) /* the front by EPS, for its line */
        if (w->s[k].best) {
            int at = nb++;
            while (at > 0 && w->s[order[at - 1]].mean[F_EPS] > w->s[k].mean[F_EPS])
                order[at] = order[at - 1], at--;
            order[at] = k;
        }
    for (int b = 0; b < nb; b++) {
        point(s, w->s[order[b]].mean[F_EPS]);
        point(s, w->s[order[b]].mean[F_EVAL_NE]);
        g_string_append_c(s, '\n');
    }
    free(order);
    for (int i = 0; i < w->o->n_vary; i++)
        g_string_append_printf(keys, "%s%s", i ? ", " : "", w->v[i].key);
    g_string_append_printf(s, "EOD\nset title ");
    char *title = g_strdup_printf("shadowsync sweep of %s: eval NE against EPS (mean ± sd over %d "
                                  "run%s a setting)", w->o->config, w->o->repeat,
                                  w->o->repeat == 1 ? "" : "s");
    plot_quote(s, title);
    g_free(title);
    g_string_append(s, " font ',12'\nset xlabel 'EPS (examples/s, higher is better)'\n"
                    "set ylabel 'eval NE (lower is better)'\nset grid\nset key below Left reverse\n"
                    "set offsets graph 0.08, graph 0.08, graph 0.08, graph 0.08\n"
                    "plot $all using 1:3:2:4 with xyerrorbars lc rgb '#1f77b4' pt 7 ps 1.2 "
                    "title ");
    char *what = g_strdup_printf("a setting (%s)", keys->str);
    plot_quote(s, what);
    g_free(what);
    g_string_append(s, ", \\\n    $best using 1:2 with linespoints lc rgb '#d62728' lw 2 pt 6 "
                    "ps 2.5 title 'best trade-offs (Pareto front: no setting has both higher "
                    "EPS and lower eval NE)', \\\n    $all using 1:3:5 with labels offset char "
                    "1,0.8 left font ',9' notitle\n");
    char *png = g_build_filename(w->o->out, "sweep.png", NULL);
    struct ss_err e = {0};
    if (n == 0)
        printf("sweep: no setting finished with an eval NE: no picture\n");
    else if (plot_gnuplot(png, 1200, 900, s->str, &e) < 0)
        fprintf(stderr, "shadowsync: warning: sweep: no picture: %s\n", e.msg);
    else
        printf("sweep: picture: %s\n", png);
    g_free(png);
    g_string_free(s, TRUE);
    g_string_free(keys, TRUE);
}

/* ---- the sweep ----------------------------------------------------------- */

static void free_sweep(struct sweep *w)
{
    for (int k = 0; k < w->n_set; k++) {
        struct setting *st = &w->s[k];
        for (int r = 0; st->runs && r < w->o->repeat; r++)
            g_free(st->runs[r].why);
        free(st->runs);
        free(st->values);
        g_free(st->name), g_free(st->dir), g_free(st->refused);
    }
    free(w->s);
    for (int i = 0; w->v && i < w->o->n_vary; i++) {
        g_free(w->v[i].key);
        g_strfreev(w->v[i].values);
    }
    free(w->v);
    g_free(w->config_sum);
}

/* The checks before any run: the grid, the base config, the directory. */
static int prepare(struct sweep *w, struct ss_err *e)
{
    const struct sweep_opts *o = w->o;
    if (rpc_under_mpirun())
        return ss_fail(e, SS_EINVAL, "sweep runs without mpirun: it launches each cluster job "
                       "itself (through tools/submit) where the config asks for one");
    if (o->n_vary < 1)
        return ss_fail(e, SS_EINVAL, "sweep needs at least one --vary section.key=v1,v2,...");
    if (o->repeat < 1)
        return ss_fail(e, SS_EINVAL, "--repeat %d: at least 1", o->repeat);
    w->v = ss_xcalloc((size_t)o->n_vary, sizeof *w->v);
    int rc = parse_vary(o, w->v, e);
    double n = 1;
    for (int i = 0; rc == 0 && i < o->n_vary; i++)
        n *= w->v[i].n;
    if (rc == 0 && n * o->repeat > 100000)
        rc = ss_fail(e, SS_EINVAL, "the grid holds %.0f runs: at most 100000", n * o->repeat);
    struct ss_config c;
    if (rc == 0 && (rc = ss_config_load(&c, o->config, o->sets, o->n_sets, e)) == 0)
        ss_config_free(&c);
    char *text = rc == 0 ? plot_read_text(o->config) : NULL;
    if (rc == 0 && !text)
        rc = ss_fail(e, SS_EIO, "%s: cannot read", o->config);
    if (text)
        w->config_sum = g_compute_checksum_for_string(G_CHECKSUM_SHA1, text, -1);
    g_free(text);
    if (rc == 0 && (rc = ss_mkdir_p(o->out, e)) == 0)
        rc = ss_dir_lock("--out", o->out, ".sweep.lock", e);
    if (rc < 0)
        return rc;
    w->n_set = (int)n;
    w->s = ss_xcalloc((size_t)w->n_set, sizeof *w->s);
    for (int k = 0; k < w->n_set; k++)
        make_setting(w, k);
    return 0;
}

int trainer_sweep(const struct sweep_opts *o)
{
    struct sweep w = {.o = o};
    struct ss_err e = {0};
    if (prepare(&w, &e) < 0) {
        fprintf(stderr, "shadowsync: %s\n", e.msg);
        free_sweep(&w);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_stop}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int total = w.n_set * o->repeat, k = 0;
    printf("sweep: %d setting%s x %d run%s = %d runs into %s\n", w.n_set, w.n_set == 1 ? "" : "s",
           o->repeat, o->repeat == 1 ? "" : "s", total, o->out);
    fflush(stdout);
    for (int s = 0; s < w.n_set && !stop_sig; s++) {
        for (int r = 0; r < o->repeat && !stop_sig; r++)
            one_run(&w, &w.s[s], r, ++k, total);
        for (int t = 0; t < w.n_set; t++)
            summarize(&w, &w.s[t]);
        mark_best(&w);
        write_tables(&w); /* after every setting: a stopped sweep has its table */
    }
    int done = 0, failed = 0;
    for (int s = 0; s < w.n_set; s++)
        done += w.s[s].done, failed += w.s[s].failed;
    printf("sweep: %d of %d runs finished, %d failed; table: %s/results.md (and results.csv)\n",
           done, total, failed, o->out);
    draw_picture(&w);
    int rc = 0;
    if (stop_sig) {
        fprintf(stderr, "shadowsync: sweep stopped (%s) after %d of %d runs: the same command "
                "runs the rest (the finished ones are kept)\n", strsignal(stop_sig), done, total);
        rc = SS_EXIT_HALTED;
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free_sweep(&w);
    return rc;
}
