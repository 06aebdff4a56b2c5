/* `shadowsync plot` and output.plot: the curves of run directories in one
 * PNG, one line per run. A run's progress.csv gives train NE against
 * examples, EPS, syncs/s and the sync gap against time, its eval.csv the
 * eval NE against examples, its config.ini the legend (algorithm/mode/
 * trainers x workers), its trainers.csv (several trainers) a line per
 * trainer where the run is drawn alone. A cluster job's master writes the
 * same files (progress.csv's figures summed over every trainer), so its
 * picture is made alike.
 *
 * Drawn by gnuplot (Debian's gnuplot-nox, pngcairo terminal) fed through a
 * pipe, not by pixels of our own: axes, ticks, legends and antialiased
 * text come with it, and the script it is fed, written beside the picture
 * (FILE.gp), is plain text a reader can check or change and draw again.
 * Without gnuplot, `plot` fails naming the package; a run's output.plot
 * only warns. */
#include "plot.h"
#include "shadowsync/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GNUPLOT_PACKAGE "gnuplot-nox"

/* Ten colours told apart at a glance (d3's category10). */
static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
enum { N_COLOURS = 10, N_DASHES = 5 };

char *plot_read_text(const char *path)
{
    char *text = NULL;
    return g_file_get_contents(path, &text, NULL, NULL) ? text : NULL;
}

double plot_json_number(const char *json, const char *key)
{
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = json ? strstr(json, pat) : NULL;
    if (!p)
        return NAN;
    p += strlen(pat);
    char *end;
    double v = g_ascii_strtod(p, &end);
    return end == p ? NAN : v;
}

int plot_metrics_complete(const char *path)
{
    char *t = plot_read_text(path);
    if (!t)
        return 0;
    g_strchomp(t);
    int whole = *t == '{' && g_str_has_suffix(t, "}") && !strstr(t, "\"stopped_by\"");
    g_free(t);
    return whole;
}

void plot_quote(GString *s, const char *text)
{
    g_string_append_c(s, '\'');
    for (const char *c = text; *c; c++) {
        if (*c == '\'')
            g_string_append_c(s, '\'');
        if (*c != '\n')
            g_string_append_c(s, *c);
    }
    g_string_append_c(s, '\'');
}

char *plot_script_path(const char *png)
{
    if (g_str_has_suffix(png, ".png"))
        return g_strdup_printf("%.*s.gp", (int)(strlen(png) - 4), png);
    return g_strdup_printf("%s.gp", png);
}

/* The script's first lines: the terminal and where it draws. */
static void script_head(GString *s, const char *png, int width, int height)
{
    g_string_append_printf(s, "# drawn by shadowsync (gnuplot %s): `gnuplot THIS_FILE` draws "
                           "it again\nset terminal pngcairo size %d,%d font ',10' noenhanced\n"
                           "set output ", GNUPLOT_PACKAGE, width, height);
    plot_quote(s, png);
    g_string_append_c(s, '\n');
}

/* gnuplot's last lines of err (a file), for a message. */
static void last_lines(const char *err, char *out, size_t cap)
{
    char *t = plot_read_text(err);
    out[0] = 0;
    if (!t)
        return;
    g_strstrip(t);
    char *from = t + strlen(t);
    for (int lines = 0; from > t && lines < 3; lines += *--from == '\n')
        ;
    snprintf(out, cap, "%s", from);
    for (char *c = out; *c; c++)
        if (*c == '\n')
            *c = ' ';
    g_free(t);
}

int plot_gnuplot(const char *png, int width, int height, const char *script, struct ss_err *e)
{
    char *gp = plot_script_path(png), *tmp = g_strdup_printf("%s.tmp", png);
    char *err = g_strdup_printf("%s.err", png), *exe = g_find_program_in_path("gnuplot");
    GString *whole = g_string_new(""), *piped = g_string_new("");
    script_head(whole, png, width, height);
    script_head(piped, tmp, width, height);
    g_string_append(whole, script);
    g_string_append(piped, script);
    g_string_append(piped, "unset output\n");
    int rc = 0;
    GError *ge = NULL;
    if (!g_file_set_contents(gp, whole->str, (gssize)whole->len, &ge)) {
        rc = ss_fail(e, SS_EIO, "%s: cannot write: %s", gp, ge->message);
        g_error_free(ge);
    } else if (!exe) {
        rc = ss_fail(e, SS_EINVAL, "gnuplot is not installed, and it draws the pictures: "
                     "apt-get install %s (tools/install-deps installs it); its script is "
                     "written: %s", GNUPLOT_PACKAGE, gp);
    }
    FILE *p = NULL;
    if (rc == 0) {
        char *q_exe = g_shell_quote(exe), *q_err = g_shell_quote(err);
        char *cmd = g_strdup_printf("exec %s 2>%s", q_exe, q_err);
        p = popen(cmd, "w");
        g_free(cmd);
        g_free(q_exe);
        g_free(q_err);
        if (!p)
            rc = ss_fail(e, SS_EIO, "cannot run %s: %s", exe, strerror(errno));
    }
    if (p) {
        size_t put = fwrite(piped->str, 1, piped->len, p);
        int status = pclose(p);
        char why[512];
        last_lines(err, why, sizeof why);
        struct stat st;
        if (put != piped->len || status != 0 || stat(tmp, &st) != 0 || st.st_size == 0)
            rc = ss_fail(e, SS_EIO, "gnuplot did not draw %s (status %d)%s%s; its script: %s", png,
                         status, *why ? ": " : "", why, gp);
        else if (rename(tmp, png) != 0)
            rc = ss_fail(e, SS_EIO, "%s: cannot write: %s", png, strerror(errno));
        unlink(err);
    }
    if (rc < 0)
        unlink(tmp);
    g_string_free(whole, TRUE);
    g_string_free(piped, TRUE);
    g_free(gp);
    g_free(tmp);
    g_free(err);
    g_free(exe);
    return rc;
}

/* ---- a run directory's curves ------------------------------------------ */

/* A CSV of numbers under a header line: rows x cols, NAN where a field is
 * empty or no number. */
struct table {
    int rows, cols;
    char **names;
    double *v;
};

static int column(const struct table *t, const char *name)
{
    for (int c = 0; c < t->cols; c++)
        if (!strcmp(t->names[c], name))
            return c;
    return -1;
}

static double cell(const struct table *t, int r, int c)
{
    return c < 0 ? NAN : t->v[(size_t)r * t->cols + c];
}

/* Reads path into t; 0 without the file (t empty). */
static int read_table(const char *path, struct table *t)
{
    memset(t, 0, sizeof *t);
    char *text = plot_read_text(path);
    if (!text)
        return 0;
    char **lines = g_strsplit(text, "\n", -1);
    g_free(text);
    if (!lines[0] || !*lines[0]) {
        g_strfreev(lines);
        return 0;
    }
    t->names = g_strsplit(g_strstrip(lines[0]), ",", -1);
    t->cols = (int)g_strv_length(t->names);
    int n = (int)g_strv_length(lines);
    t->v = ss_xcalloc((size_t)n * (size_t)t->cols + 1, sizeof *t->v);
    for (int i = 1; i < n; i++) {
        if (!*g_strstrip(lines[i]))
            continue;
        const char *f = lines[i];
        for (int c = 0; c < t->cols; c++) {
            char *end;
            double x = g_ascii_strtod(f, &end);
            t->v[(size_t)t->rows * t->cols + c] = end == f ? NAN : x;
            f = strchr(f, ',');
            f = f ? f + 1 : "";
        }
        t->rows++;
    }
    g_strfreev(lines);
    return 1;
}

static void free_table(struct table *t)
{
    g_strfreev(t->names);
    free(t->v);
}

struct run {
    char *dir, *label, *algo, *variant;
    struct table prog, eval, each; /* each: trainers.csv, where there is one */
    int colour, dash;
    int n_each;                 /* the trainers drawn one by one (0: the job's line only) */
};

/* The run's config.ini value of section.key (g_free it), or NULL. */
static char *ini_value(GKeyFile *kf, const char *section, const char *key)
{
    char *v = kf ? g_key_file_get_value(kf, section, key, NULL) : NULL;
    return v ? g_strstrip(v) : NULL;
}

/* The legend of a run: "easgd/foreground gap 10/2 trainers x 1 worker",
 * from its config.ini (metrics.json where that is missing). */
static void label_run(struct run *r)
{
    char *p = g_build_filename(r->dir, "config.ini", NULL);
    GKeyFile *kf = g_key_file_new();
    if (!g_key_file_load_from_file(kf, p, G_KEY_FILE_NONE, NULL)) {
        g_key_file_free(kf);
        kf = NULL;
    }
    g_free(p);
    p = g_build_filename(r->dir, "metrics.json", NULL);
    char *m = plot_read_text(p);
    g_free(p);
    char *algo = ini_value(kf, "sync", "algo"), *mode = ini_value(kf, "sync", "mode");
    char *gap = ini_value(kf, "sync", "gap"), *tr = ini_value(kf, "job", "trainers");
    char *wk = ini_value(kf, "trainer", "worker_threads");
    const char *s;
    if (!algo && m && (s = strstr(m, "\"sync_algo\": \"")))
        algo = g_strndup(s + 14, strcspn(s + 14, "\""));
    if (!mode && m && (s = strstr(m, "\"sync_mode\": \"")))
        mode = g_strndup(s + 14, strcspn(s + 14, "\""));
    double t = tr ? atof(tr) : plot_json_number(m, "trainers");
    double w = wk ? atof(wk) : plot_json_number(m, "worker_threads");
    r->algo = g_strdup(algo ? algo : "?");
    if (algo && !strcmp(algo, "none"))
        r->variant = g_strdup("");
    else if (mode && !strcmp(mode, "foreground"))
        r->variant = g_strdup_printf("foreground gap %s", gap ? gap : "?");
    else
        r->variant = g_strdup(mode ? mode : "?");
    GString *l = g_string_new(r->algo);
    if (*r->variant)
        g_string_append_printf(l, "/%s", r->variant);
    if (!isnan(t) && !isnan(w))
        g_string_append_printf(l, "/%.0f trainer%s x %.0f worker%s", t, t == 1 ? "" : "s", w,
                               w == 1 ? "" : "s");
    r->label = g_string_free(l, FALSE);
    g_free(algo), g_free(mode), g_free(gap), g_free(tr), g_free(wk), g_free(m);
    if (kf)
        g_key_file_free(kf);
}

static int load_run(struct run *r, const char *dir, struct ss_err *e)
{
    memset(r, 0, sizeof *r);
    r->dir = g_strdup(dir);
    char *p = g_build_filename(dir, "progress.csv", NULL);
    int have = read_table(p, &r->prog);
    g_free(p);
    if (!have || column(&r->prog, "examples") < 0)
        return ss_fail(e, SS_EINVAL, "%s: no progress.csv (a run directory holds one from its "
                       "first progress line on)", dir);
    p = g_build_filename(dir, "eval.csv", NULL);
    read_table(p, &r->eval);
    g_free(p);
    p = g_build_filename(dir, "trainers.csv", NULL);
    read_table(p, &r->each);
    g_free(p);
    label_run(r);
    return 0;
}

static void free_run(struct run *r)
{
    g_free(r->dir), g_free(r->label), g_free(r->algo), g_free(r->variant);
    free_table(&r->prog);
    free_table(&r->eval);
    free_table(&r->each);
}

/* Index of s in names (added when new). */
static int index_of(GPtrArray *names, const char *s)
{
    for (guint i = 0; i < names->len; i++)
        if (!strcmp(names->pdata[i], s))
            return (int)i;
    g_ptr_array_add(names, (gpointer)s);
    return (int)names->len - 1;
}

/* Colours and dashes: one colour per algorithm and one dash per mode (and
 * gap; shadow's and none's solid when first) where that tells every run
 * apart with few of each; else a colour per run. Labels alike get their
 * directory. */
static void style_runs(struct run *r, int n)
{
    GPtrArray *algos = g_ptr_array_new(), *variants = g_ptr_array_new(), *pairs = g_ptr_array_new();
    char **pair = ss_xcalloc((size_t)n, sizeof *pair);
    for (int i = 0; i < n; i++) {
        r[i].colour = index_of(algos, r[i].algo);
        r[i].dash = index_of(variants, *r[i].variant ? r[i].variant : "shadow"); /* none's */
        pair[i] = g_strdup_printf("%s|%s", r[i].algo, r[i].variant);
        index_of(pairs, pair[i]);
    }
    int grouped = algos->len > 1 && (int)pairs->len == n && algos->len <= N_COLOURS &&
                  variants->len <= N_DASHES;
    for (int i = 0; i < n; i++) {
        if (!grouped)
            r[i].colour = i % N_COLOURS, r[i].dash = i / N_COLOURS % N_DASHES;
        for (int k = 0; k < n; k++)
            if (k != i && !strcmp(r[k].label, r[i].label) && !strchr(r[i].label, '(')) {
                char *l = g_strdup_printf("%s (%s)", r[i].label, r[i].dir);
                g_free(r[i].label);
                r[i].label = l;
                break;
            }
    }
    for (int i = 0; i < n; i++)
        g_free(pair[i]);
    free(pair);
    g_ptr_array_free(algos, TRUE);
    g_ptr_array_free(variants, TRUE);
    g_ptr_array_free(pairs, TRUE);
}

static void number(GString *s, double v)
{
    if (isfinite(v))
        g_string_append_printf(s, " %.9g", v);
    else
        g_string_append(s, " NaN");
}

static const char *const prog_cols[] = {"elapsed_s", "examples", "eps", "train_ne",
                                        "syncs_per_s", "sync_gap"};

/* The rows of t (trainer's own where trainer >= 0) as a block's lines; a
 * blank line where its examples go back (a resume's trainers count anew),
 * so that gnuplot breaks the line there. */
static void prog_rows(GString *s, const struct table *t, int trainer)
{
    double last = 0;
    for (int i = 0; i < t->rows; i++) {
        if (trainer >= 0 && cell(t, i, column(t, "trainer")) != trainer)
            continue;
        double ex = cell(t, i, column(t, "examples"));
        if (ex < last)
            g_string_append_c(s, '\n');
        last = ex;
        for (int c = 0; c < 6; c++)
            number(s, cell(t, i, column(t, prog_cols[c])));
        g_string_append_c(s, '\n');
    }
}

/* The run's data blocks: $pK (elapsed, examples, eps, train NE, syncs/s,
 * sync gap), $pK_T alike for each trainer T drawn, and $eK (examples,
 * eval NE). */
static void data_blocks(GString *s, const struct run *r, int k)
{
    g_string_append_printf(s, "# %s: %s\n$p%d << EOD\n", r->dir, r->label, k);
    prog_rows(s, &r->prog, -1);
    for (int t = 0; t < r->n_each; t++) {
        g_string_append_printf(s, "EOD\n# trainer %d (trainers.csv)\n$p%d_%d << EOD\n", t, k, t);
        prog_rows(s, &r->each, t);
    }
    g_string_append_printf(s, "EOD\n$e%d << EOD\n", k);
    for (int i = 0; i < r->eval.rows; i++) {
        number(s, cell(&r->eval, i, column(&r->eval, "examples")));
        number(s, cell(&r->eval, i, column(&r->eval, "eval_ne")));
        g_string_append_c(s, '\n');
    }
    g_string_append(s, "EOD\n");
}

/* Whether t has a row (of trainer, where that is >= 0) with both columns x
 * and y finite. */
static int has_points(const struct table *t, int trainer, const char *x, const char *y)
{
    for (int i = 0; i < t->rows; i++)
        if ((trainer < 0 || cell(t, i, column(t, "trainer")) == trainer) &&
            isfinite(cell(t, i, column(t, x))) && isfinite(cell(t, i, column(t, y))))
            return 1;
    return 0;
}

/* A trainer's line style: after the runs' (1..n). */
static int trainer_style(int t)
{
    return 100 + t;
}

/* One panel: the runs' column y of their block against column x. */
struct panel {
    const char *title, *xlabel, *ylabel;
    char block;                 /* 'p' progress, 'e' eval */
    const char *x, *y;          /* the CSV columns (for has_points) */
    int xcol, ycol;             /* ...in the data block */
};

static void draw_panel(GString *s, const struct panel *p, const struct run *r, int n)
{
    g_string_append(s, "set title ");
    plot_quote(s, p->title);
    g_string_append(s, "\nset xlabel ");
    plot_quote(s, p->xlabel);
    g_string_append(s, "\nset ylabel ");
    plot_quote(s, p->ylabel);
    g_string_append(s, "\n");
    int any = 0;
    for (int k = 0; k < n; k++) {
        const struct table *t = p->block == 'p' ? &r[k].prog : &r[k].eval;
        for (int tr = 0; p->block == 'p' && tr < r[k].n_each; tr++) /* the job's line over them */
            if (has_points(&r[k].each, tr, p->x, p->y)) {
                g_string_append_printf(s, "%s $p%d_%d using %d:%d with lines ls %d notitle",
                                       any ? ", \\\n    " : "plot", k, tr, p->xcol, p->ycol,
                                       trainer_style(tr));
                any = 1;
            }
        if (!has_points(t, -1, p->x, p->y))
            continue;
        g_string_append_printf(s, "%s $%c%d using %d:%d with %s ls %d notitle", any ? ", \\\n    "
                               : "plot", p->block, k, p->xcol, p->ycol,
                               p->block == 'e' ? "linespoints" : "lines", k + 1);
        any = 1;
    }
    if (any) {
        g_string_append(s, "\n");
        return;
    }
    g_string_append(s, "set label 1 'no data in these runs' at graph 0.5,0.5 center\n"
                    "set xrange [0:1]\nset yrange [0:1]\nplot NaN notitle\n"
                    "unset label 1\nset autoscale\n");
}

/* The script of the runs' picture. */
static char *runs_script(struct run *r, int n)
{
    GString *s = g_string_new("");
    for (int k = 0; k < n; k++) { /* a run drawn with its trainers: its job's line bold */
        data_blocks(s, &r[k], k);
        g_string_append_printf(s, "set style line %d lc rgb '%s' dt %d lw %d pt %d ps 0.8\n",
                               k + 1, colours[r[k].colour], r[k].dash + 1, r[k].n_each ? 3 : 2,
                               7 + 2 * (r[k].dash % 4));
        for (int t = 0; t < r[k].n_each; t++)
            g_string_append_printf(s, "set style line %d lc rgb '%s' dt 1 lw 1\n",
                                   trainer_style(t), colours[(r[k].colour + 1 + t) % N_COLOURS]);
    }
    g_string_append_printf(s, "set datafile missing 'NaN'\nset grid\nunset key\n"
                           "set multiplot layout 3,2 title 'shadowsync: %d run%s' font ',13'\n",
                           n, n == 1 ? "" : "s");
    static const struct panel panels[] = {
        {"train NE (progressive) against examples", "examples", "train NE", 'p', "examples",
         "train_ne", 2, 4},
        {"eval NE against examples", "examples trained", "eval NE", 'e', "examples", "eval_ne", 1,
         2},
        {"EPS against time", "seconds", "examples/s", 'p', "elapsed_s", "eps", 1, 3},
        {"syncs/s against time", "seconds", "syncs/s", 'p', "elapsed_s", "syncs_per_s", 1, 5},
        {"sync gap against time (worker steps between syncs)", "seconds", "sync gap", 'p',
         "elapsed_s", "sync_gap", 1, 6},
    };
    for (size_t i = 0; i < sizeof panels / sizeof *panels; i++)
        draw_panel(s, &panels[i], r, n);
    /* the legend, a panel of its own: every run's line and label */
    g_string_append(s, "set title 'runs (sync.algo/mode/trainers x workers)'\nunset xlabel\n"
                    "unset ylabel\nunset grid\nunset border\nunset tics\nset xrange [0:1]\n"
                    "set yrange [0:1]\nset key center center Left reverse samplen 4 spacing 1.2 "
                    "font ',11'\n");
    for (int k = 0; k < n; k++) {
        g_string_append_printf(s, "%s NaN with linespoints ls %d title ", k ? ", \\\n    " : "plot",
                               k + 1);
        plot_quote(s, r[k].label);
        for (int t = 0; t < r[k].n_each; t++) {
            char *l = g_strdup_printf("%s trainer %d", r[k].label, t);
            g_string_append_printf(s, ", \\\n    NaN with lines ls %d title ", trainer_style(t));
            plot_quote(s, l);
            g_free(l);
        }
    }
    g_string_append(s, "\nunset multiplot\n");
    return g_string_free(s, FALSE);
}

/* How many trainers a trainers.csv has rows of (at most 64). */
static int trainers_in(const struct table *t)
{
    int most = 0, c = column(t, "trainer");
    for (int i = 0; c >= 0 && i < t->rows; i++) {
        double v = cell(t, i, c);
        if (v >= 0 && v < 64 && v + 1 > most)
            most = (int)v + 1;
    }
    return most;
}

int trainer_plot(const char *const *dirs, int n, const char *png, struct ss_err *e)
{
    struct run *r = ss_xcalloc((size_t)n, sizeof *r);
    int rc = 0, loaded = 0;
    for (; rc == 0 && loaded < n; loaded++)
        rc = load_run(&r[loaded], dirs[loaded], e);
    if (rc == 0) {
        style_runs(r, n);
        if (n == 1) /* one run: its trainers' lines too (several: the jobs' alone) */
            r[0].n_each = trainers_in(&r[0].each);
        char *script = runs_script(r, n);
        rc = plot_gnuplot(png, 1500, 1350, script, e);
        g_free(script);
    }
    for (int k = 0; k < loaded; k++)
        free_run(&r[k]);
    free(r);
    return rc;
}

void trainer_plot_own(const struct ss_config *c)
{
    char *png = g_build_filename(c->output.dir, "plot.png", NULL);
    const char *dir = c->output.dir;
    struct ss_err e = {0};
    if (trainer_plot(&dir, 1, png, &e) < 0)
        fprintf(stderr, "shadowsync: warning: output.plot: no %s: %s\n", png, e.msg);
    else if (!c->output.quiet)
        printf("# plot: %s\n", png);
    fflush(stdout);
    g_free(png);
}
