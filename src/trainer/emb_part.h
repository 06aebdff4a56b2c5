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
/* Pushes the kept examples' rows of g[b->n*T*dim] through inner, at b's
 * rates (lr_scale). */
int emb_part_push(struct emb_client *inner, struct emb_part *p, const struct batch *b,
                  const float *g, struct ss_err *e);
void emb_part_free(struct emb_part *p);

/* A request's shards (the Thrift client's to a PS, DES's to a trainer): k
 * shards, shard j rows [lo[j], hi[j]) of table tables[j]. A request holds,
 * per example and shard, the bag's rows (id mod the table's rows) that the
 * shard holds: off[n*k+1] into ids; its answer (and its push) one vector of
 * dim floats per non-empty bag, in order. */
struct shard_set {
    int k;
    int32_t *tables;
    int64_t *lo, *hi;
};
/* The shards of PS (or trainer) ps of plan pl, the plan's shard ids into
 * ids[pl->n_shards + 1]; returns s->k. */
int shard_set_of(const struct placement *pl, int ps, int32_t *ids, struct shard_set *s);
void shard_set_free(struct shard_set *s);
/* b's ids in the set's tables: room enough for shard_gather's ids. */
size_t shard_ids_max(const struct shard_set *s, const struct batch *b);
/* The request for b into off and ids (and each id's weight into wts,
 * unless NULL); returns the ids, *m the non-empty bags. */
size_t shard_gather(const struct shard_set *s, const int64_t *table_rows, const struct batch *b,
                    int32_t *off, uint64_t *ids, float *wts, size_t *m);
/* out[n*T*dim] += answer a (a request's n examples, off as gathered). */
void shard_add_answer(const struct shard_set *s, int n, const int32_t *off, const float *a, int T,
                      int dim, float *out);
/* dst <- the vectors of g[n*T*dim] of off's non-empty bags, in order. */
void shard_pick(const struct shard_set *s, int n, const int32_t *off, const float *g, int T,
                int dim, float *dst);

#endif
