/* tools/reader_bench: examples per second out of one reader shared by 1..N
 * threads, each pulling batches as a worker does (reader_next, no training):
 * how far the reader scales with the workers of one trainer.
 * Built by `make` as build/reader_bench; run by tools/bench (section 1c).
 *   reader_bench DATA [THREADS] [BATCH]   DATA: text (Criteo TSV) or shards;
 *   threads 1..THREADS (default: the cores), batch default 1024 */
#include "shadowsync/reader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct puller {
    struct reader *r;
    int batch, n_dense, n_cat;
    int64_t got;
    int rc;
    struct ss_err e;
    pthread_t th;
};

static void *pull(void *arg)
{
    struct puller *p = arg;
    struct batch b;
    batch_init(&b, p->batch, p->n_dense, p->n_cat);
    while ((p->rc = reader_next(p->r, &b, &p->e)) == 0 && b.n > 0)
        p->got += b.n;
    batch_free(&b);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: reader_bench DATA [THREADS] [BATCH]   examples/s of one reader "
                        "shared by 1..THREADS threads\n");
        return argc == 2 ? 0 : 2;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int max_t = argc > 2 ? atoi(argv[2]) : (int)cores, batch = argc > 3 ? atoi(argv[3]) : 1024;
    if (max_t < 1 || max_t > 256 || batch < 1 || batch > 65536) {
        fprintf(stderr, "reader_bench: THREADS must be 1..256 and BATCH 1..65536\n");
        return 2;
    }
    struct ss_config c;
    struct ss_err e = {0};
    struct schema s;
    if (ss_config_load(&c, NULL, NULL, 0, &e) < 0 || schema_from_config(&s, &c, argv[1], &e) < 0) {
        fprintf(stderr, "reader_bench: %s\n", e.msg);
        return 1;
    }
    struct puller *p = calloc((size_t)max_t, sizeof *p);
    double one = 0;
    for (int t = 1; t <= max_t; t++) {
        struct reader *r;
        if (reader_open(&r, argv[1], &s, 0, 0, &e) < 0) {
            fprintf(stderr, "reader_bench: %s\n", e.msg);
            return 1;
        }
        struct timespec a, z;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int k = 0; k < t; k++) {
            p[k] = (struct puller){.r = r, .batch = batch, .n_dense = s.n_dense, .n_cat = s.n_cat};
            pthread_create(&p[k].th, NULL, pull, &p[k]);
        }
        int64_t got = 0;
        for (int k = 0; k < t; k++) {
            pthread_join(p[k].th, NULL);
            if (p[k].rc < 0) {
                fprintf(stderr, "reader_bench: %s\n", p[k].e.msg);
                return 1;
            }
            got += p[k].got;
        }
        clock_gettime(CLOCK_MONOTONIC, &z);
        reader_close(r);
        double sec = (double)(z.tv_sec - a.tv_sec) + 1e-9 * (double)(z.tv_nsec - a.tv_nsec);
        double eps = sec > 0 ? (double)got / sec : 0;
        if (t == 1)
            one = eps;
        printf("reader_bench threads %d batch %d: %lld examples in %.3f s, %.0f examples/s "
               "(%.2fx one thread)\n", t, batch, (long long)got, sec, eps, one > 0 ? eps / one : 0);
        fflush(stdout);
    }
    free(p);
    ss_config_free(&c);
    return 0;
}
