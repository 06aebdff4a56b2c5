/* Scoring a data set with a model, forward only: eval NE, logloss, AUC and
 * calibration (DESIGN §3, §7). One thread; the probabilities are kept for
 * the AUC (4 bytes + 4 bytes per example). */
#include "shadowsync/reader.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <stdlib.h>

int trainer_eval(const struct model_layout *l, const float *params, struct emb_client *emb,
                 const struct ss_config *c, const char *path, struct eval_result *r,
                 struct ss_err *e)
{
    struct schema s;
    int rc = schema_from_config(&s, c, path, e);
    if (rc < 0)
        return rc;
    struct reader *rd;
    rc = reader_open(&rd, path, &s, 0, c->data.report_bad_lines, e);
    if (rc < 0)
        return rc;
    int cap = c->trainer.batch_size < 1024 ? 1024 : c->trainer.batch_size;
    struct batch b;
    batch_init(&b, cap, l->n_dense, l->n_tables);
    struct model_scratch sc;
    model_scratch_init(&sc, l, cap);
    size_t have = 0, room = 1 << 16;
    float *prob = ss_xmalloc(room * sizeof(float)), *label = ss_xmalloc(room * sizeof(float));
    struct ne_acc acc = {0};
    double psum = 0;
    for (;;) {
        if ((rc = reader_next(rd, &b, e)) < 0 || b.n == 0)
            break;
        if ((rc = emb->ops->lookup(emb, &b, sc.emb, e)) < 0)
            break;
        model_pool_scale(l, &b, sc.emb);
        model_forward(l, params, &b, &sc);
        ne_add(&acc, sc.prob, b.label, b.n);
        if (have + b.n > room) {
            room = 2 * (have + b.n);
            prob = realloc(prob, room * sizeof(float));
            label = realloc(label, room * sizeof(float));
            if (!prob || !label) {
                rc = ss_fail(e, SS_ENOMEM, "eval: out of memory for %zu scores", room);
                break;
            }
        }
        for (int i = 0; i < b.n; i++) {
            prob[have + i] = sc.prob[i];
            label[have + i] = b.label[i];
            psum += sc.prob[i];
        }
        have += b.n;
    }
    if (rc == 0) {
        r->examples = (int64_t)have;
        r->logloss = ne_logloss(&acc);
        r->ne = ne_value(&acc);
        r->auc = metric_auc(prob, label, (int64_t)have);
        r->ctr = have ? acc.label_sum / have : NAN;
        r->mean_p = have ? psum / have : NAN;
        r->calibration = r->ctr > 0 ? r->mean_p / r->ctr : NAN;
    }
    free(prob);
    free(label);
    model_scratch_free(&sc);
    batch_free(&b);
    reader_close(rd);
    return rc;
}
