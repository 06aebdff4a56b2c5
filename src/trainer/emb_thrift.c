/* The trainer's emb_client over Thrift (DESIGN §2, §3, §4): each id becomes
 * its row (id mod the table's rows) and goes to the shard of the placement
 * plan that holds that row; each PS gets one request with the bags of its
 * shards, in its order. All requests go out before any answer is read; the
 * pooled answers are summed into the [n x T x dim] layout the model reads
 * (a split table's partial sums add up to its bag), and a bag's gradient
 * goes to every shard of its table. The push of the batch just looked up
 * reuses the lookup's requests (rows are routed once per batch; the batch
 * must not change in between, as in the worker loop). Buffers are kept
 * between batches, so
 * the steady state allocates only what the Thrift library does per call. */
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <stdlib.h>
#include <string.h>

struct ps_conn {
    char name[128], host[64];
    int port, k;
    int32_t *shards, *tables;   /* [k] the plan's shard ids, and their tables */
    int64_t *lo, *hi;           /* [k] the shards' rows */
    struct rpc_conn *conn;
    ssEmbeddingPSIf *client;
    ssBags *bags;               /* reused request: token, tables, offsets, ids */
    GByteArray *grads;
};

struct thrift_emb {
    int n_tables, dim, n_ps;
    const struct batch *looked_up; /* the batch whose requests the PSs hold, for its push */
    int64_t *table_rows;
    struct ps_conn *ps;         /* [n_ps]; a PS that holds nothing has k = 0 */
};

/* Fills p's request with the rows of its shards' bags. */
static void gather(const struct thrift_emb *te, struct ps_conn *p, const struct batch *b)
{
    int T = b->n_tables, k = p->k;
    g_byte_array_set_size(p->bags->offsets, (guint)((size_t)b->n * k + 1) * 4);
    int32_t *off = (int32_t *)p->bags->offsets->data;
    size_t n_ids = 0;
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < k; j++) {
            int t = p->tables[j];
            n_ids += (size_t)(b->off[i * T + t + 1] - b->off[i * T + t]);
        }
    g_byte_array_set_size(p->bags->ids, (guint)(n_ids * 8)); /* at most; trimmed below */
    uint64_t *ids = (uint64_t *)p->bags->ids->data;
    size_t at = 0;
    off[0] = 0;
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < k; j++) {
            int t = p->tables[j];
            uint64_t rows = (uint64_t)te->table_rows[t], lo = (uint64_t)p->lo[j];
            uint64_t hi = (uint64_t)p->hi[j];
            for (int32_t q = b->off[i * T + t]; q < b->off[i * T + t + 1]; q++) {
                uint64_t r = b->ids[q] % rows;
                if (r >= lo && r < hi)
                    ids[at++] = r;
            }
            off[i * k + j + 1] = (int32_t)at;
        }
    g_byte_array_set_size(p->bags->ids, (guint)(at * 8));
    p->bags->n = b->n;
}

static int call_failed(const struct ps_conn *p, const char *what, ssRpcError *rerr, GError *gerr,
                       struct ss_err *e)
{
    return rpc_call_failed(e, p->name, p->host, p->port, what, rerr, gerr);
}

static int thrift_lookup(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e)
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
        if (!ret || ret->len != (guint)b->n * p->k * d * 4) {
            if (ret)
                g_byte_array_unref(ret);
            return call_failed(p, "lookup (answer of the wrong size)", NULL, NULL, e);
        }
        const float *r = (const float *)ret->data;
        for (int i = 0; i < b->n; i++)
            for (int j = 0; j < p->k; j++) {
                float *o = out + ((size_t)i * T + p->tables[j]) * d;
                const float *a = r + ((size_t)i * p->k + j) * d;
                for (int q = 0; q < d; q++)
                    o[q] += a[q];
            }
        g_byte_array_unref(ret);
    }
    return 0;
}

static int thrift_push(struct emb_client *c, const struct batch *b, const float *g,
                       struct ss_err *e)
{
    struct thrift_emb *te = c->impl;
    int T = te->n_tables, d = te->dim;
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        if (!p->k)
            continue;
        if (te->looked_up != b)
            gather(te, p, b);
        g_byte_array_set_size(p->grads, (guint)b->n * p->k * d * 4);
        float *pg = (float *)p->grads->data;
        for (int i = 0; i < b->n; i++)
            for (int j = 0; j < p->k; j++)
                memcpy(pg + ((size_t)i * p->k + j) * d, g + ((size_t)i * T + p->tables[j]) * d,
                       d * sizeof(float));
        GError *gerr = NULL;
        if (!ss_embedding_p_s_client_send_push(p->client, p->bags, p->grads, &gerr))
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

static void close_ps(struct ps_conn *p)
{
    if (p->client)
        g_object_unref(p->client);
    rpc_conn_close(p->conn);
    if (p->bags)
        g_object_unref(p->bags);
    if (p->grads)
        g_byte_array_unref(p->grads);
    free(p->shards);
    free(p->tables);
    free(p->lo);
    free(p->hi);
}

static void thrift_free(struct emb_client *c)
{
    struct thrift_emb *te = c->impl;
    for (int s = 0; s < te->n_ps; s++)
        close_ps(&te->ps[s]);
    free(te->ps);
    free(te->table_rows);
    free(te);
    free(c);
}

static const struct emb_client_ops thrift_ops = {"thrift", thrift_lookup, thrift_push, thrift_free};

int emb_client_thrift(struct emb_client **out, const struct placement *pl, int dim,
                      const struct emb_endpoint *ps, const char *token, int timeout_ms,
                      struct ss_err *e)
{
    struct thrift_emb *te = ss_xcalloc(1, sizeof *te);
    te->n_tables = pl->n_tables;
    te->dim = dim;
    te->n_ps = pl->n_ps;
    te->table_rows = ss_xmalloc((size_t)pl->n_tables * sizeof(int64_t));
    memcpy(te->table_rows, pl->table_rows, (size_t)pl->n_tables * sizeof(int64_t));
    te->ps = ss_xcalloc(te->n_ps, sizeof *te->ps);
    struct emb_client *c = ss_xcalloc(1, sizeof *c);
    *c = (struct emb_client){&thrift_ops, te};
    for (int s = 0; s < te->n_ps; s++) {
        struct ps_conn *p = &te->ps[s];
        snprintf(p->host, sizeof p->host, "%s", ps[s].host);
        snprintf(p->name, sizeof p->name, "%s", ps[s].name ? ps[s].name : "embedding PS");
        p->port = ps[s].port;
        p->shards = ss_xmalloc(((size_t)pl->n_shards + 1) * sizeof(int32_t));
        p->k = placement_ps_shards(pl, s, p->shards);
        p->tables = ss_xmalloc(((size_t)p->k + 1) * sizeof(int32_t));
        p->lo = ss_xmalloc(((size_t)p->k + 1) * sizeof(int64_t));
        p->hi = ss_xmalloc(((size_t)p->k + 1) * sizeof(int64_t));
        for (int j = 0; j < p->k; j++) {
            const struct shard *sh = &pl->shards[p->shards[j]];
            p->tables[j] = sh->table;
            p->lo[j] = sh->lo;
            p->hi[j] = sh->hi;
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
        p->bags->__isset_token = p->bags->__isset_n = p->bags->__isset_shards = TRUE;
        p->bags->__isset_offsets = p->bags->__isset_ids = TRUE;
        p->grads = g_byte_array_new();
    }
    *out = c;
    return 0;
}
