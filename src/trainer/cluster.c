/* A trainer rank of the cluster job (DESIGN §2): learns where the services
 * listen, wires the same trainer as the embedded default to them (Thrift
 * emb_clients to the embedding PSs, one per worker; the sync PSs as the
 * EASGD center; MPI all-reduce among the trainers for MA/BMUF) and trains
 * its share of the data; rank 0, trainer 0, is the master that writes the
 * run directory with the figures summed over the trainers. */
#include "shadowsync/embps.h"
#include "shadowsync/rpc.h"
#include "shadowsync/shadow.h"
#include "shadowsync/trainer.h"

#include <stdlib.h>
#include <string.h>

struct wiring {
    struct job_plan *p;
    int dim, n_ps, timeout_ms;
    struct emb_endpoint *ps;
    char (*names)[128];         /* [size]: every rank, by role, rank and host */
};

static int make_emb(void *arg, struct emb_client **out, struct ss_err *e)
{
    struct wiring *w = arg;
    return emb_client_thrift(out, w->p->placement, w->dim, w->ps, w->p->token, w->timeout_ms, e);
}

static void sum(void *arg, double *v, int n)
{
    struct wiring *w = arg;
    MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, w->p->trainers);
}

static void sum_floats(void *arg, float *v, size_t n)
{
    struct wiring *w = arg;
    MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_FLOAT, MPI_SUM, w->p->trainers);
}

int trainer_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    struct endpoint me = {{0}, 0}, *all = ss_xcalloc(p->size, sizeof *all);
    rpc_exchange_endpoints(p, &me, all);
    struct model_layout l;
    int rc = model_layout_init(&l, c, e);
    struct wiring w = {p, 0, p->count[ROLE_EMBEDDING_PS], (int)(c->job.rpc_timeout_s * 1000),
                       NULL, NULL};
    w.names = ss_xcalloc(p->size, sizeof *w.names);
    for (int r = 0; r < p->size; r++) {
        int role, idx;
        rpc_assign_role(p->count, r, &role, &idx);
        snprintf(w.names[r], sizeof w.names[r], "%s %d (rank %d on %s)", rpc_role_name(role), idx,
                 r, p->hosts[r]);
    }
    for (int r = 0; p->rank == 0 && !c->output.quiet && r < p->size; r++)
        if (all[r].port > 0)
            printf("# %s listens on %s:%d\n", w.names[r], all[r].host, all[r].port);
    fflush(stdout);
    struct sync_endpoint *sps = NULL;
    struct trainer_env env = {p->role_index, p->count[ROLE_TRAINER], p->rank == 0, NULL, NULL,
                              NULL, make_emb, sum, sum_floats, &w};
    struct reader_endpoint *rds = NULL;
    if (rc == 0) {
        w.dim = l.dim;
        w.ps = ss_xcalloc(w.n_ps, sizeof *w.ps);
        int first = p->count[ROLE_TRAINER];
        for (int s = 0; s < w.n_ps; s++)
            w.ps[s] = (struct emb_endpoint){w.names[first + s], all[first + s].host,
                                            all[first + s].port};
        const char *algo = c->sync.algo;
        if (!strcmp(algo, "ma") || !strcmp(algo, "bmuf"))
            env.coll = collective_mpi(p->trainers);
        if (!strcmp(algo, "easgd")) {
            int S = p->count[ROLE_SYNC_PS], s0 = first + w.n_ps;
            sps = ss_xcalloc(S, sizeof *sps);
            for (int s = 0; s < S; s++)
                sps[s] = (struct sync_endpoint){w.names[s0 + s], all[s0 + s].host,
                                                all[s0 + s].port};
            rc = center_thrift(&env.center, sps, S, l.n_params, p->token, w.timeout_ms, e);
        }
        int R = p->count[ROLE_READER], r0 = first + w.n_ps + p->count[ROLE_SYNC_PS];
        if (rc == 0 && R > 0) {
            rds = ss_xcalloc(R, sizeof *rds);
            for (int r = 0; r < R; r++)
                rds[r] = (struct reader_endpoint){w.names[r0 + r], all[r0 + r].host,
                                                  all[r0 + r].port};
            rc = feed_start(&env.feed, rds, R, p->token, c->trainer.batch_size,
                            4 * c->trainer.worker_threads, w.timeout_ms, e);
        }
    }
    if (rc == 0)
        rc = trainer_run_env(c, &env, e);
    rpc_wait_job_end(p);
    if (env.coll)
        env.coll->ops->free(env.coll);
    if (env.center)
        env.center->ops->free(env.center);
    feed_free(env.feed);
    free(rds);
    free(sps);
    free(w.ps);
    free(w.names);
    free(all);
    if (l.rows)
        model_layout_free(&l);
    return rc;
}
