/* Optimizer steps (DESIGN §1): dense SGD and Adagrad over the flat vector,
 * embedding-row SGD and row-wise Adagrad (one accumulator per row, kept
 * beside the row). Hogwild: called without locks on shared buffers. */
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
