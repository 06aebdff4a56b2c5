/* gpu.h for the rest of shadowsync: forwards each call to the CUDA trainer
 * in libshadowsync_gpu.so (src/gpu/gpu.cu, see api.h), loaded on first use
 * from beside the executable (or its parent directory, for build/tests/),
 * or from $SS_GPU_LIB (in every build: the tests name the CPU simulation,
 * libshadowsync_gpusim.so, there). A build without CUDA (SS_GPU unset:
 * nvcc or NCCL not found, or GPU=0) has no library of its own; then, as
 * when it cannot be loaded, gpu_probe says why and every other call fails
 * with that message. */
#include "api.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const struct gpu_api *api;
static char why_not[1024];

#ifdef SS_GPU
static void *open_beside_exe(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = 0;
    const char *fmt[] = {"%s/" SS_GPU_LIB, "%s/../" SS_GPU_LIB};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, fmt[i], exe);
        if (access(path, F_OK) == 0)
            return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    return NULL;
}
#endif

static void load(void)
{
    const char *env = getenv("SS_GPU_LIB");
    int named = env && *env;
#ifdef SS_GPU
    void *h = named ? dlopen(env, RTLD_NOW | RTLD_LOCAL) : open_beside_exe();
#else
    if (!named) {
        snprintf(why_not, sizeof why_not,
                 "this build has no GPU support (built without CUDA: nvcc or NCCL not found, or GPU=0)");
        return;
    }
    void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) {
        const char *err = dlerror();
        snprintf(why_not, sizeof why_not, "cannot load %s (%s): %s%s", named ? env : SS_GPU_LIB,
                 named ? "$SS_GPU_LIB" : "beside the executable", err ? err : "not found",
                 named ? "" : " (`make` builds it there)");
        return;
    }
    const struct gpu_api *(*get)(void) = (const struct gpu_api *(*)(void))dlsym(h, "shadowsync_gpu_api");
    const struct gpu_api *a = get ? get() : NULL;
    if (!a || a->version != SS_GPU_API_VERSION) {
        snprintf(why_not, sizeof why_not, "%s is not this build's (interface %d, expected %d)",
                 named ? env : SS_GPU_LIB, a ? a->version : -1, SS_GPU_API_VERSION);
        return;
    }
    api = a;
}

static const struct gpu_api *get(void)
{
    pthread_once(&once, load);
    return api;
}

#define CALL(fn, ...)                                                                              \
    do {                                                                                           \
        const struct gpu_api *a_ = get();                                                          \
        if (!a_)                                                                                   \
            return ss_fail(e, SS_EINVAL, "%s", why_not);                                           \
        return a_->fn(__VA_ARGS__);                                                                \
    } while (0)

const char *gpu_build_info(void)
{
    static char s[1100];
    const struct gpu_api *a = get();
    if (a)
        return a->build_info();
#ifdef SS_GPU
    snprintf(s, sizeof s, "built with CUDA, but %s", why_not);
#else
    snprintf(s, sizeof s, "none (built without CUDA: nvcc or NCCL not found, or GPU=0)");
#endif
    return s;
}

int gpu_probe(char *why, size_t cap)
{
    const struct gpu_api *a = get();
    if (a)
        return a->probe(why, cap);
    snprintf(why, cap, "%s", why_not);
    return 0;
}

int gpu_dense_create(struct gpu_dense **out, const struct model_layout *l, int dev, const float *w,
                     const float *state, struct ss_err *e)
{
    *out = NULL;
    CALL(dense_create, out, l, dev, w, state, e);
}

void gpu_dense_free(struct gpu_dense *g)
{
    if (g)
        get()->dense_free(g);
}

int gpu_dense_read(struct gpu_dense *g, float *w, float *state, struct ss_err *e)
{
    CALL(dense_read, g, w, state, e);
}

int gpu_dense_add(struct gpu_dense *g, const float *delta, struct ss_err *e)
{
    CALL(dense_add, g, delta, e);
}

int gpu_worker_create(struct gpu_worker **out, struct gpu_dense *g, int cap, struct ss_err *e)
{
    *out = NULL;
    CALL(worker_create, out, g, cap, e);
}

void gpu_worker_free(struct gpu_worker *w)
{
    if (w)
        get()->worker_free(w);
}

/* a worker exists only where the library loaded */
float *gpu_worker_emb(struct gpu_worker *w) { return get()->worker_emb(w); }
float *gpu_worker_d_emb(struct gpu_worker *w) { return get()->worker_d_emb(w); }
float *gpu_worker_prob(struct gpu_worker *w) { return get()->worker_prob(w); }

int gpu_worker_train(struct gpu_worker *w, const struct batch *b, int opt, float lr, float eps,
                     struct ss_err *e)
{
    CALL(worker_train, w, b, opt, lr, eps, e);
}

int gpu_worker_grad(struct gpu_worker *w, const struct batch *b, float *grad, double *loss,
                    struct ss_err *e)
{
    CALL(worker_grad, w, b, grad, loss, e);
}

int gpu_host_register(void *p, size_t bytes)
{
    const struct gpu_api *a = get();
    return a ? a->host_register(p, bytes) : -1;
}

int gpu_device_key(int dev, char *out, size_t cap)
{
    const struct gpu_api *a = get();
    return a ? a->device_key(dev, out, cap) : -1;
}

void gpu_host_unregister(void *p)
{
    if (p && get())
        get()->host_unregister(p);
}

struct collective *collective_nccl(MPI_Comm comm, int dev, const struct peer_wait *pw,
                                   struct ss_err *e)
{
    const struct gpu_api *a = get();
    if (!a) {
        ss_fail(e, SS_EINVAL, "%s", why_not);
        return NULL;
    }
    return a->nccl(comm, dev, pw, e);
}
