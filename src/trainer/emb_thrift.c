/* The trainer's emb_client over Thrift (DESIGN §2, §3, §4): each id becomes
 * its row (id mod the table's rows) and goes to the shard of the placement
 * plan that holds that row; each PS gets one request with the bags of its
 * shards, in its order. All requests go out before any answer is read; the
 * pooled answers (the non-empty bags only, each way) are summed into the
 * [n x T x dim] layout the model reads (a split table's partial sums add up
 * to its bag), and a bag's gradient goes to every shard of its table. The push of the batch just looked up
 * reuses the lookup's requests (rows are routed once per batch; the batch
 * must not change in between, as in the worker loop). Buffers are kept
 * between batches, so
 * the steady state allocates only what the Thrift library does per call. */
#include "emb_part.h"
#include "shadowsync/rpc.h"

#include <stdlib.h>
#include <string.h>

struct ps_conn {
    char name[128], host[64];
    int port, k;                /* k = s.k */
    size_t m;                   /* the request's non-empty bags: the vectors each way */
    int32_t *shards;            /* [k] the plan's shard ids */
    struct shard_set s;         /* their tables and rows */
    struct rpc_conn *conn;
    ssEmbeddingPSIf *client;
    ssBags *bags;               /* reused request: token, tables, offsets, ids */
    GByteArray *grads;
    ssRowSync *rs;              /* reused request of a cache's rows */
    size_t *gidx;               /* [gets asked of this PS] their place in the caller's list */
    size_t gidx_cap;
    ssRowAnswer *answer;
};

/* Where rows of a table live: shard j of PS ps holds [lo, hi). */
struct route {
    int ps, j;
    int64_t lo, hi;
};

struct thrift_emb {
    int n_tables, dim, n_ps, timeout_ms;
    int wire, id_bytes;         /* enum wire_form; 4 where every table's rows fit uint32 */
    float *vec;                 /* [vec_cap] a request's vectors in fp32, each way */
    size_t vec_cap;
    struct ss_err broken;       /* why a reconnection after a failed call failed (code 0: none) */
    const struct batch *looked_up; /* the batch whose requests the PSs hold, for its push */
    int64_t *table_rows;
    struct ps_conn *ps;         /* [n_ps]; a PS that holds nothing has k = 0 */
    struct route **route;       /* [n_tables] each table's shards, n_route[t] of them */
    int *n_route;
    int64_t *pos;               /* [pos_cap] where each asked row goes in the answer, -1: not sent */
    size_t pos_cap;
};

/* Fills p's request with the rows of its shards' bags. */
static void gather(const struct thrift_emb *te, struct ps_conn *p, const struct batch *b)
{
    g_byte_array_set_size(p->bags->offsets, (guint)((size_t)b->n * p->k + 1) * 4);
    size_t most = shard_ids_max(&p->s, b);
    g_byte_array_set_size(p->bags->ids, (guint)(most * 8)); /* trimmed below */
    p->bags->__isset_weights = b->weighted;
    if (b->weighted)
        g_byte_array_set_size(p->bags->weights, (guint)(most * 4));
    size_t at = shard_gather(&p->s, te->table_rows, b, (int32_t *)p->bags->offsets->data,
                             (uint64_t *)p->bags->ids->data,
                             b->weighted ? (float *)p->bags->weights->data : NULL, &p->m);
    if (te->id_bytes == 4) { /* in place, front to back */
        const uint64_t *wide = (const uint64_t *)p->bags->ids->data;
        uint32_t *narrow = (uint32_t *)p->bags->ids->data;
        for (size_t q = 0; q < at; q++)
            narrow[q] = (uint32_t)wide[q];
    }
    g_byte_array_set_size(p->bags->ids, (guint)(at * (size_t)te->id_bytes));
    if (b->weighted)
        g_byte_array_set_size(p->bags->weights, (guint)(at * 4));
    p->bags->n = b->n;
}

static int call_failed(const struct ps_conn *p, const char *what, ssRpcError *rerr, GError *gerr,
                       struct ss_err *e)
{
    return rpc_call_failed(e, p->name, p->host, p->port, what, rerr, gerr);
}

/* The request's vectors in fp32, n floats (kept between batches). */
static float *vectors(struct thrift_emb *te, size_t n)
{
    return te->vec = ss_grown(te->vec, &te->vec_cap, n, sizeof(float));
}

static int lookup_once(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e)
{
    struct thrift_emb *te = c->impl;
    te->looked_up = NULL;
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        GError *gerr = NULL;
        if (!p->k)
            continue;
        gather(te, p, b);
        if (!ss_embedding_p_s_client_send_lookup(p->client, p->bags, &gerr))
            return call_failed(p, "lookup", NULL, gerr, e);
    }
    te->looked_up = b;
    int T = te->n_tables, d = te->dim;
    memset(out, 0, (size_t)b->n * T * d * sizeof(float));
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        if (!p->k)
            continue;
        GByteArray *ret = NULL;
        ssRpcError *rerr = NULL;
        GError *gerr = NULL;
        if (!ss_embedding_p_s_client_recv_lookup(p->client, &ret, &rerr, &gerr) || rerr) {
            if (ret)
                g_byte_array_unref(ret);
            return call_failed(p, "lookup", rerr, gerr, e);
        }
        size_t n = p->m * d;
        float *v = te->wire == WIRE_FP32 && ret ? (float *)ret->data : vectors(te, n);
        if (!ret || (te->wire == WIRE_FP32 ? ret->len != n * 4
                                           : wire_decode(te->wire, ret->data, ret->len, v, n) < 0)) {
            if (ret)
                g_byte_array_unref(ret);
            return call_failed(p, "lookup (answer of the wrong size or form)", NULL, NULL, e);
        }
        shard_add_answer(&p->s, b->n, (const int32_t *)p->bags->offsets->data, v, T, d, out);
        g_byte_array_unref(ret);
    }
    return 0;
}

static int push_once(struct emb_client *c, const struct batch *b, const float *g,
                     struct ss_err *e)
{
    struct thrift_emb *te = c->impl;
    int T = te->n_tables, d = te->dim;
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        if (!p->k)
            continue;
        int reuse = te->looked_up == b; /* the PS holds its lookup's bags: none sent again */
        if (!reuse)
            gather(te, p, b);
        size_t n = p->m * d;
        g_byte_array_set_size(p->grads, (guint)wire_bytes(te->wire, n));
        float *v = te->wire == WIRE_FP32 ? (float *)p->grads->data : vectors(te, n);
        shard_pick(&p->s, b->n, (const int32_t *)p->bags->offsets->data, g, T, d, v);
        if (te->wire != WIRE_FP32)
            wire_encode(te->wire, v, n, p->grads->data);
        GError *gerr = NULL;
        ssBags *q = p->bags;
        guint kept[3] = {q->shards->len, q->offsets->len, q->ids->len};
        gboolean weighted = q->__isset_weights;
        if (reuse) {
            q->shards->len = q->offsets->len = q->ids->len = 0; /* (the bytes stay) */
            q->__isset_weights = FALSE;
        }
        q->reuse = reuse;
        q->__isset_reuse = TRUE;
        gboolean sent = ss_embedding_p_s_client_send_push(p->client, q, p->grads, b->lr_scale,
                                                          &gerr);
        q->shards->len = kept[0], q->offsets->len = kept[1], q->ids->len = kept[2];
        q->__isset_weights = weighted;
        q->reuse = FALSE;
        if (!sent)
            return call_failed(p, "push", NULL, gerr, e);
    }
    te->looked_up = NULL;
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        ssRpcError *rerr = NULL;
        GError *gerr = NULL;
        if (p->k && (!ss_embedding_p_s_client_recv_push(p->client, &rerr, &gerr) || rerr))
            return call_failed(p, "push", rerr, gerr, e);
    }
    return 0;
}

/* The PS and shard (its j-th) that hold row of table t. */
static const struct route *route_of(const struct thrift_emb *te, int t, uint64_t row)
{
    for (int i = 0; i < te->n_route[t]; i++)
        if (row >= (uint64_t)te->route[t][i].lo && row < (uint64_t)te->route[t][i].hi)
            return &te->route[t][i];
    return NULL; /* a plan covers every row */
}

static void append(GByteArray *a, const void *v, size_t bytes)
{
    g_byte_array_append(a, v, (guint)bytes);
}

/* The deltas and the asks of r, each to the PS that holds its row, all
 * sent before any answer is read; the answers scattered back into r's order. */
static int rows_once(struct emb_client *c, const struct row_req *r, struct ss_err *e)
{
    struct thrift_emb *te = c->impl;
    size_t stride = (size_t)r->stride;
    for (int s = 0; s < te->n_ps; s++) {
        ssRowSync *q = te->ps[s].rs;
        if (!q)
            continue;
        GByteArray *arr[] = {q->add_at, q->add_rows, q->add_delta, q->add_count,
                             q->get_at, q->get_rows, q->get_have};
        for (size_t a = 0; a < sizeof arr / sizeof *arr; a++)
            g_byte_array_set_size(arr[a], 0);
        q->bound = (gint32)(r->bound > INT32_MAX ? INT32_MAX : r->bound);
    }
    for (size_t i = 0; i < r->n_add; i++) {
        const struct route *o = route_of(te, r->add_table[i], r->add_row[i]);
        ssRowSync *q = te->ps[o->ps].rs;
        append(q->add_at, &o->j, 4);
        append(q->add_rows, &r->add_row[i], 8);
        append(q->add_delta, r->add_delta + i * stride, stride * 4);
        append(q->add_count, &r->add_count[i], 4);
    }
    if (r->n_get > te->pos_cap) {
        te->pos_cap = r->n_get;
        free(te->pos);
        te->pos = ss_xmalloc(te->pos_cap * sizeof(int64_t));
    }
    for (size_t i = 0; i < r->n_get; i++) {
        const struct route *o = route_of(te, r->get_table[i], r->get_row[i]);
        struct ps_conn *p = &te->ps[o->ps];
        size_t n = p->rs->get_at->len / 4;
        if (n == p->gidx_cap) {
            p->gidx_cap = p->gidx_cap ? 2 * p->gidx_cap : 1024;
            p->gidx = realloc(p->gidx, p->gidx_cap * sizeof(size_t));
            if (!p->gidx)
                abort();
        }
        p->gidx[n] = i;
        append(p->rs->get_at, &o->j, 4);
        append(p->rs->get_rows, &r->get_row[i], 8);
        append(p->rs->get_have, &r->get_have[i], 4);
    }
    int rc = 0, sent_to = 0;
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        GError *gerr = NULL;
        if (!p->rs || (!p->rs->add_at->len && !p->rs->get_at->len))
            continue;
        if (!ss_embedding_p_s_client_send_rows(p->client, p->rs, &gerr))
            return call_failed(p, "rows", NULL, gerr, e);
        sent_to = s + 1;
    }
    for (int s = 0; s < sent_to && rc == 0; s++) {
        struct ps_conn *p = &te->ps[s];
        if (!p->rs || (!p->rs->add_at->len && !p->rs->get_at->len))
            continue;
        ssRpcError *rerr = NULL;
        GError *gerr = NULL;
        p->answer = g_object_new(SS_TYPE_ROW_ANSWER, NULL); /* a fresh one: see recv */
        if (!ss_embedding_p_s_client_recv_rows(p->client, &p->answer, &rerr, &gerr) || rerr) {
            rc = call_failed(p, "rows", rerr, gerr, e);
            break;
        }
        size_t n = p->rs->get_at->len / 4;
        const GByteArray *ck = p->answer->clocks;
        if (!ck || ck->len != n * 4) {
            rc = call_failed(p, "rows (clocks of the wrong size)", NULL, NULL, e);
            break;
        }
        for (size_t k = 0; k < n; k++)
            memcpy(&r->clock[p->gidx[k]], ck->data + k * 4, 4);
    }
    /* the rows sent, in r's order; each answer's own count checked */
    int64_t next = 0;
    for (size_t i = 0; rc == 0 && i < r->n_get; i++)
        te->pos[i] = row_sent(r->get_have[i], r->clock[i], r->bound) ? next++ : -1;
    for (int s = 0; s < sent_to; s++) {
        struct ps_conn *p = &te->ps[s];
        if (!p->answer)
            continue;
        size_t n = p->rs->get_at->len / 4, got = 0, have = p->answer->rows ? p->answer->rows->len : 0;
        for (size_t k = 0; rc == 0 && k < n; k++) {
            int64_t at = te->pos[p->gidx[k]];
            if (at < 0)
                continue;
            if ((got + 1) * stride * 4 > have) {
                rc = call_failed(p, "rows (fewer rows than asked)", NULL, NULL, e);
                break;
            }
            memcpy(r->val + (size_t)at * stride, p->answer->rows->data + got++ * stride * 4,
                   stride * 4);
        }
        if (rc == 0 && got * stride * 4 != have)
            rc = call_failed(p, "rows (more rows than asked)", NULL, NULL, e);
        g_object_unref(p->answer);
        p->answer = NULL;
    }
    return rc;
}

static void close_ps(struct ps_conn *p)
{
    if (p->client)
        g_object_unref(p->client);
    rpc_conn_close(p->conn);
    if (p->bags)
        g_object_unref(p->bags);
    if (p->grads)
        g_byte_array_unref(p->grads);
    if (p->rs)
        g_object_unref(p->rs);
    if (p->answer)
        g_object_unref(p->answer);
    free(p->gidx);
    free(p->shards);
    shard_set_free(&p->s);
}

static void thrift_free(struct emb_client *c)
{
    struct thrift_emb *te = c->impl;
    for (int s = 0; s < te->n_ps; s++)
        close_ps(&te->ps[s]);
    free(te->ps);
    for (int t = 0; te->route && t < te->n_tables; t++)
        free(te->route[t]);
    free(te->route);
    free(te->n_route);
    free(te->pos);
    free(te->vec);
    free(te->table_rows);
    free(te);
    free(c);
}

/* After a failed call the connections may hold answers owed to it (the
 * other PSs', a late one): every one is made anew, so the next call reads
 * its own. Where a PS cannot be reached again, every later call fails. */
static void reconnect(struct thrift_emb *te)
{
    te->looked_up = NULL;
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        if (!p->k || !p->client)
            continue;
        g_object_unref(p->client);
        p->client = NULL;
        rpc_conn_close(p->conn);
        p->conn = NULL;
        struct ss_err ce = {0};
        if (rpc_connect_named(p->name, p->host, p->port, te->timeout_ms, &p->conn, &ce) < 0) {
            te->broken = ce;
            continue;
        }
        ThriftProtocol *proto = rpc_conn_protocol(p->conn);
        p->client = g_object_new(SS_TYPE_EMBEDDING_P_S_CLIENT, "input_protocol", proto,
                                 "output_protocol", proto, NULL);
    }
}

/* A call's outcome: a failure makes the connections anew. */
static int called(struct thrift_emb *te, int rc)
{
    if (rc < 0)
        reconnect(te);
    return rc;
}

static int thrift_lookup(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e)
{
    struct thrift_emb *te = c->impl;
    return te->broken.code ? (*e = te->broken, te->broken.code)
                           : called(te, lookup_once(c, b, out, e));
}

static int thrift_push(struct emb_client *c, const struct batch *b, const float *g,
                       struct ss_err *e)
{
    struct thrift_emb *te = c->impl;
    return te->broken.code ? (*e = te->broken, te->broken.code)
                           : called(te, push_once(c, b, g, e));
}

static int thrift_rows(struct emb_client *c, const struct row_req *r, struct ss_err *e)
{
    struct thrift_emb *te = c->impl;
    return te->broken.code ? (*e = te->broken, te->broken.code)
                           : called(te, rows_once(c, r, e));
}

static const struct emb_client_ops thrift_ops = {"thrift", thrift_lookup, thrift_push, thrift_free,
                                                   thrift_rows, NULL};

int emb_client_thrift(struct emb_client **out, const struct placement *pl, int dim, int wire,
                      const struct emb_endpoint *ps, const char *token, int timeout_ms,
                      struct ss_err *e)
{
    struct thrift_emb *te = ss_xcalloc(1, sizeof *te);
    te->n_tables = pl->n_tables;
    te->dim = dim;
    te->wire = wire;
    te->id_bytes = 4;
    for (int t = 0; t < pl->n_tables; t++)
        if (pl->table_rows[t] > (int64_t)UINT32_MAX + 1)
            te->id_bytes = 8;
    te->n_ps = pl->n_ps;
    te->timeout_ms = timeout_ms;
    te->table_rows = ss_xmalloc((size_t)pl->n_tables * sizeof(int64_t));
    memcpy(te->table_rows, pl->table_rows, (size_t)pl->n_tables * sizeof(int64_t));
    te->ps = ss_xcalloc(te->n_ps, sizeof *te->ps);
    te->route = ss_xcalloc(pl->n_tables, sizeof *te->route);
    te->n_route = ss_xcalloc(pl->n_tables, sizeof *te->n_route);
    for (int t = 0; t < pl->n_tables; t++)
        te->route[t] = ss_xmalloc(((size_t)pl->n_shards + 1) * sizeof(struct route));
    struct emb_client *c = ss_xcalloc(1, sizeof *c);
    *c = (struct emb_client){&thrift_ops, te};
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        snprintf(p->host, sizeof p->host, "%s", ps[s].host);
        snprintf(p->name, sizeof p->name, "%s", ps[s].name ? ps[s].name : "embedding PS");
        p->port = ps[s].port;
        p->shards = ss_xmalloc(((size_t)pl->n_shards + 1) * sizeof(int32_t));
        p->k = shard_set_of(pl, s, p->shards, &p->s);
        for (int j = 0; j < p->k; j++) {
            const struct shard *sh = &pl->shards[p->shards[j]];
            te->route[sh->table][te->n_route[sh->table]++] = (struct route){s, j, sh->lo, sh->hi};
        }
        if (!p->k)
            continue;
        int rc = rpc_connect_named(p->name, p->host, p->port, timeout_ms, &p->conn, e);
        if (rc < 0) {
            thrift_free(c);
            return rc;
        }
        ThriftProtocol *proto = rpc_conn_protocol(p->conn);
        p->client = g_object_new(SS_TYPE_EMBEDDING_P_S_CLIENT, "input_protocol", proto,
                                 "output_protocol", proto, NULL);
        p->bags = g_object_new(SS_TYPE_BAGS, NULL);
        p->bags->token = g_byte_array_new();
        g_byte_array_append(p->bags->token, (const guint8 *)token, (guint)strlen(token));
        p->bags->shards = g_byte_array_new();
        g_byte_array_append(p->bags->shards, (const guint8 *)p->shards, (guint)p->k * 4);
        p->bags->offsets = g_byte_array_new();
        p->bags->ids = g_byte_array_new();
        p->bags->weights = g_byte_array_new(); /* sent when a batch is weighted */
        p->bags->__isset_token = p->bags->__isset_n = p->bags->__isset_shards = TRUE;
        p->bags->__isset_offsets = p->bags->__isset_ids = TRUE;
        p->bags->id_bytes = te->id_bytes;
        p->bags->wire = wire;
        p->bags->__isset_id_bytes = p->bags->__isset_wire = TRUE;
        p->grads = g_byte_array_new();
        p->rs = g_object_new(SS_TYPE_ROW_SYNC, NULL);
        ssRowSync *q = p->rs;
        q->token = g_byte_array_new();
        append(q->token, token, strlen(token));
        q->shards = g_byte_array_new();
        append(q->shards, p->shards, (size_t)p->k * 4);
        GByteArray **arr[] = {&q->add_at, &q->add_rows, &q->add_delta, &q->add_count,
                              &q->get_at, &q->get_rows, &q->get_have};
        for (size_t a = 0; a < sizeof arr / sizeof *arr; a++)
            *arr[a] = g_byte_array_new();
        q->__isset_token = q->__isset_shards = q->__isset_add_at = q->__isset_add_rows = TRUE;
        q->__isset_add_delta = q->__isset_add_count = q->__isset_get_at = TRUE;
        q->__isset_get_rows = q->__isset_get_have = q->__isset_bound = TRUE;
    }
    *out = c;
    return 0;
}
