/* Hot embeddings (DESIGN §9): the profiling pass picks the most looked-up
 * rows within the budget (checked against counts taken here), the index
 * finds them and nothing else, the list survives a file and a bad file is
 * refused; the hot client pools and steps exactly as the tables would,
 * sends the tables only the examples with a cold id, and none at all for a
 * batch made only of hot ids. */
#include "check.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_LINES = 600, ROWS0 = 100, ROWS1 = 50 };

struct counted {
    int64_t n;
    int32_t table, row;
};

static int by_count(const void *a, const void *b)
{
    const struct counted *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return x->table != y->table ? x->table - y->table : x->row - y->row;
}

static int by_place(const void *a, const void *b)
{
    const struct counted *x = a, *y = b;
    return x->table != y->table ? x->table - y->table : x->row - y->row;
}

/* label,dense,id of table 0,ids of table 1 (a|b|c); counts[t*ROWS0 + row]. */
static void write_data(const char *path, int64_t *counts)
{
    FILE *f = fopen(path, "w");
    uint64_t r = 7;
    for (int i = 0; i < N_LINES; i++) {
        uint64_t a = ss_splitmix(&r), id0 = a % 4 ? a % 7 : 1000 + a % 300; /* rows 0..6 hot */
        counts[id0 % ROWS0]++;
        fprintf(f, "%d,%.3f,%llu,", (int)(a >> 40 & 1), (double)(a % 100) / 10,
                (unsigned long long)id0);
        int bag = 1 + (int)(ss_splitmix(&r) % 3);
        for (int k = 0; k < bag; k++) {
            uint64_t b = ss_splitmix(&r), id1 = b % 3 ? 50 * (b % 11) + b % 4 : b % 997;
            counts[ROWS0 + id1 % ROWS1]++;
            fprintf(f, "%s%llu", k ? "|" : "", (unsigned long long)id1);
        }
        fprintf(f, "\n");
    }
    fclose(f);
}

static int load(struct ss_config *c, struct model_layout *l, const char *train, const char *mb,
                const char *rows)
{
    char a[600], b[64], d[64];
    snprintf(a, sizeof a, "data.train=%s", train);
    snprintf(b, sizeof b, "hot_embeddings.memory_mb=%s", mb);
    snprintf(d, sizeof d, "model.rows=%s", rows);
    char *sets[] = {a, b, d, "data.format=csv", "data.separator=,", "data.label_col=0",
                    "data.dense_cols=1", "data.cat_cols=2-3", "data.multihot_cols=3",
                    "data.multihot_sep=|", "data.cat_encoding=dec", "model.dim=4",
                    "model.bottom=1-4", "model.top=auto-8-1", "trainer.batch_size=16",
                    "hot_embeddings.min_lookups=3", "hot_embeddings.profile_batches=1000"};
    struct ss_err e = {0};
    if (ss_config_load(c, NULL, sets, sizeof sets / sizeof *sets, &e) < 0 ||
        model_layout_init(l, c, &e) < 0) {
        CHECK(0, "test config loads", "%s", e.msg);
        return -1;
    }
    return 0;
}

static void test_find(const char *dir)
{
    char train[512], path[512];
    snprintf(train, sizeof train, "%s/hot.csv", dir);
    int64_t counts[ROWS0 + ROWS1] = {0}, total = 0;
    write_data(train, counts);
    struct ss_config c;
    struct model_layout l;
    /* 5 rows of 4 floats: 80 bytes */
    if (load(&c, &l, train, "0.0000762939453125", "100,50") < 0)
        return;
    struct ss_err e = {0};
    struct hot_set *h = NULL;
    int rc = hot_find(&c, &l, &h, &e);
    CHECK(rc == 0 && h, "hot rows found by profiling", "rc %d %s", rc, e.msg);
    if (!h)
        return;
    struct counted want[ROWS0 + ROWS1];
    int n = 0;
    int64_t hot_total = 0;
    for (int i = 0; i < ROWS0 + ROWS1; i++) {
        total += counts[i];
        if (counts[i] >= 3)
            want[n++] = (struct counted){counts[i], i >= ROWS0, i >= ROWS0 ? i - ROWS0 : i};
    }
    qsort(want, n, sizeof *want, by_count);
    n = n < 5 ? n : 5;
    for (int i = 0; i < n; i++)
        hot_total += want[i].n;
    qsort(want, n, sizeof *want, by_place);
    int same = h->n == n;
    for (int i = 0; same && i < n; i++)
        same = h->table[i] == want[i].table && h->row[i] == want[i].row;
    CHECK(same, "the 5 most looked-up rows, within the budget, sorted by table and row",
          "%lld rows, first (%d, %lld) want (%d, %d)", (long long)h->n, h->table[0],
          (long long)h->row[0], want[0].table, want[0].row);
    CHECK(fabs(h->profiled_share - (double)hot_total / total) < 1e-12,
          "profiled share of lookups on hot rows", "%g vs %g", h->profiled_share,
          (double)hot_total / total);
    int found = 1, misses = 1;
    for (int64_t i = 0; i < h->n; i++)
        found &= hot_slot(h, h->table[i], (uint64_t)h->row[i]) == i;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < (t ? ROWS1 : ROWS0); r++) {
            int is_hot = 0;
            for (int64_t i = 0; i < h->n; i++)
                is_hot |= h->table[i] == t && h->row[i] == r;
            misses &= is_hot || hot_slot(h, t, (uint64_t)r) == -1;
        }
    CHECK(found && misses, "the index finds each hot row at its slot and no other row", "%d %d",
          found, misses);

    /* a cluster's sync PSs start their center's hot tail from hot_initial */
    struct emb_opts eo = emb_opts_from_config(&c, l.n_tables, l.dim, l.rows);
    struct emb_tables *tab = NULL;
    float *init = ss_aligned((size_t)h->n * l.dim * sizeof(float));
    hot_initial(&c, &l, h, init);
    same = embps_create(&tab, &eo, &e) == 0;
    for (int64_t i = 0; same && i < h->n; i++)
        same = !memcmp(init + i * l.dim, embps_row(tab, h->table[i], (uint64_t)h->row[i]),
                       (size_t)l.dim * sizeof(float));
    CHECK(same, "hot_initial = the tables' initial rows", "%s", e.msg);
    embps_free(tab);
    free(init);

    snprintf(path, sizeof path, "%s/hot-rows.bin", dir);
    struct hot_set *back = NULL;
    rc = hot_save(h, path, &e);
    rc = rc ? rc : hot_load(&back, path, &l, &e);
    same = rc == 0 && back->n == h->n &&
           !memcmp(back->table, h->table, (size_t)h->n * sizeof(int32_t)) &&
           !memcmp(back->row, h->row, (size_t)h->n * sizeof(int64_t));
    CHECK(same, "hot-rows.bin round trip", "rc %d %s", rc, e.msg);
    hot_free(back);
    struct ss_config c2;
    struct model_layout l2;
    if (load(&c2, &l2, train, "1", "100,60") == 0) {
        rc = hot_load(&back, path, &l2, &e);
        CHECK(rc == SS_EFORMAT && strstr(e.msg, "table 1 has 50 rows, model.rows says 60"),
              "hot-rows.bin of other tables refused, naming the table", "rc %d %s", rc, e.msg);
        model_layout_free(&l2);
        ss_config_free(&c2);
    }
    FILE *f = fopen(path, "r+b"); /* the first two pairs' tables swapped: out of order */
    if (f) {
        int32_t t[2] = {1, 0};
        fseek(f, 8 + 12 + 2 * 8 + 8, SEEK_SET);
        fwrite(t, 4, 2, f);
        fclose(f);
    }
    rc = hot_load(&back, path, &l, &e);
    CHECK(h->n < 2 || (rc == SS_EFORMAT && strstr(e.msg, "out of order")),
          "a hot-rows.bin out of order refused", "rc %d %s", rc, e.msg);
    if (truncate(path, 8 + 12 + 2 * 8 + 8 + 13) == 0) { /* n says 5 pairs, 1 is there */
        rc = hot_load(&back, path, &l, &e);
        CHECK(rc == SS_EFORMAT && strstr(e.msg, "more than the file holds"),
              "a truncated hot-rows.bin refused before anything is allocated", "rc %d %s", rc,
              e.msg);
    }
    hot_free(h);
    ss_config_free(&c);
    model_layout_free(&l);
    if (load(&c, &l, train, "0", "100,50") == 0) {
        rc = hot_find(&c, &l, &h, &e);
        CHECK(rc == 0 && !h, "memory_mb = 0: no hot rows, nothing read", "rc %d", rc);
        model_layout_free(&l);
        ss_config_free(&c);
    }
}

/* An emb_client that counts what reaches it. */
struct counting {
    struct emb_client *inner;
    int calls, last_n;
};

static int count_lookup(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e)
{
    struct counting *k = c->impl;
    k->calls++, k->last_n = b->n;
    return k->inner->ops->lookup(k->inner, b, out, e);
}

static int count_push(struct emb_client *c, const struct batch *b, const float *g,
                      struct ss_err *e)
{
    struct counting *k = c->impl;
    k->calls++, k->last_n = b->n;
    return k->inner->ops->push(k->inner, b, g, e);
}

static void count_free(struct emb_client *c)
{
    free(c);
}

static const struct emb_client_ops counting_ops = {"counting", count_lookup, count_push,
                                                   count_free, NULL, NULL};

/* bags[i][t]: up to 3 ids, -1 ends */
static void fill(struct batch *b, int n, const int64_t bags[][2][3])
{
    b->n = n;
    int at = 0;
    b->off[0] = 0;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < 2; t++) {
            for (int k = 0; k < 3 && bags[i][t][k] >= 0; k++)
                b->ids[at++] = (uint64_t)bags[i][t][k];
            b->off[i * 2 + t + 1] = at;
        }
}

static void test_client(void)
{
    int64_t rows[2] = {ROWS0, ROWS1};
    struct emb_opts o = {.n_tables = 2, .dim = 4, .rows = rows, .opt = OPT_ROWWISE_ADAGRAD,
                         .lr = 0.1f, .eps = 1e-8f, .init_acc = 0.01f, .seed = 3};
    struct emb_tables *A = NULL, *B = NULL;
    struct ss_err e = {0};
    if (embps_create(&A, &o, &e) < 0 || embps_create(&B, &o, &e) < 0) {
        CHECK(0, "tables", "%s", e.msg);
        return;
    }
    int32_t ht[4] = {0, 0, 0, 1};
    int64_t hr[4] = {1, 2, 3, 5};
    struct hot_set *h = hot_from_list(2, 4, rows, 4, ht, hr);
    float rep[16], acc[4] = {0.01f, 0.01f, 0.01f, 0.01f};
    struct emb_client *la = emb_client_local(A), *lb = emb_client_local(B);
    struct counting cnt = {la, 0, 0};
    struct emb_client *counted = ss_xcalloc(1, sizeof *counted);
    *counted = (struct emb_client){&counting_ops, &cnt};
    int rc = hot_replica_fill(la, h, rep, &e);
    int same = rc == 0;
    for (int i = 0; same && i < 4; i++)
        same = !memcmp(rep + 4 * i, embps_row(A, ht[i], (uint64_t)hr[i]), 16);
    CHECK(same, "the replica starts as the tables' rows", "rc %d %s", rc, e.msg);
    struct hot_replica r = {h, rep, acc, OPT_ROWWISE_ADAGRAD, 0.1f, 1e-8f};
    struct hot_stats st = {0};
    struct emb_client *hc = emb_client_hot(counted, 1, &r, 2, &st); /* grows past 2 */

    struct batch b;
    batch_init(&b, 8, 0, 2);
    batch_reserve_ids(&b, 64);
    const int64_t bags[4][2][3] = {
        {{1, -1}, {55, -1}},         /* all hot (55 is row 5 of table 1) */
        {{2, 7, 102}, {9, -1}},      /* mixed: 7 and 9 cold; 102 is row 2 */
        {{40, -1}, {11, 12, -1}},    /* all cold */
        {{-1}, {5, 105, -1}},        /* an empty bag, then two hot ids of one row */
    };
    fill(&b, 4, bags);
    float out_h[32], out_p[32], g[32];
    cnt.calls = 0;
    rc = hc->ops->lookup(hc, &b, out_h, &e);
    lb->ops->lookup(lb, &b, out_p, &e);
    CHECK(rc == 0 && max_diff(out_h, out_p, 32) < 1e-6, "hot lookup = the tables' lookup",
          "rc %d diff %g", rc, max_diff(out_h, out_p, 32));
    CHECK(cnt.calls == 1 && cnt.last_n == 2, "only the 2 examples with a cold id reach the tables",
          "%d calls, n %d", cnt.calls, cnt.last_n);
    uint64_t rng = 9;
    for (int i = 0; i < 32; i++)
        g[i] = (float)ss_normal(&rng);
    rc = hc->ops->push(hc, &b, g, &e);
    lb->ops->push(lb, &b, g, &e);
    double hot_d = 0, cold_d = 0, untouched = 0;
    for (int i = 0; i < 4; i++) {
        hot_d = fmax(hot_d, max_diff(rep + 4 * i, embps_row(B, ht[i], (uint64_t)hr[i]), 4));
        untouched = fmax(untouched, fabs(acc[i] - embps_row(B, ht[i], (uint64_t)hr[i])[4]));
    }
    static const int cold[5][2] = {{0, 7}, {1, 9}, {0, 40}, {1, 11}, {1, 12}};
    for (int i = 0; i < 5; i++)
        cold_d = fmax(cold_d, max_diff(embps_row(A, cold[i][0], cold[i][1]),
                                       embps_row(B, cold[i][0], cold[i][1]), 5));
    CHECK(rc == 0 && hot_d < 1e-6 && untouched < 1e-6 && cold_d < 1e-6,
          "push: hot rows stepped in the replica, cold ones in the tables, as the tables would",
          "rc %d hot %g state %g cold %g", rc, hot_d, untouched, cold_d);
    float before[4];
    memcpy(before, embps_row(A, 0, 1), sizeof before);
    CHECK(embps_row(A, 0, 1)[4] == 0.01f, "the tables' copy of a hot row is not stepped",
          "state %g", embps_row(A, 0, 1)[4]);

    const int64_t all_hot[2][2][3] = {{{1, 3, -1}, {55, -1}}, {{-1}, {5, -1}}};
    fill(&b, 2, all_hot);
    cnt.calls = 0;
    rc = hc->ops->lookup(hc, &b, out_h, &e);
    rc = rc ? rc : hc->ops->push(hc, &b, g, &e);
    CHECK(rc == 0 && cnt.calls == 0, "a batch made only of hot ids makes no call to the tables",
          "rc %d calls %d", rc, cnt.calls);
    CHECK(st.batches == 2 && st.ps_skipped == 1 && st.examples == 6 && st.hot_examples == 4 &&
              st.lookups == 11 + 4 && st.hot_lookups == 6 + 4,
          "figures: batches, batches skipped, examples, lookups",
          "%lld %lld %lld %lld %lld %lld", (long long)st.batches, (long long)st.ps_skipped,
          (long long)st.examples, (long long)st.hot_examples, (long long)st.lookups,
          (long long)st.hot_lookups);
    CHECK(!memcmp(before, embps_row(A, 0, 1), sizeof before), "nor is it changed by them", "%g", before[0]);
    hc->ops->free(hc);
    lb->ops->free(lb);
    la->ops->free(la);
    batch_free(&b);
    hot_free(h);
    embps_free(A);
    embps_free(B);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    char dir[256];
    snprintf(dir, sizeof dir, "%s/test_hot.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    test_find(dir);
    test_client();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    CHECK_DONE();
}
