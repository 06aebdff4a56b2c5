/* shadowsync embedding PS: the embedding tables and their optimizer
 * (DESIGN §1, §3). Each table holds rows of dim floats with the row's
 * optimizer state beside it (row-wise Adagrad: one float). Lookups return
 * bags already sum-pooled; pushes take the gradient of the pooled outputs
 * and update the rows Hogwild-style, without locks. The same tables serve
 * the embedded default (in-process) and the embedding PS role of a cluster
 * job over Thrift (service.c, role.c), placed on the PSs by a plan
 * (placement.c); the hot rows every trainer replicates are found here too
 * (hot.c). */
#ifndef SHADOWSYNC_EMBPS_H
#define SHADOWSYNC_EMBPS_H

#include "core.h"

struct emb_tables;

struct emb_opts {
    int n_tables, dim;          /* tables held: whole tables, or shards of them */
    const int64_t *rows;        /* [n_tables] rows held */
    int opt;                    /* OPT_SGD or OPT_ROWWISE_ADAGRAD */
    float lr, eps, init_acc;
    uint64_t seed;              /* rows start uniform in +-sqrt(1/rows), like the peer */
    const int32_t *global_ids;  /* [n_tables] job-wide table ids (NULL: 0..n-1) */
    const int64_t *table_rows;  /* [n_tables] rows of the whole table (NULL: = rows) */
    const int64_t *row_lo;      /* [n_tables] the first row held (NULL: 0) */
    int clocks;                 /* keep each row's clock (embedding_cache.rows > 0) */
};
/* A row's initial values depend on the seed, its table's global id and its
 * row number only, so any placement or split of the tables on PSs starts
 * from the same model. An id maps to row id mod table_rows; a shard holds
 * rows [row_lo, row_lo + rows) and is only asked for those (the service
 * checks; the in-process tables are whole). */

/* The optimizer and seed of the config for n whole tables of rows[]. */
struct emb_opts emb_opts_from_config(const struct ss_config *c, int n, int dim,
                                     const int64_t *rows);
int embps_create(struct emb_tables **out, const struct emb_opts *o, struct ss_err *e);
/* Tables of need bytes (rows of dim floats and their state) fit in the
 * memory free here (embps_create's check; `shadowsync check` too). */
int embps_check_room(double need, int dim, struct ss_err *e);
void embps_free(struct emb_tables *t);
size_t embps_bytes(const struct emb_tables *t);

/* out[i*T*dim + t*dim ..] = sum of the rows of example i's bag in table t. */
void embps_pool(struct emb_tables *t, const struct batch *b, float *out);
/* Applies d_pooled (same layout as embps_pool's out) to every row of each bag. */
void embps_push(struct emb_tables *t, const struct batch *b, const float *d_pooled);
/* The wire's layout (service.c): only the non-empty bags, one after another. */
void embps_pool_bags(struct emb_tables *t, const struct batch *b, float *out);
void embps_push_bags(struct emb_tables *t, const struct batch *b, const float *d_pooled);
size_t embps_bags(const struct batch *b); /* the non-empty bags of b */

/* The dim values row `row` of table gid (of table_rows rows) starts from. */
void embps_initial_row(const struct emb_opts *o, int32_t gid, int64_t row, int64_t table_rows,
                       float *out);
/* Row row (< the table's rows, held here) of table k: dim floats, then its
 * optimizer state when it has one. */
float *embps_row(struct emb_tables *t, int k, uint64_t row);

/* ---- rows for a trainer's embedding cache (DESIGN §9 "HET") -------------
 * With emb_opts.clocks each row has a clock: the updates applied to it (one
 * per bag it is pushed in, count per delta added). A cache asks for rows
 * with the clock of the copy it holds (ROW_NONE: none) and gets each row's
 * clock back, and the row itself (stride floats: dim, then the optimizer
 * state) when row_sent: it holds none, or its copy is more than bound
 * updates behind. It sends back what it did to a row as a delta (added to
 * the row and its state) with the number of updates the delta holds. */
#define ROW_NONE UINT32_MAX
static inline int row_sent(uint32_t have, uint32_t clock, uint32_t bound)
{
    return have == ROW_NONE || (uint32_t)(clock - have) > bound;
}
struct row_req {
    int stride;                 /* floats per row: dim (+1 with row-wise Adagrad) */
    size_t n_add;               /* deltas, applied first */
    const int32_t *add_table;   /* [n_add] a table of the tables asked */
    const uint64_t *add_row;    /* [n_add] rows (id mod table rows) */
    const float *add_delta;     /* [n_add * stride] */
    const uint32_t *add_count;  /* [n_add] */
    size_t n_get;               /* rows asked */
    const int32_t *get_table;   /* [n_get] */
    const uint64_t *get_row;    /* [n_get] */
    const uint32_t *get_have;   /* [n_get] the clock of the asker's copy, or ROW_NONE */
    uint32_t bound;             /* embedding_cache.staleness */
    uint32_t *clock;            /* out [n_get] */
    float *val;                 /* out: the rows sent, in order, stride floats each */
};
/* Applies r's deltas then answers its rows (table k: the k-th held); returns
 * the rows sent. Lock-free, as pushes. Needs emb_opts.clocks. */
size_t embps_rows(struct emb_tables *t, const struct row_req *r);
int embps_stride(const struct emb_tables *t);
int embps_clocked(const struct emb_tables *t); /* whether it keeps the clocks */

/* Model files: a header, each held table's (global id, table rows, first
 * row, rows), then the rows with their optimizer state. Loading fills the
 * held rows from any set of files that covers them (a model saved by some
 * number of PSs loads into any other split), and fails naming the first
 * table whose rows are not all found. */
int embps_save(const struct emb_tables *t, const char *path, struct ss_err *e);
int embps_load_files(struct emb_tables *t, char *const *paths, int n, struct ss_err *e);
/* Every DIR/tables*.bin. */
int embps_load_dir(struct emb_tables *t, const char *dir, struct ss_err *e);
/* The row stride of the first tables*.bin in dir (dim, or dim + 1 with
 * rowwise_adagrad's state), or -1 where there is none. */
int embps_saved_stride(const char *dir);
/* The rows of every DIR/tables*.bin as they are read, without tables to
 * hold them: fn(arg, gid, table_rows, row, n, rows, stride, e) for each
 * chunk of n rows [row, row + n) of table gid (of table_rows rows), stride
 * floats a row (dim, then the optimizer state when saved with one). Each
 * file is checked as a load checks it (header, dim, row ranges, size); a
 * non-zero return of fn (e set) ends the walk with it. */
typedef int (*embps_rows_fn)(void *arg, int32_t gid, int64_t table_rows, int64_t row, int64_t n,
                             const float *rows, int stride, struct ss_err *e);
int embps_saved_walk(const char *dir, int dim, embps_rows_fn fn, void *arg, struct ss_err *e);
/* Each table's rows (table_rows, by table id) as the tables*.bin of dir
 * hold them, into rows[0..n-1]: what model.rows = auto resolves to where a
 * saved model or checkpoint is loaded. Fails naming model.rows where the
 * files hold other tables than n, or disagree. */
int embps_saved_rows(const char *dir, int64_t *rows, int n, struct ss_err *e);
/* The rows table k holds: [*lo, *lo + rows). */
void embps_held(const struct emb_tables *t, int k, int64_t *lo, int64_t *rows,
                int64_t *table_rows);

/* The embedding PS role's service (service.c): lookup and push over
 * Thrift for the k shards this PS holds (the plan's shard_ids[0..k), held
 * in t in that order). Every request is checked (token, sizes, shard ids,
 * offsets, id counts, rows within their shard, a size cap) and a bad one
 * gets an RpcError while the service goes on serving. */
typedef struct _ThriftProcessor ThriftProcessor;
struct embps_stats {
    int64_t lookups, pushes, refused, bytes_in, bytes_out;
    int64_t row_syncs, rows_sent, rows_added; /* a cache's requests, rows answered, deltas */
    double busy_s, load_s;      /* CPU s in pool and push; rows looked up x cost (ns_per_row) */
};
struct embps_service;
struct embps_service *embps_service_create(struct emb_tables *t, const int32_t *shard_ids, int k,
                                           const char *token);
/* Where save requests may write: below dir (the job's checkpoint.dir), or
 * below model (output.dir/model, made when asked; NULL: none). */
void embps_service_save_root(struct embps_service *s, const char *dir, const char *model);
/* The cost of a row served by each shard, ns (the profile's), for load_s. */
void embps_service_costs(struct embps_service *s, const double *ns_per_row);
ThriftProcessor *embps_service_processor(struct embps_service *s);
void embps_service_stats(struct embps_service *s, struct embps_stats *st);
void embps_service_free(struct embps_service *s);
int embps_dim(const struct emb_tables *t);

/* ---- placement (placement.c, DESIGN §4) ---------------------------------
 * A plan is a list of shards, each rows [lo, hi) of one table on one PS,
 * sorted by PS, table, lo; a shard's id is its index in the list. Loads are
 * predicted nanoseconds of pooled lookup + push per training example. */
#define PLACE_BUCKETS 64
enum place_strategy { PLACE_PROFILE, PLACE_ROUND_ROBIN, PLACE_HASH };

struct table_profile {
    int64_t rows;
    int dim, state;                 /* floats per row: dim + optimizer state */
    double lookups_per_ex, mean_bag;
    double ns_per_ex, ns_per_lookup; /* measured pool + push time on this machine */
    double bucket[PLACE_BUCKETS];   /* share of the lookups in each 1/64 of the rows */
};

struct shard {
    int32_t table, ps;
    int64_t lo, hi;
    double load, bytes;
    double ns_per_row;          /* measured cost of one row looked up and pushed */
    int pinned;                 /* placed by placement.pin */
};

struct placement {
    int strategy, n_tables, n_ps, n_shards;
    struct shard *shards;
    int64_t *table_rows;            /* [n_tables] */
    double *load, *bytes;           /* [n_ps] predicted load; memory with the process */
    double capacity;                /* bytes per PS (embedding_ps.memory_mb) */
    double mean, max, lower_bound, imbalance;
    int over_memory;                /* PSs whose memory exceeds capacity */
    int on_trainers;                /* the shards go to the trainers (DES): they are the
                                     * "PSs" here, for the messages */
};

const char *placement_strategy_name(int s);
int placement_strategy(const char *name); /* -1 when unknown */
/* One table's uniform figures: one lookup per example, cost = dim, the
 * lookups spread evenly over the rows. */
void placement_uniform(struct table_profile *tp, int64_t rows, int dim, int state);
/* Every table's uniform figures, no data read. */
void placement_assume(const struct model_layout *l, const struct ss_config *c,
                      struct table_profile *tp);
/* Profiles placement.profile_batches batches of data.train (0: assume). */
int placement_profile(const struct ss_config *c, const struct model_layout *l,
                      struct table_profile *tp, struct ss_err *e);
/* Up to batches batches of data.train: per[t] (T single-table batches,
 * initialised here, batch_free them) holds the rows (id mod rows) of every
 * profiled bag of table t; *examples how many were read. */
int profile_rows(const struct ss_config *c, const struct model_layout *l, int batches,
                 struct batch *per, int64_t *examples, struct ss_err *e);
/* The plan of strategy over T tables and P PSs of capacity_mb each, around
 * the pins "T:PS,T@LO-HI:PS". Fails (naming need and capacity) only when
 * profile cannot fit the tables; round_robin and hash report over_memory. */
int placement_make(struct placement *pl, int strategy, const struct table_profile *tp, int T,
                   int P, double capacity_mb, const char *pins, struct ss_err *e);
/* The same for the shards of embedding.placement = trainers (DES). */
int placement_make_on(struct placement *pl, int on_trainers, int strategy,
                      const struct table_profile *tp, int T, int P, double capacity_mb,
                      const char *pin_spec, struct ss_err *e);
/* Fails naming the first PS whose memory need exceeds its capacity. */
int placement_check_memory(const struct placement *pl, struct ss_err *e);
void placement_free(struct placement *pl);
/* Shard ids of PS ps in its order; returns how many. */
int placement_ps_shards(const struct placement *pl, int ps, int32_t *ids);
void placement_print(const struct placement *pl, FILE *f);
void placement_json(const struct placement *pl, FILE *f);
/* The plan of the config's placement.strategy over n_ps PSs, profiling
 * data.train when that strategy is profile or compare is set; the plans of
 * all three strategies go to f (NULL: quiet) and to output.dir as
 * placement.txt and placement.json. Fails when the chosen plan does not fit
 * embedding_ps.memory_mb, naming the need and the capacity. */
int placement_for_config(const struct ss_config *c, const struct model_layout *l, int n_ps,
                         int compare, struct placement *pl, FILE *f, struct ss_err *e);
/* How many bins a plan places the tables on: embedding_ps PSs, or with
 * embedding.placement = trainers the trainers (the plan's PS p is then
 * trainer p). */
int placement_bins(const struct ss_config *c, int embedding_ps, int trainers);
/* The chosen plan in full, then one line per strategy. */
void placement_summary(const struct placement *plans, int chosen, int profiled, FILE *f);
/* The packer alone: n items into P bins of cap bytes, fixed[i] >= 0 pins
 * item i (fixed may be NULL); bin[i] out. -1 when memory does not fit. */
int place_pack(const double *load, const double *bytes, int n, int P, double cap,
               const int *fixed, int *bin);

/* ---- hot embeddings (hot.c, DESIGN §9 "FAE") -----------------------------
 * The rows looked up at least hot_embeddings.min_lookups times in the
 * profiled batches, the most looked up first, as many as fit in
 * hot_embeddings.memory_mb (dim floats each). Trainers replicate them
 * (trainer/emb_hot.c); slot i is row[i] of table[i], sorted by table, row. */
struct hot_set {
    int n_tables, dim;
    int64_t n;                  /* hot rows */
    int32_t *table;             /* [n] */
    int64_t *row;               /* [n] */
    int64_t *table_rows;        /* [n_tables] rows of each whole table */
    double profiled_share;      /* of the profiled lookups, the share on hot rows */
    size_t mask;                /* the index: open addressing over (table, row) */
    struct hot_entry {          /* key and slot side by side: a probe reads one line */
        int64_t key;            /* table * 2^40 + row, -1 empty */
        int64_t slot;
    } *index;                   /* [mask+1] */
};
/* From the profile; *out = NULL when memory_mb is 0 or no row is hot. */
int hot_find(const struct ss_config *c, const struct model_layout *l, struct hot_set **out,
             struct ss_err *e);
/* From a list (a checkpoint's, or the master's); takes neither array. */
struct hot_set *hot_from_list(int n_tables, int dim, const int64_t *table_rows, int64_t n,
                              const int32_t *table, const int64_t *row);
/* The slot of row (already id mod table_rows) of table t, or -1. */
static inline int64_t hot_slot(const struct hot_set *h, int t, uint64_t row)
{
    int64_t key = (int64_t)t << 40 | (int64_t)row;
    for (size_t i = ss_mix64((uint64_t)key) & h->mask;; i = (i + 1) & h->mask) {
        if (h->index[i].key == key)
            return h->index[i].slot;
        if (h->index[i].key < 0)
            return -1;
    }
}
/* hot-rows.bin: the list (magic, version, n_tables, dim, table rows, then
 * (table, row) pairs). Loading checks it against the model's tables. */
int hot_save(const struct hot_set *h, const char *path, struct ss_err *e);
int hot_load(struct hot_set **out, const char *path, const struct model_layout *l,
             struct ss_err *e);
void hot_free(struct hot_set *h);
/* Collective, beside placement_for_job: the master finds the hot rows (or
 * takes the list of the checkpoint it resumes from) and every rank gets
 * them in p->hot; a failure on the master fails every rank with its message. */
struct job_plan;
int hot_for_job(const struct ss_config *c, struct job_plan *p, struct ss_err *e);
/* The center's tail for the hot rows: their initial values, as the tables'. */
void hot_initial(const struct ss_config *c, const struct model_layout *l, const struct hot_set *h,
                 float *out);

/* The tables of PS ps's shards of pl (ids[0..k) its shard ids; k = 0 and
 * *t = NULL when it holds none), with base's optimizer, dim and seed. */
int embps_create_for_ps(const struct emb_opts *base, const struct placement *pl, int ps,
                        struct emb_tables **t, int32_t **ids, int *k, struct ss_err *e);
/* The embedding PS role of a cluster job (role.c): builds its shards of
 * p->placement, serves them until the job ends, saves them (model/
 * tables-psK.bin) and leaves its figures in p. */
struct job_plan;
int embps_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e);
/* Collective: the master makes the plan (placement_for_config, profiling
 * whatever the strategy, so every plan's figures and the PSs' load seconds
 * rest on measured costs; printed and written to the run directory) and
 * every rank gets it; a failure on the master fails every rank with its
 * message. */
int placement_for_job(const struct ss_config *c, struct job_plan *p, struct placement *pl,
                      struct ss_err *e);

#endif
