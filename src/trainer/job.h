/* The run of a trainer process, shared by its rooms (private to
 * src/trainer/): job.c the run's phases and waits, step.c the worker,
 * setup.c buffers, clients and threads, snapshot.c checkpoints and the
 * saved model, eval_run.c evaluations, report.c figures and files. */
#ifndef SS_TRAINER_JOB_H
#define SS_TRAINER_JOB_H

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
    struct gpu_worker *gpu;     /* freed in job_free_trainers, after the shadow thread's final
                                 * round: a cudaFree waits for the whole device, an NCCL
                                 * sum in flight included, which waits on the peers */
    int rc;
    struct ss_err err;
};

struct job;

/* A mid-run eval (output.eval_every; job_mid_eval_poll). */
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
    int model_lost;             /* a stop gave up the model's save (a hung file system) */
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
    double shadow_cpu;   /* each shadow thread's CPU seconds a second (0: unpaced) */
    double eval_s;       /* the end-of-run eval's seconds, and its threads */
    int eval_threads;
    char dense_desc[200];       /* what ran the MLPs' matmuls (a CPU worker's, under mu) */
    FILE *csv, *eval_csv;
    FILE *tr_csv;               /* trainers.csv (NULL: one trainer) */
    double *tr_each;            /* a cluster job's: [count][BEAT_FIGS], the reports (beat) */
    double *tr_seen;            /* [count] the run's seconds of each trainer's last row */
    int64_t eval_last_at;       /* eval.csv's last row: its examples, and where it starts */
    off_t eval_last_off;
};

struct figures {
    double elapsed, eps, train_ne, train_logloss, syncs_per_s, sync_gap;
    double spread;              /* replica_spread at the end */
    struct hot_stats hot;       /* the hot clients' figures at the end */
    struct cache_stats cache;   /* the embedding caches' */
    struct des_stats des;       /* the DES clients' */
    int64_t examples, iterations, syncs;
    struct ne_acc ne;
};

/* The run directory exists and is writable before any training starts. */
/* An eval_result of no eval: its figures not known (NaN). */
enum { MODEL_FILES = 4 }; /* the first of report.c's run_end_files: the model's */

#define NO_EVAL {0, NAN, NAN, NAN, NAN, NAN, NAN, 0, 0, 0, 0}

/* eval_run.c: evaluations */
int job_noeval(struct ss_err *e, const char *path, const char *so);
/* What an eval looks up through: a run's clients, or the eval command's
 * own tables. */
struct eval_src {
    const struct model_layout *l;
    struct emb_client *emb;         /* in process: takes concurrent calls */
    const struct trainer_env *env;  /* a cluster job: a client of its own per further thread
                                     * (make_emb), DES's exchange (NULL: one process) */
    const struct hot_set *hot;      /* hot rows: their values in w after the dense part */
    const struct placement *des;    /* DES: the plan (NULL: off), and this process's */
    struct emb_tables *const *shards; /* trainers' shards, n_tr of them */
    int n_tr, is_master;
};
int job_des_eval(const struct eval_src *s, const struct ss_config *c, const float *w,
                 const char *path, FILE *pred, struct eval_result *ev, struct ss_err *e);
struct eval_src job_eval_src(const struct job *j);
void job_mid_eval_poll(struct job *j, int64_t examples);
void job_mid_eval_end(struct job *j, int cancel, int64_t examples);
int job_final_eval(struct job *j, const struct figures *f, const struct reader_stats *rs,
                   const float *w, struct eval_result *ev, struct ss_err *e);

/* report.c: figures, lines and files */
void job_collect(struct job *j, struct figures *f);
int job_progress(struct job *j, int final, int print);
void job_close_csvs(struct job *j); /* the report files written and closed (job_free) */
double job_stale_files(const char *dir, int n, int remove);
int job_open_run_dir(struct job *j, struct ss_err *e);
void job_clear_stale(struct job *j);
int job_open_csvs(struct job *j, struct ss_err *e);
void job_client_figures(struct job *j, struct figures *f);
int job_write_metrics(struct job *j, const struct figures *f, const struct eval_result *ev,
                      const struct reader_stats *rs, struct ss_err *e);
void job_print_eval_to(FILE *f, const char *what, const struct eval_result *ev);
void job_print_eval(const char *what, const struct eval_result *ev);
void job_eval_row(struct job *j, int64_t at, double elapsed, const struct eval_result *ev);
void job_sum_over_trainers(struct job *j, struct figures *f, struct reader_stats *rs);
double job_replica_spread(struct job *j);
void job_start_notes(struct job *j);
void job_end_notes(struct job *j, const struct figures *f, const struct reader_stats *rs);
int job_stop_message(struct job *j, const struct figures *f, struct ss_err *e);

/* setup.c */
int job_check_room(const struct ss_config *c, struct ss_err *e);
int job_dense_room(const struct ss_config *c, const struct model_layout *l, int n_tr,
                   int n_wk, struct ss_err *e);
int job_local_tables(const struct ss_config *c, const struct model_layout *l, FILE *say,
                     struct emb_tables **out, struct ss_err *e);
int job_setup_model(struct job *j, struct ss_err *e);
int job_setup_hot(struct job *j, struct ss_err *e);
void job_teardown_model(struct job *j);
int job_check_schema(const struct schema *s, const struct model_layout *l, const char *key,
                     const char *path, struct ss_err *e);
int job_model_of(struct job *j, struct trainer *tr, float *w, float *state, struct ss_err *e);
int job_read_back(struct job *j, struct ss_err *e);
struct hot_replica job_replica_of(struct job *j, struct trainer *tr);
int job_resumed_vector(struct job *j, int t, const char *what, float *v, struct ss_err *e);
int job_start_trainers(struct job *j, struct ss_err *e);
void job_free_trainers(struct job *j);

/* snapshot.c: checkpoints and the saved model */
void job_mean_add(float *w, const float *v, size_t n, int count);
float *job_output_model(struct job *j);
int job_save_model(struct job *j, const float *w, struct ss_err *e);
void job_checkpoint_now(struct job *j, int final);
int job_serve_checkpoints(struct job *j);
void job_final_checkpoint_part(struct job *j);
int job_load_checkpoint(struct job *j, struct ss_err *e);
int job_save_des_shards(struct job *j, struct ss_err *e);

/* step.c: the worker */
void job_des_wait(void *arg);
int job_des_sync(void *arg, struct ss_err *e);
void *job_worker_main(void *arg);

#endif
