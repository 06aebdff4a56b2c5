/* The hot-row emb_client (DESIGN §9, after FAE): wraps a worker's client to
 * the tables. A lookup splits the batch: the ids of hot rows are pooled
 * from the trainer's replica (a part of its dense buffer, which the shadow
 * thread syncs like the dense parameters); the examples with any cold id go
 * to the tables with their cold ids only, and an example made only of hot
 * ids never reaches them (a batch made only of hot ids makes no call). Sum
 * pooling makes the two halves add up to the bag. The push sends the cold
 * examples' gradients on and steps each hot row with the embedding
 * optimizer, in the replica, without locks (Hogwild, like the tables). */
#include "emb_part.h"

#include <stdlib.h>
#include <string.h>

struct hot_client {
    struct emb_client *inner;
    int own_inner;
    struct hot_replica r;
    struct hot_stats *st;
    struct emb_part cold;       /* the examples with a cold id, with their cold ids only */
    int64_t *pairs;             /* [2 * n_pairs]: a bag (i*T + t) and a hot slot in it */
    float *pair_wt;             /* [n_pairs]: its id's weight (weighted batches only) */
    size_t n_pairs, pair_cap;
    int64_t emptied;            /* bags all hot: neither answered nor pushed by the tables */
};

static void add_pair(struct hot_client *h, int64_t bag, int64_t slot, float wt)
{
    if (h->n_pairs == h->pair_cap) {
        h->pair_cap = h->pair_cap ? 2 * h->pair_cap : 4096;
        h->pairs = ss_xrealloc(h->pairs, h->pair_cap * 2 * sizeof(int64_t));
        h->pair_wt = ss_xrealloc(h->pair_wt, h->pair_cap * sizeof(float));
    }
    h->pairs[2 * h->n_pairs] = bag;
    h->pairs[2 * h->n_pairs + 1] = slot;
    h->pair_wt[h->n_pairs] = wt;
    h->n_pairs++;
}

/* Fills h->cold and h->pairs from b. */
static void split(struct hot_client *h, const struct batch *b)
{
    const struct hot_set *s = h->r.set;
    int T = b->n_tables;
    struct batch *c = &h->cold.b;
    emb_part_reserve(&h->cold, b->n, T, s->dim);
    c->n = 0;
    c->off[0] = 0;
    batch_weigh_like(c, b);
    h->n_pairs = 0;
    h->emptied = 0;
    for (int i = 0; i < b->n; i++) {
        size_t at = (size_t)c->off[c->n * T];
        batch_reserve_ids(c, at + (size_t)(b->off[(i + 1) * T] - b->off[i * T]));
        for (int t = 0; t < T; t++) {
            uint64_t rows = (uint64_t)s->table_rows[t];
            for (int32_t q = b->off[i * T + t]; q < b->off[i * T + t + 1]; q++) {
                uint64_t id = b->ids[q], row = id < rows ? id : id % rows;
                int64_t slot = hot_slot(s, t, row);
                if (slot >= 0)
                    add_pair(h, (int64_t)i * T + t, slot, batch_wt(b, (size_t)q));
                else
                    batch_put_id(c, at++, b, (size_t)q);
            }
            c->off[c->n * T + t + 1] = (int32_t)at;
            h->emptied += b->off[i * T + t + 1] > b->off[i * T + t] &&
                          (int32_t)at == c->off[c->n * T + t];
        }
        if (at > (size_t)c->off[c->n * T]) /* a cold id: the example goes to the tables */
            h->cold.which[c->n++] = i;
    }
}

SS_HOGWILD static int hot_lookup(struct emb_client *ec, const struct batch *b, float *out,
                                 struct ss_err *e)
{
    struct hot_client *h = ec->impl;
    int T = b->n_tables, d = h->r.set->dim;
    split(h, b);
    const struct batch *c = &h->cold.b;
    int rc = emb_part_lookup(h->inner, &h->cold, b->n, out, e);
    if (rc < 0)
        return rc;
    for (size_t p = 0; p < h->n_pairs; p++) {
        float *o = out + (size_t)h->pairs[2 * p] * d, w = h->pair_wt[p];
        const float *r = h->r.rows + (size_t)h->pairs[2 * p + 1] * d;
        if (b->weighted)
            for (int k = 0; k < d; k++)
                o[k] += w * r[k];
        else
            for (int k = 0; k < d; k++)
                o[k] += r[k];
    }
    struct hot_stats *st = h->st;
    if (!st)
        return 0;
    int64_t ids = b->off[b->n * T];
    st->batches++;
    st->ps_skipped += c->n == 0;
    st->examples += b->n;
    st->hot_examples += b->n - c->n;
    st->lookups += ids;
    st->hot_lookups += (int64_t)h->n_pairs;
    /* the wire's bytes not sent: each hot id twice (lookup, push), an
     * all-hot bag's pooled vector and gradient, an all-hot example's offsets */
    st->bytes_saved += 16.0 * (double)h->n_pairs + 8.0 * d * (double)h->emptied +
                       8.0 * T * (double)(b->n - c->n);
    return 0;
}

SS_HOGWILD static int hot_push(struct emb_client *ec, const struct batch *b, const float *g,
                               struct ss_err *e)
{
    struct hot_client *h = ec->impl;
    int d = h->r.set->dim;
    int rc = emb_part_push(h->inner, &h->cold, b, g, e);
    if (rc < 0)
        return rc;
    float gw[SS_MAX_DIM];
    for (size_t p = 0; p < h->n_pairs; p++) {
        int64_t slot = h->pairs[2 * p + 1];
        const float *gp = g + (size_t)h->pairs[2 * p] * d;
        if (b->weighted) { /* the row steps by its weight's share, as in the tables */
            for (int k = 0; k < d; k++)
                gw[k] = h->pair_wt[p] * gp[k];
            gp = gw;
        }
        optim_row_step(h->r.opt, h->r.rows + (size_t)slot * d, h->r.acc + slot, gp, d,
                       h->r.lr * b->lr_scale, h->r.eps);
    }
    return 0;
}

static void hot_close(struct emb_client *ec)
{
    struct hot_client *h = ec->impl;
    if (h->own_inner)
        h->inner->ops->free(h->inner);
    emb_part_free(&h->cold);
    free(h->pairs);
    free(h->pair_wt);
    free(h);
    free(ec);
}

static int hot_flush(struct emb_client *ec, struct ss_err *e)
{
    struct hot_client *h = ec->impl;
    return h->inner->ops->flush ? h->inner->ops->flush(h->inner, e) : 0;
}

void hot_stats_add(struct hot_stats *to, const struct hot_stats *from)
{
    to->batches += from->batches;
    to->ps_skipped += from->ps_skipped;
    to->examples += from->examples;
    to->hot_examples += from->hot_examples;
    to->lookups += from->lookups;
    to->hot_lookups += from->hot_lookups;
    to->bytes_saved += from->bytes_saved;
}

static const struct emb_client_ops hot_ops = {"hot rows", hot_lookup, hot_push, hot_close, NULL,
                                                hot_flush};

struct emb_client *emb_client_hot(struct emb_client *inner, int own_inner,
                                  const struct hot_replica *r, int cap, struct hot_stats *st)
{
    struct hot_client *h = ss_xcalloc(1, sizeof *h);
    h->inner = inner;
    h->own_inner = own_inner;
    h->r = *r;
    h->st = st;
    emb_part_reserve(&h->cold, cap > 0 ? cap : 1, r->set->n_tables, r->set->dim);
    struct emb_client *ec = ss_xcalloc(1, sizeof *ec);
    *ec = (struct emb_client){&hot_ops, h};
    return ec;
}

int hot_replica_fill(struct emb_client *emb, const struct hot_set *s, float *rows,
                     struct ss_err *e)
{
    int T = s->n_tables, d = s->dim, cap = 4096;
    int64_t *first = ss_xcalloc((size_t)T + 1, sizeof(int64_t)); /* table t's slots start */
    for (int64_t i = 0; i < s->n; i++)
        first[s->table[i] + 1]++;
    int64_t most = 0;
    for (int t = 0; t < T; t++) {
        most = first[t + 1] > most ? first[t + 1] : most;
        first[t + 1] += first[t];
    }
    struct batch b;
    batch_init(&b, cap, 0, T);
    batch_reserve_ids(&b, (size_t)cap * T);
    float *out = ss_aligned((size_t)cap * T * d * sizeof(float));
    int rc = 0;
    /* example i of a chunk asks for the (k+i)-th hot row of every table */
    for (int64_t k = 0; rc == 0 && k < most; k += cap) {
        b.n = most - k < cap ? (int)(most - k) : cap;
        int32_t at = 0;
        b.off[0] = 0;
        for (int i = 0; i < b.n; i++)
            for (int t = 0; t < T; t++) {
                int64_t slot = first[t] + k + i;
                if (slot < first[t + 1])
                    b.ids[at++] = (uint64_t)s->row[slot];
                b.off[i * T + t + 1] = at;
            }
        if ((rc = emb->ops->lookup(emb, &b, out, e)) < 0)
            break;
        for (int i = 0; i < b.n; i++)
            for (int t = 0; t < T; t++) {
                int64_t slot = first[t] + k + i;
                if (slot < first[t + 1])
                    memcpy(rows + (size_t)slot * d, out + ((size_t)i * T + t) * d,
                           (size_t)d * sizeof(float));
            }
    }
    free(out);
    batch_free(&b);
    free(first);
    return rc;
}
