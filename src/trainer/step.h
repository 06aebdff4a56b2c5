/* One training step of a worker, apart from the run around it: the worker
 * loop (step.c) calls it once per batch, and tests/test_step.c drives it
 * with an embedding client of its own. The CPU/GPU and optimizer variants
 * of the dense half are behind it. */
#ifndef SS_TRAINER_STEP_H
#define SS_TRAINER_STEP_H

#include "shadowsync/gpu.h"
#include "shadowsync/trainer.h"

struct step {
    const struct model_layout *l;
    int opt;                    /* optim.dense (OPT_*) */
    float eps;                  /* its epsilon */
    float *w, *state;           /* the trainer's dense buffer and optimizer state (Hogwild) */
    struct gpu_worker *gw;      /* the dense half on a GPU (NULL: the CPU); its owner frees it */
    struct model_scratch s;     /* the CPU's activations and gradients */
    float *emb, *d_emb;         /* the pooled rows and their gradients: the scratch's, or the
                                 * device worker's pinned buffers */
    const float *prob;          /* the forward's predictions */
    int64_t examples;           /* stepped so far */
    const char *advice;         /* what to change when the model diverges */
};

/* A step on the trainer's w and state (gpu: its device copy, NULL: the
 * CPU) for batches of up to cap examples. */
int step_init(struct step *st, const struct model_layout *l, int opt, float eps, float *w,
              float *state, struct gpu_dense *gpu, int cap, struct ss_err *e);
void step_free(struct step *st);
/* Batch b at dense rate `rate`: lookup through emb, forward (scored into
 * *scored before it is trained on), backward and dense step, push of the
 * rows' gradients. t[0..2] get the times after the lookup, the dense half
 * and the push. A forward whose loss is not finite fails (the model
 * diverged) before anything is trained. */
int step_train(struct step *st, struct emb_client *emb, struct batch *b, float rate,
               struct ne_acc *scored, double t[3], struct ss_err *e);

#endif
