/* DES's emb_client (DESIGN §9, after Distributed Equivalent Substitution):
 * the tables' shards live on the trainers, and a worker's lookup and push
 * are rounds of its group (worker w of every trainer).
 *
 * A round: every member sends every member a header (its kind: lookup,
 * wait or end; whether it pushes; its trainer's pause flag; its sizes),
 * then its payload (a push: one gradient per non-empty bag of its last
 * lookup; a lookup: the bags' rows that member holds, as the Thrift
 * client's requests), then, when any member looked up, the answers: each
 * member's partial sums of the bags it was sent. What travels is one vector
 * per bag and shard, never a row. A push waits for its member's next round
 * and rides in it: every member applies the round's pushes before it pools
 * its lookups, so a lookup sees every push before it as if each had had a
 * round of its own, at one round a step instead of two (and a wait or end
 * round flushes it before any pause). Every member sees every header, so
 * all agree on what the
 * next step is: answers or not, a checkpoint (members whose trainer wants
 * one finish the batch in flight and drain their reader's queue, then
 * serve the others; once every member's trainer wants it and none has
 * work, all pause), or the end (every member ended). */
#include "emb_part.h"

#include <stdlib.h>
#include <string.h>

enum { K_LOOKUP = 1, K_WAIT, K_END };

struct hdr {
    int32_t kind, pause;
    int64_t n;                  /* a lookup's examples */
    int64_t ids;                /* a lookup's ids */
    int64_t push;               /* the vectors of its push (-1: no push) */
    double lr_scale;            /* its push's rates (the pusher's batch's lr_scale) */
    int32_t weighted, pad_;     /* a lookup's ids come with their weights (libsvm values) */
};

struct peer {
    struct shard_set s;         /* what member q holds */
    size_t m;                   /* our last lookup's non-empty bags at q */
    size_t m_push;              /* ...those of the push we hold for our next round */
    size_t req_at, req_bytes;   /* our last lookup's request to q, in d->req */
    size_t ids_max, ids_sent;   /* ...room for its ids, and its ids (the offsets follow) */
    /* q's last lookup of us, kept for its push */
    int n_in;
    size_t m_in, ids_in;
    int32_t *off_in;
    uint64_t *id_in;
    float *wt_in;               /* ...its ids' weights, when weighted_in */
    int weighted_in;
    size_t off_cap, id_cap, wt_cap;
};

struct des {
    struct exchange *x;
    int P, me, T, d, k;         /* k: the shards this member holds */
    int64_t *table_rows;
    struct emb_tables *mine;
    struct peer *peer;
    struct des_hooks hooks;
    int64_t rounds;             /* the group's rounds: the same count on every member */
    struct des_stats *st, own_st;
    struct hdr *hs, *hr;
    size_t *sb, *rb;
    char *req, *grad, *rbuf;    /* our lookup's requests (each after the push we hold for that
                                 * member), our push's gradients, what came in */
    size_t req_cap, grad_cap, rbuf_cap;
    float *ans, *ain;           /* the partial sums we send, and get */
    size_t ans_cap, ain_cap;
    int in_flight;              /* a batch looked up and not yet pushed */
    int pending;                /* a push held for our next round (in d->grad) */
    float pending_scale;        /* ...and its batch's lr_scale */
    int all_end;                /* the last round's headers: every member ended */
    int all_paused;             /* ...every member's trainer wants a checkpoint and none has
                                 * a batch (a reader's queue drained first) */
};

static void *grow(void *p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return p;
    *cap = need + need / 2 + 64;
    free(p);
    return ss_aligned(*cap);
}

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* A lookup request's bytes: the ids, then the offsets, then (weighted)
 * the ids' weights. */
static size_t req_bytes(int64_t n, int64_t ids, int k, int weighted)
{
    return k ? pad8((size_t)ids * (weighted ? 12 : 8) + ((size_t)n * k + 1) * 4) : 0;
}

/* Member p's last lookup of us, as a batch of our shards. */
static struct batch asked(const struct des *d, const struct peer *q)
{
    return (struct batch){.n = q->n_in, .n_tables = d->k, .off = q->off_in, .ids = q->id_in,
                          .wts = q->wt_in, .weighted = q->weighted_in, .lr_scale = 1};
}

static int fail_peer(struct des *d, int p, const char *what, struct ss_err *e)
{
    return ss_fail(e, SS_ESTATE, "DES: trainer %d %s (as seen by trainer %d)", p, what, d->me);
}

/* Member p's push to us, in d->rbuf at at (its size checked with the
 * headers): applied to its last lookup's bags. */
static void take_push(struct des *d, int p, size_t at)
{
    if (!d->k)
        return;
    struct batch v = asked(d, &d->peer[p]);
    v.lr_scale = (float)d->hr[p].lr_scale; /* the pusher's step's, checked with the headers */
    embps_push_bags(d->mine, &v, (const float *)(d->rbuf + at));
}

/* Member p's lookup of us, in d->rbuf at at: kept for the answers and its push. */
static int take_lookup(struct des *d, int p, size_t at, struct ss_err *e)
{
    const struct hdr *h = &d->hr[p];
    struct peer *q = &d->peer[p];
    if (d->k) {
        q->n_in = (int)h->n;
        q->ids_in = (size_t)h->ids;
        q->id_in = grow(q->id_in, &q->id_cap, q->ids_in * 8 + 8);
        q->off_in = grow(q->off_in, &q->off_cap, ((size_t)q->n_in * d->k + 1) * 4);
        memcpy(q->id_in, d->rbuf + at, q->ids_in * 8);
        size_t offs = ((size_t)q->n_in * d->k + 1) * 4;
        memcpy(q->off_in, d->rbuf + at + q->ids_in * 8, offs);
        q->weighted_in = h->weighted;
        if (h->weighted) {
            q->wt_in = grow(q->wt_in, &q->wt_cap, q->ids_in * 4 + 8);
            memcpy(q->wt_in, d->rbuf + at + q->ids_in * 8 + offs, q->ids_in * 4);
        }
        struct batch v = asked(d, q);
        if (q->off_in[0] != 0 || (size_t)q->off_in[(size_t)q->n_in * d->k] != q->ids_in)
            return fail_peer(d, p, "sent offsets that do not match its ids", e);
        q->m_in = embps_bags(&v);
    }
    return 0;
}

/* Our push's bytes to member q, and member p's to us (from its header). */
static size_t push_out(const struct des *d, int q)
{
    return d->pending && d->peer[q].s.k ? pad8(d->peer[q].m_push * d->d * sizeof(float)) : 0;
}

static size_t push_in(const struct des *d, int p)
{
    const struct hdr *h = &d->hr[p];
    return h->push >= 0 && d->k ? pad8((size_t)h->push * d->d * sizeof(float)) : 0;
}

/* One round of kind (a lookup's headers' sizes and requests set by the
 * caller), with the push we hold, if any. */
static int round_of(struct des *d, int kind, struct ss_err *e)
{
    int P = d->P, rc;
    size_t fl = (size_t)d->d * sizeof(float);
    int pause = d->hooks.flag && __atomic_load_n(d->hooks.flag, __ATOMIC_ACQUIRE);
    double t0 = ss_now();
    for (int q = 0; q < P; q++) {
        d->hs[q].kind = kind, d->hs[q].pause = pause;
        if (kind != K_LOOKUP)
            d->hs[q].n = d->hs[q].ids = d->hs[q].weighted = 0;
        d->hs[q].push = d->pending ? (int64_t)d->peer[q].m_push : -1;
        d->hs[q].lr_scale = d->pending ? d->pending_scale : 1;
        d->sb[q] = d->rb[q] = sizeof(struct hdr);
    }
    if ((rc = d->x->ops->alltoallv(d->x, d->hs, d->sb, d->hr, d->rb, e)) < 0)
        return rc;
    /* the payloads: sizes known to both ends from the headers */
    size_t in = 0;
    int any_lookup = 0;
    d->all_end = d->all_paused = 1;
    for (int p = 0; p < P; p++) {
        const struct hdr *h = &d->hr[p];
        if (h->kind < K_LOOKUP || h->kind > K_END || h->push < -1 ||
            !(h->lr_scale >= 0 && h->lr_scale <= 1) ||
            (h->kind == K_LOOKUP && (h->n < 0 || h->ids < 0 || h->n > INT32_MAX / (d->k + 1))))
            return fail_peer(d, p, "sent a bad header", e);
        if (h->push >= 0 && d->k && (size_t)h->push != d->peer[p].m_in) /* before it is sized */
            return fail_peer(d, p, "pushed gradients of bags it had not looked up", e);
        any_lookup |= h->kind == K_LOOKUP;
        d->all_end &= h->kind == K_END;
        d->all_paused &= h->pause && (h->kind == K_WAIT || h->kind == K_END);
        d->sb[p] = push_out(d, p) + (kind == K_LOOKUP ? d->peer[p].req_bytes : 0);
        d->rb[p] = push_in(d, p) +
                   (h->kind == K_LOOKUP ? req_bytes(h->n, h->ids, d->k, h->weighted) : 0);
        in += d->rb[p];
    }
    d->rbuf = grow(d->rbuf, &d->rbuf_cap, in + 8);
    const void *send = kind == K_LOOKUP ? d->req : d->grad; /* a lookup's holds our push */
    if ((rc = d->x->ops->alltoallv(d->x, send, d->sb, d->rbuf, d->rb, e)) < 0)
        return rc;
    d->pending = 0;
    double sent = 0;
    for (int q = 0; q < P; q++)
        sent += q == d->me ? 0 : (double)(d->sb[q] + sizeof(struct hdr));
    size_t at = 0, out = 0;
    for (int p = 0; p < P; p++) { /* pushes first: a lookup sees them */
        if (d->hr[p].push >= 0)
            take_push(d, p, at);
        at += d->rb[p];
    }
    at = 0;
    for (int p = 0; p < P; p++) {
        if (d->hr[p].kind == K_LOOKUP && (rc = take_lookup(d, p, at + push_in(d, p), e)) < 0)
            return rc;
        at += d->rb[p];
        out += d->hr[p].kind == K_LOOKUP && d->k ? d->peer[p].m_in * d->d : 0;
    }
    if (any_lookup) { /* the partial sums of every bag asked, back to its asker */
        d->ans = grow(d->ans, &d->ans_cap, out * sizeof(float) + 8);
        size_t got = 0;
        at = 0;
        for (int p = 0; p < P; p++) {
            struct peer *q = &d->peer[p];
            d->sb[p] = d->hr[p].kind == K_LOOKUP && d->k ? q->m_in * fl : 0;
            if (d->sb[p]) {
                struct batch v = asked(d, q);
                embps_pool_bags(d->mine, &v, d->ans + at);
                at += q->m_in * d->d;
            }
            d->rb[p] = kind == K_LOOKUP && q->s.k ? q->m * fl : 0;
            got += d->rb[p];
            sent += p == d->me ? 0 : (double)d->sb[p];
        }
        d->ain = grow(d->ain, &d->ain_cap, got + 8);
        if ((rc = d->x->ops->alltoallv(d->x, d->ans, d->sb, d->ain, d->rb, e)) < 0)
            return rc;
    }
    d->st->rounds++;
    d->st->bytes_sent += sent;
    d->st->wait_s += ss_now() - t0;
    if (d->hooks.sync && ++d->rounds % d->hooks.sync_every == 0)
        return d->hooks.sync(d->hooks.arg, e);
    return 0;
}

/* After a round: the checkpoint, once every member's trainer wants it and
 * none has work. */
static void maybe_pause(struct des *d)
{
    if (d->all_paused && !d->all_end && d->hooks.wait)
        d->hooks.wait(d->hooks.arg);
}

static int des_lookup(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e)
{
    struct des *d = c->impl;
    size_t at = 0, ids_other = 0, g = 0;
    for (int q = 0; q < d->P; q++) {
        struct peer *p = &d->peer[q];
        p->ids_max = p->s.k ? shard_ids_max(&p->s, b) : 0;
        at += push_out(d, q) + req_bytes(b->n, (int64_t)p->ids_max, p->s.k, b->weighted);
    }
    d->req = grow(d->req, &d->req_cap, at + 8);
    at = 0;
    for (int q = 0; q < d->P; q++) {
        struct peer *p = &d->peer[q];
        size_t pb = push_out(d, q); /* the push we hold for q goes first */
        if (pb)
            memcpy(d->req + at, d->grad + g, pb);
        at += pb, g += pb;
        p->req_at = at;
        p->req_bytes = p->ids_sent = 0;
        p->m = 0;
        d->hs[q].n = b->n, d->hs[q].ids = 0, d->hs[q].weighted = b->weighted;
        if (!p->s.k)
            continue;
        size_t max = p->ids_max, offs = ((size_t)b->n * p->s.k + 1) * 4;
        uint64_t *ids = (uint64_t *)(d->req + at); /* the ids, the offsets, the weights */
        int32_t *off = (int32_t *)(d->req + at + max * 8);
        float *wts = b->weighted ? (float *)(d->req + at + max * 8 + offs) : NULL;
        size_t n_ids = shard_gather(&p->s, d->table_rows, b, off, ids, wts, &p->m);
        if (n_ids < max) { /* close the gaps the uncounted ids left */
            memmove(d->req + at + n_ids * 8, off, offs);
            if (wts)
                memmove(d->req + at + n_ids * 8 + offs, wts, n_ids * 4);
        }
        d->hs[q].ids = (int64_t)n_ids;
        p->ids_sent = n_ids;
        p->req_bytes = req_bytes(b->n, (int64_t)n_ids, p->s.k, b->weighted);
        at += p->req_bytes;
        ids_other += q == d->me ? 0 : n_ids;
    }
    int rc = round_of(d, K_LOOKUP, e);
    if (rc < 0)
        return rc;
    memset(out, 0, (size_t)b->n * d->T * d->d * sizeof(float));
    const float *a = d->ain;
    for (int q = 0; q < d->P; q++) {
        struct peer *p = &d->peer[q];
        if (!p->s.k)
            continue;
        const int32_t *off = (const int32_t *)(d->req + p->req_at + p->ids_sent * 8);
        shard_add_answer(&p->s, b->n, off, a, d->T, d->d, out);
        a += p->m * d->d;
    }
    d->in_flight = 1;
    d->st->lookups++;
    /* fetching rows instead: the ids, the rows, then the ids again with their updates */
    d->st->bytes_rows += (double)ids_other * (16.0 + 2.0 * d->d * sizeof(float));
    return 0;
}

static int des_push(struct emb_client *c, const struct batch *b, const float *g, struct ss_err *e)
{
    struct des *d = c->impl;
    if (!d->in_flight)
        return ss_fail(e, SS_ESTATE, "DES: a push of a batch that was not just looked up");
    size_t at = 0, fl = (size_t)d->d * sizeof(float);
    for (int q = 0; q < d->P; q++)
        at += pad8(d->peer[q].m * fl);
    d->grad = grow(d->grad, &d->grad_cap, at + 8);
    at = 0;
    for (int q = 0; q < d->P; q++) {
        struct peer *p = &d->peer[q];
        p->m_push = p->m;
        if (!p->s.k)
            continue;
        shard_pick(&p->s, b->n, (const int32_t *)(d->req + p->req_at + p->ids_sent * 8), g, d->T,
                   d->d, (float *)(d->grad + at));
        at += pad8(p->m * fl);
    }
    d->in_flight = 0;
    d->pending = 1; /* sent with our next round */
    d->pending_scale = b->lr_scale;
    d->st->pushes++;
    (void)e;
    return 0;
}

int emb_des_gate(struct emb_client *c, struct ss_err *e)
{
    struct des *d = c->impl;
    while (d->hooks.flag && __atomic_load_n(d->hooks.flag, __ATOMIC_ACQUIRE)) {
        int rc = round_of(d, K_WAIT, e); /* serves the others until all stop */
        if (rc < 0)
            return rc;
        if (d->all_paused) {
            maybe_pause(d);
            break;
        }
    }
    return 0;
}

int emb_des_idle(struct emb_client *c, struct ss_err *e)
{
    struct des *d = c->impl;
    int rc = round_of(d, K_WAIT, e);
    if (rc == 0)
        maybe_pause(d);
    return rc;
}

int emb_des_finish(struct emb_client *c, struct ss_err *e)
{
    struct des *d = c->impl;
    for (;;) {
        int rc = round_of(d, K_END, e);
        if (rc < 0 || d->all_end)
            return rc;
        maybe_pause(d);
    }
}

static void des_free(struct emb_client *c)
{
    struct des *d = c->impl;
    d->x->ops->free(d->x);
    for (int q = 0; q < d->P; q++) {
        shard_set_free(&d->peer[q].s);
        free(d->peer[q].off_in);
        free(d->peer[q].id_in);
        free(d->peer[q].wt_in);
    }
    free(d->peer);
    free(d->table_rows);
    free(d->hs);
    free(d->hr);
    free(d->sb);
    free(d->rb);
    free(d->req);
    free(d->grad);
    free(d->rbuf);
    free(d->ans);
    free(d->ain);
    free(d);
    free(c);
}

static const struct emb_client_ops des_ops = {"des", des_lookup, des_push, des_free, NULL, NULL};

struct emb_client *emb_client_des(struct exchange *x, const struct placement *pl, int dim,
                                  struct emb_tables *mine, const struct des_hooks *hooks,
                                  struct des_stats *st)
{
    struct des *d = ss_xcalloc(1, sizeof *d);
    d->x = x;
    d->P = x->size, d->me = x->rank, d->T = pl->n_tables, d->d = dim;
    d->table_rows = ss_xmalloc((size_t)pl->n_tables * sizeof(int64_t));
    memcpy(d->table_rows, pl->table_rows, (size_t)pl->n_tables * sizeof(int64_t));
    d->mine = mine;
    d->peer = ss_xcalloc(d->P, sizeof *d->peer);
    int32_t *ids = ss_xmalloc(((size_t)pl->n_shards + 1) * sizeof(int32_t));
    for (int q = 0; q < d->P; q++)
        shard_set_of(pl, q, ids, &d->peer[q].s);
    free(ids);
    d->k = d->peer[d->me].s.k;
    if (hooks)
        d->hooks = *hooks;
    d->st = st ? st : &d->own_st;
    d->hs = ss_xcalloc(d->P, sizeof *d->hs);
    d->hr = ss_xcalloc(d->P, sizeof *d->hr);
    d->sb = ss_xcalloc(d->P, sizeof *d->sb);
    d->rb = ss_xcalloc(d->P, sizeof *d->rb);
    struct emb_client *c = ss_xcalloc(1, sizeof *c);
    *c = (struct emb_client){&des_ops, d};
    return c;
}

void des_stats_add(struct des_stats *to, const struct des_stats *from)
{
    to->rounds += from->rounds;
    to->lookups += from->lookups;
    to->pushes += from->pushes;
    to->bytes_sent += from->bytes_sent;
    to->bytes_rows += from->bytes_rows;
    to->wait_s += from->wait_s;
}
