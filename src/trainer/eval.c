/* Scoring a data set with a model, forward only: eval NE, logloss, AUC and
 * calibration (DESIGN §3, §7). Several threads score, taking batches from
 * one reader (each parses its own; a gzip file is inflated once) and
 * looking up through a client each; the
 * probabilities are kept for the AUC (4 bytes + 4 bytes per example). A
 * predictions file gets each example's probability in the input's order,
 * and each data line that gave no example (bad or blank) an empty line, so
 * the file lines up with the data's lines past their headers; data without
 * labels (data.label_col = -1) is only scored into it. One thread writes it
 * as it goes; several keep their lines' places and scores (16 bytes a line)
 * and the lines are written in place order at the end. */
#include "shadowsync/reader.h"
#include "shadowsync/trainer.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

/* A thread's predictions kept for the end (several threads): a data line's
 * place (example_id's encoding) and its score, or none for a skipped line
 * (bad or blank). */
struct scored_line {
    uint64_t at;
    float p;
    int good;
};

struct line_buf {
    struct scored_line *v;
    size_t n, cap;
};

static void line_put(struct line_buf *b, uint64_t at, float p, int good)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4096;
        b->v = ss_xrealloc(b->v, b->cap * sizeof *b->v);
    }
    b->v[b->n++] = (struct scored_line){at, p, good};
}

/* The skipped lines of a reader that several threads share (its callback
 * runs on whichever thread parses the batch). */
struct skips_kept {
    pthread_mutex_t mu;
    struct line_buf lines;
};

static void note_skip_kept(void *arg, uint64_t where)
{
    struct skips_kept *k = arg;
    pthread_mutex_lock(&k->mu);
    line_put(&k->lines, where, 0, 0);
    pthread_mutex_unlock(&k->mu);
}

static int by_place(const void *a, const void *b)
{
    uint64_t x = ((const struct scored_line *)a)->at, y = ((const struct scored_line *)b)->at;
    return x < y ? -1 : x > y;
}

/* One thread's share of an eval: its reader, client and figures. */
struct eval_part {
    const struct model_layout *l;
    const float *params;
    struct emb_client *emb;
    struct reader *rd;
    int cap, labeled;
    struct pred_sink *ps;       /* the predictions, written as they come (one thread) */
    struct line_buf lines;      /* ...or kept for the end (several) */
    int keep;
    const int *cancel;
    float *prob, *label;        /* its examples' scores and labels, for the AUC */
    size_t have;
    int64_t nan_preds;
    struct ne_acc acc;
    double psum;
    int rc;                     /* 0, 1 (cancelled) or < 0 with err */
    struct ss_err err;
    pthread_t th;
};

/* The kept lines of every thread and the skipped ones, each buffer sorted
 * in place order, then merged as they are written (each place is in one). */
static void lines_write(FILE *f, struct line_buf **bufs, int n)
{
    size_t *head = ss_xcalloc((size_t)n, sizeof *head);
    for (int t = 0; t < n; t++)
        if (bufs[t]->n) /* (an empty one's v is NULL, which qsort may not take) */
            qsort(bufs[t]->v, bufs[t]->n, sizeof *bufs[t]->v, by_place);
    for (;;) {
        int from = -1;
        for (int t = 0; t < n; t++)
            if (head[t] < bufs[t]->n &&
                (from < 0 || bufs[t]->v[head[t]].at < bufs[from]->v[head[from]].at))
                from = t;
        if (from < 0)
            break;
        const struct scored_line *next = &bufs[from]->v[head[from]++];
        if (next->good)
            fprintf(f, "%.6g\n", next->p);
        else
            fputc('\n', f);
    }
    free(head);
}

static void *eval_part_run(void *arg)
{
    struct eval_part *p = arg;
    const struct model_layout *l = p->l;
    struct batch b;
    batch_init(&b, p->cap, l->n_dense, l->n_tables);
    struct model_scratch sc;
    model_scratch_init(&sc, l, p->cap);
    size_t room = 1 << 16;
    p->prob = ss_xmalloc(room * sizeof(float));
    p->label = ss_xmalloc(room * sizeof(float));
    int rc = 0;
    for (;;) {
        if (p->cancel && __atomic_load_n(p->cancel, __ATOMIC_RELAXED)) {
            rc = 1;
            break;
        }
        if ((rc = reader_next(p->rd, &b, &p->err)) < 0 || b.n == 0)
            break;
        if ((rc = p->emb->ops->lookup(p->emb, &b, sc.emb, &p->err)) < 0)
            break;
        model_pool_scale(l, &b, sc.emb);
        model_forward(l, p->params, &b, &sc);
        for (int i = 0; i < b.n; i++)
            p->nan_preds += isnan(sc.prob[i]);
        for (int i = 0; p->ps && i < b.n; i++)
            pred_put(p->ps, b.example_id[i], &sc.prob[i]);
        for (int i = 0; p->keep && i < b.n; i++)
            line_put(&p->lines, b.example_id[i], sc.prob[i], 1);
        if (!p->labeled) {
            p->have += b.n;
            continue;
        }
        ne_add(&p->acc, sc.prob, b.label, b.n);
        if (p->have + b.n > room) {
            room = 2 * (p->have + b.n);
            float *np = realloc(p->prob, room * sizeof(float));
            if (np)
                p->prob = np;
            float *nl = np ? realloc(p->label, room * sizeof(float)) : NULL;
            if (nl)
                p->label = nl;
            if (!np || !nl) {
                rc = ss_fail(&p->err, SS_ENOMEM, "eval: out of memory for %zu scores", room);
                break;
            }
        }
        for (int i = 0; i < b.n; i++) {
            p->prob[p->have + i] = sc.prob[i];
            p->label[p->have + i] = b.label[i];
            p->psum += sc.prob[i];
        }
        p->have += b.n;
    }
    p->rc = rc;
    model_scratch_free(&sc);
    batch_free(&b);
    return NULL;
}

int trainer_eval(const struct model_layout *l, const float *params, struct emb_client *const *emb,
                 int threads, const struct ss_config *c, const char *path, FILE *predictions,
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
    int n = threads < 1 ? 1 : threads;
    struct pred_sink ps = {predictions, NULL, 0, 0, 0};
    struct skips_kept skips = {PTHREAD_MUTEX_INITIALIZER, {NULL, 0, 0}};
    struct reader *rd;
    if ((rc = reader_open(&rd, path, &s, 0, c->data.report_bad_lines, e)) < 0)
        return rc;
    if (predictions)
        reader_on_skip(rd, n == 1 ? note_skip : note_skip_kept, n == 1 ? (void *)&ps : &skips);
    struct eval_part *parts = ss_xcalloc((size_t)n, sizeof *parts);
    for (int t = 0; t < n; t++)
        parts[t] = (struct eval_part){.l = l, .params = params, .emb = emb[t], .rd = rd,
                                      .labeled = labeled,
                                      .cap = c->trainer.batch_size < 1024 ? 1024
                                                                         : c->trainer.batch_size,
                                      .ps = predictions && n == 1 ? &ps : NULL,
                                      .keep = predictions && n > 1, .cancel = cancel};
    for (int t = 1; rc == 0 && t < n; t++)
        if (pthread_create(&parts[t].th, NULL, eval_part_run, &parts[t]) != 0) {
            fprintf(stderr, "shadowsync: cannot start eval thread %d\n", t);
            abort();
        }
    if (rc == 0)
        eval_part_run(&parts[0]);
    for (int t = 1; rc == 0 && t < n; t++)
        pthread_join(parts[t].th, NULL);
    struct ne_acc acc = {0};
    double psum = 0;
    size_t have = 0;
    int64_t nan_preds = 0;
    int failed = -1, cancelled = 0;
    for (int t = 0; rc == 0 && t < n; t++) {
        if (parts[t].rc < 0 && failed < 0)
            failed = t;
        cancelled |= parts[t].rc > 0;
        ne_merge(&acc, &parts[t].acc);
        psum += parts[t].psum;
        have += parts[t].have;
        nan_preds += parts[t].nan_preds;
    }
    if (rc == 0 && failed >= 0) /* the first share's error, else a cancel */
        rc = parts[failed].rc, *e = parts[failed].err;
    else if (rc == 0 && cancelled)
        rc = 1;
    if (predictions && n == 1)
        pred_put(&ps, 0, NULL);
    if (rc == 0 && predictions && n > 1) {
        struct line_buf **bufs = ss_xcalloc((size_t)n + 1, sizeof *bufs);
        for (int t = 0; t < n; t++)
            bufs[t] = &parts[t].lines;
        bufs[n] = &skips.lines;
        lines_write(predictions, bufs, n + 1);
        free(bufs);
    }
    if (rc == 0 && !labeled) {
        *r = (struct eval_result){(int64_t)have, NAN, NAN, NAN, NAN, NAN, NAN, 0, n, 0, 0};
    } else if (rc == 0) {
        float *prob = parts[0].prob, *label = parts[0].label;
        if (n > 1) { /* every share's scores, for the AUC */
            prob = ss_xmalloc((have ? have : 1) * sizeof(float));
            label = ss_xmalloc((have ? have : 1) * sizeof(float));
            size_t at = 0;
            for (int t = 0; t < n; at += parts[t].have, t++) {
                memcpy(prob + at, parts[t].prob, parts[t].have * sizeof(float));
                memcpy(label + at, parts[t].label, parts[t].have * sizeof(float));
            }
        }
        r->examples = (int64_t)have;
        r->logloss = ne_logloss(&acc);
        r->ne = ne_value(&acc);
        r->auc = metric_auc(prob, label, (int64_t)have);
        r->ctr = have ? acc.label_sum / have : NAN;
        r->mean_p = have ? psum / have : NAN;
        r->calibration = r->ctr > 0 ? r->mean_p / r->ctr : NAN;
        r->labeled = 1;
        r->threads = n;
        if (n > 1)
            free(prob), free(label);
    }
    for (int t = 0; t < n; t++) {
        free(parts[t].lines.v);
        free(parts[t].prob);
        free(parts[t].label);
    }
    struct reader_stats st;
    reader_stats(rd, &st);
    if (rc == 0 && st.stopped) /* not a score of part of the data */
        rc = ss_fail(e, SS_EIO, "%s: stopped (%s) while waiting on it, %s, after %lld "
                     "examples: not scored", path, ss_halt_sig_name(st.stopped),
                     st.stuck ? "a read that had not returned" : "a pipe",
                     (long long)st.examples);
    if (rc == 0)
        r->bad_lines = st.bad_lines, r->nan_preds = nan_preds;
    reader_close(rd);
    free(parts);
    free(ps.skip);
    free(skips.lines.v);
    return rc;
}
