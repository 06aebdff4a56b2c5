/* Embedding tables: storage, pooled lookup, push with the row optimizer,
 * save/load. Row r of table t sits at data[t] + r*stride, stride = dim plus
 * one float of row-wise Adagrad state when that optimizer is on. An id maps
 * to row id mod rows (DESIGN §1). Lock-free by design (Hogwild, DESIGN §3):
 * concurrent pushes to one row may lose an update, never corrupt memory. */
#include "shadowsync/embps.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EMB_MAGIC "SSEMB\0\0\0"
#define EMB_VERSION 1

struct emb_tables {
    struct emb_opts o;
    int stride;
    int64_t *rows;
    float **data;
};

int embps_create(struct emb_tables **out, const struct emb_opts *o, struct ss_err *e)
{
    if (o->n_tables <= 0 || o->dim <= 0)
        return ss_fail(e, SS_EINVAL, "embedding tables: %d tables of dim %d", o->n_tables, o->dim);
    struct emb_tables *t = ss_xcalloc(1, sizeof *t);
    t->o = *o;
    t->stride = o->dim + (o->opt == OPT_ROWWISE_ADAGRAD);
    t->rows = ss_xmalloc(o->n_tables * sizeof(int64_t));
    memcpy(t->rows, o->rows, o->n_tables * sizeof(int64_t));
    t->o.rows = t->rows;
    t->o.global_ids = NULL; /* borrowed: used only here */
    t->data = ss_xcalloc(o->n_tables, sizeof(float *));
    for (int k = 0; k < o->n_tables; k++) {
        uint64_t gid = o->global_ids ? (uint64_t)o->global_ids[k] : (uint64_t)k;
        uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 101 + gid * 0xD1B54A32D192ED03ull;
        size_t n = (size_t)t->rows[k] * t->stride;
        t->data[k] = malloc(n * sizeof(float));
        if (!t->data[k]) {
            embps_free(t);
            return ss_fail(e, SS_ENOMEM, "embedding table %d: cannot allocate %zu MB", k,
                           n * sizeof(float) >> 20);
        }
        float bound = (float)sqrt(1.0 / (double)t->rows[k]);
        for (int64_t r = 0; r < t->rows[k]; r++) {
            float *row = t->data[k] + (size_t)r * t->stride;
            for (int d = 0; d < o->dim; d++)
                row[d] = (float)(2.0 * ss_uniform(&rng) - 1.0) * bound;
            if (t->stride > o->dim)
                row[o->dim] = o->init_acc;
        }
    }
    *out = t;
    return 0;
}

void embps_free(struct emb_tables *t)
{
    if (!t)
        return;
    for (int k = 0; t->data && k < t->o.n_tables; k++)
        free(t->data[k]);
    free(t->data);
    free(t->rows);
    free(t);
}

int embps_dim(const struct emb_tables *t)
{
    return t->o.dim;
}

size_t embps_bytes(const struct emb_tables *t)
{
    size_t b = 0;
    for (int k = 0; k < t->o.n_tables; k++)
        b += (size_t)t->rows[k] * t->stride * sizeof(float);
    return b;
}

static inline float *row_of(struct emb_tables *t, int k, uint64_t id)
{
    return t->data[k] + (size_t)(id % (uint64_t)t->rows[k]) * t->stride;
}

void embps_pool(struct emb_tables *t, const struct batch *b, float *out)
{
    int T = t->o.n_tables, d = t->o.dim;
    for (int i = 0; i < b->n; i++) {
        for (int k = 0; k < T; k++) {
            float *o = out + ((size_t)i * T + k) * d;
            int32_t lo = b->off[i * T + k], hi = b->off[i * T + k + 1];
            if (lo == hi) {
                memset(o, 0, d * sizeof(float));
                continue;
            }
            memcpy(o, row_of(t, k, b->ids[lo]), d * sizeof(float));
            for (int32_t j = lo + 1; j < hi; j++) {
                const float *r = row_of(t, k, b->ids[j]);
                for (int c = 0; c < d; c++)
                    o[c] += r[c];
            }
        }
    }
}

void embps_push(struct emb_tables *t, const struct batch *b, const float *g)
{
    int T = t->o.n_tables, d = t->o.dim;
    for (int i = 0; i < b->n; i++)
        for (int k = 0; k < T; k++) {
            const float *gk = g + ((size_t)i * T + k) * d;
            for (int32_t j = b->off[i * T + k]; j < b->off[i * T + k + 1]; j++) {
                float *r = row_of(t, k, b->ids[j]);
                optim_row_step(t->o.opt, r, r + d, gk, d, t->o.lr, t->o.eps);
            }
        }
}

struct emb_header {
    char magic[8];
    uint32_t version, n_tables, dim, stride;
};

int embps_save(const struct emb_tables *t, const char *path, struct ss_err *e)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", path, strerror(errno));
    struct emb_header h = {EMB_MAGIC, EMB_VERSION, t->o.n_tables, t->o.dim, t->stride};
    int ok = fwrite(&h, sizeof h, 1, f) == 1 &&
             fwrite(t->rows, sizeof(int64_t), t->o.n_tables, f) == (size_t)t->o.n_tables;
    for (int k = 0; ok && k < t->o.n_tables; k++) {
        size_t n = (size_t)t->rows[k] * t->stride;
        ok = fwrite(t->data[k], sizeof(float), n, f) == n;
    }
    if (fclose(f) != 0 || !ok)
        return ss_fail(e, SS_EIO, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

int embps_load(struct emb_tables *t, const char *path, struct ss_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct emb_header h;
    int rc = 0;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, EMB_MAGIC, 8) != 0)
        rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync embedding file", path);
    else if (h.version != EMB_VERSION || h.n_tables != (uint32_t)t->o.n_tables ||
             h.dim != (uint32_t)t->o.dim || h.stride != (uint32_t)t->stride)
        rc = ss_fail(e, SS_EFORMAT,
                     "%s: tables of %u x dim %u (stride %u) do not match the config's %d x dim %d "
                     "(stride %d)", path, h.n_tables, h.dim, h.stride, t->o.n_tables, t->o.dim,
                     t->stride);
    for (int k = 0; rc == 0 && k < t->o.n_tables; k++) {
        int64_t rows;
        if (fread(&rows, sizeof rows, 1, f) != 1 || rows != t->rows[k])
            rc = ss_fail(e, SS_EFORMAT, "%s: table %d rows do not match the config's %lld", path,
                         k, (long long)t->rows[k]);
    }
    for (int k = 0; rc == 0 && k < t->o.n_tables; k++) {
        size_t n = (size_t)t->rows[k] * t->stride;
        if (fread(t->data[k], sizeof(float), n, f) != n)
            rc = ss_fail(e, SS_EFORMAT, "%s: truncated at table %d", path, k);
    }
    fclose(f);
    return rc;
}
