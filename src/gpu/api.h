/* The CUDA trainer's entry points as one table, the only symbol that
 * libshadowsync_gpu.so exports (shadowsync_gpu_api). loader.c dlopens the
 * library on first use, so a process that never touches a GPU (a CPU
 * trainer, a PS, a reader, a CPU-only node) never loads CUDA, cuBLAS or
 * NCCL: they cost ~0.2 GB and ~0.15 s a process just to map. The meaning
 * of each entry: the function of the same name in shadowsync/gpu.h. */
#ifndef SHADOWSYNC_GPU_API_H
#define SHADOWSYNC_GPU_API_H

#include "shadowsync/gpu.h"

#define SS_GPU_API_VERSION 4
#define SS_GPU_LIB "libshadowsync_gpu.so"

struct gpu_api {
    int version;                /* SS_GPU_API_VERSION: a stale library is refused */
    const char *(*build_info)(void);
    int (*probe)(char *why, size_t cap);
    int (*dense_create)(struct gpu_dense **out, const struct model_layout *l, int dev,
                        const float *w, const float *state, struct ss_err *e);
    void (*dense_free)(struct gpu_dense *g);
    int (*dense_read)(struct gpu_dense *g, float *w, float *state, struct ss_err *e);
    int (*dense_add)(struct gpu_dense *g, const float *delta, struct ss_err *e);
    int (*worker_create)(struct gpu_worker **out, struct gpu_dense *g, int cap, struct ss_err *e);
    void (*worker_free)(struct gpu_worker *w);
    float *(*worker_emb)(struct gpu_worker *w);
    float *(*worker_d_emb)(struct gpu_worker *w);
    float *(*worker_prob)(struct gpu_worker *w);
    int (*worker_train)(struct gpu_worker *w, const struct batch *b, int opt, float lr, float eps,
                        struct ss_err *e);
    int (*worker_grad)(struct gpu_worker *w, const struct batch *b, float *grad, double *loss,
                       struct ss_err *e);
    struct collective *(*nccl)(MPI_Comm comm, int dev, const struct peer_wait *pw,
                               struct ss_err *e);
    int (*host_register)(void *p, size_t bytes);
    void (*host_unregister)(void *p);
    int (*device_key)(int dev, char *out, size_t cap);
};

#ifdef __cplusplus
extern "C"
#endif
const struct gpu_api *shadowsync_gpu_api(void);

#endif
