/* Part of a batch sent on to an inner emb_client (emb_part.c): the hot
 * client's examples with a cold id, the cache's with an id it has no room
 * for. The client fills b (each kept example with only the ids the inner
 * client serves) and which (each kept example's place in the whole batch). */
#ifndef SHADOWSYNC_EMB_PART_H
#define SHADOWSYNC_EMB_PART_H

#include "shadowsync/trainer.h"

struct emb_part {
    struct batch b;
    int32_t *which;             /* [cap] */
    float *tmp;                 /* [cap*T*dim] the kept examples' pooled bags or gradients */
    int cap, T, dim;
};
/* Room for whole batches of n examples (grows; never shrinks). */
void emb_part_reserve(struct emb_part *p, int n, int T, int dim);
/* out[n*T*dim] <- the kept examples' bags from inner, zero for the others. */
int emb_part_lookup(struct emb_client *inner, struct emb_part *p, int n, float *out,
                    struct ss_err *e);
/* Pushes the kept examples' rows of g[n*T*dim] through inner. */
int emb_part_push(struct emb_client *inner, struct emb_part *p, int n, const float *g,
                  struct ss_err *e);
void emb_part_free(struct emb_part *p);

#endif
