/* shadowsync shadow: the sync algorithms behind one interface, the
 * collectives and central copy they talk through, and the shadow thread
 * (DESIGN §3); also the all-to-all a DES group of trainers exchanges its
 * embeddings through (struct exchange), a collective like the others.
 *
 * The shadow thread knows nothing of training: it calls sync() in a loop
 * until every trainer's data has ended (the last round is the final sync).
 * In foreground mode it runs a round only when a worker asks for one, and
 * that worker waits for it. An algorithm reads and writes the trainer's
 * live dense buffer without locks (Hogwild). Adding an algorithm = one file
 * here and one line in the table of algos.c. */
#ifndef SHADOWSYNC_SHADOW_H
#define SHADOWSYNC_SHADOW_H

#include "core.h"

#include <mpi.h>

/* An all-reduce among the trainers: in-process (local.c), over MPI (mpi.c)
 * or over NCCL between GPU trainers (gpu.h). */
struct collective;
struct collective_ops {
    const char *name;
    /* buf[0..n) becomes the element-wise sum over all members. Blocking. */
    int (*allreduce_sum)(struct collective *c, float *buf, size_t n, struct ss_err *e);
    void (*free)(struct collective *c);
    /* frees without waiting on the other members (a start that failed on
     * some); NULL: free does not wait */
    void (*abort)(struct collective *c);
};
struct collective {
    const struct collective_ops *ops;
    int rank, size;
    void *impl;
    /* Set by the algorithm: this member's data has ended and it only joins
     * the others' rounds, which may come far apart (foreground, a large
     * sync.gap), while its main thread watches their progress reports
     * (those find a trainer that stalls): its wait has no stall deadline
     * until that watch ends (shadow_wait clears it; atomic). */
    int idle;
};
/* n members of one in-process group (one per trainer); free each. */
void collective_local_group(struct collective **members, int n, size_t max_len);
/* A member's sync failed: every round of the group, waiting or to come,
 * fails too, so no other trainer waits for ever on the one that stopped. */
void collective_local_break(struct collective *member);

/* This rank's member of an all-reduce over comm (the trainers' communicator),
 * waiting as peer_wait_req does. comm is borrowed. */
struct collective *collective_mpi(MPI_Comm comm, const struct peer_wait *pw);

/* The all-to-all of a DES group (DESIGN §9 "equivalent substitution"):
 * worker w of every trainer forms group w, which exchanges pooled partial
 * sums and their gradients every step (the trainer's emb_client_des). */
struct exchange;
struct exchange_ops {
    /* Collective over the group: this member packs, one after another in
     * send, sbytes[q] bytes for each member q, and gets from each member p
     * rbytes[p] bytes (what p packed for it), one after another in recv. */
    int (*alltoallv)(struct exchange *x, const void *send, const size_t *sbytes, void *recv,
                     const size_t *rbytes, struct ss_err *e);
    void (*free)(struct exchange *x);
};
struct exchange {
    const struct exchange_ops *ops;
    int rank, size;             /* this member, of size */
};
/* size members in this process (threads), x[0..size) (exchange.c); a member
 * waiting on the others gives up with an error once *stop is set (stop may
 * be NULL). */
void exchange_local_group(struct exchange **x, int size, const int *stop);

/* A member of a DES group's all-to-all over comm (the trainers'; its own
 * duplicate, so every trainer must make its groups in the same order). */
struct exchange *exchange_mpi(MPI_Comm comm, const struct peer_wait *pw);

/* The EASGD central copy w_PS: in-process (the embedded default), or held
 * by the sync PSs of a cluster job (center_thrift). */
struct center;
struct center_ops {
    /* Atomically w_PS <- (1-alpha) w_PS + alpha w; then out <- w_PS. */
    int (*elastic)(struct center *c, const float *w, float *out, size_t n, float alpha,
                   struct ss_err *e);
    void (*free)(struct center *c);
    /* For checkpoints (NULL where not supported): out <- w_PS, w_PS <- in. */
    void (*get)(struct center *c, float *out);
    void (*set)(struct center *c, const float *in);
};
struct center {
    const struct center_ops *ops;
    void *impl;
};
struct center *center_local_create(const float *init, size_t n);
/* The center held by P sync PSs over Thrift, partition p on ps[p]
 * (ss_partition); every elastic call sends all partitions before it
 * reads any answer. Not thread-safe: the shadow thread's own. */
struct sync_endpoint {
    const char *name;           /* for errors, e.g. "sync_ps 0 (rank 4 on node7)" */
    const char *host;
    int port;
};
int center_thrift(struct center **out, const struct sync_endpoint *ps, int P, size_t n,
                  const char *token, int timeout_ms, double pace, struct ss_err *e);

/* What an algorithm sees. */
struct sync_ctx {
    const struct ss_config *cfg;
    float *w;                   /* the trainer's live dense buffer */
    size_t n;
    struct collective *coll;    /* ma, bmuf, allreduce */
    struct center *center;      /* easgd */
    float *buf;                 /* scratch of n+1 floats */
    void *state;                /* the algorithm's own */
    /* The summed tail: the last n_sum floats of w are rows every trainer
     * updates for all (hot embedding rows), which a collective algorithm
     * does not average: a round adds every trainer's change since the last
     * one (w <- base + the sum of (w_t - base) + the steps taken during the
     * round), as if each update had reached one shared copy. base is the
     * tail as of the last round, tail_snap this round's (n_sum floats each).
     * tail_agreed 0: the members' tails may differ (resumed from replicas
     * saved mid-round), so the first round averages them instead and makes
     * the mean every member's base. */
    size_t n_sum;
    float *base, *tail_snap;
    int tail_agreed;
    /* EASGD: other trainers may still be training (set by the thread each
     * round); the final push made. */
    int others_on, pushed;
    float *snap;                /* n floats: w as the round read it */
};

/* What an algorithm talks through: the trainer sets up that much. */
enum sync_needs { SYNC_NEEDS_NOTHING, SYNC_NEEDS_CENTER, SYNC_NEEDS_COLLECTIVE };

/* Which config keys an algorithm's rounds use, so a job can say when a key
 * it sets does nothing (sync_config_notes). */
enum sync_uses {
    SYNC_ROUNDS = 1,            /* it syncs at all (none: no round changes anything) */
    SYNC_USES_ALPHA = 2,        /* sync.alpha */
    SYNC_USES_BMUF = 4,         /* sync.bmuf_momentum, sync.bmuf_lr, sync.bmuf_nesterov */
    SYNC_MEAN = 8,              /* a round is a plain mean (with 1 trainer: of itself) */
};

struct sync_algo_ops {
    const char *name;
    int needs;                  /* enum sync_needs */
    unsigned uses;              /* enum sync_uses */
    const char *advice;         /* what to change when the model diverges (NULL: the rates) */
    int (*init)(struct sync_ctx *c, struct ss_err *e);
    /* One round. active: this trainer still has data. Returns how many
     * trainers were active in the round as far as it can tell (0: this was
     * the last round; a round after this trainer's first inactive one only
     * follows the others and is no sync of its own), or a negative code. */
    int (*sync)(struct sync_ctx *c, int active, struct ss_err *e);
    void (*free)(struct sync_ctx *c);
    /* The algorithm's own state for checkpoints: up to 4 arrays of n floats
     * (BMUF: the global model and its momentum); returns how many (NULL: none). */
    int (*state)(struct sync_ctx *c, float **arrays);
};
const struct sync_algo_ops *sync_algo_find(const char *name);
int sync_algo_needs(const char *name); /* enum sync_needs; nothing for an unknown name */
/* The notes a job says at start about its sync settings (out: stdout):
 * rounds that change nothing, and keys set away from their defaults that
 * its algorithm or mode do not use. */
void sync_config_notes(const struct ss_config *c, int trainers, FILE *out);
/* What to change when the model diverged: the rates, and the algorithm's
 * own step where the rates' schedule does not scale it. */
const char *sync_diverged_advice(const struct ss_config *c);
/* Foreground mode: a round every sync_foreground_gap steps of a worker;
 * 0: no worker waits for a round (shadow mode, or an algorithm with none). */
int sync_foreground_gap(const struct ss_config *c);

/* The shadow thread. */
struct shadow;
struct shadow_opts {
    const struct ss_config *cfg;
    float *w;                   /* the trainer's live dense buffer, or its staging copy */
    size_t n;
    struct collective *coll;    /* what the algorithm talks through (sync_algo_needs) */
    struct center *center;
    /* The job's trainer count: above 1, an EASGD trainer whose data has
     * ended follows the center (pulls only) until shadow_wait, so the
     * others' later work reaches its replica too. */
    int trainers;
    /* The CPU seconds a second the thread may take (sync.shadow_cpu_share
     * of a host with no core to spare for it), its pause between rounds
     * stretched to keep within them; 0: sync.shadow_sleep_ms alone. */
    double cpu_allowance;
    struct {
        float *const *arrays;   /* the algorithm's state arrays to start from (NULL: fresh) */
        int n;
    } restore;
    /* A trainer whose live copy is elsewhere (a GPU, gpu.h): w is then a
     * staging copy, filled by pull before each round and handed back by
     * push after it (NULL: w is the live buffer). */
    struct {
        int (*pull)(void *arg, struct ss_err *e);
        int (*push)(void *arg, struct ss_err *e);
        void *arg;
    } stage;
    struct {
        size_t n;               /* sync_ctx's summed tail (0: none; collective algorithms) */
        int resumed;            /* the tails come from a checkpoint: agree on them first */
    } tail;
    /* Called once, on the shadow thread, when a round fails (NULL: none):
     * in shadow mode no worker waits on a round, so the trainer learns of it
     * here rather than at the end of its data. */
    struct {
        void (*call)(void *arg, const struct ss_err *e);
        void *arg;
    } failed;
};
int shadow_start(struct shadow **out, const struct shadow_opts *o, struct ss_err *e);
/* Foreground mode, from a worker: waits for a sync round that starts after
 * this call. Returns 0, or a negative code if the shadow thread failed. */
int shadow_request(struct shadow *s);
/* The workers are paused (held = 1, e.g. for a checkpoint) or back: while
 * held, a foreground shadow thread of a collective algorithm runs rounds
 * unasked, so other trainers' workers waiting on a round are not stuck
 * behind this one's pause; those rounds are not counted as syncs. */
void shadow_hold(struct shadow *s, int held);
/* The trainer's data has ended (all its workers are out of their loops). */
void shadow_data_done(struct shadow *s);
/* Waits until the trainer's final round (its first after shadow_data_done)
 * has ended: an EASGD trainer's last push is in the center before it says
 * its data has ended, so a following trainer's last pull takes it in. */
void shadow_wait_final(struct shadow *s);
/* Ends the rounds once the trainer's data has ended (call it when every
 * trainer's has: an EASGD trainer follows the center until then) and
 * waits for the last; returns its status (e: its error) and the syncs
 * made. The algorithm's state stays readable (shadow_state, for the
 * final checkpoint) until shadow_join. */
int shadow_wait(struct shadow *s, int64_t *syncs, struct ss_err *e);
/* shadow_wait, then frees the thread's state. */
int shadow_join(struct shadow *s, int64_t *syncs, struct ss_err *e);
int64_t shadow_syncs(struct shadow *s);  /* rounds so far, any thread */
/* The algorithm's state arrays (n floats each, live: read them while the
 * workers are paused, as a Hogwild snapshot); returns how many. */
int shadow_state(struct shadow *s, float **arrays);

#endif
