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

#endif
