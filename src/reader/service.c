/* The reader service (DESIGN §2, §5): a reader role owns its share of the
 * training data (every example k with k mod job.readers = its index) and
 * answers next_batch with up to `max` examples, already parsed, as binary
 * blobs; n = 0 once its share has ended. Requests are validated (token,
 * max) and a bad one is refused while the service serves on. Each
 * connection's thread fills a batch of its own, so the trainers' calls
 * parse in parallel; a save waits for the calls under way and holds off
 * new ones, so no batch is half handed out when the position is taken. */
#include "internal.h"
#include "shadowsync/rpc.h"

#include <errno.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct spare {
    struct batch b;
    struct spare *next;
};

struct reader_service {
    pthread_rwlock_t serving;   /* next_batch calls share it; a save takes it alone */
    pthread_mutex_t mu;         /* the counts and the spare batches */
    struct reader *r;
    struct spare *spare;
    int cap, n_dense, n_cat;    /* a batch's room and shape */
    char token[64];
    char save_root[4096];       /* saves go only below it: the job's checkpoint.dir */
    ThriftProcessor *proc;
    int64_t served, examples, refused;
};

typedef struct {
    ssReaderHandler parent;
    struct reader_service *svc;
} RdHandler;
typedef struct {
    ssReaderHandlerClass parent;
} RdHandlerClass;

G_DEFINE_TYPE(RdHandler, rd_handler, SS_TYPE_READER_HANDLER)

static GByteArray *blob(const void *p, size_t bytes)
{
    GByteArray *a = g_byte_array_sized_new((guint)bytes);
    g_byte_array_append(a, p, (guint)bytes);
    return a;
}

/* A call's batch back to the spares, and the call's share of serving. */
static void rd_put_back(struct reader_service *s, struct spare *sp)
{
    pthread_mutex_lock(&s->mu);
    sp->next = s->spare;
    s->spare = sp;
    pthread_mutex_unlock(&s->mu);
    pthread_rwlock_unlock(&s->serving);
}

static gboolean rd_next(ssReaderIf *iface, ssBatchReply **ret, const GByteArray *token,
                        const gint32 max, ssRpcError **err, GError **error)
{
    (void)error;
    struct reader_service *s = ((RdHandler *)iface)->svc;
    if (!rpc_token_ok(token, s->token))
        return rpc_refuse(&s->refused, err, SS_EINVAL, "request refused: missing or wrong job token");
    if (max < 1 || max > s->cap)
        return rpc_refuse(&s->refused, err, SS_EINVAL, "bad request: max = %d (1..%d)", max,
                          s->cap);
    struct ss_err e = {0};
    pthread_rwlock_rdlock(&s->serving);
    pthread_mutex_lock(&s->mu);
    struct spare *sp = s->spare;
    if (sp)
        s->spare = sp->next;
    pthread_mutex_unlock(&s->mu);
    if (!sp) {
        sp = ss_xcalloc(1, sizeof *sp);
        batch_init(&sp->b, s->cap, s->n_dense, s->n_cat);
    }
    struct batch *b = &sp->b;
    batch_clear(b);
    b->cap = max;
    int rc = reader_next(s->r, b, &e);
    b->cap = s->cap;
    if (rc < 0) {
        rd_put_back(s, sp);
        return rpc_refuse(&s->refused, err, rc, "reader failed: %s", e.msg);
    }
    ssBatchReply *r = *ret;
    int n = b->n, T = b->n_tables, nd = b->n_dense;
    r->n = n;
    r->n_dense = nd;
    r->n_tables = T;
    r->label = blob(b->label, (size_t)n * 4);
    r->dense = blob(b->dense, (size_t)n * nd * 4);
    r->offsets = blob(b->off, ((size_t)n * T + 1) * 4);
    r->ids = blob(b->ids, (size_t)b->off[(size_t)n * T] * 8);
    r->example_ids = blob(b->example_id, (size_t)n * 8);
    if (b->weighted) { /* libsvm values */
        r->weights = blob(b->wts, (size_t)b->off[(size_t)n * T] * 4);
        r->__isset_weights = TRUE;
    }
    r->__isset_n = r->__isset_n_dense = r->__isset_n_tables = r->__isset_label = TRUE;
    r->__isset_dense = r->__isset_offsets = r->__isset_ids = r->__isset_example_ids = TRUE;
    struct reader_stats st;
    reader_stats(s->r, &st);
    r->bad_lines = st.bad_lines;
    r->__isset_bad_lines = TRUE;
    r->done = reader_fraction(s->r);
    r->__isset_done = TRUE;
    r->at = b->at;
    r->__isset_at = TRUE;
    pthread_mutex_lock(&s->mu);
    s->served++;
    s->examples += n;
    pthread_mutex_unlock(&s->mu);
    rd_put_back(s, sp);
    return TRUE;
}

static gboolean rd_save(ssReaderIf *iface, gint64 *ret, const GByteArray *token,
                        const gchar *path, ssRpcError **err, GError **error)
{
    (void)error;
    struct reader_service *s = ((RdHandler *)iface)->svc;
    if (!rpc_save_request_ok(&s->refused, err, token, s->token, path, s->save_root))
        return FALSE;
    struct ss_err e = {0};
    pthread_rwlock_wrlock(&s->serving); /* no batch half handed out */
    int rc = reader_save_pos(s->r, path, &e);
    pthread_rwlock_unlock(&s->serving);
    if (rc < 0)
        return rpc_refuse(NULL, err, SS_EIO, "%s", e.msg); /* the client says "save failed" */
    *ret = (gint64)sizeof(struct reader_pos);
    return TRUE;
}

static void rd_handler_init(RdHandler *h)
{
    h->svc = NULL;
}

static void rd_handler_class_init(RdHandlerClass *cls)
{
    SS_READER_HANDLER_CLASS(cls)->next_batch = rd_next;
    SS_READER_HANDLER_CLASS(cls)->save = rd_save;
}

struct reader_service *reader_service_create(struct reader *r, int n_dense, int n_cat,
                                             const char *token)
{
    struct reader_service *s = ss_xcalloc(1, sizeof *s);
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra); /* a save is not starved by a stream of calls */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->serving, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&s->mu, NULL);
    s->r = r;
    snprintf(s->token, sizeof s->token, "%s", token);
    s->cap = 4096;
    s->n_dense = n_dense;
    s->n_cat = n_cat;
    RdHandler *h = g_object_new(rd_handler_get_type(), NULL);
    h->svc = s;
    s->proc = rpc_processor_new(SS_TYPE_READER_PROCESSOR, h);
    return s;
}

ThriftProcessor *reader_service_processor(struct reader_service *s)
{
    return s->proc;
}

void reader_service_counts(struct reader_service *s, int64_t *served, int64_t *examples,
                           int64_t *refused)
{
    pthread_mutex_lock(&s->mu);
    *served = s->served;
    *examples = s->examples;
    pthread_mutex_unlock(&s->mu);
    *refused = __atomic_load_n(&s->refused, __ATOMIC_RELAXED);
}

void reader_service_free(struct reader_service *s)
{
    if (!s)
        return;
    g_object_unref(s->proc);
    while (s->spare) {
        struct spare *sp = s->spare;
        s->spare = sp->next;
        batch_free(&sp->b);
        free(sp);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_rwlock_destroy(&s->serving);
    free(s);
}

/* A resumed reader continues its share where the checkpoint left it; the
 * shares are only the same with the same number of readers. */
static int resume_share(struct reader *r, const struct job_plan *p, struct ss_err *e)
{
    char path[4400], past[4400];
    snprintf(path, sizeof path, "%s/reader-svc-%d.pos", p->resume_from, p->role_index);
    snprintf(past, sizeof past, "%s/reader-svc-%d.pos", p->resume_from, p->count[ROLE_READER]);
    char first[4400];
    snprintf(first, sizeof first, "%s/reader-svc-0.pos", p->resume_from);
    if (access(first, F_OK) != 0)
        return ss_fail(e, SS_EINVAL, "%s was written by a job without reader services (its "
                       "trainers read data.train themselves): resume with job.readers = 0",
                       p->resume_from);
    if (access(path, F_OK) != 0 || access(past, F_OK) == 0)
        return ss_fail(e, SS_EINVAL, "%s was written by another number of readers than "
                       "job.readers = %d (each reader's share of the data depends on it): "
                       "resume with the same job.readers", p->resume_from, p->count[ROLE_READER]);
    return reader_load_pos(r, path, e);
}

int reader_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    struct endpoint me = {{0}, 0}, *all = ss_xcalloc(p->size, sizeof *all);
    struct reader *r = NULL;
    struct reader_service *svc = NULL;
    struct rpc_server *srv = NULL;
    struct schema s;
    int rc = schema_from_config(&s, c, c->data.train, e);
    if (rc == 0)
        rc = reader_open(&r, c->data.train, &s, c->data.max_examples, c->data.report_bad_lines,
                         e);
    if (rc == 0)
        rc = reader_check_passes(r, c->data.epochs, e);
    if (rc == 0) { /* (the master says how: trainer_run) */
        reader_set_epochs(r, c->data.epochs);
        reader_set_share(r, p->role_index, p->count[ROLE_READER], c->data.split, NULL);
    }
    if (rc == 0 && p->resume_from[0])
        rc = resume_share(r, p, e);
    if (rc == 0) {
        svc = reader_service_create(r, s.n_dense, s.n_cat, p->token);
        reader_service_batch_cap(svc, c->trainer.batch_size);
        reader_service_save_root(svc, c->checkpoint.dir);
        rc = rpc_role_server(&srv, c, p, reader_service_processor(svc),
                             1u << 20, me.host, e); /* a message: a token, a max or a path */
    }
    rpc_announce(p, &me, rc == 0 ? srv : NULL, all);
    double t0 = ss_now();
    rpc_wait_job_end(p);
    if (srv)
        rpc_server_stop(srv);
    if (svc) {
        struct reader_stats st = {0};
        int64_t served, examples, refused;
        reader_stats(r, &st);
        reader_service_counts(svc, &served, &examples, &refused);
        double fig[ROLE_FIGURES] = {(double)served, (double)examples, (double)st.bad_lines,
                                    (double)refused, ss_now() - t0};
        memcpy(p->figures, fig, sizeof fig);
    }
    reader_service_free(svc);
    if (r)
        reader_close(r);
    free(all);
    return rc;
}

void reader_service_batch_cap(struct reader_service *s, int cap)
{
    s->cap = cap; /* (before serving: the spare batches are made at this size) */
}

void reader_service_save_root(struct reader_service *s, const char *dir)
{
    snprintf(s->save_root, sizeof s->save_root, "%s", dir ? dir : "");
}
