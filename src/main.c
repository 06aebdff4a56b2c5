/* The `shadowsync` command: parses the verb and its flags, nothing else;
 * the work is the modules' (trainer_launch, trainer_eval_saved,
 * gen_run, reader_convert_config, reader_inspect, trainer_check,
 * trainer_plan, export_onnx, trainer_plot, trainer_sweep).
 *   shadowsync train CONFIG [--set section.key=value ...] [--resume [DIR]] [--help-config]
 *   shadowsync eval CONFIG --model DIR [--predictions FILE] [--set ...]
 *   shadowsync gen --out DIR --examples N [--eval-examples M] [--seed S] [--config CONFIG]
 *                  [--bag-size K] [--set ...]
 *   shadowsync convert [CONFIG] --in PATH --out DIR [--shard-examples N] [--set ...]
 *   shadowsync inspect CONFIG [--sample N] [--json FILE] [--set ...]
 *   shadowsync check|plan CONFIG [--set ...]
 *   shadowsync export CONFIG --model DIR --out FILE.onnx [--set ...]
 *   shadowsync plot RUN_DIR [RUN_DIR ...] [--out FILE.png]
 *   shadowsync sweep CONFIG --vary section.key=v1,v2 [--vary ...] [--repeat N] [--out DIR]
 *                    [--retry-failed] [--set ...]
 *   shadowsync --version | --help
 * Exit status 0 on success, non-zero with a one-line reason on stderr (2:
 * the command line's mistake, with the usage). */
#include "shadowsync/export.h"
#include "shadowsync/gpu.h"
#include "shadowsync/reader.h"
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <unistd.h>

static const char usage[] =
    "usage: shadowsync VERB ...\n"
    "  train CONFIG [--set section.key=value ...]   train (the embedded default without mpirun)\n"
    "  train CONFIG --resume [DIR]                  continue from the newest complete checkpoint\n"
    "                                               in DIR (default checkpoint.dir)\n"
    "  train --help-config                          every config key with its default\n"
    "  eval CONFIG --model DIR [--predictions FILE] [--set ...]\n"
    "                                               score data.eval with a saved model: NE,\n"
    "                                               AUC; FILE (- = stdout) gets a probability\n"
    "                                               per input line (data.label_col = -1:\n"
    "                                               unlabeled data)\n"
    "  gen --out DIR --examples N [--eval-examples M] [--seed S] [--config CONFIG]\n"
    "      [--bag-size K] [--set ...]               synthetic Criteo-shaped data + Bayes NE\n"
    "                                               (bags of ~K ids in data.multihot_cols;\n"
    "                                               M: N/10, S: 1, K: 4 by default)\n"
    "  convert [CONFIG] --in PATH --out DIR [--shard-examples N] [--set ...]\n"
    "                                               text data to binary shards (of N\n"
    "                                               examples each; default: one shard)\n"
    "  inspect CONFIG [--sample N] [--json FILE] [--set ...]\n"
    "                                               data.train per column: distinct ids\n"
    "                                               (estimated past 4096; all exact in the\n"
    "                                               first N examples), lookups on shared\n"
    "                                               rows at model.rows, the rows for under\n"
    "                                               1 %, dense missing/min/max/mean, CTR,\n"
    "                                               bad lines; FILE gets them as JSON\n"
    "  check CONFIG [--set ...]                     the config as train would resolve it:\n"
    "                                               its errors, or the role counts (tools/\n"
    "                                               submit asks before it launches)\n"
    "  plan CONFIG [--set ...]                      the embedding tables' placement on\n"
    "                                               job.embedding_ps PSs (the trainers with\n"
    "                                               embedding.placement = trainers), for every\n"
    "                                               strategy\n"
    "  plan CONFIG --trainers LIST [--from RUN_DIR] [--trainer-eps E] [--trainer-cpu C]\n"
    "       [--link RATE] [--sync-link RATE] [--out FILE.png] [--set ...]\n"
    "                                               the sync side for LIST trainers (1,2,4,8\n"
    "                                               or 5-64): each sync PS's load, the shadow's\n"
    "                                               sync gap, foreground sync's EPS and the\n"
    "                                               sync PSs it needs (docs/cluster.md)\n"
    "  export CONFIG --model DIR --out FILE.onnx [--set ...]\n"
    "                                               the saved model as an ONNX graph (FILE.onnx),\n"
    "                                               its tables (FILE.onnx.data) and the\n"
    "                                               preprocessing of a raw line (FILE.onnx.json)\n"
    "  plot RUN_DIR [RUN_DIR ...] [--out FILE.png]  the runs' curves in one picture (gnuplot):\n"
    "                                               train and eval NE, EPS, syncs/s, sync gap;\n"
    "                                               FILE: RUN_DIR/plot.png of one run, else\n"
    "                                               plot.png (its script: FILE.gp)\n"
    "  sweep CONFIG --vary section.key=v1,v2[,...] [--vary ...] [--repeat N] [--out DIR]\n"
    "        [--retry-failed] [--set ...]           every combination's runs (N each), then\n"
    "                                               DIR/results.md, results.csv, sweep.png;\n"
    "                                               again on DIR: runs only what is missing\n"
    "                                               (DIR: sweeps/CONFIG's name)\n"
    "  --version                                    version and build features\n";

static int die(const struct ss_err *e)
{
    fprintf(stderr, "shadowsync: %s\n", e->msg);
    return 1;
}

static int bad_usage(const char *why)
{
    fprintf(stderr, "shadowsync: %s\n%s", why, usage);
    return 2;
}

/* Debian's DYNAMIC_ARCH OpenBLAS picks the slow Prescott kernel on some
 * AVX-512 Intel CPUs (TOOLCHAIN.md). The kernel is chosen when the library
 * loads, so when that happened and the user set nothing, re-exec once with
 * OPENBLAS_CORETYPE=SkylakeX. An OPENBLAS_CORETYPE already set is kept. */
static void pick_blas_kernel(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE") || getenv("SS_BLAS_REEXEC"))
        return;
    const char *core = openblas_get_corename();
    if (!core || strcasecmp(core, "prescott") != 0 || !ss_cpu_has_avx512())
        return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    setenv("SS_BLAS_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
}

static int print_version(void)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    char *nl = strchr(mpi, '\n');
    if (nl)
        *nl = 0;
    printf("shadowsync %s\n", SS_VERSION);
    printf("  blas:   OpenBLAS, %s kernel\n", openblas_get_corename());
    printf("  mpi:    %s\n", mpi);
    printf("  thrift: c_glib, binary protocol (%s)\n", g_type_name(THRIFT_TYPE_BINARY_PROTOCOL));
    char why[256];
    int n = gpu_probe(why, sizeof why);
    printf("  gpu:    %s\n", gpu_build_info());
    printf("  device: %s%s\n", n > 0 ? "" : "none: ", why);
    printf("  onnx:   %s\n", export_available(why, sizeof why) ? "export (protobuf-c, opset 17)" : why);
    return 0;
}

/* Splits argv after the verb into one positional CONFIG, --set overrides
 * and named options (--name value). */
struct args {
    const char *config;
    char *sets[256];
    int n_sets;
    const char *names[16], *values[16];
    int n_opts;
    int help_config;
};

static int parse_args(int argc, char **argv, struct args *a, const char *const *allowed)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!strcmp(s, "--help-config")) {
            int ok = 0; /* train's alone: elsewhere it would be taken and ignored */
            for (int k = 0; allowed[k]; k++)
                ok |= !strcmp(allowed[k], "help-config");
            if (!ok)
                return bad_usage("--help-config goes with train (shadowsync train "
                                 "--help-config)");
            a->help_config = 1;
        } else if (!strcmp(s, "--set")) {
            if (i + 1 >= argc)
                return bad_usage("--set needs section.key=value");
            if (a->n_sets == 256)
                return bad_usage("too many --set (at most 256)");
            a->sets[a->n_sets++] = argv[++i];
        } else if (!strncmp(s, "--set=", 6)) {
            if (a->n_sets == 256)
                return bad_usage("too many --set (at most 256)");
            a->sets[a->n_sets++] = (char *)s + 6;
        } else if (!strncmp(s, "--", 2)) {
            int ok = 0;
            for (int k = 0; allowed[k]; k++)
                ok |= !strcmp(allowed[k], s + 2);
            char msg[256];
            msg[0] = 0;
            for (int k = 0; k < a->n_opts; k++)
                if (!strcmp(a->names[k], s + 2))
                    snprintf(msg, sizeof msg, "%s is given twice", s);
            if (!ok || i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) /* not the next option */
                snprintf(msg, sizeof msg, "unknown option or missing value: %s", s);
            if (*msg)
                return bad_usage(msg);
            a->names[a->n_opts] = s + 2;
            a->values[a->n_opts++] = argv[++i];
        } else if (!a->config) {
            a->config = s;
        } else {
            char msg[256];
            snprintf(msg, sizeof msg, "unexpected argument: %s", s);
            return bad_usage(msg);
        }
    }
    return 0;
}

static const char *opt(const struct args *a, const char *name)
{
    for (int i = 0; i < a->n_opts; i++)
        if (!strcmp(a->names[i], name))
            return a->values[i];
    return NULL;
}

static int load_config(struct ss_config *c, struct args *a)
{
    struct ss_err e = {0};
    if (ss_config_load(c, a->config, a->sets, a->n_sets, &e) < 0)
        return die(&e);
    return 0;
}

/* Takes "--resume [DIR]" out of argv (DIR: the next argument when it is a
 * directory); *resume = DIR, "" for checkpoint.dir, or NULL. A next argument
 * that is neither an option nor anything on disk was meant as DIR: refused. */
static int take_resume(int *argc, char **argv, const char **resume)
{
    *resume = NULL;
    int out = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strcmp(argv[i], "--resume") || !strncmp(argv[i], "--resume=", 9)) {
            struct stat st;
            if (*resume) {
                fprintf(stderr, "shadowsync: --resume is given twice: name one checkpoint "
                        "directory\n");
                return 2;
            }
            if (argv[i][8] == '=')
                *resume = argv[i] + 9;
            else if (i + 1 < *argc && stat(argv[i + 1], &st) == 0 && S_ISDIR(st.st_mode))
                *resume = argv[++i];
            else if (i + 1 < *argc && argv[i + 1][0] != '-' && stat(argv[i + 1], &st) != 0 &&
                     !g_str_has_suffix(argv[i + 1], ".ini")) { /* a CONFIG's typo: its own error */
                fprintf(stderr, "shadowsync: --resume %s: no such checkpoint directory\n",
                        argv[i + 1]);
                return 2;
            } else
                *resume = "";
            continue;
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    return 0;
}

static int cmd_train(int argc, char **argv)
{
    static const char *const allowed[] = {"help-config", NULL};
    struct args a;
    const char *resume;
    int rc = take_resume(&argc, argv, &resume);
    if (rc)
        return rc;
    rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (a.help_config) {
        ss_config_print_reference(stdout);
        return 0;
    }
    if (!a.config)
        return bad_usage("train needs a CONFIG file");
    ss_halt_block(); /* before any thread (MPI_Init's too): a SIGUSR1 waits for its taker */
    struct ss_config c;
    if ((rc = load_config(&c, &a)))
        return rc;
    if (resume && !*resume)
        resume = c.checkpoint.dir;
    char one[4200]; /* one checkpoint named: its parent is the checkpoint.dir --resume takes */
    snprintf(one, sizeof one, "%s/MANIFEST", resume ? resume : "");
    if (resume && *resume && access(one, F_OK) == 0) {
        char *parent = g_path_get_dirname(resume);
        fprintf(stderr, "shadowsync: --resume %s is one checkpoint; --resume takes the "
                "checkpoint.dir that holds it and continues from its newest complete one: "
                "--resume %s\n", resume, parent);
        g_free(parent);
        ss_config_free(&c);
        return 2;
    }
    if (resume && !*resume) {
        ss_config_free(&c);
        return bad_usage("--resume needs a checkpoint DIR (or checkpoint.dir in the config)");
    }
    const char *dir_from = ss_config_origin(&c, "checkpoint.dir");
    int dir_set = dir_from && !strncmp(dir_from, "--set ", 6); /* "--set checkpoint.dir=" asks a
                                                                * resumed run to write none */
    if (resume && !*c.checkpoint.dir && !dir_set) { /* the resumed run goes on checkpointing there */
        g_free(c.checkpoint.dir);
        c.checkpoint.dir = g_strdup(resume);
    }
    rc = trainer_launch(&c, resume);
    ss_config_free(&c);
    return rc;
}

static int cmd_eval(int argc, char **argv)
{
    static const char *const allowed[] = {"model", "predictions", NULL};
    struct args a;
    int rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (!a.config || !opt(&a, "model"))
        return bad_usage("eval needs CONFIG and --model DIR");
    struct ss_config c;
    if ((rc = load_config(&c, &a)))
        return rc;
    struct ss_err e = {0};
    rc = trainer_eval_saved(&c, opt(&a, "model"), opt(&a, "predictions"), &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
}

static int cmd_export(int argc, char **argv)
{
    static const char *const allowed[] = {"model", "out", NULL};
    struct args a;
    int rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (!a.config || !opt(&a, "model") || !opt(&a, "out"))
        return bad_usage("export needs CONFIG, --model DIR and --out FILE.onnx");
    struct ss_config c;
    if ((rc = load_config(&c, &a)))
        return rc;
    struct ss_err e = {0};
    rc = export_onnx(&c, opt(&a, "model"), opt(&a, "out"), stdout, &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
}

static int parse_count(const char *s, const char *what, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = s && *s ? strtoll(s, &end, 10) : -1;
    if (!s || !*s || *end || v < 0 || errno == ERANGE) {
        fprintf(stderr, "shadowsync: %s = \"%s\" is not a non-negative integer%s\n", what,
                s ? s : "", errno == ERANGE ? " below 2^63" : "");
        return 2;
    }
    *out = v;
    return 0;
}

static int cmd_gen(int argc, char **argv)
{
    static const char *const allowed[] = {"out",    "examples", "eval-examples", "seed",
                                          "config", "bag-size", NULL};
    struct args a;
    int rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (a.config)
        return bad_usage("gen takes no positional argument (use --config CONFIG)");
    if (!opt(&a, "out") || !opt(&a, "examples"))
        return bad_usage("gen needs --out DIR and --examples N");
    int64_t n, m = 0, seed = 1, bag = 4;
    if ((rc = parse_count(opt(&a, "examples"), "--examples", &n)) ||
        (opt(&a, "bag-size") && (rc = parse_count(opt(&a, "bag-size"), "--bag-size", &bag))) ||
        (opt(&a, "eval-examples") &&
         (rc = parse_count(opt(&a, "eval-examples"), "--eval-examples", &m))) ||
        (opt(&a, "seed") && (rc = parse_count(opt(&a, "seed"), "--seed", &seed))))
        return rc;
    if (n == 0)
        return bad_usage("gen: --examples 0 writes no data (at least 1)");
    if (a.n_sets && !opt(&a, "config"))
        return bad_usage("gen: --set changes a --config CONFIG, and none is given");
    if (!opt(&a, "eval-examples"))
        m = n / 10 > 0 ? n / 10 : 1;
    struct gen_opts g = {.out_dir = opt(&a, "out"), .examples = n, .eval_examples = m,
                         .seed = (uint64_t)seed};
    gen_criteo_shape(&g);
    struct schema s;
    struct ss_config c;
    struct model_layout l = {0};
    struct ss_err e = {0};
    int have_cfg = 0;
    if (opt(&a, "config")) {
        a.config = opt(&a, "config");
        if ((rc = load_config(&c, &a)))
            return rc;
        have_cfg = 1;
        if (!opt(&a, "seed")) /* the config's job.seed, as its doc says (both 1 by default) */
            g.seed = (uint64_t)c.job.seed;
        rc = gen_shape_from_config(&g, &c, &l, &s, &e);
    }
    g.bag_size = bag > INT_MAX ? INT_MAX : (int)bag; /* gen_write says what is too big */
    if (rc == 0 && opt(&a, "bag-size") && !gen_multihot_features(&g))
        rc = bad_usage("gen: --bag-size needs a --config CONFIG with data.multihot_cols");
    if (rc == 0)
        rc = gen_run(&g, stdout, &e);
    model_layout_free(&l);
    if (have_cfg)
        ss_config_free(&c);
    return rc < 0 ? die(&e) : rc;
}

static int cmd_convert(int argc, char **argv)
{
    static const char *const allowed[] = {"in", "out", "shard-examples", NULL};
    struct args a;
    int rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (!opt(&a, "in") || !opt(&a, "out"))
        return bad_usage("convert needs [CONFIG] --in PATH --out DIR");
    int64_t per = 0;
    if (opt(&a, "shard-examples") &&
        (rc = parse_count(opt(&a, "shard-examples"), "--shard-examples", &per)))
        return rc;
    struct ss_config c;
    if ((rc = load_config(&c, &a)))
        return rc;
    struct ss_err e = {0};
    rc = reader_convert_config(&c, opt(&a, "in"), opt(&a, "out"), per, &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
}

static int cmd_inspect(int argc, char **argv)
{
    static const char *const allowed[] = {"sample", "json", NULL};
    struct args a;
    int rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (!a.config)
        return bad_usage("inspect needs a CONFIG file");
    struct inspect_opts o = {.json_path = opt(&a, "json")};
    if (opt(&a, "sample") && (rc = parse_count(opt(&a, "sample"), "--sample", &o.sample)))
        return rc;
    if (opt(&a, "sample") && o.sample == 0)
        return bad_usage("inspect: --sample 0 reads no example (at least 1)");
    if (o.json_path && !*o.json_path)
        return bad_usage("inspect: --json needs a FILE");
    struct ss_config c;
    if ((rc = load_config(&c, &a)))
        return rc;
    struct ss_err e = {0};
    rc = reader_inspect(&c, &o, stdout, &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
}

/* A verb of CONFIG [--set ...] alone: its config loaded into c (0), or
 * the exit status of its usage's or config's error. */
static int verb_config(int argc, char **argv, const char *verb, struct ss_config *c)
{
    static const char *const allowed[] = {NULL};
    struct args a;
    int rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (!a.config) {
        char msg[64];
        snprintf(msg, sizeof msg, "%s needs a CONFIG file", verb);
        return bad_usage(msg);
    }
    return load_config(c, &a);
}

/* `shadowsync check` (trainer_check). */
static int cmd_config_verb(int argc, char **argv, const char *verb,
                           int (*run)(const struct ss_config *, FILE *, struct ss_err *))
{
    struct ss_config c;
    int rc = verb_config(argc, argv, verb, &c);
    if (rc)
        return rc;
    struct ss_err e = {0};
    rc = run(&c, stdout, &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
}

/* `shadowsync plan CONFIG [--trainers LIST [--from RUN_DIR] [--trainer-eps E]
 * [--link RATE] [--sync-link RATE] [--out FILE.png]] [--set ...]`. */
static int cmd_plan(int argc, char **argv)
{
    static const char *const allowed[] = {"trainers", "from", "trainer-eps", "trainer-cpu",
                                          "link", "sync-link", "out", NULL};
    struct args a;
    int rc = parse_args(argc, argv, &a, allowed);
    if (rc)
        return rc;
    if (!a.config)
        return bad_usage("plan needs a CONFIG file");
    struct plan_sync_opts o = {.trainers = opt(&a, "trainers"), .from = opt(&a, "from"),
                               .link = opt(&a, "link"), .sync_link = opt(&a, "sync-link"),
                               .png = opt(&a, "out")};
    const char *te = opt(&a, "trainer-eps"), *tc = opt(&a, "trainer-cpu");
    char *end = NULL;
    if (te && (o.trainer_eps = strtod(te, &end), end == te || *end || !(o.trainer_eps > 0)))
        return bad_usage("plan: --trainer-eps needs examples a second (> 0)");
    if (tc && (o.trainer_cpu = strtod(tc, &end), end == tc || *end || !(o.trainer_cpu > 0)))
        return bad_usage("plan: --trainer-cpu needs the cores of a trainer host (> 0)");
    if (!o.trainers && (o.from || te || tc || o.link || o.sync_link || o.png))
        return bad_usage("plan: --from, --trainer-eps, --trainer-cpu, --link, --sync-link and "
                         "--out plan the sync side, which needs --trainers LIST (1,2,4,8 or "
                         "5-64)");
    struct ss_config c;
    if ((rc = load_config(&c, &a)))
        return rc;
    struct ss_err e = {0};
    rc = trainer_plan(&c, &o, stdout, &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
}

/* `shadowsync plot RUN_DIR ... [--out FILE.png]` (trainer_plot). */
static int cmd_plot(int argc, char **argv)
{
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs), *out = NULL;
    int n = 0, rc = 0;
    for (int i = 0; i < argc && rc == 0; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            free(dirs);
            return 0;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc && !out) {
            out = argv[++i];
        } else if (!strncmp(argv[i], "--", 2)) {
            char msg[256];
            snprintf(msg, sizeof msg, "plot: unknown option, missing or second value: %s",
                     argv[i]);
            rc = bad_usage(msg);
        } else {
            dirs[n++] = argv[i];
        }
    }
    if (rc == 0 && n == 0)
        rc = bad_usage("plot needs a RUN_DIR");
    char *own = n == 1 && !out ? g_build_filename(dirs[0], "plot.png", NULL) : NULL;
    struct ss_err e = {0};
    if (rc == 0 && trainer_plot(dirs, n, own ? own : out ? out : "plot.png", &e) < 0)
        rc = die(&e);
    else if (rc == 0)
        printf("plot: %s\n", own ? own : out ? out : "plot.png");
    g_free(own);
    free(dirs);
    return rc;
}

/* `shadowsync sweep` (trainer_sweep): --vary may be given many times,
 * --retry-failed takes no value; the rest as parse_args reads it. */
static int cmd_sweep(int argc, char **argv)
{
    static const char *const allowed[] = {"repeat", "out", NULL};
    char **vary = calloc((size_t)argc + 1, sizeof *vary);
    int n_vary = 0, retry = 0, rest = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--vary") && i + 1 < argc)
            vary[n_vary++] = argv[++i];
        else if (!strncmp(argv[i], "--vary=", 7))
            vary[n_vary++] = argv[i] + 7;
        else if (!strcmp(argv[i], "--retry-failed"))
            retry = 1;
        else
            argv[rest++] = argv[i];
    }
    struct args a;
    int rc = parse_args(rest, argv, &a, allowed);
    int64_t repeat = 1;
    if (rc == 0 && !a.config)
        rc = bad_usage("sweep needs a CONFIG file");
    if (rc == 0 && n_vary == 0)
        rc = bad_usage("sweep needs --vary section.key=v1,v2,...");
    if (rc == 0 && opt(&a, "repeat") && (rc = parse_count(opt(&a, "repeat"), "--repeat", &repeat)) == 0 &&
        (repeat < 1 || repeat > 1000))
        rc = bad_usage("sweep: --repeat N runs each setting N times (1 to 1000)");
    if (rc) {
        free(vary);
        return rc;
    }
    char *stem = g_path_get_basename(a.config), *dot = strrchr(stem, '.');
    if (dot && dot != stem)
        *dot = 0;
    char *out = opt(&a, "out") ? g_strdup(opt(&a, "out")) : g_build_filename("sweeps", stem, NULL);
    struct sweep_opts o = {.config = a.config, .sets = a.sets, .n_sets = a.n_sets, .vary = vary,
                           .n_vary = n_vary, .repeat = (int)repeat, .out = out,
                           .retry_failed = retry};
    rc = trainer_sweep(&o);
    g_free(stem);
    g_free(out);
    free(vary);
    return rc;
}

int main(int argc, char **argv)
{
    pick_blas_kernel(argv);
    /* a GPU trainer's worker streams, its shadow thread's and NCCL's each on
     * a hardware queue of its own where the device has them: with CUDA's 8 a
     * worker's copies could queue behind an all-reduce waiting on a peer
     * (read when CUDA starts; a user's own setting stays) */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    /* NCCL connects the trainers inside ncclCommInitRank, which runs under
     * a stall guard, rather than (its default from 2.22) in the first
     * collective to pick each algorithm, on the host, where a peer stalled
     * then would hang a round past any deadline of ours */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    signal(SIGPIPE, SIG_IGN);
    rpc_types_init();
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* TOOLCHAIN.md pitfall 8 */
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    if (argc < 2)
        return bad_usage("no verb given");
    const char *verb = argv[1];
    if (!strcmp(verb, "--version") || !strcmp(verb, "version"))
        return print_version();
    if (!strcmp(verb, "--help") || !strcmp(verb, "-h") || !strcmp(verb, "help")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(verb, "train"))
        return cmd_train(argc - 2, argv + 2);
    if (!strcmp(verb, "eval"))
        return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(verb, "export"))
        return cmd_export(argc - 2, argv + 2);
    if (!strcmp(verb, "gen"))
        return cmd_gen(argc - 2, argv + 2);
    if (!strcmp(verb, "convert"))
        return cmd_convert(argc - 2, argv + 2);
    if (!strcmp(verb, "inspect"))
        return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(verb, "plan"))
        return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(verb, "check"))
        return cmd_config_verb(argc - 2, argv + 2, "check", trainer_check);
    if (!strcmp(verb, "plot"))
        return cmd_plot(argc - 2, argv + 2);
    if (!strcmp(verb, "sweep"))
        return cmd_sweep(argc - 2, argv + 2);
    char msg[256];
    snprintf(msg, sizeof msg, "unknown verb \"%s\"", verb);
    return bad_usage(msg);
}
