/* The dense compute seam: every MLP matmul of a worker (forward, backward
 * data, backward weights) goes through here, to oneDNN (dense_onednn.c:
 * fp32, or bf16 inputs with fp32 accumulation) or to OpenBLAS's sgemm,
 * chosen by trainer.dense_backend and trainer.precision. The fp32 weights
 * the caller passes stay the master copy in either precision: a bf16 run
 * converts a layer's weights and inputs as its forward starts and keeps
 * them for its backward. A oneDNN matmul that cannot be made (a shape or
 * a CPU it has no kernel for) runs on OpenBLAS instead, said once. */
#include "dense.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SS_HOGWILD void ss_to_bf16(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) { /* vectorizes: integer ops only */
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
        u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even */
        dst[i] = nan ? (uint16_t)0x7fc0 : (uint16_t)(u >> 16);
    }
}

void ss_from_bf16(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, sizeof u);
    }
}

int dense_resolve(const struct ss_config *c, int *backend, int *precision, struct ss_err *e)
{
    int be = c->trainer.dense_backend, pr = c->trainer.precision;
    if (be == DENSE_AUTO)
        be = onednn_built() ? DENSE_ONEDNN : DENSE_OPENBLAS;
    if (be == DENSE_ONEDNN && !onednn_built())
        return ss_config_fail(e, c, "trainer.dense_backend", "trainer.dense_backend = onednn, "
                              "but this build has no oneDNN (install libdnnl-dev and rebuild, or "
                              "set openblas)");
    if (pr == PREC_BF16) {
        if (c->trainer.device != DEV_CPU)
            return ss_config_fail(e, c, "trainer.precision trainer.device",
                                  "trainer.precision = bf16 is for the CPU's matmuls; "
                                  "trainer.device = %s trains in fp32 (set precision = fp32, or "
                                  "device = cpu)", c->trainer.device == DEV_CUDA ? "cuda" : "auto");
        if (be != DENSE_ONEDNN)
            return ss_config_fail(e, c, "trainer.precision trainer.dense_backend",
                                  "trainer.precision = bf16 needs trainer.dense_backend = "
                                  "onednn%s (OpenBLAS has no bf16 matmul)",
                                  onednn_built() ? "" : ", which this build lacks");
        char why[256];
        if (!onednn_bf16_ok(why, sizeof why))
            return ss_config_fail(e, c, "trainer.precision", "trainer.precision = bf16: %s; use "
                                  "fp32", why);
    }
    *backend = be;
    *precision = pr;
    return 0;
}

struct dense *dense_create(const struct model_layout *l, int cap)
{
    struct dense *d = ss_xmalloc(sizeof *d);
    memset(d, 0, sizeof *d);
    d->l = l;
    d->cap = cap;
    d->colsum = ss_aligned(model_widest(l) * sizeof(float));
    if (l->backend == DENSE_ONEDNN)
        d->dnn = onednn_create(l, cap, l->precision == PREC_BF16);
    return d;
}

void dense_free(struct dense *d)
{
    if (!d)
        return;
    onednn_free(d->dnn);
    free(d->colsum);
    free(d);
}

/* ---- OpenBLAS: the fallback, and trainer.dense_backend = openblas ---- */

SS_HOGWILD static void blas_fwd(const float *x, const float *w, const float *b, float *y, int n,
                                int in, int out, int relu)
{
    for (int i = 0; i < n; i++)
        ss_copy(y + (size_t)i * out, b, out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 1.0f, y,
                out);
    if (relu) /* a NaN passes (max would make it 0): a diverged model shows in its predictions */
        for (size_t i = 0; i < (size_t)n * out; i++)
            y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

SS_HOGWILD static void blas_bwd_data(const float *w, const float *dy, float *dx, int n, int in,
                                     int out)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 0.0f,
                dx, in);
}

SS_HOGWILD static void blas_bwd_weights(const float *x, const float *dy, float *tw, int n, int in,
                                        int out, float alpha, float beta)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, alpha, dy, out, x, in, beta,
                tw, in);
}

static void layer_dims(const struct model_layout *l, int k, int *in, int *out)
{
    const int *w = k < l->n_bot ? l->bot + k : l->top + (k - l->n_bot);
    *in = w[0];
    *out = w[1];
}

/* sum[j] = the sum over the n rows of dy's column j; in a buffer of its own,
 * so the adds vectorize (into tb, which may alias nothing but the compiler
 * cannot know, they went one at a time) */
static void col_sums(float *restrict sum, const float *restrict dy, int n, int out)
{
    memset(sum, 0, out * sizeof(float));
    for (int i = 0; i < n; i++) {
        const float *r = dy + (size_t)i * out;
        for (int j = 0; j < out; j++)
            sum[j] += r[j];
    }
}

void dense_fwd(struct dense *d, int k, const float *x, const float *w, const float *b, float *y,
               int n, int relu)
{
    int in, out;
    layer_dims(d->l, k, &in, &out);
    if (n == 0 || !d->dnn || onednn_fwd(d->dnn, k, x, w, b, y, n, relu) != 0)
        blas_fwd(x, w, b, y, n, in, out, relu);
}

SS_HOGWILD void dense_bwd(struct dense *d, int k, const float *x, const float *w, const float *dy,
                          float *tw, float *tb, float *dx, int n, float alpha, float beta)
{
    int in, out;
    layer_dims(d->l, k, &in, &out);
    if (n > 0 && (!d->dnn || onednn_bwd(d->dnn, k, x, w, dy, tw, dx, n, alpha, beta) != 0)) {
        if (dx)
            blas_bwd_data(w, dy, dx, n, in, out);
        blas_bwd_weights(x, dy, tw, n, in, out, alpha, beta);
    }
    col_sums(d->colsum, dy, n, out);
    for (int j = 0; j < out; j++)
        tb[j] = (beta == 0.0f ? 0.0f : tb[j]) + alpha * d->colsum[j];
}

const char *dense_describe(const struct dense *d, char *buf, size_t len)
{
    const char *prec = d->l->precision == PREC_BF16 ? "bf16 (fp32 accumulation, fp32 master weights)"
                                                     : "fp32";
    if (d->dnn) {
        char impl[160];
        snprintf(buf, len, "oneDNN %s, %s", onednn_impl(d->dnn, impl, sizeof impl), prec);
    } else {
        snprintf(buf, len, "OpenBLAS %s kernel, %s", openblas_get_corename(), prec);
    }
    return buf;
}
