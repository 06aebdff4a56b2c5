/* Tests of `shadowsync inspect`'s figures (src/reader/inspect.c): the
 * HyperLogLog estimate within 3 % of the true distinct count from 100 to
 * 1M ids, random and consecutive, repeats not counted; the shared-row
 * formula against a simulation of ids hashed into rows; the rows it asks
 * for; the parser's missing mark (an empty dense field reads NAN for
 * inspect, 0 for training); a run's start-up collision check on ids
 * whose rows are known; and model.rows = auto's sizing (the rows for 1 %
 * at each table's ids, a number kept, the budget's factor, a sample) and
 * its parsing. */
#include "check.h"
#include "shadowsync/reader.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double rel_err(double est, double n) { return fabs(est - n) / n; }

static void hll_counts(void)
{
    static const int64_t ns[] = {100, 1000, 10000, 30000, 60000, 100000, 1000000};
    struct inspect_hll *h = calloc(1, sizeof *h), *g = calloc(1, sizeof *g);
    CHECK(inspect_hll_estimate(h) == 0.0, "hll: an empty sketch estimates 0", "%g",
          inspect_hll_estimate(h));
    CHECK(fabs(inspect_hll_std_error() - 0.0040625) < 1e-7, "hll: standard error 1.04/sqrt(2^16)",
          "%g", inspect_hll_std_error());
    double worst = 0;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k];
        uint64_t rng = 0x5EED0000u + (uint64_t)k;
        memset(h, 0, sizeof *h);
        memset(g, 0, sizeof *g);
        for (int64_t i = 0; i < n; i++) {
            inspect_hll_add(h, ss_splitmix(&rng)); /* random 64-bit ids (hashed tokens) */
            inspect_hll_add(g, (uint64_t)i);       /* consecutive ids (dec encoding) */
        }
        double a = inspect_hll_estimate(h), b = inspect_hll_estimate(g);
        char name[96];
        snprintf(name, sizeof name, "hll: %lld random ids estimated within 3 %%", (long long)n);
        CHECK(rel_err(a, (double)n) < 0.03, name, "%.0f (%.2f %%)", a, 100 * rel_err(a, n));
        snprintf(name, sizeof name, "hll: %lld consecutive ids estimated within 3 %%",
                 (long long)n);
        CHECK(rel_err(b, (double)n) < 0.03, name, "%.0f (%.2f %%)", b, 100 * rel_err(b, n));
        worst = fmax(worst, fmax(rel_err(a, n), rel_err(b, n)));
        printf("# hll: n %lld: random %.0f (%+.2f %%), consecutive %.0f (%+.2f %%)\n",
               (long long)n, a, 100 * (a - n) / n, b, 100 * (b - n) / n);
    }
    printf("# hll: worst error %.2f %%\n", 100 * worst);

    /* repeats change nothing: every id again, in another order */
    memset(h, 0, sizeof *h);
    for (int64_t i = 0; i < 50000; i++)
        inspect_hll_add(h, (uint64_t)i * 7919u);
    double once = inspect_hll_estimate(h);
    for (int64_t i = 49999; i >= 0; i--)
        inspect_hll_add(h, (uint64_t)i * 7919u);
    CHECK(inspect_hll_estimate(h) == once, "hll: repeated ids leave the estimate as it was",
          "%g then %g", once, inspect_hll_estimate(h));
    free(h);
    free(g);
}

/* The share of n random ids whose row (id mod rows) holds another id too,
 * over `runs` draws. */
static double simulated_share(int64_t n, int64_t rows, int runs)
{
    int32_t *per_row = calloc((size_t)rows, sizeof *per_row);
    uint64_t *ids = malloc((size_t)n * sizeof *ids);
    uint64_t rng = 42;
    int64_t shared = 0;
    for (int r = 0; r < runs; r++) {
        memset(per_row, 0, (size_t)rows * sizeof *per_row);
        for (int64_t i = 0; i < n; i++) {
            ids[i] = ss_splitmix(&rng);
            per_row[ids[i] % (uint64_t)rows]++;
        }
        for (int64_t i = 0; i < n; i++)
            shared += per_row[ids[i] % (uint64_t)rows] > 1;
    }
    free(per_row);
    free(ids);
    return (double)shared / ((double)n * runs);
}

static void shared_rows(void)
{
    CHECK(inspect_shared_share(1, 10) == 0 && inspect_shared_share(0, 10) == 0,
          "shared: one id shares no row", "%g", inspect_shared_share(1, 10));
    CHECK(inspect_shared_share(2, 1) == 1, "shared: two ids in one row always share", "%g",
          inspect_shared_share(2, 1));
    double f = inspect_shared_share(1000, 1000), want = 1 - pow(1 - 1e-3, 999);
    CHECK(fabs(f - want) < 1e-12, "shared: 1 - (1 - 1/rows)^(n - 1)", "%.15g vs %.15g", f, want);
    static const int64_t cases[][2] = {{1000, 1000}, {100, 10}, {5000, 100000}, {20000, 2000000}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t n = cases[k][0], rows = cases[k][1];
        double sim = simulated_share(n, rows, 20), got = inspect_shared_share((double)n, rows);
        char name[96];
        snprintf(name, sizeof name, "shared: %lld ids in %lld rows as simulated", (long long)n,
                 (long long)rows);
        CHECK(fabs(sim - got) < 0.01 + 0.03 * got, name, "formula %.4f, simulated %.4f", got, sim);
    }
    static const double ns[] = {2, 100, 12345, 1e6, 3e8};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        double n = ns[k];
        int64_t r = inspect_rows_for(n, 0.01);
        char name[96];
        snprintf(name, sizeof name, "rows for 1 %% at %.0f ids: the fewest that keep it", n);
        CHECK(inspect_shared_share(n, (double)r) <= 0.01 &&
              inspect_shared_share(n, (double)(r - 1)) > 0.01 &&
              fabs((double)r - (n - 1) / -log(0.99)) <= 2.0, name, "%lld rows: %.5f, %lld: %.5f",
              (long long)r, inspect_shared_share(n, (double)r), (long long)(r - 1),
              inspect_shared_share(n, (double)(r - 1)));
    }
    CHECK(inspect_rows_for(1, 0.01) == 1, "rows for 1 %: one id needs one row", "%lld",
          (long long)inspect_rows_for(1, 0.01));
}

/* The missing mark: an empty dense field is NAN with missing_is_nan, 0 without. */
static void missing_mark(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    struct schema s;
    memset(&c, 0, sizeof c);
    c.data.separator = "\t";
    if (schema_from_config(&s, &c, NULL, &e)) {
        printf("FAIL schema: %s\n", e.msg);
        return;
    }
    char line[1024];
    int n = sprintf(line, "0\t\t7");
    for (int j = 2; j < 13; j++)
        n += sprintf(line + n, "\t%s", j == 5 ? "" : "1");
    for (int t = 0; t < 26; t++)
        n += sprintf(line + n, "\t%08x", t + 1);
    struct batch b;
    batch_init(&b, 2, 13, 26);
    char copy[1024];
    memcpy(copy, line, (size_t)n + 1);
    int rc = parse_line(&s, copy, (size_t)n, &b, &e);
    CHECK(rc == 0 && b.dense[0] == 0.0f && b.dense[5] == 0.0f && b.dense[1] == 7.0f,
          "missing mark: training reads an empty dense field as 0", "rc %d: %g %g", rc,
          b.dense[0], b.dense[5]);
    s.missing_is_nan = 1;
    memcpy(copy, line, (size_t)n + 1);
    rc = parse_line(&s, copy, (size_t)n, &b, &e);
    const float *d = b.dense + 13;
    CHECK(rc == 0 && isnan(d[0]) && isnan(d[5]) && d[1] == 7.0f && d[2] == 1.0f,
          "missing mark: inspect reads it as NAN, the rest as before", "rc %d: %g %g %g", rc,
          d[0], d[5], d[1]);
    batch_free(&b);
}

/* The start-up check on ids whose rows are known: a csv of dec ids 1, 0
 * (an empty field), 2, 3, 6, 1, one table. In 4 rows ids 2 and 6 share
 * row 2 (2 of 6 lookups), and the 4 ids besides the empty one's fit the
 * 4 rows: no warning. In 3 rows ids 0, 3 and 6 share row 0 (3 of 6) and
 * 4 ids outnumber 3 rows: a warning naming the table. */
static void startup_check(void)
{
    char path[] = "/tmp/test_inspect_XXXXXX";
    int fd = mkstemp(path);
    const char *text = "1,0.5,1\n0,1,\n0,2,2\n1,3,3\n0,4,6\n1,5,1\n";
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        printf("FAIL startup check: cannot write %s\n", path);
        return;
    }
    close(fd);
    for (int rows = 3; rows <= 4; rows++) {
        char train[64], nrows[32];
        snprintf(train, sizeof train, "data.train=%s", path);
        snprintf(nrows, sizeof nrows, "model.rows=%d", rows);
        char *ov[] = {train, nrows, "data.format=csv", "data.separator=,", "data.label_col=0",
                      "data.dense_cols=1", "data.cat_cols=2", "data.cat_encoding=dec",
                      "trainer.batch_size=6", "data.collision_check_batches=1"};
        struct ss_config c;
        struct ss_err e = {0};
        struct collision_check k = {0};
        int rc = ss_config_load(&c, NULL, ov, (int)(sizeof ov / sizeof *ov), &e);
        if (rc == 0)
            rc = reader_collision_check(&c, 6, &k, &e);
        double want = rows == 4 ? 2.0 / 6 : 3.0 / 6;
        CHECK(rc == 0 && k.examples == 6 && k.n_tables == 1 && k.t[0].ids == 5 &&
                  k.t[0].has_empty && k.t[0].rows == rows && k.t[0].col == 2 &&
                  fabs(k.t[0].shared - want) < 1e-12 &&
                  k.t[0].rows_1pct == inspect_rows_for(5, 0.01),
              rows == 4 ? "startup check: 5 ids (0 among them) in 4 rows, 2 of 6 lookups shared"
                        : "startup check: in 3 rows, 3 of 6 lookups shared",
              "rc %d %s: %lld examples, ids %lld, shared %g", rc, e.msg, (long long)k.examples,
              k.n_tables ? (long long)k.t[0].ids : -1LL, k.n_tables ? k.t[0].shared : -1.0);
        reader_collision_free(&k);
        FILE *f = tmpfile();
        int warned = rc == 0 && f ? reader_warn_collisions(&c, f) : -1;
        char line[1024] = "";
        if (f) {
            rewind(f);
            if (!fgets(line, sizeof line, f))
                line[0] = 0;
            fclose(f);
        }
        if (rows == 4)
            CHECK(warned == 0 && !line[0], "startup check: a row for each id, 0 aside: no "
                  "warning", "%d: %s", warned, line);
        else
            CHECK(warned == 1 && strstr(line, "shadowsync: warning: table 0 (data.cat_cols "
                                        "column 2): 5 distinct ids in the first 6 examples"),
                  "startup check: more ids than rows: a warning naming the table", "%d: %s",
                  warned, line);
        ss_config_free(&c);
    }
    unlink(path);
}

/* dec ids 1..50 in column 2 (counted) and 1..5000 in column 3 (sketched
 * past 4096), 10,000 lines, sized under model.rows (and more) as given. */
static int size_rows(const char *path, const char *rows, const char *more,
                     struct ss_config *c, struct rows_auto *r, struct ss_err *e)
{
    char train[64], nrows[64];
    snprintf(train, sizeof train, "data.train=%s", path);
    snprintf(nrows, sizeof nrows, "model.rows=%s", rows);
    char *ov[] = {train, nrows, "data.format=csv", "data.separator=,", "data.label_col=0",
                  "data.dense_cols=1", "data.cat_cols=2-3", "data.cat_encoding=dec",
                  "optim.emb=sgd", /* a row of 16 floats, no accumulator */ (char *)more};
    int rc = ss_config_load(c, NULL, ov, (int)(sizeof ov / sizeof *ov) - !*more, e);
    return rc < 0 ? rc : reader_rows_auto(c, r, e);
}

/* What a run says of r, into text. */
static void said(const struct ss_config *c, const struct rows_auto *r, char *text, size_t cap)
{
    FILE *out = tmpfile();
    text[0] = 0;
    if (!out)
        return;
    reader_rows_auto_print(c, r, out);
    rewind(out);
    text[fread(text, 1, cap - 1, out)] = 0;
    fclose(out);
}

static void rows_auto(void)
{
    char path[] = "/tmp/test_inspect_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    for (int i = 0; f && i < 10000; i++)
        fprintf(f, "%d,1,%d,%d\n", i % 2, 1 + i % 50, 1 + i % 5000);
    if (!f || fclose(f) != 0) {
        printf("FAIL rows auto: cannot write %s\n", path);
        return;
    }
    struct ss_config c;
    struct ss_err e = {0};
    struct rows_auto r = {0};
    int rc = size_rows(path, "auto", "", &c, &r, &e);
    int64_t r0 = inspect_rows_for(50, 0.01), r1 = rc == 0 ? inspect_rows_for(r.t[1].ids, 0.01) : 0;
    CHECK(rc == 0 && r.n_tables == 2 && r.examples == 10000 && r.whole && r.scale == 1 &&
              r.t[0].is_auto && r.t[0].ids_exact && r.t[0].ids == 50 && r.t[0].rows == r0 &&
              r.t[0].col == 2 && !r.t[1].ids_exact && rel_err(r.t[1].ids, 5000) < 0.03 &&
              r.t[1].rows == r1 && r.t[1].rows_1pct == r1 && r.bytes_per_row == 4 * 16,
          "rows auto: each table the rows for 1 % at its ids (50 counted, ~5000 estimated)",
          "rc %d %s: %d tables, %lld examples, ids %g %g, rows %lld %lld (want %lld %lld)", rc,
          e.msg, r.n_tables, (long long)r.examples, r.n_tables ? r.t[0].ids : -1,
          r.n_tables ? r.t[1].ids : -1, r.n_tables ? (long long)r.t[0].rows : -1,
          r.n_tables ? (long long)r.t[1].rows : -1, (long long)r0, (long long)r1);
    char text[4096] = "";
    if (rc == 0)
        said(&c, &r, text, sizeof text);
    char want0[128], want1[128];
    snprintf(want0, sizeof want0, "#   table 0 (data.cat_cols column 2): 50 ids -> %lld,%03lld "
             "rows", (long long)r0 / 1000, (long long)r0 % 1000); /* (4,876) */
    snprintf(want1, sizeof want1, "#   table 1 (data.cat_cols column 3): ~");
    CHECK(strstr(text, "in all of data.train (10,000 examples") && strstr(text, want0) &&
              strstr(text, want1) && strstr(text, " ± ") && !strstr(text, "scaled"),
          "rows auto: a line per table, the estimate's standard error beside it", "%s", text);
    reader_rows_auto_free(&r);
    ss_config_free(&c);

    rc = size_rows(path, "7,auto", "", &c, &r, &e);
    CHECK(rc == 0 && !r.t[0].is_auto && r.t[0].rows == 7 && r.t[1].is_auto && r.t[1].rows == r1 &&
              fabs(r.need - (double)r1 * 64) < 1,
          "rows auto: a table model.rows gives a number keeps it, out of the budget",
          "rc %d %s", rc, e.msg);
    reader_rows_auto_free(&r);
    ss_config_free(&c);

    char budget[64]; /* half what the two need */
    snprintf(budget, sizeof budget, "model.rows_budget_mb=%.17g",
             (double)(r0 + r1) * 64 / 2 / 1048576);
    rc = size_rows(path, "auto", budget, &c, &r, &e);
    CHECK(rc == 0 && fabs(r.scale - 0.5) < 1e-9 && r.t[0].rows == r0 / 2 && r.t[1].rows == r1 / 2 &&
              (double)(r.t[0].rows + r.t[1].rows) * 64 <= c.model.rows_budget_mb * 1048576,
          "rows auto: past model.rows_budget_mb every auto table scaled by the same factor",
          "rc %d %s: scale %g, rows %lld %lld", rc, e.msg, r.scale,
          rc == 0 ? (long long)r.t[0].rows : -1, rc == 0 ? (long long)r.t[1].rows : -1);
    reader_rows_auto_free(&r);
    ss_config_free(&c);

    rc = size_rows(path, "auto", "model.rows_auto_examples=20", &c, &r, &e);
    if (rc == 0)
        said(&c, &r, text, sizeof text);
    CHECK(rc == 0 && r.examples == 20 && !r.whole && r.t[0].ids == 20 && r.t[1].ids == 20 &&
              strstr(text, "in the first 20 examples of data.train ("),
          "rows auto: model.rows_auto_examples reads the first N examples, said", "rc %d %s: %s",
          rc, e.msg, text);
    reader_rows_auto_free(&r);
    ss_config_free(&c);
    unlink(path);

    /* the list as the model reads it */
    char *ov[] = {"model.rows=auto,5,auto"};
    int64_t rows[SS_MAX_TABLES];
    struct model_layout l = {0};
    rc = ss_config_load(&c, NULL, ov, 1, &e);
    int n = rc == 0 ? model_rows_parse(&c, rows, &e) : -1;
    CHECK(n == 3 && rows[0] == MODEL_ROWS_AUTO && rows[1] == 5 && rows[2] == MODEL_ROWS_AUTO &&
              model_rows_auto(&c),
          "rows auto: model.rows = auto,5,auto parses to 3 tables, auto marked", "%d %s", n,
          e.msg);
    e.msg[0] = 0;
    rc = model_layout_init(&l, &c, &e);
    CHECK(rc < 0 && strstr(e.msg, "model.rows = auto,5,auto: auto tables are sized when"),
          "rows auto: the layout refuses an auto left unresolved, naming model.rows", "%d %s",
          rc, e.msg);
    ss_config_free(&c);
}

int main(void)
{
    hll_counts();
    shared_rows();
    missing_mark();
    startup_check();
    rows_auto();
    CHECK_DONE();
}
