/* shadowsync embedding PS: the embedding tables and their optimizer
 * (DESIGN §1, §3). Each table holds rows of dim floats with the row's
 * optimizer state beside it (row-wise Adagrad: one float). Lookups return
 * bags already sum-pooled; pushes take the gradient of the pooled outputs
 * and update the rows Hogwild-style, without locks. The same tables serve
 * the embedded default (in-process) and, later, the PS role over Thrift. */
#ifndef SHADOWSYNC_EMBPS_H
#define SHADOWSYNC_EMBPS_H

#include "core.h"

struct emb_tables;

struct emb_opts {
    int n_tables, dim;
    const int64_t *rows;        /* [n_tables] */
    int opt;                    /* OPT_SGD or OPT_ROWWISE_ADAGRAD */
    float lr, eps, init_acc;
    uint64_t seed;              /* rows start uniform in +-sqrt(1/rows), like the peer */
    const int32_t *global_ids;  /* [n_tables] job-wide table ids (NULL: 0..n-1); a table's
                                   initial rows depend on seed and its global id only, so
                                   any placement of tables on PSs starts from the same model */
};

int embps_create(struct emb_tables **out, const struct emb_opts *o, struct ss_err *e);
void embps_free(struct emb_tables *t);
size_t embps_bytes(const struct emb_tables *t);

/* out[i*T*dim + t*dim ..] = sum of the rows of example i's bag in table t. */
void embps_pool(struct emb_tables *t, const struct batch *b, float *out);
/* Applies d_pooled (same layout as embps_pool's out) to every row of each bag. */
void embps_push(struct emb_tables *t, const struct batch *b, const float *d_pooled);

/* Model files: rows and optimizer state, with a header checked on load. */
int embps_save(const struct emb_tables *t, const char *path, struct ss_err *e);
int embps_load(struct emb_tables *t, const char *path, struct ss_err *e);

/* The embedding PS role's service (service.c): lookup and push over
 * Thrift for the k tables this PS holds (global ids table_ids[0..k), held
 * in t in that order). Every request is checked (token, sizes, table ids,
 * offsets, id counts, a size cap) and a bad one gets an RpcError while the
 * service goes on serving. */
typedef struct _ThriftProcessor ThriftProcessor;
struct embps_stats {
    int64_t lookups, pushes, refused, bytes_in, bytes_out;
};
struct embps_service;
struct embps_service *embps_service_create(struct emb_tables *t, const int32_t *table_ids, int k,
                                           const char *token);
ThriftProcessor *embps_service_processor(struct embps_service *s);
void embps_service_stats(struct embps_service *s, struct embps_stats *st);
void embps_service_free(struct embps_service *s);
int embps_dim(const struct emb_tables *t);

/* Placement until the placement pass lands: table t on PS t mod n_ps.
 * Fills tables[] with PS ps's global table ids; returns how many. */
int embps_round_robin(int n_tables, int n_ps, int ps, int32_t *tables);

/* The embedding PS role of a cluster job (role.c): builds its tables,
 * serves them until the job ends, prints its figures. */
struct job_plan;
int embps_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e);

#endif
