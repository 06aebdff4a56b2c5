/* The CUDA trainer (DESIGN §6; the interface and its design in gpu.h),
 * built into libshadowsync_gpu.so and reached through the table of api.h.
 *
 * Layouts are those of the CPU path (src/core/model.c): row-major
 * activations [n x width], weights [out x in] like torch.nn.Linear in the
 * same flat buffer. cuBLAS is column-major, so a row-major [r x c] matrix is
 * its [c x r] transpose: y = x W^T is gemm(T, N) with m = out, dx = dy W is
 * gemm(N, N) with m = in, dW = dy^T x is gemm(N, T) with m = in, and the
 * bias gradient is a gemv of dy against ones. The SGD step is fused into
 * the backward (dW, db accumulate -lr * grad straight into the shared
 * copy, after dx has read W), as on the CPU; Adagrad makes the gradient
 * first, then one elementwise pass. cuBLAS runs in plain FP32 (no TF32), so
 * the CPU path is matched to float rounding. Waits poll the stream with a
 * short sleep instead of blocking in the driver's spin. */
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stdarg.h>
#include <stdio.h>

#include "api.h"

/* The library calls nothing of the executable's: its own ss_fail and calloc. */
__attribute__((format(printf, 3, 4))) static int fail(struct ss_err *e, int code, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    ss_vfail(e, code, fmt, ap);
    va_end(ap);
    return code;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (!p)
        abort();
    return p;
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            return fail(e, SS_EIO, "CUDA: %s (%s, %s:%d)", cudaGetErrorString(err_), #call,    \
                           __FILE__, __LINE__);                                                    \
    } while (0)
#define CB(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
            return fail(e, SS_EIO, "cuBLAS: %s (%s:%d)", cublasGetStatusString(st_), __FILE__,  \
                           __LINE__);                                                              \
    } while (0)

static const char *cu_build_info(void)
{
    static char s[160];
    snprintf(s, sizeof s, "CUDA %d.%d, cuBLAS, NCCL %d.%d.%d; code for sm_80 and sm_90",
             CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    return s;
}

static int cu_probe(char *why, size_t cap)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n <= 0) { /* 35 (no driver) and the rest: no GPU (TOOLCHAIN.md) */
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv); /* 0: no driver at all */
        cudaRuntimeGetVersion(&rt);
        char hint[160] = "";
        if (err == cudaErrorInsufficientDriver && drv == 0)
            snprintf(hint, sizeof hint, "; no NVIDIA driver on this machine");
        else if (err == cudaErrorInsufficientDriver)
            snprintf(hint, sizeof hint, "; the driver supports CUDA %d.%d, this build's runtime "
                     "needs %d.%d (a newer driver, or cuda-compat)", drv / 1000, drv % 1000 / 10,
                     rt / 1000, rt % 1000 / 10);
        snprintf(why, cap, "no usable CUDA device (cudaGetDeviceCount: %s%s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", hint);
        cudaGetLastError();
        return 0;
    }
    cudaDeviceProp p;
    if ((err = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, cap, "no usable CUDA device (cudaGetDeviceProperties: %s)",
                 cudaGetErrorString(err));
        return 0;
    }
    if (p.major < 8) {
        snprintf(why, cap, "%s is sm_%d%d; this build has code for sm_80 and newer", p.name,
                 p.major, p.minor);
        return 0;
    }
    snprintf(why, cap, "%d x %s (sm_%d%d, %.0f GiB)", n, p.name, p.major, p.minor,
             p.totalGlobalMem / 1073741824.0);
    return n;
}

/* Waits for a stream without the driver's busy spin (a worker's or the
 * shadow thread's core is the trainer's to use). */
static cudaError_t stream_wait(cudaStream_t s)
{
    const struct timespec nap = {0, 20000};
    cudaError_t err;
    while ((err = cudaStreamQuery(s)) == cudaErrorNotReady)
        nanosleep(&nap, NULL);
    if (err == cudaSuccess) /* launches are checked where made: leave no NotReady behind */
        (void)cudaGetLastError();
    return err;
}

/* ---- kernels ----------------------------------------------------------- */
static unsigned blocks(size_t n, unsigned t)
{
    size_t b = (n + t - 1) / t;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

__global__ void k_log1p_relu(const float *x, float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = log1pf(fmaxf(x[i], 0.0f));
}

/* y[i, j] += b[j], then ReLU when relu. */
__global__ void k_bias_act(float *y, const float *b, size_t n, int out, int relu)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = y[i] + b[i % out];
        y[i] = relu ? fmaxf(v, 0.0f) : v;
    }
}

__global__ void k_relu_bwd(float *dy, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* prob = sigmoid(z), the example's BCE, and dy = (prob - y) / n. */
__global__ void k_loss(const float *z, const float *label, float *prob, float *loss, float *dy,
                       int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float zi = z[i], y = label[i], p = 1.0f / (1.0f + expf(-zi));
    prob[i] = p;
    loss[i] = fmaxf(zi, 0.0f) - zi * y + log1pf(expf(-fabsf(zi)));
    dy[i] = (p - y) / n;
}

__device__ __forceinline__ const float *vec_of(const float *bot, const float *emb, int i, int j,
                                               int T, int d)
{
    return j == 0 ? bot + (size_t)i * d : emb + ((size_t)i * T + (j - 1)) * d;
}

/* One block an example: top_in = [v0, dots vi.vj for i > j in row-major
 * lower-triangle order], as interact_fwd of model.c. */
__global__ void k_interact_fwd(const float *bot, const float *emb, float *top_in, int T, int d,
                               int w)
{
    int i = blockIdx.x, V = T + 1, P = V * (V - 1) / 2;
    float *out = top_in + (size_t)i * w;
    for (int k = threadIdx.x; k < d; k += blockDim.x)
        out[k] = bot[(size_t)i * d + k];
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        int a = (int)((1.0f + sqrtf(1.0f + 8.0f * p)) * 0.5f);
        while (a * (a - 1) / 2 > p)
            a--;
        while ((a + 1) * a / 2 <= p)
            a++;
        int b = p - a * (a - 1) / 2;
        const float *va = vec_of(bot, emb, i, a, T, d), *vb = vec_of(bot, emb, i, b, T, d);
        float s = 0.0f;
        for (int k = 0; k < d; k++)
            s += va[k] * vb[k];
        out[d + p] = s;
    }
}

/* dv_a = [a == 0: the copied part] + sum_{b != a} S_ab v_b, as interact_bwd
 * of model.c: into d_bot (a = 0) and d_emb (a = 1..T). */
__global__ void k_interact_bwd(const float *g_all, const float *bot, const float *emb,
                               float *d_bot, float *d_emb, int T, int d, int w)
{
    int i = blockIdx.x, V = T + 1;
    const float *g = g_all + (size_t)i * w;
    for (int idx = threadIdx.x; idx < V * d; idx += blockDim.x) {
        int a = idx / d, c = idx % d;
        float acc = a == 0 ? g[c] : 0.0f;
        for (int b = 0; b < V; b++) {
            if (b == a)
                continue;
            int hi = a > b ? a : b, lo = a > b ? b : a;
            acc += g[d + hi * (hi - 1) / 2 + lo] * vec_of(bot, emb, i, b, T, d)[c];
        }
        if (a == 0)
            d_bot[(size_t)i * d + c] = acc;
        else
            d_emb[((size_t)i * T + (a - 1)) * d + c] = acc;
    }
}

__global__ void k_adagrad(float *w, float *state, const float *g, size_t n, float lr, float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s = state[i] + g[i] * g[i];
        state[i] = s;
        w[i] -= lr * g[i] / (sqrtf(s) + eps);
    }
}

__global__ void k_add(float *w, const float *delta, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        w[i] += delta[i];
}

__global__ void k_fill(float *x, float v, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = v;
}

/* ---- the device copy --------------------------------------------------- */
struct gpu_dense {
    int dev;
    struct model_layout l;      /* rows not kept */
    size_t n;
    float *w, *state, *delta;   /* device */
    cudaStream_t st;            /* the shadow thread's (and checkpoints') stream */
    pthread_mutex_t mu;         /* one staging transfer at a time */
};

static void cu_dense_free(struct gpu_dense *g);

static int dense_alloc(struct gpu_dense *g, const float *w, const float *state, struct ss_err *e)
{
    size_t bytes = g->n * sizeof(float);
    CU(cudaSetDevice(g->dev));
    CU(cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking));
    CU(cudaMalloc(&g->w, bytes));
    CU(cudaMalloc(&g->state, bytes));
    CU(cudaMalloc(&g->delta, bytes));
    CU(cudaMemcpyAsync(g->w, w, bytes, cudaMemcpyHostToDevice, g->st));
    CU(cudaMemcpyAsync(g->state, state, bytes, cudaMemcpyHostToDevice, g->st));
    CU(stream_wait(g->st));
    return 0;
}

static int cu_dense_create(struct gpu_dense **out, const struct model_layout *l, int dev,
                           const float *w, const float *state, struct ss_err *e)
{
    struct gpu_dense *g = (struct gpu_dense *)xcalloc(1, sizeof *g);
    *out = NULL;
    g->dev = dev;
    g->l = *l;
    g->l.rows = NULL;
    g->n = l->n_params;
    pthread_mutex_init(&g->mu, NULL);
    int rc = dense_alloc(g, w, state, e);
    if (rc < 0) {
        cu_dense_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

static void cu_dense_free(struct gpu_dense *g)
{
    if (!g)
        return;
    cudaSetDevice(g->dev);
    cudaFree(g->w);
    cudaFree(g->state);
    cudaFree(g->delta);
    if (g->st)
        cudaStreamDestroy(g->st);
    (void)cudaGetLastError(); /* nothing of a teardown may fail a later call */
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static int dense_read(struct gpu_dense *g, float *w, float *state, struct ss_err *e)
{
    size_t bytes = g->n * sizeof(float);
    CU(cudaSetDevice(g->dev));
    if (w)
        CU(cudaMemcpyAsync(w, g->w, bytes, cudaMemcpyDeviceToHost, g->st));
    if (state)
        CU(cudaMemcpyAsync(state, g->state, bytes, cudaMemcpyDeviceToHost, g->st));
    CU(stream_wait(g->st));
    return 0;
}

static int cu_dense_read(struct gpu_dense *g, float *w, float *state, struct ss_err *e)
{
    pthread_mutex_lock(&g->mu);
    int rc = dense_read(g, w, state, e);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int dense_add(struct gpu_dense *g, const float *delta, struct ss_err *e)
{
    CU(cudaSetDevice(g->dev));
    CU(cudaMemcpyAsync(g->delta, delta, g->n * sizeof(float), cudaMemcpyHostToDevice, g->st));
    k_add<<<blocks(g->n, 256), 256, 0, g->st>>>(g->w, g->delta, g->n);
    CU(cudaGetLastError());
    CU(stream_wait(g->st));
    return 0;
}

static int cu_dense_add(struct gpu_dense *g, const float *delta, struct ss_err *e)
{
    pthread_mutex_lock(&g->mu);
    int rc = dense_add(g, delta, e);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* ---- a worker ------------------------------------------------------------ */
struct gpu_worker {
    struct gpu_dense *g;        /* must outlive the worker */
    int dev, cap;
    cudaStream_t st;
    cublasHandle_t h;
    float *h_emb, *h_demb, *h_prob, *h_in; /* pinned: h_in = dense [cap*n_dense], labels [cap] */
    float *h_loss;
    float *x_raw, *x0, *label, *emb, *bot[SS_MAX_LAYERS], *top_in, *top[SS_MAX_LAYERS];
    float *prob, *loss, *d_a, *d_b, *d_top_in, *d_emb, *d_bot, *grad, *ones;
};

static int worker_alloc(struct gpu_worker *w, struct ss_err *e)
{
    const struct model_layout *l = &w->g->l;
    size_t n = w->cap, TD = (size_t)l->n_tables * l->dim, f = sizeof(float);
    CU(cudaSetDevice(w->dev));
    CU(cudaStreamCreateWithFlags(&w->st, cudaStreamNonBlocking));
    CB(cublasCreate(&w->h));
    CB(cublasSetStream(w->h, w->st));
    CB(cublasSetMathMode(w->h, CUBLAS_DEFAULT_MATH));
    CU(cudaMallocHost(&w->h_emb, n * TD * f));
    CU(cudaMallocHost(&w->h_demb, n * TD * f));
    CU(cudaMallocHost(&w->h_prob, n * f));
    CU(cudaMallocHost(&w->h_loss, n * f));
    CU(cudaMallocHost(&w->h_in, n * (l->n_dense + 1) * f));
    CU(cudaMalloc(&w->x_raw, n * (l->n_dense + 1) * f)); /* then the labels */
    w->label = w->x_raw + n * l->n_dense;
    CU(cudaMalloc(&w->x0, n * l->n_dense * f));
    CU(cudaMalloc(&w->emb, n * TD * f));
    for (int i = 0; i < l->n_bot; i++)
        CU(cudaMalloc(&w->bot[i], n * l->bot[i + 1] * f));
    for (int i = 0; i < l->n_top; i++)
        CU(cudaMalloc(&w->top[i], n * l->top[i + 1] * f));
    CU(cudaMalloc(&w->top_in, n * l->top[0] * f));
    CU(cudaMalloc(&w->prob, n * f));
    CU(cudaMalloc(&w->loss, n * f));
    CU(cudaMalloc(&w->d_a, n * model_widest(l) * f));
    CU(cudaMalloc(&w->d_b, n * model_widest(l) * f));
    CU(cudaMalloc(&w->d_top_in, n * l->top[0] * f));
    CU(cudaMalloc(&w->d_emb, n * TD * f));
    CU(cudaMalloc(&w->d_bot, n * l->dim * f));
    CU(cudaMalloc(&w->grad, l->n_params * f));
    CU(cudaMalloc(&w->ones, n * f));
    k_fill<<<blocks(n, 256), 256, 0, w->st>>>(w->ones, 1.0f, n);
    CU(cudaGetLastError());
    CU(stream_wait(w->st));
    return 0;
}

static void cu_worker_free(struct gpu_worker *w)
{
    if (!w)
        return;
    cudaSetDevice(w->dev);
    if (w->st)
        cudaStreamSynchronize(w->st);
    float *dev[] = {w->x_raw, w->x0, w->emb, w->top_in, w->prob, w->loss, w->d_a, w->d_b,
                    w->d_top_in, w->d_emb, w->d_bot, w->grad, w->ones};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    for (int i = 0; i < SS_MAX_LAYERS; i++) {
        cudaFree(w->bot[i]);
        cudaFree(w->top[i]);
    }
    float *host[] = {w->h_emb, w->h_demb, w->h_prob, w->h_loss, w->h_in};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        cudaFreeHost(host[i]);
    if (w->h)
        cublasDestroy(w->h);
    if (w->st)
        cudaStreamDestroy(w->st);
    (void)cudaGetLastError();
    free(w);
}

static int cu_worker_create(struct gpu_worker **out, struct gpu_dense *g, int cap,
                                 struct ss_err *e)
{
    struct gpu_worker *w = (struct gpu_worker *)xcalloc(1, sizeof *w);
    w->g = g;
    w->dev = g->dev;
    w->cap = cap;
    int rc = worker_alloc(w, e);
    if (rc < 0) {
        cu_worker_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static float *cu_worker_emb(struct gpu_worker *w) { return w->h_emb; }
static float *cu_worker_d_emb(struct gpu_worker *w) { return w->h_demb; }
static float *cu_worker_prob(struct gpu_worker *w) { return w->h_prob; }

/* y [n x out] = x [n x in] W^T + b, ReLU unless last. */
static int linear_fwd(struct gpu_worker *w, const float *x, const float *W, const float *b,
                      float *y, int n, int in, int out, int relu, struct ss_err *e)
{
    const float one = 1.0f, zero = 0.0f;
    CB(cublasSgemm(w->h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, W, in, x, in, &zero, y, out));
    size_t m = (size_t)n * out;
    k_bias_act<<<blocks(m, 256), 256, 0, w->st>>>(y, b, m, out, relu);
    CU(cudaGetLastError());
    return 0;
}

/* dx = dy W (when dx), then the weight and bias targets <- beta*target +
 * alpha*gradient, as linear_bwd of model.c. */
static int linear_bwd(struct gpu_worker *w, const float *x, const float *W, const float *dy,
                      float *tw, float *tb, float *dx, int n, int in, int out, float alpha,
                      float beta, struct ss_err *e)
{
    const float one = 1.0f, zero = 0.0f;
    if (dx)
        CB(cublasSgemm(w->h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, W, in, dy, out, &zero, dx,
                       in));
    CB(cublasSgemm(w->h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &alpha, x, in, dy, out, &beta, tw,
                   in));
    CB(cublasSgemv(w->h, CUBLAS_OP_N, out, n, &alpha, dy, out, w->ones, 1, &beta, tb, 1));
    return 0;
}

static int relu_bwd(struct gpu_worker *w, float *dx, const float *y, size_t m, struct ss_err *e)
{
    k_relu_bwd<<<blocks(m, 256), 256, 0, w->st>>>(dx, y, m);
    CU(cudaGetLastError());
    return 0;
}

/* Up, forward, backward into target (alpha, beta as linear_bwd), down. */
static int step(struct gpu_worker *w, const struct batch *b, float *target, float alpha,
                float beta, struct ss_err *e)
{
    const struct model_layout *l = &w->g->l;
    const float *p = w->g->w;
    int n = b->n, T = l->n_tables, d = l->dim, rc;
    if (n > w->cap)
        return fail(e, SS_EINVAL, "gpu: a batch of %d examples, the worker holds %d", n, w->cap);
    size_t nd = (size_t)n * l->n_dense, TD = (size_t)n * T * d, f = sizeof(float);
    CU(cudaSetDevice(w->dev));
    memcpy(w->h_in, b->dense, nd * f);
    memcpy(w->h_in + nd, b->label, n * f);
    CU(cudaMemcpyAsync(w->x_raw, w->h_in, nd * f, cudaMemcpyHostToDevice, w->st));
    CU(cudaMemcpyAsync(w->label, w->h_in + nd, n * f, cudaMemcpyHostToDevice, w->st));
    CU(cudaMemcpyAsync(w->emb, w->h_emb, TD * f, cudaMemcpyHostToDevice, w->st));
    if (nd) {
        k_log1p_relu<<<blocks(nd, 256), 256, 0, w->st>>>(w->x_raw, w->x0, nd);
        CU(cudaGetLastError());
    }
    /* forward */
    const float *in = w->x0;
    for (int i = 0; i < l->n_bot; i++) {
        if ((rc = linear_fwd(w, in, p + l->bot_w[i], p + l->bot_b[i], w->bot[i], n, l->bot[i],
                             l->bot[i + 1], i < l->n_bot - 1, e)) < 0)
            return rc;
        in = w->bot[i];
    }
    const float *bot_out = w->bot[l->n_bot - 1];
    k_interact_fwd<<<n, 128, 0, w->st>>>(bot_out, w->emb, w->top_in, T, d, l->top[0]);
    CU(cudaGetLastError());
    in = w->top_in;
    for (int i = 0; i < l->n_top; i++) {
        if ((rc = linear_fwd(w, in, p + l->top_w[i], p + l->top_b[i], w->top[i], n, l->top[i],
                             l->top[i + 1], i < l->n_top - 1, e)) < 0)
            return rc;
        in = w->top[i];
    }
    float *dy = w->d_a, *dx = w->d_b;
    k_loss<<<(n + 127) / 128, 128, 0, w->st>>>(w->top[l->n_top - 1], w->label, w->prob, w->loss,
                                               dy, n);
    CU(cudaGetLastError());
    /* backward */
    for (int i = l->n_top - 1; i >= 0; i--) {
        const float *x = i ? w->top[i - 1] : w->top_in;
        if ((rc = linear_bwd(w, x, p + l->top_w[i], dy, target + l->top_w[i], target + l->top_b[i],
                             i ? dx : w->d_top_in, n, l->top[i], l->top[i + 1], alpha, beta, e)) < 0)
            return rc;
        if (i) {
            if ((rc = relu_bwd(w, dx, w->top[i - 1], (size_t)n * l->top[i], e)) < 0)
                return rc;
            float *t = dy; dy = dx; dx = t;
        }
    }
    k_interact_bwd<<<n, 128, 0, w->st>>>(w->d_top_in, bot_out, w->emb, w->d_bot, w->d_emb, T, d,
                                         l->top[0]);
    CU(cudaGetLastError());
    CU(cudaMemcpyAsync(dy, w->d_bot, (size_t)n * d * f, cudaMemcpyDeviceToDevice, w->st));
    for (int i = l->n_bot - 1; i >= 0; i--) {
        const float *x = i ? w->bot[i - 1] : w->x0;
        if ((rc = linear_bwd(w, x, p + l->bot_w[i], dy, target + l->bot_w[i], target + l->bot_b[i],
                             i ? dx : NULL, n, l->bot[i], l->bot[i + 1], alpha, beta, e)) < 0)
            return rc;
        if (i) {
            if ((rc = relu_bwd(w, dx, w->bot[i - 1], (size_t)n * l->bot[i], e)) < 0)
                return rc;
            float *t = dy; dy = dx; dx = t;
        }
    }
    return 0;
}

/* The probabilities, losses and embedding gradients back to the host. */
static int download(struct gpu_worker *w, int n, struct ss_err *e)
{
    const struct model_layout *l = &w->g->l;
    size_t f = sizeof(float), TD = (size_t)n * l->n_tables * l->dim;
    CU(cudaMemcpyAsync(w->h_prob, w->prob, n * f, cudaMemcpyDeviceToHost, w->st));
    CU(cudaMemcpyAsync(w->h_loss, w->loss, n * f, cudaMemcpyDeviceToHost, w->st));
    CU(cudaMemcpyAsync(w->h_demb, w->d_emb, TD * f, cudaMemcpyDeviceToHost, w->st));
    return 0;
}

static int cu_worker_train(struct gpu_worker *w, const struct batch *b, int opt, float lr,
                                float eps, struct ss_err *e)
{
    struct gpu_dense *g = w->g;
    int rc;
    if (b->n == 0)
        return 0;
    if (opt == OPT_ADAGRAD) {
        if ((rc = step(w, b, w->grad, 1.0f, 0.0f, e)) < 0)
            return rc;
        k_adagrad<<<blocks(g->n, 256), 256, 0, w->st>>>(g->w, g->state, w->grad, g->n, lr, eps);
        CU(cudaGetLastError());
    } else if ((rc = step(w, b, g->w, -lr, 1.0f, e)) < 0) {
        return rc;
    }
    if ((rc = download(w, b->n, e)) < 0)
        return rc;
    CU(stream_wait(w->st));
    return 0;
}

static int cu_worker_grad(struct gpu_worker *w, const struct batch *b, float *grad,
                               double *loss, struct ss_err *e)
{
    int rc;
    *loss = 0.0;
    if (b->n == 0) {
        memset(grad, 0, w->g->n * sizeof(float));
        return 0;
    }
    if ((rc = step(w, b, w->grad, 1.0f, 0.0f, e)) < 0 || (rc = download(w, b->n, e)) < 0)
        return rc;
    CU(cudaMemcpyAsync(grad, w->grad, w->g->n * sizeof(float), cudaMemcpyDeviceToHost, w->st));
    CU(stream_wait(w->st));
    double s = 0;
    for (int i = 0; i < b->n; i++)
        s += w->h_loss[i];
    *loss = b->n ? s / b->n : 0.0;
    return 0;
}

/* ---- NCCL all-reduce ------------------------------------------------------ */
struct nccl_impl {
    ncclComm_t comm;
    cudaStream_t st;
    float *buf;                 /* the sum on the device */
    float *hbuf;                /* pinned: a copy into pageable memory would block until the
                                   sum is done, and a lost peer would hang it */
    size_t max;
    int dev;
};

static int nccl_sum(struct collective *c, float *buf, size_t n, struct ss_err *e)
{
    struct nccl_impl *x = (struct nccl_impl *)c->impl;
    CU(cudaSetDevice(x->dev));
    if (n > x->max) { /* the first round sizes it */
        x->max = 0;
        CU(cudaFree(x->buf));
        x->buf = NULL;
        CU(cudaFreeHost(x->hbuf));
        x->hbuf = NULL;
        CU(cudaMalloc(&x->buf, n * sizeof(float)));
        CU(cudaMallocHost(&x->hbuf, n * sizeof(float)));
        x->max = n;
    }
    memcpy(x->hbuf, buf, n * sizeof(float));
    CU(cudaMemcpyAsync(x->buf, x->hbuf, n * sizeof(float), cudaMemcpyHostToDevice, x->st));
    ncclResult_t r = ncclAllReduce(x->buf, x->buf, n, ncclFloat, ncclSum, x->comm, x->st);
    if (r != ncclSuccess)
        return fail(e, SS_EIO, "ncclAllReduce on trainer %d of %d: %s", c->rank, c->size,
                       ncclGetErrorString(r));
    CU(cudaMemcpyAsync(x->hbuf, x->buf, n * sizeof(float), cudaMemcpyDeviceToHost, x->st));
    /* as stream_wait, but a peer lost mid-sum ends the wait with an error, not a hang */
    const struct timespec nap = {0, 20000};
    cudaError_t err;
    while ((err = cudaStreamQuery(x->st)) == cudaErrorNotReady) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(x->comm, &async) == ncclSuccess && async != ncclSuccess) {
            ncclCommAbort(x->comm);
            x->comm = NULL;
            return fail(e, SS_EIO, "NCCL all-reduce on trainer %d of %d: %s", c->rank, c->size,
                        ncclGetErrorString(async));
        }
        nanosleep(&nap, NULL);
    }
    CU(err);
    (void)cudaGetLastError();
    memcpy(buf, x->hbuf, n * sizeof(float));
    return 0;
}

static void nccl_free(struct collective *c)
{
    struct nccl_impl *x = (struct nccl_impl *)c->impl;
    cudaSetDevice(x->dev);
    if (x->comm)
        ncclCommDestroy(x->comm);
    cudaFree(x->buf);
    cudaFreeHost(x->hbuf);
    cudaStreamDestroy(x->st);
    free(x);
    free(c);
}

static const struct collective_ops nccl_ops = {"nccl", nccl_sum, nccl_free};

static int device_setup(struct nccl_impl *x, struct ss_err *e)
{
    CU(cudaSetDevice(x->dev));
    CU(cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking));
    return 0;
}

/* Every step that can fail on one trainer alone is agreed on before
 * ncclCommInitRank, which the others would otherwise wait in for ever. */
static int nccl_init(struct nccl_impl *x, MPI_Comm comm, int rank, int size, struct ss_err *e)
{
    struct { int rc; ncclUniqueId id; } u; /* every rank learns whether trainer 0 made one */
    memset(&u, 0, sizeof u);
    if (rank == 0)
        u.rc = ncclGetUniqueId(&u.id);
    MPI_Bcast(&u, (int)sizeof u, MPI_BYTE, 0, comm);
    int rc = device_setup(x, e), ok = rc == 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (rc < 0)
        return rc;
    if (u.rc != ncclSuccess)
        return fail(e, SS_EIO, "ncclGetUniqueId on trainer 0: %s",
                    ncclGetErrorString((ncclResult_t)u.rc));
    if (!ok)
        return fail(e, SS_EIO, "another trainer could not set up its device for NCCL");
    ncclComm_t made = NULL;
    ncclResult_t r = ncclCommInitRank(&made, size, u.id, rank);
    x->comm = r == ncclSuccess ? made : NULL;
    if (r != ncclSuccess) {
        if (made) /* a half-made communicator keeps NCCL's threads and sockets */
            ncclCommAbort(made);
        return fail(e, SS_EIO, "ncclCommInitRank (trainer %d of %d, device %d): %s", rank, size,
                    x->dev, ncclGetErrorString(r));
    }
    return 0;
}

static struct collective *cu_nccl(MPI_Comm comm, int dev, struct ss_err *e)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    struct nccl_impl *x = (struct nccl_impl *)xcalloc(1, sizeof *x);
    x->dev = dev;
    if (nccl_init(x, comm, rank, size, e) < 0) {
        cudaFree(x->buf);
        if (x->st)
            cudaStreamDestroy(x->st);
        free(x);
        return NULL;
    }
    struct collective *c = (struct collective *)xcalloc(1, sizeof *c);
    c->ops = &nccl_ops;
    c->rank = rank;
    c->size = size;
    c->impl = x;
    return c;
}

extern "C" __attribute__((visibility("default"))) const struct gpu_api *shadowsync_gpu_api(void)
{
    static const struct gpu_api a = {
        SS_GPU_API_VERSION, cu_build_info,  cu_probe,      cu_dense_create, cu_dense_free,
        cu_dense_read,      cu_dense_add,   cu_worker_create, cu_worker_free,
        cu_worker_emb,      cu_worker_d_emb, cu_worker_prob, cu_worker_train, cu_worker_grad,
        cu_nccl};
    return &a;
}
