/* The CPU simulation of the device library, for tests: the device trainer
 * of common.h over a backend whose "device memory" is host memory, whose
 * GEMMs are OpenBLAS's column-major ones (cuBLAS's meaning, argument for
 * argument), and whose kernels run the bodies of kernels.h in loops; every
 * call is done when it returns. Built as libshadowsync_gpusim.so on every
 * machine and loaded with SS_GPU_LIB=.../libshadowsync_gpusim.so, it lets
 * the tests run trainer.device = cuda end to end (the step, the device
 * copy, the shadow thread's staging, Hogwild on one copy) where there is no
 * GPU. It is no GPU support: its probe names itself, it has no NCCL, and it
 * is never loaded unless SS_GPU_LIB names it. */
#include <cblas.h>

typedef int be_stream;
typedef int be_blas;
#include "common.h"

static const char *sim_build_info(void)
{
    return "CPU simulation of the device library (tests; no CUDA)";
}

/* One device, none when CUDA_VISIBLE_DEVICES is set and empty (as CUDA). */
static int sim_probe(char *why, size_t cap)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && !*vis) {
        snprintf(why, cap, "no usable CUDA device (CPU simulation: CUDA_VISIBLE_DEVICES is empty)");
        return 0;
    }
    snprintf(why, cap, "1 x CPU simulation of the device library (tests only)");
    return 1;
}

/* No NCCL; SS_SIM_NCCL_START_S=T makes its start take T s first, as one
 * that cannot connect the trainers would (tests of the deadline on it). */
static struct collective *sim_nccl(MPI_Comm comm, int dev, const struct peer_wait *pw,
                                   struct ss_err *e)
{
    (void)comm, (void)dev, (void)pw;
    const char *start = getenv("SS_SIM_NCCL_START_S");
    double t = start ? atof(start) : 0;
    if (t > 0) {
        const struct timespec hang = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
        nanosleep(&hang, NULL);
    }
    fail(e, SS_EINVAL, "the CPU simulation of the device library has no NCCL");
    return NULL;
}

static int be_set_device(int dev, struct ss_err *e)
{
    if (dev != 0)
        return fail(e, SS_EINVAL, "CPU simulation: no device %d", dev);
    return 0;
}

static int be_stream_create(be_stream *s, struct ss_err *e)
{
    (void)e;
    *s = 1;
    return 0;
}

static void be_stream_destroy(be_stream s) { (void)s; }

static int be_wait(be_stream s, struct ss_err *e)
{
    (void)s, (void)e;
    return 0;
}

static int be_blas_create(be_blas *h, be_stream s, struct ss_err *e)
{
    (void)s, (void)e;
    *h = 1;
    return 0;
}

static void be_blas_destroy(be_blas h) { (void)h; }

static int be_alloc(float **p, size_t bytes, struct ss_err *e)
{
    /* filled with NaN, as device memory holds garbage: a read before a write shows */
    size_t n = bytes / sizeof(float);
    *p = malloc(n ? n * sizeof(float) : sizeof(float));
    if (!*p)
        return fail(e, SS_ENOMEM, "CPU simulation: out of memory for %zu bytes", bytes);
    for (size_t i = 0; i < n; i++)
        (*p)[i] = NAN;
    return 0;
}

static int be_alloc_host(float **p, size_t bytes, struct ss_err *e)
{
    return be_alloc(p, bytes, e);
}

static void be_free(float *p) { free(p); }
static void be_free_host(float *p) { free(p); }
static int be_host_register(void *p, size_t bytes) { return p && bytes ? 0 : -1; }
static void be_host_unregister(void *p) { (void)p; }
static void be_forget_errors(void) {}
/* The simulation's one device. */
static int be_device_key(int dev, char *out, size_t cap)
{
    snprintf(out, cap, "sim:%d", dev);
    return 0;
}

static int be_copy(float *dst, const float *src, size_t bytes, int kind, be_stream s,
                   struct ss_err *e)
{
    (void)kind, (void)s, (void)e;
    memcpy(dst, src, bytes);
    return 0;
}

static int be_gemm(be_blas h, int ta, int tb, int m, int n, int k, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc,
                   struct ss_err *e)
{
    (void)h, (void)e;
    cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
}

static int be_gemv(be_blas h, int m, int n, float alpha, const float *A, int lda, const float *x,
                   float beta, float *y, struct ss_err *e)
{
    (void)h, (void)e;
    cblas_sgemv(CblasColMajor, CblasNoTrans, m, n, alpha, A, lda, x, 1, beta, y, 1);
    return 0;
}

/* ---- kernels: the bodies of kernels.h in loops ----------------------------- */
#define SIM_LOOP(n, body)                                                                          \
    do {                                                                                           \
        (void)s, (void)e;                                                                          \
        for (size_t i = 0; i < (size_t)(n); i++)                                                   \
            body;                                                                                  \
        return 0;                                                                                  \
    } while (0)

static int be_log1p_relu(be_stream s, const float *x, float *y, size_t n, struct ss_err *e)
{
    SIM_LOOP(n, kb_log1p_relu(x, y, i));
}

static int be_bias_act(be_stream s, float *y, const float *b, size_t n, int out, int relu,
                       struct ss_err *e)
{
    SIM_LOOP(n, kb_bias_act(y, b, out, relu, i));
}

static int be_relu_bwd(be_stream s, float *dy, const float *y, size_t n, struct ss_err *e)
{
    SIM_LOOP(n, kb_relu_bwd(dy, y, i));
}

static int be_loss(be_stream s, const float *z, const float *label, float *prob, float *loss,
                   float *dy, int n, struct ss_err *e)
{
    SIM_LOOP(n, kb_loss(z, label, prob, loss, dy, n, (int)i));
}

static int be_interact_fwd(be_stream s, const float *bot, const float *emb, float *top_in, int n,
                           int T, int d, int w, struct ss_err *e)
{
    int outs = d + (T + 1) * T / 2;
    SIM_LOOP((size_t)n * outs, kb_interact_fwd(bot, emb, top_in, T, d, w, (int)(i / outs),
                                               (int)(i % outs)));
}

static int be_interact_bwd(be_stream s, const float *g, const float *bot, const float *emb,
                           float *d_bot, float *d_emb, int n, int T, int d, int w,
                           struct ss_err *e)
{
    int per = (T + 1) * d;
    SIM_LOOP((size_t)n * per, kb_interact_bwd(g, bot, emb, d_bot, d_emb, T, d, w, (int)(i / per),
                                              (int)(i % per)));
}

static int be_adagrad(be_stream s, float *w, float *state, const float *g, size_t n, float lr,
                      float eps, struct ss_err *e)
{
    SIM_LOOP(n, kb_adagrad(w, state, g, lr, eps, i));
}

static int be_add(be_stream s, float *w, const float *delta, size_t n, struct ss_err *e)
{
    SIM_LOOP(n, kb_add(w, delta, i));
}

static int be_fill(be_stream s, float *x, float v, size_t n, struct ss_err *e)
{
    SIM_LOOP(n, kb_fill(x, v, i));
}

__attribute__((visibility("default"))) const struct gpu_api *shadowsync_gpu_api(void)
{
    return api_table(sim_build_info, sim_probe, sim_nccl);
}
