/* The embedding cache (DESIGN §9, after HET): with staleness 0 and one
 * writer it looks up and trains exactly as the tables alone (a small cache
 * that evicts and leaves ids uncached, and a large one, SGD and row-wise
 * Adagrad); a copy is fetched again only once it is more than staleness
 * updates behind; updates reach the tables once a row is staleness ahead,
 * when it leaves the cache, and at a flush; the row clocks count every
 * update. */
#include "check.h"
#include "layout.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { T = 2, DIM = 4, ROWS0 = 100, ROWS1 = 50, CAP = 32 };

static const int64_t rows[T] = {ROWS0, ROWS1};

static struct emb_tables *tables(int opt, int clocks)
{
    struct emb_opts o = {.n_tables = T, .dim = DIM, .rows = rows, .opt = opt, .lr = 0.1f,
                         .eps = 1e-8f, .init_acc = 0.01f, .seed = 3, .clocks = clocks};
    struct emb_tables *t = NULL;
    struct ss_err e = {0};
    if (embps_create(&t, &o, &e) < 0)
        CHECK(0, "tables", "%s", e.msg);
    return t;
}

static struct ss_config cfg;
static struct model_layout lay;

/* The config's cache keys and optimizer, and a layout of the two tables. */
static void configure(int opt, int cache_rows, int staleness)
{
    char r[64], s[64], o[64];
    snprintf(r, sizeof r, "embedding_cache.rows=%d", cache_rows);
    snprintf(s, sizeof s, "embedding_cache.staleness=%d", staleness);
    snprintf(o, sizeof o, "optim.emb=%s", opt == OPT_SGD ? "sgd" : "rowwise_adagrad");
    char *sets[] = {r, s, o, "optim.emb_lr=0.1", "optim.eps=1e-8", "optim.init_acc=0.01",
                    "model.dim=4", "model.rows=100,50", "data.cat_cols=1-2",
                    "model.bottom=13-4", "model.top=auto-8-1"};
    load_layout(&cfg, &lay, sets, sizeof sets / sizeof *sets);
}

/* A batch of n examples, bags of 0-3 ids skewed to low rows (repeats). */
static void random_batch(struct batch *b, int n, uint64_t *rng)
{
    b->n = n;
    int at = 0;
    b->off[0] = 0;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            int bag = (int)(ss_splitmix(rng) % 4);
            for (int k = 0; k < bag; k++) {
                uint64_t a = ss_splitmix(rng);
                b->ids[at++] = a % 3 ? a % 12 : a % 1000; /* ids past the rows wrap */
            }
            b->off[i * T + t + 1] = at;
        }
}

static double tables_diff(struct emb_tables *a, struct emb_tables *b)
{
    double m = 0;
    for (int t = 0; t < T; t++)
        for (uint64_t r = 0; r < (uint64_t)rows[t]; r++)
            m = fmax(m, max_diff(embps_row(a, t, r), embps_row(b, t, r), embps_stride(a)));
    return m;
}

/* The tables' clock of (t, row). */
static uint32_t clock_of(struct emb_tables *t, int tab, uint64_t row)
{
    uint32_t have = ROW_NONE, ck = 0;
    float v[DIM + 1];
    struct row_req r = {embps_stride(t), 0, NULL, NULL, NULL, NULL, 1, &tab, &row, &have, 0,
                        &ck, v};
    embps_rows(t, &r);
    return ck;
}

/* Staleness 0, one writer: the cache against the tables alone, batch by
 * batch, then the tables after a flush. */
static void test_exact(int opt, int cache_rows)
{
    configure(opt, cache_rows, 0);
    struct emb_tables *A = tables(opt, 0), *B = tables(opt, 1);
    struct emb_client *la = emb_client_local(A);
    struct cache_stats st = {0};
    struct emb_client *cc = emb_client_cache(emb_client_local(B), 1, &cfg, &lay, 4, &st);
    struct batch b;
    batch_init(&b, CAP, 0, T);
    batch_reserve_ids(&b, CAP * T * 3);
    float oa[CAP * T * DIM], ob[CAP * T * DIM], g[CAP * T * DIM];
    uint64_t rng = 11;
    double look = 0;
    int rc = 0;
    for (int it = 0; it < 200 && rc == 0; it++) {
        int n = 1 + (int)(ss_splitmix(&rng) % CAP);
        random_batch(&b, n, &rng);
        la->ops->lookup(la, &b, oa, NULL);
        if ((rc = cc->ops->lookup(cc, &b, ob, NULL)) < 0)
            break;
        look = fmax(look, max_diff(oa, ob, (size_t)n * T * DIM));
        for (int i = 0; i < n * T * DIM; i++)
            g[i] = (float)ss_normal(&rng);
        la->ops->push(la, &b, g, NULL);
        rc = cc->ops->push(cc, &b, g, NULL);
    }
    rc = rc ? rc : cc->ops->flush(cc, NULL);
    const char *name = opt == OPT_SGD ? "sgd" : "row-wise Adagrad";
    CHECK(rc == 0 && look < 1e-5, "staleness 0: lookups as the tables alone",
          "%s, %d rows: rc %d, diff %g", name, cache_rows, rc, look);
    double td = tables_diff(A, B);
    CHECK(td < 1e-5, "staleness 0: the tables after a flush as trained without a cache",
          "%s, %d rows: diff %g", name, cache_rows, td);
    CHECK(st.hits > 0 && st.lookups > st.hits && st.fetched > 0 && st.refreshed == 0 &&
              (cache_rows < 100) == (st.uncached > 0),
          "figures: hits, fetches, no refresh with one writer, uncached ids only when small",
          "%d rows: lookups %lld hits %lld fetched %lld refreshed %lld uncached %lld",
          cache_rows, (long long)st.lookups, (long long)st.hits, (long long)st.fetched,
          (long long)st.refreshed, (long long)st.uncached);
    batch_free(&b);
    cc->ops->free(cc);
    la->ops->free(la);
    embps_free(A);
    embps_free(B);
}

/* One example, one id per table: row0 of table 0, row1 of table 1. */
static void one(struct batch *b, uint64_t row0, uint64_t row1)
{
    b->n = 1;
    b->off[0] = 0;
    b->ids[0] = row0;
    b->off[1] = 1;
    b->ids[1] = row1;
    b->off[2] = 2;
}

/* Two workers' caches over one set of tables, staleness 3. */
static void test_bound(void)
{
    enum { S = 3 };
    configure(OPT_SGD, 64, S);
    struct emb_tables *t = tables(OPT_SGD, 1);
    struct emb_client *lx = emb_client_local(t), *ly = emb_client_local(t);
    struct cache_stats sx = {0}, sy = {0};
    struct emb_client *x = emb_client_cache(lx, 1, &cfg, &lay, 1, &sx);
    struct emb_client *y = emb_client_cache(ly, 1, &cfg, &lay, 1, &sy);
    struct batch b;
    batch_init(&b, 1, 0, T);
    batch_reserve_ids(&b, 4);
    float out[T * DIM], first[T * DIM], g[T * DIM];
    for (int i = 0; i < T * DIM; i++)
        g[i] = 1.0f;
    one(&b, 5, 7);
    int rc = x->ops->lookup(x, &b, first, NULL);
    /* y trains row 5 S times: x's copy is S behind, still recent enough */
    for (int k = 0; rc == 0 && k < S; k++)
        rc = y->ops->lookup(y, &b, out, NULL) || y->ops->push(y, &b, g, NULL);
    CHECK(rc == 0 && clock_of(t, 0, 5) == S && embps_row(t, 0, 5)[0] != first[0],
          "a row's updates reach the tables once it is staleness ahead, with their count",
          "rc %d clock %u", rc, clock_of(t, 0, 5));
    rc = x->ops->lookup(x, &b, out, NULL);
    CHECK(rc == 0 && max_diff(out, first, T * DIM) == 0 && sx.refreshed == 0,
          "a copy staleness updates behind is served from the cache", "rc %d diff %g refreshed %lld",
          rc, max_diff(out, first, T * DIM), (long long)sx.refreshed);
    rc = x->ops->push(x, &b, g, NULL); /* x: one update pending on rows 5 and 7 */
    float pending = -0.1f;              /* SGD, lr 0.1, gradient 1 */
    rc = rc ? rc : y->ops->lookup(y, &b, out, NULL);
    rc = rc ? rc : y->ops->push(y, &b, g, NULL);
    for (int k = 0; rc == 0 && k < S - 1; k++) /* y is S ahead again: pushed (clock 2S) */
        rc = y->ops->lookup(y, &b, out, NULL) || y->ops->push(y, &b, g, NULL);
    rc = rc ? rc : x->ops->lookup(x, &b, out, NULL);
    CHECK(rc == 0 && sx.refreshed == 2 && fabsf(out[0] - (embps_row(t, 0, 5)[0] + pending)) < 1e-6,
          "more than staleness behind: fetched again, with the updates not yet sent on top",
          "rc %d refreshed %lld: %g vs %g", rc, (long long)sx.refreshed, out[0],
          embps_row(t, 0, 5)[0] + pending);
    float before = embps_row(t, 1, 7)[0];
    rc = rc ? rc : x->ops->flush(x, NULL);
    CHECK(rc == 0 && fabsf(embps_row(t, 1, 7)[0] - (before + pending)) < 1e-6 &&
              clock_of(t, 1, 7) == 2u * S + 1,
          "a flush sends every update held", "rc %d: %g vs %g, clock %u", rc,
          embps_row(t, 1, 7)[0], before + pending, clock_of(t, 1, 7));
    x->ops->free(x);
    y->ops->free(y);
    embps_free(t);
    batch_free(&b);
}

/* A cache of one set (8 rows): a ninth row takes the least recently used
 * slot, whose updates go to the tables first. */
static void test_evict(void)
{
    configure(OPT_SGD, 8, 100);
    struct emb_tables *t = tables(OPT_SGD, 1);
    struct cache_stats st = {0};
    struct emb_client *c = emb_client_cache(emb_client_local(t), 1, &cfg, &lay, 1, &st);
    struct batch b;
    batch_init(&b, 1, 0, T);
    batch_reserve_ids(&b, 4);
    float out[T * DIM], g[T * DIM];
    for (int i = 0; i < T * DIM; i++)
        g[i] = 1.0f;
    float r0 = embps_row(t, 0, 0)[0];
    int rc = 0;
    for (uint64_t r = 0; rc == 0 && r < 4; r++) { /* 8 rows cached, each updated once */
        one(&b, r, r);
        rc = c->ops->lookup(c, &b, out, NULL) || c->ops->push(c, &b, g, NULL);
    }
    CHECK(rc == 0 && embps_row(t, 0, 0)[0] == r0 && st.rows_pushed == 0,
          "updates stay in the cache below the staleness", "rc %d pushed %lld", rc,
          (long long)st.rows_pushed);
    one(&b, 50, 40); /* two new rows: the two least recently used leave */
    rc = c->ops->lookup(c, &b, out, NULL);
    CHECK(rc == 0 && st.rows_pushed == 2 && fabsf(embps_row(t, 0, 0)[0] - (r0 - 0.1f)) < 1e-6 &&
              clock_of(t, 0, 0) == 1 && st.uncached == 0,
          "a row leaving the cache sends its updates first", "rc %d pushed %lld: %g vs %g",
          rc, (long long)st.rows_pushed, embps_row(t, 0, 0)[0], r0 - 0.1f);
    c->ops->free(c);
    embps_free(t);
    batch_free(&b);
}

static void test_refusals(void)
{
    configure(OPT_SGD, 8, 0);
    struct emb_tables *t = tables(OPT_SGD, 0); /* no clocks */
    struct emb_client *l = emb_client_local(t);
    struct ss_err e = {0};
    uint32_t have = ROW_NONE, ck;
    int32_t tab = 0;
    uint64_t row = 1;
    float v[DIM];
    struct row_req r = {DIM, 0, NULL, NULL, NULL, NULL, 1, &tab, &row, &have, 0, &ck, v};
    CHECK(l->ops->rows(l, &r, &e) < 0 && strstr(e.msg, "clocks"),
          "rows of tables that keep no clocks: refused", "%s", e.msg);
    static const struct emb_client_ops no_rows = {"no rows", NULL, NULL, NULL, NULL, NULL};
    struct emb_client plain = {&no_rows, NULL};
    CHECK(emb_client_cache(&plain, 0, &cfg, &lay, 1, NULL) == NULL,
          "a cache needs an inner client that serves rows", "%s", "made one");
    l->ops->free(l);
    embps_free(t);
}

int main(void)
{
    test_exact(OPT_SGD, 1000);
    test_exact(OPT_ROWWISE_ADAGRAD, 1000);
    test_exact(OPT_SGD, 16);
    test_exact(OPT_ROWWISE_ADAGRAD, 16);
    test_bound();
    test_evict();
    test_refusals();
    ss_config_free(&cfg);
    if (lay.rows)
        model_layout_free(&lay);
    CHECK_DONE();
}
