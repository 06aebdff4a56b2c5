/* Scoring a data set with a model, forward only: eval NE, logloss, AUC and
 * calibration (DESIGN §3, §7). One thread; the probabilities are kept for
 * the AUC (4 bytes + 4 bytes per example). With a predictions file, each
 * example's probability goes there in the input's order, and each data line
 * that gave no example (bad or blank) an empty line, so the file lines up
 * with the data's lines past their headers; data without labels
 * (data.label_col = -1) is only scored into it. */
#include "shadowsync/reader.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <stdlib.h>

/* The predictions' lines: the data lines skipped so far (reader_on_skip) as
 * runs of consecutive lines (a file of only bad lines is one run), merged
 * with the examples by their place in the data. */
struct skip_run {
    uint64_t at, n;
};

struct pred_sink {
    FILE *f;
    struct skip_run *skip;
    size_t n, head, cap;
};

static void note_skip(void *arg, uint64_t where)
{
    struct pred_sink *p = arg;
    if (p->n > p->head && p->skip[p->n - 1].at + p->skip[p->n - 1].n == where) {
        p->skip[p->n - 1].n++;
        return;
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->skip = ss_xrealloc(p->skip, p->cap * sizeof *p->skip);
    }
    p->skip[p->n++] = (struct skip_run){where, 1};
}

/* Empty lines for the skipped data lines before `upto`, then (unless at
 * the end) the example's probability. */
static void pred_put(struct pred_sink *p, uint64_t upto, const float *prob)
{
    for (; p->head < p->n && (!prob || p->skip[p->head].at < upto); p->head++)
        for (uint64_t k = 0; k < p->skip[p->head].n; k++)
            fputc('\n', p->f);
    if (p->head == p->n)
        p->head = p->n = 0;
    if (prob)
        fprintf(p->f, "%.6g\n", *prob);
}

int trainer_eval(const struct model_layout *l, const float *params, struct emb_client *emb,
                 const struct ss_config *c, const char *path, FILE *predictions,
                 const int *cancel, struct eval_result *r, struct ss_err *e)
{
    struct schema s;
    int rc = schema_from_config(&s, c, path, e);
    if (rc < 0)
        return rc;
    int labeled = s.format == FMT_BINARY || s.label_col >= 0;
    if (!labeled && !predictions)
        return ss_fail(e, SS_EINVAL, "%s: data.label_col = -1 (no labels): nothing to measure; "
                       "`shadowsync eval --predictions FILE` scores unlabeled data", path);
    struct reader *rd;
    rc = reader_open(&rd, path, &s, 0, c->data.report_bad_lines, e);
    if (rc < 0)
        return rc;
    struct pred_sink ps = {predictions, NULL, 0, 0, 0};
    if (predictions)
        reader_on_skip(rd, note_skip, &ps);
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
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
            rc = 1;
            break;
        }
        if ((rc = reader_next(rd, &b, e)) < 0 || b.n == 0)
            break;
        if ((rc = emb->ops->lookup(emb, &b, sc.emb, e)) < 0)
            break;
        model_pool_scale(l, &b, sc.emb);
        model_forward(l, params, &b, &sc);
        for (int i = 0; predictions && i < b.n; i++)
            pred_put(&ps, b.example_id[i], &sc.prob[i]);
        if (!labeled) {
            have += b.n;
            continue;
        }
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
    if (predictions)
        pred_put(&ps, 0, NULL);
    if (rc == 0 && !labeled) {
        *r = (struct eval_result){(int64_t)have, NAN, NAN, NAN, NAN, NAN, NAN, 0};
    } else if (rc == 0) {
        r->examples = (int64_t)have;
        r->logloss = ne_logloss(&acc);
        r->ne = ne_value(&acc);
        r->auc = metric_auc(prob, label, (int64_t)have);
        r->ctr = have ? acc.label_sum / have : NAN;
        r->mean_p = have ? psum / have : NAN;
        r->calibration = r->ctr > 0 ? r->mean_p / r->ctr : NAN;
        r->labeled = 1;
    }
    free(ps.skip);
    free(prob);
    free(label);
    model_scratch_free(&sc);
    batch_free(&b);
    reader_close(rd);
    return rc;
}
