/* The embedding PS role (DESIGN §2, §4): the master's placement plan,
 * shared with every rank; this PS's shards of it, a Thrift server on the
 * job's address, its endpoint announced to every rank, serving until the
 * job ends; at the end its shards saved beside the trainers' dense model.
 * On a resume its shards come from the checkpoint's PS files, whatever the
 * number of PSs that wrote them (rows are found by table and range). */
#include "shadowsync/embps.h"
#include "shadowsync/rpc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int placement_for_job(const struct ss_config *c, struct job_plan *p, struct placement *pl,
                      struct ss_err *e)
{
    struct model_layout l;
    int rc = model_layout_init(&l, c, e);
    memset(pl, 0, sizeof *pl);
    int bins = placement_bins(c, p->count[ROLE_EMBEDDING_PS], p->count[ROLE_TRAINER]);
    if (rc == 0 && p->rank == 0)
        rc = placement_for_config(c, &l, bins, 1, pl, c->output.quiet ? NULL : stdout, e);
    if (p->rank == 0)
        fflush(stdout);
    /* every rank learns the master's outcome, then the plan */
    struct ss_err shared = {0};
    if (p->rank == 0 && rc < 0)
        shared = *e;
    int head[4] = {rc, pl->strategy, pl->n_shards, l.n_tables};
    MPI_Bcast(head, 4, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(shared.msg, sizeof shared.msg, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (head[0] < 0) {
        if (rc == 0)
            model_layout_free(&l);
        placement_free(pl);
        return ss_fail(e, head[0], "placement (on the master): %s", shared.msg);
    }
    if (p->rank != 0) {
        pl->strategy = head[1];
        pl->n_shards = head[2];
        pl->n_tables = head[3];
        pl->n_ps = bins;
        pl->shards = ss_xcalloc(pl->n_shards, sizeof *pl->shards);
        pl->table_rows = ss_xcalloc(pl->n_tables, sizeof(int64_t));
        pl->load = ss_xcalloc(pl->n_ps, sizeof(double));
        pl->bytes = ss_xcalloc(pl->n_ps, sizeof(double));
    }
    MPI_Bcast(pl->shards, (int)(pl->n_shards * sizeof *pl->shards), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(pl->table_rows, pl->n_tables, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(pl->load, pl->n_ps, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(pl->bytes, pl->n_ps, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    model_layout_free(&l);
    return 0;
}

int hot_for_job(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    struct model_layout l;
    struct hot_set *h = NULL;
    struct ss_err shared = {0};
    int rc = model_layout_init(&l, c, e);
    int64_t head[3] = {0, 0, 0}; /* rc, rows, from the checkpoint */
    if (rc == 0 && p->rank == 0) {
        char path[4400];
        snprintf(path, sizeof path, "%s/hot-rows.bin", p->resume_from);
        if (p->resume_from[0] && access(path, F_OK) == 0)
            rc = hot_load(&h, path, &l, e), head[2] = 1;
        else if (!p->resume_from[0])
            rc = hot_find(c, &l, &h, e);
    }
    if (rc < 0 && p->rank == 0)
        shared = *e;
    head[0] = rc, head[1] = h ? h->n : 0;
    MPI_Bcast(head, 3, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(shared.msg, sizeof shared.msg, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (head[0] < 0) {
        hot_free(h);
        if (l.rows)
            model_layout_free(&l);
        return ss_fail(e, (int)head[0], "hot embeddings (on the master): %s", shared.msg);
    }
    int n = (int)head[1], master = h != NULL; /* the others receive the list into their own */
    int32_t *table = master ? h->table : ss_xcalloc((size_t)n + 1, sizeof(int32_t));
    int64_t *row = master ? h->row : ss_xcalloc((size_t)n + 1, sizeof(int64_t));
    double share = master ? h->profiled_share : 0;
    MPI_Bcast(table, n, MPI_INT32_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(row, n, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(&share, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (!master) {
        if (n > 0) {
            h = hot_from_list(l.n_tables, l.dim, l.rows, n, table, row);
            h->profiled_share = share;
        }
        free(table);
        free(row);
    }
    p->hot = h;
    p->hot_from_ckpt = (int)head[2];
    model_layout_free(&l);
    return 0;
}

int embps_create_for_ps(const struct emb_opts *base, const struct placement *pl, int ps,
                        struct emb_tables **t, int32_t **ids, int *k, struct ss_err *e)
{
    *ids = ss_xmalloc(((size_t)pl->n_shards + 1) * sizeof(int32_t));
    *k = placement_ps_shards(pl, ps, *ids);
    *t = NULL;
    if (*k == 0)
        return 0;
    int64_t *rows = ss_xmalloc((size_t)*k * sizeof(int64_t));
    int64_t *lo = ss_xmalloc((size_t)*k * sizeof(int64_t));
    int64_t *trows = ss_xmalloc((size_t)*k * sizeof(int64_t));
    int32_t *gid = ss_xmalloc((size_t)*k * sizeof(int32_t));
    for (int j = 0; j < *k; j++) {
        const struct shard *s = &pl->shards[(*ids)[j]];
        rows[j] = s->hi - s->lo;
        lo[j] = s->lo;
        trows[j] = pl->table_rows[s->table];
        gid[j] = s->table;
    }
    struct emb_opts o = *base;
    o.n_tables = *k;
    o.rows = rows;
    o.global_ids = gid;
    o.table_rows = trows;
    o.row_lo = lo;
    int rc = embps_create(t, &o, e);
    free(rows);
    free(lo);
    free(trows);
    free(gid);
    return rc;
}

int embps_role_run(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    struct model_layout l;
    struct endpoint me = {{0}, 0}, *all = ss_xcalloc(p->size, sizeof *all);
    struct emb_tables *t = NULL;
    struct embps_service *svc = NULL;
    struct rpc_server *srv = NULL;
    int32_t *ids = NULL;
    int k = 0, rc = model_layout_init(&l, c, e);
    if (rc == 0) {
        struct emb_opts base = emb_opts_from_config(c, 0, l.dim, NULL);
        rc = embps_create_for_ps(&base, p->placement, p->role_index, &t, &ids, &k, e);
    }
    if (rc == 0 && k > 0 && p->resume_from[0]) /* any earlier split of the tables loads */
        rc = embps_load_dir(t, p->resume_from, e);
    if (rc == 0 && k > 0) {
        svc = embps_service_create(t, ids, k, p->token);
        char model[4200] = "";
        if (c->output.save_model && c->output.dir[0])
            snprintf(model, sizeof model, "%s/model", c->output.dir);
        embps_service_save_root(svc, c->checkpoint.dir, model);
        double *cost = ss_xmalloc((size_t)k * sizeof(double));
        for (int j = 0; j < k; j++)
            cost[j] = p->placement->shards[ids[j]].ns_per_row;
        embps_service_costs(svc, cost);
        free(cost);
        rc = rpc_role_server(&srv, c, p, embps_service_processor(svc), 0, me.host, e);
    }
    if (rc == 0 && k == 0) /* the plan left it nothing: no service, port 0, as a trainer's */
        rpc_exchange_endpoints(p, &me, all);
    else /* every rank, even after a failure */
        rpc_announce(p, &me, rc == 0 ? srv : NULL, all);
    double t0 = ss_now();
    rpc_wait_job_end(p);
    if (svc) {
        struct embps_stats st;
        embps_service_stats(svc, &st);
        double fig[ROLE_FIGURES] = {(double)st.lookups, (double)st.pushes, (double)st.refused,
                                    (double)st.bytes_in, (double)st.bytes_out, ss_now() - t0,
                                    st.busy_s, st.load_s, (double)st.row_syncs,
                                    (double)st.rows_sent};
        memcpy(p->figures, fig, sizeof fig);
    }
    if (srv)
        rpc_server_stop(srv);
    embps_service_free(svc);
    embps_free(t);
    free(ids);
    free(all);
    if (l.rows)
        model_layout_free(&l);
    return rc;
}
