/* The `shadowsync` command: parses the verb and its flags, nothing else.
 *   shadowsync train CONFIG [--set section.key=value ...] [--help-config]
 *   shadowsync eval CONFIG --model DIR [--predictions FILE] [--set ...]
 *   shadowsync gen --out DIR --examples N [--eval-examples M] [--seed S] [--config CONFIG]
 *                  [--bag-size K]
 *   shadowsync convert CONFIG --in PATH --out DIR [--shard-examples N] [--set ...]
 *   shadowsync --version | --help
 * Exit status 0 on success, non-zero with a one-line reason on stderr. */
#include "shadowsync/reader.h"
#include "shadowsync/embps.h"
#include "shadowsync/gpu.h"
#include "shadowsync/rpc.h"
#include "shadowsync/shadow.h"
#include "shadowsync/syncps.h"
#include "shadowsync/trainer.h"

#include <cblas.h>
#include <limits.h>
#include <malloc.h>
#include <mpi.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/file.h>
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
    "  check CONFIG [--set ...]                     the config as train would resolve it:\n"
    "                                               its errors, or the role counts (tools/\n"
    "                                               submit asks before it launches)\n"
    "  plan CONFIG [--set ...]                      the embedding tables' placement on\n"
    "                                               job.embedding_ps PSs (the trainers with\n"
    "                                               embedding.placement = trainers), for every\n"
    "                                               strategy\n"
    "  --version                                    version and build features\n";

/* A training stopped by a signal (SIGINT, SIGTERM, SIGUSR1) that ended as
 * at the end of its data: EX_TEMPFAIL, for "resume it later". */
#define SS_EXIT_HALTED 75

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

/* path made absolute (from the working directory) with its "." and ".."
 * components resolved by name; g_free it. */
static char *absolute_path(const char *path)
{
    char *cwd = g_get_current_dir();
    char *joined = g_build_filename(path[0] == '/' ? "/" : cwd, path, NULL);
    g_free(cwd);
    gchar **parts = g_strsplit(joined, "/", -1);
    int n = 0; /* the kept components, in place */
    for (int i = 0; parts[i]; i++) {
        if (!strcmp(parts[i], "..")) {
            n -= n > 0;
        } else if (*parts[i] && strcmp(parts[i], ".")) {
            char *t = parts[n];
            parts[n++] = parts[i];
            parts[i] = t;
        }
    }
    GString *out = g_string_new("");
    for (int i = 0; i < n; i++)
        g_string_append_printf(out, "/%s", parts[i]);
    if (!n)
        g_string_append_c(out, '/');
    g_strfreev(parts);
    g_free(joined);
    return g_string_free(out, FALSE);
}

static int load_config(struct ss_config *c, struct args *a)
{
    struct ss_err e = {0};
    if (ss_config_load(c, a->config, a->sets, a->n_sets, &e) < 0)
        return die(&e);
    return 0;
}

/* data.eval holds examples this config reads (its first batch; a file or a
 * directory, not a pipe, which the probe would drain): a file of another
 * format is found before training, not after it. A second pass names the
 * first bad lines (data.report_bad_lines). */
static int probe_eval(const struct ss_config *c, struct ss_err *e)
{
    struct stat st;
    struct schema s;
    if (stat(c->data.eval, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) ||
        schema_from_config(&s, c, c->data.eval, e) < 0)
        return 0; /* said where the eval runs */
    for (int pass = 0; pass < 2; pass++) {
        struct reader *rd;
        struct ss_err why = {0};
        if (reader_open(&rd, c->data.eval, &s, 0, pass ? c->data.report_bad_lines : 0, &why) < 0)
            return ss_fail(e, why.code, "data.eval: %s (checked before training)", why.msg);
        struct batch b;
        batch_init(&b, 256, s.n_dense, s.n_cat);
        int rc = reader_next(rd, &b, &why);
        struct reader_stats rs;
        reader_stats(rd, &rs);
        int none = rc == 0 && b.n == 0;
        batch_free(&b);
        reader_close(rd);
        if (rc < 0) /* its first batch cannot be read: nor would the eval's */
            return ss_fail(e, rc, "data.eval: %s (checked before training)", why.msg);
        if (!none)
            return 0;
        if (pass)
            return ss_fail(e, SS_EINVAL, "data.eval = %s holds no example this config reads "
                           "(%lld bad lines%s): check data.format, data.separator, data.header "
                           "and the columns (data.*_cols), or point data.eval at eval data "
                           "(checked before training)", c->data.eval, (long long)rs.bad_lines,
                           rs.bad_lines && c->data.report_bad_lines ? ", the first named above"
                                                                    : "");
    }
    return 0;
}

/* Before any training, embedded or cluster: a run that does not resume
 * takes no earlier run's checkpoint.dir, and data.eval can be scored. */
static int prerun_checks(const struct ss_config *c, const char *resume, struct ss_err *e)
{
    int rc = 0;
    if (c->data.label_col < 0)
        return ss_fail(e, SS_EINVAL, "config: data.label_col = -1 (no label column) is for "
                       "scoring unlabeled data with `shadowsync eval --predictions`; training "
                       "needs a label column");
    if (*c->checkpoint.dir) { /* else every checkpoint fails, the run goes on */
        struct ss_err why = {0};
        if (ss_mkdir_p(c->checkpoint.dir, &why) < 0 || access(c->checkpoint.dir, W_OK) != 0)
            rc = ss_fail(e, SS_EIO, "checkpoint.dir = %s cannot hold checkpoints: %s (checked "
                         "before training)", c->checkpoint.dir,
                         *why.msg ? why.msg : strerror(errno));
    }
    if (rc == 0 && *c->checkpoint.dir) /* one run at a time: two would delete each other's */
        rc = ss_dir_lock("checkpoint.dir", c->checkpoint.dir, ".lock", e); /* (and a live run's
                                                                * checkpoints are no earlier run's) */
    struct stat a, b; /* a resume from another directory writes into checkpoint.dir too */
    int same = resume && stat(resume, &a) == 0 && stat(c->checkpoint.dir, &b) == 0 &&
               a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    struct ckpt_meta_set found;
    if (rc == 0 && *c->checkpoint.dir && !same &&
        (rc = ckpt_refuse_earlier(c->checkpoint.dir, &found, e)) < 0 && resume) {
        char from[4400];
        struct ckpt_meta_set m;
        int skipped;
        struct ss_err ignored = {0};
        double run = ckpt_meta_get(&found, "run", 0);
        if (run != 0 && ckpt_latest(resume, from, sizeof from, &m, &skipped, &ignored) == 0 &&
            ckpt_meta_get(&m, "run", 0) == run && /* this run's own, taken since: a requeue */
            ckpt_meta_get(&found, "examples", 0) > ckpt_meta_get(&m, "examples", 0))
            rc = ss_fail(e, SS_EINVAL, "checkpoint.dir = %s holds this run's newer checkpoints "
                         "(written after %s was resumed): --resume %s continues from them",
                         c->checkpoint.dir, resume, c->checkpoint.dir);
        else
            rc = ss_fail(e, SS_EINVAL, "--resume %s writes its own checkpoints into "
                         "checkpoint.dir = %s, which holds another run's (they would be "
                         "numbered on and deleted): give an empty checkpoint.dir, or --set "
                         "checkpoint.dir= for none", resume, c->checkpoint.dir);
    }
    if (rc == 0 && c->data.eval && *c->data.eval)
        rc = reader_check_eval(c->data.train, c->data.eval, e);
    if (rc == 0 && c->data.eval && *c->data.eval)
        rc = probe_eval(c, e);
    if (rc == 0 && *c->output.dir) { /* the checks passed: before a cluster job's plan is */
        struct ss_err why = {0};     /* written there (the run makes it, or names why, later) */
        if (ss_mkdir_p(c->output.dir, &why) == 0)
            rc = ss_dir_lock("output.dir", c->output.dir, ".run.lock", e);
    }
    return rc;
}

/* The master's checks before a job starts, every rank learning the outcome
 * (collective; a failure fails every rank): under --resume it picks the
 * newest complete checkpoint, then prerun_checks. */
static int master_checks(struct job_plan *p, const struct ss_config *c, const char *resume,
                         struct ss_err *e)
{
    struct ss_err shared = {0};
    int rc = 0;
    if (p->rank == 0 && resume) {
        struct ckpt_meta_set m;
        int skipped;
        rc = ckpt_latest(resume, p->resume_from, sizeof p->resume_from, &m, &skipped, &shared);
    }
    if (p->rank == 0 && rc == 0)
        rc = prerun_checks(c, resume, &shared);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(shared.msg, sizeof shared.msg, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(p->resume_from, sizeof p->resume_from, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rc < 0)
        return ss_fail(e, rc, "%s", shared.msg);
    return 0;
}

/* Every rank must run the same resolved config: one that differs (a stale
 * copy of the file on its host, another --set) would otherwise show up
 * later as a healthy rank named stalled. The ranks' hashes of it, gathered;
 * data.train aside (each host may name its own path to the same files). */
static int same_config(struct job_plan *p, const struct ss_config *c, struct ss_err *e)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    uint64_t h = SS_FNV_BASIS;
    struct ss_config k = *c; /* shallow: printed only */
    k.data.train = "";
    if (f) {
        ss_config_print(&k, f);
        fclose(f);
        h = ss_fnv1a(h, text, len);
        free(text);
    }
    uint64_t *all = ss_xcalloc((size_t)p->size, sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    char odd[256] = "";
    int n_odd = 0;
    for (int r = 1; r < p->size; r++)
        if (all[r] != all[0] && n_odd++ < 8) {
            size_t k = strlen(odd);
            snprintf(odd + k, sizeof odd - k, "%s%d", k ? ", " : "", r);
        }
    free(all);
    if (!n_odd)
        return 0;
    return ss_fail(e, SS_EINVAL, "rank(s) %s%s resolved another config than rank 0's (the file "
                   "on their host, or their --set, differ): every rank must run the same CONFIG "
                   "and --set, data.train aside (tools/submit launches them alike)", odd,
                   n_odd > 8 ? ", ..." : "");
}

/* The sync PSs' center past the dense floats: the hot rows, which start
 * from the tables' values (syncps_tail). arg: the job's hot_set. */
static void hot_tail_init(void *arg, const struct ss_config *c, const struct model_layout *l,
                          float *out)
{
    hot_initial(c, l, arg, out);
}

/* `shadowsync train` under mpirun: every rank takes its role from the
 * plan (DESIGN §2) and runs it until the job ends. */
static int cluster_train(struct ss_config *c, const char *resume)
{
    struct job_plan p;
    struct ss_err e = {0};
    int rc = rpc_bootstrap(&p, c, &e);
    if (rc == 0) /* every rank alike, before any thread calls MPI */
        p.pulse = rpc_pulse_new(&p, c->sync.timeout_s);
    if (rc == 0 && c->sync.timeout_s > 0) { /* the heartbeat starts with the roles */
        double limit = 2 * c->sync.timeout_s > 10 ? 2 * c->sync.timeout_s : 10;
        char me[128], msg[512];
        rpc_rank_name(&p, p.rank, me, sizeof me);
        snprintf(msg, sizeof msg, "%s: the job's start (its checks, placement, services and "
                 "connections) has not ended in %g s (2 x sync.timeout_s, at least 10): a rank "
                 "has stalled (stopped, hung or swapped out); ending the job", me, limit);
        p.start_guard = stall_guard_arm(limit, msg);
    }
    ss_halt_on_signals(0); /* SIGUSR1 (mpirun passes it to every rank): the trainers stop */
    p.end_wait_s = 2 * c->sync.timeout_s;
    if (rc == 0 && (rc = same_config(&p, c, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1; /* the master names the ranks; the others leave quietly */
    if (rc == 0 && p.role >= 0 && (rc = rpc_check_bind(c, &p, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1; /* every rank knows; the master names it */
    int des = c->embedding.placement == EMB_ON_TRAINERS;
    if (rc == 0 && !des && c->job.embedding_ps < 1)
        rc = ss_fail(&e, SS_EINVAL, "a cluster job needs job.embedding_ps >= 1 (the tables "
                                    "live on the embedding PSs), or embedding.placement = "
                                    "trainers");
    if (rc == 0 && des && c->job.embedding_ps > 0)
        rc = ss_fail(&e, SS_EINVAL, "embedding.placement = trainers keeps the tables on the "
                                    "trainers: set job.embedding_ps = 0 (its %d ranks would "
                                    "hold nothing)", c->job.embedding_ps);
    if (rc == 0 && sync_algo_needs(c->sync.algo) == SYNC_NEEDS_CENTER && c->job.sync_ps < 1)
        rc = ss_fail(&e, SS_EINVAL, "sync.algo = %s in a cluster job needs job.sync_ps >= 1 (its "
                                    "central copy lives there)", c->sync.algo);
    if (rc == 0 && p.rank == 0) {
        printf("# cluster job: %d ranks\n", p.size);
        for (int r = 0; r < p.size; r++) {
            int role, idx;
            rpc_assign_role(p.count, r, &role, &idx);
            printf("#   rank %d: %s %d on %s\n", r, rpc_role_name(role), idx, p.hosts[r]);
        }
        if (c->job.sync_ps > 0 && sync_algo_needs(c->sync.algo) != SYNC_NEEDS_CENTER)
            printf("# job.sync_ps = %d: sync.algo = %s does not use the sync PSs (they hold "
                   "easgd's center), so they stay idle; job.sync_ps = 0 saves their ranks\n",
                   c->job.sync_ps, c->sync.algo);
        fflush(stdout);
    }
    if (rc == 0 && p.rank != 0)
        c->output.quiet = 1; /* the master prints the job's figures */
    if (rc == 0 && p.role >= 0 && (rc = master_checks(&p, c, resume, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1; /* the master names the failure; the others leave quietly */
    struct placement pl = {0};
    if (rc == 0 && p.role >= 0 && (rc = placement_for_job(c, &p, &pl, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1; /* the master names the failure; the others leave quietly */
    p.placement = &pl;
    p.hot = NULL;
    if (rc == 0 && p.role >= 0 && (rc = hot_for_job(c, &p, &e)) < 0 && p.rank != 0)
        rc = 0, p.role = -1;
    if (rc == 0 && p.role >= 0) {
        struct syncps_tail tail = {.rows = p.hot ? p.hot->n : 0, .init = hot_tail_init,
                                   .arg = p.hot};
        switch (p.role) {
        case ROLE_TRAINER: rc = trainer_role_run(c, &p, &e); break;
        case ROLE_EMBEDDING_PS: rc = embps_role_run(c, &p, &e); break;
        case ROLE_SYNC_PS: rc = syncps_role_run(c, &p, &tail, &e); break;
        case ROLE_READER: rc = reader_role_run(c, &p, &e); break;
        default: rc = ss_fail(&e, SS_ESTATE, "rank %d has no role", p.rank);
        }
        if (rc < 0) {
            /* A rank that fails ends the whole job at once: the others may be
             * inside a collective that now never completes. */
            char me[128];
            rpc_rank_name(&p, p.rank, me, sizeof me);
            fprintf(stderr, "shadowsync: %s: %s\n", me, e.msg);
            job_abort();
        }
        rpc_report_roles(&p, c->output.dir); /* every role ran to the job's end */
    } else if (p.rank == 0) {
        fprintf(stderr, "shadowsync: %s\n", e.msg);
        rc = rc < 0 ? rc : SS_EINVAL;
    }
    placement_free(&pl);
    hot_free(p.hot);
    fflush(NULL); /* a status of the master's below ends the ranks mpirun still has */
    rpc_finalize(&p);
    /* a stopped job: the master's status alone (every trainer has seen the stop) */
    return rc < 0 ? 1 : p.rank == 0 && ss_halt_signal() ? SS_EXIT_HALTED : 0;
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
    int dir_set = 0; /* "--set checkpoint.dir=" asks a resumed run to write none */
    for (int i = 0; i < a.n_sets; i++) { /* "checkpoint.dir=", or " = " as in a file */
        const char *eq = strchr(a.sets[i], '=');
        char *key = eq ? g_strstrip(g_strndup(a.sets[i], (size_t)(eq - a.sets[i]))) : NULL;
        dir_set |= key && !strcmp(key, "checkpoint.dir");
        g_free(key);
    }
    if (resume && !*c.checkpoint.dir && !dir_set) { /* the resumed run goes on checkpointing there */
        g_free(c.checkpoint.dir);
        c.checkpoint.dir = g_strdup(resume);
    }
    if (rpc_under_mpirun() && rpc_path_has_dotdot(c.checkpoint.dir)) { /* services refuse a save path */
        char *abs = absolute_path(c.checkpoint.dir);                /* with ".." in it */
        if (resume == c.checkpoint.dir) /* a bare --resume: it names the same string */
            resume = abs;
        g_free(c.checkpoint.dir);
        c.checkpoint.dir = abs;
    }
    if (rpc_under_mpirun()) {
        rc = cluster_train(&c, resume);
        ss_config_free(&c);
        return rc;
    }
    struct ss_err e = {0};
    if ((rc = reader_check_train(c.data.train, &e)) < 0 ||
        (rc = prerun_checks(&c, resume, &e)) < 0) {
        ss_config_free(&c);
        return die(&e);
    }
    if (!c.output.quiet) {
        printf("# shadowsync %s — resolved config:\n", SS_VERSION);
        ss_config_print(&c, stdout);
        if (c.job.embedding_ps > 0 || c.job.sync_ps > 0 || c.job.readers > 0)
            printf("# job.embedding_ps = %d, job.sync_ps = %d, job.readers = %d are the ranks of "
                   "a cluster job (tools/submit, or mpirun): without mpirun this is the embedded "
                   "default, the tables, the EASGD center and the reader in this process\n",
                   c.job.embedding_ps, c.job.sync_ps, c.job.readers);
        fflush(stdout);
    }
    ss_halt_on_signals(1);
    rc = trainer_run(&c, resume, &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : ss_halt_signal() ? SS_EXIT_HALTED : 0;
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

static const int64_t criteo_cardinality[26] = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

/* The config's text schema, when gen's files (label, dense, categorical
 * columns in that order, tab-separated, hex ids) are what it reads; a
 * config of binary shards gives only the model's shape (its multi-hot
 * columns and layout are convert's business). */
static int gen_schema(const struct ss_config *c, const struct model_layout *l, struct schema *s,
                      struct ss_err *e)
{
    int rc = schema_from_config(s, c, NULL, e);
    if (rc < 0)
        return rc;
    if (s->format == FMT_BINARY) {
        memset(s->is_multihot, 0, sizeof s->is_multihot);
        return 0;
    }
    if (s->n_dense != l->n_dense || s->n_cat != l->n_tables)
        return ss_fail(e, SS_EINVAL,
                       "gen: the model takes %d dense and %d categorical features, the config's "
                       "data columns hold %d and %d", l->n_dense, l->n_tables, s->n_dense,
                       s->n_cat);
    int dense_ok = 1, cat_ok = 1;
    for (int j = 0; j < s->n_dense; j++)
        dense_ok &= s->dense_cols[j] == 1 + j;
    for (int t = 0; t < s->n_cat; t++)
        cat_ok &= s->cat_cols[t] == 1 + s->n_dense + t;
    const char *bad = s->sep != '\t'             ? "data.separator (gen writes tabs)"
                      : s->header_lines           ? "data.header (gen writes none)"
                      : s->label_col != 0         ? "data.label_col (gen writes it in column 0)"
                      : !dense_ok                 ? "data.dense_cols (gen writes them next)"
                      : !cat_ok                   ? "data.cat_cols (gen writes them last)"
                      : s->cat_encoding == CAT_DEC ? "data.cat_encoding = dec (gen writes hex ids)"
                                                  : NULL;
    if (bad)
        return ss_fail(e, SS_EINVAL,
                       "gen: it writes tab-separated text, label in column 0, then the %d dense and "
                       "%d categorical columns in order, hex ids, no header; the config's %s "
                       "reads another layout", s->n_dense, s->n_cat, bad);
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
                         .seed = (uint64_t)seed, .n_dense = 13, .n_tables = 26,
                         .cardinality = criteo_cardinality};
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
        if (model_layout_init(&l, &c, &e) < 0) {
            ss_config_free(&c);
            return die(&e);
        }
        g.n_dense = l.n_dense;
        g.n_tables = l.n_tables;
        g.cardinality = l.rows;
        if (gen_schema(&c, &l, &s, &e) < 0) {
            model_layout_free(&l);
            ss_config_free(&c);
            return die(&e);
        }
        g.multihot = s.is_multihot;
        g.multihot_sep = s.multihot_sep;
    }
    int bags = 0;
    for (int t = 0; g.multihot && t < g.n_tables; t++)
        bags += g.multihot[t] != 0;
    g.bag_size = bag > INT_MAX ? INT_MAX : (int)bag; /* gen_write says what is too big */
    if (opt(&a, "bag-size") && !bags)
        rc = bad_usage("gen: --bag-size needs a --config CONFIG with data.multihot_cols");
    double bayes = 0;
    if (rc == 0 && (rc = gen_write(&g, &bayes, &e)) == 0 && bags)
        printf("# %d multi-hot feature(s), bags of 1 to %d ids\n", bags, 2 * g.bag_size - 1);
    if (rc == 0) {
        printf("bayes_ne=%.6f\n", bayes);
        printf("# bayes_ne: the best NE on the %s split (the generator's own probabilities)%s%s\n",
               g.eval_examples ? "eval" : "train", g.eval_examples ? "" : ", as there is no eval split",
               isnan(bayes) ? "; nan: its labels are all 0 or all 1 (too few examples)" : "");
    }
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
    struct schema s;
    rc = schema_from_config(&s, &c, opt(&a, "in"), &e);
    if (rc == 0 && s.format == FMT_BINARY)
        rc = ss_fail(&e, SS_EINVAL, "convert: %s is already binary", opt(&a, "in"));
    if (rc == 0 && s.label_col < 0)
        rc = ss_fail(&e, SS_EINVAL, "convert: data.label_col = -1 (no label column), but a "
                     "binary shard holds each example's label");
    if (rc == 0)
        rc = reader_convert(opt(&a, "in"), opt(&a, "out"), &s, per, c.data.report_bad_lines, &e);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
}

/* `shadowsync check`: loads and checks the config as train would (every
 * key's range, the keys together, the model's widths), reads no data, and
 * prints the job's role counts: "trainers T embedding_ps E sync_ps S
 * readers R". */
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

static int cmd_check(int argc, char **argv)
{
    struct ss_config c;
    int rc = verb_config(argc, argv, "check", &c);
    if (rc)
        return rc;
    struct model_layout l = {0};
    struct ss_err e = {0};
    if (model_layout_init(&l, &c, &e) < 0 || trainer_check_memory(&c, &l, &e) < 0) {
        model_layout_free(&l);
        ss_config_free(&c);
        return die(&e);
    }
    printf("trainers %d embedding_ps %d sync_ps %d readers %d\n", c.job.trainers,
           c.job.embedding_ps, c.job.sync_ps, c.job.readers);
    model_layout_free(&l);
    ss_config_free(&c);
    return 0;
}

/* `shadowsync plan`: profiles data.train and prints the plan of the
 * config's strategy and the figures of all three (DESIGN §4). */
static int cmd_plan(int argc, char **argv)
{
    struct ss_config c;
    int rc = verb_config(argc, argv, "plan", &c);
    if (rc)
        return rc;
    struct ss_err e = {0};
    struct model_layout l = {0};
    struct placement pl = {0};
    int bins = placement_bins(&c, c.job.embedding_ps, c.job.trainers);
    if (bins < 1)
        rc = ss_fail(&e, SS_EINVAL, "plan: job.embedding_ps = 0 (the embedded default keeps its "
                                    "tables in-process): set job.embedding_ps, or "
                                    "embedding.placement = trainers");
    if (rc == 0)
        rc = model_layout_init(&l, &c, &e);
    double t0 = ss_now();
    if (rc == 0)
        rc = placement_for_config(&c, &l, bins, 1, &pl, stdout, &e);
    size_t n_center = l.n_params; /* the EASGD center: the dense floats, then the hot rows */
    struct hot_set *hot = NULL;
    if (rc == 0 && c.job.sync_ps > 0 && c.hot_embeddings.memory_mb > 0 &&
        (rc = hot_find(&c, &l, &hot, &e)) == 0 && hot) {
        n_center += (size_t)hot->n * (size_t)l.dim;
        printf("# hot embeddings: %lld rows, in the center after the dense floats\n",
               (long long)hot->n);
    }
    hot_free(hot);
    for (int q = 0; rc == 0 && q < c.job.sync_ps; q++) { /* by bytes */
        size_t lo, hi;
        ss_partition(n_center, c.job.sync_ps, q, &lo, &hi);
        printf("sync_ps %d: %s floats [%zu, %zu), %.2f MiB\n", q,
               n_center > l.n_params ? "center" : "dense", lo, hi, (hi - lo) * 4.0 / 1048576);
    }
    if (rc == 0 && c.output.dir[0])
        printf("# plan written to %s/placement.txt and placement.json (%.2f s)\n", c.output.dir,
               ss_now() - t0);
    placement_free(&pl);
    model_layout_free(&l);
    ss_config_free(&c);
    return rc < 0 ? die(&e) : 0;
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
    if (!strcmp(verb, "gen"))
        return cmd_gen(argc - 2, argv + 2);
    if (!strcmp(verb, "convert"))
        return cmd_convert(argc - 2, argv + 2);
    if (!strcmp(verb, "plan"))
        return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(verb, "check"))
        return cmd_check(argc - 2, argv + 2);
    char msg[256];
    snprintf(msg, sizeof msg, "unknown verb \"%s\"", verb);
    return bad_usage(msg);
}
