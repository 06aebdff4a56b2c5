/* A trainer rank of the cluster job (DESIGN §2): learns where the services
 * listen, wires the same trainer as the embedded default to them (Thrift
 * emb_clients to the embedding PSs, one per worker; the sync PSs as the
 * EASGD center; MPI all-reduce among the trainers for MA/BMUF/allreduce) and trains
 * its share of the data; rank 0, trainer 0, is the master that writes the
 * run directory with the figures summed over the trainers, and runs the
 * checkpoints: the trainers snapshot on its word (MPI messages on their own
 * communicator), the services save over Thrift into the same directory. */
#include "shadowsync/embps.h"
#include "shadowsync/gpu.h"
#include "shadowsync/rpc.h"
#include "shadowsync/shadow.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct wiring {
    struct job_plan *p;
    int dim, n_ps, timeout_ms, wire;
    struct emb_endpoint *ps;
    char (*names)[128];         /* [size]: every rank, by role, rank and host */
    struct endpoint *all;       /* [size]: where every rank serves */
    MPI_Comm ctrl;              /* the trainers' checkpoint messages (a dup of theirs) */
    struct peer_wait pw;        /* sync.timeout_s, and this trainer's name */
    struct beats *beats;        /* the trainers' progress (beat) */
    /* DES: the groups' exchanges (one per worker, one for the eval), made
     * before any thread of this rank calls MPI: Open MPI 4.1 crashed in
     * MPI_Comm_dup while a shadow thread's all-reduce was under way */
    struct exchange **xs;
    int n_xs, next_x;
};

/* ---- checkpoints (see struct trainer_env) ------------------------------ */
enum { TAG_ASK = 11, TAG_DONE, TAG_RELEASE, TAG_END };
#define CKPT_PATH 4400

static void ckpt_ask(void *arg, const char *tmp)
{
    struct wiring *w = arg;
    char buf[CKPT_PATH] = {0};
    snprintf(buf, sizeof buf, "%s", tmp);
    int T = w->p->count[ROLE_TRAINER], n = (int)strlen(buf) + 1;
    for (int r = 1; r < T; r++)
        MPI_Send(buf, n, MPI_CHAR, r, TAG_ASK, w->ctrl);
}

/* fig[0..8): figures; fig[8]: the sender's rc. */
static int ckpt_wait(void *arg, double *fig)
{
    struct wiring *w = arg;
    int T = w->p->count[ROLE_TRAINER], worst = 0;
    double(*v)[9] = ss_xcalloc(T, sizeof *v);
    MPI_Request *req = ss_xcalloc(T, sizeof *req);
    for (int r = 1; r < T; r++)
        MPI_Irecv(v[r], 9, MPI_DOUBLE, r, TAG_DONE, w->ctrl, &req[r]);
    for (int r = 1; r < T; r++) { /* trainer r is rank r: the first one that stalled is named */
        if (peer_wait_req(&req[r], 0, &w->pw, "the checkpoint", w->names[r], NULL) < 0)
            MPI_Abort(MPI_COMM_WORLD, 1); /* MPI itself failed; the others' receives are posted */
        for (int i = 0; i < 8; i++)
            fig[i] += v[r][i];
        if (v[r][8] < worst)
            worst = (int)v[r][8];
    }
    free(v);
    free(req);
    return worst;
}

static void send_all(struct wiring *w, int tag)
{
    int one = 1, T = w->p->count[ROLE_TRAINER];
    for (int r = 1; r < T; r++)
        MPI_Send(&one, 1, MPI_INT, r, tag, w->ctrl);
}

static void ckpt_release(void *arg)
{
    send_all(arg, TAG_RELEASE);
}

static void ckpt_end(void *arg)
{
    send_all(arg, TAG_END);
}

static int ckpt_poll(void *arg, char *tmp, size_t cap)
{
    struct wiring *w = arg;
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(0, MPI_ANY_TAG, w->ctrl, &flag, &st);
    if (!flag)
        return 0;
    if (st.MPI_TAG == TAG_ASK) {
        char buf[CKPT_PATH] = {0};
        MPI_Recv(buf, CKPT_PATH, MPI_CHAR, 0, TAG_ASK, w->ctrl, MPI_STATUS_IGNORE);
        snprintf(tmp, cap, "%s", buf);
        return 1;
    }
    int one;
    MPI_Recv(&one, 1, MPI_INT, 0, st.MPI_TAG, w->ctrl, MPI_STATUS_IGNORE);
    return st.MPI_TAG == TAG_END ? 2 : 0;
}

static void ckpt_done(void *arg, int rc, const double *fig)
{
    struct wiring *w = arg;
    double v[9];
    memcpy(v, fig, 8 * sizeof(double));
    v[8] = rc;
    int one;
    MPI_Send(v, 9, MPI_DOUBLE, 0, TAG_DONE, w->ctrl);
    MPI_Request req; /* no deadline: the release waits on every PS's save too, and the master
                      * names a trainer that stalls (ckpt_wait) */
    struct peer_wait forever = w->pw;
    forever.timeout_s = 0;
    MPI_Irecv(&one, 1, MPI_INT, 0, TAG_RELEASE, w->ctrl, &req);
    if (peer_wait_req(&req, 0, &forever, "the checkpoint", w->names[0], NULL) < 0)
        MPI_Abort(MPI_COMM_WORLD, 1); /* MPI itself failed: no orderly way on */
}

static int ckpt_final(void *arg, char *tmp, size_t cap, double *fig, int rc)
{
    struct wiring *w = arg;
    if (tmp) {
        char buf[CKPT_PATH] = {0};
        snprintf(buf, sizeof buf, "%s", tmp);
        MPI_Bcast(buf, CKPT_PATH, MPI_CHAR, 0, w->ctrl);
        snprintf(tmp, cap, "%s", buf);
        return 0;
    }
    if (w->p->role_index == 0)
        MPI_Reduce(MPI_IN_PLACE, fig, 8, MPI_DOUBLE, MPI_SUM, 0, w->ctrl);
    else
        MPI_Reduce(fig, NULL, 8, MPI_DOUBLE, MPI_SUM, 0, w->ctrl);
    MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, w->ctrl);
    return rc;
}

static void ckpt_final_done(void *arg)
{
    struct wiring *w = arg;
    MPI_Barrier(w->ctrl);
}

/* This trainer's own NCCL failure, said at once (the others may end the job
 * first, waiting on it); 0, for the vote. */
static int nccl_failed(const struct job_plan *p, const struct ss_err *e)
{
    fprintf(stderr, "shadowsync: trainer %d: NCCL: %s\n", p->role_index, e->msg);
    return 0;
}

/* Whether two trainers of this node (node: their communicator) are on one
 * GPU, by the devices' bus ids (each rank may see other devices, as under
 * CUDA_VISIBLE_DEVICES); dev -1: on the CPU. NCCL_HOSTID set: the user tells
 * NCCL which ranks share a host, so no. Collective over node. */
static int shared_gpu(MPI_Comm node, int dev)
{
    enum { KEY = 64 };
    int n;
    MPI_Comm_size(node, &n);
    char mine[KEY] = "", *all = ss_xcalloc((size_t)n, KEY);
    if (dev >= 0 && gpu_device_key(dev, mine, KEY) < 0) /* unknown: nothing to compare */
        memset(mine, 0, KEY);
    MPI_Allgather(mine, KEY, MPI_CHAR, all, KEY, MPI_CHAR, node);
    int same = 0;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            same |= all[a * KEY] && !strncmp(all + a * KEY, all + b * KEY, KEY);
    free(all);
    return same && !getenv("NCCL_HOSTID");
}

/* The all-reduce among the trainers (ma, bmuf, allreduce): NCCL when every trainer runs
 * on a GPU of its own (DESIGN §6), else MPI, saying why on the master.
 * crowded: two of this node's trainers are on one GPU (NCCL refuses two ranks
 * on one GPU, and where only some share one, the others would wait on them in
 * its start). Collective over the trainers. */
static struct collective *trainers_collective(struct job_plan *p, int gpu, int dev, int crowded,
                                              const struct peer_wait *pw, int verbose)
{
    int all = gpu, any = gpu;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, p->trainers);
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, p->trainers);
    MPI_Allreduce(MPI_IN_PLACE, &crowded, 1, MPI_INT, MPI_MAX, p->trainers);
    verbose = verbose && p->rank == 0;
    if (!all) {
        if (any && verbose)
            printf("# some trainers run on GPUs, some on CPUs: the trainers' all-reduce over MPI\n");
        return collective_mpi(p->trainers, pw);
    }
    if (crowded) {
        if (verbose)
            printf("# two GPU trainers of a node share a GPU, and NCCL takes one GPU a rank: "
                   "the trainers' all-reduce over MPI\n");
        return collective_mpi(p->trainers, pw);
    }
    struct ss_err e = {0};
    char msg[512]; /* ncclCommInitRank has no deadline, and cannot be left */
    snprintf(msg, sizeof msg, "%s: NCCL's start (ncclCommInitRank, a first all-reduce) has "
             "not finished in %g s (sync.timeout_s): another trainer has stalled, or NCCL "
             "cannot connect the trainers (NCCL_DEBUG=INFO says why; NCCL_SOCKET_IFNAME picks "
             "the network); ending the job", pw->me, pw->timeout_s);
    struct stall_guard *g = stall_guard_arm(pw->timeout_s, msg);
    struct collective *c = collective_nccl(p->trainers, dev, pw, &e);
    int ok = c != NULL || nccl_failed(p, &e);
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, p->trainers);
    if (ok) { /* a first round of one float, still guarded: where a user set
               * NCCL_RUNTIME_CONNECT=1 (main sets 0), NCCL connects in a communicator's
               * first collective, on the host, where no deadline of ours reaches; and a
               * sum checked here is one to train on */
        float one = 1;
        int r = c->ops->allreduce_sum(c, &one, 1, &e);
        if (r == 0 && one != (float)c->size)
            r = ss_fail(&e, SS_EIO, "NCCL's first all-reduce summed 1 over %d trainers to %g",
                        c->size, one);
        ok = r == 0 || nccl_failed(p, &e);
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, p->trainers);
    }
    if (!ok && c) /* (still guarded) */
        (c->ops->abort ? c->ops->abort : c->ops->free)(c);
    stall_guard_disarm(g);
    if (!ok) { /* all or none: a trainer that could not join NCCL makes everyone use MPI */
        if (verbose)
            printf("# NCCL could not start on every trainer: the trainers' all-reduce over MPI\n");
        return collective_mpi(p->trainers, pw);
    }
    if (verbose)
        printf("# the trainers' all-reduce between the GPU trainers over NCCL\n");
    return c;
}

/* A service's save client over proto, for its role. */
static GObject *save_client(int role, ThriftProtocol *proto)
{
    GType t = role == ROLE_EMBEDDING_PS ? SS_TYPE_EMBEDDING_P_S_CLIENT
            : role == ROLE_SYNC_PS      ? SS_TYPE_SYNC_P_S_CLIENT
                                        : SS_TYPE_READER_CLIENT;
    return g_object_new(t, "input_protocol", proto, "output_protocol", proto, NULL);
}

static gboolean send_save(GObject *cl, int role, GByteArray *tok, const char *path, GError **gerr)
{
    return role == ROLE_EMBEDDING_PS
               ? ss_embedding_p_s_client_send_save((ssEmbeddingPSIf *)cl, tok, path, gerr)
           : role == ROLE_SYNC_PS ? ss_sync_p_s_client_send_save((ssSyncPSIf *)cl, tok, path, gerr)
                                  : ss_reader_client_send_save((ssReaderIf *)cl, tok, path, gerr);
}

static gboolean recv_save(GObject *cl, int role, gint64 *bytes, ssRpcError **rerr, GError **gerr)
{
    return role == ROLE_EMBEDDING_PS
               ? ss_embedding_p_s_client_recv_save((ssEmbeddingPSIf *)cl, bytes, rerr, gerr)
           : role == ROLE_SYNC_PS ? ss_sync_p_s_client_recv_save((ssSyncPSIf *)cl, bytes, rerr, gerr)
                                  : ss_reader_client_recv_save((ssReaderIf *)cl, bytes, rerr, gerr);
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Waits for a save's answer to begin: as long as its file grows (a large
 * part being written), but never timeout_ms without its growing, the
 * deadline of every other call (job.rpc_timeout_s): a service silent that
 * long has stalled. Returns 1: answered, 0: stalled, -1: an error. */
static int wait_saved(const struct rpc_conn *conn, const char *path, int timeout_ms)
{
    int slice = timeout_ms / 4 > 0 ? timeout_ms / 4 : 1;
    long long size = -1;
    double since = ss_now();
    for (;;) {
        int r = rpc_conn_wait(conn, slice);
        if (r != 0)
            return r;
        long long now = file_size(path);
        if (now != size)
            size = now, since = ss_now();
        else if ((ss_now() - since) * 1000 >= timeout_ms)
            return 0;
    }
}

/* One try of a service's save(token, path) over a fresh connection;
 * *closed: the service closed it unanswered (full, or gone). */
static int save_once(struct wiring *w, int rank, const char *path, int *closed, struct ss_err *e)
{
    struct rpc_conn *conn;
    const struct endpoint *ep = &w->all[rank];
    int rc = rpc_connect_named(w->names[rank], ep->host, ep->port, w->timeout_ms, &conn, e);
    if (rc < 0)
        return rc;
    int role, idx;
    rpc_assign_role(w->p->count, rank, &role, &idx);
    GObject *cl = save_client(role, rpc_conn_protocol(conn));
    GByteArray *tok = g_byte_array_new();
    g_byte_array_append(tok, (const guint8 *)w->p->token, (guint)strlen(w->p->token));
    gint64 bytes = 0;
    ssRpcError *rerr = NULL;
    GError *gerr = NULL;
    int got = send_save(cl, role, tok, path, &gerr) ? wait_saved(conn, path, w->timeout_ms) : -1;
    if (got == 0) {
        rc = ss_fail(e, SS_EIO, "%s at %s:%d: save failed: no answer within job.rpc_timeout_s = "
                     "%g s, and %s did not grow meanwhile (the service has stalled)",
                     w->names[rank], ep->host, ep->port, w->timeout_ms / 1e3, path);
    } else if (got < 0 || !recv_save(cl, role, &bytes, &rerr, &gerr) || rerr) {
        *closed = !rerr && rpc_conn_closed(gerr);
        rc = rpc_call_failed(e, w->names[rank], ep->host, ep->port, "save", rerr, gerr);
        gerr = NULL;
    }
    if (gerr)
        g_error_free(gerr);
    g_object_unref(cl);
    g_byte_array_unref(tok);
    rpc_conn_close(conn);
    return rc;
}

/* One service's save(token, path), tried again while the service closes
 * the connection unanswered, for up to job.rpc_timeout_s: one full of
 * strangers' connections makes room for the job's within a second. */
static int save_one(struct wiring *w, int rank, const char *path, struct ss_err *e)
{
    double t0 = ss_now();
    for (;;) {
        int closed = 0, rc = save_once(w, rank, path, &closed, e);
        if (rc == 0 || !closed || (ss_now() - t0) * 1000 >= w->timeout_ms)
            return rc;
        usleep(100 * 1000);
    }
}

/* Every service of roles from..to writes its part into dir: tables-psK.bin,
 * center-K.bin, reader-svc-K.pos. */
static int save_parts(struct wiring *w, const char *dir, int from, int to, struct ss_err *e)
{
    const int *count = w->p->count;
    int rc = 0, rank = count[ROLE_TRAINER];
    static const char *const fmt[N_ROLES] = {"", "%s/tables-ps%d.bin", "%s/center-%d.bin",
                                             "%s/reader-svc-%d.pos"};
    for (int role = ROLE_EMBEDDING_PS; role < N_ROLES; role++)
        for (int k = 0; k < count[role]; k++, rank++) {
            if (rc < 0 || role < from || role > to || w->all[rank].port == 0) /* a PS that
                                                                              * holds no shard */
                continue;
            char path[CKPT_PATH + 64];
            snprintf(path, sizeof path, fmt[role], dir, k);
            rc = save_one(w, rank, path, e);
        }
    return rc;
}

static int ckpt_services(void *arg, const char *tmp, struct ss_err *e)
{
    return save_parts(arg, tmp, ROLE_EMBEDDING_PS, N_ROLES - 1, e);
}

static int save_tables(void *arg, const char *dir, struct ss_err *e)
{
    return save_parts(arg, dir, ROLE_EMBEDDING_PS, ROLE_EMBEDDING_PS, e);
}

static int make_emb(void *arg, int exact, struct emb_client **out, struct ss_err *e)
{
    struct wiring *w = arg;
    return emb_client_thrift(out, w->p->placement, w->dim, exact ? WIRE_FP32 : w->wire, w->ps,
                             w->p->token, w->timeout_ms, e);
}

static int make_exchange(void *arg, struct exchange **out, struct ss_err *e)
{
    struct wiring *w = arg;
    if (w->next_x >= w->n_xs)
        return ss_fail(e, SS_ESTATE, "DES: more groups asked than made (%d)", w->n_xs);
    *out = w->xs[w->next_x];
    w->xs[w->next_x++] = NULL;
    return 0;
}

/* ---- the trainers' progress (trainer_env.beat) ---------------------------
 * Every log interval each trainer sends its figures to every other one on a
 * communicator of their own (MPI_Isend; a peer whose last one is still in
 * flight is skipped) and takes in theirs: the master prints the job's
 * progress, and a trainer not heard from for sync.timeout_s (plus two
 * intervals) while this one listened has stalled: the job ends naming it.
 * Its last report says its data has ended; it sends nothing after that,
 * but for that report again once a stop reaches it (the others must stop
 * too, and a trainer whose data has ended may be the only one signalled). */
enum { BEAT_N = BEAT_FIGS + 1 }; /* the figures, then 1 = final */

struct beats {
    MPI_Comm comm;
    int T, me, sent_final;
    int resend;                 /* a stop after the final report: sent again (peers left) */
    double (*last)[BEAT_N];     /* [T] each trainer's latest */
    double (*out)[BEAT_N];      /* [2T] the sends in flight: beats, then finals */
    MPI_Request *req;           /* [2T] */
    double *heard;              /* [T] when (ss_now) */
    double every, stall_after, deaf_after, polled, next_send;
};

static struct beats *beats_new(MPI_Comm trainers, const struct ss_config *c)
{
    struct beats *b = ss_xcalloc(1, sizeof *b);
    MPI_Comm_dup(trainers, &b->comm);
    MPI_Comm_size(b->comm, &b->T);
    MPI_Comm_rank(b->comm, &b->me);
    b->last = ss_xcalloc(b->T, sizeof *b->last);
    b->out = ss_xcalloc(2 * (size_t)b->T, sizeof *b->out);
    b->req = ss_xcalloc(2 * (size_t)b->T, sizeof *b->req);
    for (int r = 0; r < 2 * b->T; r++)
        b->req[r] = MPI_REQUEST_NULL;
    b->heard = ss_xcalloc(b->T, sizeof *b->heard);
    b->every = c->output.log_interval_s;
    b->stall_after = c->sync.timeout_s > 0 ? c->sync.timeout_s + 2 * b->every : 0;
    b->deaf_after = 2 * b->every + 1;
    return b;
}

static void beats_free(struct beats *b)
{
    if (!b)
        return;
    if (!rpc_sends_release(b->req, 2 * b->T))
        free(b->out);
    MPI_Comm_free(&b->comm);
    free(b->last);
    free(b->req);
    free(b->heard);
    free(b);
}

/* Sends v to every other trainer whose last send is done; returns how many
 * were skipped (theirs still in flight). */
static int beat_send(struct beats *b, const double *v, int final)
{
    int skipped = 0;
    for (int r = 0; r < b->T; r++) {
        int k = final ? b->T + r : r, done = 1;
        if (r == b->me)
            continue;
        if (b->req[k] != MPI_REQUEST_NULL)
            MPI_Test(&b->req[k], &done, MPI_STATUS_IGNORE);
        if (!done) {
            skipped++;
            continue;
        }
        memcpy(b->out[k], v, BEAT_FIGS * sizeof(double));
        b->out[k][BEAT_FIGS] = final;
        MPI_Isend(b->out[k], BEAT_N, MPI_DOUBLE, r, 0, b->comm, &b->req[k]);
    }
    return skipped;
}

static int beat(void *arg, double *v, int final, double *each)
{
    struct wiring *w = arg;
    struct beats *b = w->beats;
    double now = ss_now();
    if (!b->polled || now - b->polled > b->deaf_after) /* silence meanwhile says nothing */
        for (int r = 0; r < b->T; r++)
            b->heard[r] = now;
    b->polled = now;
    for (int flag = 1; flag;) {
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, 0, b->comm, &flag, &st);
        if (flag) {
            MPI_Recv(b->last[st.MPI_SOURCE], BEAT_N, MPI_DOUBLE, st.MPI_SOURCE, 0, b->comm,
                     MPI_STATUS_IGNORE);
            b->heard[st.MPI_SOURCE] = now;
        }
    }
    if (!b->sent_final && (final || now >= b->next_send)) {
        beat_send(b, v, final);
        b->sent_final = final;
        b->next_send = now + b->every;
        b->resend = final && v[6] > 0 ? -1 : 0; /* -1: its stop already said */
    } else if (b->sent_final && v[6] > 0 && b->resend >= 0) { /* a stop since: said again */
        b->resend = 1;
    }
    if (b->resend == 1 && beat_send(b, v, 1) == 0) /* a peer's final in flight: next time */
        b->resend = -1;
    for (int r = 0; each && r < b->T; r++)
        memcpy(each + (size_t)r * BEAT_FIGS, r == b->me ? v : b->last[r], BEAT_FIGS * sizeof *v);
    int all_final = 1;
    for (int r = 0; r < b->T; r++) {
        if (r == b->me)
            continue;
        for (int i = 0; i < BEAT_FIGS; i++)
            v[i] += i == BEAT_CLOCK ? 0 : b->last[r][i];
        if (b->last[r][BEAT_FIGS] != 1) {
            all_final = 0;
            if (b->stall_after > 0 && now - b->heard[r] > b->stall_after)
                peer_stalled(&w->pw, "the job's progress", w->names[r]);
        }
    }
    return all_final;
}

static void fatal(void *arg, const struct ss_err *e)
{
    static int once; /* the first caller's error names the end; a second waits for it */
    struct wiring *w = arg;
    if (__atomic_exchange_n(&once, 1, __ATOMIC_SEQ_CST))
        for (;;)
            pause();
    fprintf(stderr, "shadowsync: %s: %s\n", w->pw.me, e->msg);
    job_abort();
}

static void sum(void *arg, double *v, int n)
{
    struct wiring *w = arg;
    MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, w->p->trainers);
}

static void sum_floats(void *arg, float *v, size_t n)
{
    struct wiring *w = arg;
    MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_FLOAT, MPI_SUM, w->p->trainers);
}

/* Every rank's name (by role, rank and host), and what this trainer's
 * waits on its peers say. */
static void wire_names(struct wiring *w, const struct ss_config *c)
{
    struct job_plan *p = w->p;
    w->names = ss_xcalloc(p->size, sizeof *w->names);
    for (int r = 0; r < p->size; r++)
        rpc_rank_name(p, r, w->names[r], sizeof w->names[r]);
    w->pw.timeout_s = c->sync.timeout_s; /* trainer r is rank r */
    snprintf(w->pw.me, sizeof w->pw.me, "%s", w->names[p->rank]);
    if (p->count[ROLE_TRAINER] == 2)
        snprintf(w->pw.others, sizeof w->pw.others, "%s", w->names[1 - p->rank]);
    else
        snprintf(w->pw.others, sizeof w->pw.others, "one of the other %d trainers",
                 p->count[ROLE_TRAINER] - 1);
}

/* Every service started (*alike: one could not, which every trainer sees
 * in one table: the job ends at its barrier, where that service says why);
 * the master says where each listens. */
static int services_up(struct wiring *w, const struct ss_config *c, int *alike,
                       struct ss_err *e)
{
    struct job_plan *p = w->p;
    int rc = 0;
    for (int r = 0; rc == 0 && r < p->size; r++)
        if (w->all[r].port < 0) {
            *alike = 1;
            rc = ss_fail(e, SS_EIO, "%s could not start its service%s%s; its own line says why",
                         w->names[r], *w->all[r].host ? " at " : "", w->all[r].host);
        }
    int ps0 = p->count[ROLE_TRAINER], ps_end = ps0 + p->count[ROLE_EMBEDDING_PS];
    for (int r = 0; p->rank == 0 && !c->output.quiet && r < p->size; r++)
        if (w->all[r].port > 0)
            printf("# %s listens on %s:%d\n", w->names[r], w->all[r].host, w->all[r].port);
        else if (w->all[r].port == 0 && r >= ps0 && r < ps_end) /* (-1: failed, said above) */
            printf("# %s holds no shard of the plan (placement.strategy = %s): it idles\n",
                   w->names[r], c->placement.strategy);
    fflush(stdout);
    return rc;
}

/* What this trainer trains through, into env: the embedding PSs'
 * endpoints, its device, the trainers' collective or the EASGD center on
 * the sync PSs (*sps), the reader services' feed (*rds). */
static int connect_env(struct wiring *w, struct trainer_env *env, const struct model_layout *l,
                       const struct ss_config *c, struct sync_endpoint **sps,
                       struct reader_endpoint **rds, struct ss_err *e)
{
    struct job_plan *p = w->p;
    struct endpoint *all = w->all;
    w->dim = l->dim;
    w->ps = ss_xcalloc(w->n_ps, sizeof *w->ps);
    int first = p->count[ROLE_TRAINER];
    for (int s = 0; s < w->n_ps; s++)
        w->ps[s] = (struct emb_endpoint){w->names[first + s], all[first + s].host,
                                         all[first + s].port};
    const char *algo = c->sync.algo;
    int dev, count, local;
    MPI_Comm node; /* this node's trainers: their index spreads them over its GPUs */
    MPI_Comm_split_type(p->trainers, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    int rc = trainer_device(c, p->rank == 0 && !c->output.quiet, local, &dev, &count, e);
    env->gpu = dev >= 0, env->gpu_dev = dev;
    int crowded = shared_gpu(node, env->gpu ? dev : -1);
    MPI_Comm_free(&node);
    if (rc == 0 && sync_algo_needs(algo) == SYNC_NEEDS_COLLECTIVE)
        env->coll = trainers_collective(p, env->gpu, dev, crowded, &w->pw, !c->output.quiet);
    if (rc == 0 && sync_algo_needs(algo) == SYNC_NEEDS_CENTER) {
        int S = p->count[ROLE_SYNC_PS], s0 = first + w->n_ps;
        *sps = ss_xcalloc(S, sizeof **sps);
        for (int s = 0; s < S; s++)
            (*sps)[s] = (struct sync_endpoint){w->names[s0 + s], all[s0 + s].host,
                                               all[s0 + s].port};
        size_t n = l->n_params + (p->hot ? (size_t)p->hot->n * l->dim : 0); /* + hot rows */
        char how[200];
        double pace = c->sync.mode == SYNC_SHADOW ? rpc_link_pace(c, p, how, sizeof how) : 0;
        if (pace > 0 && p->rank == 0 && !c->output.quiet)
            printf("sync: the sync PSs' connections %s, the rest of the link left to the "
                   "embedding traffic\n", how);
        rc = center_thrift(&env->center, *sps, S, n, p->token, w->timeout_ms, pace, e);
    }
    int R = p->count[ROLE_READER], r0 = first + w->n_ps + p->count[ROLE_SYNC_PS];
    if (rc < 0 || R == 0)
        return rc;
    *rds = ss_xcalloc(R, sizeof **rds);
    for (int r = 0; r < R; r++)
        (*rds)[r] = (struct reader_endpoint){w->names[r0 + r], all[r0 + r].host,
                                             all[r0 + r].port};
    char state[4400] = "";
    if (p->resume_from[0])
        snprintf(state, sizeof state, "%s/feed-%d.pos", p->resume_from, p->role_index);
    return feed_start(&env->feed, *rds, R, p->token, c->trainer.batch_size,
                      4 * c->trainer.worker_threads, w->timeout_ms, state[0] ? state : NULL, e);
}

int trainer_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    if (p->rank != 0) /* a signal once the training has ended: the master says so */
        ss_halt_quiet();
    struct endpoint me = {{0}, 0}, *all = ss_xcalloc(p->size, sizeof *all);
    rpc_exchange_endpoints(p, &me, all);
    struct model_layout l;
    int rc = model_layout_init(&l, c, e), alike = 0;
    struct wiring w = {.p = p, .n_ps = p->count[ROLE_EMBEDDING_PS],
                       .timeout_ms = (int)ceil(c->job.rpc_timeout_s * 1000), .all = all,
                       .ctrl = MPI_COMM_NULL, .wire = c->embedding.wire};
    MPI_Comm_dup(p->trainers, &w.ctrl);
    w.beats = beats_new(p->trainers, c);
    wire_names(&w, c);
    if (rc == 0)
        rc = services_up(&w, c, &alike, e);
    struct sync_endpoint *sps = NULL;
    struct reader_endpoint *rds = NULL;
    struct trainer_env env = {
        .index = p->role_index,
        .count = p->count[ROLE_TRAINER],
        .is_master = p->rank == 0,
        .gpu_dev = -1,
        .make_emb = make_emb,
        .des = {.plan = c->embedding.placement == EMB_ON_TRAINERS ? p->placement : NULL,
                .make_exchange = make_exchange},
        .hot = {.set = p->hot, .from_ckpt = p->hot_from_ckpt},
        .arg = &w,
        .sum = sum,
        .sum_floats = sum_floats,
        .beat = beat,
        .fatal = fatal,
        .resume_from = p->resume_from[0] ? p->resume_from : NULL,
        .ckpt = {.ask = ckpt_ask, .wait = ckpt_wait, .services = ckpt_services,
                 .release = ckpt_release, .end = ckpt_end, .poll = ckpt_poll, .done = ckpt_done,
                 .final = ckpt_final, .final_done = ckpt_final_done},
        .save_tables = save_tables,
        .figures = p->figures,
    };
    if (rc == 0)
        rc = connect_env(&w, &env, &l, c, &sps, &rds, e);
    if (rc == 0 && env.des.plan) { /* every trainer alike, in one order */
        w.n_xs = c->trainer.worker_threads + 1;
        w.xs = ss_xcalloc(w.n_xs, sizeof *w.xs);
        for (int x = 0; x < w.n_xs; x++)
            w.xs[x] = exchange_mpi(p->trainers, &w.pw);
    }
    if (rc == 0) {
        rpc_started(p); /* every communicator of this rank made */
        rc = trainer_run_env(c, &env, e);
    }
    if (rc < 0 && !alike) /* this trainer's own failure (its device, its data, a service it
                           * cannot reach): the others may wait on it in a collective, or
                           * where nothing has a deadline while its heartbeat goes on */
        fatal(&w, e);
    for (int x = 0; x < w.n_xs; x++) /* those not taken (no eval) */
        if (w.xs[x])
            w.xs[x]->ops->free(w.xs[x]);
    free(w.xs);
    rpc_wait_job_end(p);
    if (env.coll)
        env.coll->ops->free(env.coll);
    if (env.center)
        env.center->ops->free(env.center);
    feed_free(env.feed);
    free(rds);
    free(sps);
    free(w.ps);
    free(w.names);
    free(all);
    MPI_Comm_free(&w.ctrl);
    beats_free(w.beats);
    if (l.rows)
        model_layout_free(&l);
    return rc;
}
