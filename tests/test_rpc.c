/* The embedding PS over Thrift on loopback: two PSs holding table 0, table
 * 1 and row ranges of tables 2 and 3 (each split over both, by pins) answer
 * lookups (partial sums added by the client) and apply pushes exactly as
 * in-process tables would; bad requests (wrong token, wrong shards, bad
 * offsets, a row outside its shard) get an error and the service goes on;
 * a stopped PS is named in the client's error, not a hang. A worker's
 * embedding cache over two clocked PSs trains as tables alone (staleness
 * 0) and its bad rows calls are refused. A guarded server closes
 * half-sent connections at their deadline, makes room when its slots are
 * full by closing the newest tokenless one (at once: one past a second), cuts off a
 * tokenless message past 1 MiB, and accepts on after running out of file
 * descriptors, saying so once. */
#include "check.h"
#include "rpc_check.h"
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define T 4
#define DIM 4
#define N 16
static const char *token = "0123456789abcdef0123456789abcdef";

static const int64_t rows[T] = {50, 70, 90, 110};

static struct emb_opts opts(void)
{
    return (struct emb_opts){.n_tables = T, .dim = DIM, .rows = rows,
                             .opt = OPT_ROWWISE_ADAGRAD, .lr = 0.1f, .eps = 1e-8f, .seed = 11};
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

/* A raw lookup with hand-made fields, for the refusal checks. */
/* A raw lookup, or with push a push of zero gradients at push_scale. */
static int bags_on(struct rpc_conn *conn, const char *tok, const int32_t *shards, int k, int n,
                   const int32_t *off, int n_off, const uint64_t *ids, int push,
                   double push_scale, char *why)
{
    ThriftProtocol *p = rpc_conn_protocol(conn);
    ssEmbeddingPSIf *cl = g_object_new(SS_TYPE_EMBEDDING_P_S_CLIENT, "input_protocol", p,
                                       "output_protocol", p, NULL);
    ssBags *b = g_object_new(SS_TYPE_BAGS, NULL);
    b->token = g_byte_array_new();
    g_byte_array_append(b->token, (const guint8 *)tok, (guint)strlen(tok));
    b->shards = g_byte_array_new();
    g_byte_array_append(b->shards, (const guint8 *)shards, (guint)k * 4);
    b->offsets = g_byte_array_new();
    if (push != 2) /* (a reusing push sends no bags: its grads are sized by off still) */
        g_byte_array_append(b->offsets, (const guint8 *)off, (guint)n_off * 4);
    b->ids = g_byte_array_new();
    if (push != 2 && n_off > 0 && off[n_off - 1] > 0)
        g_byte_array_append(b->ids, (const guint8 *)ids, (guint)off[n_off - 1] * 8);
    b->n = n;
    b->__isset_token = b->__isset_n = b->__isset_shards = b->__isset_offsets = TRUE;
    b->__isset_ids = TRUE;
    b->reuse = b->__isset_reuse = push == 2; /* (push 2: reusing the connection's lookup) */
    GByteArray *ret = NULL, *grads = g_byte_array_new();
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    int rc;
    if (!push) {
        rc = call_outcome(ss_embedding_p_s_client_lookup(cl, &ret, b, &rerr, &gerr), &rerr,
                          &gerr, why);
    } else {
        g_byte_array_set_size(grads, (guint)(n_off > 0 ? off[n_off - 1] : 0) * DIM * 4);
        memset(grads->data, 0, grads->len);
        rc = call_outcome(ss_embedding_p_s_client_push(cl, b, grads, push_scale, &rerr, &gerr),
                          &rerr, &gerr, why);
    }
    if (ret)
        g_byte_array_unref(ret);
    g_byte_array_unref(grads);
    g_object_unref(b);
    g_object_unref(cl);
    return rc;
}

static int raw_bags(int port, const char *tok, const int32_t *shards, int k, int n,
                    const int32_t *off, int n_off, const uint64_t *ids, int push,
                    double push_scale, char *why)
{
    struct rpc_conn *conn;
    struct ss_err e;
    if (rpc_connect("127.0.0.1", port, 2000, &conn, &e) < 0)
        return -1;
    int rc = bags_on(conn, tok, shards, k, n, off, n_off, ids, push, push_scale, why);
    rpc_conn_close(conn);
    return rc;
}

static int raw_lookup(int port, const char *tok, const int32_t *shards, int k, int n,
                      const int32_t *off, int n_off, const uint64_t *ids, char *why)
{
    return raw_bags(port, tok, shards, k, n, off, n_off, ids, 0, 0, why);
}

/* A raw rows call: n asks of (at, row) with no copy held, an add of
 * n_delta floats for the first ask's row. */
static int raw_rows(int port, const char *tok, const int32_t *shards, int k, int n,
                    const int32_t *at, const uint64_t *row, int n_delta, char *why)
{
    struct rpc_conn *conn;
    struct ss_err e;
    if (rpc_connect("127.0.0.1", port, 2000, &conn, &e) < 0)
        return -1;
    ThriftProtocol *p = rpc_conn_protocol(conn);
    ssEmbeddingPSIf *cl = g_object_new(SS_TYPE_EMBEDDING_P_S_CLIENT, "input_protocol", p,
                                       "output_protocol", p, NULL);
    ssRowSync *q = g_object_new(SS_TYPE_ROW_SYNC, NULL);
    GByteArray **arr[] = {&q->token, &q->shards, &q->add_at, &q->add_rows, &q->add_delta,
                          &q->add_count, &q->get_at, &q->get_rows, &q->get_have};
    for (size_t a = 0; a < sizeof arr / sizeof *arr; a++)
        *arr[a] = g_byte_array_new();
    g_byte_array_append(q->token, (const guint8 *)tok, (guint)strlen(tok));
    g_byte_array_append(q->shards, (const guint8 *)shards, (guint)k * 4);
    uint32_t none = ROW_NONE, one = 1;
    float delta[8] = {0};
    for (int i = 0; i < n; i++) {
        g_byte_array_append(q->get_at, (const guint8 *)&at[i], 4);
        g_byte_array_append(q->get_rows, (const guint8 *)&row[i], 8);
        g_byte_array_append(q->get_have, (const guint8 *)&none, 4);
    }
    if (n_delta > 0) {
        g_byte_array_append(q->add_at, (const guint8 *)&at[0], 4);
        g_byte_array_append(q->add_rows, (const guint8 *)&row[0], 8);
        g_byte_array_append(q->add_delta, (const guint8 *)delta, (guint)n_delta * 4);
        g_byte_array_append(q->add_count, (const guint8 *)&one, 4);
    }
    q->__isset_token = q->__isset_shards = q->__isset_add_at = q->__isset_add_rows = TRUE;
    q->__isset_add_delta = q->__isset_add_count = q->__isset_get_at = TRUE;
    q->__isset_get_rows = q->__isset_get_have = q->__isset_bound = TRUE;
    ssRowAnswer *ret = g_object_new(SS_TYPE_ROW_ANSWER, NULL);
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    int rc = call_outcome(ss_embedding_p_s_client_rows(cl, &ret, q, &rerr, &gerr), &rerr, &gerr,
                          why);
    if (rc == 0 && (!ret->clocks || ret->clocks->len != (guint)n * 4 || !ret->rows ||
                    ret->rows->len != (guint)n * (DIM + 1) * 4))
        rc = 2, snprintf(why, 256, "an answer of the wrong size");
    g_object_unref(ret);
    g_object_unref(q);
    g_object_unref(cl);
    rpc_conn_close(conn);
    return rc;
}

/* A worker's embedding cache over two clocked PSs (pl), staleness 0, 12
 * rows (evicting, some ids uncached): it looks up as in-process tables
 * trained alone, and after a flush the PSs hold every update. Then raw
 * rows calls: the bad ones refused by name, a PS without clocks refuses. */
static void test_cache_over_thrift(const struct placement *pl, int plain_port)
{
    struct emb_opts base = opts();
    base.clocks = 1;
    struct emb_tables *local, *t0, *t1;
    int32_t *ids0, *ids1;
    int k0, k1;
    struct ss_err e = {0};
    int rc = embps_create(&local, &base, &e);
    rc |= embps_create_for_ps(&base, pl, 0, &t0, &ids0, &k0, &e);
    rc |= embps_create_for_ps(&base, pl, 1, &t1, &ids1, &k1, &e);
    struct embps_service *s0 = embps_service_create(t0, ids0, k0, token);
    struct embps_service *s1 = embps_service_create(t1, ids1, k1, token);
    struct rpc_server *v0, *v1;
    rc |= rpc_server_start(&v0, "127.0.0.1", 0, embps_service_processor(s0), &e);
    rc |= rpc_server_start(&v1, "127.0.0.1", 0, embps_service_processor(s1), &e);
    struct emb_endpoint ep[2] = {{"embedding_ps 0", "127.0.0.1", rpc_server_port(v0)},
                                 {"embedding_ps 1", "127.0.0.1", rpc_server_port(v1)}};
    struct emb_client *th = NULL, *plain = NULL;
    rc |= emb_client_thrift(&th, pl, DIM, WIRE_FP32, ep, token, 2000, &e);
    rc |= emb_client_thrift(&plain, pl, DIM, WIRE_FP32, ep, token, 2000, &e);
    struct ss_config c;
    struct model_layout l = {0};
    char *sets[] = {"embedding_cache.rows=12", "embedding_cache.staleness=0",
                    "optim.emb=rowwise_adagrad", "optim.emb_lr=0.1", "optim.eps=1e-8",
                    "model.dim=4", "model.rows=50,70,90,110", "data.cat_cols=1-4",
                    "model.bottom=13-4", "model.top=auto-8-1"};
    rc |= ss_config_load(&c, NULL, sets, sizeof sets / sizeof *sets, &e);
    rc |= model_layout_init(&l, &c, &e);
    CHECK(rc == 0, "two clocked PSs, a cache over them", "%s", e.msg);
    struct cache_stats st = {0};
    struct emb_client *cc = emb_client_cache(th, 1, &c, &l, N, &st);
    struct batch b;
    float got[N * T * DIM], want[N * T * DIM], g[N * T * DIM];
    double look = 0;
    for (int round = 0; rc == 0 && round < 20; round++) {
        make_batch(&b, 100 + (uint64_t)round % 4); /* batches come back: hits */
        uint64_t r = 50 + (uint64_t)round;
        for (int i = 0; i < N * T * DIM; i++)
            g[i] = (float)(ss_uniform(&r) - 0.5);
        rc = cc->ops->lookup(cc, &b, got, &e);
        embps_pool(local, &b, want);
        look = fmax(look, max_diff(got, want, N * T * DIM));
        rc = rc ? rc : cc->ops->push(cc, &b, g, &e);
        embps_push(local, &b, g);
        batch_free(&b);
    }
    rc = rc ? rc : cc->ops->flush(cc, &e);
    CHECK(rc == 0 && look < 1e-5 && st.hits > 0 && st.uncached > 0 && st.rows_pushed > 0,
          "cache over Thrift, staleness 0: lookups as in-process tables trained alone",
          "rc %d diff %g hits %lld uncached %lld: %s", rc, look, (long long)st.hits,
          (long long)st.uncached, e.msg);
    double after = 0;
    for (int k = 0; rc == 0 && k < 4; k++) {
        make_batch(&b, 100 + (uint64_t)k);
        rc = plain->ops->lookup(plain, &b, got, &e);
        embps_pool(local, &b, want);
        after = fmax(after, max_diff(got, want, N * T * DIM));
        batch_free(&b);
    }
    CHECK(rc == 0 && after < 1e-5, "after a flush the PSs hold every update", "rc %d diff %g",
          rc, after);
    /* a refused push leaves the other PS's answer unread: the connections
     * are made anew, so the next lookup reads its own answers */
    make_batch(&b, 100);
    b.lr_scale = 1.5f;
    int refused = plain->ops->push(plain, &b, g, &e) < 0 && strstr(e.msg, "lr_scale");
    b.lr_scale = 1;
    rc = plain->ops->lookup(plain, &b, got, &e);
    embps_pool(local, &b, want);
    CHECK(refused && rc == 0 && max_diff(got, want, N * T * DIM) < 1e-5,
          "after a refused call the client's next lookup reads its own answers", "refused %d "
          "rc %d diff %g: %s", refused, rc, max_diff(got, want, N * T * DIM), e.msg);
    batch_free(&b);
    struct embps_stats ps;
    embps_service_stats(s0, &ps);
    CHECK(ps.row_syncs > 0 && ps.rows_sent > 0 && ps.rows_added > 0,
          "a PS counts the rows calls, rows sent and deltas added", "%lld %lld %lld",
          (long long)ps.row_syncs, (long long)ps.rows_sent, (long long)ps.rows_added);

    /* PS 0's shards: table 0 [0,50), table 2 [0,45), table 3 [55,110) */
    char why[256];
    int32_t at_ok[2] = {0, 1}, at_bad[1] = {3};
    uint64_t row_ok[2] = {3, 44}, row_out[1] = {45};
    CHECK(raw_rows(ep[0].port, token, ids0, 3, 2, at_ok, row_ok, DIM + 1, why) == 0,
          "a raw rows call: two rows sent, one delta added", "%s", why);
    CHECK(raw_rows(ep[0].port, "nope", ids0, 3, 2, at_ok, row_ok, 0, why) == 1 &&
              strstr(why, "token"), "rows: a wrong token is refused", "%s", why);
    CHECK(raw_rows(ep[0].port, token, ids1, 3, 2, at_ok, row_ok, 0, why) == 1 &&
              strstr(why, "shards"), "rows: another PS's shards are refused", "%s", why);
    CHECK(raw_rows(ep[0].port, token, ids0, 3, 1, at_bad, row_ok, 0, why) == 1 &&
              strstr(why, "names shard 3"), "rows: a shard index past the PS's is refused", "%s",
          why);
    CHECK(raw_rows(ep[0].port, token, ids0, 3, 1, at_ok + 1, row_out, 0, why) == 1 &&
              strstr(why, "row 45") && strstr(why, "[0, 45)"),
          "rows: a row outside its shard is refused, naming it", "%s", why);
    CHECK(raw_rows(ep[0].port, token, ids0, 3, 1, at_ok, row_ok, DIM, why) == 1 &&
              strstr(why, "add_delta"), "rows: a delta of the wrong size is refused", "%s", why);
    CHECK(raw_rows(plain_port, token, ids0, 3, 1, at_ok, row_ok, 0, why) == 1 &&
              strstr(why, "clocks"), "rows asked of a PS without clocks: refused, saying why",
          "%s", why);
    CHECK(raw_rows(ep[0].port, token, ids0, 3, 1, at_ok, row_ok, 0, why) == 0,
          "rows: the service goes on after bad requests", "%s", why);
    cc->ops->free(cc);
    plain->ops->free(plain);
    rpc_server_stop(v0);
    rpc_server_stop(v1);
    embps_service_free(s0);
    embps_service_free(s1);
    embps_free(t0);
    embps_free(t1);
    embps_free(local);
    free(ids0);
    free(ids1);
    model_layout_free(&l);
    ss_config_free(&c);
}

/* A plain socket to port; reads and writes time out after 3 s. */
static int raw_socket(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Seconds until the server closed fd (EOF or a reset), or -1 if it had
 * not within 3 s; what it answered before goes to got[cap]. */
static double closed_after(int fd, char *got, size_t cap)
{
    double t0 = ss_now();
    size_t have = 0;
    for (;;) {
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return ss_now() - t0;
        if (n < 0)
            return -1; /* the 3 s timeout */
        for (ssize_t i = 0; i < n && have + 1 < cap; i++)
            got[have++] = buf[i] ? buf[i] : ' ';
        got[have] = 0;
    }
}

/* A lookup's first bytes by hand: the message header, the Bags struct and
 * its token field; then the header of its ids field claiming ids_bytes. */
static size_t lookup_head(uint8_t *m, const char *tok, uint32_t ids_bytes)
{
    size_t at = 0;
#define PUT32(v) do { uint32_t x_ = htonl((uint32_t)(v)); memcpy(m + at, &x_, 4); at += 4; } while (0)
#define PUT16(v) do { uint16_t x_ = htons((uint16_t)(v)); memcpy(m + at, &x_, 2); at += 2; } while (0)
    PUT32(0x80010001u);
    PUT32(6);
    memcpy(m + at, "lookup", 6), at += 6;
    PUT32(1);                                   /* seqid */
    m[at++] = 12;                               /* arg 1: Bags */
    PUT16(1);
    m[at++] = 11;                               /* Bags.token */
    PUT16(1);
    PUT32(strlen(tok));
    memcpy(m + at, tok, strlen(tok)), at += strlen(tok);
    m[at++] = 11;                               /* Bags.ids */
    PUT16(5);
    PUT32(ids_bytes);
#undef PUT32
#undef PUT16
    return at;
}

/* A guarded server (rpc_server_start_guarded, deadlines of 0.5 s, 4
 * slots) over PS 0's service: half-sent connections are closed; idle ones
 * are not, but with the slots full the newest tokenless one makes room;
 * the job's stay open idle; a message claims at most 1 MiB before the
 * token; the accept thread outlives running out of file descriptors. */
static void test_guard(struct embps_service *s0, const int32_t *ids0)
{
    struct rpc_guard g = {"embedding_ps 9", token, 0.5, 0, 4};
    struct rpc_server *v;
    struct ss_err e = {0};
    int rc = rpc_server_start_guarded(&v, "127.0.0.1", 0, embps_service_processor(s0), &g, &e);
    CHECK(rc == 0, "a guarded server listens", "%s", e.msg);
    int port = rpc_server_port(v);
    char got[4096] = "", why[256] = "";
    int32_t off_one[4] = {0, 0, 1, 1};
    uint64_t row_in[1] = {44};
    struct rpc_conn *conn;
    int silent[4];
    for (int i = 0; i < 4; i++) { /* every slot: idle, no token, older than the deadline */
        silent[i] = raw_socket(port);
        usleep(50 * 1000);
    }
    usleep(700 * 1000);
    char one;
    int open_all = 1;
    for (int i = 0; i < 4; i++)
        open_all &= recv(silent[i], &one, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
    rc = rpc_connect("127.0.0.1", port, 2000, &conn, &e);
    rc |= bags_on(conn, token, ids0, 3, 1, off_one, 4, row_in, 0, 0, why);
    rpc_conn_close(conn);
    double took = closed_after(silent[3], got, sizeof got);
    int kept = recv(silent[0], &one, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
    for (int i = 0; i < 4; i++)
        close(silent[i]);
    CHECK(open_all && rc == 0 && took >= 0 && took < 0.5 && kept,
          "idle tokenless connections stay open; with the slots full the newest makes room for a "
          "new client", "open %d rc %d (%s %s) newest closed after %.2f s, oldest kept %d",
          open_all, rc, e.msg, why, took, kept);
    uint8_t m[256];
    size_t len = lookup_head(m, token, 0);
    usleep(100 * 1000); /* the closed ones' slots free */
    int fd = raw_socket(port);
    send(fd, m, len / 2, 0); /* a request begun, never finished (slow-loris) */
    took = closed_after(fd, got, sizeof got);
    close(fd);
    CHECK(took >= 0.4 && took < 2, "a request begun and not finished is closed at its deadline",
          "closed after %.2f s", took);
    rc = rpc_connect("127.0.0.1", port, 2000, &conn, &e);
    rc |= bags_on(conn, token, ids0, 3, 1, off_one, 4, row_in, 0, 0, why);
    usleep(1200 * 1000);
    rc |= bags_on(conn, token, ids0, 3, 1, off_one, 4, row_in, 0, 0, why);
    rpc_conn_close(conn);
    CHECK(rc == 0, "a connection that sent the job's token may idle past the deadline", "%s %s",
          e.msg, why);

    /* ids claimed at 8 MiB without the token: refused as its length is
     * read (the server held what arrived, up to 1 GiB a field) */
    len = lookup_head(m, "not-the-token", 8u << 20);
    fd = raw_socket(port);
    send(fd, m, len, 0);
    took = closed_after(fd, got, sizeof got);
    close(fd);
    CHECK(took >= 0 && took < 0.4, "a tokenless request claiming 8 MiB is cut off at once",
          "closed after %.2f s", took);
    /* ...while one with the token sends 2 MiB and is refused by the handler */
    len = lookup_head(m, token, 2u << 20);
    uint8_t *zeros = ss_xcalloc(2u << 20, 1);
    fd = raw_socket(port);
    int sent = send(fd, m, len, 0) == (ssize_t)len &&
               send(fd, zeros, 2u << 20, MSG_NOSIGNAL) == (ssize_t)(2u << 20);
    uint8_t stop = 0; /* the struct's and the args' T_STOP */
    send(fd, &stop, 1, 0), send(fd, &stop, 1, 0);
    shutdown(fd, SHUT_WR);
    closed_after(fd, got, sizeof got);
    close(fd);
    free(zeros);
    CHECK(sent && strstr(got, "bad request"), "a request with the token may hold more than "
          "1 MiB (refused by the handler, not cut off)", "sent %d, answer \"%.200s\"", sent, got);

    /* out of file descriptors (EMFILE): accept fails, says so once and
     * tries again; once some are free, the waiting client is served */
    fflush(stderr);
    char log[] = "/tmp/ss_test_rpc_log.XXXXXX";
    int lf = mkstemp(log), saved = dup(2);
    dup2(lf, 2);
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = 256;
    setrlimit(RLIMIT_NOFILE, &low);
    int fill[256], nf = 0;
    while (nf < 256 && (fill[nf] = open("/dev/null", O_RDONLY)) >= 0)
        nf++;
    close(fill[--nf]); /* room for the client's socket alone */
    fd = raw_socket(port); /* (an accept already waiting has its descriptor: the next fails) */
    usleep(400 * 1000);
    while (nf > 0)
        close(fill[--nf]);
    conn = rpc_conn_on_fd(fd);
    rc = bags_on(conn, token, ids0, 3, 1, off_one, 4, row_in, 0, 0, why);
    rpc_conn_close(conn);
    if (rc == 0 && (rc = rpc_connect("127.0.0.1", port, 2000, &conn, &e)) == 0) {
        rc = bags_on(conn, token, ids0, 3, 1, off_one, 4, row_in, 0, 0, why);
        rpc_conn_close(conn);
    }
    setrlimit(RLIMIT_NOFILE, &old);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[4096] = "";
    ssize_t n = pread(lf, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    close(lf);
    unlink(log);
    int warnings = 0;
    for (const char *q = text; (q = strstr(q, "cannot accept")); q++)
        warnings++;
    CHECK(fd >= 0 && rc == 0 && warnings == 1 &&
              strstr(text, "shadowsync: embedding_ps 9: cannot accept a connection: Too many "
                     "open files"),
          "out of file descriptors: one warning naming the service, then the clients are served",
          "fd %d rc %d (%s), %d warnings: %s", fd, rc, why, warnings, text);
    rpc_server_stop(v);
}

/* A guarded server whose deadline (3 s) is longer than a new connection's
 * moment to show the token (1 s), its 4 slots full of strangers' that are
 * past that moment, 3 idle and 1 in a request begun without the token (issue
 * 30, D3): the job's next client is served at once, the newest stranger
 * closed for it, the one in a request counted as a stranger too. */
static void test_room_at_once(struct embps_service *s0, const int32_t *ids0)
{
    struct rpc_guard g = {"embedding_ps 8", token, 3, 0, 4};
    struct rpc_server *v;
    struct ss_err e = {0};
    int rc = rpc_server_start_guarded(&v, "127.0.0.1", 0, embps_service_processor(s0), &g, &e);
    CHECK(rc == 0, "a guarded server listens", "%s", e.msg);
    int port = rpc_server_port(v), silent[4];
    uint8_t m[256];
    size_t len = lookup_head(m, "not-the-token", 0);
    for (int i = 0; i < 4; i++) {
        silent[i] = raw_socket(port);
        usleep(50 * 1000);
    }
    send(silent[3], m, len / 2, 0); /* the newest: a request begun, no token in it */
    usleep(1100 * 1000);
    char got[4096] = "", why[256] = "", one;
    int32_t off_one[4] = {0, 0, 1, 1};
    uint64_t row_in[1] = {44};
    struct rpc_conn *conn;
    double t0 = ss_now();
    rc = rpc_connect("127.0.0.1", port, 2000, &conn, &e);
    rc |= bags_on(conn, token, ids0, 3, 1, off_one, 4, row_in, 0, 0, why);
    rpc_conn_close(conn);
    double served = ss_now() - t0, took = closed_after(silent[3], got, sizeof got);
    int kept = recv(silent[0], &one, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
    for (int i = 0; i < 4; i++)
        close(silent[i]);
    CHECK(rc == 0 && served < 0.5 && took >= 0 && took < 0.5 && kept,
          "slots full of strangers' connections 1 s old, within the 3 s deadline: the job's "
          "client is served at once, the newest stranger closed for it",
          "rc %d (%s %s) served in %.2f s, newest closed after %.2f s, oldest kept %d", rc, e.msg,
          why, served, took, kept);
    rpc_server_stop(v);
}

/* EmbeddingPS.save over the wire. */
static int raw_save(int port, const char *tok, const char *path, char *why)
{
    struct rpc_conn *conn;
    struct ss_err e;
    if (rpc_connect("127.0.0.1", port, 2000, &conn, &e) < 0)
        return -1;
    ThriftProtocol *p = rpc_conn_protocol(conn);
    ssEmbeddingPSIf *cl = g_object_new(SS_TYPE_EMBEDDING_P_S_CLIENT, "input_protocol", p,
                                       "output_protocol", p, NULL);
    GByteArray *t = g_byte_array_new();
    g_byte_array_append(t, (const guint8 *)tok, (guint)strlen(tok));
    gint64 bytes = 0;
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    int rc = call_outcome(ss_embedding_p_s_client_save(cl, &bytes, t, path, &rerr, &gerr), &rerr,
                          &gerr, why);
    g_byte_array_unref(t);
    g_object_unref(cl);
    rpc_conn_close(conn);
    return rc;
}

/* embedding.wire's forms: each value back within its form's precision
 * (bf16: 2^-8 of itself; fp16: 2^-11 of itself, or of the largest value
 * past 2^-24 below it), gradients far below fp16's range kept by the scale,
 * infinities and NaNs kept, and a blob of the wrong size or scale refused. */
static void test_wire_codec(void)
{
    enum { M = 1000 };
    float v[M], back[M];
    uint8_t blob[4 * M + 4];
    uint64_t r = 3;
    for (int i = 0; i < M; i++)
        v[i] = (float)((ss_uniform(&r) - 0.5) * pow(10, -(i % 9))); /* 0.5 down to 5e-9 */
    for (int form = WIRE_FP16; form <= WIRE_BF16; form++) {
        wire_encode(form, v, M, blob);
        int rc = wire_decode(form, blob, wire_bytes(form, M), back, M);
        double worst = 0, amax = 0;
        for (int i = 0; i < M; i++)
            amax = fmax(amax, fabs(v[i]));
        for (int i = 0; i < M; i++) {
            double tol = form == WIRE_BF16 ? fabs(v[i]) / 256 : fmax(fabs(v[i]) / 2048, amax * 0x1p-39);
            worst = fmax(worst, fabs(back[i] - v[i]) / (tol > 0 ? tol : 1));
        }
        CHECK(rc == 0 && worst <= 1 && wire_bytes(form, M) < 4 * M / 2 + 8,
              "embedding.wire fp16 / bf16: half the bytes, each value within its form's precision",
              "form %d rc %d worst %.3g of its bound", form, rc, worst);
        float tiny[3] = {3e-9f, -7e-10f, 1e-9f}, t2[3];
        wire_encode(form, tiny, 3, blob);
        wire_decode(form, blob, wire_bytes(form, 3), t2, 3);
        CHECK(fabs(t2[0] - 3e-9) < 3e-11 && fabs(t2[1] + 7e-10) < 1e-11,
              "gradients far below fp16's normal range keep their value (the scale)",
              "form %d: %g %g", form, t2[0], t2[1]);
        float odd[4] = {INFINITY, NAN, -2.5f, 0}, o2[4];
        wire_encode(form, odd, 4, blob);
        wire_decode(form, blob, wire_bytes(form, 4), o2, 4);
        CHECK(isinf(o2[0]) && o2[0] > 0 && isnan(o2[1]) && o2[2] == -2.5f && o2[3] == 0,
              "an infinity, a NaN, -2.5 and 0 come back as they were", "form %d: %g %g %g %g",
              form, o2[0], o2[1], o2[2], o2[3]);
        CHECK(wire_decode(form, blob, wire_bytes(form, 4) - 2, o2, 4) < 0,
              "a blob of the wrong size is refused", "form %d", form);
    }
    float zero = 0, neg = -1;
    memcpy(blob, &zero, 4);
    int bad0 = wire_decode(WIRE_FP16, blob, wire_bytes(WIRE_FP16, 2), back, 2);
    memcpy(blob, &neg, 4);
    CHECK(bad0 < 0 && wire_decode(WIRE_FP16, blob, wire_bytes(WIRE_FP16, 2), back, 2) < 0,
          "an fp16 blob whose scale is 0 or negative is refused", "%d", bad0);
}

/* The trainer's client in fp16 and in bf16 over the same PSs: its lookups
 * match in-process pooling within the form's precision, before and after
 * pushes in that form (uint32 ids: these tables' rows fit). */
static void test_wire_forms(const struct placement *pl, const struct emb_endpoint *ep,
                            struct emb_tables *local, struct batch *b)
{
    float got[N * T * DIM], want[N * T * DIM], g[N * T * DIM];
    uint64_t r = 21;
    for (int i = 0; i < N * T * DIM; i++)
        g[i] = (float)(ss_uniform(&r) - 0.5) * 1e-3f;
    for (int form = WIRE_FP16; form <= WIRE_BF16; form++) {
        struct emb_client *cl;
        struct ss_err e = {0};
        int rc = emb_client_thrift(&cl, pl, DIM, form, ep, token, 2000, &e);
        double worst = 0;
        for (int round = 0; rc == 0 && round < 3; round++) {
            rc = cl->ops->lookup(cl, b, got, &e);
            embps_pool(local, b, want);
            double amax = 0;
            for (int i = 0; i < N * T * DIM; i++)
                amax = fmax(amax, fabs(want[i]));
            worst = fmax(worst, max_diff(got, want, N * T * DIM) / amax);
            if (rc == 0)
                rc = cl->ops->push(cl, b, g, &e);
            embps_push(local, b, g);
        }
        CHECK(rc == 0 && worst < (form == WIRE_BF16 ? 1e-2 : 2e-3),
              "lookups and pushes in fp16 / bf16 over two PSs match in-process tables within "
              "the form's precision", "form %d rc %d worst %g: %s", form, rc, worst, e.msg);
        cl->ops->free(cl);
    }
}

int main(void)
{
    test_wire_codec();
    signal(SIGPIPE, SIG_IGN);
    rpc_types_init();
    struct ss_err e = {0};
    struct table_profile tp[T];
    for (int t = 0; t < T; t++)
        placement_uniform(&tp[t], rows[t], DIM, 1);
    struct placement pl;
    int rc = placement_make(&pl, PLACE_ROUND_ROBIN, tp, T, 2, 1024,
                            "0:0, 2@0-45:0, 3@55-110:0, 1:1, 2@45-90:1, 3@0-55:1", &e);
    CHECK(rc == 0 && pl.n_shards == 6, "a plan pinned by row ranges: 6 shards", "rc %d: %s", rc,
          e.msg);
    struct emb_opts base = opts();
    struct emb_tables *local, *t0, *t1;
    int32_t *ids0, *ids1;
    int k0, k1;
    rc = embps_create(&local, &base, &e);
    rc |= embps_create_for_ps(&base, &pl, 0, &t0, &ids0, &k0, &e);
    rc |= embps_create_for_ps(&base, &pl, 1, &t1, &ids1, &k1, &e);
    CHECK(rc == 0 && k0 == 3 && k1 == 3, "each PS builds its 3 shards", "%s", e.msg);
    struct embps_service *s0 = embps_service_create(t0, ids0, k0, token);
    struct embps_service *s1 = embps_service_create(t1, ids1, k1, token);
    struct rpc_server *v0, *v1;
    rc = rpc_server_start(&v0, "127.0.0.1", 0, embps_service_processor(s0), &e);
    rc |= rpc_server_start(&v1, "127.0.0.1", 0, embps_service_processor(s1), &e);
    CHECK(rc == 0 && rpc_server_port(v0) > 0, "two PS servers listen on free ports", "%s", e.msg);
    struct emb_endpoint ep[2] = {{"embedding_ps 0", "127.0.0.1", rpc_server_port(v0)},
                                 {"embedding_ps 1", "127.0.0.1", rpc_server_port(v1)}};
    struct emb_client *cl;
    rc = emb_client_thrift(&cl, &pl, DIM, WIRE_FP32, ep, token, 2000, &e);
    CHECK(rc == 0, "the trainer's client connects to both", "%s", e.msg);

    struct batch b;
    make_batch(&b, 5);
    float got[N * T * DIM], want[N * T * DIM], g[N * T * DIM];
    uint64_t r = 9;
    for (int i = 0; i < N * T * DIM; i++)
        g[i] = (float)(ss_uniform(&r) - 0.5);
    for (int round = 0; round < 3; round++) {
        b.lr_scale = 1.0f / (float)(1 << round); /* the rates' schedule travels with the push */
        rc = cl->ops->lookup(cl, &b, got, &e);
        embps_pool(local, &b, want);
        CHECK(rc == 0 && max_diff(got, want, N * T * DIM) < 1e-6,
              "lookup over two PSs = in-process pooling (split tables, partial sums, empty bags)",
              "rc %d diff %g: %s", rc, max_diff(got, want, N * T * DIM), e.msg);
        rc = cl->ops->push(cl, &b, g, &e);
        embps_push(local, &b, g);
        CHECK(rc == 0, "push over two PSs", "%s", e.msg);
    }

    char why[256];
    int32_t off_ok[3 * 1 + 1] = {0, 0, 0, 0};
    uint64_t none[8] = {0}; /* ids enough for any offsets below */
    rc = raw_lookup(ep[0].port, "not-the-token", ids0, 3, 1, off_ok, 4, none, why);
    CHECK(rc == 1 && strstr(why, "token"), "a wrong token is refused", "rc %d: %s", rc, why);
    rc = raw_lookup(ep[0].port, token, ids1, 3, 1, off_ok, 4, none, why);
    CHECK(rc == 1 && strstr(why, "shards"), "shards this PS does not hold are refused", "%s", why);
    int32_t off_bad[4] = {0, 5, 2, 2};
    rc = raw_lookup(ep[0].port, token, ids0, 3, 1, off_bad, 4, none, why);
    CHECK(rc == 1 && strstr(why, "offsets"), "offsets out of order are refused", "%s", why);
    rc = raw_lookup(ep[0].port, token, ids0, 3, -3, off_ok, 4, none, why);
    CHECK(rc == 1 && strstr(why, "n = -3"), "a negative example count is refused", "%s", why);
    /* PS 0's shards: table 0 [0,50), table 2 [0,45), table 3 [55,110) */
    int32_t off_one[4] = {0, 0, 1, 1};
    uint64_t row_out[1] = {45}, row_in[1] = {44}, row_far[1] = {1ull << 40};
    rc = raw_lookup(ep[0].port, token, ids0, 3, 1, off_one, 4, row_out, why);
    CHECK(rc == 1 && strstr(why, "row 45") && strstr(why, "[0, 45)"),
          "a row outside its shard is refused, naming it and the range", "%s", why);
    rc = raw_lookup(ep[0].port, token, ids0, 3, 1, off_one, 4, row_far, why);
    CHECK(rc == 1 && strstr(why, "out of shard"), "a row past the whole table is refused", "%s",
          why);
    const double bad_scale[3] = {1.5, -0.5, NAN};
    for (int i = 0; i < 3; i++) {
        rc = raw_bags(ep[0].port, token, ids0, 3, 1, off_one, 4, row_in, 1, bad_scale[i], why);
        CHECK(rc == 1 && strstr(why, "lr_scale") && strstr(why, "is not in [0, 1]"),
              "a push at a learning-rate factor outside [0, 1] (1.5, -0.5, NaN) is refused, "
              "naming it", "%g: %s", bad_scale[i], why);
    }
    rc = raw_bags(ep[0].port, token, ids0, 3, 1, off_one, 4, row_in, 1, 0.5, why);
    CHECK(rc == 0, "a push at a factor in [0, 1] is taken", "%s", why);
    rc = raw_lookup(ep[0].port, token, ids0, 3, 1, off_one, 4, row_in, why);
    CHECK(rc == 0, "the service goes on serving after bad requests", "%s", why);
    struct embps_stats st;
    embps_service_stats(s0, &st);
    CHECK(st.refused == 9 && st.lookups == 4 && st.pushes == 4 && st.busy_s > 0,
          "refusals, calls and busy time are counted",
          "refused %lld lookups %lld pushes %lld", (long long)st.refused, (long long)st.lookups,
          (long long)st.pushes);
    /* a push may reuse its connection's last lookup's bags (sending none again): only right
     * after that lookup, once */
    rc = raw_bags(ep[0].port, token, ids0, 3, 1, off_one, 4, row_in, 2, 1, why);
    CHECK(rc == 1 && strstr(why, "has not just made"),
          "a push reusing a lookup its connection never made is refused", "%d: %s", rc, why);
    struct rpc_conn *rconn;
    rc = rpc_connect("127.0.0.1", ep[0].port, 2000, &rconn, &e);
    int r1 = rc < 0 ? -1 : bags_on(rconn, token, ids0, 3, 1, off_one, 4, row_in, 0, 0, why);
    int r2 = rc < 0 ? -1 : bags_on(rconn, token, ids0, 3, 1, off_one, 4, row_in, 2, 1, why);
    int r3 = rc < 0 ? -1 : bags_on(rconn, token, ids0, 3, 1, off_one, 4, row_in, 2, 1, why);
    if (rc == 0)
        rpc_conn_close(rconn);
    CHECK(r1 == 0 && r2 == 0 && r3 == 1 && strstr(why, "has not just made"),
          "a push right after its lookup may reuse its bags, a second one may not",
          "%d %d %d: %s", r1, r2, r3, why);

    /* save: each PS writes its shards; both files load into whole tables
     * (another split of the same tables) equal to the in-process ones */
    char dir[] = "/tmp/ss_test_rpc.XXXXXX", f0[64], f1[64];
    mkdtemp(dir);
    snprintf(f0, sizeof f0, "%s/tables-ps0.bin", dir);
    snprintf(f1, sizeof f1, "%s/tables-ps1.bin", dir);
    CHECK(raw_save(ep[0].port, "nope", f0, why) == 1 && strstr(why, "token"),
          "save with a wrong token is refused", "%s", why);
    CHECK(raw_save(ep[0].port, token, f0, why) == 1 && strstr(why, "path"),
          "save without a checkpoint.dir is refused", "%s", why);
    char out[64], model[80], fm[112]; /* the model's folder: output.dir/model, not yet made */
    snprintf(out, sizeof out, "%s-out", dir);
    snprintf(model, sizeof model, "%s/model", out);
    snprintf(fm, sizeof fm, "%s/tables-ps0.bin", model);
    embps_service_save_root(s0, dir, model);
    CHECK(raw_save(ep[0].port, token, fm, why) == 0 && access(fm, F_OK) == 0,
          "save into the model's folder (output.dir/model) is written, the folder made", "%s",
          why);
    unlink(fm);
    rmdir(model);
    rmdir(out);
    embps_service_save_root(s1, dir, NULL);
    char dotdot[128];
    snprintf(dotdot, sizeof dotdot, "%s/../x.bin", dir);
    CHECK(raw_save(ep[0].port, token, dotdot, why) == 1 && strstr(why, "path"),
          "save to a path with .. is refused", "%s", why);
    CHECK(raw_save(ep[0].port, token, "/tmp/elsewhere.bin", why) == 1 && strstr(why, "path"),
          "save outside the checkpoint directory is refused", "%s", why);
    rc = raw_save(ep[0].port, token, f0, why) | raw_save(ep[1].port, token, f1, why);
    struct emb_tables *whole;
    char *files[2] = {f0, f1};
    rc |= embps_create(&whole, &base, &e) | embps_load_files(whole, files, 2, &e);
    float from_files[N * T * DIM];
    embps_pool(whole, &b, from_files);
    embps_pool(local, &b, want);
    CHECK(rc == 0 && max_diff(from_files, want, N * T * DIM) < 1e-6,
          "the PSs' saved shards load into whole tables equal to the in-process ones",
          "rc %d diff %g: %s %s", rc, max_diff(from_files, want, N * T * DIM), why, e.msg);
    char *one[1] = {f0};
    struct emb_tables *whole2;
    embps_create(&whole2, &base, &e);
    rc = embps_load_files(whole2, one, 1, &e);
    CHECK(rc < 0 && strstr(e.msg, "rows") && strstr(e.msg, "found"),
          "shards that do not cover a table are refused, naming it", "%s", e.msg);
    FILE *ff = fopen(f0, "r+b"); /* its header's table count (after magic and version) */
    uint32_t huge = UINT32_MAX;
    int patched = ff && fseek(ff, 12, SEEK_SET) == 0 && fwrite(&huge, 4, 1, ff) == 1;
    if (ff)
        fclose(ff);
    rc = embps_load_files(whole2, one, 1, &e);
    CHECK(patched && rc < 0 && strstr(e.msg, "counts 4294967295 tables") && !strstr(e.msg, "dim"),
          "a tables file counting 2^32-1 tables is refused for its count, not its dim", "%s",
          e.msg);
    embps_free(whole);
    embps_free(whole2);
    unlink(f0);
    unlink(f1);
    rmdir(dir);

    test_wire_forms(&pl, ep, local, &b);
    test_cache_over_thrift(&pl, ep[0].port);
    test_guard(s0, ids0);
    test_room_at_once(s0, ids0);

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
    free(ids0);
    free(ids1);
    placement_free(&pl);
    batch_free(&b);
    CHECK_DONE();
}
