/* Configuration (DESIGN §7): the INI file a job reads (GLib GKeyFile), its
 * defaults, "section.key=value" overrides, and validation that names the
 * key and the value at fault.
 *
 * Every key is one row of the table `keys` below: section, name, type, place
 * in struct ss_config, default (as text), range or choices and a one-line
 * doc. Defaults, file values and overrides all go through set_value(), so a
 * default is parsed and checked exactly like user input; printing the
 * resolved config and the commented reference are walks of the same table.
 * A struct ss_config owns its strings (g_malloc'ed); ss_config_free frees
 * them. */
#include "shadowsync/core.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

enum key_type { T_INT, T_INT64, T_DOUBLE, T_BOOL, T_STRING, T_ENUM };
enum { OPEN_MIN = 1, OPEN_MAX = 2 }; /* exclusive bounds: (min, max) */

struct choice {
    const char *name;
    int value;
};

struct key_desc {
    const char *section, *key;
    enum key_type type;
    size_t off;                   /* of the field in struct ss_config */
    const char *def;              /* default, as a user would write it */
    double min, max;              /* T_INT, T_INT64, T_DOUBLE */
    int open;                     /* OPEN_MIN | OPEN_MAX */
    const struct choice *choices; /* T_ENUM; for T_STRING: the allowed values */
    const char *doc;
};

#define P40 1099511627776.0
#define P62 4611686018427387904.0

#define OFF(sec, key) offsetof(struct ss_config, sec.key)
#define NUM(t, sec, key, def, lo, hi, open, doc) \
    { #sec, #key, t, OFF(sec, key), def, lo, hi, open, NULL, doc }
#define INT(sec, key, def, lo, hi, doc) NUM(T_INT, sec, key, def, lo, hi, 0, doc)
#define I64(sec, key, def, lo, hi, doc) NUM(T_INT64, sec, key, def, lo, hi, 0, doc)
#define DBL(sec, key, def, lo, hi, open, doc) NUM(T_DOUBLE, sec, key, def, lo, hi, open, doc)
#define BOOL(sec, key, def, doc) NUM(T_BOOL, sec, key, def, 0, 1, 0, doc)
#define STR(sec, key, def, doc) { #sec, #key, T_STRING, OFF(sec, key), def, 0, 0, 0, NULL, doc }
#define ENUM(sec, key, def, ch, doc) { #sec, #key, T_ENUM, OFF(sec, key), def, 0, 0, 0, ch, doc }
#define ONE_OF(sec, key, def, ch, doc) \
    { #sec, #key, T_STRING, OFF(sec, key), def, 0, 0, 0, ch, doc }

static const struct choice formats[] = {
    {"auto", FMT_AUTO}, {"criteo", FMT_CRITEO}, {"csv", FMT_CSV}, {"binary", FMT_BINARY},
    {"libsvm", FMT_LIBSVM}, {NULL, 0}};
static const struct choice cat_encodings[] = {
    {"hex", CAT_HEX}, {"dec", CAT_DEC}, {"hash", CAT_HASH}, {NULL, 0}};
static const struct choice dense_opts[] = {{"sgd", OPT_SGD}, {"adagrad", OPT_ADAGRAD}, {NULL, 0}};
static const struct choice schedules[] = {{"auto", SCHED_AUTO}, {"manual", SCHED_MANUAL}, {NULL, 0}};
static const struct choice emb_opts[] = {
    {"sgd", OPT_SGD}, {"rowwise_adagrad", OPT_ROWWISE_ADAGRAD}, {NULL, 0}};
static const struct choice devices[] = {
    {"cpu", DEV_CPU}, {"cuda", DEV_CUDA}, {"auto", DEV_AUTO}, {NULL, 0}};
static const struct choice dense_backends[] = {
    {"auto", DENSE_AUTO}, {"onednn", DENSE_ONEDNN}, {"openblas", DENSE_OPENBLAS}, {NULL, 0}};
static const struct choice precisions[] = {{"fp32", PREC_FP32}, {"bf16", PREC_BF16}, {NULL, 0}};
static const struct choice sync_algos[] = {
    {"none", 0}, {"easgd", 0}, {"ma", 0}, {"bmuf", 0}, {"allreduce", 0}, {NULL, 0}};
static const struct choice sync_modes[] = {
    {"shadow", SYNC_SHADOW}, {"foreground", SYNC_FOREGROUND}, {NULL, 0}};
static const struct choice sync_outputs[] = {
    {"trainer0", OUT_TRAINER0}, {"average", OUT_AVERAGE}, {NULL, 0}};
static const struct choice emb_places[] = {
    {"ps", EMB_ON_PS}, {"trainers", EMB_ON_TRAINERS}, {NULL, 0}};
static const struct choice wires[] = {
    {"fp32", WIRE_FP32}, {"fp16", WIRE_FP16}, {"bf16", WIRE_BF16}, {NULL, 0}};
static const struct choice poolings[] = {{"sum", POOL_SUM}, {"mean", POOL_MEAN}, {NULL, 0}};
static const struct choice splits[] = {
    {"auto", SPLIT_AUTO}, {"lines", SPLIT_LINES}, {"files", SPLIT_FILES}, {NULL, 0}};
static const struct choice strategies[] = {
    {"profile", 0}, {"round_robin", 0}, {"hash", 0}, {NULL, 0}};

static const struct key_desc keys[] = {
    INT(job, trainers, "1", 1, 1024,
        "trainers (in one process for the embedded default; MPI ranks in a cluster job)"),
    INT(job, embedding_ps, "0", 0, 4096,
        "embedding parameter servers (cluster job only; 0 = tables in the trainer process)"),
    INT(job, sync_ps, "0", 0, 4096,
        "sync parameter servers holding the EASGD center (cluster job only)"),
    INT(job, readers, "0", 0, 4096, "reader services (cluster job only; 0 = read in-process)"),
    I64(job, seed, "1", 0, P62, "seed of every random choice (init, data generation)"),
    STR(job, bind, "", "address services bind to (empty = job.interface's, else the host's address)"),
    STR(job, interface, "", "where each rank's services bind and announce: an interface (e.g. "
        "eth0) or an IPv4 network (e.g. 10.1.0.0/16); empty = the host's address"),
    STR(job, link_rate, "auto", "each host's link rate, as tc writes it (100mbit, 1gbit, 10gbit), "
        "for sync.link_share; auto = the speed the kernel reports for the interface of the rank's "
        "address (none on a loopback or a virtual interface without one); off = unknown"),
    DBL(job, rpc_timeout_s, "30", 0, 3600, OPEN_MIN,
        "seconds a call to a service may take before the job ends naming the service"),

    STR(data, train, "", "training data: a file, a directory of shards, or a glob"),
    STR(data, eval, "", "evaluation data (empty = no eval figures)"),
    ENUM(data, format, "auto", formats, "input format (auto = detect from the data)"),
    STR(data, separator, "\\t", "field separator of text input (one character; \\t or tab = a tab)"),
    INT(data, header, "0", 0, 1000000, "lines to skip at the top of every text file"),
    INT(data, label_col, "0", -1, SS_MAX_COLS - 1,
        "label column (0-based; -1 = none: unlabeled data, which only eval --predictions scores)"),
    STR(data, dense_cols, "1-13",
        "dense feature columns (0-based, ranges allowed; libsvm: fields; empty: none, the "
        "bottom MLP's one input a constant, model.bottom = 1-...)"),
    STR(data, cat_cols, "14-39", "categorical columns (0-based, ranges allowed; libsvm: fields)"),
    STR(data, multihot_cols, "",
        "categorical columns that hold several ids separated by data.multihot_sep"),
    STR(data, multihot_sep, ",", "separator of the ids in a multi-hot column (one character)"),
    STR(data, fields, "",
        "libsvm without libFM's field:index:value: each field's index range, in field order "
        "(\"1-13,14-90000\": field 0 is indices 1-13)"),
    ENUM(data, cat_encoding, "hex", cat_encodings, "how a categorical token becomes an id"),
    INT(data, report_bad_lines, "5", 0, 1000000, "bad lines reported as file:line: reason"),
    I64(data, max_examples, "0", 0, P62,
        "stop after this many training examples, every pass's together (0 = all; readers "
        "splitting data.train by lines count its lines, bad ones too)"),
    INT(data, epochs, "1", 1, 1000000,
        "passes over data.train, each in the same order (each reader reading its share)"),
    ENUM(data, split, "auto", splits,
         "how several readers of data.train (job.readers, or the trainers with job.readers = "
         "0) split it: lines = every n-th line of every file, each reader reading all; files = "
         "whole files, balanced by size, each reader reading its own; auto = files where the "
         "busiest reader gets at most 1.1x the even share of bytes, else lines"),
    INT(data, collision_check_batches, "200", 0, 1000000,
        "batches (trainer.batch_size examples) of data.train whose ids the run counts at start, "
        "warning of a table with more distinct ids than rows (0 = no check)"),
    DBL(data, collision_warn, "0.1", 0, 1, 0,
        "the start-up check warns of such a table when more than this share of its lookups "
        "land on a row shared with another id"),

    STR(model, rows, "200000",
        "rows per embedding table: one number for all or a comma list; auto (for all, or an "
        "entry of the list) = sized at start from the distinct ids of data.train, for under 1 % "
        "of its lookups on a row shared with another id (docs/data.md)"),
    DBL(model, rows_budget_mb, "4096", 0, P40, OPEN_MIN,
        "MiB that the model.rows = auto tables may take together (rows x (model.dim + "
        "optimizer state) x 4 B); past it every auto table is scaled down by one factor"),
    I64(model, rows_auto_examples, "0", 0, P62,
        "examples of data.train whose ids size the model.rows = auto tables (0 = all of it, "
        "or data.max_examples where set; fewer undercount a long tail)"),
    INT(model, dim, "16", 1, SS_MAX_DIM, "embedding dimension (the width of every table's rows)"),
    STR(model, bottom, "13-512-256-64-16", "bottom MLP widths, dense input first, last = model.dim"),
    STR(model, top, "367-512-256-1",
        "top MLP widths, interaction width first (\"auto\" = computed), last = 1"),
    ENUM(model, pooling, "sum", poolings,
         "how a bag of ids becomes one vector: the sum of its rows, or their mean (steadier "
         "on long multi-hot bags)"),

    ENUM(optim, dense, "adagrad", dense_opts, "optimizer of the dense (MLP) parameters"),
    ENUM(optim, emb, "rowwise_adagrad", emb_opts, "optimizer of the embedding rows"),
    DBL(optim, dense_lr, "0.01", 0, 100, OPEN_MIN, "learning rate of the dense parameters"),
    DBL(optim, emb_lr, "0.02", 0, 100, OPEN_MIN, "learning rate of the embedding rows"),
    DBL(optim, eps, "1e-8", 0, 1, 0, "Adagrad epsilon"),
    DBL(optim, init_acc, "0", 0, 100, 0, "initial Adagrad accumulator"),
    ENUM(optim, schedule, "auto", schedules,
        "auto: where optim.decay_examples = 0 and data.train's size is known, both rates decay "
        "over the last optim.auto_decay_share of the job's examples (every pass's) to x0.05; "
        "manual: the keys below as set"),
    DBL(optim, auto_decay_share, "0.1", 0, 1, OPEN_MIN,
        "optim.schedule = auto: the share of the job's examples its decay spans"),
    I64(optim, warmup_examples, "0", 0, P62,
        "both learning rates rise linearly (from 1/N of theirs) over the job's first N "
        "examples (0 = none)"),
    I64(optim, decay_start, "0", 0, P62,
        "the job's examples after which both learning rates decay (with optim.decay_examples)"),
    I64(optim, decay_examples, "0", 0, P62,
        "both learning rates decay over N examples from optim.decay_start, as the square of "
        "the part left, to optim.decay_to of their value, held after (0 = no decay)"),
    DBL(optim, decay_to, "0", 0, 1, 0,
        "the learning rates' fraction at the end of the decay, held after it"),

    INT(trainer, worker_threads, "1", 1, 256, "Hogwild worker threads per trainer"),
    INT(trainer, batch_size, "128", 1, 1048576, "examples per batch of each worker"),
    ENUM(trainer, device, "cpu", devices, "where the MLPs run (auto = CUDA when available)"),
    ENUM(trainer, dense_backend, "auto", dense_backends,
         "what runs the MLP matmuls on a CPU: oneDNN or OpenBLAS (auto = oneDNN where this build has it)"),
    ENUM(trainer, precision, "fp32", precisions,
         "the MLP matmuls' inputs on a CPU: fp32, or bf16 with fp32 accumulation and fp32 master "
         "weights (oneDNN, on a CPU with AVX512_BF16 or AMX)"),

    ONE_OF(sync, algo, "none", sync_algos, "how trainers synchronize their dense parameters"),
    ENUM(sync, mode, "shadow", sync_modes,
         "shadow = a background thread syncs; foreground = the workers sync"),
    INT(sync, gap, "10", 1, 1000000, "foreground: sync every gap iterations of each worker"),
    DBL(sync, alpha, "0.5", 0, 1, 0, "elastic/averaging weight"),
    DBL(sync, bmuf_momentum, "0.5", 0, 1, OPEN_MAX, "block momentum"),
    DBL(sync, bmuf_lr, "1.0", 0, 10, OPEN_MIN, "block learning rate"),
    BOOL(sync, bmuf_nesterov, "false", "Nesterov block momentum"),
    ENUM(sync, output, "trainer0", sync_outputs,
         "the final model: trainer 0's parameters or the average over trainers"),
    DBL(sync, shadow_sleep_ms, "10", 0, 60000, 0,
        "pause of the shadow thread between syncs, so it leaves the workers their cores (0: sync back to back)"),
    DBL(sync, shadow_cpu_share, "0.1", 0, 1, 0,
        "where a trainer's host has no core to spare for its shadow thread (its CPU quota or "
        "affinity gives fewer than the workers + 1), the thread pauses longer so that it takes at "
        "most this share of the host's cores (0: never)"),
    DBL(sync, link_share, "0.5", 0, 1, 0,
        "cluster job, shadow mode: the sync PSs' connections (a trainer's pushes, a sync PS's "
        "answers) are paced to this share of job.link_rate, so that a round's bulk transfer never "
        "queues the embedding lookups behind it on the link (0 or no known rate: unpaced)"),
    DBL(sync, timeout_s, "600", 0, 1e6, 0,
        "cluster job: seconds a trainer waits on the others (a sync round's all-reduce, a DES "
        "exchange, a checkpoint, their progress reports) before it ends the job naming the one "
        "that stalled, and twice that for any rank whose process went silent (its heartbeat); keep "
        "it above a trainer's longest checkpoint write (0: for ever)"),

    ONE_OF(placement, strategy, "profile", strategies,
           "how embedding tables are placed on embedding parameter servers"),
    INT(placement, profile_batches, "100", 0, 1000000, "batches of data.train profiled by the profile strategy (0: assume equal tables)"),
    STR(placement, pin, "", "pins TABLE:PS or TABLE@LO-HI:PS (rows LO..HI-1), comma separated; the strategy places the rest"),

    ENUM(embedding, placement, "ps", emb_places,
         "where the tables live: ps = the embedding PSs (embedded default: one copy shared by "
         "the process's trainers); trainers = sharded over the trainers, which exchange pooled "
         "partial sums all-to-all every step (DES, synchronous)"),
    ENUM(embedding, wire, "bf16", wires,
         "the pooled vectors and their gradients between trainers and embedding PSs: bf16 or fp16 "
         "(scaled by a power of two per message) in half the bytes, or fp32; rows are kept and "
         "updated in fp32"),

    I64(embedding_ps, memory_mb, "16384", 1, P40, "memory of each embedding parameter server, MiB"),

    DBL(hot_embeddings, memory_mb, "0", 0, 4096, 0,
        "MiB of the most looked-up embedding rows, replicated on every trainer and synced by its shadow thread (0: none)"),
    INT(hot_embeddings, min_lookups, "4", 1, 1000000000,
        "a row is hot when it is looked up at least this often in the profiled batches"),
    INT(hot_embeddings, profile_batches, "100", 1, 1000000,
        "batches of data.train read to find the hot rows"),

    INT(embedding_cache, rows, "0", 0, 100000000,
        "embedding rows each worker thread caches, read and updated locally (0: no cache)"),
    INT(embedding_cache, staleness, "2", 0, 1000000,
        "updates a cached row may be behind the tables before it is fetched again, and ahead before its updates are pushed (0: as without a cache)"),

    STR(checkpoint, dir, "", "checkpoint directory (empty = no checkpoints)"),
    DBL(checkpoint, interval_s, "0", 0, 1e9, 0, "seconds between checkpoints (0 = only at the end)"),

    STR(output, dir, "runs/latest", "run directory"),
    DBL(output, log_interval_s, "5", 0, 1e6, OPEN_MIN, "seconds between progress lines"),
    I64(output, eval_every, "0", 0, P62,
        "training examples between evals of data.eval while the job trains (eval.csv; the "
        "master scores a copy of trainer 0's model on a thread of its own), 0 = only at the end"),
    BOOL(output, save_model, "true", "save the trained model in the run directory"),
    BOOL(output, quiet, "false", "no progress lines"),
    BOOL(output, plot, "false",
         "write plot.png (the run's curves, drawn by gnuplot) into the run directory at the end"),
};

#define N_KEYS (sizeof keys / sizeof keys[0])

static void *field(struct ss_config *c, const struct key_desc *d)
{
    return (char *)c + d->off;
}

static const void *cfield(const struct ss_config *c, const struct key_desc *d)
{
    return (const char *)c + d->off;
}

static const struct key_desc *find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].section, section) && !strcmp(keys[i].key, key))
            return &keys[i];
    return NULL;
}

static int section_known(const char *section)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].section, section))
            return 1;
    return 0;
}

/* Edit distance (insert, delete, substitute, swap of neighbours), capped. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* "unknown key S.K" or "unknown section [S]", with the nearest known name
 * when one is near (" (did you mean sync.alpha?)"). key: NULL for a section. */
static int unknown(struct ss_err *e, const char *where, const char *section, const char *key)
{
    int known = section_known(section), best = 3;
    const char *bs = NULL, *bk = NULL;
    for (size_t i = 0; i < N_KEYS; i++) {
        int d = known ? (strcmp(keys[i].section, section) || !key ? 99
                                                                  : distance(key, keys[i].key))
                      : distance(section, keys[i].section);
        if (d < best)
            best = d, bs = keys[i].section, bk = keys[i].key;
    }
    char hint[160] = "";
    for (int close = 0; close < 2 && known && !bs && key; close++) /* another section's key: */
        for (size_t i = 0; !bs && i < N_KEYS; i++)                  /* the same name first */
            if (close ? distance(key, keys[i].key) < 2 : !strcmp(keys[i].key, key))
                bs = keys[i].section, bk = keys[i].key;
    if (bs && (known || (key && find_key(bs, key))))
        snprintf(hint, sizeof hint, " (did you mean %s.%s?)", bs, known ? bk : key);
    else if (bs)
        snprintf(hint, sizeof hint, " (did you mean [%s]?)", bs);
    if (!known)
        return ss_fail(e, SS_EINVAL, "%s: unknown section [%s]%s", where, section, hint);
    return ss_fail(e, SS_EINVAL, "%s: unknown key %s.%s%s", where, section, key, hint);
}

/* ---- describing a key: range, choices -------------------------------- */

static void format_bound(const struct key_desc *d, double v, char *buf, size_t n)
{
    if (d->type == T_DOUBLE)
        g_ascii_formatd(buf, n, "%g", v);
    else
        snprintf(buf, n, "%" PRId64, (int64_t)v);
}

static void format_range(const struct key_desc *d, char *buf, size_t n)
{
    char lo[32], hi[32];
    format_bound(d, d->min, lo, sizeof lo);
    format_bound(d, d->max, hi, sizeof hi);
    snprintf(buf, n, "%c%s, %s%c", d->open & OPEN_MIN ? '(' : '[', lo, hi,
             d->open & OPEN_MAX ? ')' : ']');
}

static void format_choices(const struct choice *ch, char *buf, size_t n)
{
    buf[0] = '\0';
    for (; ch->name; ch++) {
        if (buf[0])
            g_strlcat(buf, "|", n);
        g_strlcat(buf, ch->name, n);
    }
}

/* "[1, 1024]", "(cpu|cuda|auto)", "(true|false)" or "" for a free string. */
static void describe(const struct key_desc *d, char *buf, size_t n)
{
    char ch[256];
    buf[0] = '\0';
    if (d->type == T_INT || d->type == T_INT64 || d->type == T_DOUBLE) {
        format_range(d, buf, n);
    } else if (d->type == T_BOOL) {
        snprintf(buf, n, "(true|false)");
    } else if (d->choices) {
        format_choices(d->choices, ch, sizeof ch);
        snprintf(buf, n, "(%s)", ch);
    }
}

/* ---- parsing one value ----------------------------------------------- */

static int fail_value(struct ss_err *e, const char *where, const struct key_desc *d,
                      const char *v, const char *what)
{
    return ss_fail(e, SS_EINVAL, "%s: %s.%s = \"%s\" %s", where, d->section, d->key, v, what);
}

static int fail_range(struct ss_err *e, const char *where, const struct key_desc *d,
                      const char *v)
{
    char range[96];
    format_range(d, range, sizeof range);
    return ss_fail(e, SS_EINVAL, "%s: %s.%s = %s is out of range %s", where, d->section, d->key,
                   v, range);
}

static int below_min(const struct key_desc *d, double v)
{
    return d->open & OPEN_MIN ? v <= d->min : v < d->min;
}

static int above_max(const struct key_desc *d, double v)
{
    return d->open & OPEN_MAX ? v >= d->max : v > d->max;
}

static int set_integer(struct ss_config *c, const struct key_desc *d, const char *v,
                       const char *where, struct ss_err *e)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || g_ascii_isspace(v[0]))
        return fail_value(e, where, d, v, "is not an integer");
    /* compared as integers: 2^62 + 1 must not round down to the bound */
    int64_t lo = (int64_t)d->min, hi = (int64_t)d->max;
    if (errno == ERANGE || x < lo + !!(d->open & OPEN_MIN) || x > hi - !!(d->open & OPEN_MAX))
        return fail_range(e, where, d, v);
    if (d->type == T_INT)
        *(int *)field(c, d) = (int)x;
    else
        *(int64_t *)field(c, d) = x;
    return 0;
}

static int set_double(struct ss_config *c, const struct key_desc *d, const char *v,
                      const char *where, struct ss_err *e)
{
    char *end;
    errno = 0;
    double x = g_ascii_strtod(v, &end);
    if (end == v || *end || g_ascii_isspace(v[0]) || isnan(x))
        return fail_value(e, where, d, v, "is not a number");
    if ((errno == ERANGE && fabs(x) == HUGE_VAL) || below_min(d, x) || above_max(d, x))
        return fail_range(e, where, d, v); /* (an underflow is a number that small, or 0) */
    *(double *)field(c, d) = x;
    return 0;
}

static int set_bool(struct ss_config *c, const struct key_desc *d, const char *v,
                    const char *where, struct ss_err *e)
{
    static const char *const yes[] = {"true", "1", "yes"}, *const no[] = {"false", "0", "no"};
    for (int i = 0; i < 3; i++) {
        if (!g_ascii_strcasecmp(v, yes[i]) || !g_ascii_strcasecmp(v, no[i])) {
            *(int *)field(c, d) = !g_ascii_strcasecmp(v, yes[i]);
            return 0;
        }
    }
    return fail_value(e, where, d, v, "is not a boolean (true|false|1|0|yes|no)");
}

static const struct choice *find_choice(const struct choice *ch, const char *v)
{
    for (; ch->name; ch++)
        if (!strcmp(ch->name, v))
            return ch;
    return NULL;
}

static int fail_choice(struct ss_err *e, const char *where, const struct key_desc *d,
                       const char *v)
{
    char ch[256], what[300];
    format_choices(d->choices, ch, sizeof ch);
    snprintf(what, sizeof what, "is not one of %s", ch);
    return fail_value(e, where, d, v, what);
}

static int set_enum(struct ss_config *c, const struct key_desc *d, const char *v,
                    const char *where, struct ss_err *e)
{
    const struct choice *ch = find_choice(d->choices, v);
    if (!ch)
        return fail_choice(e, where, d, v);
    *(int *)field(c, d) = ch->value;
    return 0;
}

static int set_string(struct ss_config *c, const struct key_desc *d, const char *v,
                      const char *where, struct ss_err *e)
{
    char *t = g_strdup(v);
    if (d->choices) /* a name: blanks after it (unseen in an editor) are no part of it */
        g_strstrip(t);
    if (d->choices && !find_choice(d->choices, t)) {
        int rc = fail_choice(e, where, d, t);
        g_free(t);
        return rc;
    }
    char **s = field(c, d);
    g_free(*s);
    *s = t;
    return 0;
}

/* Parses v (already unescaped) into the key's field; where ("config FILE")
 * prefixes errors. Strings are taken verbatim; other values may carry
 * surrounding white space. */
static int set_value(struct ss_config *c, const struct key_desc *d, const char *v,
                     const char *where, struct ss_err *e)
{
    if (d->type == T_STRING)
        return set_string(c, d, v, where, e);
    char *t = g_strstrip(g_strdup(v));
    int rc = 0;
    switch (d->type) {
    case T_INT:
    case T_INT64: rc = set_integer(c, d, t, where, e); break;
    case T_DOUBLE: rc = set_double(c, d, t, where, e); break;
    case T_BOOL: rc = set_bool(c, d, t, where, e); break;
    case T_ENUM: rc = set_enum(c, d, t, where, e); break;
    case T_STRING: break;
    }
    g_free(t);
    return rc;
}

/* ---- sources: defaults, the file, overrides -------------------------- */

static int apply_defaults(struct ss_config *c, struct ss_err *e)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        int rc = set_value(c, &keys[i], keys[i].def, "config default", e);
        if (rc)
            return rc;
    }
    return 0;
}

static int apply_key(struct ss_config *c, GKeyFile *kf, const char *group, const char *key,
                     const char *where, struct ss_err *e)
{
    const struct key_desc *d = find_key(group, key);
    if (!d)
        return unknown(e, where, group, key);
    GError *err = NULL;
    char *v = g_key_file_get_string(kf, group, key, &err);
    if (err) { /* a bad escape: GLib may return a string and an error */
        int rc = ss_fail(e, SS_EFORMAT, "%s: %s.%s: %s", where, group, key, err->message);
        g_error_free(err);
        g_free(v);
        return rc;
    }
    int rc = set_value(c, d, v, where, e);
    g_free(v);
    return rc;
}

/* "config PATH:LINE" of name ("[section]" or "section.key") in lines. */
static void where_at(char *out, size_t cap, const char *path, GHashTable *lines,
                     const char *name)
{
    int at = GPOINTER_TO_INT(g_hash_table_lookup(lines, name));
    if (at)
        snprintf(out, cap, "config %s:%d", path, at);
    else
        snprintf(out, cap, "config %s", path);
}

static int apply_group(struct ss_config *c, GKeyFile *kf, const char *group, const char *path,
                       GHashTable *lines, struct ss_err *e)
{
    char where[4400], *name = g_strdup_printf("[%s]", group);
    where_at(where, sizeof where, path, lines, name);
    g_free(name);
    if (!section_known(group))
        return unknown(e, where, group, NULL);
    char **names = g_key_file_get_keys(kf, group, NULL, NULL);
    int rc = 0;
    for (size_t i = 0; !rc && names && names[i]; i++) {
        name = g_strdup_printf("%s.%s", group, names[i]);
        where_at(where, sizeof where, path, lines, name);
        g_free(name);
        rc = apply_key(c, kf, group, names[i], where, e);
    }
    g_strfreev(names);
    return rc;
}

/* GKeyFile names neither the line of a syntax error nor a key given twice
 * (it keeps the last, silently): one pass over the text names both by
 * path:line. What it passes, GKeyFile reads as before. */
static int check_lines(const char *text, const char *path, GHashTable *seen, struct ss_err *e)
{
    if (!strncmp(text, "\xef\xbb\xbf", 3))
        return ss_fail(e, SS_EFORMAT, "config %s:1: the file begins with a UTF-8 byte order "
                       "mark: save it without one", path);
    char **lines = g_strsplit(text, "\n", -1);
    char group[256] = "";
    int rc = 0;
    for (int n = 0; !rc && lines[n]; n++) {
        char *s = g_strstrip(lines[n]); /* trailing \r too */
        if (!*s || *s == '#')
            continue;
        if (*s == '[') {
            size_t len = strlen(s);
            if (s[len - 1] != ']' || len < 3 || memchr(s + 1, ']', len - 2) ||
                memchr(s + 1, '[', len - 2))
                rc = ss_fail(e, SS_EFORMAT, "config %s:%d: \"%s\" is not a [section] line", path,
                             n + 1, s);
            else
                snprintf(group, sizeof group, "%.*s", (int)strlen(s) - 2, s + 1);
            char *name = g_strdup_printf("[%s]", group); /* its first line names it */
            if (!g_hash_table_contains(seen, name))
                g_hash_table_insert(seen, name, GINT_TO_POINTER(n + 1));
            else
                g_free(name);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) { /* shown escaped: a binary file's bytes are no text for a terminal */
            char *shown = g_strescape(s, NULL);
            rc = ss_fail(e, SS_EFORMAT, "config %s:%d: \"%.200s\" is neither a [section], a "
                         "key = value nor a # comment", path, n + 1, shown);
            g_free(shown);
            continue;
        }
        if (!*group) {
            rc = ss_fail(e, SS_EFORMAT, "config %s:%d: \"%s\" comes before any [section]", path,
                         n + 1, s);
            continue;
        }
        *eq = 0;
        const char *key = g_strstrip(s);
        if (!*key || strchr(key, '[')) { /* GKeyFile takes key[locale] as key's translation */
            rc = ss_fail(e, SS_EFORMAT, "config %s:%d: \"%s\" is no key name%s", path, n + 1,
                         key, *key ? " (a [locale] suffix has no meaning here)" : "");
            continue;
        }
        char *name = g_strdup_printf("%s.%s", group, key);
        int first = GPOINTER_TO_INT(g_hash_table_lookup(seen, name));
        const char *val = eq + 1 + strspn(eq + 1, " \t"); /* "sep = #" is a value */
        const char *hash = strstr(val, " #"), *tab = strstr(val, "\t#");
        if (first)
            rc = ss_fail(e, SS_EINVAL, "config %s:%d: %s is given twice (first at line %d)", path,
                         n + 1, name, first);
        else if (hash || tab) /* GKeyFile would take it into the value, silently for a string */
            rc = ss_fail(e, SS_EFORMAT, "config %s:%d: %s = \"%s\" ends in a comment: comments "
                         "take whole lines, so it would be part of the value; put it on a line "
                         "of its own", path, n + 1, name, g_strstrip(eq + 1));
        g_hash_table_insert(seen, name, GINT_TO_POINTER(n + 1)); /* takes name */
    }
    g_strfreev(lines);
    return rc;
}

#define CONFIG_MAX_BYTES (16u << 20) /* a config is a page of text: more is not one */

/* The text of config file path (g_free it) in *text, its length in *len:
 * 1, 0 where it cannot be opened (GKeyFile says why), or an error for a
 * file over CONFIG_MAX_BYTES (told by its size, or read up to one byte
 * past it: a pipe or a device) or one holding a NUL byte (no text). */
static int read_config_text(const char *path, char **text, size_t *len, struct ss_err *e)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > CONFIG_MAX_BYTES) {
        close(fd);
        return ss_fail(e, SS_EINVAL, "config %s: %lld bytes, more than a config holds (at most "
                       "%u MiB): not a config file?", path, (long long)st.st_size,
                       CONFIG_MAX_BYTES >> 20);
    }
    char *buf = g_malloc(CONFIG_MAX_BYTES + 2);
    size_t got = 0;
    ssize_t k = 0;
    while (got <= CONFIG_MAX_BYTES &&
           ((k = read(fd, buf + got, CONFIG_MAX_BYTES + 1 - got)) > 0 || (k < 0 && errno == EINTR)))
        got += k > 0 ? (size_t)k : 0;
    int rc = k < 0 ? ss_fail(e, SS_EIO, "config %s: %s", path, strerror(errno)) : 1;
    close(fd);
    const char *nul = rc > 0 ? memchr(buf, '\0', got) : NULL;
    if (rc > 0 && got > CONFIG_MAX_BYTES)
        rc = ss_fail(e, SS_EINVAL, "config %s: more than %u MiB, more than a config holds: not "
                     "a config file?", path, CONFIG_MAX_BYTES >> 20);
    else if (nul)
        rc = ss_fail(e, SS_EFORMAT, "config %s: a NUL byte at byte %zu (of %zu): not text, so "
                     "not a config file", path, (size_t)(nul - buf), got);
    if (rc <= 0) {
        g_free(buf);
        return rc;
    }
    buf[got] = '\0';
    *text = g_realloc(buf, got + 1);
    *len = got;
    return 1;
}

/* lines: each "section.key" of the file to its line (the caller's). */
static int apply_file(struct ss_config *c, const char *path, GHashTable *lines, struct ss_err *e)
{
    char *where = g_strdup_printf("config %s", path);
    GKeyFile *kf = g_key_file_new();
    GError *err = NULL;
    int rc = 0;
    char *text = NULL;
    size_t len = 0;
    int got = read_config_text(path, &text, &len, e); /* 0, unreadable: GKeyFile says why */
    if (got < 0)
        rc = got;
    else if (got)
        rc = check_lines(text, path, lines, e);
    if (!rc && !(got ? g_key_file_load_from_data(kf, text, len, G_KEY_FILE_NONE, &err)
                     : g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &err))) {
        rc = ss_fail(e, err->domain == G_FILE_ERROR ? SS_EIO : SS_EFORMAT, "%s: %s", where,
                     err->message);
        g_error_free(err);
    } else if (!rc) {
        char **groups = g_key_file_get_groups(kf, NULL);
        for (size_t i = 0; !rc && groups[i]; i++)
            rc = apply_group(c, kf, groups[i], path, lines, e);
        g_strfreev(groups);
    }
    g_free(text);
    g_key_file_free(kf);
    g_free(where);
    return rc;
}

/* "section.key=value": a string value verbatim (no INI unescaping, its
 * blanks kept); "section.key = value" reads as in a file (blanks around
 * the value dropped). */
static int apply_override(struct ss_config *c, const char *ov, struct ss_err *e)
{
    const char *eq = strchr(ov, '=');
    const char *dot = eq ? memchr(ov, '.', (size_t)(eq - ov)) : NULL;
    if (!dot || dot == ov || dot + 1 == eq)
        return ss_fail(e, SS_EINVAL, "config: override \"%s\" is not section.key=value", ov);
    int ini = eq > ov && (eq[-1] == ' ' || eq[-1] == '\t'); /* "a.b = 1", as in a file */
    char *section = g_strstrip(g_strndup(ov, (size_t)(dot - ov)));
    char *key = g_strstrip(g_strndup(dot + 1, (size_t)(eq - dot - 1)));
    const struct key_desc *d = find_key(section, key);
    char *value = g_strdup(eq + 1); /* "a.b=v": v verbatim, unless a number or a name */
    if (ini || (d && (d->type != T_STRING || d->choices)))
        g_strstrip(value);
    char *where = g_strdup_printf("config: override \"%s\"", ov);
    int rc = d ? set_value(c, d, value, "config", e) : unknown(e, where, section, key);
    g_free(where);
    g_free(section);
    g_free(key);
    g_free(value);
    return rc;
}

/* ---- checks across keys ---------------------------------------------- */

/* A one-character separator; "\t" (two characters) and "tab" mean a tab,
 * "space" a space, and one character in double quotes itself (an INI
 * value's spaces are stripped). */
static int check_char(char **s, const char *key, struct ss_err *e)
{
    char *bare = g_strstrip(g_strdup(*s));
    if (strlen(*s) > 1 && *bare) { /* "tab  ", ", ": blanks around a name or a character */
        g_free(*s);
        *s = bare;
    } else {
        g_free(bare);
    }
    size_t n = strlen(*s);
    const char *to = !strcmp(*s, "\\t") || !strcmp(*s, "tab") ? "\t"
                     : !strcmp(*s, "space")                    ? " "
                     : n == 3 && (*s)[0] == '"' && (*s)[2] == '"' ? *s + 1
                                                                  : NULL;
    if (to) {
        char *v = g_strndup(to, 1);
        g_free(*s);
        *s = v;
    }
    if (strlen(*s) != 1)
        return ss_fail(e, SS_EINVAL, "config: %s = '%s' is not one character (tab, space, or "
                       "one character in double quotes name one too)", key, *s);
    return 0;
}

/* placement.pin's syntax, as placement reads it: comma-separated items
 * TABLE:PS or TABLE@LO-HI:PS, blanks anywhere in one. */
static int check_pins(const char *pins, struct ss_err *e)
{
    char **items = g_strsplit(pins ? pins : "", ",", -1);
    int rc = 0;
    for (int i = 0; items[i] && rc == 0; i++) {
        char *t = g_strdup(items[i]), *d = t;
        for (const char *q = items[i]; *q; q++)
            if (!g_ascii_isspace(*q))
                *d++ = *q;
        *d = 0;
        long long a, b, lo, hi;
        int used = 0, ok;
        if (!*t)
            ok = 1;
        else if (strchr(t, '@'))
            ok = sscanf(t, "%lld@%lld-%lld:%lld%n", &a, &lo, &hi, &b, &used) == 4 && !t[used];
        else
            ok = sscanf(t, "%lld:%lld%n", &a, &b, &used) == 2 && !t[used];
        if (!ok)
            rc = ss_fail(e, SS_EINVAL, "config: placement.pin: \"%s\" is not TABLE:PS or "
                         "TABLE@LO-HI:PS (comma-separated)", items[i]);
        g_free(t);
    }
    g_strfreev(items);
    return rc;
}

/* optim.decay_start and optim.decay_to belong to a decay: without
 * optim.decay_examples there is none. */
static int check_schedule(const struct ss_config *c, struct ss_err *e)
{
    if (c->optim.decay_start && !c->optim.decay_examples)
        return ss_config_fail(e, c, "optim.decay_start optim.decay_examples",
                              "optim.decay_start = %lld starts a decay that "
                              "optim.decay_examples = 0 leaves out: set how many examples it "
                              "lasts, or optim.decay_start = 0", (long long)c->optim.decay_start);
    if (c->optim.decay_to && !c->optim.decay_examples)
        return ss_config_fail(e, c, "optim.decay_to optim.decay_examples",
                              "optim.decay_to = %g is the end of a decay that "
                              "optim.decay_examples = 0 leaves out: set how many examples it "
                              "lasts, or optim.decay_to = 0", c->optim.decay_to);
    return 0;
}

/* output.eval_every scores data.eval mid-run on the master alone. */
static int check_eval_every(const struct ss_config *c, struct ss_err *e)
{
    if (c->output.eval_every && (!c->data.eval || !*c->data.eval))
        return ss_config_fail(e, c, "output.eval_every data.eval", "output.eval_every = %lld "
                              "scores data.eval while the job trains, but data.eval is empty: "
                              "give the eval data, or set output.eval_every = 0",
                              (long long)c->output.eval_every);
    if (c->output.eval_every && c->embedding.placement == EMB_ON_TRAINERS)
        return ss_config_fail(e, c, "output.eval_every embedding.placement",
                              "output.eval_every needs the tables on embedding PSs "
                              "(embedding.placement = ps): with them on the trainers (DES) every "
                              "trainer takes part in an eval, which only the end of the run "
                              "allows; set output.eval_every = 0");
    return 0;
}

static int check_config(struct ss_config *c, struct ss_err *e)
{
    int cols[SS_MAX_COLS], dims[SS_MAX_LAYERS + 1]; /* only the syntax matters here */
    if (check_char(&c->data.separator, "data.separator", e) ||
        check_char(&c->data.multihot_sep, "data.multihot_sep", e))
        return SS_EINVAL;
    /* a column's name is found in the data's header when the schema is read */
    if (ss_parse_named_cols(c->data.dense_cols, cols, SS_MAX_COLS, NULL, 0, e,
                            "data.dense_cols") < 0 ||
        ss_parse_named_cols(c->data.cat_cols, cols, SS_MAX_COLS, NULL, 0, e, "data.cat_cols") < 0 ||
        ss_parse_named_cols(c->data.multihot_cols, cols, SS_MAX_COLS, NULL, 0, e,
                            "data.multihot_cols") < 0)
        return SS_EINVAL;
    if (check_pins(c->placement.pin, e) < 0) /* its syntax now; its tables and PSs at placement */
        return SS_EINVAL;
    g_strstrip(c->model.bottom); /* widths: blanks around them are none of theirs */
    g_strstrip(c->model.top);
    if (ss_parse_dims(c->model.bottom, dims, SS_MAX_LAYERS + 1, e, "model.bottom") < 0)
        return SS_EINVAL;
    if ((c->optim.dense == OPT_ADAGRAD || c->optim.emb == OPT_ROWWISE_ADAGRAD) &&
        c->optim.eps == 0 && c->optim.init_acc == 0)
        return ss_config_fail(e, c, "optim.eps optim.init_acc", "optim.eps = 0 with "
                              "optim.init_acc = 0: Adagrad's first step of a zero gradient is "
                              "0 / 0 (NaN); set either above 0");
    if (check_schedule(c, e) < 0 || check_eval_every(c, e) < 0)
        return SS_EINVAL;
    double rate;
    if (strcmp(c->job.link_rate, "auto") && ss_parse_rate(c->job.link_rate, &rate) < 0)
        return ss_config_fail(e, c, "job.link_rate", "job.link_rate = %s: a rate as tc writes it "
                              "(100mbit, 1gbit, 10gbit), auto or off", c->job.link_rate);
    int backend, precision; /* oneDNN or bf16 asked for where this build or CPU has none */
    if (dense_resolve(c, &backend, &precision, e) < 0)
        return SS_EINVAL;
    char *d = c->model.rows; /* "1000, 2000": blanks after the commas, as column lists take */
    for (const char *p = c->model.rows; *p; p++)
        if (!g_ascii_isspace(*p))
            *d++ = *p;
    *d = 0;
    return ss_check_top(c->model.top, e) ? SS_EINVAL : ss_check_rows(c->model.rows, e);
}

/* ---- public: load, free ---------------------------------------------- */

/* ---- where each key was set ------------------------------------------ */

/* "section.key" -> "PATH:LINE" of the file, or "--set OV" (its last). */
struct ss_origins {
    GHashTable *by_key;
};

/* The key an override sets ("a.b = 1" as "a.b=1"); g_free it (NULL: none). */
static char *override_key(const char *ov)
{
    const char *eq = strchr(ov, '=');
    return eq ? g_strstrip(g_strndup(ov, (size_t)(eq - ov))) : NULL;
}

static struct ss_origins *origins_of(const char *path, GHashTable *lines, char **overrides,
                                     int n_overrides)
{
    struct ss_origins *o = ss_xcalloc(1, sizeof *o);
    o->by_key = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    for (size_t i = 0; i < N_KEYS; i++) {
        char *name = g_strdup_printf("%s.%s", keys[i].section, keys[i].key), *src = NULL;
        for (int k = n_overrides - 1; k >= 0 && !src; k--) {
            char *key = override_key(overrides[k]);
            if (key && !strcmp(key, name))
                src = g_strdup_printf("--set %.400s", overrides[k]);
            g_free(key);
        }
        int line = lines ? GPOINTER_TO_INT(g_hash_table_lookup(lines, name)) : 0;
        if (!src && line && path)
            src = g_strdup_printf("%.400s:%d", path, line);
        if (src)
            g_hash_table_insert(o->by_key, name, src);
        else
            g_free(name);
    }
    return o;
}

static void origins_free(struct ss_origins *o)
{
    if (!o)
        return;
    g_hash_table_destroy(o->by_key);
    free(o);
}

const char *ss_config_origin(const struct ss_config *c, const char *key)
{
    return c && c->origins ? g_hash_table_lookup(c->origins->by_key, key) : NULL;
}

void ss_config_where(const struct ss_config *c, const char *key, char *out, size_t cap)
{
    const char *src = ss_config_origin(c, key);
    if (!src)
        snprintf(out, cap, "config");
    else if (!strncmp(src, "--set ", 6))
        snprintf(out, cap, "config (%s)", src);
    else
        snprintf(out, cap, "config %s", src);
}

int ss_config_fail(struct ss_err *e, const struct ss_config *c, const char *keys_,
                   const char *fmt, ...)
{
    char msg[sizeof e->msg], where[600], also[1200] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char **split = g_strsplit_set(keys_ ? keys_ : "", " ,", -1);
    const char *names[16];
    int n = 0;
    for (int i = 0; split[i] && n < 16; i++)
        if (*split[i])
            names[n++] = split[i];
    ss_config_where(c, n ? names[0] : "", where, sizeof where);
    const char *first = n ? ss_config_origin(c, names[0]) : NULL;
    size_t at = 0;
    for (int i = 1; i < n && at < sizeof also; i++) {
        const char *src = ss_config_origin(c, names[i]);
        if (!src || (first && !strcmp(src, first)))
            continue;
        int set = !strncmp(src, "--set ", 6);
        at += (size_t)snprintf(also + at, sizeof also - at, "%s%s %s %s", at ? ", " : "; ",
                               names[i], set ? "is set by" : "is set at", src);
    }
    g_strfreev(split);
    return ss_fail(e, SS_EINVAL, "%s: %s%s", where, msg, also);
}

/* A check of one key failed with "config: KEY ...": where KEY was set goes
 * in front, as ss_config_fail puts it (a default: as is). */
static void name_source(struct ss_err *e, const struct ss_config *c)
{
    const char *m = e->msg + 8;
    if (strncmp(e->msg, "config: ", 8) != 0)
        return;
    size_t n = strspn(m, "abcdefghijklmnopqrstuvwxyz_.");
    char key[96];
    if (n == 0 || n >= sizeof key || !memchr(m, '.', n))
        return;
    memcpy(key, m, n), key[n] = 0;
    if (!ss_config_origin(c, key))
        return;
    char where[600], rest[sizeof e->msg];
    ss_config_where(c, key, where, sizeof where);
    snprintf(rest, sizeof rest, "%s", m);
    ss_fail(e, e->code, "%s: %s", where, rest);
}

int ss_config_load(struct ss_config *c, const char *path, char **overrides, int n_overrides,
                   struct ss_err *e)
{
    memset(c, 0, sizeof *c);
    GHashTable *lines = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    int rc = apply_defaults(c, e);
    if (!rc && path)
        rc = apply_file(c, path, lines, e);
    for (int i = 0; !rc && i < n_overrides; i++)
        rc = apply_override(c, overrides[i], e);
    if (!rc)
        c->origins = origins_of(path, lines, overrides, n_overrides);
    if (!rc && (rc = check_config(c, e)) != 0)
        name_source(e, c);
    g_hash_table_destroy(lines);
    if (rc)
        ss_config_free(c);
    return rc;
}

int ss_config_key_known(const char *name, struct ss_err *e)
{
    const char *dot = strchr(name, '.');
    if (!dot || dot == name || !dot[1])
        return ss_fail(e, SS_EINVAL, "\"%s\" is not section.key", name);
    char *section = g_strndup(name, (size_t)(dot - name));
    int rc = find_key(section, dot + 1) ? 0 : unknown(e, "config", section, dot + 1);
    g_free(section);
    return rc;
}

void ss_config_free(struct ss_config *c)
{
    origins_free(c->origins);
    c->origins = NULL;
    for (size_t i = 0; i < N_KEYS; i++) {
        if (keys[i].type == T_STRING) {
            char **s = field(c, &keys[i]);
            g_free(*s);
            *s = NULL;
        }
    }
}

/* ---- printing -------------------------------------------------------- */

/* Shortest of %.15g / %.17g that reads back to the same double. */
static void format_double(double v, char *buf, size_t n)
{
    g_ascii_formatd(buf, n, "%.15g", v);
    if (g_ascii_strtod(buf, NULL) != v)
        g_ascii_formatd(buf, n, "%.17g", v);
}

static const char *choice_name(const struct choice *ch, int v)
{
    for (; ch->name; ch++)
        if (ch->value == v)
            return ch->name;
    return "?";
}

/* The value as INI text (strings escaped the GKeyFile way); g_free it. */
static char *value_text(const struct ss_config *c, const struct key_desc *d, GKeyFile *kf)
{
    const void *p = cfield(c, d);
    char buf[64];
    switch (d->type) {
    case T_INT: return g_strdup_printf("%d", *(const int *)p);
    case T_INT64: return g_strdup_printf("%" PRId64, *(const int64_t *)p);
    case T_DOUBLE: format_double(*(const double *)p, buf, sizeof buf); return g_strdup(buf);
    case T_BOOL: return g_strdup(*(const int *)p ? "true" : "false");
    case T_ENUM: return g_strdup(choice_name(d->choices, *(const int *)p));
    case T_STRING: break;
    }
    const char *s = *(char *const *)p;
    g_key_file_set_string(kf, "escape", "value", s ? s : "");
    char *v = g_key_file_get_value(kf, "escape", "value", NULL);
    char **parts = g_strsplit(v, " #", -1); /* a blank before '#' reads as a comment
                                             * (check_lines): written "\s#" */
    g_free(v);
    v = g_strjoinv("\\s#", parts);
    g_strfreev(parts);
    return v;
}

static void print_key(FILE *f, const char *key, const char *value)
{
    if (*value)
        fprintf(f, "%s = %s\n", key, value);
    else
        fprintf(f, "%s =\n", key);
}

static void print_section(FILE *f, size_t i)
{
    if (i == 0 || strcmp(keys[i - 1].section, keys[i].section))
        fprintf(f, "%s[%s]\n", i ? "\n" : "", keys[i].section);
}

void ss_config_print(const struct ss_config *c, FILE *f)
{
    GKeyFile *kf = g_key_file_new();
    for (size_t i = 0; i < N_KEYS; i++) {
        char *v = value_text(c, &keys[i], kf);
        print_section(f, i);
        print_key(f, keys[i].key, v);
        g_free(v);
    }
    g_key_file_free(kf);
}

void ss_config_print_reference(FILE *f)
{
    fprintf(f, "# shadowsync configuration: every section and key with its default.\n"
               "# A job's file needs only the keys it changes; an unknown key is an error.\n"
               "# On the command line: --set section.key=value.\n\n");
    for (size_t i = 0; i < N_KEYS; i++) {
        char desc[320];
        describe(&keys[i], desc, sizeof desc);
        print_section(f, i);
        fprintf(f, "# %s%s%s\n", keys[i].doc, *desc ? " " : "", desc);
        print_key(f, keys[i].key, keys[i].def);
    }
}

int ss_config_save(const struct ss_config *c, const char *path, struct ss_err *e)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ss_fail(e, SS_EIO, "config: cannot write %s: %s", path, strerror(errno));
    ss_config_print(c, f);
    int bad = ferror(f);
    if (fclose(f) || bad)
        return ss_fail(e, SS_EIO, "config: error writing %s: %s", path, strerror(errno));
    return 0;
}

/* ---- lists: dims, columns -------------------------------------------- */
