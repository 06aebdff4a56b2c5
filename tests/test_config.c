/* Unit tests of src/core/config.c: defaults, a file, overrides, every kind
 * of bad input (the message must name the key and the value), the print →
 * load round trip, the dims and column lists, and configs/reference.ini
 * matching ss_config_print_reference (run from the repo root). */
#include "check.h"
#include "shadowsync/core.h"

#include <glib.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/ss_test_config_XXXXXX";

/* Writes text to tmpdir/name; returns the path (g_free it). */
static char *write_file(const char *name, const char *text)
{
    char *path = g_build_filename(tmpdir, name, NULL);
    if (!g_file_set_contents(path, text, -1, NULL)) {
        printf("FAIL write %s\n", path);
        exit(1);
    }
    return path;
}

static char *read_text(const char *path)
{
    char *text = NULL;
    return g_file_get_contents(path, &text, NULL, NULL) ? text : NULL;
}

static int load_text(struct ss_config *c, const char *text, char **ov, int n, struct ss_err *e)
{
    char *path = write_file("t.ini", text);
    int rc = ss_config_load(c, path, ov, n, e);
    g_free(path);
    return rc;
}

/* Name of the first field that differs, or NULL. */
static const char *config_diff(const struct ss_config *a, const struct ss_config *b)
{
#define NUM(f) if (a->f != b->f) return #f
#define STR(f) if (strcmp(a->f, b->f)) return #f
    NUM(job.trainers); NUM(job.embedding_ps); NUM(job.sync_ps); NUM(job.readers);
    NUM(job.seed); STR(job.bind);
    STR(data.train); STR(data.eval); NUM(data.format); STR(data.separator); NUM(data.header);
    NUM(data.label_col); STR(data.dense_cols); STR(data.cat_cols); STR(data.multihot_cols);
    STR(data.multihot_sep); NUM(data.cat_encoding); NUM(data.report_bad_lines);
    NUM(data.max_examples); NUM(data.epochs);
    STR(model.rows); NUM(model.dim); STR(model.bottom); STR(model.top);
    NUM(optim.dense); NUM(optim.emb); NUM(optim.dense_lr); NUM(optim.emb_lr); NUM(optim.eps);
    NUM(optim.init_acc); NUM(optim.warmup_examples); NUM(optim.decay_start);
    NUM(optim.decay_examples); NUM(optim.decay_to);
    NUM(trainer.worker_threads); NUM(trainer.batch_size); NUM(trainer.device);
    STR(sync.algo); NUM(sync.mode); NUM(sync.gap); NUM(sync.alpha); NUM(sync.bmuf_momentum);
    NUM(sync.bmuf_lr); NUM(sync.bmuf_nesterov); NUM(sync.output); NUM(sync.shadow_sleep_ms);
    STR(placement.strategy); NUM(placement.profile_batches); STR(placement.pin);
    NUM(embedding_ps.memory_mb);
    STR(checkpoint.dir); NUM(checkpoint.interval_s);
    STR(output.dir); NUM(output.log_interval_s); NUM(output.save_model); NUM(output.quiet);
#undef NUM
#undef STR
    return NULL;
}

static void test_defaults(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    int rc = ss_config_load(&c, NULL, NULL, 0, &e);
    CHECK(rc == 0, "defaults load", "rc %d: %s", rc, e.msg);
    if (rc)
        return;
    CHECK(c.job.trainers == 1 && c.job.seed == 1 && !strcmp(c.job.bind, ""), "defaults job",
          "trainers %d seed %ld", c.job.trainers, (long)c.job.seed);
    CHECK(!strcmp(c.data.separator, "\t") && !strcmp(c.data.multihot_sep, ",") &&
          c.data.format == FMT_AUTO && c.data.cat_encoding == CAT_HEX &&
          !strcmp(c.data.dense_cols, "1-13") && c.data.report_bad_lines == 5,
          "defaults data", "separator \"%s\"", c.data.separator);
    CHECK(!strcmp(c.model.rows, "200000") && c.model.dim == 16 &&
          !strcmp(c.model.top, "367-512-256-1"), "defaults model", "dim %d", c.model.dim);
    CHECK(c.optim.dense == OPT_ADAGRAD && c.optim.dense_lr == 0.01 &&
          c.optim.emb == OPT_ROWWISE_ADAGRAD && c.optim.emb_lr == 0.02 && c.optim.eps == 1e-8 &&
          c.optim.init_acc == 0 && c.optim.schedule == SCHED_AUTO &&
          c.optim.auto_decay_share == 0.1, "defaults optim", "eps %g", c.optim.eps);
    CHECK(c.trainer.device == DEV_CPU && c.trainer.batch_size == 128, "defaults trainer", "%d",
          c.trainer.batch_size);
    CHECK(!strcmp(c.sync.algo, "none") && c.sync.mode == SYNC_SHADOW && c.sync.alpha == 0.5 &&
          c.sync.bmuf_lr == 1.0 && c.sync.bmuf_momentum == 0.5 && !c.sync.bmuf_nesterov &&
              c.sync.output == OUT_TRAINER0,
          "defaults sync", "algo %s", c.sync.algo);
    CHECK(!strcmp(c.placement.strategy, "profile") && c.embedding_ps.memory_mb == 16384 &&
          !strcmp(c.output.dir, "runs/latest") && c.output.save_model && !c.output.quiet &&
          c.output.log_interval_s == 5, "defaults output", "dir %s", c.output.dir);
    ss_config_free(&c);
    CHECK(c.job.bind == NULL && c.output.dir == NULL, "free clears strings", "not NULL");
}

static const char *job_ini =
    "# a job\n"
    "[trainer]\nworker_threads = 8\nbatch_size = 256\ndevice = auto\n"
    "[optim]\nemb = rowwise_adagrad\nemb_lr = 1e-3\n"
    "[sync]\nalgo = easgd\nalpha = 0.25\nbmuf_nesterov = yes\n"
    "[data]\nseparator = ,\nmultihot_sep = |\ncat_encoding = dec\nmax_examples = 4611686018427387904\n"
    "[model]\nrows = 10,20,30\ntop = auto-64-1\n"
    "[output]\nquiet = TRUE\n";

static void test_file_and_override(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    int rc = load_text(&c, job_ini, NULL, 0, &e);
    CHECK(rc == 0, "file loads", "rc %d: %s", rc, e.msg);
    if (rc)
        return;
    CHECK(c.trainer.worker_threads == 8 && c.trainer.batch_size == 256 &&
          c.trainer.device == DEV_AUTO, "file sets trainer", "threads %d",
          c.trainer.worker_threads);
    CHECK(c.optim.emb == OPT_ROWWISE_ADAGRAD && c.optim.emb_lr == 1e-3, "file sets optim",
          "emb %d lr %g", c.optim.emb, c.optim.emb_lr);
    CHECK(!strcmp(c.sync.algo, "easgd") && c.sync.alpha == 0.25 && c.sync.bmuf_nesterov == 1,
          "file sets sync", "algo %s", c.sync.algo);
    CHECK(!strcmp(c.data.separator, ",") && !strcmp(c.data.multihot_sep, "|") &&
          c.data.cat_encoding == CAT_DEC && c.data.max_examples == (int64_t)1 << 62,
          "file sets data", "sep %s", c.data.separator);
    CHECK(!strcmp(c.model.rows, "10,20,30") && c.output.quiet == 1 && c.trainer.device == DEV_AUTO,
          "file sets model, output", "rows %s", c.model.rows);
    CHECK(c.job.trainers == 1 && c.model.dim == 16, "file keeps other defaults", "%d",
          c.job.trainers);
    ss_config_free(&c);

    char *ov[] = {"trainer.worker_threads =3", "sync.algo = bmuf", "job.bind = 10.0.0.1:90 ",
                  "output.quiet= no ", "data.separator=\\t"};
    rc = load_text(&c, job_ini, ov, 5, &e);
    CHECK(rc == 0, "file + overrides load", "rc %d: %s", rc, e.msg);
    if (rc)
        return;
    CHECK(c.trainer.worker_threads == 3 && !strcmp(c.sync.algo, "bmuf") &&
          !strcmp(c.job.bind, "10.0.0.1:90") && c.output.quiet == 0,
          "override wins over file (INI's blanks around = too)", "threads %d algo %s", c.trainer.worker_threads, c.sync.algo);
    CHECK(!strcmp(c.data.separator, "\t"), "override \\t is a tab", "sep \"%s\"",
          c.data.separator);
    CHECK(c.trainer.batch_size == 256, "override leaves the rest of the file", "%d",
          c.trainer.batch_size);
    ss_config_free(&c);
}

static void test_separators(void)
{
    /* a tab's spellings; a space, which an INI value cannot hold bare; a quoted character */
    static const struct {
        const char *ini, *want, *name;
    } cases[] = {{"[data]\nseparator = \\t\n", "\t", "separator tab spelling 0"},
                 {"[data]\nseparator = tab\n", "\t", "separator tab spelling 1"},
                 {"[data]\nseparator = \\\\t\n", "\t", "separator tab spelling 2"},
                 {"[data]\nseparator = space\n", " ", "separator space"},
                 {"[data]\nseparator = \" \"\n", " ", "separator \" \""},
                 {"[data]\nseparator = \";\"\n", ";", "separator \";\""}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct ss_config c;
        struct ss_err e = {0};
        int rc = load_text(&c, cases[i].ini, NULL, 0, &e);
        CHECK(rc == 0 && !strcmp(c.data.separator, cases[i].want), cases[i].name, "rc %d: %s", rc,
              e.msg);
        if (!rc)
            ss_config_free(&c);
    }
}

/* model.rows takes blanks after its commas, as the column lists do */
static void test_rows_blanks(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    int rc = load_text(&c, "[model]\nrows = 1000, 2000 ,3000\n", NULL, 0, &e);
    CHECK(rc == 0 && !strcmp(c.model.rows, "1000,2000,3000"), "model.rows with blanks after commas",
          "rc %d: %s", rc, rc ? e.msg : c.model.rows);
    if (!rc)
        ss_config_free(&c);
}

struct bad_case {
    const char *name;
    const char *ini;      /* file text, or NULL for defaults */
    const char *override; /* or NULL */
    const char *want[3];  /* substrings of the message */
};

static const struct bad_case bad_cases[] = {
    {"unknown section", "[jobs]\ntrainers = 2\n", NULL,
     {"t.ini:1:", "unknown section [jobs]", "(did you mean [job]?)"}},
    {"override unknown section", NULL, "jobs.trainers=2",
     {"unknown section [jobs]", "(did you mean job.trainers?)"}},
    {"unknown section, no key near", "[sink]\nfoo = 2\n", NULL,
     {"t.ini:1:", "unknown section [sink]", "(did you mean [sync]?)"}},
    {"unknown key", "[data]\n\n[job]\ntrainer = 2\n", NULL,
     {"t.ini:4:", "unknown key job.trainer", "(did you mean job.trainers?)"}},
    {"unknown key, nothing near", "[sync]\nzzzzzz = 2\n", NULL, {"t.ini:2:", "unknown key sync.zzzzzz"}},
    {"out of range, its line", "[job]\ntrainers = 2\n[sync]\nalpha = 2\n", NULL,
     {"t.ini:4:", "sync.alpha = 2 is out of range"}},
    {"override swapped letters", NULL, "sync.alhpa=0.3",
     {"override \"sync.alhpa=0.3\"", "unknown key sync.alhpa", "(did you mean sync.alpha?)"}},
    {"bad int", "[trainer]\nworker_threads = 12abc\n", NULL,
     {"trainer.worker_threads", "\"12abc\"", "not an integer"}},
    {"bad int float", "[trainer]\nbatch_size = 1.5\n", NULL, {"trainer.batch_size", "1.5"}},
    {"bad int64 overflow", "[job]\nseed = 99999999999999999999\n", NULL,
     {"job.seed", "99999999999999999999", "out of range"}},
    {"int64 above 2^62", "[job]\nseed = 4611686018427387905\n", NULL,
     {"job.seed", "4611686018427387905", "out of range [0, 4611686018427387904]"}},
    {"bad double", "[sync]\nalpha = 0.5x\n", NULL, {"sync.alpha", "0.5x", "not a number"}},
    {"nan double", "[sync]\nalpha = nan\n", NULL, {"sync.alpha", "nan"}},
    {"out of range", "[sync]\nalpha = 1.5\n", NULL,
     {"sync.alpha = 1.5 is out of range [0, 1]"}},
    {"exclusive min", "[optim]\ndense_lr = 0\n", NULL,
     {"optim.dense_lr = 0 is out of range (0, 100]"}},
    {"exclusive max", "[sync]\nbmuf_momentum = 1\n", NULL,
     {"sync.bmuf_momentum = 1 is out of range [0, 1)"}},
    {"int out of range", NULL, "trainer.worker_threads=0", {"trainer.worker_threads", "0"}},
    {"bad enum", "[trainer]\ndevice = gpu\n", NULL, {"trainer.device", "gpu", "cpu|cuda|auto"}},
    {"bad bool", "[output]\nquiet = maybe\n", NULL, {"output.quiet", "maybe"}},
    {"bad sync.algo", NULL, "sync.algo=sgd", {"sync.algo", "sgd", "none|easgd|ma|bmuf|allreduce"}},
    {"bad placement.strategy", NULL, "placement.strategy=greedy",
     {"placement.strategy", "greedy"}},
    {"malformed override", NULL, "foo", {"override \"foo\""}},
    {"override without section", NULL, "a=b", {"override \"a=b\""}},
    {"override empty section", NULL, ".dim=3", {"override \".dim=3\""}},
    {"override unknown key", NULL, "model.width=3", {"model.width=3", "unknown key model.width"}},
    {"override bad value", NULL, "trainer.batch_size=big", {"trainer.batch_size", "big"}},
    {"malformed file", "this is not ini\n", NULL, {"t.ini", "this is not ini"}},
    {"line of no key", "[job]\n# a comment\ntrainers 2\n", NULL,
     {"t.ini:3:", "\"trainers 2\"", "neither a [section], a key = value nor a # comment"}},
    {"key given twice", "[job]\ntrainers = 2\r\n\n[sync]\nalpha = 0.5\n[job]\n trainers=3\n", NULL,
     {"t.ini:7:", "job.trainers is given twice", "first at line 2"}},
    {"key before any section", "trainers = 2\n[job]\n", NULL, {"t.ini:1:", "before any [section]"}},
    {"key with a locale", "[model]\ndim[de] = 8\n", NULL,
     {"t.ini:2:", "\"dim[de]\" is no key name", "[locale]"}},
    {"no key before =", "[model]\n = 16\n", NULL, {"t.ini:2:", "\"\" is no key name"}},
    {"byte order mark", "\xef\xbb\xbf[model]\ndim = 8\n", NULL, {"t.ini:1:", "byte order mark"}},
    {"adagrad dividing 0 by 0", "[optim]\nemb = rowwise_adagrad\neps = 0\n", NULL,
     {"optim.eps = 0", "optim.init_acc = 0"}},
    {"comment after a string", "[output]\n\ndir = runs/x # mine\n", NULL,
     {"t.ini:3:", "output.dir = \"runs/x # mine\" ends in a comment", "a line of its own"}},
    {"comment after a number", "[sync]\nalpha = 0.1\t# tuned\n", NULL,
     {"t.ini:2:", "sync.alpha", "ends in a comment"}},
    {"unclosed section", "[job\ntrainers = 2\n", NULL, {"t.ini:1:", "\"[job\" is not a [section] line"}},
    {"bad escape", "[job]\nbind = a\\qb\n", NULL, {"t.ini", "job.bind"}},
    {"separator two chars", "[data]\nseparator = ab\n", NULL, {"data.separator", "ab"}},
    {"multihot_sep empty", NULL, "data.multihot_sep=", {"data.multihot_sep", "''", "not one character"}},
    {"bad bottom", NULL, "model.bottom=13-0-16", {"model.bottom", "13-0-16"}},
    {"bad top", NULL, "model.top=autox-1", {"model.top", "autox-1"}},
    {"top auto alone", NULL, "model.top=auto", {"model.top", "auto"}},
    {"bad rows", NULL, "model.rows=10,x", {"model.rows", "10,x"}},
    {"zero rows", NULL, "model.rows=0", {"model.rows", "\"0\""}},
    {"rows trailing comma", NULL, "model.rows=10,", {"model.rows", "10,"}},
    {"bad cat_cols", NULL, "data.cat_cols=14-", {"data.cat_cols", "14-"}},
    {"a key of another section", NULL, "data.batch_size=3",
     {"unknown key data.batch_size", "(did you mean trainer.batch_size?)"}},
    {"a key of another section, misspelt", "[job]\nworker_thread = 2\n", NULL,
     {"t.ini:2:", "unknown key job.worker_thread", "(did you mean trainer.worker_threads?)"}},
    {"section header with a second ]", "[sync]]\nalgo = ma\n", NULL,
     {"t.ini:1:", "\"[sync]]\" is not a [section] line"}},
    {"empty section header", "[]\nx = 1\n", NULL, {"t.ini:1:", "\"[]\" is not a [section] line"}},
    {"a check across keys names the key's line", "[data]\n\nseparator = ab\n", NULL,
     {"t.ini:3: data.separator", "not one character"}},
    {"a check across keys names the key's --set", NULL, "model.bottom=13-x-8",
     {"config (--set model.bottom=13-x-8): model.bottom"}},
    {"bad pin", NULL, "placement.pin=garbage", {"placement.pin", "\"garbage\"", "TABLE:PS"}},
    {"bad pin among good ones", NULL, "placement.pin=0:1, 3@0-:2", {"placement.pin", "3@0-:2"}},
};

static void check_bad(const struct bad_case *b)
{
    struct ss_config c;
    struct ss_err e = {0};
    char *ov[] = {(char *)b->override};
    int n = b->override ? 1 : 0;
    int rc = b->ini ? load_text(&c, b->ini, ov, n, &e) : ss_config_load(&c, NULL, ov, n, &e);
    int found = rc < 0 && e.code == rc;
    for (int i = 0; i < 3 && b->want[i]; i++)
        found = found && strstr(e.msg, b->want[i]) != NULL;
    CHECK(found, b->name, "rc %d, message \"%s\"", rc, e.msg);
    if (rc == 0)
        ss_config_free(&c);
    else
        CHECK(c.job.bind == NULL && c.data.train == NULL, b->name, "strings left after failure");
}

/* A file too big for a config (1 GiB, sparse), one of NUL bytes and an
 * endless device are refused, naming the file, before they are read whole. */
static void test_not_config_files(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    char *big = write_file("big.ini", "[job]\n");
    int rc = truncate(big, 1 << 30) == 0 ? ss_config_load(&c, big, NULL, 0, &e) : 0;
    CHECK(rc == SS_EINVAL && strstr(e.msg, big) && strstr(e.msg, "1073741824 bytes") &&
              strstr(e.msg, "at most 16 MiB"),
          "a 1 GiB config file is refused by its size, named", "rc %d: %s", rc, e.msg);
    unlink(big);
    g_free(big);
    char *nuls = g_build_filename(tmpdir, "nul.ini", NULL);
    char zeros[4096] = {0};
    rc = g_file_set_contents(nuls, zeros, sizeof zeros, NULL) ? ss_config_load(&c, nuls, NULL, 0, &e)
                                                               : 0;
    CHECK(rc == SS_EFORMAT && strstr(e.msg, nuls) && strstr(e.msg, "a NUL byte at byte 0"),
          "a config file of NUL bytes is refused (not text), not taken as all defaults",
          "rc %d: %s", rc, e.msg);
    unlink(nuls);
    g_free(nuls);
    rc = ss_config_load(&c, "/dev/zero", NULL, 0, &e);
    CHECK(rc == SS_EINVAL && strstr(e.msg, "/dev/zero: more than 16 MiB"),
          "an endless device as the config is read no further than the limit", "rc %d: %s", rc,
          e.msg);
}

static void test_bad_inputs(void)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
        check_bad(&bad_cases[i]);

    struct ss_config c;
    struct ss_err e = {0};
    int rc = ss_config_load(&c, "/nonexistent/dir/job.ini", NULL, 0, &e);
    CHECK(rc == SS_EIO && strstr(e.msg, "/nonexistent/dir/job.ini"), "unreadable file",
          "rc %d: %s", rc, e.msg);
    test_not_config_files();
}

/* Blanks after a name or widths in a file (unseen in an editor) are no
 * part of them; a denormal is a number in range, not out of it. */
static void test_blanks_and_denormals(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    int rc = load_text(&c, "[sync]\nalgo = ma  \nalpha = 1e-320\n[placement]\nstrategy = hash \t\n"
                           "[model]\nbottom = 13-512-256-64-16 \n[data]\nseparator = tab \n", NULL, 0,
                       &e);
    CHECK(rc == 0 && !strcmp(c.sync.algo, "ma") && !strcmp(c.placement.strategy, "hash") &&
              !strcmp(c.model.bottom, "13-512-256-64-16") && !strcmp(c.data.separator, "\t") &&
              c.sync.alpha > 0 && c.sync.alpha < 1e-300,
          "trailing blanks after names, widths and a separator's name are dropped; a denormal alpha "
          "is taken", "rc %d: %s", rc, e.msg);
    if (rc == 0)
        ss_config_free(&c);
}

static void test_round_trip(void)
{
    char *ov[] = {
        "job.trainers=4", "job.seed=123456789012345", "job.bind= lead\\back#x;y=z [s]\tt ",
        "data.train=/data/day_*.gz", "data.format=csv", "data.separator=#", "data.multihot_sep=#", "data.header=2",
        "data.multihot_cols=20-22", "data.cat_encoding=hash", "data.max_examples=1000",
        "model.rows=5,6", "model.dim=8", "model.bottom=13-8", "model.top=auto-1",
        "optim.dense=adagrad", "optim.emb_lr=0.030000000000000002", "optim.eps=1e-10",
        "optim.init_acc=0.1", "trainer.device=cuda", "sync.algo=ma", "sync.mode=foreground",
        "sync.gap=7", "sync.alpha=0.3", "sync.bmuf_nesterov=1", "sync.output=average",
        "sync.shadow_sleep_ms=2.5", "placement.strategy=profile", "placement.pin=0:1,3:0",
        "embedding_ps.memory_mb=1099511627776", "checkpoint.dir=ck", "checkpoint.interval_s=1e9",
        "output.dir=runs/x #1 y  #2", "output.log_interval_s=0.25", "output.save_model=no",
        "output.quiet=yes", "data.eval=\nnewline",
    };
    int n = (int)(sizeof ov / sizeof ov[0]);
    struct ss_config a, b;
    struct ss_err e = {0};
    int rc = ss_config_load(&a, NULL, ov, n, &e);
    CHECK(rc == 0, "round trip: overrides load", "rc %d: %s", rc, e.msg);
    if (rc)
        return;
    char *path = g_build_filename(tmpdir, "saved.ini", NULL);
    rc = ss_config_save(&a, path, &e);
    CHECK(rc == 0, "round trip: save", "rc %d: %s", rc, e.msg);
    rc = rc ? rc : ss_config_load(&b, path, NULL, 0, &e);
    CHECK(rc == 0, "round trip: load saved", "rc %d: %s", rc, e.msg);
    if (rc == 0) {
        const char *diff = config_diff(&a, &b);
        CHECK(diff == NULL, "round trip: same values", "%s differs", diff);
        char *again = g_build_filename(tmpdir, "again.ini", NULL);
        ss_config_save(&b, again, &e);
        char *t1 = read_text(path), *t2 = read_text(again);
        CHECK(t1 && t2 && !strcmp(t1, t2), "round trip: same text", "texts differ");
        g_free(t1);
        g_free(t2);
        unlink(again);
        g_free(again);
        ss_config_free(&b);
    }
    ss_config_free(&a);
    rc = ss_config_save(&a, "/nonexistent/dir/x.ini", &e);
    CHECK(rc == SS_EIO && strstr(e.msg, "/nonexistent/dir/x.ini"), "save to a bad path",
          "rc %d: %s", rc, e.msg);
    unlink(path);
    g_free(path);
}

/* Where each key was set: a file's line, the last --set, nothing for a
 * default; a check across keys names the first key's in front and every
 * other key's after its reason. */
static void test_origins(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    char *ov[] = {"optim.decay_start=9", "optim.decay_start = 5000", "sync.alpha=0.25"};
    int rc = load_text(&c, "[optim]\ndecay_examples = 0\n\n[sync]\nalpha = 0.5\n", ov, 3, &e);
    CHECK(rc == SS_EINVAL, "a decay start without a decay is refused at load", "rc %d", rc);
    CHECK(strstr(e.msg, "config (--set optim.decay_start = 5000): optim.decay_start = 5000 starts "
                        "a decay") == e.msg &&
              strstr(e.msg, "; optim.decay_examples is set at ") &&
              g_str_has_suffix(e.msg, "t.ini:2"),
          "a check across keys names the last --set of one and the file line of the other",
          "%s", e.msg);
    rc = load_text(&c, "[optim]\ndecay_examples = 10\n\n[sync]\nalpha = 0.5\n", ov, 3, &e);
    CHECK(rc == 0, "a config with a decay loads", "%s", e.msg);
    const char *file = ss_config_origin(&c, "optim.decay_examples");
    CHECK(file && g_str_has_suffix(file, "t.ini:2") &&
              !strcmp(ss_config_origin(&c, "sync.alpha"), "--set sync.alpha=0.25") &&
              ss_config_origin(&c, "model.dim") == NULL && ss_config_origin(&c, "no.key") == NULL,
          "ss_config_origin: a file's line, an override over the file, nothing for a default",
          "%s %s", file ? file : "(none)", ss_config_origin(&c, "sync.alpha"));
    char where[512];
    ss_config_where(&c, "model.dim", where, sizeof where);
    rc = ss_config_fail(&e, &c, "model.dim optim.decay_examples sync.alpha", "model.dim = %d",
                        c.model.dim);
    CHECK(rc == SS_EINVAL && !strcmp(where, "config") &&
              g_str_has_prefix(e.msg, "config: model.dim = 16; optim.decay_examples is set at ") &&
              g_str_has_suffix(e.msg, "t.ini:2, sync.alpha is set by --set sync.alpha=0.25"),
          "a default first: \"config:\" in front, the keys set after", "%s", e.msg);
    ss_config_free(&c);
    struct ss_config bare = {0};
    ss_config_fail(&e, &bare, "optim.eps optim.init_acc", "optim.eps = 0");
    CHECK(!strcmp(e.msg, "config: optim.eps = 0"), "a config not loaded names no source", "%s",
          e.msg);
}

static void test_dims(void)
{
    int d[4];
    struct ss_err e = {0};
    int n = ss_parse_dims("13-512-256", d, 4, &e, "model.bottom");
    CHECK(n == 3 && d[0] == 13 && d[1] == 512 && d[2] == 256, "dims good", "n %d", n);
    static const char *const bad[] = {"13-x", "13--5", "13-0", "13", "", "-13-5", "13-512-",
                                      "1-2-3-4-5", "13-99999999999", "13 -5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64];
        e.msg[0] = '\0';
        n = ss_parse_dims(bad[i], d, 4, &e, "model.top");
        snprintf(name, sizeof name, "dims bad \"%s\"", bad[i]);
        CHECK(n < 0 && strstr(e.msg, "model.top") && strstr(e.msg, bad[i]), name,
              "n %d: %s", n, e.msg);
    }
}

static void test_cols(void)
{
    int c[SS_MAX_COLS];
    struct ss_err e = {0};
    int n = ss_parse_cols("1-13,20", c, SS_MAX_COLS, &e, "data.dense_cols");
    int ok = n == 14 && c[13] == 20;
    for (int i = 0; ok && i < 13; i++)
        ok = c[i] == i + 1;
    CHECK(ok, "cols range and single", "n %d", n);
    n = ss_parse_cols("5, 0 ,3-3", c, SS_MAX_COLS, &e, "k");
    CHECK(n == 3 && c[0] == 5 && c[1] == 0 && c[2] == 3, "cols in order, blanks", "n %d", n);
    n = ss_parse_cols("", c, SS_MAX_COLS, &e, "k");
    CHECK(n == 0, "cols empty", "n %d", n);
    n = ss_parse_cols("0-4095", c, SS_MAX_COLS, &e, "k");
    CHECK(n == SS_MAX_COLS && c[4095] == 4095, "cols all", "n %d", n);
    static const char *const bad[] = {"1-", "a", "5-3", "1,,2", ",", "1-2-3", "4096", "-1",
                                      "1,", "0-5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64];
        e.msg[0] = '\0';
        n = ss_parse_cols(bad[i], c, 4, &e, "data.cat_cols");
        snprintf(name, sizeof name, "cols bad \"%s\"", bad[i]);
        CHECK(n < 0 && strstr(e.msg, "data.cat_cols") && strstr(e.msg, bad[i]), name,
              "n %d: %s", n, e.msg);
    }
}

static void test_reference(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ss_config_print_reference(f);
    fclose(f);
    char *file = read_text("configs/reference.ini");
    CHECK(file && !strcmp(file, buf), "reference.ini is the printed reference",
          "configs/reference.ini %s (run from the repo root)", file ? "differs" : "missing");

    struct ss_config a, b;
    struct ss_err e = {0};
    char *path = write_file("reference.ini", buf);
    int rc = ss_config_load(&a, path, NULL, 0, &e);
    CHECK(rc == 0, "reference loads", "rc %d: %s", rc, e.msg);
    if (rc == 0 && ss_config_load(&b, NULL, NULL, 0, &e) == 0) {
        const char *diff = config_diff(&a, &b);
        CHECK(diff == NULL, "reference gives the defaults", "%s differs", diff);
        ss_config_free(&b);
    }
    if (rc == 0)
        ss_config_free(&a);
    CHECK(strstr(buf, "# Adagrad epsilon [0, 1]\neps = 1e-8\n") &&
          strstr(buf, "[1, 1024]\ntrainers = 1\n") && strstr(buf, "(0, 100]\ndense_lr = 0.01\n") &&
          strstr(buf, "(cpu|cuda|auto)\ndevice = cpu\n") && strstr(buf, "\nbind =\n"),
          "reference format", "unexpected text");
    unlink(path);
    g_free(path);
    g_free(file);
    free(buf);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        printf("FAIL mkdtemp\n");
        return 1;
    }
    test_defaults();
    test_file_and_override();
    test_separators();
    test_rows_blanks();
    test_bad_inputs();
    test_round_trip();
    test_blanks_and_denormals();
    test_origins();
    test_dims();
    test_cols();
    test_reference();
    char *t = g_build_filename(tmpdir, "t.ini", NULL);
    unlink(t);
    g_free(t);
    rmdir(tmpdir);
    CHECK_DONE();
}
