/* `shadowsync plan` (DESIGN §4): the job's layout as its start would make
 * it, without launching it: the embedding tables' placement on the
 * embedding PSs (or the trainers, DES) for every strategy, profiling
 * data.train, the hot rows, and each sync PS's slice of the EASGD center;
 * with --trainers, the sync side too (plan_sync.c). */
#include "shadowsync/trainer.h"

#include <glib.h>

int trainer_plan(const struct ss_config *cfg, const struct plan_sync_opts *o, FILE *out,
                 struct ss_err *e)
{
    struct model_layout l = {0};
    struct placement pl = {0};
    struct ss_config k = *cfg, *c = &k; /* model.rows = auto: sized as the job would */
    char *rows = NULL;
    int rc = 0, bins = placement_bins(c, c->job.embedding_ps, c->job.trainers);
    int place = bins >= 1 || !o->trainers; /* the sync side alone needs no tables placed */
    if (!place)
        fprintf(out, "# placement: none to plan (job.embedding_ps = 0)\n");
    if (bins < 1 && place)
        rc = ss_config_fail(e, c, "job.embedding_ps embedding.placement", "job.embedding_ps "
                            "= 0 leaves plan nothing to place (the embedded default keeps its "
                            "tables in-process): set job.embedding_ps, or embedding.placement = "
                            "trainers");
    if (rc == 0 && (rc = trainer_rows_auto(cfg, NULL, out, &rows, e)) == 0 && rows)
        k.model.rows = rows;
    if (rc == 0)
        rc = model_layout_init(&l, c, e);
    double t0 = ss_now();
    if (rc == 0 && place)
        rc = placement_for_config(c, &l, bins, 1, &pl, out, e);
    size_t n_center = l.n_params; /* the EASGD center: the dense floats, then the hot rows */
    struct hot_set *hot = NULL;
    if (rc == 0 && c->job.sync_ps > 0 && c->hot_embeddings.memory_mb > 0 &&
        (rc = hot_find(c, &l, &hot, e)) == 0 && hot) {
        n_center += (size_t)hot->n * (size_t)l.dim;
        fprintf(out, "# hot embeddings: %lld rows, in the center after the dense floats\n",
                (long long)hot->n);
    }
    hot_free(hot);
    for (int q = 0; rc == 0 && q < c->job.sync_ps; q++) { /* by bytes */
        size_t lo, hi;
        ss_partition(n_center, c->job.sync_ps, q, &lo, &hi);
        fprintf(out, "sync_ps %d: %s floats [%zu, %zu), %.2f MiB\n", q,
                n_center > l.n_params ? "center" : "dense", lo, hi, (hi - lo) * 4.0 / 1048576);
    }
    if (rc == 0 && c->output.dir[0] && place)
        fprintf(out, "# plan written to %s/placement.txt and placement.json (%.2f s)\n",
                c->output.dir, ss_now() - t0);
    if (rc == 0 && o->trainers)
        rc = trainer_plan_sync(c, o, n_center, out, e);
    placement_free(&pl);
    model_layout_free(&l);
    g_free(rows);
    return rc;
}
