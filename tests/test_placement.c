/* The placement pass: the packer against exhaustive search on small
 * instances (never worse than 4/3 of the optimum; the share it matches is
 * printed), plans that cover every row of every table exactly once, big
 * tables split by row ranges, pins kept, memory checked before anything is
 * allocated, bad pins named. */
#include "check.h"
#include "shadowsync/embps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The best max load over every assignment of n items to P bins of cap. */
static double exhaustive(const double *load, const double *bytes, int n, int P, double cap)
{
    int bin[8] = {0};
    double best = INFINITY;
    for (;;) {
        double L[3] = {0}, M[3] = {0};
        for (int i = 0; i < n; i++)
            L[bin[i]] += load[i], M[bin[i]] += bytes[i];
        double mx = 0;
        int ok = 1;
        for (int p = 0; p < P; p++)
            mx = fmax(mx, L[p]), ok &= M[p] <= cap;
        if (ok && mx < best)
            best = mx;
        int i = 0;
        while (i < n && ++bin[i] == P)
            bin[i++] = 0;
        if (i == n)
            return best;
    }
}

static void test_against_exhaustive(void)
{
    uint64_t rng = 42;
    int cases = 0, equal = 0, worst_ok = 1, mem_cases = 0, mem_equal = 0, mem_found = 1;
    double worst = 1;
    for (int k = 0; k < 400; k++) {
        int n = 2 + (int)(ss_splitmix(&rng) % 7), P = 2 + (int)(ss_splitmix(&rng) % 2);
        double load[8], bytes[8], total = 0;
        for (int i = 0; i < n; i++) {
            /* skewed like embedding tables: a few heavy, many light */
            load[i] = exp(3 * ss_uniform(&rng));
            bytes[i] = exp(4 * ss_uniform(&rng));
            total += bytes[i];
        }
        int with_mem = k % 2;
        double cap = with_mem ? total / P * 1.4 : INFINITY;
        double opt = exhaustive(load, bytes, n, P, cap);
        if (isinf(opt))
            continue; /* no assignment fits */
        int bin[8];
        int rc = place_pack(load, bytes, n, P, cap, NULL, bin);
        double L[3] = {0}, M[3] = {0}, mx = 0;
        for (int i = 0; i < n; i++)
            L[bin[i]] += load[i], M[bin[i]] += bytes[i];
        int fits = rc == 0;
        for (int p = 0; p < P; p++)
            mx = fmax(mx, L[p]), fits &= M[p] <= cap;
        if (with_mem) {
            mem_cases++;
            mem_found &= fits;
            mem_equal += fits && mx <= opt * (1 + 1e-9);
        } else {
            cases++;
            equal += mx <= opt * (1 + 1e-9);
            worst = fmax(worst, mx / opt);
            worst_ok &= fits && mx <= opt * 4 / 3 + 1e-9;
        }
    }
    CHECK(worst_ok, "packer: never worse than 4/3 of the exhaustive optimum",
          "worst ratio %.3f over %d cases", worst, cases);
    CHECK(equal * 10 >= cases * 8, "packer: equals the optimum on most small instances",
          "%d of %d", equal, cases);
    printf("# packer vs exhaustive: optimum on %d of %d instances (%.0f%%), worst ratio %.3f; "
           "with memory limits: %d of %d optimal\n", equal, cases, 100.0 * equal / cases, worst,
           mem_equal, mem_cases);
    CHECK(mem_found, "packer: finds an assignment within memory whenever one exists (small cases)",
          "%s", "");
}

/* Every table's rows [0, rows) covered by its shards exactly once. */
static int covers(const struct placement *pl)
{
    for (int t = 0; t < pl->n_tables; t++) {
        int64_t at = 0;
        for (int pass = 0; pass < pl->n_shards; pass++) {
            int found = 0;
            for (int i = 0; i < pl->n_shards; i++)
                if (pl->shards[i].table == t && pl->shards[i].lo == at && pl->shards[i].hi > at) {
                    at = pl->shards[i].hi;
                    found = 1;
                    break;
                }
            if (!found)
                break;
        }
        if (at != pl->table_rows[t])
            return 0;
        int64_t sum = 0;
        for (int i = 0; i < pl->n_shards; i++)
            if (pl->shards[i].table == t)
                sum += pl->shards[i].hi - pl->shards[i].lo;
        if (sum != at)
            return 0;
    }
    return 1;
}

static void skewed(struct table_profile *tp, int T)
{
    for (int t = 0; t < T; t++) {
        placement_uniform(&tp[t], 1000 + 997 * t, 16, 1);
        tp[t].ns_per_ex = 10 + (t % 5);
    }
    tp[3].ns_per_ex = 150; /* one hot table: more than the even share alone */
    tp[3].rows = 100000;
    for (int k = 0; k < PLACE_BUCKETS; k++) /* its lookups crowd the first rows */
        tp[3].bucket[k] = k < 8 ? 0.1 : 0.2 / (PLACE_BUCKETS - 8);
}

static void test_plans(void)
{
    enum { T = 12, P = 3 };
    struct table_profile tp[T];
    skewed(tp, T);
    struct ss_err e = {0};
    struct placement pr, rr, hs;
    int rc = placement_make(&pr, PLACE_PROFILE, tp, T, P, 1024, "", &e);
    rc |= placement_make(&rr, PLACE_ROUND_ROBIN, tp, T, P, 1024, "", &e);
    rc |= placement_make(&hs, PLACE_HASH, tp, T, P, 1024, "", &e);
    CHECK(rc == 0, "plans of the three strategies", "%s", e.msg);
    CHECK(covers(&pr) && covers(&rr) && covers(&hs),
          "every plan covers every row of every table exactly once", "%s", "");
    int pieces = 0;
    for (int i = 0; i < pr.n_shards; i++)
        pieces += pr.shards[i].table == 3;
    CHECK(pieces >= 2, "profile splits the table heavier than the even share", "%d pieces",
          pieces);
    int first_small = 0;
    for (int i = 0; i < pr.n_shards; i++)
        if (pr.shards[i].table == 3 && pr.shards[i].lo == 0)
            first_small = pr.shards[i].hi < 100000 / 4;
    CHECK(first_small, "the split follows the lookups (the hot first rows make a short piece)",
          "%s", "");
    CHECK(pr.imbalance <= 1.10 && pr.imbalance < rr.imbalance,
          "profile's imbalance <= 1.10 and below round robin's",
          "profile %.3f round_robin %.3f hash %.3f", pr.imbalance, rr.imbalance, hs.imbalance);
    CHECK(pr.lower_bound <= pr.max + 1e-9 && pr.lower_bound >= pr.mean - 1e-9,
          "lower bound between the mean and the max", "lb %.2f mean %.2f max %.2f",
          pr.lower_bound, pr.mean, pr.max);
    int rr_ok = 1;
    for (int i = 0; i < rr.n_shards; i++)
        rr_ok &= rr.shards[i].ps == rr.shards[i].table % P;
    CHECK(rr_ok && rr.n_shards == T, "round_robin: table t on PS t mod P, whole", "%s", "");
    struct placement hs2;
    placement_make(&hs2, PLACE_HASH, tp, T, P, 1024, "", &e);
    CHECK(hs2.n_shards == hs.n_shards &&
              !memcmp(hs2.shards, hs.shards, hs.n_shards * sizeof *hs.shards),
          "hash: the same plan every time", "%s", "");
    int32_t ids[64];
    int k = placement_ps_shards(&pr, 1, ids), ok = k > 0;
    for (int j = 0; j < k; j++)
        ok &= pr.shards[ids[j]].ps == 1 && (j == 0 || ids[j] > ids[j - 1]);
    CHECK(ok, "a PS's shards, in plan order", "%s", "");
    placement_free(&pr);
    placement_free(&rr);
    placement_free(&hs);
    placement_free(&hs2);
}

static void test_pins_and_memory(void)
{
    enum { T = 8, P = 4 };
    struct table_profile tp[T];
    skewed(tp, T);
    struct ss_err e = {0};
    struct placement pl;
    int rc = placement_make(&pl, PLACE_PROFILE, tp, T, P, 1024, " 5 : 2, 3@0 - 5000:0\t,", &e);
    int pinned = 1, seen5 = 0;
    for (int i = 0; i < pl.n_shards; i++) {
        const struct shard *s = &pl.shards[i];
        if (s->table == 5)
            pinned &= s->ps == 2 && s->lo == 0 && s->hi == tp[5].rows, seen5++;
        if (s->table == 3 && s->lo == 0)
            pinned &= s->ps == 0 && s->hi == 5000;
    }
    CHECK(rc == 0 && pinned && seen5 == 1 && covers(&pl),
          "pins (blanks in and around them): a table and a row range stay where pinned; the "
          "rest packs around them", "%s", e.msg);
    placement_free(&pl);

    struct {
        const char *pin, *want;
    } bad[] = {{"9:0", "table 9"},   {"2:7", "embedding PS 7"}, {"2-1", "is not TABLE:PS"},
               {"3@10-5:1", "rows [10, 5)"}, {"3@0-50:1,3@40-60:2", "overlaps"},
               {"3@-5-10:1", "rows [-5, 10)"}, {NULL, "leave more than 1024 ranges of rows"}};
    char *many = malloc(1100 * 24);
    size_t at = 0;
    for (int k = 0; k < 1100; k++) /* 1100 pins of 2 rows, 2 apart: 1100 gaps */
        at += (size_t)sprintf(many + at, "%s3@%d-%d:%d", k ? "," : "", 4 * k, 4 * k + 2, k % 4);
    bad[6].pin = many;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = placement_make(&pl, PLACE_PROFILE, tp, T, P, 1024, bad[i].pin, &e);
        CHECK(rc < 0 && strstr(e.msg, "placement.pin") && strstr(e.msg, bad[i].want),
              "a bad pin is refused, naming it", "%.60s -> %s", bad[i].pin, e.msg);
    }
    free(many);

    /* memory: rows x (dim + state) x 4 B; 10M rows x 17 x 4 = 648 MiB */
    struct table_profile big[2];
    placement_uniform(&big[0], 10000000, 16, 1);
    placement_uniform(&big[1], 10000000, 16, 1);
    rc = placement_make(&pl, PLACE_PROFILE, big, 2, 2, 600, "", &e);
    CHECK(rc < 0 && strstr(e.msg, "need") && strstr(e.msg, "1425 MiB") && strstr(e.msg, "1200"),
          "tables beyond the PSs' memory: refused with the need and the capacity", "%s", e.msg);
    rc = placement_make(&pl, PLACE_PROFILE, big, 2, 3, 600, "", &e);
    int fits = rc == 0 && covers(&pl);
    for (int p = 0; fits && p < 3; p++)
        fits = pl.bytes[p] <= 600.0 * 1048576;
    CHECK(fits, "profile splits tables to fit each PS's memory", "%s", e.msg);
    if (rc == 0)
        placement_free(&pl);
    rc = placement_make(&pl, PLACE_ROUND_ROBIN, big, 2, 3, 600, "", &e);
    CHECK(rc == 0 && pl.over_memory == 2, "round_robin reports the PSs over memory", "%s", "");
    rc = placement_check_memory(&pl, &e);
    CHECK(rc < 0 && strstr(e.msg, "embedding PS 0") && strstr(e.msg, "712 MiB") &&
              strstr(e.msg, "placement.strategy = profile"),
          "the memory check names the PS and its need before anything is allocated", "%s",
          e.msg);
    placement_free(&pl);
    /* the shards on the trainers (DES): the messages name them and their key */
    rc = placement_make_on(&pl, 1, PLACE_PROFILE, big, 2, 2, 600, "", &e);
    CHECK(rc < 0 && strstr(e.msg, "2 trainers hold") && strstr(e.msg, "raise job.trainers") &&
              strstr(e.msg, "each trainer's room"),
          "DES: tables beyond the trainers' room: the message names trainers and job.trainers",
          "%s", e.msg);
    rc = placement_make_on(&pl, 1, PLACE_PROFILE, tp, T, P, 1024, "3:7", &e);
    CHECK(rc < 0 && strstr(e.msg, "trainer 7, the job has 4 trainers"),
          "DES: a pin to a trainer the job lacks names trainers", "%s", e.msg);
    rc = placement_make(&pl, PLACE_PROFILE, big, 2, 2, 64, "", &e);
    CHECK(rc < 0 && strstr(e.msg, "embedding_ps.memory_mb = 64 leaves no room"),
          "a memory_mb within the process's own share: refused as leaving no room", "%s", e.msg);
    /* pins that alone overfill a PS: the advice is the pins', not the strategy's */
    for (int k = 0; k < 2; k++) {
        rc = placement_make(&pl, k ? PLACE_ROUND_ROBIN : PLACE_PROFILE, big, 2, 3, 1000,
                            "0:0,1:0", &e);
        if (k && rc == 0)
            rc = placement_check_memory(&pl, &e);
        CHECK(rc < 0 && strstr(e.msg, "placement.pin: the rows pinned to embedding PS 0 need "
                                      "1361 MiB") && strstr(e.msg, "pin fewer rows there"),
              k ? "round_robin: pins overfilling a PS are named as the cause"
                : "profile: pins overfilling a PS are named as the cause",
              "%s", e.msg);
        if (k)
            placement_free(&pl);
    }
}

static void test_many(void)
{
    enum { T = 100, P = 64 };
    struct table_profile tp[T];
    uint64_t rng = 3;
    for (int t = 0; t < T; t++) {
        placement_uniform(&tp[t], 100 + (int64_t)(ss_splitmix(&rng) % 5000000), 16, 1);
        tp[t].ns_per_ex = 5 + 200 * ss_uniform(&rng) * ss_uniform(&rng);
    }
    struct ss_err e = {0};
    struct placement pl;
    double t0 = ss_now();
    int rc = placement_make(&pl, PLACE_PROFILE, tp, T, P, 16384, "", &e);
    printf("# 100 tables x 64 PSs: %d shards, imbalance %.3f, %.3f s\n", pl.n_shards,
           pl.imbalance, ss_now() - t0);
    CHECK(rc == 0 && covers(&pl) && pl.imbalance < 1.2,
          "100 tables on 64 PSs: a plan covering every row", "imbalance %.3f", pl.imbalance);
    placement_free(&pl);
}

int main(void)
{
    test_against_exhaustive();
    test_plans();
    test_pins_and_memory();
    test_many();
    CHECK_DONE();
}
