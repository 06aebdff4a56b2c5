/* The sync side of `plan` (src/trainer/plan_sync.c): its queueing model
 * against closed forms (one trainer; the bottleneck's bound as trainers
 * grow; an all-reduce ring), its answer for the sync PSs foreground sync
 * needs, and its rates. */
#include "check.h"
#include "shadowsync/trainer.h"

#include <math.h>

static struct sync_costs peer_like(void)
{
    struct sync_costs k = {0};
    k.easgd = 1;
    k.gap = 5;
    k.sync_ps = 1;
    k.workers = 1;
    k.bytes = 4.0 * 475985 + 64;
    k.svc_s_per_byte = 3e-4 / k.bytes;
    k.local_s = 3e-4;
    k.fixed_s = 3e-4;
    k.trainer_eps = 17400;
    k.batch = 128;
    k.sleep_s = 0.01;
    k.link_t = k.link_s = 125e6; /* 1 Gbit/s */
    return k;
}

static int near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fabs(b);
}

int main(void)
{
    struct sync_costs k = peer_like();
    struct sync_point p;

    /* one trainer: nothing queues, a round is its parts */
    plan_sync_point(&k, 1, 1, &p);
    double parts = k.fixed_s + 2 * k.bytes / k.link_s + k.bytes * k.svc_s_per_byte + k.local_s;
    CHECK(near(p.round_s, parts, 1e-9) && near(p.job_syncs_s, 1 / (k.sleep_s + parts), 1e-9),
          "plan: one shadow trainer's round is its bytes both ways, the PS's update, its own CPU "
          "and the latency",
          "round %g s (expected %g), %g rounds/s", p.round_s, parts, p.job_syncs_s);
    CHECK(p.eps == p.linear && p.linear == k.trainer_eps,
          "plan: the shadow thread holds no worker: its EPS is linear", "%g vs %g", p.eps, p.linear);
    CHECK(near(p.gap, k.trainer_eps / k.batch / p.job_syncs_s, 1e-9),
          "plan: the sync gap is the iterations a second over the rounds a second", "%g", p.gap);

    /* sync.link_share 0.5: the round's bytes go at half the link each way */
    struct sync_costs paced = k;
    paced.pace = 0.5;
    struct sync_point q;
    plan_sync_point(&paced, 1, 1, &q);
    double slow = k.fixed_s + 2 * k.bytes / (0.5 * k.link_t) + k.bytes * k.svc_s_per_byte + k.local_s;
    CHECK(near(q.round_s, slow, 1e-9) && q.gap > p.gap,
          "plan: a paced shadow round moves its bytes at sync.link_share of the link",
          "round %g s (expected %g), gap %g against %g unpaced", q.round_s, slow, q.gap, p.gap);

    /* a host of half a core: the shadow thread's CPU comes out of the worker's,
     * and its own part of a round takes 4x as long (a quarter of a core) */
    struct sync_costs h = k;
    h.cpu = 0.5;
    h.local_s = 2e-3;
    plan_sync_point(&h, 1, 1, &p);
    double keep = 1 - p.job_syncs_s * h.local_s / 0.5;
    CHECK(near(p.eps, h.trainer_eps * keep, 1e-9) && keep < 0.99 &&
              near(p.round_s, parts - k.local_s + 4 * h.local_s, 1e-9),
          "plan: on half a core the shadow's CPU slows the worker and its round",
          "eps %g (expected %g), round %g s", p.eps, h.trainer_eps * keep, p.round_s);

    /* ...and paced to sync.shadow_cpu_share = 0.1 of it: a round and its
     * pause take its CPU over its allowance, and the worker keeps 0.9 */
    h.share = 0.1;
    h.local_s = 5e-3;
    plan_sync_point(&h, 1, 1, &p);
    CHECK(near(p.job_syncs_s, 0.1 * 0.5 / 5e-3, 1e-6) && near(p.eps, 0.9 * h.trainer_eps, 1e-6),
          "plan: a paced shadow thread on half a core: 10 rounds a second, 0.9 of linear",
          "%g rounds/s, eps %g", p.job_syncs_s, p.eps);

    /* more trainers: the gap grows, the sync PS's link fills but never past its rate */
    double last_gap = 0, last_share = 2;
    int grows = 1, under = 1, falls = 1;
    for (int n = 1; n <= 64; n *= 2) {
        struct sync_costs f = k;
        f.foreground = 1;
        struct sync_point s, g;
        plan_sync_point(&k, n, 1, &s);
        plan_sync_point(&f, n, 1, &g);
        grows &= s.gap > last_gap;
        under &= s.ps_bytes_s <= k.link_s * (1 + 1e-9);
        falls &= g.eps / g.linear < last_share;
        last_gap = s.gap;
        last_share = g.eps / g.linear;
    }
    CHECK(grows && under && falls,
          "plan: 1 to 64 trainers: the shadow's gap grows, a sync PS's load stays within its "
          "link, foreground's share of linear falls", "%d %d %d", grows, under, falls);
    plan_sync_point(&k, 256, 1, &p);
    CHECK(near(p.ps_bytes_s, k.link_s / 2, 0.01),
          "plan: 256 shadow trainers fill the sync PS's link, requests and answers in turn (the "
          "bottleneck's bound)",
          "%g of %g B/s", p.ps_bytes_s, k.link_s);

    /* foreground on a slow sync PS link: the fewest sync PSs for 90 % */
    struct sync_costs f = k;
    f.foreground = 1;
    f.gap = 30;
    f.link_s = 12.5e6; /* 100 Mbit/s at the sync PSs, 10 Gbit/s at the trainers */
    f.link_t = 1.25e9;
    int S = plan_sync_needs(&f, 8, 0.9);
    struct sync_point at, below;
    plan_sync_point(&f, 8, S, &at);
    plan_sync_point(&f, 8, S > 1 ? S - 1 : 1, &below);
    CHECK(S > 1 && at.eps >= 0.9 * at.linear && below.eps < 0.9 * below.linear,
          "plan: foreground gap 30, 8 trainers, slow sync PS links: the fewest sync PSs for 90 % "
          "of linear", "S = %d: %.3f of linear, %.3f at S - 1", S, at.eps / at.linear,
          below.eps / below.linear);
    f.link_t = 12.5e6; /* the trainers' own links too slow: no count of sync PSs helps */
    CHECK(plan_sync_needs(&f, 8, 0.9) == 0,
          "plan: where the trainers' own links bound foreground sync, no count of sync PSs is named",
          "%d", plan_sync_needs(&f, 8, 0.9));

    /* an all-reduce: a ring moves 2 (N - 1) / N of the center over each trainer's link */
    struct sync_costs m = k;
    m.easgd = 0;
    plan_sync_point(&m, 4, 1, &p);
    CHECK(near(p.round_s, m.fixed_s + m.local_s + 1.5 * m.bytes / m.link_t, 1e-9) &&
              p.sync_ps == 0 && p.ps_bytes_s == 0,
          "plan: ma/bmuf on 4 trainers: a ring's round, no sync PS", "%g s", p.round_s);
    plan_sync_point(&m, 1, 1, &p);
    CHECK(p.job_syncs_s == 0 && p.eps == p.linear, "plan: ma/bmuf on 1 trainer: no sync",
          "%g", p.job_syncs_s);

    double r;
    CHECK(ss_parse_rate("1gbit", &r) == 0 && r == 125e6 && ss_parse_rate("100mbit", &r) == 0 &&
              r == 12.5e6 && ss_parse_rate("off", &r) == 0 && isinf(r) &&
              ss_parse_rate("1gb", &r) < 0 && ss_parse_rate("0mbit", &r) < 0,
          "plan: rates as tc writes them, off unshaped, others refused", "%g", r);
    CHECK_DONE();
}
