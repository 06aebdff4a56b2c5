/* The sync PS service over Thrift: one partition [lo, hi) of the EASGD
 * center, updated under a lock so every request's exchange is atomic
 * (DESIGN §3: w_PS <- (1-a) w_PS + a w_i, answered with the new w_PS).
 * Requests are validated (token, offset, length, alpha); a bad one gets an
 * RpcError and the service goes on. */
#include "shadowsync/rpc.h"
#include "shadowsync/syncps.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct syncps_service {
    pthread_mutex_t mu;
    float *center;
    size_t lo, hi, n;           /* its slice of the n-float center */
    char token[64];
    char save_root[4096];       /* saves go only below it: the job's checkpoint.dir */
    ThriftProcessor *proc;
    struct syncps_stats st;
};

typedef struct {
    ssSyncPSHandler parent;
    struct syncps_service *svc;
} SyncHandler;
typedef struct {
    ssSyncPSHandlerClass parent;
} SyncHandlerClass;

G_DEFINE_TYPE(SyncHandler, sync_handler, SS_TYPE_SYNC_P_S_HANDLER)

#define refuse(s, err, code, ...) rpc_refuse(&(s)->st.refused, err, code, __VA_ARGS__)

void syncps_elastic_apply(float *center, const float *w, float *out, size_t n, float a)
{
    for (size_t i = 0; i < n; i++) {
        float v = (1.0f - a) * center[i] + a * w[i];
        center[i] = v;
        out[i] = v;
    }
}

static gboolean sync_elastic(ssSyncPSIf *iface, GByteArray **ret, const GByteArray *token,
                             const gint64 offset, const GByteArray *w, const gdouble alpha,
                             ssRpcError **err, GError **error)
{
    (void)error;
    struct syncps_service *s = ((SyncHandler *)iface)->svc;
    size_t len = s->hi - s->lo;
    if (!rpc_token_ok(token, s->token))
        return refuse(s, err, SS_EINVAL, "request refused: missing or wrong job token");
    if (offset != (gint64)s->lo)
        return refuse(s, err, SS_EINVAL, "bad request: offset %lld, this sync PS holds [%zu, %zu)",
                      (long long)offset, s->lo, s->hi);
    if (!w || w->len != len * 4)
        return refuse(s, err, SS_EINVAL, "bad request: w holds %u bytes, %zu expected",
                      w ? w->len : 0, len * 4);
    if (!(alpha >= 0 && alpha <= 1))
        return refuse(s, err, SS_EINVAL, "bad request: alpha %g is not in [0, 1]", alpha);
    const float *wi = (const float *)w->data;
    float *out = (float *)rpc_answer(ret, len * 4)->data, a = (float)alpha;
    pthread_mutex_lock(&s->mu);
    syncps_elastic_apply(s->center, wi, out, len, a);
    pthread_mutex_unlock(&s->mu);
    __atomic_add_fetch(a > 0 ? &s->st.syncs : &s->st.reads, 1, __ATOMIC_RELAXED);
    return TRUE;
}

#define CENTER_MAGIC "SSCENTR\0"

int syncps_save(struct syncps_service *s, size_t n, const char *path, struct ss_err *e)
{
    uint64_t head[3] = {n, s->lo, s->hi};
    size_t bytes = (s->hi - s->lo) * sizeof(float);
    float *v = ss_xmalloc(bytes ? bytes : 1); /* a copy: no sync waits on the disk */
    pthread_mutex_lock(&s->mu);
    memcpy(v, s->center, bytes);
    pthread_mutex_unlock(&s->mu);
    struct ss_span parts[3] = {{CENTER_MAGIC, 8}, {head, sizeof head}, {v, bytes}};
    return ss_write_file(path, parts, 3, 0, v, e);
}

int syncps_load(float *slice, size_t n, size_t lo, size_t hi, char *const *paths, int k,
                struct ss_err *e)
{
    size_t got = 0;
    for (int i = 0; i < k; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f)
            return ss_fail(e, SS_EIO, "%s: cannot open: %s", paths[i], strerror(errno));
        char magic[8];
        uint64_t head[3];
        int rc = 0;
        if (fread(magic, 8, 1, f) != 1 || memcmp(magic, CENTER_MAGIC, 8) != 0 ||
            fread(head, sizeof head, 1, f) != 1)
            rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync center file", paths[i]);
        else if (head[0] != n || head[1] > head[2] || head[2] > n)
            rc = ss_fail(e, SS_EFORMAT, "%s: a center of %llu floats, the model has %zu",
                         paths[i], (unsigned long long)head[0], n);
        size_t from = head[1] > lo ? head[1] : lo, to = head[2] < hi ? head[2] : hi;
        if (rc == 0 && from < to) {
            if (fseek(f, 32 + (long)(from - head[1]) * 4, SEEK_SET) != 0 ||
                fread(slice + (from - lo), sizeof(float), to - from, f) != to - from)
                rc = ss_fail(e, SS_EFORMAT, "%s: truncated", paths[i]);
            got += to - from;
        }
        fclose(f);
        if (rc < 0)
            return rc;
    }
    if (got != hi - lo)
        return ss_fail(e, SS_EFORMAT, "the center files hold %zu of the %zu floats [%zu, %zu)",
                       got, hi - lo, lo, hi);
    return 0;
}

static gboolean sync_save(ssSyncPSIf *iface, gint64 *ret, const GByteArray *token,
                          const gchar *path, ssRpcError **err, GError **error)
{
    (void)error;
    struct syncps_service *s = ((SyncHandler *)iface)->svc;
    if (!rpc_save_request_ok(&s->st.refused, err, token, s->token, path, s->save_root))
        return FALSE;
    struct ss_err e = {0};
    if (syncps_save(s, s->n, path, &e) < 0)
        return rpc_refuse(NULL, err, SS_EIO, "%s", e.msg); /* the client says "save failed" */
    *ret = (gint64)((s->hi - s->lo) * 4 + 32);
    return TRUE;
}

static void sync_handler_init(SyncHandler *h)
{
    h->svc = NULL;
}

static void sync_handler_class_init(SyncHandlerClass *cls)
{
    SS_SYNC_P_S_HANDLER_CLASS(cls)->elastic = sync_elastic;
    SS_SYNC_P_S_HANDLER_CLASS(cls)->save = sync_save;
}

struct syncps_service *syncps_service_create(const float *init, size_t n, size_t lo, size_t hi,
                                             const char *token)
{
    struct syncps_service *s = ss_xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->n = n;
    s->lo = lo;
    s->hi = hi;
    s->center = ss_aligned((hi - lo + 1) * sizeof(float));
    memcpy(s->center, init, (hi - lo) * sizeof(float));
    snprintf(s->token, sizeof s->token, "%s", token);
    SyncHandler *h = g_object_new(sync_handler_get_type(), NULL);
    h->svc = s;
    s->proc = rpc_processor_new(SS_TYPE_SYNC_P_S_PROCESSOR, h);
    return s;
}

ThriftProcessor *syncps_service_processor(struct syncps_service *s)
{
    return s->proc;
}

void syncps_service_stats(struct syncps_service *s, struct syncps_stats *st)
{
    st->syncs = __atomic_load_n(&s->st.syncs, __ATOMIC_RELAXED);
    st->reads = __atomic_load_n(&s->st.reads, __ATOMIC_RELAXED);
    st->refused = __atomic_load_n(&s->st.refused, __ATOMIC_RELAXED);
}

void syncps_service_free(struct syncps_service *s)
{
    if (!s)
        return;
    g_object_unref(s->proc);
    pthread_mutex_destroy(&s->mu);
    free(s->center);
    free(s);
}

void syncps_service_save_root(struct syncps_service *s, const char *dir)
{
    snprintf(s->save_root, sizeof s->save_root, "%s", dir ? dir : "");
}
