/* The embedding PS role (DESIGN §2): its tables by the placement (round
 * robin by table for now), a Thrift server on the job's address, its
 * endpoint announced to every rank, serving until the job ends. */
#include "shadowsync/embps.h"
#include "shadowsync/rpc.h"

#include <stdlib.h>
#include <string.h>

int embps_round_robin(int n_tables, int n_ps, int ps, int32_t *tables)
{
    int k = 0;
    for (int t = ps; t < n_tables; t += n_ps)
        tables[k++] = t;
    return k;
}

int embps_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    struct model_layout l;
    struct endpoint me = {{0}, 0}, *all = ss_xcalloc(p->size, sizeof *all);
    struct emb_tables *t = NULL;
    struct embps_service *svc = NULL;
    struct rpc_server *srv = NULL;
    int32_t *ids = NULL;
    int rc = model_layout_init(&l, c, e);
    if (rc == 0) {
        ids = ss_xmalloc((size_t)l.n_tables * sizeof(int32_t));
        int64_t *rows = ss_xmalloc((size_t)l.n_tables * sizeof(int64_t));
        int k = embps_round_robin(l.n_tables, p->count[ROLE_EMBEDDING_PS], p->role_index, ids);
        for (int j = 0; j < k; j++)
            rows[j] = l.rows[ids[j]];
        struct emb_opts o = {k, l.dim, rows,
                             c->optim.emb == OPT_ROWWISE_ADAGRAD ? OPT_ROWWISE_ADAGRAD : OPT_SGD,
                             (float)c->optim.emb_lr, (float)c->optim.eps,
                             (float)c->optim.init_acc, (uint64_t)c->job.seed, ids};
        rc = k > 0 ? embps_create(&t, &o, e) : 0;
        free(rows);
        if (rc == 0 && k > 0) {
            svc = embps_service_create(t, ids, k, p->token);
            rpc_bind_address(c, me.host);
            rc = rpc_server_start(&srv, me.host, 0, embps_service_processor(svc), e);
            if (rc == 0)
                me.port = rpc_server_port(srv);
        }
    }
    rpc_exchange_endpoints(p, &me, all); /* every rank, even after a failure */
    double t0 = ss_now();
    rpc_wait_job_end(p);
    if (svc) {
        struct embps_stats st;
        embps_service_stats(svc, &st);
        double fig[8] = {(double)st.lookups, (double)st.pushes, (double)st.refused,
                         (double)st.bytes_in, (double)st.bytes_out, ss_now() - t0};
        memcpy(p->figures, fig, sizeof fig);
    }
    if (srv)
        rpc_server_stop(srv);
    embps_service_free(svc);
    embps_free(t);
    free(ids);
    free(all);
    if (rc == 0)
        model_layout_free(&l);
    return rc;
}
