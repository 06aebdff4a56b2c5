/* The dense seam (src/core/dense.c): every layer shape of the peer's model
 * through oneDNN against OpenBLAS, forward (bias, ReLU), backward data and
 * the weights' gradient (alpha/beta as the SGD step uses them), for a full
 * batch, a short one and the full one again (the primitives' two slots).
 *
 * fp32: within 1e-5 of the largest magnitude of the result.
 * bf16: each input is rounded to nearest bf16 (8 significant bits: relative
 * error u = 2^-8 at most), so a product is off by at most (2u + u^2)|x||w|,
 * and the fp32 sums of K terms
 * (ours and OpenBLAS's reference) by K * 2^-24 of the sum of magnitudes
 * each: element by element, |got - ref| <= (2u + u^2 + 2K 2^-24) S with
 * S = sum_k |x_k||w_k| (times |alpha| for a gradient step). Skipped, and
 * said, where this CPU has no bf16 kernels. */
#include "check.h"
#include "shadowsync/core.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct ss_config cfg;
static struct model_layout L;

static void fill(float *x, size_t n, uint64_t *r, double scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(ss_normal(r) * scale);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* The worst |got - ref| over its allowed bound (<= 1 passes). bound_s: the
 * bf16 bound's S per element (NULL: fp32, 1e-5 of the result's largest). */
static double worst(const float *got, const float *ref, const double *bound_s, size_t n, int k)
{
    double w = 0, big = max_abs(ref, n) + 1e-30;
    const double u = 1.0 / 256, c = 2 * u + u * u + 2.0 * k / 16777216.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        double allowed = bound_s ? c * bound_s[i] + 1e-30 : 1e-5 * big;
        w = fmax(w, d / allowed);
    }
    return w;
}

/* S[i][j] = sum_k |A[i][k]| |B[k][j]|, A [m x k] and B [k x n] given by strides */
static void abs_sum(double *S, const float *A, size_t a_r, size_t a_c, const float *B, size_t b_r,
                    size_t b_c, int m, int n, int k, double scale)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int t = 0; t < k; t++)
                s += fabs(A[i * a_r + t * a_c]) * fabs(B[t * b_r + j * b_c]);
            S[(size_t)i * n + j] = s * scale;
        }
}

static void check_layer(struct dense *ref, struct dense *got, int k, int n, int bf16, uint64_t seed)
{
    int in = k < L.n_bot ? L.bot[k] : L.top[k - L.n_bot];
    int out = k < L.n_bot ? L.bot[k + 1] : L.top[k - L.n_bot + 1];
    size_t nx = (size_t)n * in, ny = (size_t)n * out, nw = (size_t)in * out;
    uint64_t r = seed;
    float *x = ss_aligned(nx * 4), *w = ss_aligned(nw * 4), *b = ss_aligned(out * 4);
    float *dy = ss_aligned(ny * 4), *y0 = ss_aligned(ny * 4), *y1 = ss_aligned(ny * 4);
    float *dx0 = ss_aligned(nx * 4), *dx1 = ss_aligned(nx * 4);
    float *tw0 = ss_aligned(nw * 4), *tw1 = ss_aligned(nw * 4), *tb0 = ss_aligned(out * 4),
          *tb1 = ss_aligned(out * 4);
    double *S = malloc((nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny)) * sizeof(double));
    fill(x, nx, &r, 1.0);
    fill(w, nw, &r, sqrt(2.0 / (in + out)));
    fill(b, out, &r, 0.1);
    fill(dy, ny, &r, 0.01);
    char name[160];
    const char *prec = bf16 ? "bf16" : "fp32";
    int relu = k != L.n_bot - 1 && k != L.n_bot + L.n_top - 1;

    dense_fwd(ref, k, x, w, b, y0, n, relu);
    dense_fwd(got, k, x, w, b, y1, n, relu);
    if (bf16) /* x [n x in] row-major, W^T [in x out]: W's (j, t) at t + j*in */
        abs_sum(S, x, in, 1, w, 1, in, n, out, in, 1.0);
    double wf = worst(y1, y0, bf16 ? S : NULL, ny, in);
    snprintf(name, sizeof name, "%s layer %d (%dx%dx%d%s): forward as OpenBLAS's", prec, k, n,
             out, in, relu ? ", ReLU" : "");
    CHECK(wf <= 1, name, "worst error %.3g of the bound", wf);

    /* the gradient itself (alpha 1, beta 0), with dx */
    dense_bwd(ref, k, x, w, dy, tw0, tb0, dx0, n, 1.0f, 0.0f);
    dense_bwd(got, k, x, w, dy, tw1, tb1, dx1, n, 1.0f, 0.0f);
    if (bf16) /* dx = dy W: dy [n x out], W [out x in] */
        abs_sum(S, dy, out, 1, w, in, 1, n, in, out, 1.0);
    double wd = worst(dx1, dx0, bf16 ? S : NULL, nx, out);
    if (bf16) /* dW = dy^T x: dy^T [out x n], x [n x in] */
        abs_sum(S, dy, 1, out, x, in, 1, out, in, n, 1.0);
    double ww = worst(tw1, tw0, bf16 ? S : NULL, nw, n);
    double wb = worst(tb1, tb0, NULL, out, n); /* the bias's sums are fp32 on both */
    snprintf(name, sizeof name, "%s layer %d, batch %d: backward data, weights and bias as OpenBLAS's",
             prec, k, n);
    CHECK(wd <= 1 && ww <= 1 && wb <= 1, name, "worst of the bound: dx %.3g dW %.3g db %.3g", wd,
          ww, wb);

    /* the SGD step in place: W - 0.1 dy^T x */
    memcpy(tw0, w, nw * 4), memcpy(tw1, w, nw * 4);
    memcpy(tb0, b, out * 4), memcpy(tb1, b, out * 4);
    dense_bwd(ref, k, x, w, dy, tw0, tb0, NULL, n, -0.1f, 1.0f);
    dense_bwd(got, k, x, w, dy, tw1, tb1, NULL, n, -0.1f, 1.0f);
    if (bf16)
        abs_sum(S, dy, 1, out, x, in, 1, out, in, n, 0.1);
    double moved = 0; /* the step really moved W, so equal results mean something */
    for (size_t i = 0; i < nw; i++)
        moved = fmax(moved, fabs(tw0[i] - w[i]));
    for (size_t i = 0; i < nw; i++) /* compare the steps, not W (its own magnitude hides them) */
        tw0[i] -= w[i], tw1[i] -= w[i];
    double ws = worst(tw1, tw0, bf16 ? S : NULL, nw, n);
    snprintf(name, sizeof name, "%s layer %d, batch %d: the SGD step in place as OpenBLAS's", prec,
             k, n);
    CHECK(ws <= 1 && moved > 0, name, "worst %.3g of the bound (moved %g)", ws, moved);
    free(x), free(w), free(b), free(dy), free(y0), free(y1), free(dx0), free(dx1);
    free(tw0), free(tw1), free(tb0), free(tb1), free(S);
}

static int threads_now(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void *run_forward(void *arg)
{
    struct model_layout *l = arg;
    struct model_scratch s;
    model_scratch_init(&s, l, 128);
    float *p = ss_aligned(l->n_params * sizeof(float));
    model_init_params(l, p, 3);
    struct batch b;
    batch_init(&b, 128, l->n_dense, l->n_tables);
    b.n = 128;
    model_forward(l, p, &b, &s);
    int *seen = malloc(sizeof *seen);
    *seen = threads_now();
    batch_free(&b);
    free(p);
    model_scratch_free(&s);
    return seen;
}

int main(void)
{
    struct ss_err e = {0};
    int rc = ss_config_load(&cfg, NULL, NULL, 0, &e) || model_layout_init(&L, &cfg, &e);
    CHECK(rc == 0 && L.n_bot == 4 && L.n_top == 3, "the peer's model (the defaults)", "%s", e.msg);
    if (L.backend != DENSE_ONEDNN) {
        printf("  this build has no oneDNN (libdnnl-dev): nothing to compare\n");
        CHECK_DONE();
    }
    struct model_layout lb = L;
    lb.backend = DENSE_OPENBLAS;
    struct dense *ref = dense_create(&lb, 128), *got = dense_create(&L, 128);
    static const int ns[] = {128, 37, 128};
    for (int k = 0; k < L.n_bot + L.n_top; k++)
        for (int i = 0; i < 3; i++)
            check_layer(ref, got, k, ns[i], 0, 11 + k * 3 + i);
    char desc[200];
    printf("  fp32: %s\n", dense_describe(got, desc, sizeof desc));
    CHECK(strstr(desc, "oneDNN") != NULL, "the kernels oneDNN chose are named", "%s", desc);
    dense_free(got);

    /* each worker's primitives run on its own thread: no OpenMP team appears */
    int before = threads_now();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, run_forward, &L);
    int most = 0;
    for (int i = 0; i < 2; i++) {
        int *seen;
        pthread_join(t[i], (void **)&seen);
        most = *seen > most ? *seen : most;
        free(seen);
    }
    CHECK(most <= before + 2, "two workers' oneDNN forwards run on their 2 threads, no more",
          "%d threads during the forwards, %d before", most, before);

    char *bf[] = {"trainer.precision=bf16"};
    struct ss_config c2;
    struct model_layout l2;
    rc = ss_config_load(&c2, NULL, bf, 1, &e);
    if (rc != 0) {
        printf("  bf16 skipped: %s\n", e.msg);
        CHECK(strstr(e.msg, "AVX512_BF16") != NULL, "bf16 refused naming what the CPU lacks",
              "%s", e.msg);
    } else {
        rc = model_layout_init(&l2, &c2, &e);
        CHECK(rc == 0 && l2.precision == PREC_BF16, "bf16 accepted on this CPU", "%s", e.msg);
        got = dense_create(&l2, 128);
        for (int k = 0; k < l2.n_bot + l2.n_top; k++)
            for (int i = 0; i < 3; i++)
                check_layer(ref, got, k, ns[i], 1, 101 + k * 3 + i);
        printf("  bf16: %s\n", dense_describe(got, desc, sizeof desc));
        dense_free(got);
        model_layout_free(&l2);
        ss_config_free(&c2);
    }
    char *bad[][2] = {{"trainer.precision=bf16", "trainer.dense_backend=openblas"},
                      {"trainer.precision=bf16", "trainer.device=cuda"}};
    const char *want[] = {"needs trainer.dense_backend = onednn", "trainer.device = cuda trains in fp32"};
    for (int i = 0; i < 2; i++) {
        rc = ss_config_load(&c2, NULL, bad[i], 2, &e);
        CHECK(rc != 0 && strstr(e.msg, want[i]) && strstr(e.msg, "--set trainer.precision=bf16"),
              i ? "bf16 with a GPU is refused, named" : "bf16 on OpenBLAS is refused, named",
              "rc %d: %s", rc, e.msg);
        if (rc == 0)
            ss_config_free(&c2);
    }
    float f[] = {1.0f, -2.5f, 1.00390625f, 1.01171875f, 1.009765625f, NAN};
    uint16_t h[6];
    ss_to_bf16(h, f, 6);
    CHECK(h[0] == 0x3f80 && h[1] == 0xc020 && h[2] == 0x3f80 && h[3] == 0x3f82 &&
          h[4] == 0x3f81 &&
              (h[5] & 0x7f80) == 0x7f80 && (h[5] & 0x7f),
          "fp32 -> bf16 rounds to nearest, ties to even; a NaN stays a NaN",
          "%04x %04x %04x %04x %04x %04x", h[0], h[1], h[2], h[3], h[4], h[5]);
    dense_free(ref);
    model_layout_free(&L);
    ss_config_free(&cfg);
    CHECK_DONE();
}
