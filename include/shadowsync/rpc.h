/* shadowsync rpc: the wires of the cluster job (DESIGN §2). The bootstrap
 * over MPI: role counts checked against the launch, roles by rank in a
 * fixed order (trainers first), the trainers' communicator, the job token
 * made by rank 0 (the master) and shared with every rank, and each rank's
 * host for error messages; every rank's heartbeat (pulse.c); the roles'
 * endpoints and figures; and the Thrift layer the services and their
 * clients share (server.c): guarded servers, connections, the token and
 * errors of every request. How a rank waits on the others and ends the
 * job is core's (core.h), below the modules that wait. */
#ifndef SHADOWSYNC_RPC_H
#define SHADOWSYNC_RPC_H

#include "core.h"

#include <mpi.h>
#include <thrift/c_glib/processor/thrift_processor.h>
#include <thrift/c_glib/protocol/thrift_protocol.h>

#include "ss_embedding_p_s.h"   /* generated from src/rpc/shadowsync.thrift */
#include "ss_reader.h"
#include "ss_sync_p_s.h"

enum role { ROLE_TRAINER, ROLE_EMBEDDING_PS, ROLE_SYNC_PS, ROLE_READER, N_ROLES };

struct job_plan {
    int rank, size;             /* in MPI_COMM_WORLD */
    int role, role_index;       /* this rank's role, and which one of that role */
    int count[N_ROLES];         /* ranks per role, from the config */
    MPI_Comm trainers;          /* the trainers' communicator; MPI_COMM_NULL elsewhere */
    char token[33];             /* 32 hex digits; never logged */
    char (*hosts)[64];          /* [size] host of every rank */
    char (*addrs)[64];          /* [size] the address each rank's services take (rpc_check_bind) */
    int multi_host;             /* the ranks' networks differ, whatever their host names */
#define ROLE_FIGURES 12         /* [10], [11]: its bytes sent, received over TCP (rpc_report_roles) */
    double figures[ROLE_FIGURES]; /* this rank's role figures at the end (rpc_report_roles) */
    struct placement *placement; /* the tables' plan, the same on every rank */
    char resume_from[4300];     /* the checkpoint every rank resumes from ("": none) */
    struct hot_set *hot;        /* the hot embedding rows, the same on every rank (NULL: none) */
    int hot_from_ckpt;          /* ...as listed in resume_from */
    struct rpc_pulse *pulse;    /* this rank's heartbeat (NULL: none) */
    struct stall_guard *start_guard; /* the job's start, until the heartbeat (rpc_started) */
    double end_wait_s;          /* how long the job's end waits on a rank (twice
                                 * sync.timeout_s; 0: for ever) */
};

const char *rpc_role_name(int role);
/* The role counts of c, checked against a launch of size ranks. */
int rpc_role_counts(const struct ss_config *c, int size, int count[N_ROLES], struct ss_err *e);
/* Role and index of rank (roles in enum order, trainers first). */
void rpc_assign_role(const int count[N_ROLES], int rank, int *role, int *index);
/* True when this process was started by mpirun with more than one rank. */
int rpc_under_mpirun(void);
/* This rank's role has made its communicators: its heartbeat starts and
 * the guard on the job's start (a rank stopped while the others wait on
 * it in a collective of the start: checks, placement, announcements)
 * ends. */
void rpc_started(struct job_plan *p);
/* MPI_Init_thread(MULTIPLE) and the plan. On a count mismatch every rank
 * fails with the same message naming the counts. */
int rpc_bootstrap(struct job_plan *p, const struct ss_config *c, struct ss_err *e);
void rpc_finalize(struct job_plan *p);

struct rpc_server;
/* A role's service on this rank's address (p->addrs, rpc_check_bind),
 * written into host. Guarded with the job's token and job.rpc_timeout_s,
 * max_message as struct rpc_guard's, its warnings naming this rank. */
int rpc_role_server(struct rpc_server **out, const struct ss_config *c, const struct job_plan *p,
                    ThriftProcessor *proc, size_t max_message, char host[64], struct ss_err *e);
/* The ranks run on more than one host. */
int rpc_multi_host(const struct job_plan *p);
/* Every rank's address (collective), into p->addrs: job.bind; else
 * job.interface's (an interface name: its first IPv4 address; a CIDR:
 * the rank's first address in it); else the host's name's IPv4 address,
 * and where that is a loopback one (Debian's 127.0.1.1, or none) and the
 * ranks run on several hosts (their names or their networks differ), the
 * first up interface's that is not a loopback. An error naming the key:
 * job.bind that is no IPv4 address or that the others cannot reach (a
 * loopback address or 0.0.0.0 on several hosts), both keys set, or a
 * rank with no address on job.interface (naming it and its addresses). */
int rpc_check_bind(const struct ss_config *c, struct job_plan *p, struct ss_err *e);
/* The bytes/s this rank's sync connections are paced to: sync.link_share
 * of job.link_rate (auto: the speed reported for the interface holding
 * the rank's address); 0 where either is 0 or unknown. how: a line's
 * worth saying which. */
double rpc_link_pace(const struct ss_config *c, const struct job_plan *p, char *how, size_t cap);
/* Its checks of the keys alone (job.bind an IPv4 address, job.interface a
 * name or a CIDR, not both), for `shadowsync check`. */
int rpc_address_keys_ok(const struct ss_config *c, struct ss_err *e);
/* This process's bytes sent (acknowledged) and received over TCP so far,
 * every socket's, the closed rpc_conns' included (tcp_bytes.c). */
void rpc_tcp_bytes(int64_t *sent, int64_t *received);
void rpc_tcp_note_close(int fd); /* a socket about to close: its counts kept */
struct endpoint {
    char host[64];
    int port;                   /* 0: this rank serves nothing; -1: its service failed to start */
};
/* Every rank gives its endpoint and gets all of them, by rank. Collective. */
void rpc_exchange_endpoints(struct job_plan *p, const struct endpoint *mine,
                            struct endpoint *all);
struct rpc_server;
/* A service rank's turn of it: mine->port = srv's port, or -1 when its
 * service did not start (srv NULL), so the trainers name this rank rather
 * than connect to it. */
void rpc_announce(struct job_plan *p, struct endpoint *mine, struct rpc_server *srv,
                  struct endpoint *all);
/* Waits (polling, no spinning) until every rank of the job has called it. */
void rpc_wait_job_end(struct job_plan *p);

/* Lets go of n send requests: one still in flight completes on its own,
 * from its buffer, which the caller then keeps. Returns 1 when one was. */
int rpc_sends_release(MPI_Request *req, int n);
/* "ROLE K (rank R on HOST)". */
void rpc_rank_name(const struct job_plan *p, int rank, char *out, size_t cap);
/* Every rank's heartbeat (src/rpc/pulse.c): made collectively over
 * MPI_COMM_WORLD before any thread of the rank calls MPI; started by each
 * role once it makes no more communicators (rpc_wait_job_end starts it
 * where the role did not), stopped and freed by rpc_finalize just before
 * MPI_Finalize (the stop sends the next rank a last byte: listen no more).
 * timeout_s: sync.timeout_s (0: none). */
struct rpc_pulse *rpc_pulse_new(const struct job_plan *p, double timeout_s);
void rpc_pulse_start(struct rpc_pulse *h);
void rpc_pulse_free(struct rpc_pulse *h);
/* Collective, after the roles have run: rank 0 gathers every rank's
 * p->figures, prints a line per service and writes DIR/roles.json.
 *   embedding_ps: lookups, pushes, refused, bytes in, bytes out, seconds,
 *                 busy seconds (CPU in pool and push), load seconds (rows looked up
 *                 x the profiled cost per row of their table)
 *   sync_ps:      syncs served, refused, seconds, center reads (alpha 0)
 *   reader:       batches served, examples, bad lines, refused, seconds */
void rpc_report_roles(struct job_plan *p, const char *dir);

/* Thrift (server.c). Call rpc_types_init() in main before any thread. */
void rpc_types_init(void);
struct rpc_server;
/* Serves proc on addr:port (port 0: a free one), a thread per connection. */
int rpc_server_start(struct rpc_server **out, const char *addr, int port, ThriftProcessor *proc,
                     struct ss_err *e);
/* How a role's server guards itself (DESIGN §8). With timeout_s > 0 a
 * request begun must arrive whole within timeout_s (the job's
 * rpc_timeout_s); an idle connection is never closed for it (the job's
 * own may idle for long: a trainer's eval client until the end), but when
 * all max_conn slots (0: 1024) are taken, the newest connection that never
 * sent the job's token and is older than a second (or timeout_s, where
 * shorter) is closed to make room, at once. A message may hold max_message bytes of fields
 * (0: as many as its fields may), and before one of them is token (NULL:
 * none looked for) SS_TOKENLESS_BYTES. name names the service in its
 * warnings ("embedding_ps 1 (rank 3 on node7)"). rpc_server_start: no
 * guard. */
struct rpc_guard {
    const char *name, *token;
    double timeout_s;
    size_t max_message;
    int max_conn;
};
#define SS_TOKENLESS_BYTES (1u << 20)
int rpc_server_start_guarded(struct rpc_server **out, const char *addr, int port,
                             ThriftProcessor *proc, const struct rpc_guard *g, struct ss_err *e);
int rpc_server_port(const struct rpc_server *s);
/* Connections accepted from now on send at most bytes_s (TCP pacing; 0: unpaced). */
void rpc_server_pace(struct rpc_server *s, double bytes_s);
/* Stops accepting, closes every connection, waits for their threads. */
void rpc_server_stop(struct rpc_server *s);
/* A connection: binary protocol over a buffered socket, TCP_NODELAY. */
struct rpc_conn;
/* To host:port; every read and write times out after timeout_ms. */
int rpc_connect(const char *host, int port, int timeout_ms, struct rpc_conn **out,
                struct ss_err *e);
struct rpc_conn *rpc_conn_on_fd(int fd);       /* takes the fd */
ThriftProtocol *rpc_conn_protocol(const struct rpc_conn *c);
/* Caps what the connection may still read (Thrift refuses a field longer
 * than that before allocating it); the library's default is 100 MiB. */
void rpc_conn_limit(struct rpc_conn *c, long bytes);
/* The connection sends at most bytes_s (TCP pacing; 0: unpaced). */
void rpc_conn_pace(struct rpc_conn *c, double bytes_s);
void rpc_conn_close(struct rpc_conn *c);

/* For handlers: answers an RpcError with the formatted message, counts it
 * in *refused (atomically; NULL: a request that failed, not one refused)
 * and returns FALSE. */
gboolean rpc_refuse(int64_t *refused, ssRpcError **err, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A handler's binary answer of bytes bytes (allocated when the processor
 * handed it in NULL, TOOLCHAIN.md pitfall 4). */
GByteArray *rpc_answer(GByteArray **ret, size_t bytes);
/* The longest binary field a request may hold (ids, gradients, a center
 * slice); a longer one fails its request. Strings: 64 KiB. */
#define SS_MAX_FIELD_BYTES (1u << 30)

/* n floats in embedding.wire's form (enum wire_form; wire.c): its bytes,
 * the encoding into out, and the decoding of bytes back (-1: not n floats
 * of that form, or an fp16 scale that is no positive finite number). */
size_t wire_bytes(int form, size_t n);
void wire_encode(int form, const float *v, size_t n, void *out);
int wire_decode(int form, const void *in, size_t bytes, float *out, size_t n);
/* One request from in, answered on out (the server's loop; the fuzz
 * targets). */
gboolean rpc_process(ThriftProcessor *proc, ThriftProtocol *in, ThriftProtocol *out,
                     GError **err);
/* A processor of processor_type over handler (the processor takes it). */
ThriftProcessor *rpc_processor_new(GType processor_type, gpointer handler);
/* rpc_connect, with errors that start with name (e.g. "embedding_ps 1 (rank 3 on node7)"). */
int rpc_connect_named(const char *name, const char *host, int port, int timeout_ms,
                      struct rpc_conn **out, struct ss_err *e);
/* For clients: fills e with "NAME at HOST:PORT: WHAT failed: why" from the
 * service's RpcError or the transport's GError (either may be NULL; both
 * are freed) and returns SS_EIO. */
int rpc_call_failed(struct ss_err *e, const char *name, const char *host, int port,
                    const char *what, ssRpcError *rerr, GError *gerr);
/* The transport's error says the service closed the connection (end of
 * file, a reset, a broken pipe), not that it was silent. */
int rpc_conn_closed(const GError *gerr);
/* Waits at most timeout_ms for the answer to a request sent to begin to
 * arrive (or the connection to end): 1 it has, 0 not yet, -1 an error. */
int rpc_conn_wait(const struct rpc_conn *c, int timeout_ms);
/* The request's token is the job's (same bytes, same length). Called by
 * every handler first: on a server's thread it also marks the request
 * read (its deadline lifted) and, when the token is right, the connection
 * as the job's (never closed to make room). */
int rpc_token_ok(const GByteArray *given, const char *token);
/* A save request's path: inside root (the job's checkpoint.dir; "" allows
 * nothing), under 4096 bytes, no ".." component. A service writes nowhere
 * else, whoever holds the token. */
int rpc_save_path_ok(const char *path, const char *root);
/* path has a ".." component. */
int rpc_path_has_dotdot(const char *path);
/* A save request's token and path, refused (and counted) like rpc_refuse. */
gboolean rpc_save_request_ok(int64_t *refused, ssRpcError **err, const GByteArray *token,
                             const char *job_token, const char *path, const char *root);

#endif
