/* The embedding cache (DESIGN §9, after HET): a worker's own copies of the
 * rows it looks up, read and updated locally, kept within a bound of the
 * tables by clocks (embps.h row_req).
 *
 * Slots form sets of WAYS; a row goes to the set its key hashes to and
 * takes the least recently used slot there that its batch does not use
 * (pushing the leaving row's updates first); a row with no such slot is
 * served as without a cache (its examples go on to the tables with those
 * ids only). A lookup makes one rows call: the leaving rows' deltas, and
 * every cached row of the batch with the clock of its copy; the tables
 * answer each clock, and the row itself when the copy is more than
 * staleness updates behind (a refreshed copy keeps the updates not yet
 * pushed on top). A push steps the copies with the embedding optimizer,
 * each step also added to the slot's delta, and sends the delta of every
 * row at least max(1, staleness) updates ahead in one rows call. A flush
 * sends every delta. Sum pooling makes cached and uncached ids of a bag add
 * up. Not thread-safe: one per worker, like its inner client.
 *
 * Layout, for a cache far larger than the CPU's: a set's 8 keys fill one
 * cache line (fetched ahead while the ids before it are placed), a slot's
 * copy and delta sit side by side, and the big arrays take huge pages. */
#include "emb_part.h"

#include <stdlib.h>
#include <string.h>

enum { WAYS = 8, FLUSH_ROWS = 65536 };

struct cache {
    struct emb_client *inner;
    int own_inner;
    int T, dim, stride, opt;
    float lr, eps;
    uint32_t staleness;
    int64_t *table_rows;
    size_t n_sets;
    int64_t *key;               /* [slots] table << 40 | row; -1: empty */
    struct slot {
        uint32_t clock;         /* the tables' updates in the copy */
        uint32_t pend;          /* local updates not sent */
        uint32_t used;          /* the last batch that used it */
        uint32_t got;           /* fetched for this batch */
    } *meta;
    float *data;                /* [slots * 2 * stride]: the copy, then what was done to it */
    uint32_t stamp;
    int64_t *occ;               /* [ids of the batch] each id's slot, -1: uncached */
    size_t occ_cap;
    struct emb_part rest;       /* the examples with an uncached id */
    struct { /* the rows call being built */
        size_t n_add, n_get, add_cap, get_cap;
        int32_t *add_table, *get_table;
        uint64_t *add_row, *get_row;
        uint32_t *add_count, *get_have, *clock;
        float *add_delta, *val;
        int64_t *get_slot;
    } q;
    float *old;                 /* [stride] a copy before its step */
    struct cache_stats *st, own;
};

static inline float *val_of(const struct cache *c, int64_t slot)
{
    return c->data + (size_t)slot * 2 * c->stride;
}

static inline float *delta_of(const struct cache *c, int64_t slot)
{
    return val_of(c, slot) + c->stride;
}

/* (every bit of the key mixed in: a multiply alone left the table id out of
 * the set at power-of-two set counts, so row r of every table shared one) */
static inline size_t set_of(const struct cache *c, int64_t key)
{
    return ss_mix64((uint64_t)key) % c->n_sets * WAYS;
}

static void *grow(void *p, size_t n, size_t size)
{
    void *q = realloc(p, n * size);
    if (!q)
        abort();
    return q;
}

static void add_delta(struct cache *c, int64_t slot)
{
    if (c->q.n_add == c->q.add_cap) {
        size_t n = c->q.add_cap = c->q.add_cap ? 2 * c->q.add_cap : 256;
        c->q.add_table = grow(c->q.add_table, n, sizeof(int32_t));
        c->q.add_row = grow(c->q.add_row, n, sizeof(uint64_t));
        c->q.add_count = grow(c->q.add_count, n, sizeof(uint32_t));
        c->q.add_delta = grow(c->q.add_delta, n * c->stride, sizeof(float));
    }
    size_t i = c->q.n_add++;
    c->q.add_table[i] = (int32_t)(c->key[slot] >> 40);
    c->q.add_row[i] = (uint64_t)(c->key[slot] & ((1ll << 40) - 1));
    c->q.add_count[i] = c->meta[slot].pend;
    memcpy(c->q.add_delta + i * c->stride, delta_of(c, slot), (size_t)c->stride * sizeof(float));
}

static void add_get(struct cache *c, int64_t slot, uint32_t have)
{
    if (c->q.n_get == c->q.get_cap) {
        size_t n = c->q.get_cap = c->q.get_cap ? 2 * c->q.get_cap : 1024;
        c->q.get_table = grow(c->q.get_table, n, sizeof(int32_t));
        c->q.get_row = grow(c->q.get_row, n, sizeof(uint64_t));
        c->q.get_have = grow(c->q.get_have, n, sizeof(uint32_t));
        c->q.clock = grow(c->q.clock, n, sizeof(uint32_t));
        c->q.get_slot = grow(c->q.get_slot, n, sizeof(int64_t));
        c->q.val = grow(c->q.val, n * c->stride, sizeof(float));
    }
    size_t i = c->q.n_get++;
    c->q.get_table[i] = (int32_t)(c->key[slot] >> 40);
    c->q.get_row[i] = (uint64_t)(c->key[slot] & ((1ll << 40) - 1));
    c->q.get_have[i] = have;
    c->q.get_slot[i] = slot;
}

/* The rows call of the deltas and asks gathered; the wire bytes counted. */
static int send_rows(struct cache *c, struct ss_err *e)
{
    struct row_req r = {c->stride, c->q.n_add, c->q.add_table, c->q.add_row, c->q.add_delta,
                        c->q.add_count, c->q.n_get, c->q.get_table, c->q.get_row,
                        c->q.get_have, c->staleness, c->q.clock, c->q.val};
    if (!r.n_add && !r.n_get)
        return 0;
    int rc = c->inner->ops->rows(c->inner, &r, e);
    c->st->rows_pushed += (int64_t)r.n_add;
    /* (shard, row, count) + delta per delta; (shard, row, have) + clock per ask */
    c->st->bytes_sent += (double)r.n_add * (16.0 + 4.0 * c->stride) + (double)r.n_get * 20.0;
    return rc;
}

/* Clears slot after its delta went out. */
static void pushed(struct cache *c, int64_t slot)
{
    c->meta[slot].clock += c->meta[slot].pend;
    c->meta[slot].pend = 0;
    memset(delta_of(c, slot), 0, (size_t)c->stride * sizeof(float));
}

/* The slot of (t, row) for this batch: its own, or a free or least
 * recently used one not used by this batch (its delta queued first); -1. */
static int64_t slot_for(struct cache *c, int t, uint64_t row)
{
    int64_t key = (int64_t)t << 40 | (int64_t)row;
    size_t base = set_of(c, key);
    int64_t victim = -1;
    for (size_t s = base; s < base + WAYS; s++) {
        if (c->key[s] == key) {
            if (c->meta[s].used != c->stamp) {
                c->meta[s].used = c->stamp;
                add_get(c, (int64_t)s, c->meta[s].clock);
            }
            return (int64_t)s;
        }
        if (c->meta[s].used != c->stamp &&
            (victim < 0 || (c->key[victim] >= 0 &&
                            (c->key[s] < 0 || c->meta[s].used - c->meta[victim].used > (1u << 31)))))
            victim = (int64_t)s; /* (the stamps' difference: older, even past a wrap) */
    }
    if (victim < 0)
        return -1;
    if (c->key[victim] >= 0 && c->meta[victim].pend > 0)
        add_delta(c, victim);
    c->key[victim] = key;
    c->meta[victim] = (struct slot){0, 0, c->stamp, 0};
    memset(delta_of(c, victim), 0, (size_t)c->stride * sizeof(float));
    add_get(c, victim, ROW_NONE);
    return victim;
}

/* Plain wire bytes of a batch: its ids and offsets twice (lookup, push),
 * its non-empty bags' pooled vectors and gradients (the Thrift format's
 * sizes). */
static double plain_bytes(const struct batch *b, int dim)
{
    size_t bags = (size_t)b->n * b->n_tables;
    return 2.0 * (8.0 * b->off[bags] + 4.0 * (double)bags) + 8.0 * dim * (double)embps_bags(b);
}

/* The set of every id of example i's bag in table t into the CPU cache:
 * placing an id waits on its set's line, not on arithmetic. */
enum { PREFETCH_AHEAD = 2 };
static inline void prefetch_sets(const struct cache *c, const struct batch *b, int i, int t)
{
    if (i >= b->n)
        return;
    int T = b->n_tables;
    uint64_t rows = (uint64_t)c->table_rows[t];
    for (int32_t k = b->off[i * T + t]; k < b->off[i * T + t + 1]; k++) {
        uint64_t id = b->ids[k], row = id < rows ? id : id % rows;
        __builtin_prefetch(&c->key[set_of(c, (int64_t)t << 40 | (int64_t)row)], 0);
    }
}

SS_HOGWILD static int cache_lookup(struct emb_client *ec, const struct batch *b, float *out,
                                   struct ss_err *e)
{
    struct cache *c = ec->impl;
    int T = b->n_tables, d = c->dim;
    size_t ids = (size_t)b->off[b->n * T];
    if (ids > c->occ_cap) {
        c->occ_cap = ids;
        c->occ = grow(c->occ, ids, sizeof(int64_t));
    }
    if (++c->stamp == 0) /* a wrap: 0 would match the slots never used */
        c->stamp = 1;
    c->q.n_add = c->q.n_get = 0;
    struct batch *r = &c->rest.b; /* the examples with an uncached id, with those only */
    emb_part_reserve(&c->rest, b->n, T, d);
    r->n = 0;
    r->off[0] = 0;
    batch_weigh_like(r, b);
    for (int i = 0; i < b->n; i++) {
        size_t at = (size_t)r->off[r->n * T];
        batch_reserve_ids(r, at + (size_t)(b->off[(i + 1) * T] - b->off[i * T]));
        for (int t = 0; t < T; t++) {
            uint64_t rows = (uint64_t)c->table_rows[t];
            for (int32_t k = b->off[i * T + t]; k < b->off[i * T + t + 1]; k++) {
                uint64_t id = b->ids[k];
                if ((c->occ[k] = slot_for(c, t, id < rows ? id : id % rows)) < 0)
                    batch_put_id(r, at++, b, (size_t)k);
            }
            prefetch_sets(c, b, i + PREFETCH_AHEAD, t);
            r->off[r->n * T + t + 1] = (int32_t)at;
        }
        if (at > (size_t)r->off[r->n * T])
            c->rest.which[r->n++] = i;
    }
    int rc = send_rows(c, e);
    if (rc < 0)
        return rc;
    for (size_t g = 0, next = 0; g < c->q.n_get; g++) {
        int64_t s = c->q.get_slot[g];
        float *v = val_of(c, s);
        c->meta[s].got = (uint32_t)row_sent(c->q.get_have[g], c->q.clock[g], c->staleness);
        if (c->meta[s].got) { /* a new copy, with the updates not yet sent on top */
            const float *a = c->q.val + next++ * c->stride, *dl = delta_of(c, s);
            for (int k = 0; k < c->stride; k++)
                v[k] = a[k] + dl[k];
            c->st->fetched += c->q.get_have[g] == ROW_NONE;
            c->st->refreshed += c->q.get_have[g] != ROW_NONE;
            c->st->bytes_sent += 4.0 * c->stride;
            c->meta[s].clock = c->q.clock[g]; /* a copy kept holds only the updates it had */
        }
    }
    if (r->n > 0)
        c->st->bytes_sent += plain_bytes(r, d);
    if ((rc = emb_part_lookup(c->inner, &c->rest, b->n, out, e)) < 0)
        return rc;
    int64_t hits = 0;
    for (int i = 0; i < b->n; i++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)i * T + t) * d;
            for (int32_t k = b->off[i * T + t]; k < b->off[i * T + t + 1]; k++) {
                int64_t s = c->occ[k];
                if (s < 0)
                    continue;
                hits += !c->meta[s].got;
                const float *v = val_of(c, s);
                if (b->weighted) /* libsvm values: the row times its id's weight */
                    for (int q = 0; q < d; q++)
                        o[q] += b->wts[k] * v[q];
                else
                    for (int q = 0; q < d; q++)
                        o[q] += v[q];
            }
        }
    c->st->lookups += (int64_t)ids;
    c->st->hits += hits;
    c->st->uncached += r->off[r->n * T];
    c->st->bytes_plain += plain_bytes(b, d);
    return 0;
}

SS_HOGWILD static int cache_push(struct emb_client *ec, const struct batch *b, const float *g,
                                 struct ss_err *e)
{
    struct cache *c = ec->impl;
    int T = b->n_tables, d = c->dim, S = c->stride;
    float lr = c->lr * b->lr_scale;
    for (int i = 0; i < b->n; i++)
        for (int t = 0; t < T; t++) {
            const float *gb = g + ((size_t)i * T + t) * d;
            for (int32_t k = b->off[i * T + t]; k < b->off[i * T + t + 1]; k++) {
                int64_t s = c->occ[k];
                if (s < 0)
                    continue;
                float *v = val_of(c, s), *dl = v + S, gw[SS_MAX_DIM];
                const float *gk = gb;
                if (b->weighted) { /* the row steps by its weight's share, as in the tables */
                    for (int q = 0; q < d; q++)
                        gw[q] = b->wts[k] * gb[q];
                    gk = gw;
                }
                memcpy(c->old, v, (size_t)S * sizeof(float));
                optim_row_step(c->opt, v, v + d, gk, d, lr, c->eps);
                for (int q = 0; q < S; q++)
                    dl[q] += v[q] - c->old[q];
                c->meta[s].pend++;
            }
        }
    int rc = emb_part_push(c->inner, &c->rest, b, g, e);
    if (rc < 0)
        return rc;
    /* the rows of this batch far enough ahead: the asks list holds each once */
    uint32_t ahead = c->staleness > 1 ? c->staleness : 1;
    size_t n_get = c->q.n_get;
    c->q.n_add = c->q.n_get = 0;
    for (size_t q = 0; q < n_get; q++)
        if (c->meta[c->q.get_slot[q]].pend >= ahead)
            add_delta(c, c->q.get_slot[q]);
    if ((rc = send_rows(c, e)) < 0)
        return rc;
    for (size_t q = 0; q < n_get; q++)
        if (c->meta[c->q.get_slot[q]].pend >= ahead)
            pushed(c, c->q.get_slot[q]);
    return 0;
}

static int cache_flush(struct emb_client *ec, struct ss_err *e)
{
    struct cache *c = ec->impl;
    size_t slots = c->n_sets * WAYS;
    for (size_t s0 = 0; s0 < slots; s0 += FLUSH_ROWS) {
        size_t end = s0 + FLUSH_ROWS < slots ? s0 + FLUSH_ROWS : slots;
        c->q.n_add = c->q.n_get = 0;
        for (size_t s = s0; s < end; s++)
            if (c->key[s] >= 0 && c->meta[s].pend > 0)
                add_delta(c, (int64_t)s);
        int rc = send_rows(c, e);
        if (rc < 0)
            return rc;
        for (size_t s = s0; s < end; s++)
            if (c->key[s] >= 0 && c->meta[s].pend > 0)
                pushed(c, (int64_t)s);
    }
    int rc = c->inner->ops->flush ? c->inner->ops->flush(c->inner, e) : 0;
    c->q.n_add = c->q.n_get = 0;
    return rc;
}

static void cache_free(struct emb_client *ec)
{
    struct cache *c = ec->impl;
    if (c->own_inner)
        c->inner->ops->free(c->inner);
    emb_part_free(&c->rest);
    void *bufs[] = {c->table_rows, c->key, c->meta, c->data, c->occ, c->q.add_table, c->q.get_table, c->q.add_row,
                    c->q.get_row, c->q.add_count, c->q.get_have, c->q.clock, c->q.add_delta,
                    c->q.val, c->q.get_slot, c->old};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(c);
    free(ec);
}

void cache_stats_add(struct cache_stats *to, const struct cache_stats *from)
{
    to->lookups += from->lookups;
    to->hits += from->hits;
    to->fetched += from->fetched;
    to->refreshed += from->refreshed;
    to->uncached += from->uncached;
    to->rows_pushed += from->rows_pushed;
    to->bytes_plain += from->bytes_plain;
    to->bytes_sent += from->bytes_sent;
}

static const struct emb_client_ops cache_ops = {"embedding cache", cache_lookup, cache_push,
                                                cache_free, NULL, cache_flush};

int64_t emb_cache_rows(const struct ss_config *c, const struct model_layout *l)
{
    int64_t all = 0;
    for (int t = 0; t < l->n_tables; t++)
        all += l->rows[t];
    /* twice: hashed into sets of WAYS, as many slots as rows would leave
     * some rows no room (a set's share is Poisson) */
    return c->embedding_cache.rows < 2 * all ? c->embedding_cache.rows : 2 * all;
}

double emb_cache_bytes(const struct ss_config *c, const struct model_layout *l)
{
    int stride = l->dim + (c->optim.emb == OPT_ROWWISE_ADAGRAD);
    double slots = (double)((emb_cache_rows(c, l) + WAYS - 1) / WAYS * WAYS);
    return slots * (2.0 * stride * sizeof(float) + sizeof(int64_t) + sizeof(struct slot));
}

struct emb_client *emb_client_cache(struct emb_client *inner, int own_inner,
                                    const struct ss_config *cf, const struct model_layout *l,
                                    int cap, struct cache_stats *st)
{
    if (!inner->ops->rows)
        return NULL;
    struct emb_opts eo = emb_opts_from_config(cf, l->n_tables, l->dim, l->rows);
    struct cache *c = ss_xcalloc(1, sizeof *c);
    c->inner = inner;
    c->own_inner = own_inner;
    c->T = l->n_tables;
    c->dim = l->dim;
    c->stride = l->dim + (eo.opt == OPT_ROWWISE_ADAGRAD);
    c->opt = eo.opt;
    c->lr = eo.lr;
    c->eps = eo.eps;
    c->staleness = (uint32_t)cf->embedding_cache.staleness;
    c->table_rows = ss_xmalloc((size_t)c->T * sizeof(int64_t));
    memcpy(c->table_rows, l->rows, (size_t)c->T * sizeof(int64_t));
    c->n_sets = ((size_t)emb_cache_rows(cf, l) + WAYS - 1) / WAYS;
    size_t slots = c->n_sets * WAYS;
    size_t data = slots * 2 * c->stride * sizeof(float);
    c->key = ss_alloc_big(slots * sizeof(int64_t)); /* 2 MiB aligned, or malloc's 16: */
    c->meta = ss_alloc_big(slots * sizeof(struct slot)); /* ...a set's keys fill a line */
    c->data = ss_alloc_big(data);
    if (!c->key || !c->meta || !c->data) {
        fprintf(stderr, "shadowsync: out of memory for an embedding cache of %zu rows\n", slots);
        abort();
    }
    memset(c->key, 0xff, slots * sizeof(int64_t)); /* -1: empty */
    memset(c->meta, 0, slots * sizeof(struct slot));
    memset(c->data, 0, data);
    c->old = ss_xmalloc((size_t)c->stride * sizeof(float));
    c->st = st ? st : &c->own;
    emb_part_reserve(&c->rest, cap > 0 ? cap : 1, c->T, c->dim);
    struct emb_client *ec = ss_xcalloc(1, sizeof *ec);
    *ec = (struct emb_client){&cache_ops, c};
    return ec;
}
