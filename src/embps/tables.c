/* Embedding tables: storage, pooled lookup, push with the row optimizer,
 * save/load. Row r of table t sits at data[t] + r*stride, stride = dim plus
 * one float of row-wise Adagrad state when that optimizer is on. An id maps
 * to row id mod table_rows (DESIGN §1); a shard holds rows [lo, lo+rows). Lock-free by design (Hogwild, DESIGN §3):
 * concurrent pushes to one row may lose an update, never corrupt memory. */
#include "shadowsync/embps.h"

#include <errno.h>
#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EMB_MAGIC "SSEMB\0\0\0"
#define EMB_VERSION 2

struct emb_tables {
    struct emb_opts o;
    int stride;
    int64_t *rows, *table_rows, *lo;
    int32_t *gid;
    float **data;
    uint32_t **clock;           /* [n_tables][rows] with o.clocks (atomics), else NULL */
};

static int64_t *copy_i64(const int64_t *src, const int64_t *fallback, int n, int64_t zero)
{
    int64_t *d = ss_xmalloc((size_t)n * sizeof(int64_t));
    for (int k = 0; k < n; k++)
        d[k] = src ? src[k] : fallback ? fallback[k] : zero;
    return d;
}

/* Row r of table gid: uniform in +-bound from a generator seeded by (seed, gid, r). */
static void init_row(float *row, const struct emb_opts *o, int32_t gid, int64_t r, float bound)
{
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 101 + (uint64_t)gid * 0xD1B54A32D192ED03ull +
                   (uint64_t)r * 0xA24BAED4963EE407ull;
    for (int d = 0; d < o->dim; d++)
        row[d] = (float)(2.0 * ss_uniform(&rng) - 1.0) * bound;
}

struct emb_opts emb_opts_from_config(const struct ss_config *c, int n, int dim,
                                     const int64_t *rows)
{
    return (struct emb_opts){
        .n_tables = n, .dim = dim, .rows = rows,
        .opt = c->optim.emb == OPT_ROWWISE_ADAGRAD ? OPT_ROWWISE_ADAGRAD : OPT_SGD,
        .lr = (float)c->optim.emb_lr, .eps = (float)c->optim.eps,
        .init_acc = (float)c->optim.init_acc, .seed = (uint64_t)c->job.seed,
        .clocks = c->embedding_cache.rows > 0};
}

/* Filling the rows (and faulting their pages in) is most of the start of a
 * large model: the cores share it, each taking the next chunk of rows of
 * the next table. A row's values depend only on (seed, table, row), so the
 * result does not depend on the thread count. */
#define INIT_CHUNK (1 << 16)

struct init_work {
    struct emb_tables *t;
    int k;          /* next chunk: rows [r, r + INIT_CHUNK) of table k; under mu */
    int64_t r;
    pthread_mutex_t mu;
};

static int next_chunk(struct init_work *w, int *k, int64_t *r)
{
    pthread_mutex_lock(&w->mu);
    while (w->k < w->t->o.n_tables && w->r >= w->t->rows[w->k])
        w->k++, w->r = 0;
    int more = w->k < w->t->o.n_tables;
    if (more) {
        *k = w->k, *r = w->r;
        w->r += INIT_CHUNK;
    }
    pthread_mutex_unlock(&w->mu);
    return more;
}

static void *init_worker(void *arg)
{
    struct init_work *w = arg;
    struct emb_tables *t = w->t;
    int k;
    int64_t r0;
    while (next_chunk(w, &k, &r0)) {
        float bound = (float)sqrt(1.0 / (double)t->table_rows[k]);
        int64_t end = r0 + INIT_CHUNK < t->rows[k] ? r0 + INIT_CHUNK : t->rows[k];
        for (int64_t r = r0; r < end; r++) {
            float *row = t->data[k] + (size_t)r * t->stride;
            init_row(row, &t->o, t->gid[k], t->lo[k] + r, bound);
            if (t->stride > t->o.dim)
                row[t->o.dim] = t->o.init_acc;
        }
    }
    return NULL;
}

static void init_rows(struct emb_tables *t)
{
    struct init_work w = {.t = t};
    pthread_mutex_init(&w.mu, NULL);
    int64_t total = 0;
    for (int k = 0; k < t->o.n_tables; k++)
        total += t->rows[k];
    cpu_set_t set; /* the cores this process may run on (mpirun may bind it) */
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                            : sysconf(_SC_NPROCESSORS_ONLN);
    int n = total < 4 * INIT_CHUNK || cpus < 2 ? 1 : cpus > 16 ? 16 : (int)cpus;
    pthread_t th[16];
    int started = 0;
    for (int i = 1; i < n; i++) /* a thread that cannot start leaves its share to the rest */
        started += pthread_create(&th[started], NULL, init_worker, &w) == 0;
    init_worker(&w);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&w.mu);
}

int embps_check_room(double need, int dim, struct ss_err *e)
{
    int64_t avail = ss_mem_available();
    if (avail >= 0 && need > (double)avail)
        return ss_fail(e, SS_ENOMEM, "the embedding tables here need %.0f MB (model.rows x "
                       "(model.dim %d + its optimizer's state, and a clock with a cache)), more "
                       "than the %lld MB of memory free here: smaller tables, or spread them over "
                       "more embedding PSs (job.embedding_ps)", need / 1048576, dim,
                       (long long)(avail >> 20));
    return 0;
}

int embps_create(struct emb_tables **out, const struct emb_opts *o, struct ss_err *e)
{
    if (o->n_tables <= 0 || o->dim <= 0)
        return ss_fail(e, SS_EINVAL, "embedding tables: %d tables of dim %d", o->n_tables, o->dim);
    struct emb_tables *t = ss_xcalloc(1, sizeof *t);
    int n = o->n_tables;
    t->o = *o;
    t->stride = o->dim + (o->opt == OPT_ROWWISE_ADAGRAD);
    t->rows = copy_i64(o->rows, NULL, n, 0);
    t->table_rows = copy_i64(o->table_rows, o->rows, n, 0);
    t->lo = copy_i64(o->row_lo, NULL, n, 0);
    t->gid = ss_xmalloc((size_t)n * sizeof(int32_t));
    for (int k = 0; k < n; k++)
        t->gid[k] = o->global_ids ? o->global_ids[k] : k;
    t->o.rows = t->rows;
    t->o.table_rows = t->table_rows;
    t->o.row_lo = t->lo;
    t->o.global_ids = t->gid;
    t->data = ss_xcalloc(n, sizeof(float *));
    /* every row is written at start: tables past the memory here would be
     * killed for it part way, with no word */
    double need = 0;
    for (int k = 0; k < n; k++) /* (and a clock a row, with o->clocks) */
        need += (double)t->rows[k] * (t->stride + (o->clocks != 0)) * sizeof(float);
    int rc = embps_check_room(need, o->dim, e);
    if (rc < 0) {
        embps_free(t);
        return rc;
    }
    for (int k = 0; k < n; k++) {
        if (t->rows[k] < 1 || t->lo[k] < 0 || t->lo[k] + t->rows[k] > t->table_rows[k]) {
            embps_free(t);
            return ss_fail(e, SS_EINVAL, "embedding table %d: rows [%lld, %lld) of %lld", k,
                           (long long)o->row_lo[k], (long long)(o->row_lo[k] + o->rows[k]),
                           (long long)o->table_rows[k]);
        }
        size_t cnt = (size_t)t->rows[k] * t->stride;
        t->data[k] = ss_alloc_big(cnt * sizeof(float));
        if (!t->data[k]) {
            embps_free(t);
            return ss_fail(e, SS_ENOMEM, "embedding table %d (model.rows: %lld rows): cannot "
                           "allocate %zu MB", k, (long long)t->rows[k], cnt * sizeof(float) >> 20);
        }
    }
    if (o->clocks) { /* zero pages: counted from 0 */
        t->clock = ss_xcalloc(n, sizeof(uint32_t *));
        for (int k = 0; k < n; k++)
            if (!(t->clock[k] = calloc((size_t)t->rows[k], sizeof(uint32_t)))) {
                embps_free(t);
                return ss_fail(e, SS_ENOMEM, "embedding table %d: cannot allocate its clocks", k);
            }
    }
    init_rows(t);
    *out = t;
    return 0;
}

void embps_free(struct emb_tables *t)
{
    if (!t)
        return;
    for (int k = 0; t->data && k < t->o.n_tables; k++)
        free(t->data[k]);
    for (int k = 0; t->clock && k < t->o.n_tables; k++)
        free(t->clock[k]);
    free(t->clock);
    free(t->data);
    free(t->rows);
    free(t->table_rows);
    free(t->lo);
    free(t->gid);
    free(t);
}

int embps_dim(const struct emb_tables *t)
{
    return t->o.dim;
}

size_t embps_bytes(const struct emb_tables *t)
{
    size_t b = 0;
    for (int k = 0; k < t->o.n_tables; k++)
        b += (size_t)t->rows[k] * t->stride * sizeof(float);
    return b;
}

void embps_held(const struct emb_tables *t, int k, int64_t *lo, int64_t *rows,
                int64_t *table_rows)
{
    *lo = t->lo[k];
    *rows = t->rows[k];
    *table_rows = t->table_rows[k];
}

/* Where id's row sits among those table k holds. */
static inline size_t held_at(const struct emb_tables *t, int k, uint64_t id)
{
    uint64_t rows = (uint64_t)t->table_rows[k];
    uint64_t r = id < rows ? id : id % rows; /* a PS gets rows already: no division */
    return (size_t)(r - (uint64_t)t->lo[k]);
}

static inline float *row_of(struct emb_tables *t, int k, uint64_t id)
{
    return t->data[k] + held_at(t, k, id) * t->stride;
}

static inline void tick(struct emb_tables *t, int k, uint64_t id, uint32_t n)
{
    __atomic_add_fetch(&t->clock[k][held_at(t, k, id)], n, __ATOMIC_RELAXED);
}

void embps_initial_row(const struct emb_opts *o, int32_t gid, int64_t row, int64_t table_rows,
                       float *out)
{
    init_row(out, o, gid, row, (float)sqrt(1.0 / (double)table_rows));
}

float *embps_row(struct emb_tables *t, int k, uint64_t row)
{
    return row_of(t, k, row);
}

/* The rows of example i of b into the cache (rw 1: for an update). A
 * lookup or push waits on DRAM, not on arithmetic: asking for the rows of
 * the example PREFETCH_AHEAD ahead overlaps those waits. Measured by
 * alternating binaries with and without, 3 runs each (metrics.json
 * worker_*_s): on the Criteo-Kaggle tables at batch 1024 with a tiny dense
 * half (a GPU worker's host work), lookup -22 %, push -30 %, EPS +17 %;
 * on the peer model with 2 workers, lookup -36 %, push -48 %, EPS +4.5 %.
 * A macro: gcc 12 dropped every prefetch of an inline function that took
 * rw as a parameter. */
enum { PREFETCH_AHEAD = 4 };
#define PREFETCH_ROWS(t, b, i, rw)                                                                 \
    do {                                                                                           \
        int T_ = (t)->o.n_tables;                                                                  \
        for (int k_ = 0; (i) < (b)->n && k_ < T_; k_++)                                            \
            for (int32_t j_ = (b)->off[(i) * T_ + k_]; j_ < (b)->off[(i) * T_ + k_ + 1]; j_++)     \
                __builtin_prefetch(row_of((t), k_, (b)->ids[j_]), (rw));                           \
    } while (0)

/* A weighted bag's sum: each row times its id's weight (libsvm values). */
static void weighed_bag(struct emb_tables *t, int k, const struct batch *b, int32_t lo,
                        int32_t hi, float *o)
{
    int d = t->o.dim;
    memset(o, 0, d * sizeof(float));
    for (int32_t j = lo; j < hi; j++) {
        const float *r = row_of(t, k, b->ids[j]);
        float w = b->wts[j];
        for (int c = 0; c < d; c++)
            o[c] += w * r[c];
    }
}

/* The pooled bags into out: every bag (an empty one as zeros), or with
 * compact only the non-empty ones, one after another (the wire's layout). */
SS_HOGWILD static void pool(struct emb_tables *t, const struct batch *b, float *out, int compact)
{
    int T = t->o.n_tables, d = t->o.dim;
    float *o = out;
    for (int i = 0; i < b->n; i++) {
        PREFETCH_ROWS(t, b, i + PREFETCH_AHEAD, 0);
        for (int k = 0; k < T; k++) {
            int32_t lo = b->off[i * T + k], hi = b->off[i * T + k + 1];
            if (lo == hi && compact)
                continue;
            if (!compact)
                o = out + ((size_t)i * T + k) * d;
            if (lo == hi) {
                memset(o, 0, d * sizeof(float));
                continue;
            }
            if (b->weighted) {
                weighed_bag(t, k, b, lo, hi, o);
                o += d;
                continue;
            }
            ss_copy(o, row_of(t, k, b->ids[lo]), d);
            for (int32_t j = lo + 1; j < hi; j++) {
                const float *r = row_of(t, k, b->ids[j]);
                for (int c = 0; c < d; c++)
                    o[c] += r[c];
            }
            o += d; /* compact: the next bag's place */
        }
    }
}

void embps_pool(struct emb_tables *t, const struct batch *b, float *out)
{
    pool(t, b, out, 0);
}

void embps_pool_bags(struct emb_tables *t, const struct batch *b, float *out)
{
    pool(t, b, out, 1);
}

/* g in pool's layout (compact or not). */
static void push(struct emb_tables *t, const struct batch *b, const float *g, int compact)
{
    int T = t->o.n_tables, d = t->o.dim;
    const float *gk = g;
    float lr = t->o.lr * b->lr_scale, gw[SS_MAX_DIM];
    for (int i = 0; i < b->n; i++) {
        PREFETCH_ROWS(t, b, i + PREFETCH_AHEAD, 1);
        for (int k = 0; k < T; k++) {
            int32_t lo = b->off[i * T + k], hi = b->off[i * T + k + 1];
            if (lo == hi)
                continue;
            if (!compact)
                gk = g + ((size_t)i * T + k) * d;
            for (int32_t j = lo; j < hi; j++) {
                float *r = row_of(t, k, b->ids[j]);
                const float *gj = gk;
                if (b->weighted) { /* a weighted id's row moves by its weight's share */
                    for (int c = 0; c < d; c++)
                        gw[c] = b->wts[j] * gk[c];
                    gj = gw;
                }
                optim_row_step(t->o.opt, r, r + d, gj, d, lr, t->o.eps);
                if (t->clock)
                    tick(t, k, b->ids[j], 1);
            }
            gk += d;
        }
    }
}

void embps_push(struct emb_tables *t, const struct batch *b, const float *g)
{
    push(t, b, g, 0);
}

void embps_push_bags(struct emb_tables *t, const struct batch *b, const float *g)
{
    push(t, b, g, 1);
}

size_t embps_bags(const struct batch *b)
{
    size_t m = 0;
    for (int q = 0; q < b->n * b->n_tables; q++)
        m += b->off[q + 1] > b->off[q];
    return m;
}

int embps_stride(const struct emb_tables *t)
{
    return t->stride;
}

int embps_clocked(const struct emb_tables *t)
{
    return t->clock != NULL;
}

SS_HOGWILD size_t embps_rows(struct emb_tables *t, const struct row_req *r)
{
    int s = t->stride;
    for (size_t i = 0; i < r->n_add; i++) {
        float *row = row_of(t, r->add_table[i], r->add_row[i]);
        const float *dl = r->add_delta + i * s;
        for (int c = 0; c < s; c++)
            row[c] += dl[c];
        tick(t, r->add_table[i], r->add_row[i], r->add_count[i]);
    }
    size_t sent = 0;
    for (size_t i = 0; i < r->n_get; i++) {
        int k = r->get_table[i];
        uint64_t id = r->get_row[i];
        r->clock[i] = __atomic_load_n(&t->clock[k][held_at(t, k, id)], __ATOMIC_RELAXED);
        if (row_sent(r->get_have[i], r->clock[i], r->bound))
            ss_copy(r->val + sent++ * s, row_of(t, k, id), (size_t)s);
    }
    return sent;
}

struct emb_header {
    char magic[8];
    uint32_t version, n_tables, dim, stride;
};
struct emb_held {               /* one per table in the file, after the header */
    int32_t gid, pad;
    int64_t table_rows, lo, rows;
};

int embps_save(const struct emb_tables *t, const char *path, struct ss_err *e)
{
    int nt = t->o.n_tables;
    struct emb_header h = {EMB_MAGIC, EMB_VERSION, t->o.n_tables, t->o.dim, t->stride};
    struct emb_held *held = ss_xcalloc((size_t)nt + 1, sizeof *held);
    struct ss_span *parts = ss_xmalloc(((size_t)nt + 2) * sizeof *parts);
    parts[0] = (struct ss_span){&h, sizeof h};
    for (int k = 0; k < nt; k++) {
        held[k] = (struct emb_held){t->gid[k], 0, t->table_rows[k], t->lo[k], t->rows[k]};
        parts[2 + k] = (struct ss_span){t->data[k], (size_t)t->rows[k] * t->stride * sizeof(float)};
    }
    parts[1] = (struct ss_span){held, (size_t)nt * sizeof *held};
    int rc = ss_write_file(path, parts, nt + 2, 0, held, e);
    free(parts); /* (the call copied them) */
    return rc;
}

int embps_saved_stride(const char *dir)
{
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/tables*.bin", dir);
    glob_t g;
    int stride = -1;
    if (glob(pat, 0, NULL, &g) != 0)
        return -1;
    FILE *f = fopen(g.gl_pathv[0], "rb");
    struct emb_header h;
    if (f && fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, EMB_MAGIC, 8) == 0 &&
        h.stride <= INT32_MAX)
        stride = (int)h.stride;
    if (f)
        fclose(f);
    globfree(&g);
    return stride;
}

/* The table_rows of every table file f lists into rows[] (by gid, n of them). */
static int saved_rows_of(const char *path, int64_t *rows, int n, struct ss_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct emb_header h;
    struct emb_held hj;
    int rc = 0;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, EMB_MAGIC, 8) != 0 ||
        h.version != EMB_VERSION)
        rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync embedding file of version %d", path,
                     EMB_VERSION);
    for (uint32_t j = 0; rc == 0 && j < h.n_tables; j++) {
        if (fread(&hj, sizeof hj, 1, f) != 1)
            rc = ss_fail(e, SS_EFORMAT, "%s: truncated header", path);
        else if (hj.gid < 0 || hj.gid >= n)
            rc = ss_fail(e, SS_EINVAL, "%s holds table %d, and the config's model.rows = auto "
                         "counts %d tables (data.cat_cols): give the model's", path, hj.gid, n);
        else if (hj.table_rows < 1 || (rows[hj.gid] && rows[hj.gid] != hj.table_rows))
            rc = ss_fail(e, SS_EFORMAT, "%s: table %d of %lld rows, another file of its set "
                         "says %lld", path, hj.gid, (long long)hj.table_rows,
                         (long long)rows[hj.gid]);
        else
            rows[hj.gid] = hj.table_rows;
    }
    fclose(f);
    return rc;
}

int embps_saved_rows(const char *dir, int64_t *rows, int n, struct ss_err *e)
{
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/tables*.bin", dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0)
        return ss_fail(e, SS_EIO, "%s: no embedding files (tables*.bin) to take model.rows = "
                       "auto from", dir);
    memset(rows, 0, (size_t)n * sizeof *rows);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        rc = saved_rows_of(g.gl_pathv[i], rows, n, e);
    for (int t = 0; rc == 0 && t < n; t++)
        if (!rows[t])
            rc = ss_fail(e, SS_EINVAL, "%s: no file holds table %d of the %d the config's "
                         "model.rows = auto counts (data.cat_cols): give the model's", dir, t, n);
    globfree(&g);
    return rc;
}

/* Walks the rows of the tables file at path, chunk by chunk, into fn (see
 * embps_saved_walk); stride < 0 takes rows of dim floats with or without
 * one float of state, else the file's stride must be it (t, when loading:
 * its message names the config's). */
static int walk_one(const char *path, int dim, int stride, embps_rows_fn fn, void *arg,
                    struct ss_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct emb_header h;
    struct emb_held *held = NULL;
    int rc = 0;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, EMB_MAGIC, 8) != 0)
        rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync embedding file", path);
    else if (h.version != EMB_VERSION)
        rc = ss_fail(e, SS_EFORMAT, "%s: version %u, this build reads version %d", path,
                     h.version, EMB_VERSION);
    else if (h.n_tables > SS_MAX_TABLES * 64)
        rc = ss_fail(e, SS_EFORMAT, "%s: its header counts %u tables, more than any file holds "
                     "(at most %d): a damaged or forged file", path, h.n_tables,
                     SS_MAX_TABLES * 64);
    else if (stride >= 0 && (h.dim != (uint32_t)dim || h.stride != (uint32_t)stride))
        rc = ss_fail(e, SS_EFORMAT, "%s: rows of dim %u (stride %u) do not match the config's "
                     "dim %d (stride %d): check model.dim, and optim.emb (rowwise_adagrad keeps "
                     "one state float a row beside the dim, sgd none)", path, h.dim, h.stride,
                     dim, stride);
    else if (stride < 0 && (h.dim != (uint32_t)dim || (h.stride != h.dim && h.stride != h.dim + 1)))
        rc = ss_fail(e, SS_EFORMAT, "%s: rows of dim %u (stride %u): the config's model.dim is %d",
                     path, h.dim, h.stride, dim);
    if (rc == 0) {
        held = ss_xcalloc(h.n_tables ? h.n_tables : 1, sizeof *held);
        if (fread(held, sizeof *held, h.n_tables, f) != h.n_tables)
            rc = ss_fail(e, SS_EFORMAT, "%s: truncated header", path);
    }
    float *buf = rc == 0 ? ss_xmalloc(4096 * (size_t)h.stride * sizeof(float)) : NULL;
    for (uint32_t j = 0; rc == 0 && j < h.n_tables; j++) {
        const struct emb_held *hj = &held[j];
        if (hj->rows < 0 || hj->lo < 0 || hj->lo + hj->rows > hj->table_rows) {
            rc = ss_fail(e, SS_EFORMAT, "%s: table %d holds a bad row range", path, hj->gid);
            break;
        }
        for (int64_t r = 0; rc == 0 && r < hj->rows; r += 4096) {
            size_t cnt = (size_t)(hj->rows - r < 4096 ? hj->rows - r : 4096);
            if (fread(buf, sizeof(float) * h.stride, cnt, f) != cnt)
                rc = ss_fail(e, SS_EFORMAT, "%s: truncated in table %d", path, hj->gid);
            else
                rc = fn(arg, hj->gid, hj->table_rows, hj->lo + r, (int64_t)cnt, buf,
                        (int)h.stride, e);
        }
    }
    if (rc == 0 && fgetc(f) != EOF) /* something appended, or another file's tail */
        rc = ss_fail(e, SS_EFORMAT, "%s: bytes past its tables: not the file it was written as",
                     path);
    free(buf);
    free(held);
    fclose(f);
    return rc;
}

struct load_ctx {
    struct emb_tables *t;
    const char *path;
    int64_t *got;               /* [n_tables] rows found */
};

/* Rows [a, a + n) of table gid into the tables of t that hold any of them. */
static int load_rows(void *arg, int32_t gid, int64_t table_rows, int64_t a, int64_t n,
                     const float *buf, int stride, struct ss_err *e)
{
    struct load_ctx *x = arg;
    struct emb_tables *t = x->t;
    int64_t b = a + n;
    (void)stride; /* walk_one checked it is t's */
    for (int k = 0; k < t->o.n_tables; k++) {
        if (t->gid[k] != gid)
            continue;
        if (t->table_rows[k] != table_rows)
            return ss_fail(e, SS_EFORMAT, "%s: table %d has %lld rows, the config's %lld "
                           "(model.rows: give the model's own, or auto to take them)", x->path, gid,
                           (long long)table_rows, (long long)t->table_rows[k]);
        int64_t from = a > t->lo[k] ? a : t->lo[k];
        int64_t to = b < t->lo[k] + t->rows[k] ? b : t->lo[k] + t->rows[k];
        if (from >= to)
            continue;
        memcpy(t->data[k] + (size_t)(from - t->lo[k]) * t->stride,
               buf + (size_t)(from - a) * t->stride,
               (size_t)(to - from) * t->stride * sizeof(float));
        x->got[k] += to - from;
    }
    return 0;
}

/* Copies the rows of file f's tables that t holds; counts them in got[]. */
static int load_one(struct emb_tables *t, const char *path, int64_t *got, struct ss_err *e)
{
    struct load_ctx x = {t, path, got};
    return walk_one(path, t->o.dim, t->stride, load_rows, &x, e);
}

int embps_saved_walk(const char *dir, int dim, embps_rows_fn fn, void *arg, struct ss_err *e)
{
    char pat[4096];
    snprintf(pat, sizeof pat, "%s/tables*.bin", dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0)
        return ss_fail(e, SS_EIO, "%s: no embedding files (tables*.bin)", dir);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        rc = walk_one(g.gl_pathv[i], dim, -1, fn, arg, e);
    globfree(&g);
    return rc;
}

int embps_load_files(struct emb_tables *t, char *const *paths, int n, struct ss_err *e)
{
    int64_t *got = ss_xcalloc(t->o.n_tables, sizeof *got);
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        rc = load_one(t, paths[i], got, e);
    for (int k = 0; rc == 0 && k < t->o.n_tables; k++)
        if (got[k] != t->rows[k])
            rc = ss_fail(e, SS_EFORMAT, "table %d: %lld of its %lld rows [%lld, %lld) found in "
                         "the %d file%s read (%s%s): a file of the set is missing? (a cluster "
                         "job writes one tables-psK.bin per embedding PS, DES one per trainer)",
                         t->gid[k], (long long)got[k], (long long)t->rows[k], (long long)t->lo[k],
                         (long long)(t->lo[k] + t->rows[k]), n, n == 1 ? "" : "s",
                         n ? paths[0] : "none", n > 1 ? ", ..." : "");
    free(got);
    return rc;
}

int embps_load_dir(struct emb_tables *t, const char *dir, struct ss_err *e)
{
    char pat[4096];
    snprintf(pat, sizeof pat, "%s/tables*.bin", dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0)
        return ss_fail(e, SS_EIO, "%s: no embedding files (tables*.bin)", dir);
    int rc = embps_load_files(t, g.gl_pathv, (int)g.gl_pathc, e);
    globfree(&g);
    return rc;
}
