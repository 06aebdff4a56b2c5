/* The sync PS over Thrift on loopback: the EASGD center split over two
 * sync PSs gives the same exchange as the in-process center; bad requests
 * (token, offset, length, alpha) are refused while the service serves on;
 * the partitions are balanced; sync.link_share paces both ends of a
 * round's transfer. */
#include "check.h"
#include "rpc_check.h"
#include "shadowsync/rpc.h"
#include "shadowsync/shadow.h"
#include "shadowsync/syncps.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define LEN 1001
static const char *token = "fedcba9876543210fedcba9876543210";

static int raw_elastic(int port, const char *tok, gint64 offset, int n, double alpha, char *why)
{
    struct rpc_conn *conn;
    struct ss_err e;
    if (rpc_connect("127.0.0.1", port, 2000, &conn, &e) < 0)
        return -1;
    ThriftProtocol *p = rpc_conn_protocol(conn);
    ssSyncPSIf *cl = g_object_new(SS_TYPE_SYNC_P_S_CLIENT, "input_protocol", p,
                                  "output_protocol", p, NULL);
    GByteArray *t = g_byte_array_new(), *w = g_byte_array_new(), *ret = NULL;
    g_byte_array_append(t, (const guint8 *)tok, (guint)strlen(tok));
    g_byte_array_set_size(w, (guint)n * 4);
    memset(w->data, 0, w->len);
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    int rc = call_outcome(ss_sync_p_s_client_elastic(cl, &ret, t, offset, w, alpha, &rerr, &gerr),
                          &rerr, &gerr, why);
    if (ret)
        g_byte_array_unref(ret);
    g_byte_array_unref(t);
    g_byte_array_unref(w);
    g_object_unref(cl);
    rpc_conn_close(conn);
    return rc;
}

/* One round of a BIG-float center on one sync PS, its answers paced to
 * server_pace and the trainer's pushes to client_pace (bytes/s, 0: not):
 * the round's seconds, or -1 where the round gave other than the
 * in-process center. */
#define BIG (1 << 20)
static double paced_round(double server_pace, double client_pace)
{
    static float init[BIG], w[BIG], got[BIG], want[BIG];
    uint64_t r = 5;
    for (int i = 0; i < BIG; i++)
        init[i] = (float)ss_normal(&r), w[i] = (float)ss_normal(&r);
    struct syncps_service *sv = syncps_service_create(init, BIG, 0, BIG, token);
    struct rpc_server *srv;
    struct ss_err e = {0};
    struct center *remote = NULL, *local = center_local_create(init, BIG);
    double t = -1;
    if (rpc_server_start(&srv, "127.0.0.1", 0, syncps_service_processor(sv), &e) == 0) {
        rpc_server_pace(srv, server_pace);
        struct sync_endpoint ep = {"sync_ps 0", "127.0.0.1", rpc_server_port(srv)};
        if (center_thrift(&remote, &ep, 1, BIG, token, 20000, client_pace, &e) == 0) {
            double t0 = ss_now();
            int rc = remote->ops->elastic(remote, w, got, BIG, 0.3f, &e);
            t = ss_now() - t0;
            local->ops->elastic(local, w, want, BIG, 0.3f, &e);
            for (int i = 0; i < BIG && rc == 0; i++)
                rc = fabsf(got[i] - want[i]) > 1e-6f;
            t = rc ? -1 : t;
            remote->ops->free(remote);
        }
        rpc_server_stop(srv);
    }
    local->ops->free(local);
    syncps_service_free(sv);
    return t;
}

/* The round's 4 MiB each way at 8 MB/s takes at least half a second a
 * paced direction (less TCP's first burst); unpaced, far less. */
static void test_pacing(void)
{
    double none = paced_round(0, 0), answers = paced_round(8e6, 0),
           pushes = paced_round(0, 8e6);
    CHECK(none >= 0 && answers >= 0 && pushes >= 0, "paced rounds give the in-process center",
          "seconds %g %g %g", none, answers, pushes);
    CHECK(answers > 0.4 && pushes > 0.4 && none < answers && none < pushes,
          "a sync PS's answers and a trainer's pushes are each paced (4 MiB at 8 MB/s)",
          "unpaced %.3f s, answers paced %.3f s, pushes paced %.3f s", none, answers, pushes);

    struct ss_config c;
    struct ss_err e;
    char *ov[] = {"job.link_rate=1gbit", "sync.link_share=0.5"};
    char how[200];
    CHECK(ss_config_load(&c, NULL, ov, 2, &e) == 0 && rpc_link_pace(&c, NULL, how, sizeof how) ==
          62.5e6 && strstr(how, "500 Mbit/s"), "job.link_rate 1gbit at share 0.5: 62.5 MB/s",
          "%s", how);
    ss_config_free(&c);
    char *lo[] = {"job.link_rate=auto"};
    CHECK(ss_config_load(&c, NULL, lo, 1, &e) == 0 && rpc_link_pace(&c, NULL, how, sizeof how) == 0
          && strstr(how, "reports no speed"), "auto on the loopback: unpaced, and said why", "%s",
          how);
    ss_config_free(&c);
    char *bad[] = {"job.link_rate=fast"};
    CHECK(ss_config_load(&c, NULL, bad, 1, &e) < 0 && strstr(e.msg, "job.link_rate = fast"),
          "a link rate that is none is refused naming the key", "%s", e.msg);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    rpc_types_init();
    size_t lo, hi, smallest = LEN, largest = 0;
    for (int p = 0; p < 3; p++) {
        ss_partition(LEN, 3, p, &lo, &hi);
        smallest = hi - lo < smallest ? hi - lo : smallest;
        largest = hi - lo > largest ? hi - lo : largest;
    }
    ss_partition(LEN, 3, 2, &lo, &hi);
    CHECK(hi == LEN && largest - smallest <= 1, "partitions cover the vector, balanced",
          "hi %zu sizes %zu..%zu", hi, smallest, largest);

    static float init[LEN], w[LEN], got[LEN], want[LEN];
    uint64_t r = 3;
    for (int i = 0; i < LEN; i++)
        init[i] = (float)ss_normal(&r);
    struct syncps_service *sv[2];
    struct rpc_server *srv[2];
    struct sync_endpoint ep[2];
    struct ss_err e = {0};
    int rc = 0;
    for (int p = 0; p < 2; p++) {
        ss_partition(LEN, 2, p, &lo, &hi);
        sv[p] = syncps_service_create(init + lo, LEN, lo, hi, token);
        rc |= rpc_server_start(&srv[p], "127.0.0.1", 0, syncps_service_processor(sv[p]), &e);
        ep[p] = (struct sync_endpoint){p ? "sync_ps 1" : "sync_ps 0", "127.0.0.1",
                                       rpc_server_port(srv[p])};
    }
    CHECK(rc == 0, "two sync PSs listen", "%s", e.msg);
    struct center *remote, *local = center_local_create(init, LEN);
    rc = center_thrift(&remote, ep, 2, LEN, token, 2000, 0, &e);
    CHECK(rc == 0, "the shadow thread's center client connects", "%s", e.msg);
    double worst = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < LEN; i++)
            w[i] = (float)ss_normal(&r);
        rc |= remote->ops->elastic(remote, w, got, LEN, 0.3f, &e);
        local->ops->elastic(local, w, want, LEN, 0.3f, &e);
        for (int i = 0; i < LEN; i++)
            worst = fmax(worst, fabs(got[i] - want[i]));
    }
    CHECK(rc == 0 && worst < 1e-6, "elastic over two sync PSs = the in-process center",
          "rc %d worst %g: %s", rc, worst, e.msg);

    char why[256];
    int port0 = ep[0].port;
    size_t n0 = LEN / 2;
    CHECK(raw_elastic(port0, "nope", 0, (int)n0, 0.5, why) == 1 && strstr(why, "token"),
          "a wrong token is refused", "%s", why);
    CHECK(raw_elastic(port0, token, 7, (int)n0, 0.5, why) == 1 && strstr(why, "offset 7"),
          "another PS's offset is refused", "%s", why);
    CHECK(raw_elastic(port0, token, 0, 3, 0.5, why) == 1 && strstr(why, "bytes"),
          "a short vector is refused", "%s", why);
    CHECK(raw_elastic(port0, token, 0, (int)n0, 1.5, why) == 1 && strstr(why, "alpha"),
          "alpha out of [0, 1] is refused", "%s", why);
    CHECK(raw_elastic(port0, token, 0, (int)n0, 0.0, why) == 0,
          "the service goes on after bad requests", "%s", why);
    struct syncps_stats st;
    syncps_service_stats(sv[0], &st);
    CHECK(st.refused == 4 && st.syncs == 4 && st.reads == 1,
          "syncs, reads of the center (alpha 0: a finished trainer's follow) and refusals are "
          "counted apart", "syncs %lld reads %lld refused %lld", (long long)st.syncs,
          (long long)st.reads, (long long)st.refused);

    /* checkpoints: the two slices saved load into 3 other slices equal to
     * the in-process center */
    char dir[] = "/tmp/ss_test_syncps.XXXXXX", f[2][64];
    mkdtemp(dir);
    rc = 0;
    for (int p = 0; p < 2; p++) {
        snprintf(f[p], sizeof f[p], "%s/center-%d.bin", dir, p);
        rc |= syncps_save(sv[p], LEN, f[p], &e);
    }
    char *files[2] = {f[0], f[1]};
    float slice[LEN];
    local->ops->get(local, want);
    double diff = 0;
    for (int p = 0; p < 3 && rc == 0; p++) {
        ss_partition(LEN, 3, p, &lo, &hi);
        rc |= syncps_load(slice, LEN, lo, hi, files, 2, &e);
        for (size_t i = lo; i < hi; i++)
            diff = fmax(diff, fabs(slice[i - lo] - want[i]));
    }
    CHECK(rc == 0 && diff < 1e-6, "the center saved by 2 sync PSs loads into 3 slices",
          "rc %d diff %g: %s", rc, diff, e.msg);
    rc = syncps_load(slice, LEN, 0, LEN, files, 1, &e);
    CHECK(rc < 0 && strstr(e.msg, "hold"), "slices that do not cover the center are refused",
          "%s", e.msg);
    unlink(f[0]);
    unlink(f[1]);
    rmdir(dir);

    rpc_server_stop(srv[1]);
    rc = remote->ops->elastic(remote, w, got, LEN, 0.3f, &e);
    char port1[16];
    snprintf(port1, sizeof port1, ":%d", ep[1].port);
    CHECK(rc < 0 && strstr(e.msg, port1) && strstr(e.msg, "sync_ps 1"), "a stopped sync PS is named", "rc %d: %s", rc, e.msg);
    remote->ops->free(remote);
    local->ops->free(local);
    rpc_server_stop(srv[0]);
    syncps_service_free(sv[0]);
    syncps_service_free(sv[1]);
    test_pacing();
    CHECK_DONE();
}
