/* Inside the dense seam (dense.c): the oneDNN half it calls (dense_onednn.c,
 * built with SS_DNNL; without it onednn_built() is 0 and nothing else of it
 * is called). Each onednn_ call returns 0, or -1 where oneDNN cannot run that
 * matmul and the caller runs it on OpenBLAS. */
#ifndef SS_CORE_DENSE_H
#define SS_CORE_DENSE_H
#include "shadowsync/core.h"

struct onednn;

struct dense {
    const struct model_layout *l;
    int cap;
    struct onednn *dnn; /* NULL: OpenBLAS */
    float *colsum;      /* [widest]: a bias's gradient before its step */
};

int onednn_built(void);
/* 1 when bf16 matmuls have kernels on this CPU; else 0 with why. */
int onednn_bf16_ok(char *why, size_t len);
struct onednn *onednn_create(const struct model_layout *l, int cap, int bf16);
void onednn_free(struct onednn *o);
int onednn_fwd(struct onednn *o, int k, const float *x, const float *w, const float *b, float *y,
               int n, int relu);
/* dx (when not NULL) and tw as dense_bwd says; the bias is the caller's */
int onednn_bwd(struct onednn *o, int k, const float *x, const float *w, const float *dy,
               float *tw, float *dx, int n, float alpha, float beta);
const char *onednn_impl(const struct onednn *o, char *buf, size_t len);

#endif
