/* The embedded default (DESIGN §2, §3, §7): job.trainers trainers in this
 * process, each with its own dense buffer, trainer.worker_threads Hogwild
 * workers and one shadow thread; one reader and one copy of the embedding
 * tables shared by all, so every example is consumed exactly once.
 *
 * A worker's batch loop: next batch -> lookup -> forward (scored for the
 * progressive train NE before it is trained on) -> backward -> dense step
 * on the shared buffer, no locks -> push embedding gradients. It allocates
 * nothing; its batch and scratch are sized once. The main thread prints a
 * progress line every output.log_interval_s and writes the run directory. */
#include "shadowsync/gpu.h"
#include "shadowsync/reader.h"
#include "shadowsync/rpc.h"
#include "shadowsync/shadow.h"
#include "shadowsync/trainer.h"

#include <cblas.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SS_MAX_THREADS 4096 /* the embedded default's workers and shadow threads */

struct trainer;

struct worker {
    struct trainer *tr;
    int id;
    struct emb_client *emb;     /* the job's shared one, or this worker's own */
    pthread_t th;
    pthread_mutex_t mu;         /* guards the figures below */
    int64_t examples, iterations;
    struct ne_acc ne;
    double t_part[4];           /* seconds in each part of a step: read, lookup, dense, push */
    struct hot_stats hot;       /* its hot client's figures (read once it has ended) */
    struct cache_stats cache;   /* its embedding cache's */
    struct des_stats des;       /* its DES client's */
    int64_t clock;              /* the rates' clock at its last batch (read once it has ended) */
    int64_t flushed_gen;        /* under mu: the last flush asked (flush_workers) it made */
    int ended;                  /* under mu: its loop has ended (its updates all sent) */
    struct gpu_worker *gpu;     /* freed in free_trainers, after the shadow thread's final
                                 * round: a cudaFree waits for the whole device, an NCCL
                                 * sum in flight included, which waits on the peers */
    int rc;
    struct ss_err err;
};

struct job;

/* A mid-run eval (output.eval_every; mid_eval_poll). */
struct mid_eval {
    int64_t every, next;        /* due once the job has trained next examples */
    struct ss_config c;         /* the job's, its bad lines not named again */
    float *w;                   /* the copy of trainer 0's replica it scores */
    int64_t at;                 /* the job's examples when it was copied */
    double elapsed;             /* ...and the run's seconds then */
    pthread_t th;
    int running;                /* a thread started and not yet joined */
    int done, cancel;           /* atomic: its eval has ended; end it early */
    int rc;                     /* its eval's: 0, 1 when cancelled, or < 0 with err */
    struct eval_result ev;
    struct ss_err err;
};

struct trainer {
    struct job *job;
    int id;
    float *w, *state;           /* dense parameters and optimizer state, one flat layout */
    struct gpu_dense *gpu;      /* trainer.device = cuda: the live copy (w, state: read back
                                 * for checkpoints and the end) */
    float *stage, *snap;        /* ...and the shadow thread's staging copy, as pulled */
    int pinned;                 /* stage and snap page-locked (gpu_host_register) */
    struct shadow *shadow;
    struct worker *workers;
    int workers_left;           /* under job->mu; the last one out ends the data */
    int64_t syncs;
};

struct job {
    const struct ss_config *c;
    const struct trainer_env *env; /* NULL: the embedded default */
    int is_master;
    struct model_layout l;
    struct schema schema;
    struct reader *reader;
    struct emb_tables *tables;
    struct emb_client *emb;
    /* embedding.placement = trainers (DES): the plan over the trainers (NULL:
     * off) and each of this process's trainers' shards (NULL: it holds none) */
    const struct placement *des;
    struct placement des_plan;  /* the embedded default's own */
    struct emb_tables **shards; /* [n_tr] */
    struct hot_set *hot;        /* hot embeddings (NULL: none), replicated at w + n_params */
    size_t n_sync;              /* the floats a trainer syncs: dense parameters, hot rows */
    struct trainer *tr;
    int n_tr, n_wk;
    int gpu_dev;                /* trainer t's dense half on device gpu_dev + t; -1: the CPU */
    int gpu_count;
    struct collective **coll;
    struct center *center;
    int stop;                   /* a worker failed: the others leave their loops (atomic) */
    struct ss_err sync_err;     /* the first failed sync round's (under mu; code 0: none) */
    pthread_mutex_t mu;
    pthread_cond_t cv, resume_cv;
    int workers_left;
    int pause, paused;          /* under mu (pause also atomic): workers wait at a batch's edge */
    int64_t resumes;            /* under mu: checkpoint pauses ended (paused workers wait on it) */
    int resumed_final;          /* it resumed a run's final checkpoint (after its final sync) */
    int kept_resumed;           /* ...and trained nothing: its model is that checkpoint's */
    int64_t flush_gen;          /* atomic, raised under mu: the workers' caches send on what
                                 * they hold back (flush_workers) */
    const char *resume;         /* checkpoint directory to resume from (NULL: a fresh run) */
    char resumed_from[4300];    /* the checkpoint it resumed from */
    int resumed_trainers;
    struct {                    /* the figures of the run(s) before a resume */
        int64_t examples, iterations, syncs;
        struct ne_acc ne;
        double elapsed;
    } base;
    int64_t sched_base;         /* the job's examples before this run (a resume's), on every
                                 * rank, where the rates' schedule starts */
    int sched_on, sched_times;  /* a schedule is set; the job's examples per one of a
                                 * batch's place in its reader's data: 1 in process or through
                                 * reader services, the trainers where each reads its share */
    int64_t sched_at0;          /* its own reader's place at this run's start */
    double sched_ratio;         /* where each reads its share: the job's examples per this
                                 * trainer's, from the progress reports (0: none yet, so
                                 * sched_times); atomic */
    int64_t checkpoints, checkpoint_failures;
    int final_ckpt_failed;      /* the final checkpoint could not be written */
    double nonfinite;           /* the job's NaN or infinite parameters at the end */
    char final_ckpt[4400];      /* the final checkpoint this run committed */
    double run_id;              /* the run's, kept by its checkpoints and output.dir/run.id */
    double t0;
    double start, frac0; /* this process's start of training, and the reader's place then */
    double frac_all;     /* trainers reading data.train themselves: their mean place (beat) */
    double ck_next;      /* the master's next snapshot (ss_now), while any trainer trains */
    FILE *say;           /* notes (NULL: stdout; eval --predictions -: stderr) */
    int halt_noted;      /* a stop (ss_halt_signal) was seen and said */
    int64_t seen;        /* the job's examples at the last progress report */
    struct mid_eval mid; /* the master's evals while the job trains */
    double eval_s;       /* the end-of-run eval's seconds, and its threads */
    int eval_threads;
    char dense_desc[200];       /* what ran the MLPs' matmuls (a CPU worker's, under mu) */
    FILE *csv, *eval_csv;
    int64_t eval_last_at;       /* eval.csv's last row: its examples, and where it starts */
    off_t eval_last_off;
};

/* Under j->mu: the worker counts as paused until the trainer goes on. */
static void paused_until_resumed(struct job *j)
{
    int64_t gen = j->resumes;
    j->paused++;
    pthread_cond_broadcast(&j->cv);
    while (j->resumes == gen)
        pthread_cond_wait(&j->resume_cv, &j->mu);
    j->paused--;
}

/* A worker at the edge of a batch while a checkpoint is taken. */
static void wait_while_paused(struct job *j)
{
    pthread_mutex_lock(&j->mu);
    if (j->pause)
        paused_until_resumed(j);
    pthread_mutex_unlock(&j->mu);
}

/* A DES group stopped for a checkpoint (every group pauses at a round of
 * its own, maybe before this trainer's flag is up). */
static void des_wait(void *arg)
{
    struct job *j = ((struct worker *)arg)->tr->job;
    pthread_mutex_lock(&j->mu);
    paused_until_resumed(j);
    pthread_mutex_unlock(&j->mu);
}

/* Foreground sync of a DES worker: after the group's rounds, so every
 * member of the group asks its trainer's round at once. */
static int des_sync(void *arg, struct ss_err *e)
{
    struct worker *wk = arg;
    int rc = shadow_request(wk->tr->shadow);
    return rc < 0 ? ss_fail(e, rc, "sync failed in a foreground round") : 0;
}

/* Sends on what the worker's client holds back (its cache's updates). */
static int flush_emb(struct worker *wk)
{
    return wk->emb->ops->flush ? wk->emb->ops->flush(wk->emb, &wk->err) : 0;
}

/* What to change when the model diverged: the rates, and BMUF's own step
 * (which the schedule does not scale). */
static const char *diverged_advice(const struct ss_config *c)
{
    return strcmp(c->sync.algo, "bmuf")
               ? "lower optim.dense_lr or optim.emb_lr, or add an optim.warmup_examples"
               : "lower optim.dense_lr or optim.emb_lr, add an optim.warmup_examples, or lower "
                 "sync.bmuf_lr or sync.bmuf_momentum, which the schedule does not scale";
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    struct trainer *tr = wk->tr;
    struct job *j = tr->job;
    const struct ss_config *c = j->c;
    const struct model_layout *l = &j->l;
    struct batch b;
    struct model_scratch s;
    struct gpu_worker *gw = NULL;
    batch_init(&b, c->trainer.batch_size, l->n_dense, l->n_tables);
    memset(&s, 0, sizeof s);
    int foreground = c->sync.mode == SYNC_FOREGROUND && strcmp(c->sync.algo, "none") != 0;
    float lr = (float)c->optim.dense_lr, eps = (float)c->optim.eps;
    int rc = tr->gpu ? gpu_worker_create(&gw, tr->gpu, c->trainer.batch_size, &wk->err) : 0;
    wk->gpu = gw;
    if (!tr->gpu) /* a GPU worker keeps its scratch on the device */
        model_scratch_init(&s, l, c->trainer.batch_size);
    /* on a GPU the lookup and push use the worker's pinned buffers */
    float *emb = gw ? gpu_worker_emb(gw) : s.emb, *d_emb = gw ? gpu_worker_d_emb(gw) : s.d_emb;
    const float *prob = gw ? gpu_worker_prob(gw) : s.prob;
    int des = j->des != NULL; /* the group decides when to pause */
    int64_t stepped = 0;        /* this worker's examples so far */
    for (int64_t it = 1; rc == 0 && !__atomic_load_n(&j->stop, __ATOMIC_RELAXED); it++) {
        struct batch_feed *feed = j->env ? j->env->feed : NULL;
        if (!feed && ss_halt_signal()) /* stopped: as at the end of the data (a feed drains) */
            break;
        if (des && !feed && (rc = emb_des_gate(wk->emb, &wk->err)) < 0)
            break;
        int64_t gen = __atomic_load_n(&j->flush_gen, __ATOMIC_ACQUIRE);
        if (gen != wk->flushed_gen) {
            if ((rc = flush_emb(wk)) < 0) /* a mid-run eval scores every update made */
                break;
            pthread_mutex_lock(&j->mu);
            wk->flushed_gen = gen;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
        }
        if (!des && !feed && __atomic_load_n(&j->pause, __ATOMIC_ACQUIRE)) {
            if ((rc = flush_emb(wk)) < 0) /* a checkpoint holds every update made */
                break;
            wait_while_paused(j);
        }
        double t[5]; /* the step's part boundaries */
        t[0] = ss_now();
        rc = feed ? feed_next(feed, &b, &wk->err) : reader_next(j->reader, &b, &wk->err);
        if (rc == FEED_PAUSED && des) { /* a round without a batch: the group pauses */
            if ((rc = emb_des_idle(wk->emb, &wk->err)) < 0)
                break;
            continue;
        }
        if (rc == FEED_PAUSED) { /* the queue drained for a checkpoint: wait for its end */
            if ((rc = flush_emb(wk)) < 0) /* (pause_workers may not have raised j->pause yet) */
                break;
            pthread_mutex_lock(&j->mu);
            paused_until_resumed(j);
            pthread_mutex_unlock(&j->mu);
            continue;
        }
        if (rc < 0 || b.n == 0)
            break;
        float rate = lr; /* the dense rate of this batch's step; the rows' go with b */
        if (j->sched_on) { /* the batch's place in the job's data (not known: this worker's
                            * own count, as if every worker and trainer kept its pace) */
            double times, r;
            __atomic_load(&j->sched_ratio, &r, __ATOMIC_RELAXED);
            times = r > 0 ? r : j->sched_times;
            int64_t at = b.at < 0 ? j->sched_base + stepped * j->n_wk * j->sched_times
                         : j->reader /* its own reader: the job's count at its start, on */
                             ? j->sched_base + (int64_t)((double)(b.at - j->sched_at0) * times)
                             : (int64_t)((double)b.at * times);
            b.lr_scale = (float)optim_lr_scale(c, at);
            rate = lr * b.lr_scale;
            wk->clock = at > wk->clock ? at : wk->clock;
        }
        stepped += b.n;
        t[1] = ss_now();
        if ((rc = wk->emb->ops->lookup(wk->emb, &b, emb, &wk->err)) < 0)
            break;
        t[2] = ss_now();
        model_pool_scale(l, &b, emb); /* mean pooling: here and on the gradients below */
        struct ne_acc scored = {0}; /* scored before it is trained on */
        if (gw) { /* forward, backward and step on the device; prob from its forward */
            if ((rc = gpu_worker_train(gw, &b, c->optim.dense, rate, eps, &wk->err)) < 0)
                break;
            ne_add(&scored, prob, b.label, b.n);
        } else {
            model_forward(l, tr->w, &b, &s);
            ne_add(&scored, prob, b.label, b.n);
        }
        if (!isfinite(scored.loss_sum)) { /* nothing good trains on from here */
            rc = ss_fail(&wk->err, SS_EINVAL, "the model diverged: its predictions are NaN "
                         "after %lld examples of this worker (steps too large: %s)",
                         (long long)stepped, diverged_advice(c));
            break;
        }
        if (!gw) {
            if (c->optim.dense == OPT_SGD) {
                model_backward_sgd(l, tr->w, &b, &s, rate);
            } else {
                model_backward(l, tr->w, &b, &s);
                optim_dense_step(c->optim.dense, tr->w, tr->state, s.grad, l->n_params, rate, eps);
            }
        }
        model_pool_scale(l, &b, d_emb);
        t[3] = ss_now();
        if ((rc = wk->emb->ops->push(wk->emb, &b, d_emb, &wk->err)) < 0)
            break;
        t[4] = ss_now();
        pthread_mutex_lock(&wk->mu);
        wk->examples += b.n;
        wk->iterations++;
        for (int p = 0; p < 4; p++)
            wk->t_part[p] += t[p + 1] - t[p];
        ne_merge(&wk->ne, &scored);
        pthread_mutex_unlock(&wk->mu);
        if (!des && foreground && it % c->sync.gap == 0 &&
            (rc = shadow_request(tr->shadow)) < 0) {
            ss_fail(&wk->err, rc, "sync failed in a foreground round");
            break;
        }
    }
    if (rc == 0 && des && !__atomic_load_n(&j->stop, __ATOMIC_RELAXED))
        rc = emb_des_finish(wk->emb, &wk->err); /* the other trainers may have data left */
    else if (rc == 0)
        rc = flush_emb(wk);
    wk->rc = rc;
    if (rc < 0) {
        __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
        if (j->env && j->env->feed) /* nobody drains its queue now: a checkpoint's pause */
            feed_stop(j->env->feed); /* must not wait on the pull that waits for room */
    }
    if (s.mm && wk->iterations > 0) {
        pthread_mutex_lock(&j->mu);
        dense_describe(s.mm, j->dense_desc, sizeof j->dense_desc);
        pthread_mutex_unlock(&j->mu);
    }
    model_scratch_free(&s);
    batch_free(&b);
    pthread_mutex_lock(&j->mu);
    wk->ended = 1;
    j->workers_left--;
    int trainer_done = --tr->workers_left == 0;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    /* This trainer's data has ended: its shadow thread may now run the
     * rounds other trainers' foreground workers wait on, then the final one. */
    if (trainer_done)
        shadow_data_done(tr->shadow);
    return NULL;
}

struct figures {
    double elapsed, eps, train_ne, train_logloss, syncs_per_s, sync_gap;
    double spread;              /* replica_spread at the end */
    struct hot_stats hot;       /* the hot clients' figures at the end */
    struct cache_stats cache;   /* the embedding caches' */
    struct des_stats des;       /* the DES clients' */
    int64_t examples, iterations, syncs;
    struct ne_acc ne;
};

/* The rates and NE of f from its counts and ne (f->elapsed set). */
static void derive(struct figures *f, const struct ne_acc *ne)
{
    f->eps = f->elapsed > 0 ? f->examples / f->elapsed : 0;
    f->train_ne = ne_value(ne);
    f->train_logloss = ne_logloss(ne);
    f->syncs_per_s = f->elapsed > 0 ? f->syncs / f->elapsed : 0;
    f->sync_gap = f->syncs ? (double)f->iterations / f->syncs : NAN;
    f->ne = *ne;
}

static void collect(struct job *j, struct figures *f)
{
    memset(f, 0, sizeof *f);
    struct ne_acc ne = j->base.ne;
    f->examples = j->base.examples;
    f->iterations = j->base.iterations;
    f->syncs = j->base.syncs;
    for (int t = 0; t < j->n_tr; t++) {
        struct trainer *tr = &j->tr[t];
        for (int k = 0; k < j->n_wk; k++) {
            struct worker *wk = &tr->workers[k];
            pthread_mutex_lock(&wk->mu);
            f->examples += wk->examples;
            f->iterations += wk->iterations;
            ne_merge(&ne, &wk->ne);
            pthread_mutex_unlock(&wk->mu);
        }
        f->syncs += j->kept_resumed ? 0 : tr->shadow ? shadow_syncs(tr->shadow) : tr->syncs;
    }
    f->elapsed = ss_now() - j->t0;
    derive(f, &ne);
}

/* A cluster job: the figures over every trainer's latest report (env->beat);
 * returns 1 once every other trainer's data has ended. */
static int beat_figures(struct job *j, struct figures *f, int final)
{
    double weight = j->reader ? reader_share_bytes(j->reader) : 0;
    double run = (double)(f->examples - j->base.examples), el = ss_now() - j->start;
    int known = final || (el >= 0.5 && run > 0); /* its pace: over half a second at least */
    double mine[3] = {known && !final ? run / el : 0, final ? run : 0, known};
    double v[BEAT_FIGS] = {(double)f->examples, (double)f->iterations, (double)f->syncs,
                           f->ne.loss_sum, f->ne.label_sum, (double)f->ne.n,
                           ss_halt_signal() != 0,
                           j->reader ? reader_fraction(j->reader) * weight : 0,
                           mine[0], mine[1], mine[2], weight};
    int all = j->env->beat(j->env->arg, v, final);
    if (v[6] > 0) /* a trainer was stopped: every one stops */
        ss_halt_request();
    if (j->reader && v[11] > 0) /* each its share of the files: how far they are together */
        j->frac_all = v[7] / v[11];
    /* The rates' clock (worker_main): the job's examples now over this
     * trainer's, the others' extrapolated at their pace (their reports are
     * up to an interval old), an ended one's as it ended; once every other
     * one has reported a pace. Shares of other sizes or paces then keep the
     * job's count, where count x its own place would not. */
    if (j->reader && j->sched_on && !final && known && v[10] - mine[2] >= j->env->count - 1) {
        double r = (run + (v[8] - mine[0]) * el + (v[9] - mine[1])) / run;
        __atomic_store(&j->sched_ratio, &r, __ATOMIC_RELAXED);
    }
    f->examples = (int64_t)v[0], f->iterations = (int64_t)v[1], f->syncs = (int64_t)v[2];
    struct ne_acc ne = {v[3], v[4], (int64_t)v[5]};
    derive(f, &ne);
    return all;
}

/* The progress line of the job (in a cluster job, over every trainer: the
 * others' reports are taken in here, so every trainer calls it); final: this
 * trainer's data has ended. Returns 1 once every other trainer's has. */
/* A sync gap for a line ("-" before any sync, as with sync.algo = none;
 * csv: an empty field). */
/* A figure in fmt, or "-" (the CSV: nothing) where it is NAN (not known,
 * or of no example yet). */
static const char *num_text(double v, int csv, const char *fmt, char buf[32])
{
    if (isnan(v))
        snprintf(buf, 32, "%s", csv ? "" : "-");
    else
        snprintf(buf, 32, fmt, v);
    return buf;
}

static const char *gap_text(double gap, int csv, char buf[32])
{
    return num_text(gap, csv, csv ? "%.4f" : "%.2f", buf);
}

/* How far through data.train the job is (NAN: not known here): its own
 * reader's place (the trainers' mean, where each reads its share), or the
 * reader services' (the first seen starts the pace; a resumed job's start
 * is past 0). */
static double done_fraction(struct job *j)
{
    if (j->reader)
        return j->env && j->env->beat ? j->frac_all : reader_fraction(j->reader);
    if (!j->env || !j->env->feed)
        return NAN;
    double f = feed_fraction(j->env->feed);
    if (j->frac0 < 0 && f > 0)
        j->frac0 = f, j->start = ss_now();
    return f;
}

/* f as a line's "  done 12.3%  eta 4m05s" (the time left at this run's
 * pace; none before it has moved), or the fraction alone for the csv;
 * empty where f is not known. */
static const char *done_text(struct job *j, double f, int csv, char buf[64])
{
    buf[0] = 0;
    if (isnan(f))
        return buf;
    double t = ss_now() - j->start;
    if (csv) {
        snprintf(buf, 64, "%.4f", f);
        return buf;
    }
    int n = snprintf(buf, 64, "  done %.1f%%", 100 * f);
    if (j->frac0 >= 0 && f > j->frac0 && f < 1 && t > 0 && !ss_halt_signal()) { /* stopped: none */
        double left = t * (1 - f) / (f - j->frac0);
        long s = left < 3.6e7 ? (long)(left + 0.5) : 36000000L;
        if (s >= 3600)
            snprintf(buf + n, 64 - (size_t)n, "  eta %ldh%02ldm", s / 3600, s / 60 % 60);
        else if (s >= 60)
            snprintf(buf + n, 64 - (size_t)n, "  eta %ldm%02lds", s / 60, s % 60);
        else
            snprintf(buf + n, 64 - (size_t)n, "  eta %lds", s);
    }
    return buf;
}

static int progress(struct job *j, int final, int print)
{
    struct figures f;
    collect(j, &f);
    int all = j->env && j->env->beat ? beat_figures(j, &f, final) : 1;
    j->seen = f.examples;
    if (!j->is_master || !print)
        return all;
    char gap[32], ne[32], done[64], rate[32] = "";
    double frac = done_fraction(j);
    if (j->sched_on) /* the rates' factor at the job's count (a cluster job's: as beaten) */
        snprintf(rate, sizeof rate, "  lr x%.3g", optim_lr_scale(j->c, f.examples));
    if (!j->c->output.quiet)
        printf("[%8.1fs] examples %lld  eps %.0f  train_ne %s  syncs/s %.1f  sync_gap %s%s%s\n",
               f.elapsed, (long long)f.examples, f.eps, num_text(f.train_ne, 0, "%.4f", ne),
               f.syncs_per_s,
               gap_text(f.sync_gap, 0, gap), rate, done_text(j, frac, 0, done));
    fflush(stdout);
    if (j->csv) {
        fprintf(j->csv, "%.3f,%lld,%.1f,%s,%.3f,%s,", f.elapsed, (long long)f.examples, f.eps,
                num_text(f.train_ne, 1, "%.6f", ne), f.syncs_per_s, gap_text(f.sync_gap, 1, gap));
        fprintf(j->csv, "%s\n", done_text(j, frac, 1, done));
        fflush(j->csv);
    }
    return all;
}

/* The rates' schedule, said at start: where it is, and what it does. */
static void schedule_note(const struct job *j)
{
    const struct ss_config *c = j->c;
    printf("# learning rates x%.3g at %lld examples:", optim_lr_scale(c, j->sched_base),
           (long long)j->sched_base);
    if (c->optim.warmup_examples)
        printf(" up over the first %lld;", (long long)c->optim.warmup_examples);
    if (c->optim.decay_examples)
        printf(" down to x%g over %lld from %lld;", c->optim.decay_to,
               (long long)c->optim.decay_examples, (long long)c->optim.decay_start);
    if (j->sched_times > 1)
        printf(" counted as %d trainers x each one's place in its share, until their "
               "progress reports give the job's count\n", j->sched_times);
    else if (j->env && j->env->feed)
        printf(" counted over the examples the reader services have handed out\n");
    else
        printf(" counted over the job's examples\n");
}

/* The files a run writes at its end in its directory, the model's (the
 * first MODEL_FILES) first. */
static const char *const run_end_files[] = {"model/tables*.bin", "model/dense.bin",
                                            "model/hot.bin",     "model/hot-rows.bin",
                                            "metrics.json",      "roles.json",
                                            "placement.txt",     "placement.json"};
enum { MODEL_FILES = 4 };

/* Removes the first n of run_end_files in dir (remove = 1), or sums their
 * bytes. */
static double stale_files(const char *dir, int n, int remove)
{
    char p[4200];
    double bytes = 0;
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, run_end_files[i]);
        glob_t g;
        struct stat st;
        if (glob(p, 0, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc; k++)
                if (remove)
                    unlink(g.gl_pathv[k]);
                else if (stat(g.gl_pathv[k], &st) == 0)
                    bytes += (double)st.st_size;
            globfree(&g);
        }
    }
    return bytes;
}

/* The bytes of the model's embedding tables, each row with its optimizer's
 * state. */
static double tables_bytes(const struct model_layout *l, const struct ss_config *c)
{
    double bytes = 0, stride = l->dim + (c->optim.emb == OPT_ROWWISE_ADAGRAD);
    for (int t = 0; t < l->n_tables; t++)
        bytes += (double)l->rows[t] * stride * 4;
    return bytes;
}

/* The model is saved at the end: a disk short of it would fail the run
 * after its training, so that is said before the tables are even made.
 * The room counts what an earlier run's model there frees (clear_stale
 * removes it); a file system that gives no figures passes. */
static int check_room(const struct ss_config *c, struct ss_err *e)
{
    struct model_layout l;
    struct ss_err ignored = {0};
    struct statvfs fs;
    if (!c->output.save_model || !*c->output.dir || ss_mkdir_p(c->output.dir, &ignored) < 0 ||
        statvfs(c->output.dir, &fs) != 0 || fs.f_blocks == 0 ||
        model_layout_init(&l, c, &ignored) < 0) /* their own errors come later */
        return 0;
    double need = (double)l.n_params * 4 + tables_bytes(&l, c);
    model_layout_free(&l);
    double room = (double)fs.f_bavail * fs.f_frsize + stale_files(c->output.dir, MODEL_FILES, 0);
    if (room < need)
    {
        int d = need < 100 * 1048576.0 ? 2 : 0; /* small figures told apart, not both "1 MB" */
        return ss_fail(e, SS_EIO, "output.dir = %s has %.*f MB free, and the model saved there "
                       "at the end needs %.*f MB (its tables and dense part): free some space, "
                       "or name another output.dir (checked before training)", c->output.dir,
                       d, room / 1048576, d, need / 1048576);
    }
    return 0;
}

/* The run directory exists and is writable before any training starts. */
/* An eval_result of no eval: its figures not known (NaN). */
#define NO_EVAL {0, NAN, NAN, NAN, NAN, NAN, NAN, 0, 0, 0, 0}

static int open_run_dir(struct job *j, struct ss_err *e)
{
    const char *dir = j->c->output.dir;
    if (!*dir)
        return ss_fail(e, SS_EINVAL, "config: output.dir is empty: name the run directory");
    int rc = ss_mkdir_p(dir, e);
    if (rc < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return ss_fail(e, rc, "output.dir: %s", why);
    }
    char p[4096];
    if ((rc = ss_dir_lock("output.dir", dir, ".run.lock", e)) < 0) /* two mixed their files */
        return rc;
    snprintf(p, sizeof p, "%s/config.ini", dir);
    if ((rc = ss_config_save(j->c, p, e)) < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg); /* e->msg is written below */
        return ss_fail(e, SS_EIO, "output.dir = %s is not writable: %s", dir, why);
    }
    return 0;
}

/* An earlier run's files must not pass for this run's: its model (tables
 * of another count of PSs or trainers, hot rows this run may not have:
 * eval would load them with this run's), what it wrote at its end (a run
 * that fails writes none), and its plan where this run makes none (a
 * cluster job's master and one-process DES wrote theirs already). Once
 * the run has started well: a resume refused keeps the earlier model. */
static void clear_stale(struct job *j)
{
    int planned = j->env || j->c->embedding.placement == EMB_ON_TRAINERS;
    stale_files(j->c->output.dir, planned ? 6 : 8, 1);
}

/* dir/name for the run's rows under header. A resumed run's file goes on
 * from the checkpoint: the earlier run's rows up to its examples (column
 * col) are kept, those past it (trained after it, then lost) dropped. */
static FILE *csv_open(const char *dir, const char *name, const char *header, int col,
                      int64_t upto, int64_t *last_at, off_t *last_off, struct ss_err *e)
{
    char p[4200], tmp[4300], *line = NULL;
    size_t cap = 0;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *out = fopen(tmp, "w"), *old = upto >= 0 && out ? fopen(p, "r") : NULL;
    if (!out) {
        ss_fail(e, SS_EIO, "%s: cannot write: %s", tmp, strerror(errno));
        return NULL;
    }
    fputs(header, out);
    for (int first = 1; old && getline(&line, &cap, old) > 0; first = 0) {
        if (first && strcmp(line, header)) /* another layout: none kept */
            break;
        const char *f = line;
        for (int k = 0; k < col && f; k++)
            if ((f = strchr(f, ',')))
                f++;
        int64_t at = f ? strtoll(f, NULL, 10) : 0;
        if (!first && f && at <= upto && strchr(line, '\n')) {
            if (last_at) /* (where the last kept row starts, and its figure) */
                *last_at = at, *last_off = ftello(out);
            fputs(line, out);
        }
    }
    free(line);
    if (old)
        fclose(old);
    if (fflush(out) != 0 || rename(tmp, p) != 0) {
        ss_fail(e, SS_EIO, "%s: cannot write: %s", p, strerror(errno));
        fclose(out);
        unlink(tmp);
        return NULL;
    }
    return out;
}

/* progress.csv, and eval.csv when there is eval data (after a resume's
 * checkpoint is loaded: j->base). */
static int open_csvs(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int64_t upto = j->resumed_from[0] ? j->base.examples : -1;
    /* the rows of output.dir go on only where they are the checkpoint's run's: a resume
     * into another run's directory starts them anew (it spliced the two runs' curves) */
    char p[4200];
    snprintf(p, sizeof p, "%s/run.id", c->output.dir);
    double there = -1;
    FILE *f = fopen(p, "r");
    if (f) {
        if (fscanf(f, "%lf", &there) != 1)
            there = -1;
        fclose(f);
    }
    if (upto >= 0 && j->run_id != 0 && there != j->run_id) {
        upto = -1;
        if (!c->output.quiet)
            printf("# %s/progress.csv%s: not of the checkpoint's run, started anew\n",
                   c->output.dir, c->data.eval && *c->data.eval ? " and eval.csv" : "");
    }
    if (j->run_id == 0) { /* a fresh run's, or one resumed from a checkpoint without one */
        uint64_t s = (uint64_t)(ss_now() * 1e6) ^ (uint64_t)getpid() << 32;
        j->run_id = (double)(ss_splitmix(&s) >> 12 | 1); /* 52 bits, exact in a double */
    }
    if ((f = fopen(p, "w"))) {
        fprintf(f, "%.0f\n", j->run_id);
        fclose(f);
    }
    j->csv = csv_open(c->output.dir, "progress.csv",
                      "elapsed_s,examples,eps,train_ne,syncs_per_s,sync_gap,done\n", 1, upto,
                      NULL, NULL, e);
    if (!j->csv)
        return SS_EIO;
    if (!c->data.eval || !*c->data.eval) { /* an earlier run's rows are not this one's */
        snprintf(p, sizeof p, "%s/eval.csv", c->output.dir);
        if (upto < 0)
            unlink(p);
        return 0;
    }
    /* a row of this run at the examples of the earlier run's last replaces it (a
     * resume that trained nothing scores the same count again) */
    j->eval_last_off = -1;
    j->eval_csv = csv_open(c->output.dir, "eval.csv",
                           "examples,elapsed_s,eval_examples,eval_ne,eval_logloss,eval_auc,"
                           "eval_calibration\n", 0, upto, &j->eval_last_at, &j->eval_last_off, e);
    return j->eval_csv ? 0 : SS_EIO;
}

/* embedding.placement = trainers: the plan over the trainers (the cluster
 * job's, made on its master) and this process's trainers' shards. */
static int setup_des(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    if (c->hot_embeddings.memory_mb > 0)
        return ss_fail(e, SS_EINVAL, "embedding.placement = trainers with "
                       "hot_embeddings.memory_mb > 0: not supported (each row lives on one "
                       "trainer; set hot_embeddings.memory_mb = 0 or embedding.placement = ps)");
    if (c->embedding_cache.rows > 0)
        return ss_fail(e, SS_EINVAL, "embedding.placement = trainers with embedding_cache.rows "
                       "> 0: not supported (DES is synchronous: there is nothing stale to "
                       "cache; set embedding_cache.rows = 0 or embedding.placement = ps)");
    int rc = 0, count = j->env ? j->env->count : j->n_tr, first = j->env ? j->env->index : 0;
    double t0 = ss_now();
    if (j->env) {
        j->des = j->env->des_plan;
    } else if ((rc = placement_for_config(c, &j->l, count, 0, &j->des_plan, NULL, e)) < 0) {
        return rc;
    } else {
        j->des = &j->des_plan;
    }
    struct emb_opts eo = emb_opts_from_config(c, j->l.n_tables, j->l.dim, j->l.rows);
    j->shards = ss_xcalloc(j->n_tr, sizeof *j->shards);
    for (int t = 0; rc == 0 && t < j->n_tr; t++) {
        int32_t *ids, k;
        rc = embps_create_for_ps(&eo, j->des, first + t, &j->shards[t], &ids, &k, e);
        free(ids);
    }
    const struct placement *pl = j->des;
    double most = 0, *held = ss_xcalloc(pl->n_ps, sizeof *held);
    for (int i = 0; i < pl->n_shards; i++) { /* rows with their optimizer state */
        const struct shard *sh = &pl->shards[i];
        held[sh->ps] += (double)(sh->hi - sh->lo) * (eo.dim + (eo.opt == OPT_ROWWISE_ADAGRAD)) * 4;
        most = held[sh->ps] > most ? held[sh->ps] : most;
    }
    free(held);
    if (rc == 0 && j->is_master && !c->output.quiet)
        printf("# DES: %d tables in %d shards over %d trainers (placement.strategy = %s, "
               "imbalance %.3f, at most %.1f MB of rows on a trainer), pooled all-to-all (%.1f s)\n",
               pl->n_tables, pl->n_shards, count, placement_strategy_name(pl->strategy),
               pl->imbalance, most / 1e6, ss_now() - t0), fflush(stdout);
    return rc;
}

/* The dense part's room here (a width past the memory aborted on its
 * allocation): each trainer's vector, optimizer state and sync copies,
 * each worker's gradient, and a batch's activations through the widths,
 * forward and back. */
static int dense_room(const struct ss_config *c, const struct model_layout *l, int n_tr,
                      int n_wk, struct ss_err *e)
{
    double widths = 0, trainers = n_tr > 0 ? n_tr : 1, workers = trainers * (n_wk > 0 ? n_wk : 1);
    for (int i = 0; i <= l->n_bot; i++)
        widths += l->bot[i];
    for (int i = 0; i <= l->n_top; i++)
        widths += l->top[i];
    double need = 4.0 * (double)l->n_params * (4 * trainers + 2 * workers) +
                  4.0 * 4 * widths * c->trainer.batch_size * workers;
    int64_t avail = ss_mem_available();
    if (avail >= 0 && need > (double)avail)
        return ss_fail(e, SS_ENOMEM, "the dense model here needs about %.0f MB (%zu parameters "
                       "of model.bottom = %s and model.top = %s, for %g trainer(s) x %g "
                       "worker(s), and their activations at trainer.batch_size = %d), more than "
                       "the %lld MB of memory free here: narrower layers, or fewer workers",
                       need / 1048576, l->n_params, c->model.bottom, c->model.top, trainers,
                       workers / trainers, c->trainer.batch_size, (long long)(avail >> 20));
    return 0;
}

int trainer_check_memory(const struct ss_config *c, const struct model_layout *l,
                         struct ss_err *e)
{
    int cluster = c->job.embedding_ps > 0 || c->job.sync_ps > 0 || c->job.readers > 0;
    int bins = placement_bins(c, c->job.embedding_ps, c->job.trainers), rc = 0;
    if (!cluster) /* the embedded default: all here (a cluster's hosts are not this one) */
        rc = dense_room(c, l, c->job.trainers, c->trainer.worker_threads, e);
    if (rc == 0 && !cluster && bins < 1)
        rc = embps_check_room(tables_bytes(l, c), l->dim, e);
    if (rc < 0 || bins < 1)
        return rc;
    struct table_profile *tp = ss_xcalloc((size_t)l->n_tables, sizeof *tp);
    struct placement pl = {0};
    placement_assume(l, c, tp);
    rc = placement_make_on(&pl, c->embedding.placement == EMB_ON_TRAINERS,
                           placement_strategy(c->placement.strategy), tp, l->n_tables, bins,
                           (double)c->embedding_ps.memory_mb, c->placement.pin, e);
    if (rc == 0)
        rc = placement_check_memory(&pl, e);
    placement_free(&pl);
    free(tp);
    return rc;
}

static int setup_model(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int rc = model_layout_init(&j->l, c, e);
    if (rc < 0 || (rc = dense_room(c, &j->l, j->n_tr, j->n_wk, e)) < 0)
        return rc;
    if (c->embedding.placement == EMB_ON_TRAINERS && j->n_tr > 0) /* not `shadowsync eval` */
        return setup_des(j, e);
    if (j->env) /* the tables live on the embedding PSs */
        return j->env->make_emb(j->env->arg, &j->emb, e);
    struct emb_opts eo = emb_opts_from_config(c, j->l.n_tables, j->l.dim, j->l.rows);
    double mb = tables_bytes(&j->l, c) / 1e6;
    FILE *say = j->say ? j->say : stdout;
    if (mb > 200 && !c->output.quiet)
        fprintf(say, "# initializing %d embedding tables (%.0f MB)...\n", j->l.n_tables, mb),
            fflush(say);
    if ((rc = embps_create(&j->tables, &eo, e)) < 0)
        return rc;
    j->emb = emb_client_local(j->tables);
    return 0;
}

/* The hot rows: a resumed checkpoint's (its replicas match them), else
 * found by profiling data.train when hot_embeddings.memory_mb > 0; in a
 * cluster job, the master's (hot_for_job). */
static int setup_hot(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    char p[4500];
    int rc = 0, from_ckpt = 0;
    double t0 = ss_now();
    j->n_sync = j->l.n_params;
    if (j->env) {
        const struct hot_set *h = j->env->hot;
        from_ckpt = j->env->hot_from_ckpt;
        if (h) {
            j->hot = hot_from_list(h->n_tables, h->dim, h->table_rows, h->n, h->table, h->row);
            j->hot->profiled_share = h->profiled_share;
        }
    } else if (j->resumed_from[0]) {
        snprintf(p, sizeof p, "%s/hot-rows.bin", j->resumed_from);
        if ((from_ckpt = access(p, F_OK) == 0) && (rc = hot_load(&j->hot, p, &j->l, e)) < 0)
            return rc;
        if (!from_ckpt && c->hot_embeddings.memory_mb > 0 && j->is_master && !c->output.quiet)
            printf("# hot embeddings: none, as in %s (hot_embeddings.memory_mb applies to a "
                   "fresh run)\n", j->resumed_from);
    } else if ((rc = hot_find(c, &j->l, &j->hot, e)) < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return ss_fail(e, rc, "hot_embeddings: %s", why);
    }
    if (j->hot && c->embedding.placement == EMB_ON_TRAINERS)
        return ss_fail(e, SS_EINVAL, "%s: the checkpoint keeps %lld hot rows replicated on "
                       "every trainer, which embedding.placement = trainers (DES) does not "
                       "support (each row lives on one trainer): resume it with "
                       "embedding.placement = ps", j->resumed_from[0] ? j->resumed_from
                       : "the resumed checkpoint", (long long)j->hot->n);
    if (!j->hot) {
        double row_mb = 4.0 * j->l.dim / 1048576.0; /* one row's replica */
        int say = c->hot_embeddings.memory_mb > 0 && !j->resumed_from[0] && j->is_master &&
                  !c->output.quiet;
        if (say && c->hot_embeddings.memory_mb < row_mb)
            printf("# hot embeddings: hot_embeddings.memory_mb = %g holds no row (one takes "
                   "%.6f MiB); none replicated\n", c->hot_embeddings.memory_mb, row_mb);
        else if (say)
            printf("# hot embeddings: no row is looked up %d times in the %d profiled batches of "
                   "data.train; none replicated (lower hot_embeddings.min_lookups?)\n",
                   c->hot_embeddings.min_lookups, c->hot_embeddings.profile_batches);
        return 0;
    }
    j->n_sync += (size_t)j->hot->n * j->l.dim;
    if (j->is_master && !c->output.quiet)
        printf("# hot embeddings: %lld rows (%.2f MB) replicated on every trainer, %s (%.1f s)\n",
               (long long)j->hot->n, j->hot->n * j->l.dim * 4.0 / 1048576.0,
               from_ckpt ? "as in the checkpoint" : "found by profiling data.train", ss_now() - t0);
    if (!from_ckpt && j->is_master && !c->output.quiet)
        printf("# hot embeddings: %.1f %% of the profiled lookups fall on them\n",
               100.0 * j->hot->profiled_share);
    if ((j->env ? j->env->count : j->n_tr) > 1 && sync_algo_needs(c->sync.algo) ==
        SYNC_NEEDS_NOTHING && j->is_master && !c->output.quiet)
        printf("# hot embeddings: sync.algo = %s never syncs them: each trainer trains its own "
               "copy, and the model keeps %s\n", c->sync.algo,
               c->sync.output == OUT_AVERAGE ? "their average" : "trainer 0's");
    if (!j->env && j->is_master && !c->output.quiet) /* measured: README, Hot embeddings */
        printf("# hot embeddings: the tables are in this process, so the hot rows save no "
               "wire here and cost a second lookup per id (they pay in a cluster job, whose "
               "tables are on the embedding PSs)\n");
    fflush(stdout);
    return 0;
}

static void teardown_model(struct job *j)
{
    for (int t = 0; j->shards && t < j->n_tr; t++)
        embps_free(j->shards[t]);
    free(j->shards);
    placement_free(&j->des_plan);
    hot_free(j->hot);
    if (j->emb)
        j->emb->ops->free(j->emb);
    embps_free(j->tables);
    model_layout_free(&j->l);
}

/* key's data (its schema s: a text config's columns, or binary shards'
 * header) fits the model, checked before training. */
static int check_schema(const struct schema *s, const struct model_layout *l, const char *key,
                        const char *path, struct ss_err *e)
{
    if (s->n_dense != l->n_dense || s->n_cat != l->n_tables)
        return ss_fail(e, SS_EINVAL,
                       "%s = %s: the data has %d dense and %d categorical features, the model "
                       "(model.bottom, model.rows / data.cat_cols) expects %d and %d", key,
                       path, s->n_dense, s->n_cat, l->n_dense, l->n_tables);
    return 0;
}

/* An OPENBLAS_CORETYPE from the environment is kept (some machines set it
 * because other kernels misbehave there), but a user should know when it
 * holds an AVX-512 CPU to a kernel without AVX-512: on this project's AMD
 * machines, Haswell trained 1.4-1.6x slower than SkylakeX (README). */
static int blas_kernel_below_cpu(const char *core)
{
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (strcasecmp(core, avx512[i]) == 0)
            return 0;
    return ss_cpu_has_avx512();
}

static void blas_note(const struct ss_config *c, const struct model_layout *l)
{
    openblas_set_num_threads(1);
    if (c->output.quiet)
        return;
    if (c->trainer.device == DEV_CPU)
        printf("# dense: %s, %s, 1 thread per worker\n",
               l->backend == DENSE_ONEDNN ? "oneDNN" : "OpenBLAS",
               l->precision == PREC_BF16 ? "bf16 matmuls (fp32 accumulation and master weights)"
                                         : "fp32");
    const char *core = openblas_get_corename(), *env = getenv("OPENBLAS_CORETYPE");
    printf("# blas: OpenBLAS %s kernel, 1 thread per worker\n", core);
    if (env && *env && blas_kernel_below_cpu(core))
        printf("# blas: OPENBLAS_CORETYPE=%s from the environment is kept; this CPU has AVX-512, "
               "where the SkylakeX kernel is usually much faster (unset it, or set SkylakeX, "
               "if that kernel works here)\n", env);
}

/* Arrays saved in the resumed checkpoint as NAME.bin (one) or NAME-K.bin
 * (several), each of the model's n floats, into out[] (allocated once,
 * reused); returns how many were there. */
static int load_saved(struct job *j, const char *name, float **out, int max, struct ss_err *e)
{
    size_t n = j->n_sync;
    int k = 0;
    for (; k < max; k++) {
        char p[4500];
        if (max == 1)
            snprintf(p, sizeof p, "%s/%s", j->resumed_from, name);
        else
            snprintf(p, sizeof p, "%s/%s-%d.bin", j->resumed_from, name, k);
        if (access(p, F_OK) != 0)
            break;
        if (!out[k])
            out[k] = ss_aligned(n * sizeof(float));
        int rc = dense_load(out[k], n, &j->l, p, e);
        if (rc < 0)
            return rc;
    }
    return k;
}

int trainer_device(const struct ss_config *c, int verbose, int local, int *dev, int *count,
                   struct ss_err *e)
{
    *dev = -1;
    *count = 0;
    if (c->trainer.device == DEV_CPU)
        return 0;
    char why[256];
    int n = gpu_probe(why, sizeof why);
    if (n <= 0 && c->trainer.device == DEV_CUDA)
        return ss_fail(e, SS_EINVAL, "trainer.device = cuda: %s; use cpu, or auto to fall back",
                       why);
    if (n <= 0) {
        if (verbose)
            printf("# trainer.device = auto: %s; training on the CPU\n", why);
        return 0;
    }
    *dev = local % n;
    *count = n;
    if (verbose)
        printf("# trainer.device = %s: the dense layers on CUDA device %d of %s\n",
               c->trainer.device == DEV_CUDA ? "cuda" : "auto", *dev, why);
    return 0;
}

/* The shadow thread's staging copy of a GPU trainer (shadow_opts.pull/push):
 * the device copy as it is before a round, then the round's change added
 * to it, so the workers' steps meanwhile are kept. */
static int stage_pull(void *arg, struct ss_err *e)
{
    struct trainer *tr = arg;
    int rc = gpu_dense_read(tr->gpu, tr->stage, NULL, e);
    if (rc == 0)
        memcpy(tr->snap, tr->stage, tr->job->l.n_params * sizeof(float));
    return rc;
}

static int stage_push(void *arg, struct ss_err *e)
{
    struct trainer *tr = arg;
    size_t n = tr->job->l.n_params;
    for (size_t i = 0; i < n; i++)
        tr->snap[i] = tr->stage[i] - tr->snap[i];
    return gpu_dense_add(tr->gpu, tr->snap, e);
}

/* Trainer tr's model into w (and its optimizer state into state, or
 * NULL): a GPU trainer's dense part from the device, its hot rows from
 * beside the staging copy; a CPU trainer's from tr->w. Hogwild reads while
 * the workers train. */
static int model_of(struct job *j, struct trainer *tr, float *w, float *state, struct ss_err *e)
{
    size_t np = j->l.n_params;
    if (!tr->gpu) {
        if (w != tr->w)
            ss_copy(w, tr->w, j->n_sync);
        return 0;
    }
    int rc = gpu_dense_read(tr->gpu, w, state, e);
    if (rc == 0)
        ss_copy(w + np, tr->stage + np, j->n_sync - np);
    return rc;
}

/* A GPU trainer's w and state brought up to date from the device
 * (workers paused or done). */
static int read_back(struct job *j, struct ss_err *e)
{
    for (int t = 0; t < j->n_tr; t++) {
        int rc = model_of(j, &j->tr[t], j->tr[t].w, j->tr[t].state, e);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Trainer tr's replica of the hot rows, stepped by the tables' optimizer:
 * in its dense buffer, after the dense parameters the shadow thread syncs.
 * A GPU trainer's lookups pool on the host, so its replica lives there too,
 * after the device copy's staging copy: the shadow thread syncs it in
 * place, as a CPU trainer's, and only the dense part crosses PCIe. */
static struct hot_replica replica_of(struct job *j, struct trainer *tr)
{
    struct emb_opts eo = emb_opts_from_config(j->c, j->l.n_tables, j->l.dim, j->l.rows);
    size_t np = j->l.n_params;
    float *w = tr->gpu ? tr->stage : tr->w;
    return (struct hot_replica){j->hot, w + np, tr->state + np, eo.opt, eo.lr, eo.eps};
}

static void shadow_failed(void *arg, const struct ss_err *e);

/* A resumed trainer's saved vector (what: dense or state): trainer t of the
 * job takes the saved one t mod their count. */
static int resumed_vector(struct job *j, int t, const char *what, float *v, struct ss_err *e)
{
    char p[4400];
    int gi = ((j->env ? j->env->index : 0) + t) % j->resumed_trainers;
    snprintf(p, sizeof p, "%s/%s-%d.bin", j->resumed_from, what, gi);
    return dense_load(v, j->n_sync, &j->l, p, e);
}

/* A resume of a run's final checkpoint (taken after its final sync) whose
 * job trained nothing: the checkpoint's replicas are its model, as the
 * shadow threads' rounds meanwhile would change them (MA's again), and a
 * resume of a finished job (a requeue) must leave it as it was. In a
 * cluster job every trainer takes part in the count (ok or not: it is
 * collective), and each keeps its own replica. */
static int keep_resumed(struct job *j, const struct figures *f, int ok, struct ss_err *e)
{
    if (!j->resumed_final)
        return 0;
    double v[1] = {(double)(f->examples - j->base.examples)}; /* this run's, here */
    if (j->env)
        j->env->sum(j->env->arg, v, 1);
    if (!ok || v[0] != 0)
        return 0;
    for (int t = 0; t < j->n_tr; t++) {
        int rc = resumed_vector(j, t, "dense", j->tr[t].w, e);
        if (rc < 0)
            return rc;
    }
    j->kept_resumed = 1;
    return 0;
}

/* The job's sums at the end, in one collective (every trainer alike, ok
 * or not): its NaN or infinite dense parameters and hot rows (a model
 * diverged in its last steps, or one whose NaNs no prediction showed,
 * neither checkpointed nor saved; into j->nonfinite), and whether it was
 * stopped before it trained an example (returns 1: no final checkpoint,
 * as embedded; a resumed one's stays). */
static int end_sums(struct job *j, const struct figures *f)
{
    double v[3] = {0, (double)(f->examples - j->base.examples), ss_halt_signal() != 0};
    for (int t = 0; t < j->n_tr; t++)
        for (size_t i = 0; i < j->n_sync; i++)
            v[0] += !isfinite(j->tr[t].w[i]);
    if (j->env)
        j->env->sum(j->env->arg, v, 3);
    j->nonfinite = v[0];
    return v[1] == 0 && v[2] > 0;
}

static int refuse_nonfinite(const struct job *j, struct ss_err *e)
{
    if (j->nonfinite == 0)
        return 0;
    return ss_fail(e, SS_EINVAL, "the model diverged: %.0f of the trainers' %d x %zu dense "
                   "parameters are NaN or infinite at the end of the training: no model saved, "
                   "no final checkpoint (steps too large: %s)", j->nonfinite,
                   j->env ? j->env->count : j->n_tr, j->n_sync, diverged_advice(j->c));
}

static int start_trainers(struct job *j, struct ss_err *e)
{
    const struct ss_config *c = j->c;
    size_t n = j->n_sync;
    j->tr = ss_xcalloc(j->n_tr, sizeof *j->tr);
    const char *algo = c->sync.algo;
    if (!j->env && sync_algo_needs(algo) == SYNC_NEEDS_COLLECTIVE) {
        j->coll = ss_xcalloc(j->n_tr, sizeof *j->coll);
        collective_local_group(j->coll, j->n_tr, n + 1);
    }
    for (int t = 0; t < j->n_tr; t++) {
        struct trainer *tr = &j->tr[t];
        tr->job = j;
        tr->id = t;
        tr->w = ss_aligned(n * sizeof(float));
        tr->state = ss_aligned(n * sizeof(float));
        model_init_params(&j->l, tr->w, (uint64_t)c->job.seed); /* one init for every trainer */
        for (size_t i = 0; i < n; i++)
            tr->state[i] = (float)c->optim.init_acc;
        size_t np = j->l.n_params, hot = n - np; /* the hot rows start as the tables' */
        if (hot && t > 0) {
            memcpy(tr->w + np, j->tr[0].w + np, hot * sizeof(float));
        } else if (hot) {
            int rc = hot_replica_fill(j->emb, j->hot, tr->w + np, e);
            if (rc < 0)
                return rc;
        }
        int rc;
        if (j->resumed_from[0] && ((rc = resumed_vector(j, t, "dense", tr->w, e)) < 0 ||
                                   (rc = resumed_vector(j, t, "state", tr->state, e)) < 0))
            return rc;
        tr->workers = ss_xcalloc(j->n_wk, sizeof *tr->workers);
        tr->workers_left = j->n_wk;
        if (j->gpu_dev >= 0) { /* the live copy goes to the device; w is read back from it */
            int dev = t == 0 ? j->gpu_dev : (j->gpu_dev + t) % j->gpu_count; /* cluster: t 0 */
            int rc = gpu_dense_create(&tr->gpu, &j->l, dev, tr->w, tr->state, e);
            if (rc < 0)
                return rc;
            /* pages of their own: CUDA refuses to lock a page twice, and
             * another buffer may share a heap page */
            tr->stage = ss_pages(n * sizeof(float));
            tr->snap = ss_pages(n * sizeof(float));
            memcpy(tr->stage, tr->w, n * sizeof(float));
            tr->pinned = gpu_host_register(tr->stage, n * sizeof(float)) == 0;
            if (tr->pinned && gpu_host_register(tr->snap, n * sizeof(float)) < 0)
                gpu_host_unregister(tr->stage), tr->pinned = 0;
            if (!tr->pinned)
                fprintf(stderr, "shadowsync: trainer %d: its staging copy could not be "
                        "page-locked (the locked-memory limit, ulimit -l?): the shadow "
                        "thread's copies go through pageable memory\n",
                        j->env ? j->env->index : t);
        }
    }
    float *saved[4] = {NULL};   /* a resumed checkpoint's center or algorithm state */
    int rc = 0;
    if (!j->env && sync_algo_needs(algo) == SYNC_NEEDS_CENTER) {
        j->center = center_local_create(j->tr[0].w, n);
        if (j->resumed_from[0] && (rc = load_saved(j, "center.bin", saved, 1, e)) > 0)
            j->center->ops->set(j->center, saved[0]);
    }
    for (int t = 0; rc >= 0 && t < j->n_tr; t++) {
        struct trainer *tr = &j->tr[t];
        char name[64];
        snprintf(name, sizeof name, "sync-%d",
                 ((j->env ? j->env->index : 0) + t) % (j->resumed_trainers ? j->resumed_trainers : 1));
        int k = j->resumed_from[0] ? load_saved(j, name, saved, 4, e) : 0;
        if (k < 0) {
            rc = k;
            break;
        }
        struct shadow_opts so = {c, tr->gpu ? tr->stage : tr->w, n,
                                 j->env ? j->env->coll : j->coll ? j->coll[t] : NULL,
                                 j->env ? j->env->center : j->center, saved, k,
                                 tr->gpu ? stage_pull : NULL, tr->gpu ? stage_push : NULL, tr,
                                 n - j->l.n_params, /* the hot rows: summed */
                                 j->resumed_from[0] != 0, shadow_failed, j,
                                 j->env ? j->env->count : j->n_tr};
        rc = shadow_start(&tr->shadow, &so, e); /* on failure: no thread of a later trainer yet */
    }
    for (int i = 0; i < 4; i++)
        free(saved[i]);
    if (rc < 0) { /* the shadow threads started end before their buffers are freed */
        if (j->coll) /* their rounds would wait on the trainers not started */
            collective_local_break(j->coll[0]);
        for (int t = 0; t < j->n_tr; t++)
            if (j->tr[t].shadow) {
                shadow_data_done(j->tr[t].shadow);
                shadow_join(j->tr[t].shadow, NULL, NULL);
                j->tr[t].shadow = NULL;
            }
        return rc;
    }
    j->workers_left = j->n_tr * j->n_wk;
    j->t0 = ss_now() - j->base.elapsed;
    j->start = ss_now();
    j->frac0 = j->reader ? reader_fraction(j->reader) : -1; /* a feed's: at its first line */
    if (j->reader) {
        struct reader_stats rs0;
        reader_stats(j->reader, &rs0);
        j->sched_at0 = rs0.examples;
    }
    struct exchange **xg = NULL; /* DES: worker k of trainer t in group k, xg[k * n_tr + t] */
    if (j->des) {
        xg = ss_xcalloc((size_t)j->n_tr * j->n_wk, sizeof *xg);
        for (int k = 0; rc == 0 && k < j->n_wk; k++)
            if (j->env)
                rc = j->env->make_exchange(j->env->arg, &xg[k], e);
            else
                exchange_local_group(xg + (size_t)k * j->n_tr, j->n_tr, &j->stop);
        if (rc < 0) {
            free(xg); /* collective: every trainer fails alike */
            return rc;
        }
    }
    for (int t = 0; t < j->n_tr; t++)
        for (int k = 0; k < j->n_wk; k++) {
            struct worker *wk = &j->tr[t].workers[k];
            wk->tr = &j->tr[t];
            wk->id = k;
            wk->emb = j->emb;
            if (j->des) {
                /* foreground: worker 0's group asks for the rounds, all its members at
                 * once, so every trainer's shadow runs one round per ask */
                int fg = c->sync.mode == SYNC_FOREGROUND && strcmp(c->sync.algo, "none") && !k;
                struct des_hooks pz = {&j->pause, des_wait, wk, fg ? des_sync : NULL,
                                       c->sync.gap}; /* gap steps: a round each */
                wk->emb = emb_client_des(xg[(size_t)k * j->n_tr + t], j->des, j->l.dim,
                                         j->shards[t], &pz, &wk->des);
                xg[(size_t)k * j->n_tr + t] = NULL;
            } else if (j->env && (rc = j->env->make_emb(j->env->arg, &wk->emb, e)) < 0) {
                return rc; /* before any worker thread of this trainer runs */
            }
            int own = j->env != NULL || j->des; /* whether wk->emb is this worker's own */
            if (c->embedding_cache.rows > 0) {
                struct emb_client *cc = emb_client_cache(wk->emb, own, c, &j->l,
                                                         c->trainer.batch_size, &wk->cache);
                if (!cc)
                    return ss_fail(e, SS_EINVAL, "embedding_cache.rows > 0: the %s client "
                                   "serves no rows", wk->emb->ops->name);
                wk->emb = cc, own = 1;
            }
            if (j->hot) {
                struct hot_replica r = replica_of(j, &j->tr[t]);
                wk->emb = emb_client_hot(wk->emb, own, &r, c->trainer.batch_size, &wk->hot);
            }
            pthread_mutex_init(&wk->mu, NULL);
            if (pthread_create(&wk->th, NULL, worker_main, wk) != 0) {
                fprintf(stderr, "shadowsync: cannot start worker thread %d of trainer %d "
                        "(the system's limit on threads: fewer job.trainers or "
                        "trainer.worker_threads)\n", k, t);
                abort();
            }
        }
    free(xg);
    return 0;
}

static void checkpoint_now(struct job *j, int final);
static int serve_checkpoints(struct job *j);

/* A shadow thread's round failed (a lost sync PS, a collective's error):
 * a cluster job ends at once naming it (env->fatal); in one process the
 * workers stop, the other trainers' rounds fail rather than wait on it,
 * and the first error ends the run (finish_trainers). Either way no
 * worker trains on unsynced to the end of its data first. */
static void shadow_failed(void *arg, const struct ss_err *e)
{
    struct job *j = arg;
    if (j->env && j->env->fatal)
        j->env->fatal(j->env->arg, e);
    __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&j->mu);
    if (!j->sync_err.code) /* the first: the others' then only say a peer's failed */
        j->sync_err = *e;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (j->coll) /* the other trainers' rounds wait on this one */
        collective_local_break(j->coll[0]);
}

/* A stop (ss_halt_signal) seen: the workers end as at the end of their
 * data, a feed once its queue is drained, and the job ends as it would
 * then (final sync, checkpoint, eval, model, metrics). */
static void halt_note(struct job *j)
{
    if (j->halt_noted || !ss_halt_signal())
        return;
    j->halt_noted = 1;
    if (j->env && j->env->feed)
        feed_halt(j->env->feed);
    if (j->is_master)
        fprintf(stderr, "# stopping (%s): the workers end at their next batch; then the final "
                "sync%s, eval and model as at the end of the data%s\n", ss_halt_name(),
                j->c->checkpoint.dir[0] ? ", checkpoint" : "",
                j->env ? "" : " (SIGINT or SIGTERM again: at once)");
}

static void mid_eval_poll(struct job *j, int64_t examples);
static void wait_final_pushes(struct job *j);

/* The job's examples: this process's count, or in a cluster job the sum of
 * the trainers' last reports. */
static int64_t job_examples(struct job *j)
{
    if (j->env)
        return j->seen;
    struct figures f;
    collect(j, &f);
    return f.examples;
}

/* Snapshots every checkpoint.interval_s while the data lasts. */
static int periodic_checkpoints(const struct ss_config *c)
{
    return c->checkpoint.dir[0] && c->checkpoint.interval_s > 0;
}

/* Waits for every worker, printing progress lines and taking checkpoints
 * and mid-run evals meanwhile. */
static void wait_workers(struct job *j)
{
    double interval = j->c->output.log_interval_s, next = ss_now() + interval;
    double ck_every = j->c->checkpoint.interval_s;
    int ck_on = periodic_checkpoints(j->c);
    j->ck_next = ss_now() + ck_every;
    int serve = ck_on && j->env && !j->is_master; /* answer the master's requests */
    int ended = 0;              /* ...until it says it takes no more */
    pthread_mutex_lock(&j->mu);
    while (j->workers_left > 0) {
        double now = ss_now();
        if (!j->halt_noted && ss_halt_signal()) {
            pthread_mutex_unlock(&j->mu);
            halt_note(j);
            pthread_mutex_lock(&j->mu);
        }
        if (serve) {
            pthread_mutex_unlock(&j->mu);
            if (!ended && serve_checkpoints(j) == 2) /* the master's data ended first */
                ended = 1;
            pthread_mutex_lock(&j->mu);
        } else if (ck_on && now >= j->ck_next) {
            pthread_mutex_unlock(&j->mu);
            checkpoint_now(j, 0);
            j->ck_next = ss_now() + ck_every;
            pthread_mutex_lock(&j->mu);
            continue;
        }
        if (j->mid.every) {
            pthread_mutex_unlock(&j->mu);
            mid_eval_poll(j, job_examples(j));
            pthread_mutex_lock(&j->mu);
        }
        if (now >= next) {
            pthread_mutex_unlock(&j->mu);
            progress(j, 0, 1);
            next += interval * (1 + floor((ss_now() - next) / interval));
            pthread_mutex_lock(&j->mu);
            continue;
        }
        /* a serving trainer polls every 20 ms and keeps no schedule of its own
         * (a due time in the past once made it sleep up to 1 s: the negative
         * wait's fraction went into tv_nsec) */
        double wait = (ck_on && !serve && j->ck_next < next ? j->ck_next : next) - now;
        if (serve && wait > 0.02)
            wait = 0.02;
        if (wait > 0.25) /* a stop is seen soon */
            wait = 0.25;
        if (j->mid.every && wait > 0.02) /* an eval starts near its count */
            wait = 0.02;
        struct timespec ts = ss_deadline(wait); /* (a negative wait: now) */
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    pthread_mutex_unlock(&j->mu);
    halt_note(j); /* the workers may have seen the stop first */
    const struct timespec pause = {0, 5000000};
    if (serve && j->env->beat) /* before its data's end is said below */
        wait_final_pushes(j);
    /* the master's data may go on; a failed worker (stop) ends the job now,
     * in wait_other_trainers, not when the master's data ends */
    while (serve && !ended && !__atomic_load_n(&j->stop, __ATOMIC_RELAXED) &&
           serve_checkpoints(j) != 2) {
        if (j->env->beat) /* its data has ended: it says so, and hears the others */
            progress(j, 1, 0);
        nanosleep(&pause, NULL);
    }
}

/* EASGD: every trainer's final push is in the center before any says its
 * data has ended (a cluster job's final report) or a following trainer
 * makes its last pull (shadow_wait). */
static void wait_final_pushes(struct job *j)
{
    if (sync_algo_needs(j->c->sync.algo) == SYNC_NEEDS_CENTER)
        for (int t = 0; t < j->n_tr; t++)
            shadow_wait_final(j->tr[t].shadow);
}

/* A cluster job, this trainer's data ended: until every other trainer's
 * has, the master prints the job's progress and takes the snapshots
 * (checkpoint.interval_s) and evals due, and one that stalls ends the
 * job (env->beat) rather than hold the others in the collectives below.
 * A failed worker ends the job at once (env->fatal), naming its error: a
 * DES group cannot go on without it, and the others need not train on. */
static void wait_other_trainers(struct job *j)
{
    if (!j->env || !j->env->beat)
        return;
    wait_final_pushes(j);
    double ck_every = j->c->checkpoint.interval_s;
    int ck_on = periodic_checkpoints(j->c) && j->is_master;
    for (int k = 0; k < j->n_wk; k++) /* the others would wait on it (DES) or for its end */
        if (j->tr[0].workers[k].rc < 0)
            j->env->fatal(j->env->arg, &j->tr[0].workers[k].err);
    double interval = j->c->output.log_interval_s, next = ss_now() + interval;
    const struct timespec nap = {0, 10000000};
    for (;;) {
        int due = ss_now() >= next;
        if (!j->halt_noted && ss_halt_signal()) /* its own, or another's (the reports) */
            halt_note(j);
        if (progress(j, 1, due))
            return;
        if (j->mid.every) /* the others train on: their count goes on */
            mid_eval_poll(j, j->seen);
        if (ck_on && !ss_halt_signal() && ss_now() >= j->ck_next) { /* ...and their snapshots */
            checkpoint_now(j, 0);
            j->ck_next = ss_now() + ck_every;
        }
        if (due)
            next += interval * (1 + floor((ss_now() - next) / interval));
        nanosleep(&nap, NULL);
    }
}

/* Notes on sync keys set away from their defaults that this job's
 * algorithm and mode do not use, so no one tunes a key that does nothing. */
static void unused_sync_notes(const struct ss_config *c, int trainers)
{
    struct ss_config d;
    struct ss_err ignored;
    if (ss_config_load(&d, NULL, NULL, 0, &ignored) < 0)
        return;
    const char *algo = c->sync.algo;
    int none = !strcmp(algo, "none"), fg = c->sync.mode == SYNC_FOREGROUND;
    if (none && fg)
        printf("# sync: sync.mode = foreground with sync.algo = none: there is no round to wait "
               "for, so the workers never stop (sync.gap is not used)\n");
    else if (!fg && c->sync.gap != d.sync.gap)
        printf("# sync: sync.gap = %d applies to sync.mode = foreground; shadow rounds follow "
               "each other sync.shadow_sleep_ms apart\n", c->sync.gap);
    if (none && trainers > 1)
        printf("# sync: sync.algo = none with %d trainers: each trains a replica of its own, never "
               "synced; the saved model is trainer 0's (sync.output = average: their mean)\n",
               trainers);
    if ((none || !strcmp(algo, "allreduce")) && c->sync.alpha != d.sync.alpha)
        printf("# sync: sync.alpha is not used by sync.algo = %s\n", algo);
    if (strcmp(algo, "bmuf") && (c->sync.bmuf_momentum != d.sync.bmuf_momentum ||
                                 c->sync.bmuf_lr != d.sync.bmuf_lr ||
                                 c->sync.bmuf_nesterov != d.sync.bmuf_nesterov))
        printf("# sync: sync.bmuf_momentum, sync.bmuf_lr and sync.bmuf_nesterov apply to "
               "sync.algo = bmuf only (this job's is %s)\n", algo);
    ss_config_free(&d);
}

/* Joins workers then shadow threads (the final sync). A shadow thread's
 * error wins (the workers' then only say that they stopped, or that a
 * foreground round failed), else the first worker's. */
static int finish_trainers(struct job *j, struct ss_err *e)
{
    int rc = 0;
    for (int t = 0; t < j->n_tr; t++) {
        struct trainer *tr = &j->tr[t];
        for (int k = 0; k < j->n_wk; k++) {
            pthread_join(tr->workers[k].th, NULL);
            if (tr->workers[k].rc < 0 && rc == 0) {
                rc = tr->workers[k].rc;
                *e = tr->workers[k].err;
            }
        }
    }
    wait_final_pushes(j);
    if (j->env && j->env->figures) { /* its examples, and where its rates' clock ended */
        double n = 0, at = 0;
        for (int k = 0; k < j->n_wk; k++) {
            n += (double)j->tr[0].workers[k].examples;
            at = j->tr[0].workers[k].clock > at ? (double)j->tr[0].workers[k].clock : at;
        }
        j->env->figures[0] = n, j->env->figures[1] = j->sched_on ? at : 0;
    }
    int from_shadow = 0;
    for (int t = 0; t < j->n_tr; t++) {
        struct ss_err se = {0};
        /* joined only in free_trainers: its state goes into the final checkpoint */
        int src = shadow_wait(j->tr[t].shadow, &j->tr[t].syncs, &se);
        if (src < 0 && !from_shadow) {
            rc = src, from_shadow = 1;
            *e = se;
        }
    }
    if (from_shadow && j->sync_err.code) /* the round that failed first */
        *e = j->sync_err, rc = j->sync_err.code;
    return rc;
}

static void free_trainers(struct job *j)
{
    for (int t = 0; j->tr && t < j->n_tr; t++) {
        for (int k = 0; j->tr[t].workers && k < j->n_wk; k++) { /* none: failed before them */
            struct worker *wk = &j->tr[t].workers[k];
            pthread_mutex_destroy(&wk->mu);
            gpu_worker_free(wk->gpu);
            if (wk->emb && wk->emb != j->emb)
                wk->emb->ops->free(wk->emb);
        }
        free(j->tr[t].workers);
        free(j->tr[t].w);
        free(j->tr[t].state);
        gpu_dense_free(j->tr[t].gpu);
        if (j->tr[t].pinned)
            gpu_host_unregister(j->tr[t].stage), gpu_host_unregister(j->tr[t].snap);
        free(j->tr[t].stage);
        free(j->tr[t].snap);
        if (j->tr[t].shadow) /* ended (finish_trainers) */
            shadow_join(j->tr[t].shadow, NULL, NULL);
    }
    free(j->tr);
    for (int t = 0; j->coll && t < j->n_tr; t++)
        j->coll[t]->ops->free(j->coll[t]);
    free(j->coll);
    if (j->center)
        j->center->ops->free(j->center);
}

/* trainer0's vector, or the mean of the replicas (sync.output = average). */
/* w += v / count: one replica's share of their mean, summed the same way
 * wherever a mean is taken (the saved model, a mid-run eval's, a
 * checkpoint's), so each scores as the others. */
static void mean_add(float *w, const float *v, size_t n, int count)
{
    for (size_t i = 0; i < n; i++)
        w[i] += v[i] / count;
}

static float *output_model(struct job *j)
{
    size_t n = j->n_sync;
    float *w = ss_aligned(n * sizeof(float));
    if (j->c->sync.output == OUT_AVERAGE && j->env) {
        memcpy(w, j->tr[0].w, n * sizeof(float));
        j->env->sum_floats(j->env->arg, w, n);
        for (size_t i = 0; i < n; i++)
            w[i] /= j->env->count;
    } else if (j->c->sync.output == OUT_AVERAGE) {
        for (int t = 0; t < j->n_tr; t++)
            mean_add(w, j->tr[t].w, n, j->n_tr);
    } else {
        memcpy(w, j->tr[0].w, n * sizeof(float));
    }
    return w;
}

/* The hot clients' and caches' figures, summed over every worker (all
 * have ended). */
static void client_figures(struct job *j, struct figures *f)
{
    for (int t = 0; t < j->n_tr; t++)
        for (int k = 0; k < j->n_wk; k++) {
            hot_stats_add(&f->hot, &j->tr[t].workers[k].hot);
            cache_stats_add(&f->cache, &j->tr[t].workers[k].cache);
            des_stats_add(&f->des, &j->tr[t].workers[k].des);
        }
}

static double share(int64_t part, int64_t whole)
{
    return whole > 0 ? (double)part / (double)whole : NAN;
}

/* A share as a percentage for a line ("-" of nothing: a resume that
 * trained nothing). */
static const char *pct(char buf[24], int64_t part, int64_t whole, int digits)
{
    if (whole > 0)
        snprintf(buf, 24, "%.*f %%", digits, 100 * share(part, whole));
    else
        snprintf(buf, 24, "-");
    return buf;
}

static void print_cache(const struct cache_stats *k)
{
    char a[24], b[24];
    printf("cache: hits %s  rows fetched %lld  refreshed %lld  deltas pushed %lld  "
           "uncached %s  wire MB %.1f of %.1f\n", pct(a, k->hits, k->lookups, 1),
           (long long)k->fetched, (long long)k->refreshed, (long long)k->rows_pushed,
           pct(b, k->uncached, k->lookups, 2), k->bytes_sent / 1e6, k->bytes_plain / 1e6);
}

static void print_des(const struct des_stats *d)
{
    printf("des: rounds %lld  lookups %lld  pushes %lld  wire MB %.1f (the rows would be %.1f)  "
           "in the exchange %.1f s\n", (long long)d->rounds, (long long)d->lookups,
           (long long)d->pushes, d->bytes_sent / 1e6, d->bytes_rows / 1e6, d->wait_s);
}

static void print_hot(const struct job *j, const struct hot_stats *h)
{
    char a[24], b[24];
    printf("hot: rows %lld  lookups %s  examples without the tables %s  batches "
           "without them %lld of %lld  wire MB saved %.1f\n", (long long)j->hot->n,
           pct(a, h->hot_lookups, h->lookups, 1), pct(b, h->hot_examples, h->examples, 1),
           (long long)h->ps_skipped, (long long)h->batches, h->bytes_saved / 1e6);
}

static void json_num(FILE *f, const char *k, double v, int last)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 9007199254740992.0) /* a count: exact */
        fprintf(f, "  \"%s\": %.0f%s\n", k, v, last ? "" : ",");
    else if (isfinite(v))
        fprintf(f, "  \"%s\": %.8g%s\n", k, v, last ? "" : ",");
    else
        fprintf(f, "  \"%s\": null%s\n", k, last ? "" : ",");
}

static int write_metrics(struct job *j, const struct figures *f, const struct eval_result *ev,
                         const struct reader_stats *rs, struct ss_err *e)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/metrics.json", j->c->output.dir);
    FILE *out = fopen(p, "w");
    if (!out)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", p, strerror(errno));
    fprintf(out, "{\n");
    json_num(out, "examples", (double)f->examples, 0);
    json_num(out, "seconds", f->elapsed, 0);
    json_num(out, "eps", f->eps, 0);
    json_num(out, "train_ne", f->train_ne, 0);
    json_num(out, "train_logloss", f->train_logloss, 0);
    json_num(out, "eval_ne", ev->ne, 0);
    json_num(out, "eval_logloss", ev->logloss, 0);
    json_num(out, "eval_auc", ev->auc, 0);
    json_num(out, "eval_calibration", ev->calibration, 0);
    json_num(out, "eval_examples", (double)ev->examples, 0);
    json_num(out, "eval_bad_lines", (double)ev->bad_lines, 0);
    json_num(out, "eval_seconds", j->eval_s, 0);
    json_num(out, "eval_threads", j->eval_threads, 0);
    json_num(out, "syncs", (double)f->syncs, 0);
    json_num(out, "avg_sync_gap", f->sync_gap, 0);
    json_num(out, "replica_spread", f->spread, 0);
    json_num(out, "iterations", (double)f->iterations, 0);
    json_num(out, "bad_lines", (double)rs->bad_lines, 0);
    json_num(out, "checkpoints", (double)j->checkpoints, 0);
    json_num(out, "checkpoint_failures", (double)j->checkpoint_failures, 0);
    json_num(out, "epochs", j->c->data.epochs, 0);
    json_num(out, "lr_scale", optim_lr_scale(j->c, f->examples), 0); /* the rates' factor at the end */
    if (j->resumed_from[0])
        fprintf(out, "  \"resumed_from\": \"%s\",\n", j->resumed_from);
    if (ss_halt_signal()) /* stopped by a signal, maybe before the end of data.train */
        fprintf(out, "  \"stopped_by\": \"%s\",\n", ss_halt_name());
    /* where the workers' time went, summed over them: reading batches, the
     * embedding lookup, the dense half (on the CPU or the device), the push */
    static const char *const part[4] = {"worker_read_s", "worker_lookup_s", "worker_dense_s",
                                        "worker_push_s"};
    for (int p = 0; p < 4; p++) {
        double sum = 0;
        for (int t = 0; t < j->n_tr; t++)
            for (int k = 0; k < j->n_wk; k++) /* the workers have ended */
                sum += j->tr[t].workers[k].t_part[p];
        json_num(out, part[p], sum, 0);
    }
    json_num(out, "dense_params", (double)j->l.n_params, 0);
    struct hot_stats h = f->hot; /* hot embeddings: all zero without them */
    json_num(out, "hot_rows", j->hot ? (double)j->hot->n : 0, 0);
    json_num(out, "hot_lookup_share", j->hot ? share(h.hot_lookups, h.lookups) : 0, 0);
    json_num(out, "hot_example_share", j->hot ? share(h.hot_examples, h.examples) : 0, 0);
    json_num(out, "hot_batches_without_tables", (double)h.ps_skipped, 0);
    json_num(out, "hot_bytes_saved", h.bytes_saved, 0);
    const struct cache_stats *k = &f->cache; /* the embedding cache: zero without it */
    int on = j->c->embedding_cache.rows > 0;
    int64_t crows = j->c->embedding_cache.rows > 0 ? emb_cache_rows(j->c, &j->l) : 0;
    json_num(out, "cache_rows_per_worker", /* as made: capped, in whole sets of 8 */
             (double)((crows + 7) / 8 * 8), 0);
    json_num(out, "cache_hit_rate", on ? share(k->hits, k->lookups) : 0, 0);
    json_num(out, "cache_uncached_share", on ? share(k->uncached, k->lookups) : 0, 0);
    json_num(out, "cache_rows_fetched", (double)k->fetched, 0);
    json_num(out, "cache_rows_refreshed", (double)k->refreshed, 0);
    json_num(out, "cache_deltas_pushed", (double)k->rows_pushed, 0);
    json_num(out, "cache_bytes_sent", k->bytes_sent, 0);
    json_num(out, "cache_bytes_saved", k->bytes_plain - k->bytes_sent, 0);
    const struct des_stats *d = &f->des; /* DES: zero without it */
    json_num(out, "des_rounds", (double)d->rounds, 0);
    json_num(out, "des_bytes_sent", d->bytes_sent, 0);
    json_num(out, "des_bytes_rows", d->bytes_rows, 0);
    json_num(out, "des_exchange_s", d->wait_s, 0);
    double eb = j->tables ? (double)embps_bytes(j->tables) : j->shards ? 0 : NAN;
    for (int t = 0; j->shards && t < j->n_tr; t++)
        eb += j->shards[t] ? (double)embps_bytes(j->shards[t]) : 0;
    json_num(out, "embedding_bytes", eb, 0);
    fprintf(out, "  \"embedding_placement\": \"%s\",\n", j->des ? "trainers" : "ps");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    json_num(out, "peak_rss_mb", ru.ru_maxrss / 1024.0, 0);
    fprintf(out, "  \"sync_algo\": \"%s\",\n", j->c->sync.algo);
    fprintf(out, "  \"sync_mode\": \"%s\",\n",
            j->c->sync.mode == SYNC_FOREGROUND ? "foreground" : "shadow");
    fprintf(out, "  \"blas_kernel\": \"%s\",\n", openblas_get_corename());
    fprintf(out, "  \"dense_backend\": \"%s\",\n", j->l.backend == DENSE_ONEDNN ? "onednn" : "openblas");
    fprintf(out, "  \"precision\": \"%s\",\n", j->l.precision == PREC_BF16 ? "bf16" : "fp32");
    fprintf(out, "  \"dense_kernels\": \"%s\",\n", j->dense_desc);
    json_num(out, "trainers", j->env ? j->env->count : j->n_tr, 0);
    json_num(out, "worker_threads", j->n_wk, 1);
    fprintf(out, "}\n");
    if (fclose(out) != 0)
        return ss_fail(e, SS_EIO, "%s: write failed: %s", p, strerror(errno));
    return 0;
}

static void *des_serve_main(void *arg)
{
    struct ss_err e;
    emb_des_finish(arg, &e);
    return NULL;
}

/* DES: the master scores path as member 0 of a group of its own while the
 * other trainers serve their shards to it (collective over the trainers:
 * in the embedded default, threads here serve for them). */
static int des_eval(struct job *j, const float *w, const char *path, FILE *pred,
                    struct eval_result *ev, struct ss_err *e)
{
    int n = j->n_tr, rc = 0;
    struct exchange **x = ss_xcalloc(n, sizeof *x);
    struct emb_client **cs = ss_xcalloc(n, sizeof *cs);
    pthread_t *th = ss_xcalloc(n, sizeof *th);
    if (j->env)
        rc = j->env->make_exchange(j->env->arg, &x[0], e);
    else
        exchange_local_group(x, n, NULL);
    for (int t = 0; rc == 0 && t < n; t++)
        cs[t] = emb_client_des(x[t], j->des, j->l.dim, j->shards[t], NULL, NULL);
    for (int t = 1; rc == 0 && t < n; t++)
        if (pthread_create(&th[t], NULL, des_serve_main, cs[t]) != 0)
            abort();
    if (rc == 0 && j->is_master) {
        rc = trainer_eval(&j->l, w, cs, 1, j->c, path, pred, NULL, ev, e);
        struct ss_err fe;
        int frc = emb_des_finish(cs[0], &fe); /* the others end with it */
        if (rc == 0 && frc < 0)
            rc = frc, *e = fe;
    } else if (rc == 0) {
        rc = emb_des_finish(cs[0], e);
    }
    for (int t = 1; cs[0] && t < n; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < n; t++)
        if (cs[t])
            cs[t]->ops->free(cs[t]);
    free(th);
    free(cs);
    free(x);
    return rc;
}

/* A NaN printed as "nan", not glibc's "-nan" for one of sign bit set. */
static double fabs_nan(double v)
{
    return isnan(v) ? fabs(v) : v;
}

static void print_eval_to(FILE *f, const char *what, const struct eval_result *ev)
{
    fprintf(f, "%s: examples %lld  ne %.5f  logloss %.5f  auc %.5f  calibration %.4f", what,
            (long long)ev->examples, fabs_nan(ev->ne), fabs_nan(ev->logloss), fabs_nan(ev->auc),
            fabs_nan(ev->calibration));
    if (ev->bad_lines)
        fprintf(f, "  bad_lines %lld", (long long)ev->bad_lines);
    if (ev->nan_preds)
        fprintf(f, "  nan_predictions %lld", (long long)ev->nan_preds);
    fputc('\n', f);
}

/* An eval that read no example of path. */
static int noeval(struct ss_err *e, const char *path, const char *so)
{
    return ss_fail(e, SS_EINVAL, "no eval example was read from data.eval = %s: %s; check its "
                   "format and columns", path, so);
}

/* An eval whose predictions were NaN: the model diverged in when (after
 * the advice: what became of its checkpoint, or ""). */
static int nan_model(struct ss_err *e, const struct ss_config *c, const struct eval_result *ev,
                     const char *when, const char *ckpt)
{
    return ss_fail(e, SS_EINVAL, "the model diverged: %lld of its %lld predictions on %s are "
                   "NaN (its parameters overflow a forward pass) in %s; %s%s",
                   (long long)ev->nan_preds, (long long)ev->examples, c->data.eval, when,
                   diverged_advice(c), ckpt);
}

static void print_eval(const char *what, const struct eval_result *ev)
{
    print_eval_to(stdout, what, ev);
}

/* Threads for an eval with the workers done: the cores this process may
 * run on (at most 32). */
static int eval_threads(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > 32 ? 32 : n;
}

/* Scores path with the model w (its hot rows, if any, from w too) under
 * the config c (j->c, or the mid-run evals' copy) on threads threads (one
 * with DES); cancel as trainer_eval's. Each thread looks up
 * through j->emb (in process, it takes concurrent calls) or, in a cluster
 * job, a client of its own to the embedding PSs. */
static int eval_with(struct job *j, const struct ss_config *c, const float *w, const char *path,
                     FILE *pred, const int *cancel, int threads, struct eval_result *ev,
                     struct ss_err *e)
{
    if (j->des)
        return des_eval(j, w, path, pred, ev, e);
    int n = threads < 1 ? 1 : threads;
    struct emb_client **own = ss_xcalloc((size_t)n, sizeof *own);
    struct emb_client **emb = ss_xcalloc((size_t)n, sizeof *emb);
    for (int t = 0; t < n; t++) {
        emb[t] = j->emb;
        struct ss_err me;
        if (t > 0 && j->env && j->env->make_emb(j->env->arg, &own[t], &me) < 0) {
            fprintf(stderr, "shadowsync: the eval runs on %d thread(s), not %d: another client "
                    "to the embedding PSs could not be made: %s\n", t, n, me.msg);
            n = t; /* (a limit on open files, say) */
            break;
        }
        if (own[t])
            emb[t] = own[t];
        if (j->hot) { /* only looks up: the replica is not written */
            struct hot_replica r = {j->hot, (float *)w + j->l.n_params, NULL, OPT_SGD, 0, 0};
            emb[t] = emb_client_hot(emb[t], own[t] != NULL, &r, c->trainer.batch_size, NULL);
            own[t] = emb[t];
        }
    }
    int rc = trainer_eval(&j->l, w, emb, n, c, path, pred, cancel, ev, e);
    for (int t = 0; t < n; t++)
        if (own[t])
            own[t]->ops->free(own[t]);
    free(emb);
    free(own);
    return rc;
}

/* output.eval_every: while the job trains, the master scores data.eval
 * with a copy of the model (eval_model) each time the job has trained that
 * many more examples, on a thread of its own, so no worker waits: the
 * copy is taken as the shadow thread takes its own (a Hogwild read; a GPU
 * trainer's through its staging transfer), and the eval's lookups read the
 * tables as the workers write them (the job's own client j->emb, which no
 * worker of a cluster job uses). One eval at a time: one due while another
 * runs starts once it has ended. Each is a line and a row of eval.csv,
 * the end-of-run eval the last. */
static void *mid_eval_main(void *arg)
{
    struct job *j = arg;
    struct mid_eval *m = &j->mid;
    m->rc = eval_with(j, &m->c, m->w, j->c->data.eval, NULL, &m->cancel, 1, &m->ev, &m->err);
    __atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&j->mu);
    pthread_cond_broadcast(&j->cv); /* the main thread reports it */
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* A row of eval.csv: the examples trained when the model was copied, the
 * run's seconds then, and the eval's figures. */
static void eval_row(struct job *j, int64_t at, double elapsed, const struct eval_result *ev)
{
    if (!j->eval_csv)
        return;
    /* a mid-run eval of a copy taken at the end's own count, which ended
     * before the end could drop it: the end-of-run eval's row replaces it */
    if (at == j->eval_last_at && j->eval_last_off >= 0 && fflush(j->eval_csv) == 0 &&
        ftruncate(fileno(j->eval_csv), j->eval_last_off) == 0)
        fseeko(j->eval_csv, j->eval_last_off, SEEK_SET);
    j->eval_last_at = at;
    j->eval_last_off = ftello(j->eval_csv);
    char v[4][32]; /* empty where a figure is undefined (eval data of one class) */
    fprintf(j->eval_csv, "%lld,%.3f,%lld,%s,%s,%s,%s\n", (long long)at, elapsed,
            (long long)ev->examples, num_text(ev->ne, 1, "%.6f", v[0]),
            num_text(ev->logloss, 1, "%.6f", v[1]), num_text(ev->auc, 1, "%.6f", v[2]),
            num_text(ev->calibration, 1, "%.6f", v[3]));
    fflush(j->eval_csv);
}

/* Reports an ended mid-run eval (joined here). */
static void mid_eval_report(struct job *j)
{
    struct mid_eval *m = &j->mid;
    pthread_join(m->th, NULL);
    m->running = 0;
    if (m->rc < 0) {
        fprintf(stderr, "shadowsync: warning: the eval at %lld examples failed, training goes "
                "on: %s\n", (long long)m->at, m->err.msg);
    } else if (m->rc == 0) {
        char what[64];
        snprintf(what, sizeof what, "eval (trained %lld)", (long long)m->at);
        if (!j->c->output.quiet)
            print_eval(what, &m->ev);
        fflush(stdout);
        eval_row(j, m->at, m->elapsed, &m->ev);
    }
}

/* What a mid-run eval scores, into w: the model the run would output now.
 * That is trainer 0's replica, or with sync.output = average the replicas'
 * mean where they are all in this process (the embedded default); a
 * cluster job's master has only its own, as averaging would hold up the
 * other trainers. */
static int eval_model(struct job *j, float *w, struct ss_err *e)
{
    if (j->c->sync.output != OUT_AVERAGE || j->env || j->n_tr < 2)
        return model_of(j, &j->tr[0], w, NULL, e);
    size_t n = j->n_sync;
    float *one = ss_aligned(n * sizeof(float));
    memset(w, 0, n * sizeof(float));
    int rc = 0;
    for (int t = 0; rc == 0 && t < j->n_tr; t++)
        if ((rc = model_of(j, &j->tr[t], one, NULL, e)) == 0)
            mean_add(w, one, n, j->n_tr);
    free(one);
    return rc;
}

/* Every worker of this process sends on the updates its embedding cache
 * holds back, at the edge of its batch (it goes on at once); returns once
 * each has, or has ended (then it sent them all). */
static void flush_workers(struct job *j)
{
    pthread_mutex_lock(&j->mu);
    int64_t gen = __atomic_add_fetch(&j->flush_gen, 1, __ATOMIC_ACQ_REL);
    for (;;) {
        int all = 1;
        for (int t = 0; all && t < j->n_tr; t++)
            for (int k = 0; all && k < j->n_wk; k++)
                all = j->tr[t].workers[k].ended || j->tr[t].workers[k].flushed_gen == gen;
        if (all || __atomic_load_n(&j->stop, __ATOMIC_RELAXED))
            break;
        pthread_cond_wait(&j->cv, &j->mu);
    }
    pthread_mutex_unlock(&j->mu);
}

/* The master, from its waits: reports an eval that has ended, and starts
 * one that is due at `examples` (the job's count), also once its own
 * data has ended while other workers or trainers train on (uneven
 * shares); one that turns out to be near the end is dropped there. */
static void mid_eval_poll(struct job *j, int64_t examples)
{
    struct mid_eval *m = &j->mid;
    if (m->running && __atomic_load_n(&m->done, __ATOMIC_ACQUIRE))
        mid_eval_report(j);
    if (!m->every || m->running || examples < m->next || ss_halt_signal())
        return;
    if (!m->w)
        m->w = ss_aligned(j->n_sync * sizeof(float));
    if (j->c->embedding_cache.rows > 0) /* (a cluster job's other trainers hold theirs) */
        flush_workers(j);
    if (eval_model(j, m->w, &m->err) < 0) {
        fprintf(stderr, "shadowsync: warning: no eval at %lld examples: a trainer's model "
                "could not be read from its GPU: %s\n", (long long)examples, m->err.msg);
        m->next += m->every;
        return;
    }
    m->at = examples;
    m->elapsed = ss_now() - j->t0;
    m->next = (examples / m->every + 1) * m->every;
    m->done = 0;
    m->running = 1;
    if (pthread_create(&m->th, NULL, mid_eval_main, j) != 0) {
        fprintf(stderr, "shadowsync: cannot start the eval thread\n");
        abort();
    }
}

/* The end of training, at `examples`: the eval under way is waited for and
 * reported, or with cancel ended at once, its figures dropped; also one
 * of a copy taken within half an interval of the end, whose row the
 * end-of-run eval's all but repeats (the end need not wait for it). */
static void mid_eval_end(struct job *j, int cancel, int64_t examples)
{
    struct mid_eval *m = &j->mid;
    if (!m->running)
        return;
    if (cancel || examples - m->at < m->every / 2)
        __atomic_store_n(&m->cancel, 1, __ATOMIC_RELAXED);
    mid_eval_report(j);
}

/* The embedded tables take the output model's hot rows (and trainer 0's
 * optimizer state for them), so tables.bin is the whole model. */
static void write_back_hot(struct job *j, const float *w)
{
    if (!j->hot || !j->tables)
        return;
    int d = j->l.dim;
    struct hot_replica r = replica_of(j, &j->tr[0]);
    for (int64_t i = 0; i < j->hot->n; i++) {
        float *row = embps_row(j->tables, j->hot->table[i], (uint64_t)j->hot->row[i]);
        memcpy(row, w + j->l.n_params + (size_t)i * d, (size_t)d * sizeof(float));
        if (r.opt == OPT_ROWWISE_ADAGRAD)
            row[d] = r.acc[i];
    }
}

/* DES: each of this process's trainers' shards, as dir/tables-trainerT.bin. */
static int save_shards(struct job *j, const char *dir, struct ss_err *e)
{
    int first = j->env ? j->env->index : 0, rc = 0;
    char p[4500];
    for (int t = 0; rc == 0 && j->shards && t < j->n_tr; t++) {
        if (!j->shards[t])
            continue;
        snprintf(p, sizeof p, "%s/tables-trainer%d.bin", dir, first + t);
        rc = embps_save(j->shards[t], p, e);
    }
    return rc;
}

static int save_model(struct job *j, const float *w, struct ss_err *e)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/model", j->c->output.dir);
    int rc = ss_mkdir_p(p, e);
    if (rc < 0)
        return rc;
    snprintf(p, sizeof p, "%s/model/dense.bin", j->c->output.dir);
    if ((rc = dense_save(w, j->l.n_params, &j->l, p, e)) < 0)
        return rc;
    if (j->hot) { /* which rows are hot, and their values (the tables' copies are stale) */
        snprintf(p, sizeof p, "%s/model/hot-rows.bin", j->c->output.dir);
        if ((rc = hot_save(j->hot, p, e)) < 0)
            return rc;
        snprintf(p, sizeof p, "%s/model/hot.bin", j->c->output.dir);
        size_t np = j->l.n_params;
        if ((rc = dense_save(w + np, j->n_sync - np, &j->l, p, e)) < 0)
            return rc;
    }
    if (!j->tables) /* cluster job: each embedding PS saves its shards, tables-psK.bin; */
        return 0;   /* DES: each trainer its own (save_shards) */
    write_back_hot(j, w);
    snprintf(p, sizeof p, "%s/model/tables.bin", j->c->output.dir);
    return embps_save(j->tables, p, e);
}

/* ---- checkpoints (DESIGN §8) -------------------------------------------
 * The workers stop at the edge of a batch (the shadow threads held, so a
 * foreground round another trainer waits on still runs), the snapshot is
 * written (tables with their optimizer state, each trainer's dense vector
 * and optimizer state, the reader's position, the figures), then they go
 * on. No batch is in flight at the snapshot: resuming repeats and loses
 * nothing. The EASGD center and each trainer's BMUF state (global model,
 * momentum) are saved too. The shadow threads keep syncing meanwhile, so
 * a replica or the sync state may be caught mid-round (as Hogwild reads
 * are). */

/* How long a checkpoint waits for the workers to reach the edge of a batch:
 * a step's calls to services (lookup, push) each end within
 * job.rpc_timeout_s, a foreground round within sync.timeout_s; 10 s more for
 * the step's own work. The feed's pull in flight: one call. */
static double pause_wait_s(const struct ss_config *c)
{
    double sync = c->sync.mode == SYNC_FOREGROUND ? c->sync.timeout_s : 0;
    return 2 * c->job.rpc_timeout_s + (sync > 0 ? sync : 0) + 10;
}

static void resume_workers(struct job *j);

/* 0 once every worker waits at the edge of a batch; past pause_wait_s, the
 * pause is undone and the checkpoint fails naming what it waited on. */
static int pause_workers(struct job *j, struct ss_err *e)
{
    for (int t = 0; !j->des && t < j->n_tr; t++) /* DES: no round waits on a paused trainer */
        if (j->tr[t].shadow)
            shadow_hold(j->tr[t].shadow, 1);
    double wait = pause_wait_s(j->c);
    int rc = 0;
    if (j->env && j->env->feed) /* no new batch; the workers drain the queue, then wait */
        rc = feed_pause(j->env->feed, 1, j->c->job.rpc_timeout_s + 10, e);
    struct timespec until = ss_deadline(wait);
    pthread_mutex_lock(&j->mu);
    __atomic_store_n(&j->pause, 1, __ATOMIC_RELEASE);
    while (rc == 0 && j->paused < j->workers_left)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT &&
            j->paused < j->workers_left)
            rc = ss_fail(e, SS_ESTATE, "%d of %d worker(s) did not reach the edge of a batch "
                         "within %.0f s (2 x job.rpc_timeout_s%s + 10 s): a step's call to a "
                         "service hangs", j->workers_left - j->paused, j->workers_left, wait,
                         j->c->sync.mode == SYNC_FOREGROUND ? " + sync.timeout_s" : "");
    pthread_mutex_unlock(&j->mu);
    if (rc == 0 && __atomic_load_n(&j->stop, __ATOMIC_RELAXED))
        rc = ss_fail(e, SS_ESTATE, "a worker failed (below): this state, short of its batch, "
                     "is not saved");
    if (rc < 0)
        resume_workers(j);
    return rc;
}

static void resume_workers(struct job *j)
{
    if (j->env && j->env->feed) /* before the workers go: none gets FEED_PAUSED again */
        feed_pause(j->env->feed, 0, 0, NULL);
    pthread_mutex_lock(&j->mu);
    __atomic_store_n(&j->pause, 0, __ATOMIC_RELEASE);
    j->resumes++;
    pthread_cond_broadcast(&j->resume_cv);
    pthread_mutex_unlock(&j->mu);
    for (int t = 0; !j->des && t < j->n_tr; t++)
        if (j->tr[t].shadow)
            shadow_hold(j->tr[t].shadow, 0);
}

/* This process's figures for a snapshot: examples, iterations, NE sums
 * (loss, labels, count), syncs. */
static void snapshot_figures(struct job *j, double *fig)
{
    struct figures f;
    collect(j, &f);
    double v[8] = {(double)f.examples, (double)f.iterations, f.ne.loss_sum, f.ne.label_sum,
                   (double)f.ne.n, (double)f.syncs, f.elapsed, 0};
    memcpy(fig, v, sizeof v);
}

/* This process's parts of a snapshot, into dir: each of its trainers'
 * dense vector, optimizer state and sync state; its reader's position; in
 * the embedded default also the tables and the EASGD center. Trainer t of
 * the job writes dense-t.bin, state-t.bin, sync-t-K.bin, reader-t.pos. */
static int write_own_parts(struct job *j, const char *dir, struct ss_err *e)
{
    int first = j->env ? j->env->index : 0, rc = read_back(j, e); /* a GPU's live copy */
    size_t n = j->n_sync;
    char p[4500];
    if (rc == 0 && j->tables) {
        snprintf(p, sizeof p, "%s/tables.bin", dir);
        rc = embps_save(j->tables, p, e);
    }
    if (rc == 0)
        rc = save_shards(j, dir, e);
    if (rc == 0 && j->hot && first == 0) { /* which rows the replicas hold */
        snprintf(p, sizeof p, "%s/hot-rows.bin", dir);
        rc = hot_save(j->hot, p, e);
    }
    for (int t = 0; rc == 0 && t < j->n_tr; t++) {
        snprintf(p, sizeof p, "%s/dense-%d.bin", dir, first + t);
        rc = dense_save(j->tr[t].w, n, &j->l, p, e);
        snprintf(p, sizeof p, "%s/state-%d.bin", dir, first + t);
        if (rc == 0)
            rc = dense_save(j->tr[t].state, n, &j->l, p, e);
        float *arrays[4];
        int m = rc == 0 && j->tr[t].shadow ? shadow_state(j->tr[t].shadow, arrays) : 0;
        for (int i = 0; rc == 0 && i < m; i++) {
            snprintf(p, sizeof p, "%s/sync-%d-%d.bin", dir, first + t, i);
            rc = dense_save(arrays[i], n, &j->l, p, e);
        }
    }
    if (rc == 0 && j->center && j->center->ops->get) {
        float *v = ss_aligned(n * sizeof(float));
        j->center->ops->get(j->center, v);
        snprintf(p, sizeof p, "%s/center.bin", dir);
        rc = dense_save(v, n, &j->l, p, e);
        free(v);
    }
    if (rc == 0 && j->reader) {
        snprintf(p, sizeof p, "%s/reader-%d.pos", dir, first);
        rc = reader_save_pos(j->reader, p, e);
    }
    if (rc == 0 && j->env && j->env->feed) { /* which reader is next, each one's count */
        snprintf(p, sizeof p, "%s/feed-%d.pos", dir, first);
        rc = feed_save(j->env->feed, p, e);
    }
    return rc;
}

/* The master's (or the embedded default's) end of a snapshot: every part
 * in the directory hashed, the figures of the whole job, the commit. */
static int commit_snapshot(struct job *j, struct ckpt *k, const double *fig, int final, double t0,
                           struct ss_err *e)
{
    const struct ss_config *c = j->c;
    int rc = ckpt_add_all(k, e);
    const char *final_dir = NULL;
    if (rc == 0) {
        static const char *const keys[7] = {"examples", "iterations", "ne_loss_sum",
                                            "ne_label_sum", "ne_n", "syncs", "elapsed_s"};
        for (int i = 0; i < 7; i++)
            ckpt_meta(k, keys[i], fig[i]);
        ckpt_meta(k, "trainers", j->env ? j->env->count : j->n_tr);
        ckpt_meta(k, "embedding_ps", j->env ? c->job.embedding_ps : 0);
        ckpt_meta(k, "sync_ps", j->env ? c->job.sync_ps : 0);
        ckpt_meta(k, "readers", j->env ? c->job.readers : 0);
        ckpt_meta(k, "in_flight_batches", 0);
        ckpt_meta(k, "final", final);
        /* whether its center-*.bin are a center (easgd's), or only the start the sync PSs
         * of another algorithm kept */
        ckpt_meta(k, "center", sync_algo_needs(c->sync.algo) == SYNC_NEEDS_CENTER);
        ckpt_meta(k, "run", j->run_id);
        rc = ckpt_commit(k, 2, &final_dir, e);
    }
    if (rc == 0 && final)
        snprintf(j->final_ckpt, sizeof j->final_ckpt, "%s", final_dir);
    if (rc == 0 && !c->output.quiet)
        printf("# checkpoint %s: %lld examples (%.1f s)\n", final_dir, (long long)fig[0],
               ss_now() - t0), fflush(stdout);
    return rc;
}

/* A snapshot taken by the master of a cluster job or the embedded
 * default; it pauses the workers (they are done for the final one). */
static int write_checkpoint(struct job *j, int final, struct ss_err *e)
{
    const struct trainer_env *env = j->env;
    double t0 = ss_now(), fig[8], others[8] = {0};
    snapshot_figures(j, fig);
    struct ckpt *k = NULL; /* a diverged model's: none (the cluster's others told by tmp "") */
    int rc = final && j->nonfinite ? ss_fail(e, SS_EINVAL, "the model's parameters are NaN or "
                                             "infinite (below)")
                                   : ckpt_begin(&k, j->c->checkpoint.dir, e);
    char tmp[4400] = "";
    int paused = 0; /* the final one: the workers are done */
    if (rc == 0)
        snprintf(tmp, sizeof tmp, "%s", ckpt_tmp_dir(k));
    if (env && final) {         /* collective: every trainer is here */
        env->ckpt_final(env->arg, tmp, sizeof tmp, NULL, 0); /* tmp to all ("": failed) */
        if (rc == 0)
            rc = write_own_parts(j, tmp, e);
        double elapsed = fig[6]; /* the master's time, not a sum */
        int worst = env->ckpt_final(env->arg, NULL, 0, fig, rc);
        fig[6] = elapsed;
        if (rc == 0 && worst < 0)
            rc = ss_fail(e, worst, "another trainer could not write its part");
    } else if (env && rc == 0) {
        env->ckpt_ask(env->arg, tmp); /* first: DES groups pause once every trainer has */
        rc = pause_workers(j, e);
        paused = rc == 0;
        snapshot_figures(j, fig);
        if (rc == 0)
            rc = write_own_parts(j, tmp, e);
        int worst = env->ckpt_wait(env->arg, others);
        if (rc == 0 && worst < 0)
            rc = ss_fail(e, worst, "another trainer could not write its part");
        for (int i = 0; i < 6; i++)
            fig[i] += others[i];
    } else if (rc == 0) {
        rc = pause_workers(j, e);
        paused = rc == 0;
        if (rc == 0) {
            snapshot_figures(j, fig);
            rc = write_own_parts(j, tmp, e);
        }
    }
    if (rc == 0 && env)
        rc = env->ckpt_services(env->arg, tmp, e);
    if (rc == 0)
        rc = commit_snapshot(j, k, fig, final, t0, e);
    if (paused)
        resume_workers(j);
    if (env && !final && k)
        env->ckpt_release(env->arg);
    if (env && final)
        env->ckpt_final_done(env->arg);
    ckpt_free(k);
    return rc;
}

/* A checkpoint that cannot be written is reported; training goes on and
 * the last good one is kept. */
static void checkpoint_now(struct job *j, int final)
{
    struct ss_err e = {0};
    int rc = write_checkpoint(j, final, &e);
    if (rc < 0) {
        char kept[4400];
        if (j->checkpoints)
            snprintf(kept, sizeof kept, "the last good one is kept");
        else if (j->resumed_from[0]) /* the newest complete one is never removed */
            snprintf(kept, sizeof kept, "the one it resumed from, %s, is kept", j->resumed_from);
        else
            snprintf(kept, sizeof kept, "none has been written yet");
        j->checkpoint_failures++;
        j->final_ckpt_failed |= final;
        fprintf(stderr, "shadowsync: %s checkpoint failed, %s (%s): %s\n",
                final ? "the final" : "a", final ? "the run ends without it" : "training goes on",
                kept, e.msg);
    } else {
        j->checkpoints++;
    }
}

/* A trainer of a cluster job other than the master: answers the master's
 * checkpoint requests (returns 2 once the master takes no more). */
static int serve_checkpoints(struct job *j)
{
    const struct trainer_env *env = j->env;
    char tmp[4400];
    int r = env->ckpt_poll(env->arg, tmp, sizeof tmp);
    if (r == 1) {
        struct ss_err e = {0};
        double fig[8] = {0};
        int rc = pause_workers(j, &e), paused = rc == 0;
        snapshot_figures(j, fig);
        if (rc == 0)
            rc = write_own_parts(j, tmp, &e);
        if (rc < 0)
            fprintf(stderr, "shadowsync: trainer %d: checkpoint part failed: %s\n", env->index,
                    e.msg);
        env->ckpt_done(env->arg, rc, fig); /* waits for the master's commit */
        if (paused) /* a pause that failed has resumed them */
            resume_workers(j);
    }
    return r;
}

/* The final checkpoint of a trainer other than the master (collective). */
static void final_checkpoint_part(struct job *j)
{
    const struct trainer_env *env = j->env;
    char tmp[4400] = "";
    struct ss_err e = {0};
    double fig[8];
    env->ckpt_final(env->arg, tmp, sizeof tmp, NULL, 0);
    snapshot_figures(j, fig);
    int rc = tmp[0] ? write_own_parts(j, tmp, &e) : SS_EIO;
    env->ckpt_final(env->arg, NULL, 0, fig, rc);
    env->ckpt_final_done(env->arg);
}

/* Before the trainers start: the tables (embedded), the reader's position
 * (when this process reads) and the figures (on the master) of the newest
 * complete checkpoint, or in a cluster job of the one the master chose;
 * start_trainers loads the dense vectors and the sync state. */
static int load_checkpoint(struct job *j, struct ss_err *e)
{
    double t0 = ss_now();
    const struct trainer_env *env = j->env;
    struct ckpt_meta_set m;
    int skipped, rc;
    if (env) {
        snprintf(j->resumed_from, sizeof j->resumed_from, "%s", env->resume_from);
        rc = ckpt_read_meta(j->resumed_from, &m, e);
    } else {
        rc = ckpt_latest(j->resume, j->resumed_from, sizeof j->resumed_from, &m, &skipped, e);
    }
    if (rc < 0)
        return rc;
    j->resumed_trainers = (int)ckpt_meta_get(&m, "trainers", 1);
    j->resumed_final = ckpt_meta_get(&m, "final", 0) != 0;
    j->run_id = ckpt_meta_get(&m, "run", 0); /* 0: written before runs had one */
    if (j->resumed_trainers < 1)
        return ss_fail(e, SS_EFORMAT, "%s: no trainer in the checkpoint", j->resumed_from);
    char p[4500];
    /* the tables as any split wrote them: tables.bin, or one file per PS or
     * per trainer (DES) */
    if (j->tables && (rc = embps_load_dir(j->tables, j->resumed_from, e)) < 0)
        return rc;
    for (int t = 0; j->shards && t < j->n_tr; t++)
        if (j->shards[t] && (rc = embps_load_dir(j->shards[t], j->resumed_from, e)) < 0)
            return rc;
    if (j->reader) {
        snprintf(p, sizeof p, "%s/reader-0.pos", j->resumed_from);
        if (access(p, F_OK) != 0) /* read through reader services (feed-*.pos): so again */
            return ss_fail(e, SS_EINVAL, "%s was written by a job that read data.train through "
                           "reader services: resume it with job.readers >= 1 (tools/submit "
                           "CONFIG ... --resume)", j->resumed_from);
        snprintf(p, sizeof p, "%s/reader-1.pos", j->resumed_from);
        int one_reader = access(p, F_OK) != 0; /* the embedded default's, or one trainer's */
        if (env && one_reader && env->count > 1)
            return ss_fail(e, SS_EINVAL, "%s was written by one reader over all of data.train "
                           "(%d trainer%s in one process, or one trainer rank): a cluster job "
                           "resumes it with job.trainers = 1 (its trainers' dense vectors "
                           "taken in turn), or resume it in one process", j->resumed_from,
                           j->resumed_trainers, j->resumed_trainers == 1 ? "" : "s");
        if (env && !one_reader && j->resumed_trainers != env->count)
            return ss_fail(e, SS_EINVAL, "%s was written by %d trainers reading their own shares "
                           "of data.train: resuming them needs job.trainers = %d (a job read "
                           "through reader services, job.readers >= 1, may resume with other "
                           "trainers; this one was not)",
                           j->resumed_from, j->resumed_trainers, j->resumed_trainers);
        if (!env && !one_reader) /* one reader here cannot take up several shares */
            return ss_fail(e, SS_EINVAL, "%s was written by a cluster job whose %d trainers read "
                           "their own shares of data.train: resume it as one (tools/submit "
                           "CONFIG ... --resume), not in one process", j->resumed_from,
                           j->resumed_trainers);
        snprintf(p, sizeof p, "%s/reader-%d.pos", j->resumed_from, env ? env->index : 0);
        if ((rc = reader_load_pos(j->reader, p, e)) < 0)
            return rc;
    }
    j->sched_base = (int64_t)ckpt_meta_get(&m, "examples", 0);
    if (j->is_master) { /* the job's figures so far, counted once */
        j->base.examples = (int64_t)ckpt_meta_get(&m, "examples", 0);
        j->base.iterations = (int64_t)ckpt_meta_get(&m, "iterations", 0);
        j->base.syncs = (int64_t)ckpt_meta_get(&m, "syncs", 0);
        j->base.ne = (struct ne_acc){ckpt_meta_get(&m, "ne_loss_sum", 0),
                                     ckpt_meta_get(&m, "ne_label_sum", 0),
                                     (int64_t)ckpt_meta_get(&m, "ne_n", 0)};
        j->base.elapsed = ckpt_meta_get(&m, "elapsed_s", 0);
    }
    int now_trainers = env ? env->count : j->n_tr;
    if (sync_algo_needs(j->c->sync.algo) == SYNC_NEEDS_CENTER && !ckpt_meta_get(&m, "center", 1) &&
        j->is_master && !j->c->output.quiet)
        printf("# sync: %s keeps no EASGD center (taken under another sync.algo): the center "
               "starts as trainer 0's replica\n", j->resumed_from);
    if (!j->c->output.quiet)
        printf("# resuming from %s: %lld examples done, %.0f batches in flight at the snapshot "
               "(0: none lost or repeated)%s (checked and loaded in %.1f s)\n", j->resumed_from,
               (long long)j->base.examples, ckpt_meta_get(&m, "in_flight_batches", 0),
               j->resumed_trainers != now_trainers ? "; trainers' dense vectors reassigned" : "",
               ss_now() - t0),
            fflush(stdout);
    return 0;
}

/* Cluster job: the figures of every trainer, summed onto each. */
static void sum_over_trainers(struct job *j, struct figures *f, struct reader_stats *rs)
{
    struct ne_acc ne = f->ne; /* with a resumed run's figures, on the master */
    struct hot_stats *h = &f->hot;
    struct cache_stats *k = &f->cache;
    struct des_stats *d = &f->des;
    double v[28] = {(double)f->examples, (double)f->iterations, (double)f->syncs, ne.loss_sum,
                    ne.label_sum, (double)ne.n, (double)rs->bad_lines, (double)h->batches,
                    (double)h->ps_skipped, (double)h->examples, (double)h->hot_examples,
                    (double)h->lookups, (double)h->hot_lookups, h->bytes_saved,
                    (double)k->lookups, (double)k->hits, (double)k->fetched, (double)k->refreshed,
                    (double)k->uncached, (double)k->rows_pushed, k->bytes_plain, k->bytes_sent,
                    (double)d->rounds, (double)d->lookups, (double)d->pushes, d->bytes_sent,
                    d->bytes_rows, d->wait_s}; /* a stop came with the beats, or too late */
    j->env->sum(j->env->arg, v, 28);
    *h = (struct hot_stats){(int64_t)v[7], (int64_t)v[8], (int64_t)v[9], (int64_t)v[10],
                            (int64_t)v[11], (int64_t)v[12], v[13]};
    *k = (struct cache_stats){(int64_t)v[14], (int64_t)v[15], (int64_t)v[16], (int64_t)v[17],
                              (int64_t)v[18], (int64_t)v[19], v[20], v[21]};
    *d = (struct des_stats){(int64_t)v[22], (int64_t)v[23], (int64_t)v[24], v[25], v[26], v[27]};
    f->examples = (int64_t)v[0];
    f->iterations = (int64_t)v[1];
    f->syncs = (int64_t)v[2];
    ne = (struct ne_acc){v[3], v[4], (int64_t)v[5]};
    rs->bad_lines = (int64_t)v[6];
    derive(f, &ne);
}

/* The larger of a and b, NaN if either is. */
static double max_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* How far the trainers' dense replicas are apart at the end: the largest
 * |w_t[i] - w_0[i]| over trainers t and parameters i (0: they hold one
 * model; NaN if any is NaN). Collective in a cluster job. */
static double replica_spread(struct job *j)
{
    size_t n = j->n_sync;
    int count = j->env ? j->env->count : j->n_tr;
    double spread = 0;
    if (count < 2)
        return 0;
    float *w0 = j->tr[0].w;
    if (j->env) { /* trainer 0's vector on every trainer: x + 0 + ... + 0 is x */
        w0 = ss_aligned(n * sizeof(float));
        if (j->env->index == 0)
            memcpy(w0, j->tr[0].w, n * sizeof(float));
        else
            memset(w0, 0, n * sizeof(float));
        j->env->sum_floats(j->env->arg, w0, n);
    }
    for (int t = 0; t < j->n_tr; t++)
        for (size_t i = 0; i < n; i++)
            spread = max_nan(spread, fabs((double)j->tr[t].w[i] - w0[i]));
    if (j->env) { /* the largest over the trainers: each sends its own in its slot */
        free(w0);
        double *v = ss_xcalloc(count, sizeof *v);
        v[j->env->index] = spread;
        j->env->sum(j->env->arg, v, count);
        spread = 0;
        for (int t = 0; t < count; t++)
            spread = max_nan(spread, v[t]);
        free(v);
    }
    return spread;
}

static int run(const struct ss_config *c, const struct trainer_env *env, const char *resume,
               struct ss_err *e);

int trainer_run(const struct ss_config *c, const char *resume, struct ss_err *e)
{
    return run(c, NULL, resume, e);
}

int trainer_run_env(const struct ss_config *c, const struct trainer_env *env, struct ss_err *e)
{
    return run(c, env, NULL, e);
}

static int run(const struct ss_config *c, const struct trainer_env *env, const char *resume,
               struct ss_err *e)
{
    struct job j = {0};
    j.c = c;
    j.env = env;
    j.resume = resume;
    j.is_master = !env || env->is_master;
    j.n_tr = env ? 1 : c->job.trainers;
    j.n_wk = c->trainer.worker_threads;
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    pthread_cond_init(&j.resume_cv, NULL);
    struct eval_result ev = NO_EVAL;
    struct figures f = {0};
    struct reader_stats rs = {0};
    float *w = NULL;
    int rc;
    if (!c->data.train || !*c->data.train) {
        rc = ss_fail(e, SS_EINVAL, "config: data.train is empty: give the training data "
                                   "(a file, a directory of shards or a glob)");
        goto out;
    }
    j.sched_on = c->optim.warmup_examples > 0 || c->optim.decay_examples > 0;
    j.sched_times = env && !env->feed ? env->count : 1;
    j.gpu_dev = -1;
    if (env && env->gpu) {
        j.gpu_dev = env->gpu_dev, j.gpu_count = 1;
    } else if (!env && (rc = trainer_device(c, !c->output.quiet, 0, &j.gpu_dev, &j.gpu_count, e)) < 0) {
        goto out;
    }
    if (!env && (int64_t)c->job.trainers * (c->trainer.worker_threads + 1) > SS_MAX_THREADS) {
        rc = ss_fail(e, SS_EINVAL, "config: job.trainers = %d x (trainer.worker_threads = %d + "
                     "a shadow thread) is %lld threads in one process, more than the %d one "
                     "process of shadowsync runs: fewer trainers or workers (a cluster job runs "
                     "each trainer in its own process)", c->job.trainers, c->trainer.worker_threads,
                     (long long)c->job.trainers * (c->trainer.worker_threads + 1), SS_MAX_THREADS);
        goto out;
    }
    if (c->optim.decay_start && !c->optim.decay_examples) {
        rc = ss_fail(e, SS_EINVAL, "config: optim.decay_start = %lld starts a decay that "
                     "optim.decay_examples = 0 leaves out: set how many examples it lasts, or "
                     "optim.decay_start = 0", (long long)c->optim.decay_start);
        goto out;
    }
    if (c->optim.decay_to && !c->optim.decay_examples) {
        rc = ss_fail(e, SS_EINVAL, "config: optim.decay_to = %g is the end of a decay that "
                     "optim.decay_examples = 0 leaves out: set how many examples it lasts, or "
                     "optim.decay_to = 0", c->optim.decay_to);
        goto out;
    }
    if (c->output.eval_every && (!c->data.eval || !*c->data.eval)) {
        rc = ss_fail(e, SS_EINVAL, "config: output.eval_every = %lld scores data.eval while the "
                     "job trains, but data.eval is empty: give the eval data, or set "
                     "output.eval_every = 0", (long long)c->output.eval_every);
        goto out;
    }
    if (c->output.eval_every && c->embedding.placement == EMB_ON_TRAINERS) {
        rc = ss_fail(e, SS_EINVAL, "config: output.eval_every needs the tables on embedding PSs "
                     "(embedding.placement = ps): with them on the trainers (DES) every trainer "
                     "takes part in an eval, which only the end of the run allows; set "
                     "output.eval_every = 0");
        goto out;
    }
    if ((j.is_master && (rc = check_room(c, e)) < 0) || (rc = setup_model(&j, e)) < 0)
        goto out;
    if (c->embedding_cache.rows > 0) { /* (the tables are made: the room is what they left) */
        int64_t rows = emb_cache_rows(c, &j.l), avail = ss_mem_available();
        double need = emb_cache_bytes(c, &j.l) * j.n_tr * j.n_wk;
        if (avail >= 0 && need > (double)avail) {
            rc = ss_fail(e, SS_ENOMEM, "the embedding caches here need %.0f MB (%d worker "
                         "thread(s) x %lld rows of model.dim %d and their deltas), more than "
                         "the %lld MB of memory free here: fewer embedding_cache.rows",
                         need / 1048576, j.n_tr * j.n_wk, (long long)rows, j.l.dim,
                         (long long)(avail >> 20));
            goto out;
        }
    }
    if (env && c->embedding.placement != EMB_ON_TRAINERS &&
        (double)c->trainer.batch_size * j.l.n_tables * j.l.dim * 4 > SS_MAX_FIELD_BYTES) {
        rc = ss_fail(e, SS_EINVAL, "config: trainer.batch_size = %d x %d tables x model.dim = %d "
                     "floats is more than the %u bytes one message between a trainer and an "
                     "embedding PS holds: a smaller trainer.batch_size", c->trainer.batch_size,
                     j.l.n_tables, j.l.dim, SS_MAX_FIELD_BYTES);
        goto out;
    }
    if ((rc = schema_from_config(&j.schema, c, c->data.train, e)) < 0 ||
        (rc = check_schema(&j.schema, &j.l, "data.train", c->data.train, e)) < 0)
        goto out;
    struct schema es; /* the eval data too: else it fails only after the training */
    if (j.is_master && c->data.eval && *c->data.eval &&
        ((rc = schema_from_config(&es, c, c->data.eval, e)) < 0 ||
         (rc = check_schema(&es, &j.l, "data.eval", c->data.eval, e)) < 0))
        goto out;
    if (j.is_master && (rc = open_run_dir(&j, e)) < 0)
        goto out;
    if (!(env && env->feed)) {
        struct ss_err why = {0};
        if ((rc = reader_open(&j.reader, c->data.train, &j.schema, c->data.max_examples,
                              c->data.report_bad_lines, &why)) < 0) {
            rc = ss_fail(e, rc, "data.train: %s (checked before training)", why.msg);
            goto out;
        }
    }
    if (j.reader && (rc = reader_check_passes(j.reader, c->data.epochs, e)) < 0)
        goto out;
    if (j.reader)
        reader_set_epochs(j.reader, c->data.epochs);
    if (env && !env->feed)
        reader_set_share(j.reader, env->index, env->count, c->data.split, NULL);
    if (env && j.is_master && !c->output.quiet)
        reader_split_say(c->data.train, &j.schema, env->feed ? c->job.readers : env->count,
                         env->feed ? "readers" : "trainers", c->data.split);
    if ((resume || (env && env->resume_from)) && (rc = load_checkpoint(&j, e)) < 0)
        goto out;
    if ((rc = setup_hot(&j, e)) < 0)
        goto out;
    if (j.resumed_from[0]) { /* its model's shape and pooling, checked before anything goes */
        float *v = ss_aligned(j.n_sync * sizeof(float));
        rc = resumed_vector(&j, 0, "dense", v, e);
        if (rc == 0)
            rc = resumed_vector(&j, 0, "state", v, e);
        free(v);
        if (rc < 0)
            goto out;
    }
    if (j.is_master) /* the run has started well: the earlier run's files go */
        clear_stale(&j);
    if (j.is_master && (rc = open_csvs(&j, e)) < 0)
        goto out;
    if (j.is_master && c->output.eval_every) {
        j.mid.every = c->output.eval_every;
        j.mid.next = (j.base.examples / j.mid.every + 1) * j.mid.every;
        j.mid.c = *c;
        j.mid.c.data.report_bad_lines = 0; /* named by the first */
    }
    if (c->embedding_cache.rows > 0 && j.is_master && !c->output.quiet) {
        int64_t rows = emb_cache_rows(c, &j.l);
        double each = emb_cache_bytes(c, &j.l);
        printf("# embedding cache: %lld rows per worker thread (%.1f MB each%s), "
               "staleness %d\n", (long long)rows, each / 1048576,
               rows < c->embedding_cache.rows ? ": twice every table's rows, the most that "
               "raises its hits" : "", c->embedding_cache.staleness);
    }
    int copies = (env ? env->count : j.n_tr) * j.n_wk; /* caches that train one row apart */
    if (c->embedding_cache.rows > 0 && c->embedding_cache.staleness > 100 && copies > 1 &&
        j.is_master)
        fprintf(stderr, "shadowsync: warning: embedding_cache.staleness = %d with %d worker "
                "caches: copies that far behind train apart, and their deltas add up at the "
                "PS (in a sweep 1000000 scored an eval NE of 1.85 against 0.96); a few updates "
                "(the default 2) keep them close\n", c->embedding_cache.staleness, copies);
    blas_note(c, &j.l);
    if (!c->output.quiet && j.is_master)
        printf("# training: %d trainer(s) x %d worker(s), sync %s/%s, %zu dense params, "
               "%d tables\n", env ? env->count : j.n_tr, j.n_wk, c->sync.algo,
               c->sync.mode == SYNC_FOREGROUND ? "foreground" : "shadow", j.l.n_params,
               j.l.n_tables);
    if (j.sched_on && !c->output.quiet && j.is_master)
        schedule_note(&j);
    if ((env ? env->count : j.n_tr) == 1 && sync_algo_needs(c->sync.algo) == SYNC_NEEDS_COLLECTIVE &&
        strcmp(c->sync.algo, "bmuf") && !c->output.quiet && j.is_master)
        printf("# sync: %s with 1 trainer averages it with itself, so its rounds change "
               "nothing (job.trainers above 1 to sync; sync.algo = none spares the rounds)\n",
               c->sync.algo);
    int blends = !strcmp(c->sync.algo, "easgd") || !strcmp(c->sync.algo, "ma") ||
                 !strcmp(c->sync.algo, "bmuf");
    if (blends && c->sync.alpha == 0 && !c->output.quiet && j.is_master)
        printf("# sync: sync.alpha = 0 leaves every replica as it is, so the %s rounds change "
               "nothing a trainer trains on (sync.alpha above 0 to sync)\n", c->sync.algo);
    else if (!strcmp(c->sync.algo, "easgd") && c->sync.alpha == 1 && !c->output.quiet &&
             j.is_master)
        printf("# sync: easgd with sync.alpha = 1: the center takes a trainer's vector, then the "
               "trainer the center's, its own: no trainer sees another's (the pull is alpha x "
               "(1 - alpha); 0.5 pulls most)\n");
    if (!c->output.quiet && j.is_master)
        unused_sync_notes(c, env ? env->count : j.n_tr);
    if ((rc = start_trainers(&j, e)) < 0) {
        if (env) /* a cluster job ends here, before a shadow thread's buffers are freed */
            env->fatal(env->arg, e);
        goto out;
    }
    wait_workers(&j);
    wait_other_trainers(&j);
    if (periodic_checkpoints(c) && env && j.is_master)
        env->ckpt_end(env->arg); /* every trainer's data has ended: no more snapshots until
                                  * the final one */
    ss_halt_freeze(); /* the training has ended: a signal from here on stops nothing */
    rc = finish_trainers(&j, e);
    struct ss_err rbe = {0};
    if (read_back(&j, &rbe) < 0 && rc == 0) /* the model and final checkpoint read w */
        rc = rbe.code, *e = rbe;
    collect(&j, &f); /* the training's figures: the final checkpoint's time is not in them */
    int krc = keep_resumed(&j, &f, rc == 0, e);
    if (rc == 0 && (rc = krc) == 0 && j.kept_resumed)
        collect(&j, &f);
    client_figures(&j, &f);
    int none = end_sums(&j, &f); /* no final checkpoint of a job stopped before it trained */
    if (c->checkpoint.dir[0] && env && !j.is_master && !none) /* collective, even after a failure */
        final_checkpoint_part(&j);
    else if (c->checkpoint.dir[0] && !none &&
             (env || (rc == 0 && f.examples > (j.resumed_from[0] ? j.base.examples : 0))))
        checkpoint_now(&j, 1); /* the reader at its end: a resume has nothing left to train
                                * (none when this run trained nothing: the one it resumed is it) */
    if (j.reader)
        reader_stats(j.reader, &rs);
    progress(&j, 1, 1); /* every other trainer's final report is in */
    if (env)
        sum_over_trainers(&j, &f, &rs);
    if (env && env->feed) /* the readers' counts, not a sum: every trainer saw them all */
        rs.bad_lines = feed_bad_lines(env->feed);
    f.spread = replica_spread(&j); /* collective, even after a failure */
    if (rc < 0)
        goto out;
    if (f.examples == 0 && ss_halt_signal()) {
        rc = ss_fail(e, SS_EINVAL, "stopped (%s) before any example was trained: no model "
                     "saved%s", ss_halt_name(), c->checkpoint.dir[0] && !j.resumed_from[0]
                     ? ", no checkpoint taken (run it again without --resume)" : "");
        goto out;
    }
    if (f.examples == 0) { /* the job's sum: every trainer stops here alike (DES serves no eval) */
        rc = ss_fail(e, SS_EINVAL, "no training example was read from data.train = %s (%lld bad "
                     "lines%s): nothing trained, no model saved; check data.format, "
                     "data.separator, data.header (%lld) and the columns (data.*_cols)",
                     c->data.train, (long long)rs.bad_lines,
                     rs.bad_lines && c->data.report_bad_lines ? ", the first ones named above" : "",
                     (long long)c->data.header);
        goto out;
    }
    if ((rc = refuse_nonfinite(&j, e)) < 0)
        goto out;
    w = output_model(&j); /* collective for sync.output = average */
    if (j.des && c->output.save_model) { /* every trainer its shards */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/model", c->output.dir);
        if ((rc = ss_mkdir_p(dir, e)) < 0 || (rc = save_shards(&j, dir, e)) < 0)
            goto out;
    }
    if (!j.is_master) { /* DES: serve the master's eval */
        if (j.des && c->data.eval && *c->data.eval)
            rc = des_eval(&j, w, c->data.eval, NULL, &ev, e);
        goto out;
    }
    if (j.resumed_from[0] && f.examples == j.base.examples && !c->output.quiet &&
        c->data.max_examples > 0 && f.examples >= c->data.max_examples)
        printf("# nothing left to train: %s had trained %lld examples, at or past data.max_examples "
               "= %lld (raise it to train on); the train figures are its\n", j.resumed_from,
               (long long)f.examples, (long long)c->data.max_examples);
    else if (j.resumed_from[0] && f.examples == j.base.examples && !c->output.quiet)
        printf("# nothing left to train: %s had trained on all of data.train (%lld examples); "
               "the train figures are its\n", j.resumed_from, (long long)f.examples);
    char gap[32];
    printf("train: examples %lld  seconds %.2f  eps %.0f  train_ne %.5f  syncs %lld  "
           "sync_gap %s  bad_lines %lld\n", (long long)f.examples, f.elapsed, f.eps,
           f.train_ne, (long long)f.syncs, gap_text(f.sync_gap, 0, gap), (long long)rs.bad_lines);
    fflush(stdout); /* seen before the eval, which may take a while */
    /* both the job's so far: a resumed reader's bad lines go on from its checkpoint's */
    reader_warn_bad_share("data.train", c->data.train, rs.bad_lines, f.examples,
                          c->data.report_bad_lines);
    if (j.hot)
        print_hot(&j, &f.hot);
    if (c->embedding_cache.rows > 0)
        print_cache(&f.cache);
    if (j.des)
        print_des(&f.des);
    mid_eval_end(&j, ss_halt_signal() != 0, f.examples);
    if (c->output.save_model && (rc = save_model(&j, w, e)) < 0) { /* kept if the eval fails */
        if (!env) /* no half-written model passes for one */
            stale_files(c->output.dir, MODEL_FILES, 1);
        if (j.final_ckpt[0]) { /* the way back to the model: the training is not lost */
            struct ss_err why = *e;
            rc = ss_fail(e, rc, "%s; the final checkpoint %s holds the model: once there is "
                         "room, `%s CONFIG ... --resume %s` %s", why.msg, j.final_ckpt,
                         env ? "tools/submit" : "shadowsync train", c->checkpoint.dir,
                         ss_halt_signal() ? "trains on from it (stopped short of the data) and "
                                            "saves the model at its end"
                                          : "saves it (and scores it) without training again");
        }
        goto out;
    }
    if (c->data.eval && *c->data.eval) {
        double t0 = ss_now();
        int threads = j.des ? 1 : eval_threads(); /* DES: a collective, one thread */
        if ((rc = eval_with(&j, c, w, c->data.eval, NULL, NULL, threads, &ev, e)) < 0) {
            /* the training's figures are kept, and where its model is said */
            struct ss_err why = *e, ignored;
            ev = (struct eval_result)NO_EVAL;
            int kept = write_metrics(&j, &f, &ev, &rs, &ignored) == 0;
            char model[4400] = "";
            if (c->output.save_model)
                snprintf(model, sizeof model, "; `shadowsync eval CONFIG --model %s/model` "
                         "scores the model once it is fixed", c->output.dir);
            const char *what = c->output.save_model
                                   ? kept ? "model and figures (metrics.json, no eval) are"
                                          : "model is"
                                   : kept ? "figures (metrics.json, no eval) are" : NULL;
            if (what)
                rc = ss_fail(e, rc, "data.eval: %s; the training's %s kept in %s%s", why.msg,
                             what, c->output.dir, model);
            else
                rc = ss_fail(e, rc, "data.eval: %s", why.msg);
            goto out;
        }
        j.eval_s = ss_now() - t0;
        j.eval_threads = ev.threads; /* fewer where a thread's client could not be made */
        print_eval("eval", &ev);
        if (ev.nan_preds) { /* weights so large that a forward overflows: no usable model */
            if (c->output.save_model && !env)
                stale_files(c->output.dir, MODEL_FILES, 1);
            char ckpt[4500] = "";
            if (j.final_ckpt[0]) { /* a resume goes back to the one before */
                ckpt_remove(j.final_ckpt);
                snprintf(ckpt, sizeof ckpt, "; its final checkpoint %s is removed", j.final_ckpt);
            }
            rc = nan_model(e, c, &ev, !c->output.save_model ? "the training (none saved)"
                                      : env ? "the training (the model saved is not usable)"
                                            : "the training: no model saved", ckpt);
            goto out;
        }
        eval_row(&j, f.examples, f.elapsed, &ev);
        reader_warn_bad_share("data.eval", c->data.eval, ev.bad_lines, ev.examples,
                              c->data.report_bad_lines);
    }
    rc = write_metrics(&j, &f, &ev, &rs, e);
    if (rc == 0 && !c->output.quiet)
        printf("# run directory: %s\n", c->output.dir);
    if (rc == 0 && ss_halt_signal()) {
        fflush(stdout);
        if (c->checkpoint.dir[0] && j.final_ckpt_failed && !j.checkpoints && !j.resumed_from[0])
            rc = ss_fail(e, SS_EIO, "stopped (%s) after %lld examples, but no checkpoint could "
                         "be written (the final one failed, above): no resume can continue "
                         "this run (its model so far: %s/model)", ss_halt_name(),
                         (long long)f.examples, c->output.dir);
        else if (c->checkpoint.dir[0])
            fprintf(stderr, "shadowsync: stopped (%s) after %lld examples: `%s CONFIG ... "
                    "--resume` continues from checkpoint.dir = %s%s\n", ss_halt_name(),
                    (long long)f.examples,
                    rpc_under_mpirun() ? "tools/submit" : "shadowsync train",
                    c->checkpoint.dir, j.final_ckpt_failed ? ", its last good checkpoint (the "
                    "final one failed, above: the training after it is done again)" : "");
        else
            fprintf(stderr, "shadowsync: stopped (%s) after %lld examples; no checkpoint.dir "
                    "was set, so no resume can continue this run (its model so far: %s/model)"
                    "\n", ss_halt_name(), (long long)f.examples, c->output.dir);
    } else if (rc == 0 && j.final_ckpt_failed) { /* never a success with its last one missing */
        rc = ss_fail(e, SS_EIO, "the run's final checkpoint could not be written (above): its "
                     "model is saved in %s/model, but checkpoint.dir = %s %s", c->output.dir,
                     c->checkpoint.dir, j.checkpoints || j.resumed_from[0]
                         ? "holds an earlier one only (a --resume trains again from there)"
                         : "holds none");
    }
    if (rc == 0 && c->data.eval && *c->data.eval && ev.examples == 0) /* the model is kept */
        rc = noeval(e, c->data.eval, "the model is saved, but not scored");
out:
    mid_eval_end(&j, 1, 0);
    free(j.mid.w);
    free(w);
    if (j.csv)
        fclose(j.csv);
    if (j.eval_csv)
        fclose(j.eval_csv);
    free_trainers(&j);
    if (j.reader)
        reader_close(j.reader);
    teardown_model(&j);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    pthread_cond_destroy(&j.resume_cv);
    return rc;
}

/* `eval --predictions PATH`: PATH.part, renamed to PATH once whole (or
 * standard output for "-"); opened before the model loads, so a path that
 * cannot take it fails at once. */
static FILE *open_predictions(const char *path, char *part, size_t cap, struct ss_err *e)
{
    if (!strcmp(path, "-"))
        return stdout;
    snprintf(part, cap, "%s.part", path);
    FILE *f = fopen(part, "w");
    if (!f)
        ss_fail(e, SS_EIO, "--predictions %s: cannot write %s: %s", path, part, strerror(errno));
    return f;
}

static int close_predictions(FILE *f, const char *path, const char *part, int rc, struct ss_err *e)
{
    if (!f || f == stdout)
        return f && fflush(f) != 0 && rc == 0
                   ? ss_fail(e, SS_EIO, "--predictions -: writing them failed: %s", strerror(errno))
                   : rc;
    int bad = ferror(f);
    errno = 0;
    bad |= fclose(f) != 0; /* the buffer's last write: its errno is the cause */
    if (rc == 0 && bad)
        rc = ss_fail(e, SS_EIO, "--predictions %s: writing %s failed%s%s", path, part,
                     errno ? ": " : "", errno ? strerror(errno) : "");
    if (rc == 0 && rename(part, path) != 0)
        rc = ss_fail(e, SS_EIO, "--predictions %s: %s", path, strerror(errno));
    if (rc < 0)
        unlink(part);
    return rc;
}

int trainer_eval_saved(const struct ss_config *c, const char *dir, const char *predictions,
                       struct ss_err *e)
{
    struct job j = {0};
    j.c = c;
    float *w = NULL;
    FILE *pred = NULL, *say = predictions && !strcmp(predictions, "-") ? stderr : stdout;
    j.say = say;
    struct eval_result ev;
    int rc;
    struct stat st;
    int found = stat(dir, &st) == 0, why = errno;
    if (!found || !S_ISDIR(st.st_mode)) {
        rc = ss_fail(e, SS_EINVAL, "--model %s: %s: name a run's directory (or its model/, a "
                     "checkpoint, a checkpoint.dir)", dir,
                     found ? "not a directory" : why == ENOENT ? "no such directory"
                                                           : strerror(why));
        goto out;
    }
    if (!c->data.eval || !*c->data.eval) {
        rc = ss_fail(e, SS_EINVAL, "config: data.eval is empty: nothing to score");
        goto out;
    }
    char part[4200];
    if (predictions && !*predictions) {
        rc = ss_fail(e, SS_EINVAL, "--predictions needs a file name (or - for standard output)");
        goto out;
    }
    if (predictions && strcmp(predictions, "-") &&
        (rc = reader_check_output("--predictions", predictions, "data.eval", c->data.eval, e)) < 0)
        goto out;
    if (predictions && !(pred = open_predictions(predictions, part, sizeof part, e))) {
        rc = SS_EIO;
        goto out;
    }
    /* DIR/dense.bin + DIR/tables*.bin; or a checkpoint (DIR/MANIFEST) or a
     * checkpoint.dir (its newest complete checkpoint): trainer 0's dense
     * vector (with its replica of the hot rows, when hot-rows.bin is there;
     * a model directory has their values in hot.bin) and the tables */
    char src[4400], dense[4500];
    struct ckpt_meta_set m;
    int skipped, is_ckpt;
    struct ss_err ignore;
    snprintf(dense, sizeof dense, "%s/MANIFEST", dir);
    is_ckpt = access(dense, F_OK) == 0;
    if (is_ckpt && (rc = ckpt_verify(dir, &m, e)) < 0) /* checked as a resume checks it */
        goto out;
    if (is_ckpt || ckpt_latest(dir, src, sizeof src, &m, &skipped, &ignore) != 0) {
        if (!is_ckpt && skipped > 0) { /* a checkpoint.dir whose checkpoints are all refused */
            rc = ss_fail(e, SS_EFORMAT, "--model %s: %s", dir, ignore.msg);
            goto out;
        }
        snprintf(src, sizeof src, "%s", dir);
    } else {
        is_ckpt = 1;
    }
    snprintf(dense, sizeof dense, "%s/dense.bin", src);
    if (!is_ckpt && access(dense, F_OK) != 0) { /* a run directory: its model/ */
        snprintf(dense, sizeof dense, "%s/model/dense.bin", dir);
        if (access(dense, F_OK) == 0) {
            snprintf(src, sizeof src, "%s/model", dir);
            fprintf(say, "# model: %s\n", src);
        }
    }
    if (!is_ckpt && access(dense, F_OK) != 0) {
        rc = ss_fail(e, SS_EINVAL, "--model %s: no dense.bin there or in its model/ (a run with "
                     "output.save_model = false saves none; a checkpoint or checkpoint.dir "
                     "scores too)", dir);
        goto out;
    }
    if (is_ckpt)
        fprintf(say, "# model: checkpoint %s\n", src);
    /* the tables' rows as saved, with or without rowwise_adagrad's state
     * float: scoring reads none, so a model of either optim.emb scores */
    struct ss_config cc = *c;
    int saved = embps_saved_stride(src);
    if (saved == c->model.dim || saved == c->model.dim + 1)
        cc.optim.emb = saved == c->model.dim ? OPT_SGD : OPT_ROWWISE_ADAGRAD;
    j.c = c = &cc;
    if ((rc = setup_model(&j, e)) < 0)
        goto out;
    openblas_set_num_threads(1);
    j.n_sync = j.l.n_params;
    snprintf(dense, sizeof dense, "%s/hot-rows.bin", src);
    if (access(dense, F_OK) == 0) {
        if ((rc = hot_load(&j.hot, dense, &j.l, e)) < 0)
            goto out;
        j.n_sync += (size_t)j.hot->n * j.l.dim;
    }
    w = ss_aligned(j.n_sync * sizeof(float));
    size_t np = j.l.n_params;
    snprintf(dense, sizeof dense, "%s/%s", src, is_ckpt ? "dense-0.bin" : "dense.bin");
    if ((rc = dense_load(w, is_ckpt ? j.n_sync : np, &j.l, dense, e)) < 0 ||
        (rc = embps_load_dir(j.tables, src, e)) < 0)
        goto out;
    if (is_ckpt && c->sync.output == OUT_AVERAGE) { /* the model the run would output, */
        int k = 1;                                   /* summed as output_model does */
        for (;; k++) {
            snprintf(dense, sizeof dense, "%s/dense-%d.bin", src, k);
            if (access(dense, F_OK) != 0)
                break;
        }
        float *one = ss_aligned(j.n_sync * sizeof(float));
        for (size_t i = 0; i < j.n_sync; i++)
            one[i] = w[i], w[i] = 0;
        for (int t = 0; rc == 0 && t < k; t++) {
            snprintf(dense, sizeof dense, "%s/dense-%d.bin", src, t);
            if (t == 0 || (rc = dense_load(one, j.n_sync, &j.l, dense, e)) == 0)
                mean_add(w, one, j.n_sync, k);
        }
        free(one);
        if (rc < 0)
            goto out;
        fprintf(say, "# model: the mean of its %d trainer%s dense vector%s (sync.output = "
                "average)\n", k, k > 1 ? "s'" : "'s", k > 1 ? "s" : "");
    }
    snprintf(dense, sizeof dense, "%s/hot.bin", src);
    if (j.hot && !is_ckpt && (rc = dense_load(w + np, j.n_sync - np, &j.l, dense, e)) < 0)
        goto out;
    if ((rc = eval_with(&j, c, w, c->data.eval, pred, NULL, eval_threads(), &ev, e)) < 0)
        goto out;
    if ((rc = close_predictions(pred, predictions, part, 0, e)) < 0) {
        pred = NULL;
        goto out;
    }
    pred = NULL;
    if (predictions)
        fprintf(say, "# predictions: %lld examples scored into %s\n", (long long)ev.examples,
                strcmp(predictions, "-") ? predictions : "standard output");
    if (!ev.labeled) {
        fprintf(say, "{\"eval_examples\": %lld}\n", (long long)ev.examples);
        if (ev.examples == 0)
            rc = noeval(e, c->data.eval, "nothing is scored");
        goto out;
    }
    print_eval_to(say, "eval", &ev);
    reader_warn_bad_share("data.eval", c->data.eval, ev.bad_lines, ev.examples,
                          c->data.report_bad_lines);
    char v[4][32]; /* JSON: null where a figure is undefined (eval data of one class) */
    const double x[4] = {ev.ne, ev.logloss, ev.auc, ev.calibration};
    for (int i = 0; i < 4; i++)
        snprintf(v[i], sizeof v[i], isfinite(x[i]) ? "%.6f" : "null", x[i]);
    fprintf(say, "{\"eval_examples\": %lld, \"eval_ne\": %s, \"eval_logloss\": %s, "
            "\"eval_auc\": %s, \"eval_calibration\": %s, \"eval_bad_lines\": %lld}\n",
            (long long)ev.examples, v[0], v[1], v[2], v[3], (long long)ev.bad_lines);
    if (ev.nan_preds)
        rc = nan_model(e, c, &ev, "its training", "");
    else if (ev.examples == 0)
        rc = noeval(e, c->data.eval, "nothing is scored");
out:
    if (pred)
        close_predictions(pred, predictions, part, rc, e);
    free(w);
    teardown_model(&j);
    return rc;
}
