/* struct batch (core.h): example-major arrays for up to cap examples, with
 * an id array (and its weights, once a weight is not 1) that grows when
 * multi-hot bags need more than one id per table. Allocation aborts on OOM: the sizes are ours, not the input's. */
#include "shadowsync/core.h"

#include <stdlib.h>
#include <string.h>

void batch_init(struct batch *b, int cap, int n_dense, int n_tables)
{
    memset(b, 0, sizeof *b);
    if (cap < 1)
        cap = 1;
    b->cap = cap;
    b->n_dense = n_dense;
    b->n_tables = n_tables;
    b->lr_scale = 1;
    b->at = -1;
    b->label = ss_xcalloc((size_t)cap, sizeof *b->label);
    b->dense = ss_xcalloc((size_t)cap * (size_t)n_dense, sizeof *b->dense);
    b->off = ss_xcalloc((size_t)cap * (size_t)n_tables + 1, sizeof *b->off);
    b->id_cap = (size_t)cap * (size_t)n_tables;
    if (b->id_cap == 0)
        b->id_cap = 1;
    b->ids = ss_xcalloc(b->id_cap, sizeof *b->ids);
    b->example_id = ss_xcalloc((size_t)cap, sizeof *b->example_id);
}

void batch_reserve_ids(struct batch *b, size_t need)
{
    if (need <= b->id_cap)
        return;
    size_t cap = b->id_cap * 2;
    if (cap < need)
        cap = need;
    uint64_t *ids = realloc(b->ids, cap * sizeof *ids);
    float *wts = b->wts ? realloc(b->wts, cap * sizeof *wts) : NULL;
    if (!ids || (b->wts && !wts)) {
        fprintf(stderr, "shadowsync: out of memory growing a batch to %zu ids\n", cap);
        abort();
    }
    b->ids = ids;
    if (b->wts)
        b->wts = wts;
    b->id_cap = cap;
}

void batch_weigh(struct batch *b, size_t at)
{
    if (!b->wts)
        b->wts = ss_xmalloc(b->id_cap * sizeof *b->wts);
    for (size_t q = 0; q < at; q++)
        b->wts[q] = 1.0f;
    b->weighted = 1;
}

void batch_clear(struct batch *b)
{
    b->n = 0;
    b->off[0] = 0;
    b->weighted = 0;
}

void batch_free(struct batch *b)
{
    free(b->label);
    free(b->dense);
    free(b->off);
    free(b->ids);
    free(b->wts);
    free(b->example_id);
    memset(b, 0, sizeof *b);
}
