/* The device trainer (gpu.h) written once over a small backend, included by
 * its two backends: gpu.cu (CUDA: streams, cuBLAS, kernels on the GPU) and
 * sim.c (the CPU simulation for tests: OpenBLAS column-major GEMMs, the same
 * kernel bodies in loops, every call done when it returns). What this file
 * holds, the step's buffer flow, GEMM arguments, the device copy and its
 * staging, is therefore run by the tests on every machine; only the backend
 * calls themselves need a GPU.
 *
 * Layouts are those of the CPU path (src/core/model.c): row-major
 * activations [n x width], weights [out x in] like torch.nn.Linear in the
 * same flat buffer. The BLAS is column-major (cuBLAS's meaning), so a
 * row-major [r x c] matrix is its [c x r] transpose: y = x W^T is gemm(T, N)
 * with m = out, dx = dy W is gemm(N, N) with m = in, dW = dy^T x is
 * gemm(N, T) with m = in, and the bias gradient is a gemv of dy against
 * ones. The SGD step is fused into the backward (dW, db accumulate
 * -lr * grad straight into the shared copy, after dx has read W), as on the
 * CPU; Adagrad makes the gradient first, then one elementwise pass.
 *
 * Before including it a backend defines the types be_stream (a queue of
 * work in order) and be_blas (a BLAS handle bound to a stream); it then
 * defines every be_* function declared below. */
#ifndef SHADOWSYNC_GPU_COMMON_H
#define SHADOWSYNC_GPU_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "kernels.h"

/* The library calls nothing of the executable's: its own fail and calloc. */
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

#define TRY(call)                                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

/* ---- the backend: each returns 0, or < 0 with e filled --------------------- */
enum { BE_H2D, BE_D2H, BE_D2D };
static int be_set_device(int dev, struct ss_err *e);
static int be_stream_create(be_stream *s, struct ss_err *e);
static void be_stream_destroy(be_stream s);
/* Until the stream's work is done; a long wait sleeps (a worker's core is the trainer's). */
static int be_wait(be_stream s, struct ss_err *e);
static int be_blas_create(be_blas *h, be_stream s, struct ss_err *e);
static void be_blas_destroy(be_blas h);
static int be_alloc(float **p, size_t bytes, struct ss_err *e);      /* device memory */
static int be_alloc_host(float **p, size_t bytes, struct ss_err *e); /* pinned host memory */
static void be_free(float *p);
static void be_free_host(float *p);
/* Pins memory the caller allocated (0), or leaves it pageable (-1). */
static int be_host_register(void *p, size_t bytes);
static void be_host_unregister(void *p);
/* Device dev's physical identity (its PCI bus id), as NCCL tells GPUs apart. */
static int be_device_key(int dev, char *out, size_t cap);
/* After a teardown: no error of it may fail a later call. */
static void be_forget_errors(void);
static int be_copy(float *dst, const float *src, size_t bytes, int kind, be_stream s,
                   struct ss_err *e);
/* C [m x n] = alpha op(A) op(B) + beta C, column-major; ta, tb: transpose. */
static int be_gemm(be_blas h, int ta, int tb, int m, int n, int k, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc,
                   struct ss_err *e);
/* y [m] = alpha A x + beta y, A [m x n] column-major. */
static int be_gemv(be_blas h, int m, int n, float alpha, const float *A, int lda, const float *x,
                   float beta, float *y, struct ss_err *e);
/* The kernels of kernels.h over their index spaces, queued on s. */
static int be_log1p_relu(be_stream s, const float *x, float *y, size_t n, struct ss_err *e);
static int be_bias_act(be_stream s, float *y, const float *b, size_t n, int out, int relu,
                       struct ss_err *e);
static int be_relu_bwd(be_stream s, float *dy, const float *y, size_t n, struct ss_err *e);
static int be_loss(be_stream s, const float *z, const float *label, float *prob, float *loss,
                   float *dy, int n, struct ss_err *e);
static int be_interact_fwd(be_stream s, const float *bot, const float *emb, float *top_in, int n,
                           int T, int d, int w, struct ss_err *e);
static int be_interact_bwd(be_stream s, const float *g, const float *bot, const float *emb,
                           float *d_bot, float *d_emb, int n, int T, int d, int w,
                           struct ss_err *e);
static int be_adagrad(be_stream s, float *w, float *state, const float *g, size_t n, float lr,
                      float eps, struct ss_err *e);
static int be_add(be_stream s, float *w, const float *delta, size_t n, struct ss_err *e);
static int be_fill(be_stream s, float *x, float v, size_t n, struct ss_err *e);

/* ---- the device copy ------------------------------------------------------- */
struct gpu_dense {
    int dev;
    struct model_layout l;      /* rows not kept */
    size_t n;
    float *w, *state, *delta;   /* device */
    be_stream st;               /* the shadow thread's (and checkpoints') stream */
    int has_st;
    pthread_mutex_t mu;         /* one staging transfer at a time */
};

static void cm_dense_free(struct gpu_dense *g)
{
    if (!g)
        return;
    be_set_device(g->dev, NULL);
    be_free(g->w);
    be_free(g->state);
    be_free(g->delta);
    if (g->has_st)
        be_stream_destroy(g->st);
    be_forget_errors();
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static int dense_alloc(struct gpu_dense *g, const float *w, const float *state, struct ss_err *e)
{
    size_t bytes = g->n * sizeof(float);
    TRY(be_set_device(g->dev, e));
    TRY(be_stream_create(&g->st, e));
    g->has_st = 1;
    TRY(be_alloc(&g->w, bytes, e));
    TRY(be_alloc(&g->state, bytes, e));
    TRY(be_alloc(&g->delta, bytes, e));
    TRY(be_copy(g->w, w, bytes, BE_H2D, g->st, e));
    TRY(be_copy(g->state, state, bytes, BE_H2D, g->st, e));
    return be_wait(g->st, e);
}

static int cm_dense_create(struct gpu_dense **out, const struct model_layout *l, int dev,
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
        cm_dense_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

static int dense_read(struct gpu_dense *g, float *w, float *state, struct ss_err *e)
{
    size_t bytes = g->n * sizeof(float);
    TRY(be_set_device(g->dev, e));
    if (w)
        TRY(be_copy(w, g->w, bytes, BE_D2H, g->st, e));
    if (state)
        TRY(be_copy(state, g->state, bytes, BE_D2H, g->st, e));
    return be_wait(g->st, e);
}

static int cm_dense_read(struct gpu_dense *g, float *w, float *state, struct ss_err *e)
{
    pthread_mutex_lock(&g->mu);
    int rc = dense_read(g, w, state, e);
    if (rc < 0) /* no copy left in flight on the caller's (pinned) buffers */
        be_wait(g->st, NULL);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int dense_add(struct gpu_dense *g, const float *delta, struct ss_err *e)
{
    TRY(be_set_device(g->dev, e));
    TRY(be_copy(g->delta, delta, g->n * sizeof(float), BE_H2D, g->st, e));
    TRY(be_add(g->st, g->w, g->delta, g->n, e));
    return be_wait(g->st, e);
}

static int cm_dense_add(struct gpu_dense *g, const float *delta, struct ss_err *e)
{
    pthread_mutex_lock(&g->mu);
    int rc = dense_add(g, delta, e);
    if (rc < 0)
        be_wait(g->st, NULL);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* ---- a worker --------------------------------------------------------------- */
struct gpu_worker {
    struct gpu_dense *g;        /* must outlive the worker */
    int dev, cap;
    be_stream st;
    be_blas h;
    int has_st, has_h;
    float *h_emb, *h_demb, *h_prob, *h_in; /* pinned: h_in = dense [cap*n_dense], labels [cap] */
    float *h_loss;
    float *x_raw, *x0, *label, *emb, *bot[SS_MAX_LAYERS], *top_in, *top[SS_MAX_LAYERS];
    float *prob, *loss, *d_a, *d_b, *d_top_in, *d_emb, *d_bot, *grad, *ones;
};

static int worker_alloc(struct gpu_worker *w, struct ss_err *e)
{
    const struct model_layout *l = &w->g->l;
    size_t n = w->cap, TD = (size_t)l->n_tables * l->dim, f = sizeof(float);
    TRY(be_set_device(w->dev, e));
    TRY(be_stream_create(&w->st, e));
    w->has_st = 1;
    TRY(be_blas_create(&w->h, w->st, e));
    w->has_h = 1;
    TRY(be_alloc_host(&w->h_emb, n * TD * f, e));
    TRY(be_alloc_host(&w->h_demb, n * TD * f, e));
    TRY(be_alloc_host(&w->h_prob, n * f, e));
    TRY(be_alloc_host(&w->h_loss, n * f, e));
    TRY(be_alloc_host(&w->h_in, n * (l->n_dense + 1) * f, e));
    TRY(be_alloc(&w->x_raw, n * (l->n_dense + 1) * f, e)); /* then the labels */
    w->label = w->x_raw + n * l->n_dense;
    TRY(be_alloc(&w->x0, n * l->n_dense * f, e));
    TRY(be_alloc(&w->emb, n * TD * f, e));
    for (int i = 0; i < l->n_bot; i++)
        TRY(be_alloc(&w->bot[i], n * l->bot[i + 1] * f, e));
    for (int i = 0; i < l->n_top; i++)
        TRY(be_alloc(&w->top[i], n * l->top[i + 1] * f, e));
    TRY(be_alloc(&w->top_in, n * l->top[0] * f, e));
    TRY(be_alloc(&w->prob, n * f, e));
    TRY(be_alloc(&w->loss, n * f, e));
    TRY(be_alloc(&w->d_a, n * model_widest(l) * f, e));
    TRY(be_alloc(&w->d_b, n * model_widest(l) * f, e));
    TRY(be_alloc(&w->d_top_in, n * l->top[0] * f, e));
    TRY(be_alloc(&w->d_emb, n * TD * f, e));
    TRY(be_alloc(&w->d_bot, n * l->dim * f, e));
    TRY(be_alloc(&w->grad, l->n_params * f, e));
    TRY(be_alloc(&w->ones, n * f, e));
    TRY(be_fill(w->st, w->ones, 1.0f, n, e));
    return be_wait(w->st, e);
}

static void cm_worker_free(struct gpu_worker *w)
{
    if (!w)
        return;
    be_set_device(w->dev, NULL);
    if (w->has_st)
        be_wait(w->st, NULL);
    float *dev[] = {w->x_raw, w->x0, w->emb, w->top_in, w->prob, w->loss, w->d_a, w->d_b,
                    w->d_top_in, w->d_emb, w->d_bot, w->grad, w->ones};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        be_free(dev[i]);
    for (int i = 0; i < SS_MAX_LAYERS; i++) {
        be_free(w->bot[i]);
        be_free(w->top[i]);
    }
    float *host[] = {w->h_emb, w->h_demb, w->h_prob, w->h_loss, w->h_in};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        be_free_host(host[i]);
    if (w->has_h)
        be_blas_destroy(w->h);
    if (w->has_st)
        be_stream_destroy(w->st);
    be_forget_errors();
    free(w);
}

static int cm_worker_create(struct gpu_worker **out, struct gpu_dense *g, int cap,
                            struct ss_err *e)
{
    struct gpu_worker *w = (struct gpu_worker *)xcalloc(1, sizeof *w);
    *out = NULL;
    w->g = g;
    w->dev = g->dev;
    w->cap = cap;
    int rc = worker_alloc(w, e);
    if (rc < 0) {
        cm_worker_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static float *cm_worker_emb(struct gpu_worker *w) { return w->h_emb; }
static float *cm_worker_d_emb(struct gpu_worker *w) { return w->h_demb; }
static float *cm_worker_prob(struct gpu_worker *w) { return w->h_prob; }

/* y [n x out] = x [n x in] W^T + b, ReLU unless last. */
static int linear_fwd(struct gpu_worker *w, const float *x, const float *W, const float *b,
                      float *y, int n, int in, int out, int relu, struct ss_err *e)
{
    TRY(be_gemm(w->h, 1, 0, out, n, in, 1.0f, W, in, x, in, 0.0f, y, out, e));
    return be_bias_act(w->st, y, b, (size_t)n * out, out, relu, e);
}

/* dx = dy W (when dx), then the weight and bias targets <- beta*target +
 * alpha*gradient, as linear_bwd of model.c. */
static int linear_bwd(struct gpu_worker *w, const float *x, const float *W, const float *dy,
                      float *tw, float *tb, float *dx, int n, int in, int out, float alpha,
                      float beta, struct ss_err *e)
{
    if (dx)
        TRY(be_gemm(w->h, 0, 0, in, n, out, 1.0f, W, in, dy, out, 0.0f, dx, in, e));
    TRY(be_gemm(w->h, 0, 1, in, out, n, alpha, x, in, dy, out, beta, tw, in, e));
    return be_gemv(w->h, out, n, alpha, dy, out, w->ones, beta, tb, e);
}

/* Up, forward, backward into target (alpha, beta as linear_bwd). */
static int step(struct gpu_worker *w, const struct batch *b, float *target, float alpha,
                float beta, struct ss_err *e)
{
    const struct model_layout *l = &w->g->l;
    const float *p = w->g->w;
    int n = b->n, T = l->n_tables, d = l->dim;
    if (n > w->cap)
        return fail(e, SS_EINVAL, "gpu: a batch of %d examples, the worker holds %d", n, w->cap);
    size_t nd = (size_t)n * l->n_dense, TD = (size_t)n * T * d, f = sizeof(float);
    TRY(be_set_device(w->dev, e));
    memcpy(w->h_in, b->dense, nd * f);
    memcpy(w->h_in + nd, b->label, n * f);
    TRY(be_copy(w->x_raw, w->h_in, nd * f, BE_H2D, w->st, e));
    TRY(be_copy(w->label, w->h_in + nd, n * f, BE_H2D, w->st, e));
    TRY(be_copy(w->emb, w->h_emb, TD * f, BE_H2D, w->st, e));
    if (nd)
        TRY(be_log1p_relu(w->st, w->x_raw, w->x0, nd, e));
    /* forward */
    const float *in = w->x0;
    for (int i = 0; i < l->n_bot; i++) {
        TRY(linear_fwd(w, in, p + l->bot_w[i], p + l->bot_b[i], w->bot[i], n, l->bot[i],
                       l->bot[i + 1], i < l->n_bot - 1, e));
        in = w->bot[i];
    }
    const float *bot_out = w->bot[l->n_bot - 1];
    TRY(be_interact_fwd(w->st, bot_out, w->emb, w->top_in, n, T, d, l->top[0], e));
    in = w->top_in;
    for (int i = 0; i < l->n_top; i++) {
        TRY(linear_fwd(w, in, p + l->top_w[i], p + l->top_b[i], w->top[i], n, l->top[i],
                       l->top[i + 1], i < l->n_top - 1, e));
        in = w->top[i];
    }
    float *dy = w->d_a, *dx = w->d_b;
    TRY(be_loss(w->st, w->top[l->n_top - 1], w->label, w->prob, w->loss, dy, n, e));
    /* backward */
    for (int i = l->n_top - 1; i >= 0; i--) {
        const float *x = i ? w->top[i - 1] : w->top_in;
        TRY(linear_bwd(w, x, p + l->top_w[i], dy, target + l->top_w[i], target + l->top_b[i],
                       i ? dx : w->d_top_in, n, l->top[i], l->top[i + 1], alpha, beta, e));
        if (i) {
            TRY(be_relu_bwd(w->st, dx, w->top[i - 1], (size_t)n * l->top[i], e));
            float *t = dy;
            dy = dx, dx = t;
        }
    }
    TRY(be_interact_bwd(w->st, w->d_top_in, bot_out, w->emb, w->d_bot, w->d_emb, n, T, d,
                        l->top[0], e));
    TRY(be_copy(dy, w->d_bot, (size_t)n * d * f, BE_D2D, w->st, e));
    for (int i = l->n_bot - 1; i >= 0; i--) {
        const float *x = i ? w->bot[i - 1] : w->x0;
        TRY(linear_bwd(w, x, p + l->bot_w[i], dy, target + l->bot_w[i], target + l->bot_b[i],
                       i ? dx : NULL, n, l->bot[i], l->bot[i + 1], alpha, beta, e));
        if (i) {
            TRY(be_relu_bwd(w->st, dx, w->bot[i - 1], (size_t)n * l->bot[i], e));
            float *t = dy;
            dy = dx, dx = t;
        }
    }
    return 0;
}

/* The probabilities and embedding gradients back to the host (the losses
 * only for worker_grad: training scores from the probabilities). */
static int download(struct gpu_worker *w, int n, struct ss_err *e)
{
    const struct model_layout *l = &w->g->l;
    size_t f = sizeof(float), TD = (size_t)n * l->n_tables * l->dim;
    TRY(be_copy(w->h_prob, w->prob, n * f, BE_D2H, w->st, e));
    return be_copy(w->h_demb, w->d_emb, TD * f, BE_D2H, w->st, e);
}

static int worker_train(struct gpu_worker *w, const struct batch *b, int opt, float lr, float eps,
                        struct ss_err *e)
{
    struct gpu_dense *g = w->g;
    if (b->n == 0)
        return 0;
    if (opt == OPT_ADAGRAD) {
        TRY(step(w, b, w->grad, 1.0f, 0.0f, e));
        TRY(be_adagrad(w->st, g->w, g->state, w->grad, g->n, lr, eps, e));
    } else {
        TRY(step(w, b, g->w, -lr, 1.0f, e));
    }
    TRY(download(w, b->n, e));
    return be_wait(w->st, e);
}

static int worker_grad(struct gpu_worker *w, const struct batch *b, float *grad, double *loss,
                       struct ss_err *e)
{
    *loss = 0.0;
    if (b->n == 0) {
        memset(grad, 0, w->g->n * sizeof(float));
        return 0;
    }
    TRY(step(w, b, w->grad, 1.0f, 0.0f, e));
    TRY(download(w, b->n, e));
    TRY(be_copy(w->h_loss, w->loss, b->n * sizeof(float), BE_D2H, w->st, e));
    TRY(be_copy(grad, w->grad, w->g->n * sizeof(float), BE_D2H, w->st, e));
    TRY(be_wait(w->st, e));
    double s = 0;
    for (int i = 0; i < b->n; i++)
        s += w->h_loss[i];
    *loss = s / b->n;
    return 0;
}

/* A step that fails part way leaves copies queued that read and write the
 * pinned buffers: they end before the caller may touch those again. */
static int cm_worker_train(struct gpu_worker *w, const struct batch *b, int opt, float lr,
                           float eps, struct ss_err *e)
{
    int rc = worker_train(w, b, opt, lr, eps, e);
    if (rc < 0)
        be_wait(w->st, NULL);
    return rc;
}

static int cm_worker_grad(struct gpu_worker *w, const struct batch *b, float *grad, double *loss,
                          struct ss_err *e)
{
    int rc = worker_grad(w, b, grad, loss, e);
    if (rc < 0)
        be_wait(w->st, NULL);
    return rc;
}

/* The entry table, with the backend's own build_info, probe and nccl
 * (filled on each call: the loader makes the one call, under pthread_once). */
static const struct gpu_api *api_table(const char *(*build_info)(void),
                                       int (*probe)(char *, size_t),
                                       struct collective *(*nccl)(MPI_Comm, int, const struct peer_wait *,
                                                             struct ss_err *))
{
    static struct gpu_api a;
    a.version = SS_GPU_API_VERSION;
    a.build_info = build_info;
    a.probe = probe;
    a.dense_create = cm_dense_create;
    a.dense_free = cm_dense_free;
    a.dense_read = cm_dense_read;
    a.dense_add = cm_dense_add;
    a.worker_create = cm_worker_create;
    a.worker_free = cm_worker_free;
    a.worker_emb = cm_worker_emb;
    a.worker_d_emb = cm_worker_d_emb;
    a.worker_prob = cm_worker_prob;
    a.worker_train = cm_worker_train;
    a.worker_grad = cm_worker_grad;
    a.nccl = nccl;
    a.host_register = be_host_register;
    a.host_unregister = be_host_unregister;
    a.device_key = be_device_key;
    return &a;
}

#endif
