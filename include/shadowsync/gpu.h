/* shadowsync gpu: the dense half of a trainer on a CUDA device (DESIGN §6).
 *
 * With trainer.device = cuda a trainer keeps ONE device copy of its dense
 * buffer and optimizer state (struct gpu_dense); each of its worker threads
 * has a struct gpu_worker: its own stream and cuBLAS handle, device scratch
 * for one batch, and pinned host buffers that the embedding lookup writes
 * the pooled vectors into and the push reads their gradients from. A batch
 * goes up (dense features, labels, pooled embeddings), the bottom and top
 * MLPs, the interaction, the loss and the dense optimizer run on the device
 * (cuBLAS GEMMs, small kernels), Hogwild on the shared copy, and the
 * probabilities and embedding gradients come back. The shadow thread syncs
 * through a host staging copy: gpu_dense_read before a round, gpu_dense_add
 * of the round's change after it, so worker steps taken meanwhile are kept.
 *
 * Built from src/gpu/gpu.cu into libshadowsync_gpu.so when nvcc and NCCL
 * are found (sm_80, sm_90), and opened on first use by src/gpu/loader.c;
 * without it gpu_probe says why there is no GPU and everything else fails
 * with that message. */
#ifndef SHADOWSYNC_GPU_H
#define SHADOWSYNC_GPU_H

#include "shadow.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What this build has, for --version: "CUDA 13.0, cuBLAS, NCCL 2.28 ..." or "none ...". */
const char *gpu_build_info(void);
/* Usable devices (0 when none or no GPU support); why[] gets device 0's name
 * or the reason there is none. */
int gpu_probe(char *why, size_t cap);

struct gpu_dense;
/* A device copy of n_params floats of w and state on device dev. */
int gpu_dense_create(struct gpu_dense **out, const struct model_layout *l, int dev, const float *w,
                     const float *state, struct ss_err *e);
void gpu_dense_free(struct gpu_dense *g);
/* Device -> host (either may be NULL): the staging copy, checkpoints, the model. */
int gpu_dense_read(struct gpu_dense *g, float *w, float *state, struct ss_err *e);
/* Device w += delta[0..n_params), from the host. */
int gpu_dense_add(struct gpu_dense *g, const float *delta, struct ss_err *e);

/* Device dev's physical identity (its PCI bus id, whatever CUDA_VISIBLE_DEVICES
 * numbers it), which NCCL tells GPUs apart by: 0, or -1 without one. */
int gpu_device_key(int dev, char *out, size_t cap);
/* Page-locks host memory the caller allocated, so copies to and from it
 * run at the bus's speed (the staging copy): 0, or -1 when it stays
 * pageable (no library, or a locked-memory limit). Undo before freeing it. */
int gpu_host_register(void *p, size_t bytes);
void gpu_host_unregister(void *p);

struct gpu_worker;
/* A worker of up to cap examples a batch, on g's device; call from any
 * thread. Free every worker of g before g. */
int gpu_worker_create(struct gpu_worker **out, struct gpu_dense *g, int cap, struct ss_err *e);
void gpu_worker_free(struct gpu_worker *w);
/* Its pinned host buffers: the pooled embeddings [cap*T*dim] the lookup
 * fills, their gradients [cap*T*dim] and the probabilities [cap] a step
 * leaves. */
float *gpu_worker_emb(struct gpu_worker *w);
float *gpu_worker_d_emb(struct gpu_worker *w);
float *gpu_worker_prob(struct gpu_worker *w);
/* One batch with the pooled embeddings in gpu_worker_emb: forward, backward
 * and the dense step (opt: OPT_SGD | OPT_ADAGRAD, lr, eps) on the device
 * copy; gpu_worker_prob and gpu_worker_d_emb filled. */
int gpu_worker_train(struct gpu_worker *w, const struct batch *b, int opt, float lr, float eps,
                     struct ss_err *e);
/* The same without the step (parity tests): the mean loss, and the dense
 * gradient into grad[n_params]. */
int gpu_worker_grad(struct gpu_worker *w, const struct batch *b, float *grad, double *loss,
                    struct ss_err *e);

/* An all-reduce among GPU trainers over NCCL: the communicator is made from
 * a unique id broadcast over comm (collective over comm); the sum runs on
 * its own stream through a device staging buffer; a round that waits past
 * pw->timeout_s ends the job (peer_stalled); ops->abort frees it without
 * waiting on the other members.
 * NULL with e filled when it cannot be made. */
struct collective *collective_nccl(MPI_Comm comm, int dev, const struct peer_wait *pw,
                                   struct ss_err *e);

#ifdef __cplusplus
}
#endif
#endif
