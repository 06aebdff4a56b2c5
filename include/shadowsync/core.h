/* shadowsync core: errors, config, the batch, the DLRM model, optimizers
 * and metrics (DESIGN §1, §3, §5, §7).
 *
 * The model owns nothing global: parameters live in one flat float buffer
 * (struct model_layout says where each layer sits), optimizer state in a
 * second buffer of the same layout; scratch for one batch is a struct
 * model_scratch sized once per worker. Functions that can fail return 0 or a
 * negative SS_E* code and fill a struct ss_err naming what is at fault.
 * Below every other module, it also holds what they share of a cluster
 * job's MPI world: how a rank waits on the others and ends the job. */
#ifndef SHADOWSYNC_CORE_H
#define SHADOWSYNC_CORE_H

#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define SS_VERSION "0.1.0"

/* ---- errors ---------------------------------------------------------- */
enum { SS_OK = 0, SS_EINVAL = -1, SS_EIO = -2, SS_ENOMEM = -3, SS_EFORMAT = -4, SS_ESTATE = -5,
       SS_ESTOPPED = -6 /* a write given up on a stop (ss_file_call) */ };

struct ss_err {
    int code;
    char msg[1024];
};

/* Fills e (when non-NULL) and returns code. A message longer than e->msg
 * keeps its head and its tail, cut in the middle (" ... "): the reason
 * after a long path survives. */
int ss_fail(struct ss_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Its body, inline for code that links nothing of ours (the GPU library). */
static inline int ss_vfail(struct ss_err *e, int code, const char *fmt, va_list ap)
{
    if (!e)
        return code;
    char all[16384];
    int n = vsnprintf(all, sizeof all, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof all ? (size_t)n : sizeof all - 1;
    size_t cap = sizeof e->msg, head = cap / 4, from = len - (cap - head - 6);
    all[len] = '\0';
    if (len < cap) {
        memcpy(e->msg, all, len + 1);
    } else {
        while (head > 0 && ((unsigned char)all[head] & 0xC0) == 0x80) /* whole UTF-8 chars */
            head--;
        while (((unsigned char)all[from] & 0xC0) == 0x80)
            from++;
        memcpy(e->msg, all, head);
        memcpy(e->msg + head, " ... ", 5);
        memcpy(e->msg + head + 5, all + from, len - from + 1);
    }
    e->code = code;
    return code;
}
void *ss_xmalloc(size_t n);            /* aborts on OOM: memory for sizes we chose */
void *ss_xcalloc(size_t n, size_t sz);
void *ss_xrealloc(void *p, size_t n);
/* A buffer kept between calls: p itself while it holds n items of size
 * bytes, else a new one of 1.5 n (p freed, its contents dropped; *cap set). */
void *ss_grown(void *p, size_t *cap, size_t n, size_t size);
/* The CLOCK_REALTIME time `seconds` from now, for pthread_cond_timedwait
 * on a condition variable of default attributes. */
struct timespec ss_deadline(double seconds);
void *ss_aligned(size_t n);            /* 64-byte aligned, zeroed; free() it */
void *ss_pages(size_t n);              /* whole pages of their own, zeroed (to page-lock) */
void *ss_alloc_big(size_t n);          /* NULL on failure; not zeroed; huge pages; free() it */
int64_t ss_mem_available(void);        /* bytes free for this process (cgroup too); -1: unknown */
double ss_host_cores(void);            /* cores this process may use: affinity, cgroup CPU quotas */
double ss_now(void);                   /* monotonic seconds */
int ss_cpu_has_avx512(void);           /* F, BW, DQ and VL: what OpenBLAS's SkylakeX kernel needs */
/* A graceful stop: after ss_halt_on_signals(all), SIGUSR1 (and with all,
 * SIGINT and SIGTERM) only marks the process halted, and a second SIGINT
 * or SIGTERM ends it at once; the trainers poll ss_halt_signal (the first
 * signal, -1 when a peer's stop was passed on by ss_halt_request, 0 none)
 * and end their training as if the data had ended. The signals are
 * blocked in the threads the process makes and taken by a thread of their
 * own (sigwait), so none interrupts a call on a socket with a timeout,
 * which Linux does not restart (an RPC would fail with EINTR):
 * ss_halt_block, before any thread starts (MPI_Init's included), blocks
 * SIGUSR1 (held until ss_halt_on_signals takes it); ss_halt_on_signals
 * blocks the rest in the calling thread and starts the taker.
 * ss_halt_freeze, once the training has ended, fixes what ss_halt_signal
 * says from then on: a signal after it stops nothing (a second SIGINT or
 * SIGTERM still ends the process at once). */
void ss_halt_block(void);
void ss_halt_on_signals(int all);
void ss_halt_freeze(void);
int ss_halt_signal(void);
void ss_halt_request(void);
const char *ss_halt_name(void);  /* "SIGTERM", ...; NULL when not halted */
/* The first signal taken, also after ss_halt_freeze (-1: a peer's stop, 0:
 * none): a wait with no end of its own (a pipe with no writer) ends on it. */
int ss_halt_raised(void);
const char *ss_halt_sig_name(int sig); /* ss_halt_raised's value in words */
void ss_halt_quiet(void);        /* a job's other processes: the late signal's note is the
                                  * master's alone */
uint64_t ss_splitmix(uint64_t *state); /* deterministic PRNG */
/* A key's bits all mixed into every bit of the result (splitmix64's
 * finalizer): a table id in a key's high bits moves its low ones too. */
static inline uint64_t ss_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* 64-bit FNV-1a of n bytes, chained from h (SS_FNV_BASIS to start). */
#define SS_FNV_BASIS 0xCBF29CE484222325ull
static inline uint64_t ss_fnv1a(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001B3ull;
    return h;
}
double ss_uniform(uint64_t *state);    /* in [0,1) */
double ss_normal(uint64_t *state);
/* Part p of parts over n items: [*lo, *hi), sizes differing by at most 1
 * (the sync PSs' slices of the EASGD center, which the shadow thread's
 * client and the sync PSs both cut). */
void ss_partition(size_t n, int parts, int p, size_t *lo, size_t *hi);
/* "1gbit", "100mbit", ... or "off" into bytes/s (INFINITY); -1: not a rate. */
int ss_parse_rate(const char *s, double *bytes_s);
int ss_mkdir_p(const char *dir, struct ss_err *e); /* mkdir -p, naming the part that fails */
/* One run at a time on dir (key names it: "output.dir"): an exclusive lock
 * on dir/name, held until the process ends; taken again by this process,
 * it passes. Fails naming key when another process holds it. */
int ss_dir_lock(const char *key, const char *dir, const char *name, struct ss_err *e);
void ss_log(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* stderr, with a prefix */

/* ---- file calls a stop can give up (src/core/io.c) --------------------
 * fn(arg) runs on the io's thread while ss_io_call waits; once a signal
 * has come (ss_halt_raised; or ss_io_end) and the call has made no progress for
 * give_up_s (since it began or its last ss_io_step, which fn calls on
 * the io's thread), it is given up: SS_IO_STOPPED, and the io is stuck
 * (arg is the call's from then on: never free it). A call without
 * progress for SS_IO_NOTE_S is named once on stderr (file). */
#define SS_IO_NOTE_S 3.0
#define SS_IO_POLL_MS 200 /* how soon a wait sees a signal */
enum { SS_IO_STOPPED = 3 };
struct ss_io {
    pthread_t th;
    int started, quit, writes;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int (*fn)(void *); /* the call under way, NULL when none */
    void *arg;
    int rc;
    double give_up_s, step_at; /* the call's last progress (ss_now) */
    int stuck;                 /* a call was given up: the thread keeps what it points at */
    double stuck_s;            /* how long it had made no progress then */
};
void ss_io_init(struct ss_io *io, int writes, double give_up_s); /* writes: its notes' words */
int ss_io_call(struct ss_io *io, int (*fn)(void *), void *arg, const char *file);
void ss_io_step(void);
/* After it, a call is given up as after a signal: a service's save still
 * under way when the job has ended (nobody waits for it). */
void ss_io_end(void);
const char *ss_io_stop_name(void); /* what stopped them: "SIGTERM", "the job's end" */
int ss_io_close(struct ss_io *io); /* 1 when stuck (the io itself is then left alone) */
/* The process's writes of its state (checkpoints, the model) run on one
 * io, a call at a time. ss_file_call runs fn on a copy of job (size
 * bytes), copied back after; a stop gives up a call without progress for
 * 1 s, and the ones after it for a path on the same mount fail at once:
 * SS_ESTOPPED, e naming path.
 * ss_write_file writes path whole from its spans, 4 MiB a step, and
 * (sync) fsyncs it (a given-up call keeps its copy of the spans: their
 * bytes it only hands to write(2)); owned (or NULL), a buffer of the
 * caller's that the spans point into, is freed once the call is done, or
 * left to the call a stop gave up. */
struct ss_span {
    const void *p;
    size_t n;
};
int ss_file_call(int (*fn)(void *job, struct ss_err *e), void *job, size_t size,
                 const char *path, struct ss_err *e);
int ss_write_file(const char *path, const struct ss_span *parts, int n, int sync, void *owned,
                  struct ss_err *e);
/* *f's buffered lines written (fflush), or (close) *f closed, on the same
 * writer (path names it); *f is NULL after a close, or once a stop gave
 * it up (the stream is the stuck call's). 0 or a negative code. */
int ss_file_flush(FILE **f, const char *path, int close);
int ss_file_mkdir_p(const char *dir, struct ss_err *e); /* ss_mkdir_p on the writer */

/* ---- the cluster job's waits and aborts (DESIGN §2; src/core/waits.c) --
 * How a rank of a cluster job waits on the others and ends the job when
 * one has stalled: rpc's start and heartbeat, shadow's collectives, the
 * trainers' checkpoints and the GPU library's NCCL sums all wait this way,
 * so it lives below them all. The inline ones serve the GPU library, which
 * links nothing of ours. */
/* How long a trainer of a cluster job waits on the other trainers
 * (sync.timeout_s), and the names its message gives when one has stalled:
 * stopped, hung or swapped out without exiting, so nothing tells Open MPI,
 * and every later collective of the job would wait on it too. */
struct peer_wait {
    double timeout_s;           /* 0: for ever */
    char me[128];               /* "trainer 0 (rank 0 on node7)" */
    char others[160];           /* whom a collective waits on: with 2 trainers the other's
                                 * name, else "one of the other N trainers" */
    const int *patient;         /* while *patient (atomic) no deadline runs; it starts
                                 * when that clears (NULL: never patient) */
};
/* Ends the whole job (MPI_Abort) after this rank's message on stderr, with
 * a moment first for mpirun to forward that line: an abort that overtakes
 * it can lose it (Open MPI 4.1.4 now and then hangs in an abort's
 * shutdown, tools/mpiguard.py). */
static inline void job_abort_pause(void)
{
    fflush(stderr);
    const struct timespec moment = {0, 300000000};
    nanosleep(&moment, NULL);
}
static inline void job_abort(void)
{
    job_abort_pause();
    MPI_Abort(MPI_COMM_WORLD, 1);
}
/* The whole job ends (job_abort) after "shadowsync: ME: WHAT has waited
 * T s (sync.timeout_s) for WHO, which has stalled ...". */
static inline void peer_stalled(const struct peer_wait *pw, const char *what, const char *who)
{
    fprintf(stderr, "shadowsync: %s: %s has waited %g s (sync.timeout_s) for %s, which has "
            "stalled (stopped, hung or swapped out, it takes no part)%s; ending the job\n", pw->me,
            what, pw->timeout_s, who,
            pw->timeout_s < 1 ? ", or sync.timeout_s is shorter than a healthy round can take "
                                "(its default is 600 s)" : "");
    job_abort();
}
/* Completes req by polling MPI_Test: spins tests first (a DES round is
 * short), then sleeps 50 us between them; a blocked MPI_Wait spins at
 * 100 % CPU in Open MPI 4.1 and would steal a worker's core (TOOLCHAIN.md).
 * Past pw->timeout_s, peer_stalled(pw, what, who). */
int peer_wait_req(MPI_Request *req, int spins, const struct peer_wait *pw, const char *what,
                  const char *who, struct ss_err *e);
/* A deadline on a blocking call that has none of its own (NCCL's start,
 * MPI_Finalize): past timeout_s a thread of its own prints "shadowsync:
 * MSG" and ends the job as job_abort does, unless the call returned during
 * the pause (MPI_Abort may not follow MPI_Finalize). timeout_s <= 0: no
 * guard (NULL). Disarm it when the call returns (NULL is fine). */
struct stall_guard;
struct stall_guard *stall_guard_arm(double timeout_s, const char *msg);
void stall_guard_disarm(struct stall_guard *g);
/* hold: g's deadline stops (a step as long as the data, e.g. model.rows =
 * auto's pass); release: it starts again, the whole timeout_s from now. */
void stall_guard_hold(struct stall_guard *g, int hold);

/* Hogwild by design (DESIGN §3): code that reads and writes the shared
 * parameters without locks. ThreadSanitizer builds do not watch its
 * accesses: suppressing each of its races instead (tests/tsan.supp) made a
 * TSan run ~100x slower, as TSan looks every racy address up in one locked
 * list. Such code copies with ss_copy, not memcpy, whose interceptor would
 * still watch. */
#if defined(__SANITIZE_THREAD__)
#define SS_HOGWILD __attribute__((no_sanitize("thread")))
#else
#define SS_HOGWILD
#endif
SS_HOGWILD static inline void ss_copy(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
}

/* ---- config (DESIGN §7) ---------------------------------------------- */
#define SS_MAX_TABLES 1024
#define SS_MAX_DIM 1024 /* model.dim's most */
#define SS_MAX_LAYERS 16
#define SS_MAX_COLS 4096

enum data_format { FMT_AUTO, FMT_CRITEO, FMT_CSV, FMT_BINARY, FMT_LIBSVM };
enum cat_encoding { CAT_HEX, CAT_DEC, CAT_HASH };
enum opt_kind { OPT_SGD, OPT_ADAGRAD, OPT_ROWWISE_ADAGRAD };
/* optim.schedule: auto fits a decay to the job's size where none is set */
enum sched_kind { SCHED_AUTO, SCHED_MANUAL };
enum sync_mode { SYNC_SHADOW, SYNC_FOREGROUND };
enum sync_output { OUT_TRAINER0, OUT_AVERAGE };
enum device_kind { DEV_CPU, DEV_CUDA, DEV_AUTO };
enum dense_backend { DENSE_AUTO, DENSE_ONEDNN, DENSE_OPENBLAS }; /* trainer.dense_backend */
enum precision { PREC_FP32, PREC_BF16 };                /* trainer.precision */
enum emb_placement { EMB_ON_PS, EMB_ON_TRAINERS }; /* embedding.placement */
enum wire_form { WIRE_FP32, WIRE_FP16, WIRE_BF16 }; /* embedding.wire */
enum pooling { POOL_SUM, POOL_MEAN };                /* model.pooling */
enum data_split { SPLIT_AUTO, SPLIT_LINES, SPLIT_FILES }; /* data.split */

struct ss_config {
    struct {
        int trainers, embedding_ps, sync_ps, readers;
        int64_t seed;
        char *bind;
        char *interface;
        char *link_rate;
        double rpc_timeout_s;
    } job;
    struct {
        char *train, *eval;
        int format;                  /* enum data_format */
        char *separator;             /* one character, "\t" by default */
        int header;                  /* lines to skip at the top of each text file */
        int label_col;               /* 0-based column numbers */
        char *dense_cols, *cat_cols, *multihot_cols; /* lists "1-13,15" */
        char *multihot_sep;
        char *fields;                /* libsvm: each field's index range, "1-13,14-5000" */
        int cat_encoding;            /* enum cat_encoding */
        int report_bad_lines;        /* first N bad lines printed as file:line: reason */
        int64_t max_examples;        /* 0 = all */
        int epochs;                  /* passes over data.train */
        int split;                   /* enum data_split */
        int collision_check_batches; /* batches of data.train checked at start (0: none) */
        double collision_warn;       /* shared share of a table that the check warns of */
    } data;
    struct {
        char *rows;                  /* numbers, or auto (sized from data.train at start) */
        int dim;
        char *bottom, *top;
        int pooling;
        double rows_budget_mb;       /* the auto tables' memory, at most */
        int64_t rows_auto_examples;  /* examples of data.train that size them (0: all) */
    } model;
    struct {
        int dense, emb;              /* enum opt_kind */
        double dense_lr, emb_lr, eps, init_acc;
        int schedule;                /* enum sched_kind */
        double auto_decay_share;     /* of the job's examples, under SCHED_AUTO */
        int64_t warmup_examples, decay_start, decay_examples; /* the rates' schedule */
        double decay_to;
        int64_t auto_examples;       /* not a key: the job's examples optim.schedule = auto
                                      * fitted the decay to (0: none) */
    } optim;
    struct { int worker_threads, batch_size, device, dense_backend, precision; } trainer;
    struct {
        char *algo;
        int mode;                    /* enum sync_mode */
        int gap;
        double alpha, bmuf_momentum, bmuf_lr;
        int bmuf_nesterov;
        int output;                  /* enum sync_output */
        double shadow_sleep_ms;
        double shadow_cpu_share;
        double link_share;
        double timeout_s;            /* a cluster job's wait on the other trainers; 0: none */
    } sync;
    struct { char *strategy; int profile_batches; char *pin; } placement;
    struct { int placement, wire; } embedding; /* enum emb_placement, enum wire_form */
    struct { int64_t memory_mb; } embedding_ps;
    struct { double memory_mb; int min_lookups, profile_batches; } hot_embeddings;
    struct { int rows, staleness; } embedding_cache;
    struct { char *dir; double interval_s; } checkpoint;
    struct {
        char *dir;
        double log_interval_s;
        int64_t eval_every;          /* training examples between evals of data.eval; 0: at the end */
        int save_model, quiet;
        int plot;                    /* plot.png at the end (gnuplot) */
    } output;
    struct ss_origins *origins;      /* where each key was set (ss_config_origin); owned */
};

/* Loads path (NULL = all defaults), then applies the overrides "section.key=value". */
int ss_config_load(struct ss_config *c, const char *path, char **overrides, int n_overrides,
                   struct ss_err *e);
void ss_config_free(struct ss_config *c);
/* 0 when name ("section.key") is a config key, else fails naming it (and
 * the nearest known key). */
int ss_config_key_known(const char *name, struct ss_err *e);
/* Where key ("section.key") got its value: "PATH:LINE" in the config file,
 * "--set section.key=value" (its last --set), or NULL (a default, or a
 * config that ss_config_load did not make). */
const char *ss_config_origin(const struct ss_config *c, const char *key);
/* Where key was set, as an error names it: "config t.ini:4" (its line in
 * the file), "config (--set a.b=1)", or "config" (a default). */
void ss_config_where(const struct ss_config *c, const char *key, char *out, size_t cap);
/* A check across keys refuses c: fills e with "WHERE: MSG", WHERE as
 * ss_config_where gives it for the first of keys (names separated by
 * blanks or commas), as a single key's error names its file:line or --set;
 * each other key set somewhere follows MSG ("; optim.decay_examples is set
 * at t.ini:9", "...is set by --set a.b=1"). Returns SS_EINVAL. */
int ss_config_fail(struct ss_err *e, const struct ss_config *c, const char *keys, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));
void ss_config_print(const struct ss_config *c, FILE *f);   /* resolved, as INI */
void ss_config_print_reference(FILE *f);                    /* every key, default, doc */
int ss_config_save(const struct ss_config *c, const char *path, struct ss_err *e);

/* Parses "13-512-256" into dims; returns the count or a negative code. */
int ss_parse_dims(const char *s, int *dims, int max, struct ss_err *e, const char *key);
/* model.rows: a positive count or auto, or a comma list of them; model.top:
 * widths, or "auto-" and widths (its input width computed). */
int ss_check_rows(const char *rows, struct ss_err *e);
int ss_check_top(const char *top, struct ss_err *e);
/* Parses "1-13,20" into 0-based column indices. */
int ss_parse_cols(const char *s, int *cols, int max, struct ss_err *e, const char *key);
/* The same, a column also by its name in names[n_names] (a file's header);
 * names NULL: each name is SS_COL_NAMED, to be resolved once the header is
 * read; n_names < 0: no names (ss_parse_cols). */
#define SS_COL_NAMED (-2)
int ss_parse_named_cols(const char *s, int *cols, int max, char *const *names, int n_names,
                        struct ss_err *e, const char *key);

/* ---- batch (DESIGN §5) ----------------------------------------------- */
/* Example-major: example i's dense features at dense[i*n_dense], the bag of
 * table t at ids[off[i*n_tables+t] .. off[i*n_tables+t+1]). Ids are raw
 * (token values); the model maps them to rows with id mod rows_t. */
struct batch {
    int n, cap;                 /* examples held, capacity */
    int n_dense, n_tables;
    size_t id_cap;
    float *label;               /* [cap] */
    float *dense;               /* [cap*n_dense], raw values (transformed by the model) */
    int32_t *off;               /* [cap*n_tables+1] */
    uint64_t *ids;              /* [id_cap] */
    float *wts;                 /* [id_cap], each id's weight in its bag; read only when
                                 * weighted (libsvm values other than 1), else every id
                                 * weighs 1 (NULL until a weight is first set) */
    int weighted;
    uint64_t *example_id;       /* [cap]: (source file index << 40) | record index */
    float lr_scale;             /* the factor on the learning rates of the steps this batch
                                 * makes (optim_lr_scale); batch_init sets 1 */
    int64_t at;                 /* its place in the data: the examples handed out before it by
                                 * its reader (a trainer's: its share's; through reader
                                 * services: all of theirs), a resumed run's included; -1 not
                                 * known */
};

void batch_init(struct batch *b, int cap, int n_dense, int n_tables);
void batch_reserve_ids(struct batch *b, size_t need);
void batch_clear(struct batch *b);
/* Weights for ids [0, at) of b, each 1 (the ids before the first weight
 * that is not 1), and b->weighted set. */
void batch_weigh(struct batch *b, size_t at);
/* dst's weighting as src's, for a part of src built id by id
 * (batch_put_id). */
static inline void batch_weigh_like(struct batch *dst, const struct batch *src)
{
    dst->weighted = 0;
    if (src->weighted)
        batch_weigh(dst, 0);
}
/* Id q of src as id at of dst (dst weighed like src). */
static inline void batch_put_id(struct batch *dst, size_t at, const struct batch *src, size_t q)
{
    dst->ids[at] = src->ids[q];
    if (dst->weighted)
        dst->wts[at] = src->wts[q];
}
/* Id q's weight in its bag. */
static inline float batch_wt(const struct batch *b, size_t q)
{
    return b->weighted ? b->wts[q] : 1.0f;
}
void batch_free(struct batch *b);

/* ---- model (DESIGN §1) ----------------------------------------------- */
struct model_layout {
    int n_dense, n_tables, dim;
    int n_bot, n_top;                        /* layer counts */
    int bot[SS_MAX_LAYERS + 1], top[SS_MAX_LAYERS + 1]; /* widths, input first */
    size_t bot_w[SS_MAX_LAYERS], bot_b[SS_MAX_LAYERS]; /* offsets in the flat buffer */
    size_t top_w[SS_MAX_LAYERS], top_b[SS_MAX_LAYERS];
    size_t n_params;
    int64_t *rows;                           /* [n_tables] */
    int pooling;                             /* enum pooling */
    int backend, precision;                  /* resolved: DENSE_ONEDNN or DENSE_OPENBLAS; enum precision */
};

/* model.rows per table into rows[SS_MAX_TABLES] (one number for all: as
 * many tables as data.cat_cols), MODEL_ROWS_AUTO where it says auto;
 * returns the table count or a negative code. */
#define MODEL_ROWS_AUTO (-1)
int model_rows_parse(const struct ss_config *c, int64_t *rows, struct ss_err *e);
/* model.rows holds auto: a run resolves it to numbers at start
 * (trainer_rows_auto) before anything reads the layout. */
int model_rows_auto(const struct ss_config *c);
/* From the config; checks bottom ends at dim, top starts at dim + (T+1)T/2.
 * model.rows must be numbers (auto resolved). */
int model_layout_init(struct model_layout *l, const struct ss_config *c, struct ss_err *e);
void model_layout_free(struct model_layout *l);
/* The widest activation of a layer stack (input or any layer's output). */
static inline int model_widest(const struct model_layout *l)
{
    int w = l->n_dense;
    for (int i = 0; i <= l->n_bot; i++)
        w = l->bot[i] > w ? l->bot[i] : w;
    for (int i = 0; i <= l->n_top; i++)
        w = l->top[i] > w ? l->top[i] : w;
    return w;
}
/* Xavier-normal weights like the peer; deterministic from seed. */
void model_init_params(const struct model_layout *l, float *params, uint64_t seed);

/* The dense compute seam (src/core/dense.c): every MLP matmul of a worker,
 * through oneDNN (fp32 or bf16 with fp32 accumulation) or OpenBLAS. Layer k
 * counts the bottom layers first, then the top ones. A struct dense belongs
 * to the thread that made it (its oneDNN primitives run on that thread
 * alone); weights are row-major [out x in] fp32, the master copy. */
struct dense;
struct dense *dense_create(const struct model_layout *l, int cap);
void dense_free(struct dense *d);
/* y[n x out] = x[n x in] W^T + b, then ReLU when relu. */
void dense_fwd(struct dense *d, int k, const float *x, const float *w, const float *b, float *y,
               int n, int relu);
/* Given dy [n x out]: dx = dy W (W as the forward saw it) when dx != NULL,
 * then tw <- beta*tw + alpha*dy^T x and tb <- beta*tb + alpha*colsum(dy);
 * beta is 0 or 1. */
void dense_bwd(struct dense *d, int k, const float *x, const float *w, const float *dy,
               float *tw, float *tb, float *dx, int n, float alpha, float beta);
/* "oneDNN brg:avx512_core, fp32" or "OpenBLAS SkylakeX, fp32": what the
 * layers ran on (after a first batch: oneDNN names its kernels then). */
const char *dense_describe(const struct dense *d, char *buf, size_t len);
/* The backend and precision the config asks for, resolved against this
 * build and CPU (auto: oneDNN where built in); fails naming the key and
 * what is missing (bf16 on a CPU without AVX512_BF16, say). */
int dense_resolve(const struct ss_config *c, int *backend, int *precision, struct ss_err *e);
/* Round-to-nearest-even fp32 -> bf16, and back. */
void ss_to_bf16(uint16_t *dst, const float *src, size_t n);
void ss_from_bf16(float *dst, const uint16_t *src, size_t n);

/* Per-worker activations and gradients for batches of up to cap examples. */
struct model_scratch {
    int cap;
    float *x0;                        /* transformed dense input [cap*n_dense] */
    float *bot_act[SS_MAX_LAYERS];    /* outputs of each bottom layer */
    float *emb;                       /* pooled embeddings [cap*T*dim] */
    float *top_in;                    /* [cap*top[0]] */
    float *top_act[SS_MAX_LAYERS];
    float *logit, *prob;              /* [cap] */
    float *d_a, *d_b;                 /* ping-pong gradient buffers, widest layer */
    float *d_top_in;
    float *d_emb;                     /* gradient of the pooled embeddings [cap*T*dim] */
    float *d_bot_out;
    float *vt;                        /* one example's vectors transposed [dim x V rounded to 16] */
    float *sym;                       /* one example's pair gradients as a matrix [V x V] */
    float *grad;                      /* dense gradient, flat [n_params] */
    struct dense *mm;                 /* this worker's matmuls (src/core/dense.c) */
};

void model_scratch_init(struct model_scratch *s, const struct model_layout *l, int cap);
void model_scratch_free(struct model_scratch *s);

/* Forward from the pooled embeddings already in s->emb; fills s->prob.
 * Returns the mean BCE loss of the batch. */
double model_forward(const struct model_layout *l, const float *params, const struct batch *b,
                     struct model_scratch *s);
/* Backward of the mean loss: s->grad (dense) and s->d_emb (pooled embeddings). */
void model_backward(const struct model_layout *l, const float *params, const struct batch *b,
                    struct model_scratch *s);
/* The same backward with the dense SGD step fused in: params -= lr * grad,
 * layer by layer as the gradient is made (no gradient buffer pass).
 * s->d_emb is filled as by model_backward. */
void model_backward_sgd(const struct model_layout *l, float *params, const struct batch *b,
                        struct model_scratch *s, float lr);
/* model.pooling = mean on one batch's [n*T*dim] vectors: each bag's divided by
 * its length. The embedding clients pool sums, so the caller applies it to
 * the pooled vectors before the forward and, as the chain rule asks, to
 * their gradients before the push (each row of a bag then gets 1/len of the
 * bag's gradient). Nothing for sum pooling. */
void model_pool_scale(const struct model_layout *l, const struct batch *b, float *v);

/* ---- optimizers (DESIGN §1) ------------------------------------------ */
/* Dense step over the flat vector: w -= lr*g (SGD) or Adagrad with state. */
void optim_dense_step(int kind, float *w, float *state, const float *g, size_t n, float lr,
                      float eps);
/* The factor on both learning rates after the job's first `examples`
 * examples (optim.warmup_examples, decay_start, decay_examples, decay_to):
 * 1 without a schedule, in [0, 1]. */
double optim_lr_scale(const struct ss_config *c, int64_t examples);
/* One embedding row update; state is the row's accumulator (row-wise Adagrad). */
void optim_row_step(int kind, float *row, float *state, const float *g, int dim, float lr,
                    float eps);

/* ---- metrics (DESIGN §3) --------------------------------------------- */
struct ne_acc {                 /* running logloss and CTR for NE */
    double loss_sum, label_sum;
    int64_t n;
};
void ne_add(struct ne_acc *a, const float *prob, const float *label, int n);
void ne_merge(struct ne_acc *into, const struct ne_acc *from);
double ne_logloss(const struct ne_acc *a);
double ne_value(const struct ne_acc *a); /* logloss / H(ctr); NAN when undefined */
double metric_bce(double p, double y);   /* clipped at 1e-7 like the peer */
/* AUC with ties given half credit; O(n log n); NAN if one class is absent. */
double metric_auc(const float *prob, const float *label, int64_t n);

#endif
