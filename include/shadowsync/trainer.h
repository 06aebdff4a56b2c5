/* shadowsync trainer: worker threads, the batch loop, the trainer's
 * clients, and the run as a whole (DESIGN §3, §7), on top of every other
 * module: it starts the run as main asks (launch.c: the embedded default,
 * or each rank's role of the cluster job) after its checks (precheck.c).
 *
 * Workers see embeddings only through an emb_client (lookup/push): an
 * in-process one over struct emb_tables (the embedded default), a Thrift
 * one to the embedding PSs (the cluster job), a DES one over the trainers,
 * and the hot rows' and the cache's over another. */
#ifndef SHADOWSYNC_TRAINER_H
#define SHADOWSYNC_TRAINER_H

#include "ckpt.h"
#include "core.h"
#include "embps.h"
#include "shadow.h"

struct emb_client;
struct emb_client_ops {
    const char *name;
    /* Pooled bags of b into out[n*T*dim]. */
    int (*lookup)(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e);
    /* Gradients of the pooled bags, same layout; applied on the tables' side.
     * A push of the batch just looked up may reuse what the lookup sent:
     * the batch must not change between the two. */
    int (*push)(struct emb_client *c, const struct batch *b, const float *grad, struct ss_err *e);
    void (*free)(struct emb_client *c);
    /* Row access for a cache (embps_rows over the tables; NULL: none). */
    int (*rows)(struct emb_client *c, const struct row_req *r, struct ss_err *e);
    /* Sends on whatever the client holds back (a cache's updates); a worker
     * calls it before a checkpoint and at its end. NULL: nothing held. */
    int (*flush)(struct emb_client *c, struct ss_err *e);
};
struct emb_client {
    const struct emb_client_ops *ops;
    void *impl;
};
struct emb_client *emb_client_local(struct emb_tables *t);

/* Hot embeddings (emb_hot.c, DESIGN §9): a trainer's replica of the hot
 * rows, slot i at rows[i*dim] with its row-wise Adagrad state at acc[i]. */
struct hot_replica {
    const struct hot_set *set;
    float *rows, *acc;
    int opt;                    /* the embedding optimizer, as the tables' */
    float lr, eps;
};
/* What a worker's hot client saw (summed by the trainer once they end). */
struct hot_stats {
    int64_t batches, ps_skipped, examples, hot_examples, lookups, hot_lookups;
    double bytes_saved;         /* wire bytes not sent (the Thrift format's sizes) */
};
void hot_stats_add(struct hot_stats *to, const struct hot_stats *from);
/* A worker's client that serves the hot rows from r and the rest through
 * inner (freed with it when own_inner); cap: the examples a batch usually
 * holds (a larger batch grows its buffers). st: NULL counts nothing. */
struct emb_client *emb_client_hot(struct emb_client *inner, int own_inner,
                                  const struct hot_replica *r, int cap, struct hot_stats *st);
/* rows[slot*dim] <- the tables' row of each hot slot, looked up through emb. */
int hot_replica_fill(struct emb_client *emb, const struct hot_set *s, float *rows,
                     struct ss_err *e);

/* The embedding cache (emb_cache.c, DESIGN §9, after HET): a worker's own
 * cache of embedding_cache.rows rows over inner (which must have rows),
 * read and updated locally; a row is fetched again once it is more than
 * embedding_cache.staleness updates behind the tables, and its updates go
 * back as one delta once it is that many ahead (at once with staleness 0
 * or 1), when it leaves the cache, and at a flush. */
struct cache_stats {
    int64_t lookups;            /* ids looked up */
    int64_t hits;               /* ...served by a cached copy recent enough */
    int64_t fetched, refreshed; /* rows brought in; cached copies fetched again */
    int64_t uncached;           /* ids the cache had no room for in their batch */
    int64_t rows_pushed;        /* deltas sent */
    double bytes_plain, bytes_sent; /* wire bytes without the cache, and with it */
};
void cache_stats_add(struct cache_stats *to, const struct cache_stats *from);
/* The rows a worker's cache holds: embedding_cache.rows, at most twice
 * every table's rows together (more would not raise its hits), and its
 * bytes. */
int64_t emb_cache_rows(const struct ss_config *c, const struct model_layout *l);
double emb_cache_bytes(const struct ss_config *c, const struct model_layout *l);
/* NULL when inner cannot serve rows. cap as emb_client_hot's. */
struct emb_client *emb_client_cache(struct emb_client *inner, int own_inner,
                                    const struct ss_config *c, const struct model_layout *l,
                                    int cap, struct cache_stats *st);

/* ---- DES (emb_des.c; DESIGN §9 "equivalent substitution") -------------
 * embedding.placement = trainers: the tables' shards live on the trainers
 * (a placement plan over them). Worker w of every trainer forms group w;
 * each step its members pool, for the whole group's batches, the bags of
 * the shards they hold and send back the partial sums, all-to-all (struct
 * exchange, shadow.h), then the gradients travel the same way: synchronous
 * within the group. */

/* What a worker's DES client did (summed once the workers have ended). */
struct des_stats {
    int64_t rounds, lookups, pushes; /* all-to-all rounds; of them, its lookups and pushes */
    double bytes_sent;          /* ids, partial sums and gradients sent to the other trainers */
    double bytes_rows;          /* what fetching the rows would have sent instead: each id,
                                 * its row, then the id and the row's update */
    double wait_s;              /* seconds inside the exchange */
};
void des_stats_add(struct des_stats *to, const struct des_stats *from);
/* What a member does for its trainer between rounds. A checkpoint: it
 * reports its trainer's pause flag in every round; at the first round in
 * which every member's flag is up and none has a batch, each member calls
 * wait(arg), which returns once its trainer goes on (so a cluster job's
 * master asks the others before it pauses). Foreground sync: after every
 * sync_every-th round each member calls sync(arg) (its trainer's round of
 * sync.algo), so no member waits on a sync while another waits on it (the
 * caller gives sync to one group only, so each trainer's shadow thread
 * runs one round per ask, paired with the others'). */
struct des_hooks {
    const int *flag;            /* its trainer's pause flag (atomic; NULL: never) */
    void (*wait)(void *arg);
    void *arg;
    int (*sync)(void *arg, struct ss_err *e); /* NULL: none */
    int sync_every;
};
/* Member x->rank of a group over plan pl (its n_ps = x->size); mine: the
 * tables of that member's shards, in the plan's order (NULL when it holds
 * none; shared by the trainer's workers, Hogwild). Takes x. */
struct emb_client *emb_client_des(struct exchange *x, const struct placement *pl, int dim,
                                  struct emb_tables *mine, const struct des_hooks *hooks,
                                  struct des_stats *st);
/* Before a worker reads a batch from a reader of its own (not a queue that
 * drains): once its trainer's flag is up, serves the others until the
 * group pauses, and waits the checkpoint out (see des_hooks). */
int emb_des_gate(struct emb_client *c, struct ss_err *e);
/* A round without a batch of this member's (its queue drained for a
 * checkpoint); pauses with the group once every member's has. */
int emb_des_idle(struct emb_client *c, struct ss_err *e);
/* This member's data has ended: serves the others until theirs has too. */
int emb_des_finish(struct emb_client *c, struct ss_err *e);

/* An embedding PS as a trainer's client sees it: where it listens. */
struct emb_endpoint {
    const char *name;           /* for errors, e.g. "embedding_ps 1 (rank 3 on node7)" */
    const char *host;
    int port;
};
/* The Thrift emb_client over the pl->n_ps PSs of a placement plan: one
 * connection per PS that holds a shard, one request per PS per batch (all
 * its shards), sent to every PS before any answer is read; the vectors in
 * wire's form (enum wire_form, embedding.wire). Not thread-safe: one
 * client per worker thread. Fails naming the PS. */
int emb_client_thrift(struct emb_client **out, const struct placement *pl, int dim, int wire,
                      const struct emb_endpoint *ps, const char *token, int timeout_ms,
                      struct ss_err *e);

/* The trainer's bounded prefetch queue over the reader services (feed.c):
 * one thread pulls batches from every reader in turn while the workers
 * train, so they wait on I/O only when the readers cannot keep up. */
struct reader_endpoint {
    const char *name, *host;
    int port;
};
struct batch_feed;
/* state: a checkpoint's feed-K.pos (feed_save) to go on from, when there is
 * one for as many readers (NULL: from the first reader). */
int feed_start(struct batch_feed **out, const struct reader_endpoint *readers, int n_readers,
               const char *token, int batch_size, int depth, int timeout_ms, const char *state,
               struct ss_err *e);
/* This trainer's pull order and counts into path (a checkpoint's part),
 * while paused. */
int feed_save(struct batch_feed *f, const char *path, struct ss_err *e);
/* Thread-safe: the next batch into b (b->n = 0 at the end of every share).
 * While paused with nothing queued and no pull in flight it returns
 * FEED_PAUSED (b->n = 0), until the pause ends: the worker then waits for
 * the checkpoint's end (pause = 0 comes first). */
#define FEED_PAUSED 1
int feed_next(struct batch_feed *f, struct batch *b, struct ss_err *e);
/* Checkpoints: pause = 1 stops pulling (returns 0 once no pull is under
 * way, its batch queued); the workers drain the queue, then get
 * FEED_PAUSED. A pull still under way after wait_s fails it, naming the
 * reader (the pause stays on: pause = 0 ends it). pause = 0 goes on. */
int feed_pause(struct batch_feed *f, int pause, double wait_s, struct ss_err *e);
/* A worker failed: no more pulls, and a pulled batch waiting for room in the
 * queue is dropped (nobody may drain it), so no pause waits on it. */
void feed_stop(struct batch_feed *f);
/* A graceful stop: no more pulls; once the queue (and a pull in flight) is
 * drained, feed_next returns an end (b->n = 0) as if the readers had ended. */
void feed_halt(struct batch_feed *f);
/* The bad lines the readers have reported skipping (all of them once the
 * feed has ended: every reader's last answer reaches every trainer). */
int64_t feed_bad_lines(struct batch_feed *f);
/* How far through their data the reader services are: the least of what
 * each said last (0 before it has answered, 1 once it has ended). */
double feed_fraction(struct batch_feed *f);
void feed_free(struct batch_feed *f);

struct eval_result {
    int64_t examples;
    double logloss, ne, auc, ctr, mean_p, calibration; /* calibration = mean_p / ctr */
    int labeled;                /* 0: unlabeled data, only scored (the figures NAN) */
    int threads;                /* the threads that scored it */
    int64_t bad_lines;          /* lines of the data that were no examples (skipped) */
    int64_t nan_preds;          /* predictions that were NaN: a diverged model */
};

/* Scores every example of path with the model (forward only), on threads
 * threads (the calling one and threads - 1 more), thread t looking up
 * through emb[t] (one client may be given several times where it takes
 * concurrent calls). predictions (or NULL: the figures alone) gets a line
 * per data line past the headers, in their order: the example's
 * probability, or empty where the line was bad or blank. Data without labels
 * (data.label_col = -1) needs predictions; its figures are NAN. cancel (or
 * NULL) is read before each batch: once set, the eval ends there and
 * returns 1 (its figures unset). */
int trainer_eval(const struct model_layout *l, const float *params, struct emb_client *const *emb,
                 int threads, const struct ss_config *c, const char *path, FILE *predictions,
                 const int *cancel, struct eval_result *r, struct ss_err *e);

/* `shadowsync train`: the embedded default, job.trainers trainers in this
 * process, each with worker_threads Hogwild workers and a shadow thread;
 * checkpoints to checkpoint.dir every checkpoint.interval_s and at the end;
 * resume (a checkpoint directory, or NULL) continues from its newest
 * complete checkpoint. */
int trainer_run(const struct ss_config *c, const char *resume, struct ss_err *e);
/* The memory checks a job makes before training, for `shadowsync check`:
 * the embedded default's dense part and tables in the memory free here;
 * a cluster job's tables within embedding_ps.memory_mb (a plan of no data:
 * its hosts' memory is theirs to check). */
int trainer_check_memory(const struct ss_config *c, const struct model_layout *l,
                         struct ss_err *e);

/* One trainer rank of a cluster job: how it reaches the rest of the job. */
enum { BEAT_FIGS = 13, BEAT_CLOCK = 12 }; /* the figures of trainer_env.beat; its clock */

struct trainer_env {
    int index, count;           /* this trainer among count: its share of the data */
    int is_master;              /* writes the progress lines and the run directory */
    int gpu, gpu_dev;           /* the dense half on CUDA device gpu_dev; gpu 0: the CPU */
    /* What it trains through. */
    struct collective *coll;    /* ma, bmuf, allreduce: the trainers' all-reduce */
    struct center *center;      /* easgd: the center on the sync PSs */
    struct batch_feed *feed;    /* the reader services; NULL: read a share of data.train */
    /* A new emb_client to the embedding PSs (one per worker; the job's own
     * and the eval's with exact: fp32 on the wire whatever embedding.wire
     * says, so an eval and the hot rows' first values are the tables'). */
    int (*make_emb)(void *arg, int exact, struct emb_client **out, struct ss_err *e);
    /* embedding.placement = trainers: the plan over the trainers, and a new
     * member of DES group g (collective over the trainers: every trainer
     * makes the same groups in the same order). */
    struct {
        const struct placement *plan;
        int (*make_exchange)(void *arg, struct exchange **out, struct ss_err *e);
    } des;
    struct {
        const struct hot_set *set; /* the job's hot embedding rows (hot_for_job; NULL: none) */
        int from_ckpt;          /* ...taken from the checkpoint resumed from */
    } hot;
    /* The other trainers: every call below takes arg. */
    void *arg;
    /* In place, over the trainers: v[i] <- sum of v[i]. */
    void (*sum)(void *arg, double *v, int n);
    void (*sum_floats)(void *arg, float *v, size_t n);
    /* The trainers' progress: v[BEAT_FIGS] = this trainer's examples,
     * iterations, syncs, NE sums (loss, labels, count), whether it was
     * stopped, its reader's place (reader_fraction) times its share's
     * size, this run's examples a second while its data lasts, this run's
     * examples once it has ended, whether those two are known yet, and its
     * share's size (bytes; 0: no reader), and (v[BEAT_CLOCK], not summed)
     * this run's seconds on it in, the sums over every trainer's latest out
     * (sent every output.log_interval_s; final: this trainer's data has
     * ended, and it sends no more); each (NULL: not asked): [count]
     * [BEAT_FIGS], every trainer's latest as it came (zeros before any).
     * Returns 1 once every other trainer's data has ended. One that stays
     * silent past sync.timeout_s ends the job, naming it. NULL: one process. */
    int (*beat)(void *arg, double *v, int final, double *each);
    /* Prints "shadowsync: trainer K (rank R on HOST): e->msg" and ends the
     * whole job (MPI_Abort); does not return. */
    void (*fatal)(void *arg, const struct ss_err *e);
    const char *resume_from;    /* the checkpoint every rank resumes from (NULL: none) */
    /* Checkpoints of a cluster job (cluster.c). The master, at a tick:
     * ask the other trainers to snapshot into tmp, snapshot itself, wait
     * for them (their figures summed into fig[8], the worst rc returned),
     * have services save their parts, commit, then release them; end when
     * it takes no more. The others poll often: 1 = snapshot into tmp then
     * done (which waits for the release), 2 = the master has ended its
     * checkpoints. The final checkpoint is collective: final(tmp, fig, rc)
     * broadcasts the master's tmp, sums the figures onto the master and
     * returns the worst rc on every trainer; final_done once the master
     * has committed. */
    struct {
        void (*ask)(void *arg, const char *tmp);
        int (*wait)(void *arg, double *fig);
        int (*services)(void *arg, const char *tmp, struct ss_err *e);
        void (*release)(void *arg);
        void (*end)(void *arg);
        int (*poll)(void *arg, char *tmp, size_t cap);
        void (*done)(void *arg, int rc, const double *fig);
        int (*final)(void *arg, char *tmp, size_t cap, double *fig, int rc);
        void (*final_done)(void *arg);
    } ckpt;
    /* The model's tables (the master, while the services serve): each
     * embedding PS writes dir/tables-psK.bin, a failure names it. NULL:
     * the trainers hold the tables. */
    int (*save_tables)(void *arg, const char *dir, struct ss_err *e);
    /* Out, at the end (NULL: not asked): this run's examples of this
     * trainer and the rates' clock at its last batch (0: no schedule). */
    double *figures;
};
/* trainer.device resolved on this process: *dev = the first device its
 * trainers use (local: this process's index among the trainer processes
 * of its node, which spreads them over the node's devices), -1 for the
 * CPU; *count = the devices seen. cuda without a usable device fails
 * naming why; auto falls back to the CPU, saying so when verbose. */
int trainer_device(const struct ss_config *c, int verbose, int local, int *dev, int *count,
                   struct ss_err *e);
int trainer_run_env(const struct ss_config *c, const struct trainer_env *env, struct ss_err *e);
/* A trainer rank of a cluster job (cluster.c). */
struct job_plan;
int trainer_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e);
/* `shadowsync eval CONFIG --model DIR [--predictions PATH]` (PATH "-":
 * standard output, the figures then on standard error). */
int trainer_eval_saved(const struct ss_config *c, const char *model_dir,
                       const char *predictions, struct ss_err *e);

/* ---- the run as main starts it (launch.c, precheck.c, plan.c) ---------- */

/* A training stopped by a signal (SIGINT, SIGTERM, SIGUSR1) that ended as
 * at the end of its data: EX_TEMPFAIL, for "resume it later". */
#define SS_EXIT_HALTED 75
/* `shadowsync train` of c (loaded), resuming from the checkpoints of
 * resume (a directory; NULL: none): the embedded default, or under mpirun
 * this rank's part of the cluster job. Returns the process's exit status:
 * 0, 1 once its error is on stderr (a cluster job's: the master's alone),
 * or SS_EXIT_HALTED. Under mpirun c changes: checkpoint.dir made absolute,
 * output.quiet on every rank but the master. */
int trainer_launch(struct ss_config *c, const char *resume);
/* Before any training, embedded or cluster (on the master): a run that does
 * not resume takes no earlier run's checkpoint.dir, which it locks, and
 * data.eval can be scored; output.dir is locked. */
int trainer_prerun_checks(const struct ss_config *c, const char *resume, struct ss_err *e);
/* The embedded default's own: its trainers' threads fit in one process. */
int trainer_embedded_checks(const struct ss_config *c, struct ss_err *e);
/* A cluster job's own: the roles its config needs (embedding PSs, or the
 * tables on the trainers; sync PSs for easgd's center), and a batch's
 * pooled embeddings within one message to the embedding PSs. */
int trainer_cluster_checks(const struct ss_config *c, struct ss_err *e);
/* Collective: the master's checks (under resume the newest complete
 * checkpoint into p->resume_from, then trainer_prerun_checks, then
 * model.rows = auto resolved into every rank's c), every rank learning
 * the outcome: a failure fails every rank with its message. */
int trainer_master_checks(struct job_plan *p, struct ss_config *c, const char *resume,
                          struct ss_err *e);
/* Collective: every rank runs the same resolved config (data.train aside:
 * each host may name its own path to the same files); one that differs (a
 * stale copy of the file on its host, another --set) would otherwise show
 * up later as a healthy rank named stalled. Fails naming the odd ranks. */
int trainer_same_config(struct job_plan *p, const struct ss_config *c, struct ss_err *e);
/* model.rows = auto (rows_auto.c), resolved to numbers before anything
 * reads the model's layout: the rows of the tables saved in `saved` (a
 * model or a checkpoint directory: eval, a resume), else sized from
 * data.train (reader_rows_auto) and said on say (NULL: nothing said).
 * *rows: the resolved model.rows, g_free it (NULL: c holds no auto). */
int trainer_rows_auto(const struct ss_config *c, const char *saved, FILE *say, char **rows,
                      struct ss_err *e);
/* trainer_rows_auto into c->model.rows itself. */
int trainer_resolve_rows(struct ss_config *c, const char *saved, FILE *say, struct ss_err *e);
/* optim.schedule = auto (sched_auto.c): where no decay is set, one over
 * the job's last optim.auto_decay_share, into c's optim.decay_* keys:
 * fitted to the size resumed was (a resume's checkpoint figures, or
 * NULL), else to data.train's examples (reader_count_examples); said on
 * say. Nothing where the size is unknown (a stream: said why). */
struct ckpt_meta_set;
int trainer_resolve_schedule(struct ss_config *c, const struct ckpt_meta_set *resumed, FILE *say,
                             struct ss_err *e);
/* `shadowsync check`: the model's widths and the memory checks a job makes
 * before training, then "trainers T embedding_ps E sync_ps S readers R"
 * to out. */
int trainer_check(const struct ss_config *c, FILE *out, struct ss_err *e);
/* `shadowsync plan`: the tables' plan of the config's strategy and the
 * figures of all three, the hot rows, the sync PSs' slices, to out (and the
 * plan to output.dir's placement.txt and placement.json). */
struct plan_sync_opts {
    const char *trainers;       /* --trainers "1,2,4,8" or "5-64" (NULL: no sync side) */
    const char *from;           /* --from RUN_DIR: a trainer's EPS and a round's latency */
    const char *link;           /* --link: every host's rate as tc writes it (NULL: unshaped) */
    const char *sync_link;      /* --sync-link: the sync PSs' hosts' (NULL: as --link) */
    double trainer_eps;         /* --trainer-eps (> 0: given, over --from's) */
    double trainer_cpu;         /* --trainer-cpu: cores of a trainer host (0: a core a thread) */
    const char *png;            /* --out FILE.png: drawn by gnuplot */
};
int trainer_plan(const struct ss_config *c, const struct plan_sync_opts *o, FILE *out,
                 struct ss_err *e);
/* The sync side (plan_sync.c): for o->trainers, each sync PS's load, the
 * shadow's sync gap, foreground sync's EPS and the sync PSs it needs,
 * from the costs of a center of n_center floats. */
int trainer_plan_sync(const struct ss_config *c, const struct plan_sync_opts *o, size_t n_center,
                      FILE *out, struct ss_err *e);
/* Its model, for N trainers and S sync PSs (tests/test_plan.c). */
struct sync_costs {
    int easgd;                  /* else an all-reduce among the trainers (ma, bmuf) */
    int foreground, gap;        /* foreground: a round every gap iterations of each worker */
    int sync_ps, workers;
    double bytes;               /* a round's center bytes each way, all sync PSs together */
    double svc_s_per_byte;      /* a sync PS's CPU per byte of its slice */
    double local_s;             /* the trainer's own CPU in a round, on a core of its own */
    double cpu;                 /* cores of a trainer host (0: workers + 1) */
    double share;               /* sync.shadow_cpu_share: the shadow's CPU where it is paced */
    double stretch;             /* shadow: how much longer local_s takes beside the workers
                                 * (0: (workers + 1) / cpu, at least 1) */
    double fixed_s;             /* a round's latency past its bytes and CPU */
    double trainer_eps, batch;  /* one trainer alone */
    double sleep_s;             /* sync.shadow_sleep_ms */
    double link_t, link_s;      /* bytes/s of a trainer's and a sync PS's link (INFINITY: unshaped) */
    double pace;                /* sync.link_share: a shadow round's connections each send at
                                 * most pace x link_t (0: unpaced) */
};
struct sync_point {
    int trainers, sync_ps;
    double round_s, job_syncs_s; /* a round's time, the job's rounds a second */
    double ps_bytes_s;          /* each sync PS's bytes a second, each way */
    double gap, eps, linear;    /* iterations a sync, the job's EPS, N x one trainer's */
};
void plan_sync_point(const struct sync_costs *k, int N, int S, struct sync_point *p);
/* The fewest sync PSs (<= 64) at which N trainers reach share x linear;
 * 0: none does. */
int plan_sync_needs(const struct sync_costs *k, int N, double share);

/* ---- pictures and tuning sweeps (plot.c, sweep.c) --------------------- */

/* `shadowsync plot`: the curves of the run directories dirs[0..n) in one
 * PNG (png), drawn by gnuplot, its script beside it (FILE.gp). Fails
 * naming the package to install where gnuplot is missing, and a directory
 * without progress.csv. */
int trainer_plot(const char *const *dirs, int n, const char *png, struct ss_err *e);
/* output.plot: c's run directory's own picture, plot.png; a failure (no
 * gnuplot) is a warning on stderr, never the run's. */
void trainer_plot_own(const struct ss_config *c);

struct sweep_opts {
    const char *config;         /* CONFIG, and the --set every run takes */
    char **sets;
    int n_sets;
    char **vary;                /* "section.key=v1,v2,...", the first the slowest to change */
    int n_vary;
    int repeat;                 /* runs per setting, job.seed + 0, 1, ... */
    const char *out;            /* the sweep's directory */
    int retry_failed;           /* runs that failed in an earlier sweep run again */
};
/* `shadowsync sweep`: every setting's runs, each through `shadowsync
 * train` (or tools/submit where the config asks for a cluster job's
 * roles) into a run directory of its own under o->out, then the table
 * (results.csv, results.md) and the picture (sweep.png). Runs finished
 * by an earlier sweep into o->out are kept. Returns the exit status: 0,
 * 1 (its error on stderr) or SS_EXIT_HALTED when stopped by a signal. */
int trainer_sweep(const struct sweep_opts *o);

#endif
