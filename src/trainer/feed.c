/* The prefetch queue of a trainer in a cluster job (DESIGN §5): a thread
 * asks the reader services for batches, in turn, and keeps up to `depth`
 * of them ready; workers take them in order. A reader answering n = 0 has
 * ended its share; the feed ends when every reader has. Answers are
 * checked (sizes, counts) before a worker sees them. A batch's place in
 * the job's data (its `at`, which the rates' schedule counts by) is its
 * place in its reader's plus what the others had handed out by their last
 * answers here. */
#include "shadowsync/reader.h"
#include "shadowsync/rpc.h"
#include "shadowsync/trainer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rd {
    char name[128], host[64];
    int port, active;
    int64_t bad_lines;          /* the last count it sent (under the feed's mu) */
    int64_t next;               /* the examples it had handed out after its last batch here */
    double done;                /* how far through its data, as it last said (0..1; mu) */
    struct rpc_conn *conn;
    ssReaderIf *client;
};

struct batch_feed {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    ssBatchReply **q;
    int depth, head, count, done, stop, rc;
    int pause, pulling;         /* checkpoints: no pull while paused; one in progress */
    int pulling_rd;             /* the reader of that pull (mu) */
    int halt;                   /* feed_halt: no pull again; the queue drains, then it ends */
    pthread_cond_t idle;
    struct ss_err err;
    struct rd *rd;
    int n_rd, batch_size;
    int next_rd;                /* the reader the next pull asks (mu): a checkpoint keeps it */
    GByteArray *token;
};

static int pull(struct batch_feed *f, struct rd *r, ssBatchReply **out)
{
    ssBatchReply *reply = g_object_new(SS_TYPE_BATCH_REPLY, NULL);
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    if (!ss_reader_client_next_batch(r->client, &reply, f->token, f->batch_size, &rerr, &gerr) ||
        rerr) {
        g_object_unref(reply);
        return rpc_call_failed(&f->err, r->name, r->host, r->port, "next_batch", rerr, gerr);
    }
    *out = reply;
    return 0;
}

static void *feed_main(void *arg)
{
    struct batch_feed *f = arg;
    int rc = 0, left = f->n_rd;
    for (int i = f->next_rd; left > 0 && rc == 0; i = (i + 1) % f->n_rd) {
        struct rd *r = &f->rd[i];
        if (!r->active)
            continue;
        pthread_mutex_lock(&f->mu);
        while ((f->pause || f->halt) && !f->stop)
            pthread_cond_wait(&f->not_full, &f->mu);
        f->pulling = !f->stop;
        f->pulling_rd = i;
        pthread_mutex_unlock(&f->mu);
        if (!f->pulling)
            break;
        ssBatchReply *reply = NULL;
        if ((rc = pull(f, r, &reply)) < 0)
            break;
        pthread_mutex_lock(&f->mu);
        if (reply->bad_lines > r->bad_lines)
            r->bad_lines = reply->bad_lines;
        if (reply->at >= 0 && reply->n > 0) { /* its place among every reader's: the job's */
            int64_t others = 0;
            for (int q = 0; q < f->n_rd; q++)
                others += &f->rd[q] == r ? 0 : f->rd[q].next;
            if (reply->at + reply->n > r->next)
                r->next = reply->at + reply->n;
            reply->at += others;
        }
        if (reply->n <= 0)
            r->done = 1;
        else if (reply->done > r->done) /* NaN fails this too */
            r->done = reply->done < 1 ? reply->done : 1;
        f->next_rd = (i + 1) % f->n_rd;
        pthread_mutex_unlock(&f->mu);
        if (reply->n <= 0) {
            r->active = 0;
            left--;
            g_object_unref(reply);
            pthread_mutex_lock(&f->mu);
            f->pulling = 0;
            pthread_cond_broadcast(&f->idle);
            pthread_cond_broadcast(&f->not_empty); /* a halt waits for no pull in flight */
            pthread_mutex_unlock(&f->mu);
            continue;
        }
        pthread_mutex_lock(&f->mu);
        while (f->count == f->depth && !f->stop)
            pthread_cond_wait(&f->not_full, &f->mu);
        if (f->stop) {
            pthread_mutex_unlock(&f->mu);
            g_object_unref(reply);
            break;
        }
        f->q[(f->head + f->count++) % f->depth] = reply;
        f->pulling = 0;
        pthread_cond_broadcast(&f->idle);
        if (f->halt || f->pause) /* the others waiting on this pull see the end after it */
            pthread_cond_broadcast(&f->not_empty);
        else
            pthread_cond_signal(&f->not_empty);
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_lock(&f->mu);
    f->pulling = 0;
    pthread_cond_broadcast(&f->idle);
    f->done = 1;
    f->rc = rc;
    pthread_cond_broadcast(&f->not_empty);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

#define BLOB_OK(a, bytes) ((a) && (size_t)(a)->len == (size_t)(bytes))

/* Copies a checked answer into b. */
static int take(const ssBatchReply *r, struct batch *b, struct ss_err *e)
{
    int n = r->n, T = b->n_tables, nd = b->n_dense;
    if (n > b->cap || r->n_tables != T || r->n_dense != nd || !BLOB_OK(r->label, n * 4) ||
        !BLOB_OK(r->dense, (size_t)n * nd * 4) || !BLOB_OK(r->offsets, ((size_t)n * T + 1) * 4) ||
        !BLOB_OK(r->example_ids, (size_t)n * 8))
        return ss_fail(e, SS_EFORMAT, "a reader sent a malformed batch (n %d, %d dense, %d "
                       "tables; the model has %d and %d)", n, r->n_dense, r->n_tables, nd, T);
    const int32_t *off = (const int32_t *)r->offsets->data;
    size_t n_ids = (size_t)off[(size_t)n * T];
    if (off[0] != 0 || !BLOB_OK(r->ids, n_ids * 8))
        return ss_fail(e, SS_EFORMAT, "a reader sent a batch whose ids do not match its offsets");
    for (size_t i = 1; i <= (size_t)n * T; i++)
        if (off[i] < off[i - 1])
            return ss_fail(e, SS_EFORMAT, "a reader sent offsets out of order");
    int weighted = r->__isset_weights && r->weights;
    if (weighted && !BLOB_OK(r->weights, n_ids * 4))
        return ss_fail(e, SS_EFORMAT, "a reader sent weights that do not match its ids");
    batch_reserve_ids(b, n_ids);
    b->weighted = 0;
    if (weighted) {
        batch_weigh(b, 0);
        memcpy(b->wts, r->weights->data, r->weights->len);
    }
    memcpy(b->label, r->label->data, r->label->len);
    memcpy(b->dense, r->dense->data, r->dense->len);
    memcpy(b->off, off, r->offsets->len);
    memcpy(b->ids, r->ids->data, r->ids->len);
    memcpy(b->example_id, r->example_ids->data, r->example_ids->len);
    b->n = n;
    b->at = r->at;
    return 0;
}

int feed_next(struct batch_feed *f, struct batch *b, struct ss_err *e)
{
    pthread_mutex_lock(&f->mu);
    /* paused: a pull in flight is drained too (its batch is no checkpoint's) */
    while (f->count == 0 && !f->done && !((f->pause || f->halt) && !f->pulling))
        pthread_cond_wait(&f->not_empty, &f->mu);
    /* halted: its data ends here, unless the last pull failed (its batch
     * would be lost: the reader has moved past it) */
    if (f->count == 0 && f->halt && !f->pulling && !(f->done && f->rc < 0)) {
        pthread_mutex_unlock(&f->mu);
        b->n = 0;
        return 0;
    }
    if (f->count == 0 && f->pause && !f->pulling && !f->done) {
        pthread_mutex_unlock(&f->mu);
        b->n = 0;
        return FEED_PAUSED;
    }
    if (f->count == 0) {
        int rc = f->rc;
        if (rc < 0 && e)
            *e = f->err;
        pthread_mutex_unlock(&f->mu);
        b->n = 0;
        return rc;
    }
    ssBatchReply *r = f->q[f->head];
    f->head = (f->head + 1) % f->depth;
    f->count--;
    pthread_cond_signal(&f->not_full);
    pthread_mutex_unlock(&f->mu);
    int rc = take(r, b, e);
    g_object_unref(r);
    return rc;
}

int feed_pause(struct batch_feed *f, int pause, double wait_s, struct ss_err *e)
{
    struct timespec until = ss_deadline(wait_s);
    int rc = 0;
    pthread_mutex_lock(&f->mu);
    f->pause = pause;
    pthread_cond_broadcast(&f->not_full);
    pthread_cond_broadcast(&f->not_empty);
    while (pause && f->pulling && rc == 0)
        if (pthread_cond_timedwait(&f->idle, &f->mu, &until) == ETIMEDOUT && f->pulling) {
            const struct rd *r = &f->rd[f->pulling_rd];
            rc = ss_fail(e, SS_ESTATE, "the checkpoint waited %.0f s for the batch being pulled "
                         "from %s (%s:%d), which did not come", wait_s, r->name, r->host, r->port);
        }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void feed_stop(struct batch_feed *f)
{
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_broadcast(&f->not_full);
    pthread_cond_broadcast(&f->not_empty);
    pthread_mutex_unlock(&f->mu);
}

void feed_halt(struct batch_feed *f)
{
    pthread_mutex_lock(&f->mu);
    f->halt = 1;
    pthread_cond_broadcast(&f->not_full);
    pthread_cond_broadcast(&f->not_empty);
    pthread_mutex_unlock(&f->mu);
}

double feed_fraction(struct batch_feed *f)
{
    double d = 1;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->n_rd; i++)
        d = f->rd[i].done < d ? f->rd[i].done : d;
    pthread_mutex_unlock(&f->mu);
    return d;
}

int64_t feed_bad_lines(struct batch_feed *f)
{
    int64_t sum = 0;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->n_rd; i++)
        sum += f->rd[i].bad_lines;
    pthread_mutex_unlock(&f->mu);
    return sum;
}

/* A feed whose thread has ended (or never started), its first n_clients
 * readers connected: freed. */
static void feed_unmake(struct batch_feed *f, int n_clients)
{
    for (int k = 0; k < f->n_rd; k++)
        rpc_conn_close(f->rd[k].conn); /* (NULL where none was made) */
    for (int k = 0; k < n_clients; k++)
        if (f->rd[k].client)
            g_object_unref(f->rd[k].client);
    g_byte_array_unref(f->token);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->not_empty);
    pthread_cond_destroy(&f->not_full);
    pthread_cond_destroy(&f->idle);
    free(f->q);
    free(f->rd);
    free(f);
}

void feed_free(struct batch_feed *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_broadcast(&f->not_full);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->th, NULL);
    for (int i = 0; i < f->count; i++)
        g_object_unref(f->q[(f->head + i) % f->depth]);
    feed_unmake(f, f->n_rd);
}

/* The order of the pulls and each reader's count, as a checkpoint keeps
 * them (text): a resume goes on with the reader that was next, and the
 * batches' places in the job's data count on from the same figures. */
#define FEED_STATE "shadowsync feed 1"

int feed_save(struct batch_feed *f, const char *path, struct ss_err *e)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out)
        return ss_fail(e, SS_ENOMEM, "%s: %s", path, strerror(errno));
    pthread_mutex_lock(&f->mu);
    fprintf(out, "%s\nreaders %d\nnext_reader %d\nhanded", FEED_STATE, f->n_rd, f->next_rd);
    for (int i = 0; i < f->n_rd; i++)
        fprintf(out, " %lld", (long long)f->rd[i].next);
    pthread_mutex_unlock(&f->mu);
    fputc('\n', out);
    fclose(out);
    struct ss_span part = {text, len};
    return ss_write_file(path, &part, 1, 0, text, e);
}

/* Reader i's count in a feed state is at most what that reader had handed
 * out at the snapshot, its reader-svc-i.pos beside it (the data's record),
 * with its bad lines (a batch's place counts lines still out for parsing,
 * which may yet turn out bad). */
static int feed_count_check(const char *path, int i, int64_t v, struct ss_err *e)
{
    char *dir = g_path_get_dirname(path), svc[4400];
    snprintf(svc, sizeof svc, "%s/reader-svc-%d.pos", dir, i);
    g_free(dir);
    struct reader_pos pos;
    int rc = reader_pos_read(svc, &pos, e);
    if (rc == 0 && v > pos.handed + pos.bad_lines)
        rc = ss_fail(e, SS_EFORMAT, "%s: reader %d's count %lld is past the %lld examples (and "
                     "%lld bad lines) it had handed out (%s): a damaged checkpoint", path, i,
                     (long long)v, (long long)pos.handed, (long long)pos.bad_lines, svc);
    return rc;
}

/* A saved state for as many readers as this feed's (else it starts afresh:
 * the shares were made anew): 1 when taken, 0 when none, or an error
 * naming a damaged one (a count that is no count, or past its reader's). */
static int feed_load(struct batch_feed *f, const char *path, struct ss_err *e)
{
    FILE *in = path ? fopen(path, "r") : NULL;
    if (!in)
        return 0;
    char tag[32] = "";
    int n = -1, next = -1, rc = 0;
    int ok = fscanf(in, "%31[^\n] readers %d next_reader %d handed", tag, &n, &next) == 3 &&
             !strcmp(tag, FEED_STATE) && n > 0 && next >= 0 && next < n;
    if (ok && n != f->n_rd) {
        fclose(in);
        return 0;
    }
    int64_t *handed = ss_xcalloc(f->n_rd, sizeof *handed);
    for (int i = 0; ok && i < n; i++) {
        long long v;
        ok = fscanf(in, "%lld", &v) == 1 && v >= 0;
        handed[i] = v;
    }
    ok = ok && fscanf(in, " %c", tag) == EOF; /* nothing after the counts */
    fclose(in);
    if (!ok)
        rc = ss_fail(e, SS_EFORMAT, "%s: not a feed state (\"%s\", then readers, next_reader "
                     "and one count a reader, none negative): a damaged checkpoint", path,
                     FEED_STATE);
    for (int i = 0; rc == 0 && i < n; i++)
        rc = feed_count_check(path, i, handed[i], e);
    for (int i = 0; rc == 0 && i < n; i++)
        f->rd[i].next = handed[i];
    if (rc == 0)
        f->next_rd = next;
    free(handed);
    return rc < 0 ? rc : 1;
}

int feed_start(struct batch_feed **out, const struct reader_endpoint *readers, int n_readers,
               const char *token, int batch_size, int depth, int timeout_ms, const char *state,
               struct ss_err *e)
{
    struct batch_feed *f = ss_xcalloc(1, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->not_empty, NULL);
    pthread_cond_init(&f->not_full, NULL);
    pthread_cond_init(&f->idle, NULL);
    f->depth = depth > 0 ? depth : 1;
    f->q = ss_xcalloc(f->depth, sizeof *f->q);
    f->n_rd = n_readers;
    f->batch_size = batch_size;
    f->token = g_byte_array_new();
    g_byte_array_append(f->token, (const guint8 *)token, (guint)strlen(token));
    f->rd = ss_xcalloc(n_readers, sizeof *f->rd);
    for (int i = 0; i < n_readers; i++) {
        struct rd *r = &f->rd[i];
        snprintf(r->name, sizeof r->name, "%s", readers[i].name ? readers[i].name : "reader");
        snprintf(r->host, sizeof r->host, "%s", readers[i].host);
        r->port = readers[i].port;
        r->active = 1;
        int rc = rpc_connect_named(r->name, r->host, r->port, timeout_ms, &r->conn, e);
        if (rc < 0) {
            feed_unmake(f, i);
            return rc;
        }
        ThriftProtocol *p = rpc_conn_protocol(r->conn);
        r->client = g_object_new(SS_TYPE_READER_CLIENT, "input_protocol", p, "output_protocol", p,
                                 NULL);
    }
    int rc = feed_load(f, state, e);
    if (rc < 0 || pthread_create(&f->th, NULL, feed_main, f) != 0) {
        feed_unmake(f, f->n_rd);
        return rc < 0 ? rc : ss_fail(e, SS_ESTATE, "cannot start the prefetch thread");
    }
    *out = f;
    return 0;
}
