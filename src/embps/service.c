/* The embedding PS service over Thrift (DESIGN §2, §3, §8): a GObject
 * handler for the generated EmbeddingPS interface. A request covers every
 * shard this PS holds, in order, with rows (not raw ids), each checked to
 * lie in its shard; lookup answers the pooled bags (partial sums of a split
 * table's bags), push applies the gradients to the rows (Hogwild, as
 * in-process); both carry only the non-empty bags' vectors. Every field
 * is validated; a bad request gets an RpcError naming what is wrong, is
 * counted, and the connection and the service go on. */
#include "shadowsync/embps.h"
#include "shadowsync/rpc.h"

#include <stdlib.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#define MAX_EXAMPLES (1 << 20)
#define MAX_IDS (64 << 20)

struct embps_service {
    struct emb_tables *t;
    int32_t *shard_ids;         /* the plan's ids of the k shards held, in order */
    int64_t *lo, *hi;           /* [k] the rows each holds */
    int64_t *served;            /* [k] rows looked up and pushed (atomics) */
    double *cost;               /* [k] ns per row served */
    int64_t busy_ns;            /* atomics */
    int k, dim;
    char token[64];
    char save_root[4096];       /* saves go only below it: the job's checkpoint.dir */
    char model_root[4096];      /* ...or the model's folder, output.dir/model ("": none) */
    ThriftProcessor *proc;
    struct embps_stats st;      /* updated with atomics */
};

typedef struct {
    ssEmbeddingPSHandler parent;
    struct embps_service *svc;
} PsHandler;
typedef struct {
    ssEmbeddingPSHandlerClass parent;
} PsHandlerClass;

G_DEFINE_TYPE(PsHandler, ps_handler, SS_TYPE_EMBEDDING_P_S_HANDLER)

#define refuse(s, err, code, ...) rpc_refuse(&(s)->st.refused, err, code, __VA_ARGS__)

/* Each connection thread's buffers, kept between its requests: ids sent
 * as uint32 widened, and the vectors in fp32 of a compact wire form. */
struct scratch {
    uint64_t *ids;
    float *v;
    size_t ids_cap, v_cap;
    /* the connection's last lookup, checked, for a push that reuses it */
    int kept_n, kept_weighted;
    int32_t *kept_off;
    uint64_t *kept_ids;
    float *kept_wts;
    size_t kept_off_cap, kept_ids_cap, kept_wts_cap;
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
    struct scratch *b = p;
    free(b->ids);
    free(b->v);
    free(b->kept_off);
    free(b->kept_ids);
    free(b->kept_wts);
    free(b);
}

static void scratch_init(void)
{
    pthread_key_create(&scratch_key, scratch_free);
}

static struct scratch *scratch(void)
{
    pthread_once(&scratch_once, scratch_init);
    struct scratch *b = pthread_getspecific(scratch_key);
    if (!b) {
        b = ss_xcalloc(1, sizeof *b);
        pthread_setspecific(scratch_key, b);
    }
    return b;
}

/* A lookup's checked bags, kept for the push that reuses them. */
static void keep_lookup(int k, const struct batch *v)
{
    struct scratch *b = scratch();
    size_t n_off = (size_t)v->n * k + 1, n_ids = (size_t)v->off[n_off - 1];
    b->kept_off = ss_grown(b->kept_off, &b->kept_off_cap, n_off, sizeof(int32_t));
    b->kept_ids = ss_grown(b->kept_ids, &b->kept_ids_cap, n_ids + 1, sizeof(uint64_t));
    memcpy(b->kept_off, v->off, n_off * sizeof(int32_t));
    memcpy(b->kept_ids, v->ids, n_ids * sizeof(uint64_t));
    if (v->weighted) {
        b->kept_wts = ss_grown(b->kept_wts, &b->kept_wts_cap, n_ids + 1, sizeof(float));
        memcpy(b->kept_wts, v->wts, n_ids * sizeof(float));
    }
    b->kept_weighted = v->weighted;
    b->kept_n = v->n;
}

/* The view of the kept lookup (0: this connection has none). */
static int kept_lookup(int k, struct batch *view)
{
    struct scratch *b = scratch();
    if (!b->kept_n)
        return 0;
    size_t n_ids = (size_t)b->kept_off[(size_t)b->kept_n * k];
    *view = (struct batch){.n = b->kept_n, .cap = b->kept_n, .n_tables = k, .id_cap = n_ids,
                           .off = b->kept_off, .ids = b->kept_ids,
                           .wts = b->kept_weighted ? b->kept_wts : NULL,
                           .weighted = b->kept_weighted};
    b->kept_n = 0; /* one push a lookup */
    return 1;
}

static float *scratch_floats(size_t n)
{
    struct scratch *b = scratch();
    return b->v = ss_grown(b->v, &b->v_cap, n + 1, sizeof(float));
}

/* Checks bags against this PS; on success fills the batch view over it
 * (its ids widened into the thread's scratch where they came as uint32). */
static gboolean check_bags(struct embps_service *s, const ssBags *bags, struct batch *view,
                           ssRpcError **err)
{
    int idb = bags->__isset_id_bytes ? bags->id_bytes : 8;
    if (idb != 4 && idb != 8)
        return refuse(s, err, SS_EINVAL, "bad request: id_bytes = %d (4 or 8)", idb);
    if (bags->__isset_wire && (bags->wire < WIRE_FP32 || bags->wire > WIRE_BF16))
        return refuse(s, err, SS_EINVAL, "bad request: wire = %d (0 fp32, 1 fp16, 2 bf16)",
                      bags->wire);
    if (!rpc_token_ok(bags->token, s->token))
        return refuse(s, err, SS_EINVAL, "request refused: missing or wrong job token");
    int n = bags->n, k = s->k;
    if (n < 1 || n > MAX_EXAMPLES)
        return refuse(s, err, SS_EINVAL, "bad request: n = %d examples (1..%d)", n, MAX_EXAMPLES);
    if (!bags->shards || bags->shards->len != (guint)k * 4 ||
        memcmp(bags->shards->data, s->shard_ids, (size_t)k * 4) != 0)
        return refuse(s, err, SS_EINVAL,
                      "bad request: the shards must be this PS's %d shards in its order", k);
    size_t n_off = (size_t)n * k + 1;
    if (!bags->offsets || bags->offsets->len != n_off * 4)
        return refuse(s, err, SS_EINVAL, "bad request: offsets hold %u bytes, %zu expected",
                      bags->offsets ? bags->offsets->len : 0, n_off * 4);
    const int32_t *off = (const int32_t *)bags->offsets->data;
    if (off[0] != 0)
        return refuse(s, err, SS_EINVAL, "bad request: offsets[0] = %d, not 0", off[0]);
    for (size_t i = 1; i < n_off; i++)
        if (off[i] < off[i - 1] || off[i] > MAX_IDS)
            return refuse(s, err, SS_EINVAL, "bad request: offsets[%zu] = %d out of order or range",
                          i, off[i]);
    size_t n_ids = (size_t)off[n_off - 1];
    if (!bags->ids || bags->ids->len != n_ids * idb)
        return refuse(s, err, SS_EINVAL, "bad request: ids hold %u bytes, %zu expected",
                      bags->ids ? bags->ids->len : 0, n_ids * idb);
    const uint64_t *ids = (const uint64_t *)bags->ids->data;
    if (idb == 4) {
        const uint32_t *narrow = (const uint32_t *)bags->ids->data;
        struct scratch *b = scratch();
        uint64_t *wide = b->ids = ss_grown(b->ids, &b->ids_cap, n_ids + 1, sizeof(uint64_t));
        for (size_t q = 0; q < n_ids; q++)
            wide[q] = narrow[q];
        ids = wide;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++)
            for (int32_t q = off[i * k + j]; q < off[i * k + j + 1]; q++)
                if (ids[q] < (uint64_t)s->lo[j] || ids[q] >= (uint64_t)s->hi[j])
                    return refuse(s, err, SS_EINVAL,
                                  "bad request: row %llu of example %d is out of shard %d's rows "
                                  "[%lld, %lld)", (unsigned long long)ids[q], i, s->shard_ids[j],
                                  (long long)s->lo[j], (long long)s->hi[j]);
    *view = (struct batch){.n = n, .cap = n, .n_tables = k, .id_cap = n_ids,
                           .off = (int32_t *)off, .ids = (uint64_t *)ids};
    if (bags->__isset_weights && bags->weights) { /* libsvm values: a weighted bag */
        if (bags->weights->len != n_ids * 4)
            return refuse(s, err, SS_EINVAL, "bad request: weights hold %u bytes, "
                               "%zu expected", bags->weights->len, n_ids * 4);
        view->wts = (float *)bags->weights->data;
        view->weighted = 1;
        for (size_t q = 0; q < n_ids; q++)
            if (!isfinite(view->wts[q]))
                return refuse(s, err, SS_EINVAL, "bad request: weight %zu is not "
                                   "finite", q);
    }
    return TRUE;
}

/* CPU seconds of the calling thread: busy time that a crowded machine's
 * preemptions do not inflate. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Adds the CPU time since t0; a lookup also counts the rows it served
 * (the profiled cost per row covers its lookup and its push). */
static void count_work(struct embps_service *s, const struct batch *v, double t0, int lookup)
{
    __atomic_add_fetch(&s->busy_ns, (int64_t)((cpu_now() - t0) * 1e9), __ATOMIC_RELAXED);
    for (int j = 0; lookup && j < s->k; j++) {
        int64_t rows = 0;
        for (int i = 0; i < v->n; i++)
            rows += v->off[i * s->k + j + 1] - v->off[i * s->k + j];
        __atomic_add_fetch(&s->served[j], rows, __ATOMIC_RELAXED);
    }
}

static gboolean ps_lookup(ssEmbeddingPSIf *iface, GByteArray **ret, const ssBags *bags,
                          ssRpcError **err, GError **error)
{
    (void)error;
    struct embps_service *s = ((PsHandler *)iface)->svc;
    struct batch view;
    scratch()->kept_n = 0;
    if (!check_bags(s, bags, &view, err))
        return FALSE;
    keep_lookup(s->k, &view);
    int form = bags->__isset_wire ? bags->wire : WIRE_FP32;
    size_t n = (size_t)embps_bags(&view) * (size_t)s->dim; /* the non-empty bags only */
    size_t want = wire_bytes(form, n);
    if (want > SS_MAX_FIELD_BYTES)
        return refuse(s, err, SS_EINVAL, "bad request: its answer would be %zu "
                           "bytes, more than the %u a message field holds (fewer examples a "
                           "batch)", want, SS_MAX_FIELD_BYTES);
    guint bytes = (guint)want;
    double t0 = cpu_now();
    GByteArray *a = rpc_answer(ret, bytes);
    if (form == WIRE_FP32) {
        embps_pool_bags(s->t, &view, (float *)a->data);
    } else {
        float *v = scratch_floats(n);
        embps_pool_bags(s->t, &view, v);
        wire_encode(form, v, n, a->data);
    }
    count_work(s, &view, t0, 1);
    __atomic_add_fetch(&s->st.lookups, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->st.bytes_in, bags->ids->len + bags->offsets->len, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->st.bytes_out, bytes, __ATOMIC_RELAXED);
    return TRUE;
}

static gboolean ps_push(ssEmbeddingPSIf *iface, const ssBags *bags, const GByteArray *grads,
                        const gdouble lr_scale, ssRpcError **err, GError **error)
{
    (void)error;
    struct embps_service *s = ((PsHandler *)iface)->svc;
    struct batch view;
    if (bags->__isset_reuse && bags->reuse) {
        if (!rpc_token_ok(bags->token, s->token))
            return refuse(s, err, SS_EINVAL, "request refused: missing or wrong job token");
        if (!kept_lookup(s->k, &view))
            return refuse(s, err, SS_EINVAL, "bad request: a push reusing the bags of a lookup "
                          "this connection has not just made");
    } else if (!check_bags(s, bags, &view, err)) {
        return FALSE;
    }
    if (!(lr_scale >= 0 && lr_scale <= 1)) /* NaN too */
        return refuse(s, err, SS_EINVAL, "bad request: lr_scale %g is not in [0, 1]",
                           lr_scale);
    view.lr_scale = (float)lr_scale;
    int form = bags->__isset_wire ? bags->wire : WIRE_FP32;
    size_t n = (size_t)embps_bags(&view) * (size_t)s->dim, want = wire_bytes(form, n);
    if (!grads || grads->len != want)
        return refuse(s, err, SS_EINVAL, "bad request: grads hold %u bytes, %zu "
                           "expected (the non-empty bags' in the request's wire form)",
                           grads ? grads->len : 0, want);
    double t0 = cpu_now();
    if (form == WIRE_FP32) {
        embps_push_bags(s->t, &view, (const float *)grads->data);
    } else {
        float *v = scratch_floats(n);
        if (wire_decode(form, grads->data, grads->len, v, n) < 0)
            return refuse(s, err, SS_EINVAL, "bad request: the grads' fp16 scale is no "
                          "positive finite number");
        embps_push_bags(s->t, &view, v);
    }
    count_work(s, &view, t0, 0);
    __atomic_add_fetch(&s->st.pushes, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->st.bytes_in, want + (bags->ids ? bags->ids->len : 0) +
                           (bags->offsets ? bags->offsets->len : 0),
                       __ATOMIC_RELAXED);
    return TRUE;
}

/* A RowSync array's bytes, and their length: an unset one is empty. */
static const void *bytes_of(const GByteArray *a)
{
    return a ? a->data : NULL;
}

static size_t len_of(const GByteArray *a)
{
    return a ? a->len : 0;
}

/* The n entries of a RowSync array of size bytes each (n from the first
 * array checked: *n < 0). */
static gboolean count_of(struct embps_service *s, const GByteArray *a, size_t size, int64_t *n,
                         const char *name, ssRpcError **err)
{
    size_t len = len_of(a);
    if (*n < 0 && len % size == 0 && len / size <= MAX_IDS)
        *n = (int64_t)(len / size);
    if (*n < 0 || len != (size_t)*n * size)
        return refuse(s, err, SS_EINVAL, "bad request: %s holds %zu bytes, not a whole number of "
                      "%zu-byte entries matching the others (at most %d)", name, len, size, MAX_IDS);
    return TRUE;
}

/* Each (at, row) of a RowSync names a shard of this PS and a row inside it. */
static gboolean check_rows(struct embps_service *s, const GByteArray *at, const GByteArray *rows,
                           int64_t n, const char *what, ssRpcError **err)
{
    const int32_t *a = bytes_of(at);
    const uint64_t *r = bytes_of(rows);
    for (int64_t i = 0; i < n; i++) {
        if (a[i] < 0 || a[i] >= s->k)
            return refuse(s, err, SS_EINVAL, "bad request: %s %lld names shard %d of this PS's %d",
                          what, (long long)i, a[i], s->k);
        if (r[i] < (uint64_t)s->lo[a[i]] || r[i] >= (uint64_t)s->hi[a[i]])
            return refuse(s, err, SS_EINVAL,
                          "bad request: %s %lld: row %llu is out of shard %d's rows [%lld, %lld)",
                          what, (long long)i, (unsigned long long)r[i], s->shard_ids[a[i]],
                          (long long)s->lo[a[i]], (long long)s->hi[a[i]]);
    }
    return TRUE;
}

static gboolean ps_rows(ssEmbeddingPSIf *iface, ssRowAnswer **ret, const ssRowSync *q,
                        ssRpcError **err, GError **error)
{
    (void)error;
    struct embps_service *s = ((PsHandler *)iface)->svc;
    if (!rpc_token_ok(q->token, s->token))
        return refuse(s, err, SS_EINVAL, "request refused: missing or wrong job token");
    if (!q->shards || q->shards->len != (guint)s->k * 4 ||
        memcmp(q->shards->data, s->shard_ids, (size_t)s->k * 4) != 0)
        return refuse(s, err, SS_EINVAL,
                      "bad request: the shards must be this PS's %d shards in its order", s->k);
    if (!embps_clocked(s->t))
        return refuse(s, err, SS_EINVAL, "bad request: rows asked of a PS that keeps no row "
                      "clocks (its config has embedding_cache.rows = 0)");
    int stride = embps_stride(s->t);
    int64_t m = -1, g = -1;
    if (!count_of(s, q->add_at, 4, &m, "add_at", err) ||
        !count_of(s, q->add_rows, 8, &m, "add_rows", err) ||
        !count_of(s, q->add_delta, (size_t)stride * 4, &m, "add_delta", err) ||
        !count_of(s, q->add_count, 4, &m, "add_count", err) ||
        !count_of(s, q->get_at, 4, &g, "get_at", err) ||
        !count_of(s, q->get_rows, 8, &g, "get_rows", err) ||
        !count_of(s, q->get_have, 4, &g, "get_have", err) ||
        !check_rows(s, q->add_at, q->add_rows, m, "added row", err) ||
        !check_rows(s, q->get_at, q->get_rows, g, "asked row", err))
        return FALSE;
    if (q->bound < 0)
        return refuse(s, err, SS_EINVAL, "bad request: bound = %d < 0", q->bound);
    if ((size_t)g * (size_t)stride * 4 > SS_MAX_FIELD_BYTES)
        return refuse(s, err, SS_EINVAL, "bad request: %lld rows asked, whose answer would be "
                      "more than the %u bytes a message field holds", (long long)g,
                      SS_MAX_FIELD_BYTES);
    double t0 = cpu_now();
    GByteArray *clocks = g_byte_array_sized_new((guint)g * 4), *rows = g_byte_array_new();
    g_byte_array_set_size(clocks, (guint)g * 4);
    /* the rows sent are known only once the clocks are read: room for all */
    g_byte_array_set_size(rows, (guint)((size_t)g * stride * 4));
    struct row_req r = {stride, (size_t)m, bytes_of(q->add_at), bytes_of(q->add_rows),
                        bytes_of(q->add_delta), bytes_of(q->add_count), (size_t)g,
                        bytes_of(q->get_at), bytes_of(q->get_rows), bytes_of(q->get_have),
                        (uint32_t)q->bound, (uint32_t *)clocks->data, (float *)rows->data};
    size_t sent = embps_rows(s->t, &r);
    g_byte_array_set_size(rows, (guint)(sent * stride * 4));
    __atomic_add_fetch(&s->busy_ns, (int64_t)((cpu_now() - t0) * 1e9), __ATOMIC_RELAXED);
    const int32_t *at = bytes_of(q->get_at);
    int64_t *per = ss_xcalloc((size_t)s->k, sizeof(int64_t)); /* rows served, for load_s */
    for (int64_t i = 0; i < g; i++)
        per[at[i]]++;
    for (int j = 0; j < s->k; j++)
        if (per[j])
            __atomic_add_fetch(&s->served[j], per[j], __ATOMIC_RELAXED);
    free(per);
    (*ret)->clocks = clocks;
    (*ret)->rows = rows;
    (*ret)->__isset_clocks = (*ret)->__isset_rows = TRUE;
    __atomic_add_fetch(&s->st.row_syncs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->st.rows_sent, (int64_t)sent, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->st.rows_added, m, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->st.bytes_in, len_of(q->add_at) + len_of(q->add_rows) +
                       len_of(q->add_delta) + len_of(q->add_count) + len_of(q->get_at) +
                       len_of(q->get_rows) + len_of(q->get_have), __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->st.bytes_out, clocks->len + rows->len, __ATOMIC_RELAXED);
    return TRUE;
}

static gboolean ps_save(ssEmbeddingPSIf *iface, gint64 *ret, const GByteArray *token,
                        const gchar *path, ssRpcError **err, GError **error)
{
    (void)error;
    struct embps_service *s = ((PsHandler *)iface)->svc;
    int model = s->model_root[0] && rpc_save_path_ok(path, s->model_root);
    if (!rpc_save_request_ok(&s->st.refused, err, token, s->token, path,
                             model ? s->model_root : s->save_root))
        return FALSE;
    struct ss_err e = {0}; /* the model's folder made on this host: output.dir may be its own */
    if ((model && ss_file_mkdir_p(s->model_root, &e) < 0) || embps_save(s->t, path, &e) < 0)
        return rpc_refuse(NULL, err, e.code, "%s", e.msg); /* the client says "save failed" */
    *ret = (gint64)embps_bytes(s->t);
    return TRUE;
}

static void ps_handler_init(PsHandler *h)
{
    h->svc = NULL;
}

static void ps_handler_class_init(PsHandlerClass *cls)
{
    ssEmbeddingPSHandlerClass *base = SS_EMBEDDING_P_S_HANDLER_CLASS(cls);
    base->lookup = ps_lookup;
    base->push = ps_push;
    base->rows = ps_rows;
    base->save = ps_save;
}

struct embps_service *embps_service_create(struct emb_tables *t, const int32_t *shard_ids, int k,
                                           const char *token)
{
    struct embps_service *s = ss_xcalloc(1, sizeof *s);
    s->t = t;
    s->k = k;
    s->dim = embps_dim(t);
    s->shard_ids = ss_xmalloc((size_t)k * sizeof(int32_t));
    memcpy(s->shard_ids, shard_ids, (size_t)k * sizeof(int32_t));
    s->lo = ss_xmalloc((size_t)k * sizeof(int64_t));
    s->hi = ss_xmalloc((size_t)k * sizeof(int64_t));
    s->served = ss_xcalloc(k, sizeof(int64_t));
    s->cost = ss_xcalloc(k, sizeof(double));
    for (int j = 0; j < k; j++) {
        int64_t rows, table_rows;
        embps_held(t, j, &s->lo[j], &rows, &table_rows);
        s->hi[j] = s->lo[j] + rows;
    }
    snprintf(s->token, sizeof s->token, "%s", token);
    PsHandler *h = g_object_new(ps_handler_get_type(), NULL);
    h->svc = s;
    s->proc = rpc_processor_new(SS_TYPE_EMBEDDING_P_S_PROCESSOR, h);
    return s;
}

ThriftProcessor *embps_service_processor(struct embps_service *s)
{
    return s->proc;
}

void embps_service_stats(struct embps_service *s, struct embps_stats *st)
{
    st->lookups = __atomic_load_n(&s->st.lookups, __ATOMIC_RELAXED);
    st->pushes = __atomic_load_n(&s->st.pushes, __ATOMIC_RELAXED);
    st->refused = __atomic_load_n(&s->st.refused, __ATOMIC_RELAXED);
    st->row_syncs = __atomic_load_n(&s->st.row_syncs, __ATOMIC_RELAXED);
    st->rows_sent = __atomic_load_n(&s->st.rows_sent, __ATOMIC_RELAXED);
    st->rows_added = __atomic_load_n(&s->st.rows_added, __ATOMIC_RELAXED);
    st->bytes_in = __atomic_load_n(&s->st.bytes_in, __ATOMIC_RELAXED);
    st->bytes_out = __atomic_load_n(&s->st.bytes_out, __ATOMIC_RELAXED);
    st->busy_s = __atomic_load_n(&s->busy_ns, __ATOMIC_RELAXED) * 1e-9;
    st->load_s = 0;
    for (int j = 0; j < s->k; j++)
        st->load_s += __atomic_load_n(&s->served[j], __ATOMIC_RELAXED) * s->cost[j] * 1e-9;
}

void embps_service_costs(struct embps_service *s, const double *ns_per_row)
{
    memcpy(s->cost, ns_per_row, (size_t)s->k * sizeof(double));
}

void embps_service_free(struct embps_service *s)
{
    if (!s)
        return;
    g_object_unref(s->proc);
    free(s->shard_ids);
    free(s->lo);
    free(s->hi);
    free(s->served);
    free(s->cost);
    free(s);
}

void embps_service_save_root(struct embps_service *s, const char *dir, const char *model)
{
    snprintf(s->save_root, sizeof s->save_root, "%s", dir ? dir : "");
    snprintf(s->model_root, sizeof s->model_root, "%s", model ? model : "");
}
