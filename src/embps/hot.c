/* Hot embeddings (DESIGN §9, after FAE): the profiling pass counts every
 * row looked up in hot_embeddings.profile_batches batches of data.train;
 * the rows seen at least min_lookups times, the most looked up first, are
 * hot while their dim floats fit in memory_mb. The set is a sorted list of
 * (table, row) plus an open-addressing index, which a worker probes once
 * per id looked up; every trainer holds the same set. */
#include "shadowsync/embps.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HOT_MAGIC "SSHOT\0\0\0"
#define HOT_VERSION 1

struct cand {
    int64_t count, row;
    int32_t table;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The most looked up first; ties by table, row, so every run picks alike. */
static int cmp_hot(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

static int cmp_place(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

struct hot_set *hot_from_list(int n_tables, int dim, const int64_t *table_rows, int64_t n,
                              const int32_t *table, const int64_t *row)
{
    struct hot_set *h = ss_xcalloc(1, sizeof *h);
    h->n_tables = n_tables;
    h->dim = dim;
    h->n = n;
    h->table = ss_xmalloc(((size_t)n + 1) * sizeof(int32_t));
    h->row = ss_xmalloc(((size_t)n + 1) * sizeof(int64_t));
    memcpy(h->table, table, (size_t)n * sizeof(int32_t));
    memcpy(h->row, row, (size_t)n * sizeof(int64_t));
    h->table_rows = ss_xmalloc((size_t)n_tables * sizeof(int64_t));
    memcpy(h->table_rows, table_rows, (size_t)n_tables * sizeof(int64_t));
    size_t cap = 16;
    while (cap < 2 * (size_t)n) /* at most half full */
        cap *= 2;
    h->mask = cap - 1;
    h->index = ss_aligned(cap * sizeof *h->index);
    memset(h->index, 0xff, cap * sizeof *h->index);
    for (int64_t s = 0; s < n; s++) {
        int64_t key = (int64_t)table[s] << 40 | row[s];
        size_t i = ss_mix64((uint64_t)key) & h->mask; /* as hot_slot */
        while (h->index[i].key >= 0 && h->index[i].key != key)
            i = (i + 1) & h->mask;
        h->index[i] = (struct hot_entry){key, s};
    }
    return h;
}

void hot_free(struct hot_set *h)
{
    if (!h)
        return;
    free(h->table);
    free(h->row);
    free(h->table_rows);
    free(h->index);
    free(h);
}

int hot_find(const struct ss_config *c, const struct model_layout *l, struct hot_set **out,
             struct ss_err *e)
{
    *out = NULL;
    int64_t budget = (int64_t)(c->hot_embeddings.memory_mb * 1048576.0 / (4.0 * l->dim));
    if (budget <= 0)
        return 0;
    if (!c->data.train || !c->data.train[0])
        return ss_fail(e, SS_EINVAL, "hot_embeddings.memory_mb > 0 profiles data.train, which "
                                     "is not set");
    int T = l->n_tables;
    struct batch *per = ss_xcalloc(T, sizeof *per);
    int64_t examples, lookups = 0, n = 0, cap = 1024;
    int rc = profile_rows(c, l, c->hot_embeddings.profile_batches, per, &examples, e);
    struct cand *cand = ss_xmalloc((size_t)cap * sizeof *cand);
    for (int t = 0; rc == 0 && t < T; t++) { /* each table's rows counted by sorting */
        uint64_t *ids = per[t].ids;
        int64_t m = per[t].off[per[t].n];
        lookups += m;
        qsort(ids, (size_t)m, sizeof *ids, cmp_u64);
        for (int64_t q = 0; q < m;) {
            int64_t r = q;
            while (r < m && ids[r] == ids[q])
                r++;
            if (r - q >= c->hot_embeddings.min_lookups) {
                if (n == cap && !(cand = realloc(cand, (size_t)(cap *= 2) * sizeof *cand)))
                    abort();
                cand[n++] = (struct cand){r - q, (int64_t)ids[q], t};
            }
            q = r;
        }
    }
    for (int t = 0; t < T; t++)
        batch_free(&per[t]);
    free(per);
    if (rc < 0 || n == 0) {
        free(cand);
        return rc;
    }
    qsort(cand, (size_t)n, sizeof *cand, cmp_hot);
    if (n > budget)
        n = budget;
    int64_t hot_lookups = 0;
    for (int64_t i = 0; i < n; i++)
        hot_lookups += cand[i].count;
    qsort(cand, (size_t)n, sizeof *cand, cmp_place);
    int32_t *table = ss_xmalloc((size_t)n * sizeof(int32_t));
    int64_t *row = ss_xmalloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        table[i] = cand[i].table, row[i] = cand[i].row;
    free(cand);
    *out = hot_from_list(T, l->dim, l->rows, n, table, row);
    (*out)->profiled_share = lookups > 0 ? (double)hot_lookups / (double)lookups : 0;
    free(table);
    free(row);
    return 0;
}

void hot_initial(const struct ss_config *c, const struct model_layout *l, const struct hot_set *h,
                 float *out)
{
    struct emb_opts o = emb_opts_from_config(c, l->n_tables, l->dim, l->rows);
    for (int64_t i = 0; i < h->n; i++)
        embps_initial_row(&o, h->table[i], h->row[i], l->rows[h->table[i]],
                          out + (size_t)i * l->dim);
}

int hot_save(const struct hot_set *h, const char *path, struct ss_err *e)
{
    uint32_t head[3] = {HOT_VERSION, (uint32_t)h->n_tables, (uint32_t)h->dim};
    uint64_t n = (uint64_t)h->n;
    struct ss_span parts[6] = {{HOT_MAGIC, 8},
                               {head, sizeof head},
                               {h->table_rows, 8 * (size_t)h->n_tables},
                               {&n, 8},
                               {h->table, 4 * n},
                               {h->row, 8 * n}};
    return ss_write_file(path, parts, 6, 0, NULL, e);
}

int hot_load(struct hot_set **out, const char *path, const struct model_layout *l,
             struct ss_err *e)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot open: %s", path, strerror(errno));
    char magic[8];
    uint32_t head[3];
    uint64_t n = 0;
    int T = l->n_tables, rc = 0;
    int64_t *rows = ss_xcalloc(T, sizeof(int64_t)), *row = NULL;
    int32_t *table = NULL;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, HOT_MAGIC, 8) != 0 ||
        fread(head, 4, 3, f) != 3)
        rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync hot-rows file", path);
    else if (head[0] != HOT_VERSION)
        rc = ss_fail(e, SS_EFORMAT, "%s: unsupported version %u", path, head[0]);
    else if ((int)head[1] != T || (int)head[2] != l->dim)
        rc = ss_fail(e, SS_EFORMAT, "%s: hot rows of %u tables of dim %u, the model has %d of "
                     "dim %d", path, head[1], head[2], T, l->dim);
    else if (fread(rows, 8, T, f) != (size_t)T || fread(&n, 8, 1, f) != 1)
        rc = ss_fail(e, SS_EFORMAT, "%s: truncated", path);
    long at = rc == 0 ? ftell(f) : 0, end = 0; /* n pairs of 12 bytes must follow */
    if (rc == 0 && (fseek(f, 0, SEEK_END) != 0 || (end = ftell(f)) < at ||
                    n > (uint64_t)(end - at) / 12 || n * (uint64_t)l->dim > (1ull << 30) ||
                    fseek(f, at, SEEK_SET) != 0))
        rc = ss_fail(e, SS_EFORMAT, "%s: %llu hot rows: more than the file holds, or than a "
                     "trainer's buffer takes", path, (unsigned long long)n);
    for (int t = 0; rc == 0 && t < T; t++)
        if (rows[t] != l->rows[t])
            rc = ss_fail(e, SS_EFORMAT, "%s: table %d has %lld rows, model.rows says %lld", path,
                         t, (long long)rows[t], (long long)l->rows[t]);
    if (rc == 0) {
        table = ss_xmalloc((n + 1) * sizeof(int32_t));
        row = ss_xmalloc((n + 1) * sizeof(int64_t));
        if (fread(table, 4, n, f) != n || fread(row, 8, n, f) != n)
            rc = ss_fail(e, SS_EFORMAT, "%s: truncated", path);
    }
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        if (table[i] < 0 || table[i] >= T || row[i] < 0 || row[i] >= l->rows[table[i]] ||
            (i > 0 && cmp_place(&(struct cand){0, row[i - 1], table[i - 1]},
                                &(struct cand){0, row[i], table[i]}) >= 0))
            rc = ss_fail(e, SS_EFORMAT, "%s: hot row %llu (table %d, row %lld) is out of range "
                         "or out of order", path, (unsigned long long)i, table[i],
                         (long long)row[i]);
    fclose(f);
    if (rc == 0)
        *out = hot_from_list(T, l->dim, rows, (int64_t)n, table, row);
    free(rows);
    free(table);
    free(row);
    return rc;
}
