/* The sync PS role (DESIGN §2): its partition of the EASGD center, which
 * starts from the model's initial dense vector (the same job.seed every
 * trainer starts from, or on a resume the checkpoint's: its center, or
 * trainer 0's replica where it kept none), served until the job ends. */
#include "shadowsync/ckpt.h"
#include "shadowsync/rpc.h"
#include "shadowsync/syncps.h"

#include <glob.h>
#include <stdlib.h>

int syncps_role_run(const struct ss_config *c, struct job_plan *p, const struct syncps_tail *tail,
                    struct ss_err *e)
{
    struct model_layout l;
    struct endpoint me = {{0}, 0}, *all = ss_xcalloc(p->size, sizeof *all);
    struct syncps_service *svc = NULL;
    struct rpc_server *srv = NULL;
    int rc = model_layout_init(&l, c, e);
    if (rc == 0) {
        /* the dense parameters, then the hot embedding rows (the trainers sync both) */
        int64_t tail_rows = tail ? tail->rows : 0;
        size_t n = l.n_params + (size_t)tail_rows * l.dim;
        float *w = ss_aligned(n * sizeof(float));
        model_init_params(&l, w, (uint64_t)c->job.seed);
        if (tail_rows > 0)
            tail->init(tail->arg, c, &l, w + l.n_params);
        size_t lo, hi;
        ss_partition(n, p->count[ROLE_SYNC_PS], p->role_index, &lo, &hi);
        if (p->resume_from[0]) { /* the center as checkpointed, by any number of sync PSs */
            char pat[4400];
            glob_t g;
            snprintf(pat, sizeof pat, "%s/center-*.bin", p->resume_from);
            struct ckpt_meta_set m;
            struct ss_err ignore;
            int kept = ckpt_read_meta(p->resume_from, &m, &ignore) < 0 ||
                       ckpt_meta_get(&m, "center", 1) != 0; /* (older ones: as they are) */
            if (!kept || glob(pat, 0, NULL, &g) != 0) { /* written under another sync.algo:
                                                         * the center starts as trainer 0's
                                                         * replica, as in one process */
                snprintf(pat, sizeof pat, "%s/dense-0.bin", p->resume_from);
                rc = dense_load(w, n, &l, pat, e); /* (the master says so) */
            } else
                rc = syncps_load(w + lo, n, lo, hi, g.gl_pathv, (int)g.gl_pathc, e),
                globfree(&g);
        }
        if (rc == 0) {
            svc = syncps_service_create(w + lo, n, lo, hi, p->token);
            syncps_service_save_root(svc, c->checkpoint.dir);
        }
        free(w);
        if (rc == 0) /* a message: its slice, and the rest */
            rc = rpc_role_server(&srv, c, p, syncps_service_processor(svc),
                                 (hi - lo) * 4 + (1u << 20), me.host, e);
        if (rc == 0 && c->sync.mode == SYNC_SHADOW) { /* its answers: a share of the link */
            char how[200];
            rpc_server_pace(srv, rpc_link_pace(c, p, how, sizeof how));
        }
    }
    rpc_announce(p, &me, rc == 0 ? srv : NULL, all);
    double t0 = ss_now();
    rpc_wait_job_end(p);
    if (svc) {
        struct syncps_stats st;
        syncps_service_stats(svc, &st);
        p->figures[0] = (double)st.syncs;
        p->figures[1] = (double)st.refused;
        p->figures[2] = ss_now() - t0;
        p->figures[3] = (double)st.reads;
    }
    if (srv)
        rpc_server_stop(srv);
    syncps_service_free(svc);
    free(all);
    if (rc == 0)
        model_layout_free(&l);
    return rc;
}
