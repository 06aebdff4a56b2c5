/* The in-process emb_client: the trainer's tables live in its own process
 * (the embedded default, DESIGN §2). */
#include "shadowsync/trainer.h"

#include <stdlib.h>

static int local_lookup(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e)
{
    (void)e;
    embps_pool(c->impl, b, out);
    return 0;
}

static int local_push(struct emb_client *c, const struct batch *b, const float *g, struct ss_err *e)
{
    (void)e;
    embps_push(c->impl, b, g);
    return 0;
}

static int local_rows(struct emb_client *c, const struct row_req *r, struct ss_err *e)
{
    if (!embps_clocked(c->impl))
        return ss_fail(e, SS_EINVAL, "the tables keep no row clocks for a cache");
    embps_rows(c->impl, r);
    return 0;
}

static void local_free(struct emb_client *c)
{
    free(c);
}

static const struct emb_client_ops local_ops = {"in-process", local_lookup, local_push, local_free,
                                                  local_rows, NULL};

struct emb_client *emb_client_local(struct emb_tables *t)
{
    struct emb_client *c = ss_xcalloc(1, sizeof *c);
    *c = (struct emb_client){&local_ops, t};
    return c;
}
