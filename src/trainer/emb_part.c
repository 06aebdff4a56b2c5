/* A part of a batch through an inner emb_client (emb_part.h). */
#include "emb_part.h"

#include <stdlib.h>
#include <string.h>

void emb_part_reserve(struct emb_part *p, int n, int T, int dim)
{
    if (n <= p->cap)
        return;
    p->cap = n, p->T = T, p->dim = dim;
    batch_free(&p->b);
    batch_init(&p->b, n, 0, T);
    free(p->which);
    free(p->tmp);
    p->which = ss_xmalloc((size_t)n * sizeof(int32_t));
    p->tmp = ss_aligned((size_t)n * T * dim * sizeof(float));
}

int emb_part_lookup(struct emb_client *inner, struct emb_part *p, int n, float *out,
                    struct ss_err *e)
{
    size_t ex = (size_t)p->T * p->dim; /* floats of one example's bags */
    if (p->b.n == n) /* every example: no copy */
        return inner->ops->lookup(inner, &p->b, out, e);
    memset(out, 0, (size_t)n * ex * sizeof(float));
    int rc = p->b.n > 0 ? inner->ops->lookup(inner, &p->b, p->tmp, e) : 0;
    for (int k = 0; rc == 0 && k < p->b.n; k++)
        memcpy(out + (size_t)p->which[k] * ex, p->tmp + (size_t)k * ex, ex * sizeof(float));
    return rc;
}

int emb_part_push(struct emb_client *inner, struct emb_part *p, const struct batch *b,
                  const float *g, struct ss_err *e)
{
    size_t ex = (size_t)p->T * p->dim;
    int n = b->n;
    p->b.lr_scale = b->lr_scale;
    if (p->b.n == n)
        return inner->ops->push(inner, &p->b, g, e);
    if (p->b.n == 0)
        return 0;
    for (int k = 0; k < p->b.n; k++)
        memcpy(p->tmp + (size_t)k * ex, g + (size_t)p->which[k] * ex, ex * sizeof(float));
    return inner->ops->push(inner, &p->b, p->tmp, e);
}

void emb_part_free(struct emb_part *p)
{
    batch_free(&p->b);
    free(p->which);
    free(p->tmp);
    memset(p, 0, sizeof *p);
}

int shard_set_of(const struct placement *pl, int ps, int32_t *ids, struct shard_set *s)
{
    int k = placement_ps_shards(pl, ps, ids);
    s->k = k;
    s->tables = ss_xmalloc(((size_t)k + 1) * sizeof(int32_t));
    s->lo = ss_xmalloc(((size_t)k + 1) * sizeof(int64_t));
    s->hi = ss_xmalloc(((size_t)k + 1) * sizeof(int64_t));
    for (int j = 0; j < k; j++) {
        const struct shard *sh = &pl->shards[ids[j]];
        s->tables[j] = sh->table;
        s->lo[j] = sh->lo;
        s->hi[j] = sh->hi;
    }
    return k;
}

void shard_set_free(struct shard_set *s)
{
    free(s->tables);
    free(s->lo);
    free(s->hi);
    memset(s, 0, sizeof *s);
}

size_t shard_ids_max(const struct shard_set *s, const struct batch *b)
{
    int T = b->n_tables;
    size_t n = 0;
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < s->k; j++) {
            int t = s->tables[j];
            n += (size_t)(b->off[i * T + t + 1] - b->off[i * T + t]);
        }
    return n;
}

size_t shard_gather(const struct shard_set *s, const int64_t *table_rows, const struct batch *b,
                    int32_t *off, uint64_t *ids, float *wts, size_t *m)
{
    int T = b->n_tables, k = s->k;
    size_t at = 0, bags = 0;
    off[0] = 0;
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < k; j++) {
            int t = s->tables[j];
            uint64_t rows = (uint64_t)table_rows[t], lo = (uint64_t)s->lo[j];
            uint64_t hi = (uint64_t)s->hi[j];
            for (int32_t q = b->off[i * T + t]; q < b->off[i * T + t + 1]; q++) {
                uint64_t r = b->ids[q] % rows;
                if (r < lo || r >= hi)
                    continue;
                if (wts)
                    wts[at] = batch_wt(b, (size_t)q);
                ids[at++] = r;
            }
            off[i * k + j + 1] = (int32_t)at;
            bags += off[i * k + j + 1] > off[i * k + j];
        }
    *m = bags;
    return at;
}

void shard_add_answer(const struct shard_set *s, int n, const int32_t *off, const float *a, int T,
                      int dim, float *out)
{
    int k = s->k;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++) {
            if (off[i * k + j + 1] == off[i * k + j])
                continue;
            float *o = out + ((size_t)i * T + s->tables[j]) * dim;
            for (int q = 0; q < dim; q++)
                o[q] += a[q];
            a += dim;
        }
}

void shard_pick(const struct shard_set *s, int n, const int32_t *off, const float *g, int T,
                int dim, float *dst)
{
    int k = s->k;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++)
            if (off[i * k + j + 1] > off[i * k + j]) {
                memcpy(dst, g + ((size_t)i * T + s->tables[j]) * dim, (size_t)dim * sizeof(float));
                dst += dim;
            }
}
