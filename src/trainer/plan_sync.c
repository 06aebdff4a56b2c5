/* `shadowsync plan --trainers LIST` (issue 40 §5): the sync side of a
 * capacity plan. For N trainers and S sync PSs on links of given rates it
 * predicts each sync PS's load, the sync gap the shadow threads reach, the
 * EPS that foreground sync every sync.gap iterations reaches, and the sync
 * PSs that foreground sync needs to stay within 90 % of linear.
 *
 * The model is a closed queueing network solved by exact mean value
 * analysis (Reiser & Lavenberg 1980): each trainer's sync loop is one
 * customer that thinks (the shadow thread's sleep, or a foreground
 * worker's gap iterations) and then makes a round; a round queues at its
 * sync PS's link (the request and the answer in turn) and its CPU
 * (every sync PS takes its slice of every round, so one stands for all),
 * plus a delay of
 * its own: the part of the trainer's link beyond the PS's (or of the pace
 * sync.link_share holds a shadow round's connections to), the trainer's
 * own work and a fixed latency. All-reduce algorithms (ma, bmuf) have no
 * queue: a ring moves 2(N-1)/N of the center over every trainer's link.
 *
 * A trainer host of fewer cores than its threads (--trainer-cpu) lends
 * the shadow thread's CPU out of the workers' and stretches it; where
 * sync.shadow_cpu_share paces the thread, its pause fills each round up to
 * its CPU over its allowance.
 *
 * Costs come from this machine and from a run: the bytes from the model
 * layout, a sync PS's service time and the trainer's own part timed here
 * on the real update loop; a trainer's EPS alone given (--trainer-eps) or
 * a run's; and from a 1-trainer shadow run's metrics.json (--from), the
 * CPU its shadow thread took from the worker, the stretch, or the fixed
 * latency (its round time less the modelled parts). */
#include "plot.h"
#include "shadowsync/syncps.h"
#include "shadowsync/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SYNC_PS = 64, MAX_TRAINERS = 4096 };

/* The cores a trainer host gives its workers and shadow thread. */
static double host_cpu(const struct sync_costs *k)
{
    return k->cpu > 0 ? k->cpu : k->workers + 1;
}

/* How much longer the trainer's CPU part of a round takes than on a core
 * of its own: the shadow thread shares the host with the working workers;
 * a foreground round runs alone (its worker waits). */
static double cpu_stretch(const struct sync_costs *k)
{
    double C = host_cpu(k), want = k->foreground ? 1 : k->workers + 1;
    if (!k->foreground && k->stretch > 0)
        return k->stretch; /* as a run measured it */
    return C >= want ? 1 : (k->foreground ? 1 / C : want / C);
}

/* The share of its EPS alone that a trainer keeps while its shadow thread
 * takes cpu_s of CPU a second: what the workers' cores lend it comes out
 * of them, a spare core's does not. */
static double shadow_keeps(const struct sync_costs *k, double cpu_s)
{
    double C = host_cpu(k), used = C < k->workers ? C : k->workers;
    double spare = C > k->workers ? C - k->workers : 0, lost = cpu_s - spare;
    return lost <= 0 ? 1 : lost >= used ? 0 : 1 - lost / used;
}

/* A round's response time and the job's rounds per second, N customers. */
static void mva(const struct sync_costs *k, int customers, int S, double think, double *round_s,
                double *x)
{
    double slice = k->bytes / S, link_s = slice / k->link_s;
    /* the PS's link as one queue for the request and its answer: the
     * trainers' requests share the inbound link and end together, then
     * their answers the outbound (measured on the lab: a sync PS at 100
     * Mbit/s served 8 trainers what the two directions in turn allow) */
    double D[2] = {2 * link_s, slice * k->svc_s_per_byte}, Q[2] = {0, 0};
    /* the trainer's link beyond the PS's: its whole center, or a slice at
     * the pace of one paced connection where that is slower */
    double paced = k->pace > 0 ? slice / (k->pace * k->link_t) : 0;
    double own = fmax(k->bytes / k->link_t, paced) - link_s;
    double delay = k->fixed_s + (own > 0 ? 2 * own : 0) + k->local_s * cpu_stretch(k);
    double R = delay, X = 0;
    for (int n = 1; n <= customers; n++) {
        double r[2];
        R = delay;
        for (int i = 0; i < 2; i++)
            R += r[i] = D[i] * (1 + Q[i]);
        X = n / (think + R);
        for (int i = 0; i < 2; i++)
            Q[i] = X * r[i];
    }
    *round_s = R;
    *x = X;
}

/* The shadow thread's shortest round-and-pause where sync.shadow_cpu_share
 * paces it (a host with no core to spare): its CPU a round over its
 * allowance; 0: not paced. */
static double paced_cycle(const struct sync_costs *k)
{
    if (k->foreground || !(k->share > 0) || host_cpu(k) >= k->workers + 1)
        return 0;
    return k->local_s / (k->share * host_cpu(k));
}

void plan_sync_point(const struct sync_costs *k, int N, int S, struct sync_point *p)
{
    memset(p, 0, sizeof *p);
    p->trainers = N;
    p->sync_ps = S;
    p->linear = N * k->trainer_eps;
    double it_s = k->trainer_eps / k->batch; /* a trainer's iterations a second */
    double think = k->foreground ? k->gap * k->workers / it_s : k->sleep_s;
    int customers = k->foreground ? N * k->workers : N;
    if (!k->easgd) { /* an all-reduce: no sync PS, every trainer's link carries the ring */
        p->sync_ps = 0;
        p->round_s = N < 2 ? 0 : k->fixed_s + k->local_s * cpu_stretch(k) +
                                     2.0 * (N - 1) / N * k->bytes / k->link_t;
        /* a trainer's rounds: every gap of its iterations while its workers wait
         * (foreground), else the sleep or the paced cycle, whichever is longer */
        double cycle = (k->foreground ? k->gap / it_s : think) + p->round_s, cyc = paced_cycle(k);
        p->job_syncs_s = N < 2 ? 0 : N / (cyc > cycle ? cyc : cycle);
    } else {
        mva(k, customers, S, think, &p->round_s, &p->job_syncs_s);
        /* paced: the pause fills each cycle up to its least (a fixed point:
         * a longer pause queues less, so the round is shorter) */
        for (int i = 0, more = 1; i < 50 && more; i++) {
            double cyc = paced_cycle(k), z = cyc - p->round_s;
            more = z > think * 1.0001;
            if (more)
                mva(k, customers, S, think = z, &p->round_s, &p->job_syncs_s);
        }
        p->ps_bytes_s = p->job_syncs_s * k->bytes / S;
    }
    if (k->foreground)
        p->eps = N < 2 && !k->easgd ? p->linear : p->job_syncs_s * k->gap * k->batch;
    else /* the shadow thread holds no worker, but takes its CPU where the host has no spare */
        p->eps = p->linear * shadow_keeps(k, p->job_syncs_s / N * k->local_s);
    if (p->eps > p->linear)
        p->eps = p->linear;
    p->gap = p->job_syncs_s > 0 ? p->eps / k->batch / p->job_syncs_s : NAN;
}

int plan_sync_needs(const struct sync_costs *k, int N, double share)
{
    if (!k->easgd)
        return 0;
    for (int S = 1; S <= MAX_SYNC_PS; S++) {
        struct sync_point p;
        plan_sync_point(k, N, S, &p);
        if (p.eps >= share * p.linear)
            return S;
    }
    return 0;
}

/* "1,2,4,8" or "5-64" (or both: "1,2,4-8") into out[0..n), ascending. */
static int parse_trainers(const char *s, int *out, int cap)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p)
            return -1;
        if (*end == '-') {
            p = end + 1;
            hi = strtol(p, &end, 10);
            if (end == p)
                return -1;
        }
        if (lo < 1 || hi < lo || hi > MAX_TRAINERS || (*end && *end != ','))
            return -1;
        for (long v = lo; v <= hi; v++) {
            if (n == cap || (n && v <= out[n - 1]))
                return -1;
            out[n++] = (int)v;
        }
        p = *end ? end + 1 : end;
    }
    return n;
}

/* The best of a few timings of the sync PS's update of n floats, with the
 * two copies Thrift makes (the request read, the answer written), and of
 * the trainer's part of a round (its copy out, the answer read, its own
 * elastic step). */
static void time_round_work(size_t n, double *svc_s, double *local_s)
{
    size_t m = n ? n : 1;
    float *c = ss_xmalloc(m * 4), *w = ss_xmalloc(m * 4), *o = ss_xmalloc(m * 4);
    for (size_t i = 0; i < m; i++)
        c[i] = w[i] = o[i] = (float)(i % 97) * 0.01f;
    double best_svc = INFINITY, best_local = INFINITY;
    for (int r = 0; r < 7; r++) {
        double t0 = ss_now();
        memcpy(w, o, m * 4);
        syncps_elastic_apply(c, w, o, m, 0.5f);
        memcpy(w, o, m * 4);
        double t1 = ss_now();
        memcpy(o, c, m * 4);
        memcpy(w, o, m * 4);
        syncps_elastic_apply(c, w, o, m, 0.5f);
        double t2 = ss_now();
        best_svc = t1 - t0 < best_svc ? t1 - t0 : best_svc;
        best_local = t2 - t1 < best_local ? t2 - t1 : best_local;
    }
    free(c);
    free(w);
    free(o);
    *svc_s = best_svc;
    *local_s = best_local;
}

/* The run's figures the plan takes: a trainer's EPS (unless given), and
 * where it ran one trainer in shadow mode, what its shadow thread cost:
 * the CPU of a round (from the EPS it kept against the trainer alone,
 * given) and its fixed latency (the measured round less the modelled
 * parts). */
static int costs_from_run(const char *dir, struct sync_costs *k, int eps_given, FILE *out,
                          struct ss_err *e)
{
    char *path = g_build_filename(dir, "metrics.json", NULL), *m = plot_read_text(path);
    int rc = 0;
    if (!m || !plot_metrics_complete(path))
        rc = ss_fail(e, SS_EINVAL, "plan --from %s: no metrics.json of a run that ended there",
                     dir);
    double eps = m ? plot_json_number(m, "eps") : NAN, tr = m ? plot_json_number(m, "trainers") : NAN;
    double syncs = m ? plot_json_number(m, "syncs") : NAN, secs = m ? plot_json_number(m, "seconds") : NAN;
    if (rc == 0 && !(eps > 0 && tr >= 1))
        rc = ss_fail(e, SS_EINVAL, "plan --from %s: its metrics.json has no eps or trainers",
                     path);
    if (rc == 0) {
        if (!eps_given)
            k->trainer_eps = eps / tr;
        fprintf(out, "# from %s: %.0f examples/s over %.0f trainer(s), %.0f a trainer", path, eps,
                tr, eps / tr);
        char *mode = strstr(m, "\"sync_mode\": \"shadow\"");
        if (tr == 1 && mode && syncs > 0 && secs > 0 && k->easgd) {
            double r1 = syncs / secs, kept = eps / k->trainer_eps;
            double round = 1 / r1 - k->sleep_s, x, rest;
            struct sync_costs z = *k; /* the round's parts but its CPU */
            z.local_s = 0;
            z.foreground = 0;
            mva(&z, 1, k->sync_ps, 0, &rest, &x);
            if (paced_cycle(k) > 0) { /* paced: its CPU a round is its allowance's */
                double c = k->share * host_cpu(k) / r1;
                k->local_s = c > k->local_s ? c : k->local_s;
            } else if (kept < 1) { /* the CPU its shadow thread took from the worker, and how
                                    * long that CPU took it on the shared host: the rest of
                                    * the round */
                double C = host_cpu(k), used = C < k->workers ? C : k->workers;
                double spare = C > k->workers ? C - k->workers : 0;
                double c = ((1 - kept) * used + spare) / r1, most = (k->workers + 1) / C;
                if (c > k->local_s)
                    k->local_s = c;
                k->stretch = (round - rest) / k->local_s;
                k->stretch = k->stretch < 1 ? 1 : k->stretch > most && most > 1 ? most : k->stretch;
            } else { /* the CPU as timed here: the latency is what is left */
                double fx = round - rest - k->local_s * cpu_stretch(k);
                k->fixed_s += fx > 0 ? fx : 0;
            }
            fprintf(out, "; %s %.2f ms; it kept %.2f of the trainer's EPS alone",
                    paced_cycle(k) > 0 ? "its rounds with their paced pauses took"
                                       : "its rounds took", round * 1e3, kept);
        }
        fprintf(out, "\n");
    }
    g_free(m);
    g_free(path);
    return rc;
}

static int draw(const char *png, const struct sync_point *pt, const int *needs, int n,
                const struct sync_costs *k, struct ss_err *e)
{
    GString *s = g_string_new("");
    g_string_append_printf(s, "set multiplot layout 1,2\nset grid\nset key top left\n"
                              "set xlabel 'trainers'\nset ylabel 'examples/s'\n"
                              "$d << EOD\n");
    for (int i = 0; i < n; i++)
        g_string_append_printf(s, "%d %.6g %.6g %.6g %.6g %d\n", pt[i].trainers, pt[i].linear,
                               pt[i].eps, pt[i].gap, pt[i].ps_bytes_s / 1e6, needs[i]);
    g_string_append_printf(s, "EOD\nset title 'EPS, foreground gap %d on %d sync PS(s)'\n"
                              "plot $d u 1:2 w l lw 2 t 'linear (shadow)', "
                              "$d u 1:3 w lp pt 7 lw 2 t 'foreground gap %d'\n"
                              "set title 'shadow: sync gap and each sync PS''s load'\n"
                              "set ylabel 'iterations a sync'\nset y2label 'MB/s each way'\n"
                              "set y2tics\nset ytics nomirror\n"
                              "plot $d u 1:4 w lp pt 7 lw 2 t 'sync gap', "
                              "$d u 1:5 axes x1y2 w lp pt 5 lw 2 t 'sync PS MB/s'\n"
                              "unset multiplot\n",
                           k->gap, k->sync_ps, k->gap);
    int rc = plot_gnuplot(png, 1400, 560, s->str, e);
    g_string_free(s, TRUE);
    return rc;
}

int trainer_plan_sync(const struct ss_config *c, const struct plan_sync_opts *o, size_t n_center,
                      FILE *out, struct ss_err *e)
{
    struct sync_costs k = {0};
    int list[MAX_TRAINERS], n;
    const char *algo = c->sync.algo;
    k.easgd = !strcmp(algo, "easgd");
    if (strcmp(algo, "easgd") && strcmp(algo, "ma") && strcmp(algo, "bmuf"))
        return ss_config_fail(e, c, "sync.algo", "plan --trainers plans a sync of easgd, ma or "
                              "bmuf; sync.algo = %s", algo);
    if (k.easgd && c->job.sync_ps < 1)
        return ss_config_fail(e, c, "job.sync_ps", "plan --trainers with sync.algo = easgd "
                              "needs job.sync_ps >= 1 (the sync PSs it plans)");
    if ((n = parse_trainers(o->trainers, list, MAX_TRAINERS)) < 1)
        return ss_fail(e, SS_EINVAL, "plan --trainers %s: a list of trainer counts in rising "
                       "order, 1 to %d (1,2,4,8 or 5-64)", o->trainers, MAX_TRAINERS);
    if (ss_parse_rate(o->link, &k.link_t) < 0)
        return ss_fail(e, SS_EINVAL, "plan --link %s: a rate as tc writes it (100mbit, 1gbit, "
                       "10gbit) or off", o->link);
    k.link_s = k.link_t;
    if (o->sync_link && ss_parse_rate(o->sync_link, &k.link_s) < 0)
        return ss_fail(e, SS_EINVAL, "plan --sync-link %s: a rate as tc writes it (100mbit, "
                       "1gbit, 10gbit) or off", o->sync_link);
    if (!o->from && !(o->trainer_eps > 0))
        return ss_fail(e, SS_EINVAL, "plan --trainers needs a trainer's examples/s: --from "
                       "RUN_DIR (a run of this config, best 1 trainer on the same host size "
                       "and links) or --trainer-eps E");
    k.foreground = c->sync.mode == SYNC_FOREGROUND;
    k.gap = c->sync.gap;
    k.batch = c->trainer.batch_size;
    k.workers = c->trainer.worker_threads;
    k.sleep_s = c->sync.shadow_sleep_ms / 1e3;
    k.sync_ps = k.easgd ? c->job.sync_ps : 0;
    k.bytes = 4.0 * (double)n_center + 64; /* the floats and a request's framing */
    double svc;
    time_round_work(n_center, &svc, &k.local_s);
    double local_timed = k.local_s;
    k.svc_s_per_byte = svc / k.bytes;
    k.fixed_s = 3e-4; /* two Thrift calls' round trips on a LAN, unless a run says */
    k.cpu = o->trainer_cpu;
    k.share = c->sync.shadow_cpu_share;
    k.pace = k.foreground ? 0 : c->sync.link_share; /* (foreground rounds are never paced) */
    if (o->trainer_eps > 0)
        k.trainer_eps = o->trainer_eps;
    int rc = o->from ? costs_from_run(o->from, &k, o->trainer_eps > 0, out, e) : 0;
    if (rc < 0)
        return rc;
    fprintf(out, "# sync plan: %s, %s; a round moves %.2f MiB each way (%zu floats); a trainer "
            "alone trains %.0f examples/s (%s), batch %d x %d worker(s); links: trainers %s, "
            "sync PSs %s\n", algo, k.foreground ? "foreground" : "shadow", k.bytes / 1048576,
            n_center, k.trainer_eps, o->trainer_eps > 0 ? "given" : "from the run", (int)k.batch,
            k.workers, o->link ? o->link : "off",
            o->sync_link ? o->sync_link : o->link ? o->link : "off");
    struct sync_costs sh = k, fg = k;
    sh.foreground = 0;
    fg.foreground = 1;
    fprintf(out, "# costs: a sync PS's update of the whole center %.2f ms (timed here), the "
            "trainer's CPU in a round %.2f ms on a core (%s; x%.2f as long beside the workers), "
            "a round's fixed latency %.2f ms, shadow sleep %.0f ms; a trainer host of %g "
            "cores\n", svc * 1e3, k.local_s * 1e3,
            k.local_s > local_timed ? "from the run" : "timed here", cpu_stretch(&sh),
            k.fixed_s * 1e3, k.sleep_s * 1e3, host_cpu(&k));
    struct sync_point *pt = ss_xmalloc(sizeof *pt * (size_t)n);
    int *needs = ss_xmalloc(sizeof *needs * (size_t)n);
    fprintf(out, "%8s %7s %9s %9s %10s %10s %11s %10s %8s %s\n", "trainers", "sync_ps",
            "round_ms", "syncs/s", "ps_MB/s", "shadow_gap", "shadow_eps", "fg_eps", "fg_lin",
            "fg_sync_ps_for_90%");
    GString *csv = g_string_new("trainers,sync_ps,round_ms,syncs_per_s,sync_ps_mb_s,shadow_gap,"
                                "shadow_eps,fg_gap,fg_eps,fg_of_linear,fg_sync_ps_for_90\n");
    for (int i = 0; i < n; i++) {
        struct sync_point s;
        plan_sync_point(&sh, list[i], k.sync_ps ? k.sync_ps : 1, &s);
        plan_sync_point(&fg, list[i], k.sync_ps ? k.sync_ps : 1, &pt[i]);
        pt[i].gap = s.gap; /* the picture: the shadow's gap and load, foreground's EPS */
        pt[i].ps_bytes_s = s.ps_bytes_s;
        needs[i] = plan_sync_needs(&fg, list[i], 0.9);
        char need[32];
        snprintf(need, sizeof need, k.easgd ? needs[i] ? "%d" : "none" : "-", needs[i]);
        fprintf(out, "%8d %7d %9.2f %9.1f %10.1f %10.1f %11.0f %10.0f %7.0f%% %s\n", list[i],
                k.sync_ps, s.round_s * 1e3, s.job_syncs_s, s.ps_bytes_s / 1e6, s.gap, s.eps,
                pt[i].eps, 100 * pt[i].eps / pt[i].linear, need);
        g_string_append_printf(csv, "%d,%d,%.4g,%.4g,%.4g,%.4g,%.6g,%d,%.6g,%.4f,%d\n", list[i],
                               k.sync_ps, s.round_s * 1e3, s.job_syncs_s, s.ps_bytes_s / 1e6,
                               s.gap, s.eps, k.gap, pt[i].eps, pt[i].eps / pt[i].linear,
                               needs[i]);
    }
    fprintf(out, "# fg: foreground sync every sync.gap = %d iterations; fg_sync_ps_for_90%%: the "
            "sync PSs it needs for 90 %% of linear (none: more do not get there; the trainers' "
            "own links bound it)\n", k.gap);
    if (c->output.dir[0]) {
        char *p = g_build_filename(c->output.dir, "sync_plan.csv", NULL);
        GError *err = NULL;
        if (g_mkdir_with_parents(c->output.dir, 0755) == 0 &&
            g_file_set_contents(p, csv->str, (gssize)csv->len, &err))
            fprintf(out, "# sync plan written to %s\n", p);
        else
            fprintf(stderr, "shadowsync: warning: the sync plan is not written to %s: %s\n", p,
                    err ? err->message : strerror(errno));
        g_clear_error(&err);
        g_free(p);
    }
    g_string_free(csv, TRUE);
    if (o->png && (rc = draw(o->png, pt, needs, n, &k, e)) == 0)
        fprintf(out, "# sync plan drawn to %s\n", o->png);
    free(pt);
    free(needs);
    return rc;
}
