/* The Thrift server loop shared by every service (DESIGN §2 "Wires";
 * TOOLCHAIN.md pitfalls 1, 6, 9): the stock c_glib server is single-
 * threaded, so this one accepts on its own thread and serves each
 * connection on a thread of its own with one shared processor, binary
 * protocol over a buffered socket transport, TCP_NODELAY on. It binds to
 * the address it is given; port 0 picks a free port. A role's server
 * guards itself (struct rpc_guard, DESIGN §8): its accept thread also
 * closes connections past their deadline (a request begun and not
 * finished), makes room when its slots are full by closing the newest
 * connection that never showed the job's token (a stranger's: the job's
 * show it at once), and a message holds at most so many bytes, few before
 * it shows the token. */
#include "shadowsync/rpc.h"

#include <thrift/c_glib/processor/thrift_dispatch_processor.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/transport/thrift_buffered_transport.h>
#include <thrift/c_glib/transport/thrift_socket.h>

#define MAX_CONN 1024
#define GRACE_MS 1000 /* a new connection's time to show the token before it may be closed */

struct rpc_server {
    int listen_fd, port;
    ThriftProcessor *proc;
    pthread_t accept_th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int conn_fd[MAX_CONN];      /* open connections, -1 = free slot, -2 = being filled */
    int64_t deadline[MAX_CONN]; /* ms (now_ms) its connection is closed at; 0: none (atomics) */
    int64_t opened[MAX_CONN];   /* ms its connection was accepted at */
    int authed[MAX_CONN];       /* it sent a request with the job's token (atomics) */
    int n_conn, max_conn, stopping, closing, full_told;
    char name[128];
    char token[64];             /* "": no token to look for */
    int64_t frame_ms;           /* 0: no deadlines, no room made */
    double pace;                /* bytes/s each connection sends at most (0: unpaced; atomics) */
    size_t max_message;
    int64_t warned_ms[3];       /* the accept thread's last warnings: accept failed, reaped, */
    int unsaid[3];              /* room made; and how many it has not told since */
};

struct conn {
    struct rpc_server *s;
    int slot, fd;
};

/* The connection this thread serves (NULL: a client, a fuzz target), and
 * the message it is reading: its fields' bytes so far, and whether one of
 * them was the job's token. */
static _Thread_local struct conn *cur;
static _Thread_local size_t msg_bytes;
static _Thread_local int msg_token;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The connection's deadline: at ms from now (ms 0: none). */
static void arm(struct conn *c, int64_t ms)
{
    __atomic_store_n(&c->s->deadline[c->slot], ms ? now_ms() + ms : 0, __ATOMIC_RELAXED);
}

/* The connection sent the job's token: it is never closed to make room. */
static void authed(struct conn *c)
{
    __atomic_store_n(&c->s->authed[c->slot], 1, __ATOMIC_RELAXED);
}

/* A connection: socket, buffered transport and binary protocol, released
 * in that reverse order (the wrappers do not hold references to what they
 * wrap: TOOLCHAIN.md pitfall 4). */
struct rpc_conn {
    ThriftSocket *sock;
    ThriftTransport *t;
    ThriftProtocol *p;
};

struct rpc_conn *rpc_conn_on_fd(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct rpc_conn *c = ss_xcalloc(1, sizeof *c);
    c->sock = g_object_new(THRIFT_TYPE_SOCKET, NULL);
    c->sock->sd = fd;
    c->t = g_object_new(THRIFT_TYPE_BUFFERED_TRANSPORT, "transport", c->sock, "r_buf_size",
                        1 << 16, "w_buf_size", 1 << 16, NULL);
    c->p = g_object_new(THRIFT_TYPE_BINARY_PROTOCOL, "transport", c->t, NULL);
    return c;
}

/* The kernel's TCP pacing (SO_MAX_PACING_RATE: the fq qdisc's, or TCP's
 * own since Linux 4.13 under any other) holds the socket to bytes_s. */
static void pace_fd(int fd, double bytes_s)
{
    if (fd < 0 || !(bytes_s > 0))
        return;
    uint64_t rate = bytes_s < 1 ? 1 : bytes_s >= (double)UINT64_MAX ? UINT64_MAX : (uint64_t)bytes_s;
    if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate) != 0) {
        unsigned r32 = rate > UINT32_MAX - 1 ? UINT32_MAX - 1 : (unsigned)rate; /* older kernels */
        setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &r32, sizeof r32);
    }
}

void rpc_conn_pace(struct rpc_conn *c, double bytes_s)
{
    pace_fd(c->sock->sd, bytes_s);
}

void rpc_server_pace(struct rpc_server *s, double bytes_s)
{
    __atomic_store(&s->pace, &bytes_s, __ATOMIC_RELAXED);
}

void rpc_conn_limit(struct rpc_conn *c, long bytes)
{
    g_object_set(c->t, "remainingmessagesize", (glong)bytes, NULL);
    g_object_set(c->sock, "remainingmessagesize", (glong)bytes, NULL);
}

ThriftProtocol *rpc_conn_protocol(const struct rpc_conn *c)
{
    return c->p;
}

void rpc_conn_close(struct rpc_conn *c)
{
    if (!c)
        return;
    rpc_tcp_note_close(c->sock->sd);
    thrift_transport_close(THRIFT_TRANSPORT(c->sock), NULL);
    g_object_unref(c->p);
    g_object_unref(c->t);
    g_object_unref(c->sock);
    free(c);
}

/* g_set_error, unless an error is set already (GLib warns on overwrites). */
static void set_err(GError **err, gint code, const char *fmt, ...)
{
    if (!err || *err)
        return;
    va_list ap;
    va_start(ap, fmt);
    gchar *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(err, THRIFT_PROTOCOL_ERROR, code, msg);
    g_free(msg);
}

/* Binary and string fields, read safe on hostile input (found by
 * tests/fuzz): the library takes a negative length for success with a NULL
 * buffer, and allocates (and zeroes) whatever length a request states
 * before reading a byte of it. Here a negative or too long length fails,
 * and the buffer grows only as the bytes arrive. The generated code calls
 * these (tools/thrift-fixup). */
static gint32 read_field(ThriftProtocol *p, guint8 **buf, guint32 *len, guint32 max, int nul,
                         GError **err)
{
    gint32 n, ret = thrift_protocol_read_i32(p, &n, err);
    *buf = NULL;
    *len = 0;
    if (ret < 0)
        return -1;
    if (n < 0 || (guint32)n > max) {
        set_err(err, n < 0 ? THRIFT_PROTOCOL_ERROR_NEGATIVE_SIZE : THRIFT_PROTOCOL_ERROR_SIZE_LIMIT,
                "a field of %d bytes (at most %u)", n, max);
        return -1;
    }
    if (cur) { /* a server's connection: the message's budget */
        size_t most = msg_token ? cur->s->max_message : SS_TOKENLESS_BYTES;
        if ((size_t)n > most - msg_bytes) {
            set_err(err, THRIFT_PROTOCOL_ERROR_SIZE_LIMIT, "a request of more than %zu bytes%s",
                    most, msg_token ? "" : " before the job's token");
            return -1;
        }
        msg_bytes += (size_t)n;
    }
    guint8 *b = nul ? g_malloc0(1) : NULL;
    guint32 have = 0, cap = 0;
    while (have < (guint32)n) {
        guint32 want = (guint32)n - have < (1u << 20) ? (guint32)n - have : (1u << 20);
        if (have + want > cap) {
            cap = cap * 2 > have + want ? cap * 2 : have + want;
            if (cap > (guint32)n)
                cap = (guint32)n;
            b = g_realloc(b, cap + (nul ? 1 : 0));
        }
        if (thrift_transport_read_all(p->transport, b + have, want, err) < 0) {
            g_free(b);
            return -1;
        }
        have += want;
    }
    if (nul)
        b[have] = 0;
    if (cur && !msg_token && cur->s->token[0] && have == strlen(cur->s->token) &&
        memcmp(b, cur->s->token, have) == 0)
        msg_token = 1, authed(cur);
    *buf = b;
    *len = (guint32)n;
    return ret + n;
}

gint32 ss_thrift_read_binary(ThriftProtocol *p, gpointer *buf, guint32 *len, GError **err)
{
    guint8 *b;
    gint32 ret = read_field(p, &b, len, SS_MAX_FIELD_BYTES, 0, err);
    *buf = b;
    return ret;
}

gint32 ss_thrift_read_string(ThriftProtocol *p, gchar **str, GError **err)
{
    guint8 *b;
    guint32 len;
    gint32 ret = read_field(p, &b, &len, 1u << 16, 1, err);
    *str = (gchar *)b;
    return ret;
}

/* thrift_protocol_skip, safe on hostile input (found by tests/fuzz: the
 * library's frees an uninitialized pointer when a string's length cannot
 * be read, and trusts negative sizes). Containers nest at most 64 deep and
 * hold at most 1 << 24 elements. The generated code calls this one
 * (tools/thrift-fixup). */
static gint32 skip(ThriftProtocol *p, ThriftType type, int depth, GError **err)
{
    union {
        gboolean b;
        gint8 i8;
        gint16 i16;
        gint32 i32;
        gint64 i64;
        gdouble d;
    } v;
    gint32 ret, xfer = 0;
    if (depth > 64) {
        set_err(err, THRIFT_PROTOCOL_ERROR_DEPTH_LIMIT, "nested too deep");
        return -1;
    }
    switch (type) {
    case T_BOOL: return thrift_protocol_read_bool(p, &v.b, err);
    case T_BYTE: return thrift_protocol_read_byte(p, &v.i8, err);
    case T_I16: return thrift_protocol_read_i16(p, &v.i16, err);
    case T_I32: return thrift_protocol_read_i32(p, &v.i32, err);
    case T_I64: return thrift_protocol_read_i64(p, &v.i64, err);
    case T_DOUBLE: return thrift_protocol_read_double(p, &v.d, err);
    case T_STRING: {
        gpointer data = NULL;
        guint32 len = 0;
        ret = ss_thrift_read_binary(p, &data, &len, err);
        g_free(data);
        return ret;
    }
    case T_STRUCT: {
        gchar *name = NULL;
        if ((ret = thrift_protocol_read_struct_begin(p, &name, err)) < 0)
            return -1;
        g_free(name);
        xfer += ret;
        for (;;) {
            ThriftType ft = T_STOP;
            gint16 id;
            name = NULL;
            ret = thrift_protocol_read_field_begin(p, &name, &ft, &id, err);
            g_free(name);
            if (ret < 0)
                return -1;
            xfer += ret;
            if (ft == T_STOP)
                break;
            if ((ret = skip(p, ft, depth + 1, err)) < 0 ||
                thrift_protocol_read_field_end(p, err) < 0)
                return -1;
            xfer += ret;
        }
        return thrift_protocol_read_struct_end(p, err) < 0 ? -1 : xfer;
    }
    case T_MAP: case T_SET: case T_LIST: {
        ThriftType kt = T_STOP, vt = T_STOP;
        guint32 n = 0;
        ret = type == T_MAP ? thrift_protocol_read_map_begin(p, &kt, &vt, &n, err)
            : type == T_SET ? thrift_protocol_read_set_begin(p, &vt, &n, err)
                            : thrift_protocol_read_list_begin(p, &vt, &n, err);
        if (ret < 0)
            return -1;
        if (n > (1u << 24)) {
            set_err(err, THRIFT_PROTOCOL_ERROR_SIZE_LIMIT, "a container of %u elements", n);
            return -1;
        }
        xfer += ret;
        for (guint32 i = 0; i < n; i++) {
            if (type == T_MAP && (ret = skip(p, kt, depth + 1, err)) < 0)
                return -1;
            xfer += type == T_MAP ? ret : 0;
            if ((ret = skip(p, vt, depth + 1, err)) < 0)
                return -1;
            xfer += ret;
        }
        ret = type == T_MAP ? thrift_protocol_read_map_end(p, err)
            : type == T_SET ? thrift_protocol_read_set_end(p, err)
                            : thrift_protocol_read_list_end(p, err);
        return ret < 0 ? -1 : xfer;
    }
    default:
        set_err(err, THRIFT_PROTOCOL_ERROR_INVALID_DATA, "unknown field type %d", (int)type);
        return -1;
    }
}

gint32 ss_thrift_skip(ThriftProtocol *p, ThriftType type, GError **err)
{
    return skip(p, type, 0, err);
}

gboolean rpc_process(ThriftProcessor *proc, ThriftProtocol *in, ThriftProtocol *out,
                     GError **err)
{
    /* thrift_dispatch_processor_process with the header read here: the
     * library's leaks the method's name when the header is cut short after
     * it, and allocates whatever length the name claims. Strict binary
     * protocol only (what every client of ours speaks). */
    gchar *fname = NULL;
    gint32 version, seqid;
    msg_bytes = 0;
    msg_token = cur && !cur->s->token[0];
    if (thrift_protocol_read_i32(in, &version, err) < 0)
        return FALSE;
    if (((guint32)version & 0xffff0000u) != 0x80010000u) {
        set_err(err, THRIFT_PROTOCOL_ERROR_BAD_VERSION, "not a strict binary-protocol message");
        return FALSE;
    }
    ThriftMessageType type = (ThriftMessageType)(version & 0xff);
    if (ss_thrift_read_string(in, &fname, err) < 0 || thrift_protocol_read_i32(in, &seqid, err) < 0) {
        g_free(fname);
        return FALSE;
    }
    if (type != T_CALL && type != T_ONEWAY) {
        g_free(fname);
        set_err(err, THRIFT_PROTOCOL_ERROR_INVALID_DATA, "a message of type %d is not a call",
                (int)type);
        return FALSE;
    }
    return THRIFT_DISPATCH_PROCESSOR_GET_CLASS(proc)->dispatch_call(
        THRIFT_DISPATCH_PROCESSOR(proc), in, out, fname, seqid, err);
}

static void *serve_conn(void *arg)
{
    struct conn *c = arg;
    struct rpc_server *s = c->s;
    struct rpc_conn *rc = rpc_conn_on_fd(c->fd);
    GError *err = NULL;
    cur = c;
    for (;;) { /* idle: no deadline; then a request to read */
        arm(c, 0);
        if (!thrift_transport_peek(rc->t, &err))
            break;
        arm(c, s->frame_ms); /* (lifted by rpc_token_ok: the request is read) */
        if (!rpc_process(s->proc, rc->p, rc->p, &err))
            break;
    }
    cur = NULL;
    if (err)
        g_error_free(err);
    pthread_mutex_lock(&s->mu); /* the slot first: a stop must not shut down a reused fd */
    s->conn_fd[c->slot] = -1;
    pthread_mutex_unlock(&s->mu);
    rpc_conn_close(rc);
    pthread_mutex_lock(&s->mu);
    s->n_conn--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free(c);
    return NULL;
}

/* A warning of kind k (0: accept failed, 1: connections closed at their
 * deadline, 2: one closed to make room), at most one a minute, with how many went unsaid. Called from
 * the accept thread only. */
static void warn(struct rpc_server *s, int k, const char *what)
{
    int64_t now = now_ms();
    if (s->warned_ms[k] && now - s->warned_ms[k] < 60000) {
        s->unsaid[k]++;
        return;
    }
    if (s->unsaid[k])
        fprintf(stderr, "shadowsync: %s: %s (and %d more such in the last minute)\n", s->name,
                what, s->unsaid[k]);
    else
        fprintf(stderr, "shadowsync: %s: %s\n", s->name, what);
    s->warned_ms[k] = now;
    s->unsaid[k] = 0;
}

/* Shuts down the connections past their deadline (their threads then end). */
static void reap(struct rpc_server *s)
{
    int64_t now = now_ms();
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < MAX_CONN; i++) {
        int64_t d = __atomic_load_n(&s->deadline[i], __ATOMIC_RELAXED);
        if (s->conn_fd[i] >= 0 && d && now > d) {
            shutdown(s->conn_fd[i], SHUT_RDWR);
            __atomic_store_n(&s->deadline[i], 0, __ATOMIC_RELAXED);
            n++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (n) {
        char what[256];
        snprintf(what, sizeof what, "closed %d connection(s) that did not finish a request "
                 "within %.3g s (job.rpc_timeout_s)", n, s->frame_ms / 1e3);
        warn(s, 1, what);
    }
}

/* A free slot, kept for the caller (conn_fd -2 until it is filled), or -1. */
static int take_slot(struct rpc_server *s)
{
    pthread_mutex_lock(&s->mu);
    int slot = -1;
    for (int i = 0; i < s->max_conn && slot < 0 && !s->stopping; i++)
        if (s->conn_fd[i] == -1)
            slot = i;
    if (slot >= 0)
        s->conn_fd[slot] = -2;
    pthread_mutex_unlock(&s->mu);
    return slot;
}

/* The slots are full: closes the newest connection that has not shown the
 * job's token and is older than a moment (GRACE_MS, or the request
 * deadline where that is shorter), idle or in a request: the job's own
 * connections show the token in their first request's first field, at
 * once, so a tokenless one past that moment is a stranger's; one younger
 * may be the job's, just accepted. Called at accept, so a service full of
 * strangers serves the job's next connection at once (a checkpoint's save,
 * a trainer's reconnect). Returns whether it closed one. */
static int make_room(struct rpc_server *s)
{
    if (!s->frame_ms || !s->token[0])
        return 0;
    int64_t now = now_ms(), grace = s->frame_ms < GRACE_MS ? s->frame_ms : GRACE_MS;
    int victim = -1;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->max_conn && !s->stopping; i++)
        if (s->conn_fd[i] >= 0 && !__atomic_load_n(&s->authed[i], __ATOMIC_RELAXED) &&
            now - s->opened[i] >= grace && (victim < 0 || s->opened[i] > s->opened[victim]))
            victim = i;
    if (victim >= 0)
        shutdown(s->conn_fd[victim], SHUT_RDWR);
    pthread_mutex_unlock(&s->mu);
    if (victim >= 0)
        warn(s, 2, "its connections are full: closed the newest one that never sent the job's "
             "token, to make room");
    return victim >= 0;
}

static void *accept_loop(void *arg)
{
    struct rpc_server *s = arg;
    int every = s->frame_ms ? (int)(s->frame_ms / 4) : 1000; /* ms between looks at deadlines */
    every = every < 20 ? 20 : every > 1000 ? 1000 : every;
    for (;;) {
        struct pollfd pf = {s->listen_fd, POLLIN, 0};
        int ready = poll(&pf, 1, every);
        if (__atomic_load_n(&s->closing, __ATOMIC_ACQUIRE))
            return NULL; /* the listening socket was shut down */
        reap(s);
        if (ready <= 0)
            continue;
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN ||
                errno == EWOULDBLOCK)
                continue;
            /* out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), a
             * network error (EPROTO, ENETDOWN...): said, and tried again shortly */
            char what[256];
            snprintf(what, sizeof what, "cannot accept a connection: %s (trying again; the "
                     "limit of open files is ulimit -n)", strerror(errno));
            warn(s, 0, what);
            usleep(50 * 1000);
            continue;
        }
        int slot = take_slot(s);
        if (slot < 0 && make_room(s)) /* its thread ends, freeing its slot */
            for (int i = 0; i < 40 && slot < 0; i++) {
                usleep(5 * 1000);
                slot = take_slot(s);
            }
        pthread_mutex_lock(&s->mu);
        if (slot < 0) {
            int told = s->stopping || s->full_told;
            s->full_told = 1;
            pthread_mutex_unlock(&s->mu);
            if (!told)
                fprintf(stderr, "shadowsync: %s holds %d connections, its most: new ones are "
                        "closed until one ends (said once)\n", s->name, s->max_conn);
            close(fd);
            continue;
        }
        s->opened[slot] = now_ms();
        __atomic_store_n(&s->authed[slot], 0, __ATOMIC_RELAXED);
        /* a peer whose host vanished (no FIN, no RST) frees its slot within
         * about 2 minutes rather than at the job's end */
        int on = 1, idle = 60, every = 10, probes = 6;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &every, sizeof every);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
        double pace;
        __atomic_load(&s->pace, &pace, __ATOMIC_RELAXED);
        pace_fd(fd, pace);
        s->conn_fd[slot] = fd;
        __atomic_store_n(&s->deadline[slot], 0, __ATOMIC_RELAXED);
        s->n_conn++;
        pthread_mutex_unlock(&s->mu);
        struct conn *c = ss_xmalloc(sizeof *c);
        *c = (struct conn){s, slot, fd};
        pthread_t th;
        if (pthread_create(&th, NULL, serve_conn, c) != 0) {
            pthread_mutex_lock(&s->mu);
            s->conn_fd[slot] = -1;
            s->n_conn--;
            pthread_mutex_unlock(&s->mu);
            close(fd);
            free(c);
            continue;
        }
        pthread_detach(th);
    }
}

int rpc_server_start(struct rpc_server **out, const char *addr, int port, ThriftProcessor *proc,
                     struct ss_err *e)
{
    return rpc_server_start_guarded(out, addr, port, proc, NULL, e);
}

int rpc_server_start_guarded(struct rpc_server **out, const char *addr, int port,
                             ThriftProcessor *proc, const struct rpc_guard *g, struct ss_err *e)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return ss_fail(e, SS_EINVAL, "bind address \"%s\" is not an IPv4 address", addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 128) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return ss_fail(e, SS_EIO, "cannot listen on %s:%d: %s", addr, port, strerror(err));
    }
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    struct rpc_server *s = ss_xcalloc(1, sizeof *s);
    s->listen_fd = fd;
    s->port = ntohs(sa.sin_port);
    s->proc = g_object_ref(proc);
    for (int i = 0; i < MAX_CONN; i++)
        s->conn_fd[i] = -1;
    snprintf(s->name, sizeof s->name, "%s", g && g->name ? g->name : "a service");
    snprintf(s->token, sizeof s->token, "%s", g && g->token ? g->token : "");
    if (g && g->timeout_s > 0)
        s->frame_ms = (int64_t)(g->timeout_s * 1000 + 0.5);
    s->max_conn = g && g->max_conn > 0 && g->max_conn < MAX_CONN ? g->max_conn : MAX_CONN;
    s->max_message = g && g->max_message ? g->max_message : SIZE_MAX;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->accept_th, NULL, accept_loop, s) != 0) {
        close(fd);
        g_object_unref(s->proc);
        free(s);
        return ss_fail(e, SS_ESTATE, "cannot start the accept thread");
    }
    *out = s;
    return 0;
}

int rpc_server_port(const struct rpc_server *s)
{
    return s->port;
}

void rpc_server_stop(struct rpc_server *s)
{
    __atomic_store_n(&s->closing, 1, __ATOMIC_RELEASE);
    shutdown(s->listen_fd, SHUT_RDWR);
    pthread_join(s->accept_th, NULL);
    close(s->listen_fd);
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    for (int i = 0; i < MAX_CONN; i++)
        if (s->conn_fd[i] >= 0)
            shutdown(s->conn_fd[i], SHUT_RDWR); /* wakes the connection's thread */
    while (s->n_conn > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    g_object_unref(s->proc);
    free(s);
}

int rpc_connect(const char *host, int port, int timeout_ms, struct rpc_conn **out,
                struct ss_err *e)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return ss_fail(e, SS_EINVAL, "address \"%s\" is not an IPv4 address", host);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ss_fail(e, SS_EIO, "socket: %s", strerror(errno));
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int err = errno;
        close(fd);
        if (err == EINPROGRESS || err == EAGAIN) /* SO_SNDTIMEO ran out on the handshake */
            return ss_fail(e, SS_EIO, "cannot connect to %s:%d: no answer to the connection "
                           "within %.1f s (the host overloaded, or its link down)", host, port,
                           timeout_ms / 1e3);
        return ss_fail(e, SS_EIO, "cannot connect to %s:%d: %s", host, port, strerror(err));
    }
    *out = rpc_conn_on_fd(fd);
    return 0;
}

gboolean rpc_refuse(int64_t *refused, ssRpcError **err, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (refused) /* NULL: a request well made that failed here (a full disk), none refused */
        __atomic_add_fetch(refused, 1, __ATOMIC_RELAXED);
    *err = g_object_new(SS_TYPE_RPC_ERROR, "code", code, "message", msg, NULL);
    return FALSE;
}

GByteArray *rpc_answer(GByteArray **ret, size_t bytes)
{
    if (!*ret)
        *ret = g_byte_array_sized_new((guint)bytes);
    g_byte_array_set_size(*ret, (guint)bytes);
    return *ret;
}

ThriftProcessor *rpc_processor_new(GType processor_type, gpointer handler)
{
    ThriftProcessor *p = g_object_new(processor_type, "handler", handler, NULL);
    g_object_unref(handler);
    return p;
}

int rpc_connect_named(const char *name, const char *host, int port, int timeout_ms,
                      struct rpc_conn **out, struct ss_err *e)
{
    int rc = rpc_connect(host, port, timeout_ms, out, e);
    if (rc < 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        ss_fail(e, rc, "%s: %s", name, why);
    }
    return rc;
}

int rpc_conn_closed(const GError *gerr)
{
    /* a reset or broken pipe (a process killed with requests in flight),
     * or end of file, which Thrift words with whatever errno was left
     * (ENOENT from an earlier call): any failed read but a timeout */
    const char *m = gerr && gerr->message ? gerr->message : "";
    return (strstr(m, "failed to read") && !strstr(m, "Resource temporarily unavailable")) ||
           strstr(m, "Connection reset by peer") || strstr(m, "Broken pipe");
}

int rpc_conn_wait(const struct rpc_conn *c, int timeout_ms)
{
    struct pollfd pf = {c->sock->sd, POLLIN, 0};
    int n = poll(&pf, 1, timeout_ms);
    return n < 0 && errno == EINTR ? 0 : n < 0 ? -1 : n > 0;
}

int rpc_call_failed(struct ss_err *e, const char *name, const char *host, int port,
                    const char *what, ssRpcError *rerr, GError *gerr)
{
    const char *why = rerr && rerr->message ? rerr->message : gerr ? gerr->message : "no answer";
    /* Thrift's words for a socket timeout (SO_RCVTIMEO, SO_SNDTIMEO: EAGAIN) */
    if (!rerr && gerr && strstr(why, "Resource temporarily unavailable"))
        why = "no answer within job.rpc_timeout_s (the service has stalled, or is overloaded)";
    else if (!rerr && rpc_conn_closed(gerr))
        why = "the connection was closed (the service is gone, or full)";
    int code = rerr && rerr->code == SS_ESTOPPED ? SS_ESTOPPED : SS_EIO; /* a write given up */
    int rc = ss_fail(e, code, "%s at %s:%d: %s failed: %s", name, host, port, what, why);
    if (rerr)
        g_object_unref(rerr);
    if (gerr)
        g_error_free(gerr);
    return rc;
}

int rpc_token_ok(const GByteArray *given, const char *token)
{
    int ok = given && given->len == strlen(token) && memcmp(given->data, token, given->len) == 0;
    if (cur) { /* a handler's first step: its request is read, no deadline while it works */
        arm(cur, 0);
        if (ok)
            authed(cur);
    }
    return ok;
}

void rpc_types_init(void)
{
    /* TOOLCHAIN.md pitfall 3: register every generated type, and run its
     * class init, before any thread can race to do it. */
    GType types[] = {SS_TYPE_RPC_ERROR,
                     SS_TYPE_BAGS,
                     SS_TYPE_EMBEDDING_P_S_LOOKUP_ARGS,
                     SS_TYPE_EMBEDDING_P_S_LOOKUP_RESULT,
                     SS_TYPE_EMBEDDING_P_S_PUSH_ARGS,
                     SS_TYPE_EMBEDDING_P_S_PUSH_RESULT,
                     SS_TYPE_ROW_SYNC,
                     SS_TYPE_ROW_ANSWER,
                     SS_TYPE_EMBEDDING_P_S_ROWS_ARGS,
                     SS_TYPE_EMBEDDING_P_S_ROWS_RESULT,
                     SS_TYPE_EMBEDDING_P_S_CLIENT,
                     SS_TYPE_EMBEDDING_P_S_PROCESSOR,
                     SS_TYPE_EMBEDDING_P_S_HANDLER,
                     SS_TYPE_SYNC_P_S_ELASTIC_ARGS,
                     SS_TYPE_SYNC_P_S_ELASTIC_RESULT,
                     SS_TYPE_SYNC_P_S_CLIENT,
                     SS_TYPE_SYNC_P_S_PROCESSOR,
                     SS_TYPE_SYNC_P_S_HANDLER,
                     SS_TYPE_BATCH_REPLY,
                     SS_TYPE_READER_NEXT_BATCH_ARGS,
                     SS_TYPE_READER_NEXT_BATCH_RESULT,
                     SS_TYPE_READER_CLIENT,
                     SS_TYPE_READER_PROCESSOR,
                     SS_TYPE_READER_HANDLER,
                     THRIFT_TYPE_SOCKET,
                     THRIFT_TYPE_BUFFERED_TRANSPORT,
                     THRIFT_TYPE_BINARY_PROTOCOL};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        g_type_class_unref(g_type_class_ref(types[i]));
    /* GLib caches a property's default value on first use: make one of each
     * object now so that happens before any thread exists. */
    GType plain[] = {SS_TYPE_RPC_ERROR, SS_TYPE_BAGS, SS_TYPE_EMBEDDING_P_S_LOOKUP_ARGS,
                     SS_TYPE_EMBEDDING_P_S_LOOKUP_RESULT, SS_TYPE_EMBEDDING_P_S_PUSH_ARGS,
                     SS_TYPE_EMBEDDING_P_S_PUSH_RESULT, SS_TYPE_ROW_SYNC, SS_TYPE_ROW_ANSWER,
                     SS_TYPE_EMBEDDING_P_S_ROWS_ARGS, SS_TYPE_EMBEDDING_P_S_ROWS_RESULT,
                     SS_TYPE_EMBEDDING_P_S_CLIENT,
                     SS_TYPE_SYNC_P_S_ELASTIC_ARGS, SS_TYPE_SYNC_P_S_ELASTIC_RESULT,
                     SS_TYPE_SYNC_P_S_CLIENT, SS_TYPE_BATCH_REPLY, SS_TYPE_READER_NEXT_BATCH_ARGS,
                     SS_TYPE_READER_NEXT_BATCH_RESULT, SS_TYPE_READER_CLIENT};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
        g_object_unref(g_object_new(plain[i], NULL));
    rpc_conn_close(rpc_conn_on_fd(-1));
}

int rpc_save_path_ok(const char *path, const char *root)
{
    size_t n = root ? strlen(root) : 0;
    if (!path || !n || strlen(path) >= 4096 || strncmp(path, root, n) != 0 ||
        (path[n] != '/' && root[n - 1] != '/'))
        return 0;
    return !rpc_path_has_dotdot(path);
}

int rpc_path_has_dotdot(const char *path)
{
    for (const char *q = path; (q = strstr(q, "..")); q += 2)
        if ((q == path || q[-1] == '/') && (q[2] == '/' || q[2] == 0))
            return 1;
    return 0;
}

gboolean rpc_save_request_ok(int64_t *refused, ssRpcError **err, const GByteArray *token,
                             const char *job_token, const char *path, const char *root)
{
    if (!rpc_token_ok(token, job_token))
        return rpc_refuse(refused, err, SS_EINVAL, "request refused: missing or wrong job token");
    if (!rpc_save_path_ok(path, root))
        return rpc_refuse(refused, err, SS_EINVAL, "bad request: save path refused");
    return TRUE;
}
