/* Optimizer steps (DESIGN §1): dense SGD and Adagrad over the flat vector,
 * embedding-row SGD and row-wise Adagrad (one accumulator per row, kept
 * beside the row). Hogwild: called without locks on shared buffers. The
 * rates' schedule is DLRM's (a linear warmup, then a decay as the square
 * of the part left), counted in the job's examples rather than steps, so
 * it does not move with the batch size or the number of workers. */
#include "shadowsync/core.h"

#include <math.h>

SS_HOGWILD void optim_dense_step(int kind, float *w, float *state, const float *g, size_t n, float lr,
                      float eps)
{
    if (kind == OPT_ADAGRAD) {
        for (size_t i = 0; i < n; i++) {
            float s = state[i] + g[i] * g[i];
            state[i] = s;
            w[i] -= lr * g[i] / (sqrtf(s) + eps);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * g[i];
    }
}

SS_HOGWILD void optim_row_step(int kind, float *row, float *state, const float *g, int dim, float lr,
                    float eps)
{
    if (kind == OPT_ROWWISE_ADAGRAD) {
        float sq = 0.0f;
        for (int k = 0; k < dim; k++)
            sq += g[k] * g[k];
        float s = *state + sq / dim;
        *state = s;
        float step = lr / (sqrtf(s) + eps);
        for (int k = 0; k < dim; k++)
            row[k] -= step * g[k];
    } else {
        for (int k = 0; k < dim; k++)
            row[k] -= lr * g[k];
    }
}

double optim_lr_scale(const struct ss_config *c, int64_t examples)
{
    double s = 1, x = (double)examples;
    double warm = (double)c->optim.warmup_examples, n = (double)c->optim.decay_examples;
    if (x < warm) /* the first batch steps at 1/warm of the rate, not 0 */
        s = (x + 1) / warm;
    x -= (double)c->optim.decay_start;
    if (n > 0 && x >= 0) {
        double left = x < n ? (n - x) / n : 0, to = c->optim.decay_to;
        s *= to + (1 - to) * left * left;
    }
    return s > 1 ? 1 : s;
}
