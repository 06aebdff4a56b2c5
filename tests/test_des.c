/* DES (DESIGN §9, after Distributed Equivalent Substitution): tables
 * sharded over the members of a group (one table split by rows over two of
 * them), each member with batches of its own. Every member's lookup equals
 * pooling its batch on whole tables; after every member's push the shards
 * hold what whole tables hold after the same pushes; a member whose data
 * ends first serves the others until they end; a checkpoint pauses every
 * member, at the first round in which every trainer's flag is up and none
 * has a batch in flight; the exchange names a member that sends the wrong size. */
#include "check.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { T = 3, DIM = 5, P = 3, B = 24, STEPS = 6 };

static const int64_t rows[T] = {300, 40, 7};
static struct placement pl;
static struct emb_tables *whole, *shard[P];
static struct emb_opts base;

static void make_tables(void)
{
    struct table_profile tp[T];
    for (int t = 0; t < T; t++)
        placement_uniform(&tp[t], rows[t], DIM, 0);
    struct ss_err e = {0};
    /* table 0 split by rows over members 0 and 2; the rest placed around it */
    int rc = placement_make(&pl, PLACE_ROUND_ROBIN, tp, T, P, 1024, "0@0-120:0,0@120-300:2", &e);
    CHECK(rc == 0, "a plan over the members", "%s", e.msg);
    base = (struct emb_opts){.n_tables = T, .dim = DIM, .rows = rows, .opt = OPT_SGD, .lr = 0.05f,
                             .eps = 1e-8f, .seed = 7};
    rc = embps_create(&whole, &base, &e);
    for (int m = 0; m < P; m++) {
        int32_t *ids;
        int k;
        rc |= embps_create_for_ps(&base, &pl, m, &shard[m], &ids, &k, &e);
        free(ids);
    }
    CHECK(rc == 0, "whole tables and shards", "%s", e.msg);
}

/* Member m's batch of step s: bags of 0-3 ids, some beyond the rows. */
static void batch_of(struct batch *b, int m, int s)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(m * 131 + s * 7 + 1);
    b->n = B;
    int at = 0;
    b->off[0] = 0;
    for (int i = 0; i < B; i++)
        for (int t = 0; t < T; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int len = (int)(x % 4);
            for (int q = 0; q < len; q++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                b->ids[at++] = x % (uint64_t)(rows[t] * 3);
            }
            b->off[i * T + t + 1] = at;
        }
}

static void grad_of(float *g, int m, int s)
{
    for (int i = 0; i < B * T * DIM; i++)
        g[i] = (float)sin(0.37 * i + m + 3.1 * s);
}

struct member {
    struct emb_client *c;
    int m, steps;
    float *got;                 /* [STEPS][B*T*DIM] its lookups */
    int flag;                   /* its trainer's pause flag */
    int pauses, seen_all;
    float *snap;                /* its shards' rows when it paused */
    int rc;
    struct ss_err e;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int arrived;

/* Member m's rows, shard after shard, into out (NULL: only counted): from
 * its shard tables, or with from_whole those rows of the whole tables. */
static size_t rows_of(int m, int from_whole, float *out)
{
    size_t n = 0;
    for (int k = 0, j = 0; k < pl.n_shards; k++) {
        if (pl.shards[k].ps != m)
            continue;
        for (int64_t r = pl.shards[k].lo; r < pl.shards[k].hi; r++, n += DIM)
            if (out)
                memcpy(out + n, from_whole ? embps_row(whole, pl.shards[k].table, (uint64_t)r)
                                           : embps_row(shard[m], j, (uint64_t)r),
                       DIM * sizeof(float));
        j++; /* shard k's place among member m's */
    }
    return n;
}

/* A trainer's checkpoint: every member gets here (or the test fails), then
 * its trainer goes on. Its shards are kept: every push made before the
 * pause must be in them (a member applies its shards' pushes itself). */
static void on_pause(void *arg)
{
    struct member *w = arg;
    w->pauses++;
    free(w->snap);
    w->snap = malloc(rows_of(w->m, 0, NULL) * sizeof(float) + 1);
    rows_of(w->m, 0, w->snap);
    pthread_mutex_lock(&mu);
    arrived++;
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 2000 && !w->seen_all; i++) {
        pthread_mutex_lock(&mu);
        w->seen_all = arrived == P;
        pthread_mutex_unlock(&mu);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    __atomic_store_n(&w->flag, 0, __ATOMIC_RELEASE);
}

static void *member_main(void *arg)
{
    struct member *w = arg;
    struct batch b;
    batch_init(&b, B, 0, T);
    batch_reserve_ids(&b, (size_t)B * T * 3);
    float *g = malloc(sizeof(float) * B * T * DIM);
    int rc = 0;
    for (int s = 0; rc == 0 && s < w->steps; s++) {
        if (s == 2) /* a checkpoint: every trainer's flag goes up before its step 2 */
            __atomic_store_n(&w->flag, 1, __ATOMIC_RELEASE);
        if ((rc = emb_des_gate(w->c, &w->e)) < 0)
            break;
        batch_of(&b, w->m, s);
        if ((rc = w->c->ops->lookup(w->c, &b, w->got + (size_t)s * B * T * DIM, &w->e)) < 0)
            break;
        grad_of(g, w->m, s);
        rc = w->c->ops->push(w->c, &b, g, &w->e);
    }
    if (w->steps <= 2) /* ...or at its end */
        __atomic_store_n(&w->flag, 1, __ATOMIC_RELEASE);
    if (rc == 0)
        rc = emb_des_finish(w->c, &w->e);
    w->rc = rc;
    free(g);
    batch_free(&b);
    return NULL;
}

/* The group trains; the whole tables replay the same steps (each step's
 * lookups before its pushes, as the group's rounds do). */
static void test_group(void)
{
    struct exchange *x[P];
    exchange_local_group(x, P, NULL);
    struct member w[P];
    struct des_stats st[P];
    pthread_t th[P];
    memset(st, 0, sizeof st);
    for (int m = 0; m < P; m++) {
        w[m] = (struct member){NULL, m, m == 0 ? 2 : STEPS, calloc((size_t)STEPS * B * T * DIM, 4),
                               0, 0, 0, NULL, 0, {0}};
        struct des_hooks pz = {&w[m].flag, on_pause, &w[m], NULL, 0};
        w[m].c = emb_client_des(x[m], &pl, DIM, shard[m], &pz, &st[m]);
    }
    for (int m = 0; m < P; m++)
        pthread_create(&th[m], NULL, member_main, &w[m]);
    for (int m = 0; m < P; m++)
        pthread_join(th[m], NULL);
    int ok = 1;
    for (int m = 0; m < P; m++)
        if (w[m].rc < 0)
            ok = 0, printf("# member %d: %s\n", m, w[m].e.msg);
    CHECK(ok, "members of unequal data all end", "a member failed");
    struct batch b;
    batch_init(&b, B, 0, T);
    batch_reserve_ids(&b, (size_t)B * T * 3);
    float *want = malloc(sizeof(float) * B * T * DIM), *g = malloc(sizeof(float) * B * T * DIM);
    float worst = 0, at_pause = w[0].snap && w[1].snap && w[2].snap ? 0 : INFINITY;
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; s == 2 && m < P && w[m].snap; m++) { /* the pause came before step 2 */
            size_t n = rows_of(m, 1, NULL);
            float *r = malloc(n * sizeof(float) + 1);
            rows_of(m, 1, r);
            at_pause = fmaxf(at_pause, (float)max_diff(r, w[m].snap, n));
            free(r);
        }
        for (int m = 0; m < P; m++)
            if (s < w[m].steps) {
                batch_of(&b, m, s);
                embps_pool(whole, &b, want);
                worst = fmaxf(worst, (float)max_diff(want, w[m].got + (size_t)s * B * T * DIM,
                                              (size_t)B * T * DIM));
            }
        for (int m = 0; m < P; m++)
            if (s < w[m].steps) {
                batch_of(&b, m, s);
                grad_of(g, m, s);
                embps_push(whole, &b, g);
            }
    }
    CHECK(worst < 1e-5f, "every lookup equals pooling on whole tables", "max diff %g", worst);
    CHECK(at_pause < 1e-5f, "at the pause the shards hold every push made before it",
          "max diff %g", at_pause);
    float rw = 0;
    for (int m = 0; m < P; m++) {
        size_t n = rows_of(m, 0, NULL);
        float *a = malloc(n * sizeof(float) + 1), *r = malloc(n * sizeof(float) + 1);
        rows_of(m, 0, a);
        rows_of(m, 1, r);
        rw = fmaxf(rw, (float)max_diff(a, r, n));
        free(a);
        free(r);
    }
    CHECK(rw < 1e-5f, "the shards hold what whole tables hold after the same pushes",
          "max diff %g", rw);
    int pauses = w[0].pauses + w[1].pauses + w[2].pauses;
    CHECK(pauses == P && w[0].seen_all && w[1].seen_all && w[2].seen_all,
          "every member pauses once every trainer's flag is up, all at once",
          "pauses %d %d %d, all there: %d %d %d", w[0].pauses, w[1].pauses, w[2].pauses,
          w[0].seen_all, w[1].seen_all, w[2].seen_all);
    int64_t rounds = st[0].rounds;
    CHECK(st[1].rounds == rounds && st[2].rounds == rounds && st[2].lookups == STEPS &&
              st[0].lookups == 2 && st[1].pushes == STEPS,
          "every member took part in every round", "rounds %lld %lld %lld",
          (long long)st[0].rounds, (long long)st[1].rounds, (long long)st[2].rounds);
    CHECK(st[1].bytes_sent > 0 && st[1].bytes_rows > 0, "the figures count the wire",
          "sent %g rows %g", st[1].bytes_sent, st[1].bytes_rows);
    for (int m = 0; m < P; m++) {
        w[m].c->ops->free(w[m].c);
        free(w[m].got);
        free(w[m].snap);
    }
    free(want);
    free(g);
    batch_free(&b);
}

struct sender {
    struct exchange *x;
    size_t bytes;
    int rc;
    struct ss_err e;
};

static void *send_main(void *arg)
{
    struct sender *s = arg;
    char out[16] = {0}, in[32];
    size_t sb[2] = {s->bytes, s->bytes}, rb[2] = {8, 8};
    s->rc = s->x->ops->alltoallv(s->x, out, sb, in, rb, &s->e);
    return NULL;
}

static void test_wrong_size(void)
{
    struct exchange *x[2];
    exchange_local_group(x, 2, NULL);
    struct sender s[2] = {{x[0], 8, 0, {0}}, {x[1], 4, 0, {0}}};
    pthread_t th[2];
    for (int m = 0; m < 2; m++)
        pthread_create(&th[m], NULL, send_main, &s[m]);
    for (int m = 0; m < 2; m++)
        pthread_join(th[m], NULL);
    CHECK(s[0].rc < 0 && strstr(s[0].e.msg, "member 1 sent member 0 4 bytes, 8 expected"),
          "the exchange names a member that sends the wrong size", "rc %d: %s", s[0].rc,
          s[0].e.msg);
    x[0]->ops->free(x[0]);
    x[1]->ops->free(x[1]);
}

int main(void)
{
    make_tables();
    test_group();
    test_wrong_size();
    embps_free(whole);
    for (int m = 0; m < P; m++)
        embps_free(shard[m]);
    placement_free(&pl);
    CHECK_DONE();
}
