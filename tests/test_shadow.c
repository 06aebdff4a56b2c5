/* The sync algorithms and the shadow thread, on in-process transports:
 * MA, BMUF and allreduce against hand computations, EASGD's elastic
 * exchange, every member stopping on the same (final) round, and
 * foreground requests. */
#include "check.h"
#include "shadowsync/shadow.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define N 3
#define LEN 4

static struct ss_config cfg;

struct member {
    struct sync_ctx ctx;
    const struct sync_algo_ops *algo;
    float w[LEN], buf[LEN + 1], snap[LEN];
    int rounds_active;          /* rounds this member reports data left */
    int rounds, rc;
};

static void *run_member(void *arg)
{
    struct member *m = arg;
    struct ss_err e;
    int active = 1;
    for (;;) {
        active = m->rounds < m->rounds_active;
        int r = m->algo->sync(&m->ctx, active, &e);
        m->rounds++;
        if (r <= 0) {
            m->rc = r;
            break;
        }
    }
    return NULL;
}

static void run_group(const char *algo, struct member *m, const float init[N][LEN])
{
    struct collective *coll[N];
    collective_local_group(coll, N, LEN + 1);
    float zero[LEN] = {0};
    struct center *ctr = center_local_create(zero, LEN);
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memcpy(m[i].w, init[i], sizeof m[i].w);
        m[i].algo = sync_algo_find(algo);
        m[i].ctx = (struct sync_ctx){&cfg, m[i].w, LEN, coll[i], ctr, m[i].buf, NULL, 0, NULL, NULL, 1, 0, 0, m[i].snap};
        if (m[i].algo->init)
            m[i].algo->init(&m[i].ctx, NULL);
    }
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], NULL, run_member, &m[i]);
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (m[i].algo->free)
            m[i].algo->free(&m[i].ctx);
        coll[i]->ops->free(coll[i]);
    }
    ctr->ops->free(ctr);
}

static const float init[N][LEN] = {{1, 2, 3, 4}, {3, 2, 1, 0}, {5, 5, 5, 5}};

static void test_ma(void)
{
    struct member m[N] = {{.rounds_active = 1}, {.rounds_active = 3}, {.rounds_active = 2}};
    cfg.sync.alpha = 1.0;
    run_group("ma", m, init);
    /* alpha 1: after round 1 every member holds the mean {3, 3, 3, 3} */
    CHECK(fabs(m[0].w[0] - 3) < 1e-6 && fabs(m[2].w[3] - 3) < 1e-6, "ma with alpha 1 averages",
          "%g %g", m[0].w[0], m[2].w[3]);
    /* the last active member reports data for 3 rounds; round 4 is the final one for all */
    CHECK(m[0].rounds == 4 && m[1].rounds == 4 && m[2].rounds == 4 && m[0].rc == 0,
          "every member stops after the same final round", "%d %d %d", m[0].rounds,
          m[1].rounds, m[2].rounds);
    struct member h[N] = {{.rounds_active = 0}, {.rounds_active = 0}, {.rounds_active = 0}};
    cfg.sync.alpha = 0.5;
    run_group("ma", h, init);
    /* member 0: w = 0.5*{1,2,3,4} + 0.5*{3,3,3,3} */
    CHECK(fabs(h[0].w[0] - 2) < 1e-6 && fabs(h[0].w[3] - 3.5) < 1e-6 && h[0].rounds == 1,
          "ma with alpha 0.5 blends toward the mean", "%g %g", h[0].w[0], h[0].w[3]);
}

/* Two BMUF rounds: the first after the members moved from {2,...} to a
 * mean of 3, the second with no progress; returns member 0's w[0] after
 * round 1 and round 2. */
static void bmuf_two_rounds(int nesterov, float *after1, float *after2)
{
    cfg.sync.alpha = 1.0;
    cfg.sync.bmuf_momentum = 0.5;
    cfg.sync.bmuf_lr = 1.0;
    cfg.sync.bmuf_nesterov = nesterov;
    /* All members start equal at {2,2,2,2} (w_global), then diverge before
     * the first round: run from init where the mean is 3. */
    float same[N][LEN] = {{2, 2, 2, 2}, {2, 2, 2, 2}, {2, 2, 2, 2}};
    struct member m[N] = {{.rounds_active = 0}, {.rounds_active = 0}, {.rounds_active = 0}};
    struct collective *coll[N];
    collective_local_group(coll, N, LEN + 1);
    for (int i = 0; i < N; i++) {
        memcpy(m[i].w, same[i], sizeof m[i].w);
        m[i].algo = sync_algo_find("bmuf");
        m[i].ctx = (struct sync_ctx){&cfg, m[i].w, LEN, coll[i], NULL, m[i].buf, NULL, 0, NULL, NULL, 1, 0, 0, m[i].snap};
        m[i].algo->init(&m[i].ctx, NULL);
        memcpy(m[i].w, init[i], sizeof m[i].w); /* local steps moved them */
    }
    pthread_t th[N];
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], NULL, run_member, &m[i]);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    *after1 = m[1].w[2];
    for (int i = 0; i < N; i++)
        m[i].rounds = 0;
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], NULL, run_member, &m[i]);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    *after2 = m[0].w[0];
    for (int i = 0; i < N; i++) {
        if (m[i].algo->free)
            m[i].algo->free(&m[i].ctx);
        coll[i]->ops->free(coll[i]);
    }
}

static void test_bmuf(void)
{
    float a1, a2;
    bmuf_two_rounds(0, &a1, &a2);
    /* c = 3, d = 1, v = 0.5*0 + 1 = 1, w_global = 3: all at 3 */
    CHECK(fabs(a1 - 3) < 1e-6, "bmuf first block: w_global moves by the mean delta", "%g", a1);
    /* second round: all at 3, d = 0, v = 0.5, w_global = 3.5 (block momentum) */
    CHECK(fabs(a2 - 3.5) < 1e-6, "bmuf block momentum carries the last step", "%g", a2);
    bmuf_two_rounds(1, &a1, &a2);
    /* Nesterov: the members are sent w_global + mu v = 3.5; with no progress
     * the next block's change is measured from there (d = 0, not 0.5):
     * v = 0.5, w_global = 3.5, sent 3.75 (not 4.5, which compounds) */
    CHECK(fabs(a1 - 3.5) < 1e-6, "bmuf nesterov: the members get the look-ahead", "%g", a1);
    CHECK(fabs(a2 - 3.75) < 1e-6,
          "bmuf nesterov: a block with no progress adds only momentum (no look-ahead counted "
          "twice)", "%g", a2);
}

/* A worker's step landing while the round runs: member 0's collective
 * adds it between the snapshot and the all-reduce's answer. */
struct stepping { struct collective c; struct collective *inner; float *w; };

static int step_then_reduce(struct collective *c, float *buf, size_t n, struct ss_err *e)
{
    struct stepping *s = (struct stepping *)c;
    s->w[1] += 0.25f;           /* a Hogwild step taken meanwhile */
    return s->inner->ops->allreduce_sum(s->inner, buf, n, e);
}

/* The summed tail (hot embedding rows): whatever the collective algorithm,
 * a round adds every member's change since the last round, and keeps a step
 * taken while it ran. Tails start at 10; member i moves them by +(i+1) and
 * -i: the sums are 16 and 7. */
static void test_summed_tail(void)
{
    static const char *const names[4] = {"ma", "bmuf", "allreduce", "allreduce"};
    for (int a = 0; a < 4; a++) {
        int resumed = a == 3; /* tails 10, 12, 14 from a checkpoint: the first round agrees */
        struct member m[N] = {{.rounds_active = 0}, {.rounds_active = 0}, {.rounds_active = 0}};
        struct collective *coll[N];
        collective_local_group(coll, N, LEN + 1);
        static const struct collective_ops stepping_ops = {"stepping", step_then_reduce, NULL, NULL};
        struct stepping st = {{&stepping_ops, 0, N, NULL, 0}, coll[0], m[0].w};
        float base[N][2], snap[N][2];
        pthread_t th[N];
        for (int i = 0; i < N; i++) {
            float w0[LEN] = {1, 2, 10, 10};
            memcpy(m[i].w, w0, sizeof w0);
            base[i][0] = base[i][1] = 10;
            m[i].algo = sync_algo_find(names[a]);
            m[i].ctx = (struct sync_ctx){&cfg, m[i].w, LEN, i ? coll[i] : &st.c, NULL, m[i].buf,
                                         NULL, 2, base[i], snap[i], !resumed, 0, 0, m[i].snap};
            m[i].algo->init(&m[i].ctx, NULL);
            m[i].w[2] += (float)(i + 1), m[i].w[3] -= (float)i;
            if (resumed)
                m[i].w[2] = 10.0f + 2.0f * i, m[i].w[3] = 5.0f, base[i][0] = base[i][1] = -1.0f;
        }
        st.w = m[0].w + 1; /* its step (w[1] += 0.25) lands on member 0's first tail float */
        for (int i = 0; i < N; i++)
            pthread_create(&th[i], NULL, run_member, &m[i]);
        for (int i = 0; i < N; i++)
            pthread_join(th[i], NULL);
        char name[128];
        if (resumed) {
            CHECK(m[0].w[2] == 12.25f && m[1].w[2] == 12.0f && m[2].w[2] == 12.0f &&
                      m[1].w[3] == 5.0f && base[2][0] == 12.0f && m[1].ctx.tail_agreed,
                  "resumed tails: the first round makes their mean every member's base, "
                  "keeping a step taken meanwhile",
                  "%g %g %g / %g, base %g", m[0].w[2], m[1].w[2], m[2].w[2], m[1].w[3], base[2][0]);
            goto next;
        }
        snprintf(name, sizeof name, "%s: the summed tail takes every member's change, and a step "
                 "taken during the round", names[a]);
        CHECK(m[0].w[2] == 16.25f && m[1].w[2] == 16.0f && m[2].w[2] == 16.0f &&
                  m[0].w[3] == 7.0f && m[2].w[3] == 7.0f && base[1][0] == 16.0f,
              name, "%g %g %g / %g %g, base %g", m[0].w[2], m[1].w[2], m[2].w[2], m[0].w[3],
              m[2].w[3], base[1][0]);
    next:
        for (int i = 0; i < N; i++) {
            if (m[i].algo->free)
                m[i].algo->free(&m[i].ctx);
            coll[i]->ops->free(coll[i]);
        }
    }
}

static void test_allreduce(void)
{
    /* exact mean {3,3,3,3} of init after one round, every member equal */
    struct member m[N] = {{.rounds_active = 0}, {.rounds_active = 0}, {.rounds_active = 0}};
    run_group("allreduce", m, init);
    int same = 1;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < LEN; k++)
            same &= m[i].w[k] == 3.0f;
    CHECK(same && m[0].rounds == 1 && m[0].rc == 0,
          "allreduce: every trainer ends the round at exactly the mean", "%g %g %g", m[0].w[0],
          m[1].w[1], m[2].w[2]);
    /* a step taken during the round is kept on top of the mean (ma with alpha 1 drops it) */
    struct collective *coll[N];
    collective_local_group(coll, N, LEN + 1);
    static const struct collective_ops stepping_ops = {"stepping", step_then_reduce, NULL, NULL};
    struct stepping st = {{&stepping_ops, 0, N, NULL, 0}, coll[0], m[0].w};
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memcpy(m[i].w, init[i], sizeof m[i].w);
        m[i].rounds = 0;
        m[i].ctx = (struct sync_ctx){&cfg, m[i].w, LEN, i ? coll[i] : &st.c, NULL, m[i].buf, NULL, 0, NULL, NULL, 1, 0, 0, m[i].snap};
        m[i].algo->init(&m[i].ctx, NULL);
    }
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], NULL, run_member, &m[i]);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    CHECK(m[0].w[1] == 3.25f && m[0].w[0] == 3.0f && m[1].w[1] == 3.0f,
          "allreduce keeps a step taken while its round ran", "%g %g %g", m[0].w[1], m[0].w[0],
          m[1].w[1]);
    for (int i = 0; i < N; i++) {
        if (m[i].algo->free)
            m[i].algo->free(&m[i].ctx);
        coll[i]->ops->free(coll[i]);
    }
    CHECK(sync_algo_needs("allreduce") == SYNC_NEEDS_COLLECTIVE &&
              sync_algo_needs("easgd") == SYNC_NEEDS_CENTER &&
              sync_algo_needs("none") == SYNC_NEEDS_NOTHING,
          "each algorithm says what it talks through", "%d %d", sync_algo_needs("allreduce"),
          sync_algo_needs("easgd"));
}

static void test_easgd(void)
{
    cfg.sync.alpha = 0.5;
    float c0[2] = {0, 10}, w[2] = {4, 2}, out[2];
    struct center *c = center_local_create(c0, 2);
    struct ss_err e;
    float buf[3], snap[2];
    struct sync_ctx ctx = {&cfg, w, 2, NULL, c, buf, NULL, 0, NULL, NULL, 1, 0, 0, snap};
    const struct sync_algo_ops *a = sync_algo_find("easgd");
    int r = a->sync(&ctx, 1, &e);
    /* center = 0.5*{0,10} + 0.5*{4,2} = {2,6}; w = 0.5*{4,2} + 0.5*{2,6} = {3,4} */
    c->ops->elastic(c, (float[2]){2, 6}, out, 2, 0.0f, &e); /* alpha 0: read the center */
    CHECK(r == 1 && fabs(out[0] - 2) < 1e-6 && fabs(out[1] - 6) < 1e-6 &&
              fabs(w[0] - 3) < 1e-6 && fabs(w[1] - 4) < 1e-6,
          "easgd elastic exchange by hand", "center %g %g w %g %g", out[0], out[1], w[0], w[1]);
    /* the final round only pushes: center {2,6} -> {2.5,5}, w stays {3,4} */
    r = a->sync(&ctx, 0, &e);
    c->ops->get(c, out);
    CHECK(r == 0 && ctx.pushed && out[0] == 2.5f && out[1] == 5 && w[0] == 3 && w[1] == 4,
          "easgd's final round pushes, pulls nothing (no center behind its steps in the output)",
          "r %d center %g %g w %g %g", r, out[0], out[1], w[0], w[1]);
    /* other trainers on: it follows, w <- 0.5 w + 0.5 center, the center as it is */
    c->ops->set(c, (float[2]){5, 0});
    ctx.others_on = 1;
    r = a->sync(&ctx, 0, &e);
    c->ops->get(c, out);
    CHECK(r == 1 && out[0] == 5 && out[1] == 0 && w[0] == 4 && w[1] == 2,
          "easgd, data ended, others on: follows the center, leaves it as it is",
          "r %d center %g %g w %g %g", r, out[0], out[1], w[0], w[1]);
    ctx.others_on = 0;
    r = a->sync(&ctx, 0, &e);
    CHECK(r == 0 && w[0] == 4.5f && w[1] == 1, "easgd: the last follow, once all have ended",
          "r %d w %g %g", r, w[0], w[1]);
    c->ops->free(c);
    CHECK(sync_algo_find("nope") == NULL && sync_algo_find("bmuf"), "algorithm table lookup",
          "find failed");
}

/* A center whose exchange takes a worker's step on the live buffer (+1 to
 * each of its floats) before it answers: a round of a slow link. */
static float *stepped_w;
static struct center *stepped_inner;

static int stepped_elastic(struct center *c, const float *w, float *out, size_t n, float alpha,
                           struct ss_err *e)
{
    (void)c;
    for (size_t i = 0; i < n; i++)
        stepped_w[i] += 1;
    return stepped_inner->ops->elastic(stepped_inner, w, out, n, alpha, e);
}

static void test_round_keeps_steps(void)
{
    cfg.sync.alpha = 0.5;
    float c0[2] = {0, 10}, w[2] = {4, 2}, buf[3], snap[2];
    static const struct center_ops ops = {stepped_elastic, NULL, NULL, NULL};
    struct center stepped = {&ops, NULL};
    stepped_w = w;
    stepped_inner = center_local_create(c0, 2);
    struct ss_err e;
    struct sync_ctx ctx = {&cfg, w, 2, NULL, &stepped, buf, NULL, 0, NULL, NULL, 1, 0, 0, snap};
    int r = sync_algo_find("easgd")->sync(&ctx, 1, &e);
    /* s = {4,2}, center -> {2,6}; w = s + 0.5 (center - s) + the step = {3,4} + 1 (a blend
     * of the live buffer would give 0.5 {5,3} + 0.5 {2,6} = {3.5,4.5}, half the step lost) */
    CHECK(r == 1 && w[0] == 4 && w[1] == 5, "easgd: the steps taken during a round are kept whole",
          "w %g %g", w[0], w[1]);
    stepped_inner->ops->free(stepped_inner);
}

struct fg { struct shadow *s; int rc; };

static void *ask(void *arg)
{
    struct fg *f = arg;
    for (int i = 0; i < 5; i++)
        f->rc |= shadow_request(f->s);
    return NULL;
}

static void test_foreground(void)
{
    cfg.sync.mode = SYNC_FOREGROUND;
    cfg.sync.alpha = 0.5;
    cfg.sync.algo = "easgd";
    float w[LEN] = {1, 1, 1, 1}, zero[LEN] = {0};
    struct center *c = center_local_create(zero, LEN);
    struct shadow_opts o = {.cfg = &cfg, .w = w, .n = LEN, .center = c, .trainers = 1};
    struct shadow *s;
    struct ss_err e;
    CHECK(shadow_start(&s, &o, &e) == 0, "shadow thread starts", "%s", e.msg);
    struct fg f[2] = {{s, 0}, {s, 0}};
    pthread_t th[2];
    pthread_create(&th[0], NULL, ask, &f[0]);
    pthread_create(&th[1], NULL, ask, &f[1]);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    int64_t before = shadow_syncs(s);
    shadow_data_done(s);
    int64_t syncs = 0;
    int rc = shadow_join(s, &syncs, &e);
    /* every request got its own round after it was made (rounds may be shared
     * by simultaneous requests), plus exactly one final round */
    CHECK(f[0].rc == 0 && f[1].rc == 0, "foreground requests succeed", "%d %d", f[0].rc, f[1].rc);
    CHECK(rc == 0 && before >= 5 && before <= 10 && syncs == before + 1,
          "foreground: requests are served, then one final sync", "rc %d before %lld syncs %lld",
          rc, (long long)before, (long long)syncs);
    c->ops->free(c);
    cfg.sync.mode = SYNC_SHADOW;
}

/* Held workers (a checkpoint's pause), foreground: a collective's shadow
 * thread runs rounds unasked, which are no syncs; EASGD's runs none. */
static void test_held(void)
{
    cfg.sync.mode = SYNC_FOREGROUND;
    cfg.sync.alpha = 0.5;
    const struct timespec nap = {0, 50000000};
    float w[LEN] = {1, 2, 3, 4}, zero[LEN] = {0};
    struct collective *coll[1];
    collective_local_group(coll, 1, LEN + 1);
    cfg.sync.algo = "ma";
    struct shadow_opts o = {.cfg = &cfg, .w = w, .n = LEN, .coll = coll[0], .trainers = 1};
    struct shadow *s;
    struct ss_err e;
    CHECK(shadow_start(&s, &o, &e) == 0, "held: the ma shadow thread starts", "%s", e.msg);
    shadow_hold(s, 1);
    nanosleep(&nap, NULL);
    int rc = shadow_request(s);
    int64_t held = shadow_syncs(s);
    shadow_hold(s, 0);
    shadow_data_done(s);
    int64_t syncs = 0;
    rc |= shadow_join(s, &syncs, &e);
    CHECK(rc == 0 && held == 1 && syncs == 2,
          "held, foreground ma: the unasked rounds are no syncs (one asked, then the final)",
          "rc %d held %lld syncs %lld", rc, (long long)held, (long long)syncs);
    coll[0]->ops->free(coll[0]);
    cfg.sync.algo = "easgd";
    struct center *c = center_local_create(zero, LEN);
    o.coll = NULL;
    o.center = c;
    CHECK(shadow_start(&s, &o, &e) == 0, "held: the easgd shadow thread starts", "%s", e.msg);
    shadow_hold(s, 1);
    nanosleep(&nap, NULL);
    float mid[LEN];
    c->ops->get(c, mid);
    shadow_hold(s, 0);
    shadow_data_done(s);
    rc = shadow_join(s, &syncs, &e);
    float end[LEN];
    c->ops->get(c, end);
    CHECK(rc == 0 && mid[0] == 0 && end[0] == 0.5f && w[0] == 1 && syncs == 1,
          "held, foreground easgd: no round runs (no peer waits on one), the final one pushes",
          "rc %d center %g then %g w %g syncs %lld", rc, mid[0], end[0], w[0], (long long)syncs);
    c->ops->free(c);
    cfg.sync.mode = SYNC_SHADOW;
}

/* A center whose third exchange fails, as a lost sync PS's would. */
static int failing_elastic(struct center *c, const float *w, float *out, size_t n, float alpha,
                           struct ss_err *e)
{
    (void)w, (void)out, (void)n, (void)alpha;
    int *calls = c->impl;
    return ++*calls >= 3 ? ss_fail(e, SS_EIO, "sync_ps 0 gone") : 0;
}

static void failing_free(struct center *c) { (void)c; }

struct failed_seen { int calls; char msg[sizeof(struct ss_err)]; };

static void on_failed(void *arg, const struct ss_err *e)
{
    struct failed_seen *f = arg;
    snprintf(f->msg, sizeof f->msg, "%s", e->msg);
    __atomic_fetch_add(&f->calls, 1, __ATOMIC_SEQ_CST);
}

/* Shadow mode: a failed round is reported once, at once, through
 * shadow_opts.failed (no worker waits on a round to learn of it), and the
 * thread stops with that error. */
static void test_failed(void)
{
    cfg.sync.algo = "easgd";
    cfg.sync.shadow_sleep_ms = 1;
    static const struct center_ops ops = {failing_elastic, failing_free, NULL, NULL};
    int calls = 0;
    struct center c = {&ops, &calls};
    struct failed_seen seen = {0, ""};
    float w[LEN] = {1, 1, 1, 1};
    struct shadow_opts o = {.cfg = &cfg, .w = w, .n = LEN, .center = &c, .trainers = 1,
                            .failed = {.call = on_failed, .arg = &seen}};
    struct shadow *s;
    struct ss_err e;
    CHECK(shadow_start(&s, &o, &e) == 0, "shadow thread starts", "%s", e.msg);
    for (int i = 0; i < 2000 && !__atomic_load_n(&seen.calls, __ATOMIC_SEQ_CST); i++)
        usleep(1000); /* the data has not ended: only the failure stops the rounds */
    int rc = shadow_join(s, NULL, &e);
    CHECK(seen.calls == 1 && !strcmp(seen.msg, "sync_ps 0 gone") && calls == 3,
          "a failed round is reported once through shadow_opts.failed, before the data ends",
          "%d reports (%s), %d exchanges", seen.calls, seen.msg, calls);
    CHECK(rc == SS_EIO && strstr(e.msg, "sync_ps 0 gone"), "the thread ends with the round's error",
          "rc %d: %s", rc, e.msg);
}

/* Member 0's staging pull fails at its third round (a GPU trainer's copy);
 * its failed hook breaks the group, so member 1's waiting round fails too
 * instead of waiting for ever, and both threads end. */
static int pull_third_fails(void *arg, struct ss_err *e)
{
    int *calls = arg;
    return ++*calls >= 3 ? ss_fail(e, SS_EIO, "device copy lost") : 0;
}

static void break_group(void *arg, const struct ss_err *e)
{
    (void)e;
    collective_local_break(arg);
}

static void test_group_break(void)
{
    cfg.sync.algo = "ma";
    cfg.sync.alpha = 0.5;
    cfg.sync.shadow_sleep_ms = 1;
    struct collective *m[2];
    collective_local_group(m, 2, LEN + 1);
    float w0[LEN] = {1, 1, 1, 1}, w1[LEN] = {3, 3, 3, 3};
    int pulls = 0;
    struct shadow_opts o0 = {.cfg = &cfg, .w = w0, .n = LEN, .coll = m[0], .trainers = 2,
                             .stage = {.pull = pull_third_fails, .arg = &pulls},
                             .failed = {.call = break_group, .arg = m[0]}};
    struct shadow_opts o1 = {.cfg = &cfg, .w = w1, .n = LEN, .coll = m[1], .trainers = 2,
                             .failed = {.call = break_group, .arg = m[1]}};
    struct shadow *s0, *s1;
    struct ss_err e0 = {0}, e1 = {0};
    CHECK(shadow_start(&s0, &o0, &e0) == 0 && shadow_start(&s1, &o1, &e1) == 0,
          "two in-process shadow threads start", "%s %s", e0.msg, e1.msg);
    int rc0 = shadow_join(s0, NULL, &e0), rc1 = shadow_join(s1, NULL, &e1); /* no data_done */
    CHECK(rc0 == SS_EIO && strstr(e0.msg, "device copy lost") && rc1 < 0 &&
              strstr(e1.msg, "another trainer's sync failed"),
          "a member's failed round breaks the in-process group: the other's round fails too",
          "rc %d (%s), %d (%s)", rc0, e0.msg, rc1, e1.msg);
    m[0]->ops->free(m[0]);
    m[1]->ops->free(m[1]);
}

/* EASGD with 2 trainers: once its data ends, the thread pushes once, then
 * follows the center (moved here by hand, as the other trainer's pushes
 * would) until shadow_join; the following is no sync of its own. */
static void test_easgd_follow(void)
{
    cfg.sync.mode = SYNC_SHADOW;
    cfg.sync.algo = "easgd";
    cfg.sync.alpha = 0.5;
    cfg.sync.shadow_sleep_ms = 1;
    float w[LEN] = {1, 1, 1, 1}, zero[LEN] = {0}, eight[LEN] = {8, 8, 8, 8};
    struct center *c = center_local_create(zero, LEN);
    struct shadow_opts o = {.cfg = &cfg, .w = w, .n = LEN, .center = c, .trainers = 2};
    struct shadow *s;
    struct ss_err e;
    CHECK(shadow_start(&s, &o, &e) == 0, "follow: the easgd shadow thread starts", "%s", e.msg);
    shadow_data_done(s);
    const struct timespec nap = {0, 20000000};
    nanosleep(&nap, NULL);
    c->ops->set(c, eight);
    for (int i = 0; i < 200 && ((volatile float *)w)[0] < 7.9f; i++)
        nanosleep(&nap, NULL);
    int64_t following = shadow_syncs(s);
    nanosleep(&nap, NULL);
    int64_t syncs = -1;
    int rc = shadow_join(s, &syncs, &e);
    float end[LEN];
    c->ops->get(c, end);
    CHECK(rc == 0 && w[0] > 7.9f && end[0] == 8 && syncs == following && syncs >= 1,
          "easgd, data ended, another trainer on: follows the center to shadow_join, its "
          "rounds no syncs", "rc %d w %g center %g syncs %lld then %lld", rc, w[0], end[0],
          (long long)following, (long long)syncs);
    c->ops->free(c);
}

int main(void)
{
    test_ma();
    test_bmuf();
    test_allreduce();
    test_summed_tail();
    test_easgd();
    test_easgd_follow();
    test_round_keeps_steps();
    test_foreground();
    test_held();
    test_failed();
    test_group_break();
    CHECK_DONE();
}
