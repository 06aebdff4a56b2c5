/* The reader service and the trainer's prefetch queue on loopback: two
 * readers, each with its share of one generated file, feed every example
 * exactly once to the worker threads of three trainers' queues at once
 * (each service parses their calls in parallel) while saves of its
 * position go through; a wrong token and a bad max are refused while the
 * service serves on. */
#include "check.h"
#include "rpc_check.h"
#include "shadowsync/reader.h"
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 3000
static const char *token = "aaaabbbbccccddddaaaabbbbccccdddd";
#define FEEDS 3
static struct batch_feed *feed[FEEDS];
static int workers_left = 2 * FEEDS;
static uint64_t seen[N + 64];
static int n_seen, bad;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
    struct batch_feed *f = arg;
    struct batch b;
    batch_init(&b, 100, 13, 26);
    struct ss_err e;
    for (;;) {
        batch_clear(&b);
        if (feed_next(f, &b, &e) < 0) {
            __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
            break;
        }
        if (b.n == 0)
            break;
        pthread_mutex_lock(&mu);
        for (int i = 0; i < b.n && n_seen < N + 64; i++)
            seen[n_seen++] = b.example_id[i];
        pthread_mutex_unlock(&mu);
    }
    batch_free(&b);
    __atomic_fetch_sub(&workers_left, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int pause_returned;

static void *pause_feed(void *arg)
{
    feed_pause(arg, 1, 30, NULL); /* returns once no pull is in flight */
    __atomic_store_n(&pause_returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* One next_batch (max examples) or, with save_to, one save call to the
 * service at port: 0, 1 refused (why), or -1. */
static int raw_call(int port, const char *tok, int max, const char *save_to, char *why)
{
    struct rpc_conn *conn;
    struct ss_err e;
    if (rpc_connect("127.0.0.1", port, 2000, &conn, &e) < 0)
        return -1;
    ThriftProtocol *p = rpc_conn_protocol(conn);
    ssReaderIf *cl = g_object_new(SS_TYPE_READER_CLIENT, "input_protocol", p,
                                  "output_protocol", p, NULL);
    GByteArray *t = g_byte_array_new();
    g_byte_array_append(t, (const guint8 *)tok, (guint)strlen(tok));
    ssBatchReply *reply = g_object_new(SS_TYPE_BATCH_REPLY, NULL);
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    gint64 bytes = 0;
    int rc = call_outcome(save_to ? ss_reader_client_save(cl, &bytes, t, save_to, &rerr, &gerr)
                                  : ss_reader_client_next_batch(cl, &reply, t, max, &rerr, &gerr),
                          &rerr, &gerr, why);
    g_object_unref(reply);
    g_byte_array_unref(t);
    g_object_unref(cl);
    rpc_conn_close(conn);
    return rc;
}

static int raw_next(int port, const char *tok, int max, char *why)
{
    return raw_call(port, tok, max, NULL, why);
}

/* Issue 30's D1: the workers are gone (one failed), the queue is full and
 * the feed holds a pulled batch waiting for room. A checkpoint's pause used
 * to wait on that pull for ever: now it fails past its deadline naming the
 * reader, and once the failed worker stops the feed it returns at once. */
static void stuck_feed(const char *path, struct schema *s, struct reader_endpoint *ep)
{
    struct reader *r[2];
    struct reader_service *svc[2];
    struct rpc_server *srv[2];
    struct ss_err e = {0};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        rc |= reader_open(&r[k], path, s, 0, 0, &e);
        reader_set_share(r[k], k, 2, SPLIT_LINES, NULL);
        svc[k] = reader_service_create(r[k], s->n_dense, s->n_cat, token);
        rc |= rpc_server_start(&srv[k], "127.0.0.1", 0, reader_service_processor(svc[k]), &e);
        ep[k].port = rpc_server_port(srv[k]);
    }
    struct batch_feed *f = NULL;
    rc |= feed_start(&f, ep, 2, token, 50, 2, 2000, NULL, &e);
    CHECK(rc == 0, "a prefetch queue of depth 2 that nobody drains", "%s", e.msg);
    if (rc != 0)
        return;
    usleep(300000); /* 2 batches queued, a third pulled and waiting for room */
    double t0 = ss_now();
    rc = feed_pause(f, 1, 1.0, &e);
    double waited = ss_now() - t0;
    CHECK(rc < 0 && waited > 0.9 && waited < 3 && strstr(e.msg, "reader ") &&
              strstr(e.msg, "did not come"),
          "a pause whose pull never ends fails past its deadline, naming the reader",
          "rc %d after %.2f s: %s", rc, waited, e.msg);
    feed_pause(f, 0, 0, NULL);
    feed_stop(f); /* as a failed worker does */
    t0 = ss_now();
    rc = feed_pause(f, 1, 10.0, &e);
    waited = ss_now() - t0;
    CHECK(rc == 0 && waited < 1, "once a failed worker stops the feed, a pause returns at once",
          "rc %d after %.2f s: %s", rc, waited, e.msg);
    feed_free(f);
    for (int k = 0; k < 2; k++) {
        rpc_server_stop(srv[k]);
        reader_service_free(svc[k]);
        reader_close(r[k]);
    }
}

/* A feed state (feed-K.pos) whose count is past its reader's (the
 * reader-svc-K.pos beside it), or that is no state, is refused, named;
 * the good one is put back. */
static void refused_states(const char *state, const struct reader_endpoint *ep,
                           const struct reader_pos *at)
{
    char *good = NULL;
    g_file_get_contents(state, &good, NULL, NULL);
    char past[200];
    snprintf(past, sizeof past, "shadowsync feed 1\nreaders 2\nnext_reader 0\nhanded 0 %lld\n",
             (long long)(at[1].handed + at[1].bad_lines) + 1);
    const char *bad[2] = {past, "shadowsync feed 1\nreaders 2\nnext_reader 0\nhanded 5 x\n"};
    const char *want[2] = {"reader 1's count", "not a feed state"};
    for (int i = 0; i < 2; i++) {
        struct batch_feed *f = NULL;
        struct ss_err e = {0};
        g_file_set_contents(state, bad[i], -1, NULL);
        int rc = feed_start(&f, ep, 2, token, 50, 3, 2000, state, &e);
        CHECK(rc == SS_EFORMAT && !f && strstr(e.msg, state) && strstr(e.msg, want[i]),
              i ? "a feed state that is none is refused, named"
                : "a feed state counting past its reader's examples is refused, named",
              "rc %d: %s", rc, e.msg);
    }
    g_file_set_contents(state, good ? good : "", -1, NULL);
    g_free(good);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    rpc_types_init();
    char dir[] = "/tmp/ss_test_feed.XXXXXX";
    if (!mkdtemp(dir))
        return 2;
    int64_t card[26];
    for (int t = 0; t < 26; t++)
        card[t] = 100;
    struct gen_opts g = {.out_dir = dir, .examples = N, .eval_examples = 10, .seed = 3,
                         .n_dense = 13, .n_tables = 26, .cardinality = card};
    double bayes;
    struct ss_err e = {0};
    CHECK(gen_write(&g, &bayes, &e) == 0, "data generated", "%s", e.msg);
    char path[256];
    snprintf(path, sizeof path, "%s/train.tsv", dir);
    struct ss_config c;
    ss_config_load(&c, NULL, NULL, 0, &e);
    struct schema s;
    schema_from_config(&s, &c, path, &e);
    struct reader *r[2];
    struct reader_service *svc[2];
    struct rpc_server *srv[2];
    struct reader_endpoint ep[2];
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        rc |= reader_open(&r[k], path, &s, 0, 0, &e);
        reader_set_share(r[k], k, 2, SPLIT_LINES, NULL);
        svc[k] = reader_service_create(r[k], s.n_dense, s.n_cat, token);
        reader_service_save_root(svc[k], dir);
        rc |= rpc_server_start(&srv[k], "127.0.0.1", 0, reader_service_processor(svc[k]), &e);
        ep[k] = (struct reader_endpoint){k ? "reader 1" : "reader 0", "127.0.0.1",
                                         rpc_server_port(srv[k])};
    }
    CHECK(rc == 0, "two reader services listen", "%s", e.msg);

    char why[256];
    CHECK(raw_next(ep[0].port, "nope", 10, why) == 1 && strstr(why, "token"),
          "a wrong token is refused", "%s", why);
    CHECK(raw_next(ep[0].port, token, 0, why) == 1 && strstr(why, "max = 0"),
          "a bad max is refused", "%s", why);

    for (int f = 0; f < FEEDS; f++)
        rc |= feed_start(&feed[f], ep, 2, token, 7 + 31 * f, 3, 2000, NULL, &e);
    CHECK(rc == 0, "3 prefetch queues connect to both readers", "%s", e.msg);
    pthread_t th[2 * FEEDS];
    for (int k = 0; k < 2 * FEEDS; k++)
        pthread_create(&th[k], NULL, worker, feed[k / 2]);
    char pos[300];
    snprintf(pos, sizeof pos, "%s/reader.pos", dir);
    int saves = 0, save_failed = 0;
    while (__atomic_load_n(&workers_left, __ATOMIC_ACQUIRE) > 0 && saves < 50) {
        save_failed |= raw_call(ep[saves % 2].port, token, 0, pos, why) != 0;
        saves++;
    }
    for (int k = 0; k < 2 * FEEDS; k++)
        pthread_join(th[k], NULL);
    qsort(seen, (size_t)n_seen, sizeof *seen, cmp);
    int dup = 0;
    for (int i = 1; i < n_seen; i++)
        dup += seen[i] == seen[i - 1];
    CHECK(!bad && n_seen == N && dup == 0,
          "6 workers of 3 queues, calling each service at once, get every example of the 2 shares once",
          "seen %d of %d, %d repeated, failed %d", n_seen, N, dup, bad);
    struct reader *back;
    int loaded = reader_open(&back, path, &s, 0, 0, &e) == 0 &&
                 reader_load_pos(back, pos, &e) == 0;
    if (loaded)
        reader_close(back);
    CHECK(saves > 0 && !save_failed && loaded,
          "saves of the position go through while the calls stream, and load back",
          "%d saves, failed %d, %s", saves, save_failed, e.msg);
    int64_t served, examples, refused;
    reader_service_counts(svc[0], &served, &examples, &refused);
    CHECK(refused == 2 && examples > 0 && examples < N, "each reader served its share, refusals counted",
          "served %lld examples %lld refused %lld", (long long)served, (long long)examples,
          (long long)refused);
    for (int f = 0; f < FEEDS; f++)
        feed_free(feed[f]);
    for (int k = 0; k < 2; k++) {
        rpc_server_stop(srv[k]);
        reader_service_free(svc[k]);
        reader_close(r[k]);
    }
    /* A checkpoint's pause: the queue and any pull in flight drain, then
     * FEED_PAUSED until the pause ends; every example once across it. */
    for (int k = 0; k < 2; k++) {
        rc |= reader_open(&r[k], path, &s, 0, 0, &e);
        reader_set_share(r[k], k, 2, SPLIT_LINES, NULL);
        svc[k] = reader_service_create(r[k], s.n_dense, s.n_cat, token);
        rc |= rpc_server_start(&srv[k], "127.0.0.1", 0, reader_service_processor(svc[k]), &e);
        ep[k].port = rpc_server_port(srv[k]);
    }
    struct batch_feed *pf = NULL;
    rc |= feed_start(&pf, ep, 2, token, 50, 3, 2000, NULL, &e);
    CHECK(rc == 0, "a prefetch queue on two fresh reader services", "%s", e.msg);
    struct batch b;
    batch_init(&b, 100, 13, 26);
    int total = 0, drained = 0, paused = 0, again = 0, nb, n_after = 0, saved = -1;
    static uint64_t after[N]; /* the ids after the pause, in the order handed out */
    struct reader_pos at_pause[2];
    char state[300];
    snprintf(state, sizeof state, "%s/feed-0.pos", dir);
    pthread_t pauser;
    n_seen = 0;
    for (int step = 0; rc >= 0; step++) {
        batch_clear(&b);
        if (step == 2) { /* as pause_workers does, while the workers take batches */
            pthread_create(&pauser, NULL, pause_feed, pf);
            usleep(20000); /* a loaded machine ran it only after all 60 batches (CI, once) */
        }
        /* (counted from feed_pause's return: a loaded machine may run the pauser late) */
        int since_pause = __atomic_load_n(&pause_returned, __ATOMIC_ACQUIRE);
        rc = feed_next(pf, &b, &e);
        if (rc == FEED_PAUSED) {
            pthread_join(pauser, NULL);
            paused++;
            batch_clear(&b);
            again = feed_next(pf, &b, &e) == FEED_PAUSED && b.n == 0;
            /* a checkpoint's parts: the readers' places and the feed's order */
            char svc_pos[320];
            for (int k = 0; k < 2; k++) {
                reader_tell(r[k], &at_pause[k]);
                snprintf(svc_pos, sizeof svc_pos, "%s/reader-svc-%d.pos", dir, k);
                saved = reader_save_pos(r[k], svc_pos, &e);
            }
            saved |= feed_save(pf, state, &e);
            feed_pause(pf, 0, 0, NULL);
            continue;
        }
        if (rc < 0 || b.n == 0)
            break;
        drained += since_pause && !paused;
        for (int i = 0; i < b.n && n_seen < N + 64; i++)
            seen[n_seen++] = b.example_id[i];
        for (int i = 0; paused && i < b.n && n_after < N; i++)
            after[n_after++] = b.example_id[i];
        total += b.n;
    }
    nb = b.n;
    batch_free(&b);
    qsort(seen, (size_t)n_seen, sizeof *seen, cmp);
    dup = 0;
    for (int i = 1; i < n_seen; i++)
        dup += seen[i] == seen[i - 1];
    CHECK(rc == 0 && nb == 0 && paused == 1 && again && drained <= 4 && total == N && dup == 0,
          "paused: the queued batches and a pull in flight drain, then FEED_PAUSED until the pause ends; every "
          "example once across it", "rc %d paused %d again %d drained %d total %d of %d, %d "
          "repeated", rc, paused, again, drained, total, N, dup);
    feed_free(pf);
    for (int k = 0; k < 2; k++) {
        rpc_server_stop(srv[k]);
        reader_service_free(svc[k]);
        reader_close(r[k]);
    }
    /* resumed from those parts: the same batches in the same order (the pulls
     * go on with the reader that was next, not the first) */
    for (int k = 0; k < 2; k++) {
        rc |= reader_open(&r[k], path, &s, 0, 0, &e);
        reader_set_share(r[k], k, 2, SPLIT_LINES, NULL);
        rc |= reader_seek(r[k], &at_pause[k], &e);
        svc[k] = reader_service_create(r[k], s.n_dense, s.n_cat, token);
        rc |= rpc_server_start(&srv[k], "127.0.0.1", 0, reader_service_processor(svc[k]), &e);
        ep[k].port = rpc_server_port(srv[k]);
    }
    refused_states(state, ep, at_pause);
    rc |= feed_start(&pf, ep, 2, token, 50, 3, 2000, state, &e);
    batch_init(&b, 100, 13, 26);
    int same = rc == 0 && saved == 0, n_again = 0;
    for (;;) {
        batch_clear(&b);
        if (feed_next(pf, &b, &e) < 0 || b.n == 0)
            break;
        for (int i = 0; i < b.n; i++, n_again++)
            same &= n_again < n_after && b.example_id[i] == after[n_again];
    }
    batch_free(&b);
    CHECK(same && n_again == n_after && n_after > 0,
          "a feed resumed from its saved order and the readers' places hands out the same "
          "batches in the same order", "rc %d saved %d: %d vs %d examples: %s", rc, saved,
          n_again, n_after, e.msg);
    feed_free(pf);
    for (int k = 0; k < 2; k++) {
        rpc_server_stop(srv[k]);
        reader_service_free(svc[k]);
        reader_close(r[k]);
    }
    stuck_feed(path, &s, ep);
    ss_config_free(&c);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 2;
    CHECK_DONE();
}
