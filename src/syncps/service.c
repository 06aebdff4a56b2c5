/* The sync PS service over Thrift: one partition [lo, hi) of the EASGD
 * center, updated under a lock so every request's exchange is atomic
 * (DESIGN §3: w_PS <- (1-a) w_PS + a w_i, answered with the new w_PS).
 * Requests are validated (token, offset, length, alpha); a bad one gets an
 * RpcError and the service goes on. */
#include "shadowsync/rpc.h"
#include "shadowsync/syncps.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void syncps_partition(size_t n, int P, int p, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)p / (size_t)P;
    *hi = n * (size_t)(p + 1) / (size_t)P;
}

struct syncps_service {
    pthread_mutex_t mu;
    float *center;
    size_t lo, hi;
    char token[64];
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
    for (size_t i = 0; i < len; i++) {
        float v = (1.0f - a) * s->center[i] + a * wi[i];
        s->center[i] = v;
        out[i] = v;
    }
    pthread_mutex_unlock(&s->mu);
    __atomic_add_fetch(&s->st.syncs, 1, __ATOMIC_RELAXED);
    return TRUE;
}

static void sync_handler_init(SyncHandler *h)
{
    h->svc = NULL;
}

static void sync_handler_class_init(SyncHandlerClass *cls)
{
    SS_SYNC_P_S_HANDLER_CLASS(cls)->elastic = sync_elastic;
}

struct syncps_service *syncps_service_create(const float *init, size_t lo, size_t hi,
                                             const char *token)
{
    struct syncps_service *s = ss_xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
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
