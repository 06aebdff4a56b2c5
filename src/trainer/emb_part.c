/* A part of a batch through an inner emb_client (emb_part.h). */
#include "emb_part.h"

#include <stdlib.h>
#include <string.h>

void emb_part_reserve(struct emb_part *p, int n, int T, int dim)
{
    if (n <= p->cap)
        return;
    p->cap = n, p->T = T, p->dim = dim;
    batch_free(&p->b);
    batch_init(&p->b, n, 0, T);
    free(p->which);
    free(p->tmp);
    p->which = ss_xmalloc((size_t)n * sizeof(int32_t));
    p->tmp = ss_aligned((size_t)n * T * dim * sizeof(float));
}

int emb_part_lookup(struct emb_client *inner, struct emb_part *p, int n, float *out,
                    struct ss_err *e)
{
    size_t ex = (size_t)p->T * p->dim; /* floats of one example's bags */
    if (p->b.n == n) /* every example: no copy */
        return inner->ops->lookup(inner, &p->b, out, e);
    memset(out, 0, (size_t)n * ex * sizeof(float));
    int rc = p->b.n > 0 ? inner->ops->lookup(inner, &p->b, p->tmp, e) : 0;
    for (int k = 0; rc == 0 && k < p->b.n; k++)
        memcpy(out + (size_t)p->which[k] * ex, p->tmp + (size_t)k * ex, ex * sizeof(float));
    return rc;
}

int emb_part_push(struct emb_client *inner, struct emb_part *p, int n, const float *g,
                  struct ss_err *e)
{
    size_t ex = (size_t)p->T * p->dim;
    if (p->b.n == n)
        return inner->ops->push(inner, &p->b, g, e);
    if (p->b.n == 0)
        return 0;
    for (int k = 0; k < p->b.n; k++)
        memcpy(p->tmp + (size_t)k * ex, g + (size_t)p->which[k] * ex, ex * sizeof(float));
    return inner->ops->push(inner, &p->b, p->tmp, e);
}

void emb_part_free(struct emb_part *p)
{
    batch_free(&p->b);
    free(p->which);
    free(p->tmp);
    memset(p, 0, sizeof *p);
}
