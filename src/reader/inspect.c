/* `shadowsync inspect`: a look at data.train before training (issue 29).
 *
 * One pass through the reader, with the config's schema, so the ids are
 * the ones training looks up (a token's value or hash; row = id mod rows,
 * DESIGN §1) and the bad lines are the ones training would skip. Per
 * categorical feature it counts lookups and distinct ids; per dense
 * feature the missing share (an empty field, read as NAN here: the schema's
 * missing_is_nan), min, max and mean of the values present; the label's CTR.
 *
 * A feature's ids are kept with their lookups in a hash set while they
 * are few (up to EXACT_IDS distinct, HyperLogLog++'s sparse idea): their
 * count is exact, and the share of lookups on a shared row is counted on
 * the real mapping id mod rows, each lookup weighted by its id's
 * frequency. Past that, over the whole data, the ids go into a HyperLogLog
 * sketch of 2^16 one-byte registers (64 KiB a feature, whatever the data's
 * size, so memory stays constant), and the shared share is the formula for
 * uniformly hashed ids at the estimated count. With a sample (the first N
 * examples) the set has no bound: every count is exact. Either way the
 * rows for a shared share under 1 % follow from the formula.
 *
 * A run's start-up check (reader_warn_collisions) is the same pass over
 * the first batches of data.train, quiet, and a warning of each table
 * that its rows cannot hold. model.rows = auto (reader_rows_auto) is the
 * whole pass, quiet but for its progress, that sizes the auto tables from
 * their ids (size_auto); inspect sizes them the same way from its own. */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define INSPECT_BATCH 4096
#define TARGET_SHARE 0.01
#define EXACT_IDS 4096 /* distinct ids of a feature counted exactly before it is sketched */
#define HLL_M (1u << INSPECT_HLL_BITS)
#define HLL_Q (64 - INSPECT_HLL_BITS) /* hash bits a register's rank is read from */

/* ---- HyperLogLog ------------------------------------------------------ */

void inspect_hll_add(struct inspect_hll *h, uint64_t id)
{
    /* splitmix64 of id as its counter (a bijection: no two ids merge) */
    uint64_t x = ss_mix64((id + 1) * 0x9E3779B97F4A7C15ull);
    uint32_t idx = (uint32_t)(x >> HLL_Q);
    uint64_t w = x << INSPECT_HLL_BITS | 1ull << (INSPECT_HLL_BITS - 1); /* rank <= HLL_Q + 1 */
    uint8_t rank = (uint8_t)(__builtin_clzll(w) + 1);
    if (rank > h->reg[idx])
        h->reg[idx] = rank;
}

/* Ertl's sigma and tau (arXiv:1702.01284, algorithm 6). */
static double hll_sigma(double x)
{
    if (x == 1.0)
        return INFINITY;
    double y = 1.0, z = x, prev;
    do {
        x *= x;
        prev = z;
        z += x * y;
        y += y;
    } while (z != prev);
    return z;
}

static double hll_tau(double x)
{
    if (x == 0.0 || x == 1.0)
        return 0.0;
    double y = 1.0, z = 1.0 - x, prev;
    do {
        x = sqrt(x);
        prev = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
    } while (z != prev);
    return z / 3.0;
}

double inspect_hll_estimate(const struct inspect_hll *h)
{
    int64_t c[HLL_Q + 2] = {0};
    for (uint32_t i = 0; i < HLL_M; i++)
        c[h->reg[i]]++;
    const double m = HLL_M;
    double z = m * hll_tau(1.0 - (double)c[HLL_Q + 1] / m);
    for (int k = HLL_Q; k >= 1; k--)
        z = 0.5 * (z + (double)c[k]);
    z += m * hll_sigma((double)c[0] / m);
    return m * m / (2.0 * log(2.0)) / z; /* alpha_inf m^2 / z; 0 when empty (z infinite) */
}

double inspect_hll_std_error(void) { return 1.04 / sqrt((double)HLL_M); }

double inspect_shared_share(double n, double rows)
{
    if (n <= 1.0 || rows <= 0.0)
        return 0.0;
    if (rows <= 1.0)
        return 1.0;
    return -expm1((n - 1.0) * log1p(-1.0 / rows));
}

int64_t inspect_rows_for(double n, double share)
{
    if (n <= 1.0)
        return 1;
    double r = ceil((n - 1.0) / -log1p(-share));
    int64_t rows = r >= 9.0e18 ? INT64_MAX : (int64_t)r;
    while (rows > 1 && inspect_shared_share(n, (double)(rows - 1)) <= share)
        rows--; /* the formula's ceiling can be one above the fewest */
    while (rows < INT64_MAX && inspect_shared_share(n, (double)rows) > share)
        rows++;
    return rows;
}

/* ---- exact counts (a sample) ----------------------------------------- */

/* An open-addressing map id -> count (count 0: an empty slot). */
struct id_count {
    uint64_t *key;
    int64_t *count;
    size_t cap, n;
};

static size_t slot_of(const struct id_count *s, uint64_t id)
{
    size_t i = (size_t)ss_mix64(id) & (s->cap - 1);
    while (s->count[i] && s->key[i] != id)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static void count_add(struct id_count *s, uint64_t id, int64_t k);

static void count_grow(struct id_count *s)
{
    struct id_count old = *s;
    s->cap = old.cap ? old.cap * 2 : 1024;
    s->key = ss_xmalloc(s->cap * sizeof *s->key);
    s->count = ss_xcalloc(s->cap, sizeof *s->count);
    s->n = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.count[i])
            count_add(s, old.key[i], old.count[i]);
    free(old.key);
    free(old.count);
}

static void count_add(struct id_count *s, uint64_t id, int64_t k)
{
    if (2 * (s->n + 1) > s->cap)
        count_grow(s);
    size_t i = slot_of(s, id);
    if (!s->count[i]) {
        s->key[i] = id;
        s->n++;
    }
    s->count[i] += k;
}

static int64_t count_get(const struct id_count *s, uint64_t id)
{
    return s->cap ? s->count[slot_of(s, id)] : 0;
}

static void count_free(struct id_count *s)
{
    free(s->key);
    free(s->count);
    memset(s, 0, sizeof *s);
}

/* The lookups of ids whose row (id mod rows) holds another id too. */
static int64_t counted_shared(const struct id_count *ids, int64_t rows)
{
    struct id_count per_row = {0};
    int64_t shared = 0;
    for (size_t i = 0; i < ids->cap; i++)
        if (ids->count[i])
            count_add(&per_row, ids->key[i] % (uint64_t)rows, 1);
    for (size_t i = 0; i < ids->cap; i++)
        if (ids->count[i] && count_get(&per_row, ids->key[i] % (uint64_t)rows) > 1)
            shared += ids->count[i];
    count_free(&per_row);
    return shared;
}

/* ---- the pass -------------------------------------------------------- */

struct cat_stats {
    struct id_count ids;    /* each id and its lookups, while exact */
    int sketched;           /* past EXACT_IDS ids (whole data): hll holds them, ids nothing */
    int64_t lookups, empty; /* empty: id 0, what an empty field reads as */
    struct inspect_hll hll;
};

struct dense_stats {
    int64_t present, missing;
    double min, max, sum;
};

struct cat_figures {
    int exact;              /* ids counted and shared counted (not estimated) */
    double ids, shared, shared_uniform;
    int64_t rows_1pct;
};

struct inspection {
    const struct ss_config *c;
    const struct inspect_opts *o;
    int64_t limit;          /* examples read (0: all) */
    int exact;              /* every id counted exactly (no sketch) */
    const char *progress;   /* what the progress lines name (NULL: none) */
    struct schema s;
    int64_t *rows;          /* [n_cat]: model.rows (an auto table's once sized) */
    int *is_auto;           /* [n_cat]: auto in model.rows */
    double auto_need, auto_scale; /* the auto tables' bytes at rows_1pct; the budget's factor */
    struct cat_stats *cat;  /* [n_cat] */
    struct dense_stats *dense; /* [n_dense] */
    struct cat_figures *fig;   /* [n_cat], after the pass */
    int64_t labeled;
    double label_sum;
    struct reader_stats rs;
    double seconds;
    int startup;            /* a run's pass: no bad line named */
};

/* model.rows for each of the data's n_cat features: one number (or auto)
 * for all, or one per feature. An auto table's rows are 0 until sized. */
static int table_rows(struct inspection *in, struct ss_err *e)
{
    const char *p = in->c->model.rows;
    int n = 0, n_cat = in->s.n_cat;
    int64_t first = 0;
    in->rows = ss_xcalloc((size_t)n_cat + 1, sizeof *in->rows);
    in->is_auto = ss_xcalloc((size_t)n_cat + 1, sizeof *in->is_auto);
    while (*p) {
        char *end = (char *)p + 4;
        long long v = strncmp(p, "auto", 4) ? strtoll(p, &end, 10) : 0; /* 0: auto */
        if (n == 0)
            first = v;
        if (n < n_cat)
            in->rows[n] = v;
        n++;
        p = *end ? end + 1 : end;
    }
    for (int t = 0; t < n_cat; t++) {
        in->rows[t] = n == 1 ? first : in->rows[t];
        in->is_auto[t] = in->rows[t] == 0;
    }
    if (n != 1 && n != n_cat)
        return ss_config_fail(e, in->c, "model.rows data.cat_cols", "%s: model.rows lists %d "
                              "tables, the data in data.train = %s has %d categorical "
                              "features", in->progress ? in->progress : "inspect", n,
                              in->c->data.train, n_cat);
    return 0;
}

/* One lookup of id; cap: the distinct ids kept exactly (0: all). */
static void cat_add(struct cat_stats *cs, uint64_t id, int64_t cap)
{
    cs->lookups++;
    cs->empty += id == 0;
    if (cs->sketched) {
        inspect_hll_add(&cs->hll, id);
        return;
    }
    count_add(&cs->ids, id, 1);
    if (cap && (int64_t)cs->ids.n > cap) {
        for (size_t i = 0; i < cs->ids.cap; i++)
            if (cs->ids.count[i])
                inspect_hll_add(&cs->hll, cs->ids.key[i]);
        count_free(&cs->ids);
        cs->sketched = 1;
    }
}

static void take_batch(struct inspection *in, const struct batch *b)
{
    const int64_t cap = in->exact ? 0 : EXACT_IDS;
    const int nd = b->n_dense, T = b->n_tables;
    for (int i = 0; i < b->n; i++) {
        if (!isnan(b->label[i])) {
            in->labeled++;
            in->label_sum += b->label[i];
        }
        const float *x = b->dense + (size_t)i * (size_t)nd;
        for (int j = 0; j < nd; j++) {
            struct dense_stats *d = &in->dense[j];
            if (isnan(x[j])) {
                d->missing++;
                continue;
            }
            d->min = d->present && d->min <= x[j] ? d->min : x[j];
            d->max = d->present && d->max >= x[j] ? d->max : x[j];
            d->sum += x[j];
            d->present++;
        }
        const int32_t *off = b->off + (size_t)i * (size_t)T;
        for (int t = 0; t < T; t++) {
            for (int32_t k = off[t]; k < off[t + 1]; k++)
                cat_add(&in->cat[t], b->ids[k], cap);
        }
    }
}

static int run_pass(struct inspection *in, struct ss_err *e)
{
    struct reader *r;
    int rc = reader_open(&r, in->c->data.train, &in->s, in->limit,
                         in->startup ? 0 : in->c->data.report_bad_lines, e);
    if (rc)
        return ss_fail(e, rc, "data.train: %s", e->msg);
    struct batch b;
    batch_init(&b, INSPECT_BATCH, in->s.n_dense, in->s.n_cat);
    double t0 = ss_now(), last = t0, every = in->c->output.log_interval_s;
    int64_t n = 0;
    while ((rc = reader_next(r, &b, e)) == 0 && b.n > 0) {
        take_batch(in, &b);
        n += b.n;
        double now = ss_now();
        if (!in->c->output.quiet && in->progress && now - last >= every) {
            struct reader_stats st;
            reader_stats(r, &st);
            ss_log("%s: %lld examples, %lld bad lines, done %.1f%% (%.0f examples/s)",
                   in->progress, (long long)n, (long long)st.bad_lines,
                   100 * reader_fraction(r), (double)n / (now - t0));
            last = now;
        }
    }
    reader_stats(r, &in->rs);
    in->seconds = ss_now() - t0;
    batch_free(&b);
    reader_close(r);
    if (rc == 0 && in->rs.examples == 0)
        rc = ss_fail(e, SS_EFORMAT, "%s: no example was read from data.train = %s (%lld "
                     "bad lines%s): check data.format, data.separator, data.header and the "
                     "columns (data.*_cols)", in->progress ? in->progress : "inspect",
                     in->c->data.train, (long long)in->rs.bad_lines,
                     in->rs.bad_lines && in->c->data.report_bad_lines ? ", the first named above"
                                                                      : "");
    return rc;
}

/* ---- the figures ----------------------------------------------------- */

static int bytes_per_row(const struct ss_config *c)
{
    return 4 * (c->model.dim + (c->optim.emb == OPT_ROWWISE_ADAGRAD));
}

/* Table t's distinct ids: counted, or the sketch's estimate. */
static void table_ids(const struct inspection *in, int t, struct cat_figures *f)
{
    const struct cat_stats *cs = &in->cat[t];
    f->exact = !cs->sketched;
    f->ids = f->exact ? (double)cs->ids.n : round(inspect_hll_estimate(&cs->hll));
}

/* model.rows = auto: each auto table gets rows_1pct, the rows for at most
 * TARGET_SHARE of its lookups on a shared row at its ids; where they weigh
 * more than model.rows_budget_mb together, all of them are scaled by the
 * one factor that fits them, so each keeps the same ids per row (the same
 * shared share, for ids hashed uniformly) and none is starved for another. */
static void size_auto(struct inspection *in)
{
    double bpr = bytes_per_row(in->c), budget = in->c->model.rows_budget_mb * 1048576.0;
    in->auto_need = 0;
    for (int t = 0; t < in->s.n_cat; t++)
        if (in->is_auto[t])
            in->auto_need += (double)in->fig[t].rows_1pct * bpr;
    in->auto_scale = in->auto_need > budget ? budget / in->auto_need : 1.0;
    for (int t = 0; t < in->s.n_cat; t++) {
        double r = floor((double)in->fig[t].rows_1pct * in->auto_scale);
        if (in->is_auto[t])
            in->rows[t] = r < 1 ? 1 : (int64_t)r;
    }
}

/* Table t's shares at its rows (its ids and rows_1pct known). */
static void cat_figures(const struct inspection *in, int t, struct cat_figures *f)
{
    const struct cat_stats *cs = &in->cat[t];
    f->shared_uniform = inspect_shared_share(f->ids, (double)in->rows[t]);
    f->shared = f->exact && cs->lookups
                    ? (double)counted_shared(&cs->ids, in->rows[t]) / (double)cs->lookups
                    : f->shared_uniform;
}

static const char *mem_text(double bytes, char buf[32])
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5)
        bytes /= 1024, u++;
    snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

static const char *share_text(double v, char buf[32])
{
    if (isnan(v))
        snprintf(buf, 32, "-");
    else
        snprintf(buf, 32, "%.1f %%", 100 * v);
    return buf;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : NAN;
}

static void report_head(const struct inspection *in, FILE *out)
{
    const struct ss_config *c = in->c;
    const struct reader_stats *rs = &in->rs;
    fprintf(out, "# data.train = %s: %lld lines read, %lld examples, %lld bad lines (%s)\n",
            c->data.train, (long long)(rs->examples + rs->bad_lines), (long long)rs->examples,
            (long long)rs->bad_lines, in->o->sample ? "the sample: --sample" : "the whole data");
    if (in->labeled)
        fprintf(out, "# label: CTR %.4f over %lld labeled examples\n",
                in->label_sum / (double)in->labeled, (long long)in->labeled);
    else
        fprintf(out, "# label: none (data.label_col = -1)\n");
    if (in->o->sample)
        fprintf(out, "# ids: distinct ids, counted exactly in the sample\n");
    else
        fprintf(out, "# ids: distinct ids, counted exactly up to %d; ~: past that, a "
                "HyperLogLog estimate (2^%d registers, standard error %.2f %%)\n", EXACT_IDS,
                INSPECT_HLL_BITS, 100 * inspect_hll_std_error());
    fprintf(out, "# shared: the lookups whose row (id mod model.rows) holds another id too, "
            "counted where the ids are; ~: for ids hashed uniformly, 1 - (1 - 1/rows)^(ids - "
            "1)\n# empty: lookups of id 0 (an empty field); rows_1pct: the rows for shared "
            "under 1 %% (uniform hashing); memory: rows_1pct x %d bytes (model.dim %d%s)\n",
            bytes_per_row(c), c->model.dim,
            c->optim.emb == OPT_ROWWISE_ADAGRAD ? " + 1, optim.emb = rowwise_adagrad" : "");
    int n_auto = 0;
    for (int t = 0; t < in->s.n_cat; t++)
        n_auto += in->is_auto[t];
    char need[32];
    if (n_auto)
        fprintf(out, "# rows*: model.rows = auto, sized as a run would from these ids: "
                "rows_1pct, %s for the %d auto tables, %s model.rows_budget_mb = %g%s\n",
                mem_text(in->auto_need, need), n_auto,
                in->auto_scale < 1 ? "over" : "within", c->model.rows_budget_mb,
                in->auto_scale < 1 ? ", so each scaled by the same factor" : "");
}

static void report_text(const struct inspection *in, FILE *out)
{
    char a[32], b[32], m[32];
    double bpr = bytes_per_row(in->c), mem_rows = 0, mem_1pct = 0;
    report_head(in, out);
    fprintf(out, "%-7s %5s %12s %12s %8s %12s %8s %12s %10s\n", "table", "col", "ids", "lookups",
            "empty", "rows", "shared", "rows_1pct", "memory");
    for (int t = 0; t < in->s.n_cat; t++) {
        const struct cat_stats *cs = &in->cat[t];
        const struct cat_figures f = in->fig[t];
        char col[16], ids[32], shared[40], rows[32];
        snprintf(col, sizeof col, "%d", in->s.format == FMT_BINARY ? -1 : in->s.cat_cols[t]);
        snprintf(ids, sizeof ids, "%s%.0f", f.exact ? "" : "~", f.ids);
        snprintf(shared, sizeof shared, "%s%s", f.exact ? "" : "~", share_text(f.shared, b));
        snprintf(rows, sizeof rows, "%lld%s", (long long)in->rows[t], in->is_auto[t] ? "*" : "");
        fprintf(out, "%-7d %5s %12s %12lld %8s %12s %8s %12lld %10s\n", t,
                in->s.format == FMT_BINARY ? "-" : col, ids, (long long)cs->lookups,
                share_text(cs->lookups ? (double)cs->empty / (double)cs->lookups : NAN, a),
                rows, shared, (long long)f.rows_1pct,
                mem_text((double)f.rows_1pct * bpr, m));
        mem_rows += (double)in->rows[t] * bpr;
        mem_1pct += (double)f.rows_1pct * bpr;
    }
    fprintf(out, "# all tables: %s at model.rows, %s at rows_1pct\n", mem_text(mem_rows, a),
            mem_text(mem_1pct, b));
    fprintf(out, "%-7s %5s %8s %14s %14s %14s\n", "dense", "col", "missing", "min", "max",
            "mean");
    for (int j = 0; j < in->s.n_dense; j++) {
        const struct dense_stats *d = &in->dense[j];
        int64_t all = d->present + d->missing;
        double miss = in->s.format == FMT_BINARY || !all ? NAN : (double)d->missing / (double)all;
        char col[16];
        snprintf(col, sizeof col, in->s.dense_cols[j] < 0 ? "none" : "%d", in->s.dense_cols[j]);
        if (d->present)
            fprintf(out, "%-7d %5s %8s %14.6g %14.6g %14.6g\n", j,
                    in->s.format == FMT_BINARY ? "-" : col, share_text(miss, a), d->min, d->max,
                    d->sum / (double)d->present);
        else
            fprintf(out, "%-7d %5s %8s %14s %14s %14s\n", j,
                    in->s.format == FMT_BINARY ? "-" : col, share_text(miss, a), "-", "-", "-");
    }
    fprintf(out, "# %.1f s, peak RSS %.0f MB%s\n", in->seconds, peak_rss_mb(),
            in->s.format == FMT_BINARY ? "; binary shards keep no missing mark (dense 0)" : "");
}

/* ---- JSON ------------------------------------------------------------ */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* v as a JSON number: a count exactly, NAN or infinity as null. */
static void json_num(FILE *f, double v)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 9007199254740992.0)
        fprintf(f, "%.0f", v);
    else if (isfinite(v))
        fprintf(f, "%.8g", v);
    else
        fputs("null", f);
}

/* Top-level keys one to a line, each feature's object on a line of its own. */
static void json_key(FILE *f, const char *k, double v)
{
    fprintf(f, "  \"%s\": ", k);
    json_num(f, v);
    fputs(",\n", f);
}

static void json_field(FILE *f, const char *k, double v, int first)
{
    fprintf(f, "%s\"%s\": ", first ? "" : ", ", k);
    json_num(f, v);
}

static void json_tables(const struct inspection *in, FILE *f)
{
    double bpr = bytes_per_row(in->c);
    fputs("  \"categorical\": [\n", f);
    for (int t = 0; t < in->s.n_cat; t++) {
        const struct cat_stats *cs = &in->cat[t];
        const struct cat_figures g = in->fig[t];
        fputs("    {", f);
        json_field(f, "table", t, 1);
        json_field(f, "col", in->s.format == FMT_BINARY ? NAN : in->s.cat_cols[t], 0);
        json_field(f, "ids", g.ids, 0);
        fprintf(f, ", \"ids_exact\": %s", g.exact ? "true" : "false");
        json_field(f, "lookups", (double)cs->lookups, 0);
        json_field(f, "empty", cs->lookups ? (double)cs->empty / (double)cs->lookups : NAN, 0);
        json_field(f, "rows", (double)in->rows[t], 0);
        fprintf(f, ", \"rows_auto\": %s", in->is_auto[t] ? "true" : "false");
        json_field(f, "shared", g.shared, 0);
        fprintf(f, ", \"shared_method\": \"%s\"", g.exact ? "counted" : "uniform hashing");
        json_field(f, "shared_uniform", g.shared_uniform, 0);
        json_field(f, "rows_1pct", (double)g.rows_1pct, 0);
        json_field(f, "memory_bytes", (double)in->rows[t] * bpr, 0);
        json_field(f, "memory_bytes_1pct", (double)g.rows_1pct * bpr, 0);
        fprintf(f, "}%s\n", t + 1 < in->s.n_cat ? "," : "");
    }
    fputs("  ],\n  \"dense\": [\n", f);
    for (int j = 0; j < in->s.n_dense; j++) {
        const struct dense_stats *d = &in->dense[j];
        int64_t all = d->present + d->missing;
        fputs("    {", f);
        json_field(f, "feature", j, 1);
        json_field(f, "col", in->s.format == FMT_BINARY || in->s.dense_cols[j] < 0
                                 ? NAN : in->s.dense_cols[j], 0);
        json_field(f, "missing", in->s.format == FMT_BINARY || !all ? NAN
                                 : (double)d->missing / (double)all, 0);
        json_field(f, "min", d->present ? d->min : NAN, 0);
        json_field(f, "max", d->present ? d->max : NAN, 0);
        json_field(f, "mean", d->present ? d->sum / (double)d->present : NAN, 0);
        fprintf(f, "}%s\n", j + 1 < in->s.n_dense ? "," : "");
    }
    fputs("  ]\n", f);
}

static void report_json(const struct inspection *in, FILE *f)
{
    fputs("{\n  \"data_train\": ", f);
    json_str(f, in->c->data.train);
    fprintf(f, ",\n  \"pass\": \"%s\",\n", in->o->sample ? "sample" : "whole");
    json_key(f, "sample", in->o->sample ? (double)in->o->sample : NAN);
    json_key(f, "lines", (double)(in->rs.examples + in->rs.bad_lines));
    json_key(f, "examples", (double)in->rs.examples);
    json_key(f, "bad_lines", (double)in->rs.bad_lines);
    json_key(f, "labeled", (double)in->labeled);
    json_key(f, "ctr", in->labeled ? in->label_sum / (double)in->labeled : NAN);
    json_key(f, "exact_ids_max", in->o->sample ? NAN : EXACT_IDS);
    json_key(f, "hll_registers", HLL_M);
    json_key(f, "ids_std_error", inspect_hll_std_error());
    json_key(f, "dim", in->c->model.dim);
    json_key(f, "bytes_per_row", bytes_per_row(in->c));
    json_key(f, "seconds", in->seconds);
    json_key(f, "peak_rss_mb", peak_rss_mb());
    json_tables(in, f);
    fputs("}\n", f);
}

/* ---- the verb -------------------------------------------------------- */

/* The schema, each table's rows and the counters. */
static int prepare_tables(struct inspection *in, struct ss_err *e)
{
    const struct ss_config *c = in->c;
    int rc = schema_from_config(&in->s, c, c->data.train, e);
    if (rc == 0)
        rc = table_rows(in, e);
    if (rc < 0)
        return rc;
    in->s.missing_is_nan = 1;
    in->cat = ss_xcalloc((size_t)in->s.n_cat + 1, sizeof *in->cat);
    in->dense = ss_xcalloc((size_t)in->s.n_dense + 1, sizeof *in->dense);
    return 0;
}

/* The pass, then each table's ids, the auto tables' rows and the figures. */
static int inspect_pass(struct inspection *in, struct ss_err *e)
{
    int rc = run_pass(in, e);
    if (rc == 0) {
        in->fig = ss_xcalloc((size_t)in->s.n_cat + 1, sizeof *in->fig);
        for (int t = 0; t < in->s.n_cat; t++) {
            table_ids(in, t, &in->fig[t]);
            in->fig[t].rows_1pct = inspect_rows_for(in->fig[t].ids, TARGET_SHARE);
        }
        size_auto(in);
        for (int t = 0; t < in->s.n_cat; t++)
            cat_figures(in, t, &in->fig[t]);
    }
    return rc;
}

static int prepare(struct inspection *in, struct ss_err *e)
{
    const struct ss_config *c = in->c;
    if (!c->data.train || !*c->data.train)
        return ss_fail(e, SS_EINVAL, "config: data.train is empty: give the data to inspect "
                       "(a file, a directory or a glob)");
    int rc = reader_check_train(c->data.train, e);
    if (rc == 0 && in->o->json_path)
        rc = reader_check_output("--json", in->o->json_path, "data.train", c->data.train, e);
    return rc < 0 ? rc : prepare_tables(in, e);
}

static void inspection_free(struct inspection *in)
{
    for (int t = 0; in->cat && t < in->s.n_cat; t++)
        count_free(&in->cat[t].ids);
    free(in->cat);
    free(in->dense);
    free(in->fig);
    free(in->rows);
    free(in->is_auto);
}

int reader_inspect(const struct ss_config *c, const struct inspect_opts *o, FILE *out,
                   struct ss_err *e)
{
    struct inspection in = {.c = c, .o = o, .limit = o->sample, .exact = o->sample > 0,
                            .progress = "inspect"};
    FILE *jf = NULL;
    struct stat was;
    int json_new = o->json_path && stat(o->json_path, &was) != 0;
    int rc = prepare(&in, e);
    if (rc == 0 && o->json_path && !(jf = fopen(o->json_path, "w"))) /* before a long pass */
        rc = ss_fail(e, SS_EIO, "--json %s: %s", o->json_path, strerror(errno));
    if (rc == 0)
        rc = inspect_pass(&in, e);
    if (rc == 0) {
        report_text(&in, out);
        fflush(out);
        reader_warn_bad_share("data.train", c->data.train, in.rs.bad_lines, in.rs.examples,
                              c->data.report_bad_lines > 0);
    }
    if (rc == 0 && jf) {
        report_json(&in, jf);
        int bad = ferror(jf);
        if (fclose(jf) || bad)
            rc = ss_fail(e, SS_EIO, "--json %s: write failed: %s", o->json_path,
                         strerror(errno));
        jf = NULL;
    }
    if (jf) {
        fclose(jf);
        if (json_new) /* a failed pass leaves no empty file of ours */
            unlink(o->json_path);
    }
    inspection_free(&in);
    return rc;
}

/* ---- a run's start-up check ------------------------------------------ */

#define WARN_TABLES 10 /* tables named one to a line; past them, their count */

/* data.train's files are all regular: reading them takes nothing from the
 * run (a pipe's lines would be gone). *listed: its files could be listed. */
static int train_rereadable(const char *train, int *listed)
{
    char **f;
    int n, ok = 1;
    struct ss_err ignored = {0};
    *listed = reader_list_files(train, PICK_ALL, &f, &n, &ignored) == 0;
    if (!*listed)
        return 0;
    for (int i = 0; i < n && ok; i++) {
        struct stat st;
        ok = stat(f[i], &st) == 0 && S_ISREG(st.st_mode);
    }
    reader_free_files(f, n);
    return ok;
}

int reader_collision_check(const struct ss_config *c, int64_t examples,
                           struct collision_check *out, struct ss_err *e)
{
    struct inspect_opts o = {.sample = examples > 0 ? examples : 1};
    struct inspection in = {.c = c, .o = &o, .limit = o.sample, .exact = 1, .startup = 1};
    int listed;
    memset(out, 0, sizeof *out);
    if (!c->data.train || !*c->data.train || !train_rereadable(c->data.train, &listed))
        return 0;
    int rc = prepare_tables(&in, e);
    if (rc == 0)
        rc = inspect_pass(&in, e);
    if (rc == 0) {
        out->examples = in.rs.examples;
        out->n_tables = in.s.n_cat;
        out->t = ss_xcalloc((size_t)in.s.n_cat + 1, sizeof *out->t);
        for (int t = 0; t < in.s.n_cat; t++) {
            struct collision_table *k = &out->t[t];
            k->col = in.s.format == FMT_BINARY ? -1 : in.s.cat_cols[t];
            k->ids = (int64_t)in.fig[t].ids;
            k->has_empty = in.cat[t].empty > 0;
            k->rows = in.rows[t];
            k->shared = in.fig[t].shared;
            k->rows_1pct = in.fig[t].rows_1pct;
            k->bytes_1pct = (double)k->rows_1pct * bytes_per_row(c);
        }
    }
    inspection_free(&in);
    return rc;
}

void reader_collision_free(struct collision_check *k)
{
    free(k->t);
    memset(k, 0, sizeof *k);
}

/* n with a comma between each three digits. */
static const char *grouped(int64_t n, char buf[32])
{
    char d[24];
    int len = snprintf(d, sizeof d, "%lld", (long long)n), j = 0;
    for (int i = 0; i < len; i++) {
        if (i && d[i - 1] != '-' && (len - i) % 3 == 0)
            buf[j++] = ',';
        buf[j++] = d[i];
    }
    buf[j] = 0;
    return buf;
}

int reader_rows_auto(const struct ss_config *c, struct rows_auto *out, struct ss_err *e)
{
    struct inspect_opts o = {0};
    int64_t limit = c->model.rows_auto_examples ? c->model.rows_auto_examples
                                                 : c->data.max_examples;
    struct inspection in = {.c = c, .o = &o, .limit = limit, .startup = 1,
                            .progress = "model.rows = auto"};
    int listed;
    memset(out, 0, sizeof *out);
    if (!c->data.train || !*c->data.train)
        return ss_config_fail(e, c, "model.rows data.train", "model.rows = %s sizes the tables "
                              "from the ids in data.train, which is empty: give the training "
                              "data, or the rows as numbers", c->model.rows);
    if (!train_rereadable(c->data.train, &listed) && listed)
        return ss_config_fail(e, c, "model.rows data.train", "model.rows = %s reads data.train "
                              "= %s before training, and a pipe there cannot be read twice (the "
                              "run would lose what the sizing read): give the rows as numbers "
                              "(`shadowsync inspect` on a copy of the data says them)",
                              c->model.rows, c->data.train);
    int rc = prepare_tables(&in, e);
    if (rc == 0)
        rc = inspect_pass(&in, e);
    if (rc == 0) {
        out->examples = in.rs.examples;
        out->whole = !limit || in.rs.examples < limit;
        out->seconds = in.seconds;
        out->bytes_per_row = bytes_per_row(c);
        out->need = in.auto_need;
        out->scale = in.auto_scale;
        out->n_tables = in.s.n_cat;
        out->t = ss_xcalloc((size_t)in.s.n_cat + 1, sizeof *out->t);
        for (int t = 0; t < in.s.n_cat; t++)
            out->t[t] = (struct rows_auto_table){
                .col = in.s.format == FMT_BINARY ? -1 : in.s.cat_cols[t],
                .is_auto = in.is_auto[t], .ids_exact = in.fig[t].exact, .ids = in.fig[t].ids,
                .rows_1pct = in.fig[t].rows_1pct, .rows = in.rows[t],
                .shared = in.fig[t].shared_uniform};
    }
    inspection_free(&in);
    return rc;
}

void reader_rows_auto_free(struct rows_auto *r)
{
    free(r->t);
    memset(r, 0, sizeof *r);
}

/* "table 3 (data.cat_cols column 17)", or "(binary shards)". */
static const char *table_name(int t, int col, char buf[64])
{
    if (col >= 0)
        snprintf(buf, 64, "table %d (data.cat_cols column %d)", t, col);
    else
        snprintf(buf, 64, "table %d (binary shards)", t);
    return buf;
}

void reader_rows_auto_print(const struct ss_config *c, const struct rows_auto *r, FILE *f)
{
    char a[32], b[32], m[32], ids[80], name[64], read[96];
    double most = 0, bytes = 0;
    if (r->whole)
        snprintf(read, sizeof read, "all of data.train (%s examples, %.1f s)",
                 grouped(r->examples, a), r->seconds);
    else
        snprintf(read, sizeof read, "the first %s examples of data.train (%.1f s)",
                 grouped(r->examples, a), r->seconds);
    fprintf(f, "# model.rows = auto: the distinct ids of each table in %s size it for at most "
            "1 %% of its lookups on a row shared with another id (ids hashed uniformly), the "
            "auto tables within model.rows_budget_mb = %g\n", read, c->model.rows_budget_mb);
    for (int t = 0; t < r->n_tables; t++) {
        const struct rows_auto_table *x = &r->t[t];
        table_name(t, x->col, name);
        if (!x->is_auto) {
            fprintf(f, "#   %s: model.rows gives %s rows (%s)\n", name, grouped(x->rows, a),
                    mem_text((double)x->rows * r->bytes_per_row, m));
            continue;
        }
        if (x->ids_exact)
            snprintf(ids, sizeof ids, "%s", grouped((int64_t)x->ids, a));
        else
            snprintf(ids, sizeof ids, "~%s ± %.0f", grouped((int64_t)x->ids, a),
                     x->ids * inspect_hll_std_error());
        fprintf(f, "#   %s: %s ids -> %s rows (%s)\n", name, ids, grouped(x->rows, a),
                mem_text((double)x->rows * r->bytes_per_row, m));
        most = x->shared > most ? x->shared : most;
        bytes += (double)x->rows * r->bytes_per_row;
    }
    if (r->scale < 1)
        fprintf(f, "# model.rows = auto: at 1 %% the auto tables would take %s, over "
                "model.rows_budget_mb = %g: each one's rows scaled by %.4g, to %s, up to %.1f %% "
                "of a table's lookups on shared rows\n", mem_text(r->need, a),
                c->model.rows_budget_mb, r->scale, mem_text(bytes, b), 100 * most);
    fflush(f);
}

/* A table that its rows cannot hold: more ids than rows, the empty field's
 * id 0 aside (a table sized to a feature's values, as Criteo's cardinalities
 * are, is one row short of them and it), and too many lookups on a shared
 * row. Ids hashed into a table of their own count share rows too (up to
 * 1 - 1/e of them): inspect shows that; this is the data outgrowing rows. */
static int over_rows(const struct ss_config *c, const struct collision_table *k)
{
    return k->ids - k->has_empty > k->rows && k->shared > c->data.collision_warn;
}

static void warn_table(const struct collision_check *k, int t, FILE *f)
{
    const struct collision_table *x = &k->t[t];
    char name[64], ids[32], ex[32], rows[32], r1[32], mem[32];
    fprintf(f, "shadowsync: warning: %s: %s distinct ids in the first %s examples "
            "share model.rows = %s rows: %.1f %% of its lookups land on a row shared with "
            "another id; model.rows >= %s would bring that under 1 %% (%s)\n",
            table_name(t, x->col, name),
            grouped(x->ids, ids), grouped(k->examples, ex), grouped(x->rows, rows),
            100 * x->shared, grouped(x->rows_1pct, r1), mem_text(x->bytes_1pct, mem));
}

int reader_warn_collisions(const struct ss_config *c, FILE *f)
{
    if (c->data.collision_check_batches <= 0)
        return 0;
    struct collision_check k;
    struct ss_err ignored = {0};
    int64_t n = (int64_t)c->data.collision_check_batches * c->trainer.batch_size;
    if (reader_collision_check(c, n, &k, &ignored) < 0)
        return 0;
    int over = 0;
    for (int t = 0; t < k.n_tables; t++)
        if (over_rows(c, &k.t[t]) && over++ < WARN_TABLES)
            warn_table(&k, t, f);
    if (over > WARN_TABLES)
        fprintf(f, "shadowsync: warning: and %d more tables like them\n", over - WARN_TABLES);
    if (over) {
        char ex[32];
        fprintf(f, "shadowsync: warning: %d of %d tables hold more distinct ids than rows, over "
                "%g %% of their lookups on shared rows (data.collision_warn), in the first %s "
                "examples of data.train: their ids train one vector between several. Size the "
                "tables for your data (model.rows; docs/data.md, `shadowsync inspect`); "
                "data.collision_check_batches = 0 turns this check off\n", over, k.n_tables,
                100 * c->data.collision_warn, grouped(k.examples, ex));
        fflush(f);
    }
    reader_collision_free(&k);
    return over;
}
