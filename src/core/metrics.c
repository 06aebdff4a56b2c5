/* Quality figures (DESIGN §3): logloss, normalized entropy
 * NE = logloss / H(ctr) with ctr the empirical CTR of the same examples,
 * and AUC with ties given half credit (average ranks). Probabilities are
 * clipped to [1e-7, 1-1e-7] like the PyTorch peer, so figures compare. */
#include "shadowsync/core.h"

#include <math.h>
#include <stdlib.h>

double metric_bce(double p, double y)
{
    p = p < 1e-7 ? 1e-7 : (p > 1 - 1e-7 ? 1 - 1e-7 : p);
    return -(y * log(p) + (1 - y) * log(1 - p));
}

void ne_add(struct ne_acc *a, const float *prob, const float *label, int n)
{
    for (int i = 0; i < n; i++) {
        a->loss_sum += metric_bce(prob[i], label[i]);
        a->label_sum += label[i];
    }
    a->n += n;
}

void ne_merge(struct ne_acc *into, const struct ne_acc *from)
{
    into->loss_sum += from->loss_sum;
    into->label_sum += from->label_sum;
    into->n += from->n;
}

double ne_logloss(const struct ne_acc *a)
{
    return a->n ? a->loss_sum / a->n : NAN;
}

double ne_value(const struct ne_acc *a)
{
    if (!a->n)
        return NAN;
    double c = a->label_sum / a->n;
    if (c <= 0 || c >= 1)
        return NAN;
    double h = -(c * log(c) + (1 - c) * log(1 - c));
    return ne_logloss(a) / h;
}

struct scored { float p, y; };

static int by_prob(const void *a, const void *b)
{
    float x = ((const struct scored *)a)->p, y = ((const struct scored *)b)->p;
    return (x > y) - (x < y);
}

double metric_auc(const float *prob, const float *label, int64_t n)
{
    struct scored *s = ss_xmalloc((size_t)(n ? n : 1) * sizeof *s);
    double n1 = 0;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        s[i].p = prob[i];
        s[i].y = label[i];
        n1 += label[i] > 0.5f;
        nan |= isnan(prob[i]); /* no order: the ties' loop below would never end */
    }
    double n0 = (double)n - n1;
    if (n1 == 0 || n0 == 0 || nan) {
        free(s);
        return NAN;
    }
    qsort(s, (size_t)n, sizeof *s, by_prob);
    double rank_sum = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && s[j].p == s[i].p)
            j++;
        double avg = (i + 1 + j) / 2.0; /* ranks i+1..j share their mean */
        for (int64_t k = i; k < j; k++)
            if (s[k].y > 0.5f)
                rank_sum += avg;
        i = j;
    }
    free(s);
    return (rank_sum - n1 * (n1 + 1) / 2) / (n1 * n0);
}
