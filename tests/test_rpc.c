/* The embedding PS over Thrift on loopback: two PSs holding tables {0,2}
 * and {1,3} answer lookups and apply pushes exactly as in-process tables
 * would; bad requests (wrong token, wrong tables, bad offsets, short
 * gradients) get an error and the service goes on; a stopped PS is named
 * in the client's error, not a hang. */
#include "check.h"
#include "rpc_check.h"
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <signal.h>
#include <string.h>

#define T 4
#define DIM 4
#define N 16
static const char *token = "0123456789abcdef0123456789abcdef";

static struct emb_tables *make_tables(int k, const int32_t *gids)
{
    int64_t rows[T] = {50, 70, 90, 110}, sub[T];
    for (int j = 0; j < k; j++)
        sub[j] = rows[gids[j]];
    struct emb_opts o = {k, DIM, sub, OPT_ROWWISE_ADAGRAD, 0.1f, 1e-8f, 0, 11, gids};
    struct emb_tables *t;
    struct ss_err e;
    if (embps_create(&t, &o, &e) < 0)
        abort();
    return t;
}

static void make_batch(struct batch *b, uint64_t seed)
{
    batch_init(b, N, 1, T);
    uint64_t r = seed;
    size_t at = 0;
    b->off[0] = 0;
    for (int i = 0; i < N; i++)
        for (int t = 0; t < T; t++) {
            int len = (int)(ss_splitmix(&r) % 3); /* bags of 0..2 ids */
            batch_reserve_ids(b, at + len);
            for (int q = 0; q < len; q++)
                b->ids[at++] = ss_splitmix(&r) % 1000;
            b->off[i * T + t + 1] = (int32_t)at;
        }
    b->n = N;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* A raw lookup with hand-made fields, for the refusal checks. */
static int raw_lookup(int port, const char *tok, const int32_t *tables, int k, int n,
                      const int32_t *off, int n_off, char *why)
{
    struct rpc_conn *conn;
    struct ss_err e;
    if (rpc_connect("127.0.0.1", port, 2000, &conn, &e) < 0)
        return -1;
    ThriftProtocol *p = rpc_conn_protocol(conn);
    ssEmbeddingPSIf *cl = g_object_new(SS_TYPE_EMBEDDING_P_S_CLIENT, "input_protocol", p,
                                       "output_protocol", p, NULL);
    ssBags *b = g_object_new(SS_TYPE_BAGS, NULL);
    b->token = g_byte_array_new();
    g_byte_array_append(b->token, (const guint8 *)tok, (guint)strlen(tok));
    b->tables = g_byte_array_new();
    g_byte_array_append(b->tables, (const guint8 *)tables, (guint)k * 4);
    b->offsets = g_byte_array_new();
    g_byte_array_append(b->offsets, (const guint8 *)off, (guint)n_off * 4);
    b->ids = g_byte_array_new();
    b->n = n;
    b->__isset_token = b->__isset_n = b->__isset_tables = b->__isset_offsets = TRUE;
    b->__isset_ids = TRUE;
    GByteArray *ret = NULL;
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    int rc = call_outcome(ss_embedding_p_s_client_lookup(cl, &ret, b, &rerr, &gerr),
                          &rerr, &gerr, why);
    if (ret)
        g_byte_array_unref(ret);
    g_object_unref(b);
    g_object_unref(cl);
    rpc_conn_close(conn);
    return rc;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    rpc_types_init();
    int32_t all[T] = {0, 1, 2, 3}, ids0[2] = {0, 2}, ids1[2] = {1, 3};
    struct emb_tables *local = make_tables(T, all);
    struct emb_tables *t0 = make_tables(2, ids0), *t1 = make_tables(2, ids1);
    struct embps_service *s0 = embps_service_create(t0, ids0, 2, token);
    struct embps_service *s1 = embps_service_create(t1, ids1, 2, token);
    struct rpc_server *v0, *v1;
    struct ss_err e = {0};
    int rc = rpc_server_start(&v0, "127.0.0.1", 0, embps_service_processor(s0), &e);
    rc |= rpc_server_start(&v1, "127.0.0.1", 0, embps_service_processor(s1), &e);
    CHECK(rc == 0 && rpc_server_port(v0) > 0, "two PS servers listen on free ports", "%s", e.msg);
    struct emb_endpoint ep[2] = {{"embedding_ps 0", "127.0.0.1", rpc_server_port(v0), 2, ids0},
                                 {"embedding_ps 1", "127.0.0.1", rpc_server_port(v1), 2, ids1}};
    struct emb_client *cl;
    rc = emb_client_thrift(&cl, T, DIM, ep, 2, token, 2000, &e);
    CHECK(rc == 0, "the trainer's client connects to both", "%s", e.msg);

    struct batch b;
    make_batch(&b, 5);
    float got[N * T * DIM], want[N * T * DIM], g[N * T * DIM];
    uint64_t r = 9;
    for (int i = 0; i < N * T * DIM; i++)
        g[i] = (float)(ss_uniform(&r) - 0.5);
    for (int round = 0; round < 3; round++) {
        rc = cl->ops->lookup(cl, &b, got, &e);
        embps_pool(local, &b, want);
        CHECK(rc == 0 && max_diff(got, want, N * T * DIM) < 1e-6,
              "lookup over two PSs = in-process pooling (split tables, empty bags)",
              "rc %d diff %g: %s", rc, max_diff(got, want, N * T * DIM), e.msg);
        rc = cl->ops->push(cl, &b, g, &e);
        embps_push(local, &b, g);
        CHECK(rc == 0, "push over two PSs", "%s", e.msg);
    }

    char why[256];
    int32_t off_ok[2 * 1 + 1] = {0, 0, 0};
    rc = raw_lookup(rpc_server_port(v0), "not-the-token", ids0, 2, 1, off_ok, 3, why);
    CHECK(rc == 1 && strstr(why, "token"), "a wrong token is refused", "rc %d: %s", rc, why);
    rc = raw_lookup(rpc_server_port(v0), token, ids1, 2, 1, off_ok, 3, why);
    CHECK(rc == 1 && strstr(why, "tables"), "tables this PS does not hold are refused", "%s", why);
    int32_t off_bad[3] = {0, 5, 2};
    rc = raw_lookup(rpc_server_port(v0), token, ids0, 2, 1, off_bad, 3, why);
    CHECK(rc == 1 && strstr(why, "offsets"), "offsets out of order are refused", "%s", why);
    rc = raw_lookup(rpc_server_port(v0), token, ids0, 2, -3, off_ok, 3, why);
    CHECK(rc == 1 && strstr(why, "n = -3"), "a negative example count is refused", "%s", why);
    rc = raw_lookup(rpc_server_port(v0), token, ids0, 2, 1, off_ok, 3, why);
    CHECK(rc == 0, "the service goes on serving after bad requests", "%s", why);
    struct embps_stats st;
    embps_service_stats(s0, &st);
    CHECK(st.refused == 4 && st.lookups == 4 && st.pushes == 3, "refusals and calls are counted",
          "refused %lld lookups %lld pushes %lld", (long long)st.refused, (long long)st.lookups,
          (long long)st.pushes);

    rpc_server_stop(v1);
    double start = ss_now();
    rc = cl->ops->lookup(cl, &b, got, &e);
    char port1[16];
    snprintf(port1, sizeof port1, ":%d", ep[1].port);
    CHECK(rc < 0 && strstr(e.msg, port1) && strstr(e.msg, "embedding_ps 1") &&
              ss_now() - start < 3.0,
          "a stopped PS is named in the error, within the timeout", "rc %d after %.1fs: %s", rc,
          ss_now() - start, e.msg);

    cl->ops->free(cl);
    rpc_server_stop(v0);
    embps_service_free(s0);
    embps_service_free(s1);
    embps_free(t0);
    embps_free(t1);
    embps_free(local);
    batch_free(&b);
    CHECK_DONE();
}
