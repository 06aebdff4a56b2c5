/* The CUDA backend of the device trainer (DESIGN §6; the trainer itself in
 * common.h, its interface in gpu.h), built into libshadowsync_gpu.so and
 * reached through the table of api.h: streams, cuBLAS in plain FP32 (no
 * TF32, so the CPU path is matched to float rounding), the kernel bodies of
 * kernels.h launched over grids, and the trainers' all-reduce (MA, BMUF, allreduce) over NCCL. Waits
 * poll the stream, then sleep between polls, instead of blocking in the
 * driver's spin. */
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <time.h>

typedef cudaStream_t be_stream;
typedef cublasHandle_t be_blas;
#include "common.h"

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) { /* cleared, so a later launch check is not blamed */          \
            (void)cudaGetLastError();                                                              \
            return fail(e, SS_EIO, "CUDA: %s (%s, %s:%d)", cudaGetErrorString(err_), #call,    \
                           __FILE__, __LINE__);                                                    \
        }                                                                                          \
    } while (0)
#define CB(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) { /* a launch it failed in: not blamed on the next */  \
            (void)cudaGetLastError();                                                              \
            return fail(e, SS_EIO, "cuBLAS: %s (%s:%d)", cublasGetStatusString(st_), __FILE__,  \
                           __LINE__);                                                              \
        }                                                                                          \
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
    /* every device, as trainers spread over them all: one a trainer cannot
     * run on ends the GPU path here, by name, not at its first kernel */
    cudaDeviceProp p;
    for (int d = n - 1; d >= 0; d--) {
        if ((err = cudaGetDeviceProperties(&p, d)) != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(why, cap, "no usable CUDA device (cudaGetDeviceProperties(%d): %s)", d,
                     cudaGetErrorString(err));
            return 0;
        }
        if (p.major < 8) {
            snprintf(why, cap, "device %d, %s, is sm_%d%d; this build has code for sm_80 and "
                     "newer", d, p.name, p.major, p.minor);
            return 0;
        }
        int mode = cudaComputeModeDefault;
        if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, d) == cudaSuccess &&
            mode == cudaComputeModeProhibited) {
            snprintf(why, cap, "device %d, %s, is in compute mode Prohibited (nvidia-smi -c)",
                     d, p.name);
            return 0;
        }
    }
    /* what this process loaded, which may not be what the build saw (a wheel's NCCL, say) */
    int drv = 0, blas_major = 0, blas_minor = 0, blas_patch = 0, nccl = 0;
    cudaDriverGetVersion(&drv);
    cublasGetProperty(MAJOR_VERSION, &blas_major);
    cublasGetProperty(MINOR_VERSION, &blas_minor);
    cublasGetProperty(PATCH_LEVEL, &blas_patch);
    ncclGetVersion(&nccl);
    snprintf(why, cap, "%d x %s (sm_%d%d, %.0f GiB); driver CUDA %d.%d, cuBLAS %d.%d.%d, "
             "NCCL %d.%d.%d loaded", n, p.name, p.major, p.minor,
             p.totalGlobalMem / 1073741824.0, drv / 1000, drv % 1000 / 10, blas_major, blas_minor,
             blas_patch, nccl / 10000, nccl / 100 % 100, nccl % 100);
    return n;
}

/* ---- streams, memory, BLAS ------------------------------------------------- */
static int be_set_device(int dev, struct ss_err *e)
{
    CU(cudaSetDevice(dev));
    return 0;
}

static int be_stream_create(be_stream *s, struct ss_err *e)
{
    CU(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    return 0;
}

static void be_stream_destroy(be_stream s) { cudaStreamDestroy(s); }

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Polls for the first 200 us (a step's tail: a sleep's timer slack alone
 * is ~50 us), then with short sleeps, so a long wait costs no core. */
static cudaError_t stream_wait(cudaStream_t s)
{
    const struct timespec nap = {0, 20000};
    double t0 = now_s();
    cudaError_t err;
    while ((err = cudaStreamQuery(s)) == cudaErrorNotReady)
        if (now_s() - t0 > 200e-6)
            nanosleep(&nap, NULL);
    if (err == cudaSuccess) /* launches are checked where made: leave no NotReady behind */
        (void)cudaGetLastError();
    return err;
}

static int be_wait(be_stream s, struct ss_err *e)
{
    CU(stream_wait(s));
    return 0;
}

static int be_blas_create(be_blas *h, be_stream s, struct ss_err *e)
{
    CB(cublasCreate(h));
    cublasStatus_t st = cublasSetStream(*h, s);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetMathMode(*h, CUBLAS_DEFAULT_MATH);
    if (st != CUBLAS_STATUS_SUCCESS) { /* the handle is made: the caller frees only whole ones */
        cublasDestroy(*h);
        CB(st);
    }
    return 0;
}

static void be_blas_destroy(be_blas h) { cublasDestroy(h); }

static int be_alloc(float **p, size_t bytes, struct ss_err *e)
{
    CU(cudaMalloc(p, bytes));
    return 0;
}

static int be_alloc_host(float **p, size_t bytes, struct ss_err *e)
{
    CU(cudaMallocHost(p, bytes));
    return 0;
}

static void be_free(float *p) { cudaFree(p); }
static void be_free_host(float *p) { cudaFreeHost(p); }

/* Portable: any thread's device may copy from it. A failure (a locked-memory
 * limit) leaves the memory pageable and clears the error. */
static int be_host_register(void *p, size_t bytes)
{
    if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return -1;
}

static void be_host_unregister(void *p)
{
    cudaHostUnregister(p);
    (void)cudaGetLastError();
}
static void be_forget_errors(void) { (void)cudaGetLastError(); }

static int be_device_key(int dev, char *out, size_t cap)
{
    if (cudaDeviceGetPCIBusId(out, (int)cap, dev) == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return -1;
}

static int be_copy(float *dst, const float *src, size_t bytes, int kind, be_stream s,
                   struct ss_err *e)
{
    static const cudaMemcpyKind k[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                       cudaMemcpyDeviceToDevice};
    CU(cudaMemcpyAsync(dst, src, bytes, k[kind], s));
    return 0;
}

static int be_gemm(be_blas h, int ta, int tb, int m, int n, int k, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc,
                   struct ss_err *e)
{
    CB(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                   &alpha, A, lda, B, ldb, &beta, C, ldc));
    return 0;
}

static int be_gemv(be_blas h, int m, int n, float alpha, const float *A, int lda, const float *x,
                   float beta, float *y, struct ss_err *e)
{
    CB(cublasSgemv(h, CUBLAS_OP_N, m, n, &alpha, A, lda, x, 1, &beta, y, 1));
    return 0;
}

/* ---- kernels: the bodies of kernels.h over a grid --------------------------- */
static unsigned blocks(size_t n, unsigned t)
{
    size_t b = (n + t - 1) / t;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

/* An elementwise kernel's loop: i < n, grid-stride. */
#define GRID_LOOP(n)                                                                               \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)
/* Launches kernel over grid blocks of threads (none for an empty grid: CUDA
 * refuses one), returns. */
#define LAUNCH_GRID(kernel, s, grid, threads, ...)                                                 \
    do {                                                                                           \
        if ((grid) == 0)                                                                           \
            return 0;                                                                              \
        kernel<<<grid, threads, 0, s>>>(__VA_ARGS__);                                              \
        CU(cudaGetLastError());                                                                    \
        return 0;                                                                                  \
    } while (0)
/* An elementwise kernel over n. */
#define LAUNCH(kernel, s, n, ...) LAUNCH_GRID(kernel, s, blocks(n, 256), 256, __VA_ARGS__)

__global__ void k_log1p_relu(const float *x, float *y, size_t n) { GRID_LOOP(n) kb_log1p_relu(x, y, i); }
__global__ void k_bias_act(float *y, const float *b, size_t n, int out, int relu)
{
    GRID_LOOP(n) kb_bias_act(y, b, out, relu, i);
}
__global__ void k_relu_bwd(float *dy, const float *y, size_t n) { GRID_LOOP(n) kb_relu_bwd(dy, y, i); }
__global__ void k_adagrad(float *w, float *state, const float *g, size_t n, float lr, float eps)
{
    GRID_LOOP(n) kb_adagrad(w, state, g, lr, eps, i);
}
__global__ void k_add(float *w, const float *delta, size_t n) { GRID_LOOP(n) kb_add(w, delta, i); }
__global__ void k_fill(float *x, float v, size_t n) { GRID_LOOP(n) kb_fill(x, v, i); }

__global__ void k_loss(const float *z, const float *label, float *prob, float *loss, float *dy,
                       int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        kb_loss(z, label, prob, loss, dy, n, i);
}

/* One block an example, its threads over the outputs. */
__global__ void k_interact_fwd(const float *bot, const float *emb, float *top_in, int T, int d,
                               int w)
{
    int outs = d + (T + 1) * T / 2;
    for (int k = threadIdx.x; k < outs; k += blockDim.x)
        kb_interact_fwd(bot, emb, top_in, T, d, w, blockIdx.x, k);
}

__global__ void k_interact_bwd(const float *g, const float *bot, const float *emb, float *d_bot,
                               float *d_emb, int T, int d, int w)
{
    for (int idx = threadIdx.x; idx < (T + 1) * d; idx += blockDim.x)
        kb_interact_bwd(g, bot, emb, d_bot, d_emb, T, d, w, blockIdx.x, idx);
}

static int be_log1p_relu(be_stream s, const float *x, float *y, size_t n, struct ss_err *e)
{
    LAUNCH(k_log1p_relu, s, n, x, y, n);
}

static int be_bias_act(be_stream s, float *y, const float *b, size_t n, int out, int relu,
                       struct ss_err *e)
{
    LAUNCH(k_bias_act, s, n, y, b, n, out, relu);
}

static int be_relu_bwd(be_stream s, float *dy, const float *y, size_t n, struct ss_err *e)
{
    LAUNCH(k_relu_bwd, s, n, dy, y, n);
}

static int be_adagrad(be_stream s, float *w, float *state, const float *g, size_t n, float lr,
                      float eps, struct ss_err *e)
{
    LAUNCH(k_adagrad, s, n, w, state, g, n, lr, eps);
}

static int be_add(be_stream s, float *w, const float *delta, size_t n, struct ss_err *e)
{
    LAUNCH(k_add, s, n, w, delta, n);
}

static int be_fill(be_stream s, float *x, float v, size_t n, struct ss_err *e)
{
    LAUNCH(k_fill, s, n, x, v, n);
}

static int be_loss(be_stream s, const float *z, const float *label, float *prob, float *loss,
                   float *dy, int n, struct ss_err *e)
{
    LAUNCH_GRID(k_loss, s, (n + 127) / 128, 128, z, label, prob, loss, dy, n);
}

static int be_interact_fwd(be_stream s, const float *bot, const float *emb, float *top_in, int n,
                           int T, int d, int w, struct ss_err *e)
{
    LAUNCH_GRID(k_interact_fwd, s, n, 128, bot, emb, top_in, T, d, w);
}

static int be_interact_bwd(be_stream s, const float *g, const float *bot, const float *emb,
                           float *d_bot, float *d_emb, int n, int T, int d, int w,
                           struct ss_err *e)
{
    LAUNCH_GRID(k_interact_bwd, s, n, 128, g, bot, emb, d_bot, d_emb, T, d, w);
}

/* ---- NCCL all-reduce ------------------------------------------------------ */
struct nccl_impl {
    ncclComm_t comm;            /* NULL once a round failed: aborted */
    cudaStream_t st;
    float *buf;                 /* the sum on the device */
    float *hbuf;                /* pinned: a copy into pageable memory would block until the
                                   sum is done, and a lost peer would hang it */
    size_t max;
    int dev;
    struct peer_wait pw;        /* past pw.timeout_s a round ends the job (peer_stalled) */
    char broken[320];           /* the failed round's error, which every later one repeats */
};

/* A round failed: the communicator is aborted at once (its kernel stopped,
 * so neither a later round nor the teardown's cudaFree waits on a peer that
 * will not come), and the first error stays the one every later round gives. */
static int nccl_broke(struct collective *c, struct ss_err *e, const char *what, const char *why)
{
    struct nccl_impl *x = (struct nccl_impl *)c->impl;
    if (x->comm) {
        ncclCommAbort(x->comm);
        x->comm = NULL;
        snprintf(x->broken, sizeof x->broken, "%s on trainer %d of %d: %s", what, c->rank,
                 c->size, why);
    }
    (void)cudaGetLastError();
    return fail(e, SS_EIO, "%s", x->broken);
}

#define NCU(call)                                                                                  \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            return nccl_broke(c, e, "CUDA in an NCCL round (" #call ")",                          \
                              cudaGetErrorString(err_));                                           \
    } while (0)

static int nccl_sum(struct collective *c, float *buf, size_t n, struct ss_err *e)
{
    struct nccl_impl *x = (struct nccl_impl *)c->impl;
    if (!x->comm)
        return fail(e, SS_EIO, "%s (an earlier round)", x->broken);
    CU(cudaSetDevice(x->dev));
    if (n > x->max) { /* the first round sizes it; nothing of NCCL's is in flight */
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
    NCU(cudaMemcpyAsync(x->buf, x->hbuf, n * sizeof(float), cudaMemcpyHostToDevice, x->st));
    ncclResult_t r = ncclAllReduce(x->buf, x->buf, n, ncclFloat, ncclSum, x->comm, x->st);
    if (r != ncclSuccess)
        return nccl_broke(c, e, "ncclAllReduce", ncclGetErrorString(r));
    NCU(cudaMemcpyAsync(x->hbuf, x->buf, n * sizeof(float), cudaMemcpyDeviceToHost, x->st));
    /* as stream_wait, but a peer lost mid-sum ends the wait with an error, not a hang */
    const struct timespec nap = {0, 20000};
    double deadline = x->pw.timeout_s > 0 ? now_s() + x->pw.timeout_s : 0;
    cudaError_t err;
    for (int i = 1; (err = cudaStreamQuery(x->st)) == cudaErrorNotReady; i++) {
        if (deadline && (i & 255) == 0 && __atomic_load_n(&c->idle, __ATOMIC_RELAXED))
            deadline = now_s() + x->pw.timeout_s; /* joined for the others: it starts later */
        else if (deadline && (i & 255) == 0 && now_s() > deadline) /* a peer that stalls, alive: */
            peer_stalled(&x->pw, "the trainers' NCCL all-reduce (a sync round)", x->pw.others);
            /* (MPI_Abort ends the kernel with the process; an ncclCommAbort first could
             * block, NVIDIA/nccl#863, before the message is out) */
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(x->comm, &async) == ncclSuccess && async != ncclSuccess)
            return nccl_broke(c, e, "NCCL all-reduce", ncclGetErrorString(async));
        nanosleep(&nap, NULL);
    }
    NCU(err);
    (void)cudaGetLastError(); /* the polls' cudaErrorNotReady */
    memcpy(buf, x->hbuf, n * sizeof(float));
    return 0;
}
#undef NCU

/* ncclCommDestroy finalizes, waiting for every peer's own; a peer that
 * aborted or never made its communicator would hold it for ever, so a
 * start that failed on some trainer frees with ncclCommAbort. */
static void nccl_release(struct collective *c, int abort)
{
    struct nccl_impl *x = (struct nccl_impl *)c->impl;
    cudaSetDevice(x->dev);
    if (x->comm)
        (abort ? ncclCommAbort : ncclCommDestroy)(x->comm);
    cudaFree(x->buf);
    cudaFreeHost(x->hbuf);
    cudaStreamDestroy(x->st);
    free(x);
    free(c);
}

static void nccl_free(struct collective *c)
{
    nccl_release(c, 0);
}

static void nccl_abort(struct collective *c)
{
    nccl_release(c, 1);
}

static const struct collective_ops nccl_ops = {"nccl", nccl_sum, nccl_free, nccl_abort};

/* The stream and a first buffer: a failure here is agreed on before any
 * rank enters an NCCL call that would wait on this one. */
static int device_setup(struct nccl_impl *x, struct ss_err *e)
{
    CU(cudaSetDevice(x->dev));
    CU(cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking));
    CU(cudaMalloc(&x->buf, sizeof(float)));
    CU(cudaMallocHost(&x->hbuf, sizeof(float)));
    x->max = 1;
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

static struct collective *cu_nccl(MPI_Comm comm, int dev, const struct peer_wait *pw,
                                  struct ss_err *e)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    struct nccl_impl *x = (struct nccl_impl *)xcalloc(1, sizeof *x);
    x->dev = dev;
    if (pw)
        x->pw = *pw;
    if (nccl_init(x, comm, rank, size, e) < 0) {
        cudaFree(x->buf);
        cudaFreeHost(x->hbuf);
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
    return api_table(cu_build_info, cu_probe, cu_nccl);
}
