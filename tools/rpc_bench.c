/* tools/rpc_bench: round trips per second of the embedding PS over Thrift
 * on loopback (lookup and push, one request covering 26 tables of dim 16,
 * single-hot bags, at batch 128 and 1024), and the process's RSS after
 * 100k and after 1M lookups of 8 examples (a per-RPC leak would show as
 * growth).
 * Built by `make` as build/rpc_bench; run by tools/bench --cluster.
 *   rpc_bench [--wire fp32|fp16|bf16] [--long N]
 *     embedding.wire's form of the vectors; N lookups for the RSS check
 *     (default 1000000) */
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define T 26
#define DIM 16
static const char *token = "00112233445566778899aabbccddeeff";

static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * 4096.0 / 1e6;
}

static void fill(struct batch *b, int n, uint64_t *rng)
{
    batch_clear(b);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            b->ids[i * T + t] = ss_splitmix(rng) % 200000;
            b->off[i * T + t + 1] = i * T + t + 1;
        }
    b->n = n;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    long long long_n = 1000000;
    int wire = WIRE_FP32;
    static const char *const forms[] = {"fp32", "fp16", "bf16"};
    for (int i = 1; i < argc; i += 2) {
        int ok = i + 1 < argc;
        if (ok && !strcmp(argv[i], "--long"))
            ok = (long_n = strtoll(argv[i + 1], &end, 10)) >= 100000 && !*end;
        else if (ok && !strcmp(argv[i], "--wire"))
            for (wire = 0; wire < 3 && strcmp(argv[i + 1], forms[wire]); wire++)
                ;
        else
            ok = 0;
        if (!ok || wire == 3) {
            fprintf(stderr, "usage: rpc_bench [--wire fp32|fp16|bf16] [--long N]   embedding PS "
                            "round trips on loopback, and RSS after 100k and N >= 100000 "
                            "(default 1000000) lookups\n");
            return strcmp(argv[i], "-h") && strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    rpc_types_init();
    int64_t rows[T];
    struct table_profile tp[T];
    for (int t = 0; t < T; t++) {
        rows[t] = 200000;
        placement_uniform(&tp[t], rows[t], DIM, 0);
    }
    struct ss_err e = {0};
    struct placement pl;
    if (placement_make(&pl, PLACE_ROUND_ROBIN, tp, T, 1, 1 << 20, "", &e) < 0)
        return fprintf(stderr, "%s\n", e.msg), 1;
    struct emb_opts o = {.n_tables = T, .dim = DIM, .rows = rows, .opt = OPT_SGD, .lr = 0.1f,
                         .seed = 1};
    struct emb_tables *tab;
    int32_t *ids;
    int k;
    if (embps_create_for_ps(&o, &pl, 0, &tab, &ids, &k, &e) < 0)
        return fprintf(stderr, "%s\n", e.msg), 1;
    struct embps_service *svc = embps_service_create(tab, ids, k, token);
    struct rpc_server *srv;
    if (rpc_server_start(&srv, "127.0.0.1", 0, embps_service_processor(svc), &e) < 0)
        return fprintf(stderr, "%s\n", e.msg), 1;
    struct emb_endpoint ep = {"embedding_ps 0", "127.0.0.1", rpc_server_port(srv)};
    struct emb_client *c;
    if (emb_client_thrift(&c, &pl, DIM, wire, &ep, token, 10000, &e) < 0)
        return fprintf(stderr, "%s\n", e.msg), 1;
    struct batch b;
    batch_init(&b, 1024, 1, T);
    float *out = ss_aligned(1024 * T * DIM * sizeof(float));
    uint64_t rng = 5;
    int sizes[2] = {128, 1024};
    for (int s = 0; s < 2; s++) {
        int n = sizes[s];
        fill(&b, n, &rng);
        for (int op = 0; op < 2; op++) {
            int calls = 0;
            double t0 = ss_now();
            while (ss_now() - t0 < 2.0) {
                int rc = op ? c->ops->push(c, &b, out, &e) : c->ops->lookup(c, &b, out, &e);
                if (rc < 0)
                    return fprintf(stderr, "%s\n", e.msg), 1;
                calls++;
            }
            double dt = ss_now() - t0;
            printf("%s batch %4d, %s: %8.0f round trips/s  (%.1f MB/s of request + answer)\n",
                   op ? "push  " : "lookup", n, forms[wire], calls / dt,
                   calls * ((double)n * T * 8 + (double)wire_bytes(wire, (size_t)n * T * DIM)) /
                       dt / 1e6);
            fflush(stdout);
        }
    }
    fill(&b, 8, &rng); /* small requests: many calls, where a per-call leak would show */
    double rss_100k = 0;
    for (long long i = 1; i <= long_n; i++) {
        if (c->ops->lookup(c, &b, out, &e) < 0)
            return fprintf(stderr, "%s\n", e.msg), 1;
        if (i == 100000)
            rss_100k = rss_mb();
    }
    double rss_end = rss_mb();
    printf("rss after 100k lookups %.1f MB, after %lld: %.1f MB (ratio %.3f)\n", rss_100k, long_n,
           rss_end, rss_100k > 0 ? rss_end / rss_100k : 0);
    c->ops->free(c);
    rpc_server_stop(srv);
    embps_service_free(svc);
    embps_free(tab);
    free(ids);
    placement_free(&pl);
    batch_free(&b);
    free(out);
    return 0;
}
