/* The oneDNN half of the dense seam (dense.c). Per layer, up to four matmul
 * primitives: the forward (bias and ReLU fused as post-ops), the backward
 * data, and the weights' gradient written as target <- beta*target +
 * alpha*dy^T x (alpha a runtime output scale, beta 1 a sum post-op). Each is
 * made once per worker and batch size: slot 0 for the first size seen (the
 * full batch), slot 1 for the last other (a file's last batch, an eval's).
 * Memories are bound to the caller's buffers per call, scratchpads are the
 * worker's own, and the worker's OpenMP runs one thread (Debian's oneDNN is
 * built on OpenMP: a primitive otherwise spreads over every core).
 *
 * bf16: the forward converts a layer's fp32 weights (the master copy) and
 * its input to bf16 buffers kept here, which the backward uses again with
 * dy converted likewise; every matmul accumulates and writes fp32. */
#include "dense.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SS_DNNL
int onednn_built(void) { return 0; }
int onednn_bf16_ok(char *why, size_t len) { snprintf(why, len, "no oneDNN"); return 0; }
struct onednn *onednn_create(const struct model_layout *l, int cap, int bf16)
{
    (void)l, (void)cap, (void)bf16;
    return NULL;
}
void onednn_free(struct onednn *o) { (void)o; }
int onednn_fwd(struct onednn *o, int k, const float *x, const float *w, const float *b, float *y,
               int n, int relu)
{
    (void)o, (void)k, (void)x, (void)w, (void)b, (void)y, (void)n, (void)relu;
    return -1;
}
int onednn_bwd(struct onednn *o, int k, const float *x, const float *w, const float *dy,
               float *tw, float *dx, int n, float alpha, float beta)
{
    (void)o, (void)k, (void)x, (void)w, (void)dy, (void)tw, (void)dx, (void)n, (void)alpha,
        (void)beta;
    return -1;
}
const char *onednn_impl(const struct onednn *o, char *buf, size_t len)
{
    (void)o;
    snprintf(buf, len, "(not built)");
    return buf;
}
#else
#include <dnnl.h>
#include <omp.h>

enum { FWD, BWD_DATA, BWD_W0, BWD_W1, N_OPS }; /* BWD_Wb: the weights' gradient with beta b */
enum { A_SRC, A_WEI, A_BIAS, A_DST, A_SCALE, A_SCRATCH, N_ARGS };

struct mm {
    int n;                  /* the batch rows it was made for; 0: none */
    dnnl_primitive_t p;     /* NULL with n set: oneDNN cannot run it */
    dnnl_memory_t mem[N_ARGS];
    void *scratch;
};

struct layer {
    int in, out;
    struct mm op[N_OPS][2];
    uint16_t *xb, *wb;      /* bf16: the forward's input [cap x in] and weights [out x in] */
    int xb_n;               /* rows of xb from the last forward; 0: none */
};

struct onednn {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    int bf16, cap, n_layers;
    struct layer L[2 * SS_MAX_LAYERS];
    uint16_t *dyb;          /* bf16 dy of the layer in backward [cap x widest] */
    float alpha;            /* the runtime output scale of the weights' gradient */
    dnnl_memory_t alpha_mem;
    char impl[160];         /* the kernels oneDNN chose, each named once */
    int warned;
};

static const int dnnl_arg[N_ARGS] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST,
                                      DNNL_ARG_ATTR_OUTPUT_SCALES, DNNL_ARG_SCRATCHPAD};

int onednn_built(void) { return 1; }

int onednn_bf16_ok(char *why, size_t len)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
        return 1;
    snprintf(why, len, "this CPU has neither AVX512_BF16 nor AMX for oneDNN's bf16 kernels%s",
             getenv("DNNL_MAX_CPU_ISA") ? " (or DNNL_MAX_CPU_ISA in the environment forbids them)"
                                        : "");
    return 0;
}

static void one_thread(void)
{
    if (omp_get_max_threads() != 1) /* per thread: this worker's primitives run on it alone */
        omp_set_num_threads(1);
}

struct onednn *onednn_create(const struct model_layout *l, int cap, int bf16)
{
    one_thread();
    struct onednn *o = ss_xmalloc(sizeof *o);
    memset(o, 0, sizeof *o);
    if (dnnl_engine_create(&o->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&o->st, o->eng, dnnl_stream_default_flags) != dnnl_success) {
        ss_log("oneDNN: no CPU engine; the MLPs run on OpenBLAS");
        if (o->eng)
            dnnl_engine_destroy(o->eng);
        free(o);
        return NULL;
    }
    o->bf16 = bf16;
    o->cap = cap;
    o->n_layers = l->n_bot + l->n_top;
    for (int k = 0; k < o->n_layers; k++) {
        const int *w = k < l->n_bot ? l->bot + k : l->top + (k - l->n_bot);
        struct layer *y = &o->L[k];
        y->in = w[0], y->out = w[1];
        if (bf16) {
            y->xb = ss_aligned((size_t)cap * y->in * sizeof(uint16_t));
            y->wb = ss_aligned((size_t)y->out * y->in * sizeof(uint16_t));
        }
    }
    if (bf16)
        o->dyb = ss_aligned((size_t)cap * model_widest(l) * sizeof(uint16_t));
    dnnl_memory_desc_t sd;
    dnnl_dims_t one = {1};
    if (dnnl_memory_desc_init_by_tag(&sd, 1, one, dnnl_f32, dnnl_a) != dnnl_success ||
        dnnl_memory_create(&o->alpha_mem, &sd, o->eng, &o->alpha) != dnnl_success)
        o->alpha_mem = NULL; /* every weights' gradient then runs on OpenBLAS */
    return o;
}

static void mm_clear(struct mm *m)
{
    if (m->p)
        dnnl_primitive_destroy(m->p);
    for (int a = 0; a < N_ARGS; a++)
        if (m->mem[a] && a != A_SCALE) /* the scale's memory is the engine's, shared */
            dnnl_memory_destroy(m->mem[a]);
    free(m->scratch);
    memset(m, 0, sizeof *m);
}

void onednn_free(struct onednn *o)
{
    if (!o)
        return;
    for (int k = 0; k < o->n_layers; k++) {
        for (int op = 0; op < N_OPS; op++)
            for (int s = 0; s < 2; s++)
                mm_clear(&o->L[k].op[op][s]);
        free(o->L[k].xb);
        free(o->L[k].wb);
    }
    free(o->dyb);
    if (o->alpha_mem)
        dnnl_memory_destroy(o->alpha_mem);
    dnnl_stream_destroy(o->st);
    dnnl_engine_destroy(o->eng);
    free(o);
}

static void note_impl(struct onednn *o, const char *impl)
{
    if (strstr(o->impl, impl))
        return;
    size_t n = strlen(o->impl);
    snprintf(o->impl + n, sizeof o->impl - n, "%s%s", n ? ", " : "", impl);
}

/* The shape of one matmul, C[M x N] = A[M x K] B[K x N] (+ bias [1 x N]),
 * A and B by strides (a transpose is a stride), C row-major fp32. */
struct shape {
    dnnl_dim_t M, N, K;
    dnnl_dims_t as, bs;
    int bias, relu, scaled, sum;
};

static int mm_make(struct onednn *o, struct mm *m, int n, const struct shape *s)
{
    dnnl_data_type_t dt = o->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t md[N_ARGS];
    dnnl_dims_t ad = {s->M, s->K}, bd = {s->K, s->N}, cd = {s->M, s->N}, bias = {1, s->N};
    dnnl_dims_t cs = {s->N, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t desc;
    mm_clear(m);
    m->n = n;
    int ok = dnnl_memory_desc_init_by_strides(&md[A_SRC], 2, ad, dt, s->as) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&md[A_WEI], 2, bd, dt, s->bs) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&md[A_DST], 2, cd, dnnl_f32, cs) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&md[A_BIAS], 2, bias, dnnl_f32, dnnl_ab) == dnnl_success &&
             dnnl_matmul_desc_init(&desc, &md[A_SRC], &md[A_WEI], s->bias ? &md[A_BIAS] : NULL,
                                   &md[A_DST]) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
             dnnl_post_ops_create(&po) == dnnl_success;
    if (ok && s->scaled)
        ok = o->alpha_mem &&
             dnnl_primitive_attr_set_output_scales(attr, 1, 0, &DNNL_RUNTIME_F32_VAL) == dnnl_success;
    if (ok && s->sum)
        ok = dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success;
    if (ok && s->relu)
        ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success;
    ok = ok && dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
         dnnl_primitive_desc_create(&pd, &desc, attr, o->eng, NULL) == dnnl_success &&
         dnnl_primitive_create(&m->p, pd) == dnnl_success;
    if (ok) {
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
            note_impl(o, impl);
        const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        size_t sz = sp ? dnnl_memory_desc_get_size(sp) : 0;
        if (sz)
            md[A_SCRATCH] = *sp;
        m->scratch = sz ? ss_aligned(sz) : NULL;
        for (int a = 0; ok && a < N_ARGS; a++) {
            if (a == A_SCALE) {
                m->mem[a] = s->scaled ? o->alpha_mem : NULL;
                continue;
            }
            if ((a == A_BIAS && !s->bias) || (a == A_SCRATCH && !sz))
                continue;
            ok = dnnl_memory_create(&m->mem[a], &md[a], o->eng,
                                    a == A_SCRATCH ? m->scratch : DNNL_MEMORY_NONE) == dnnl_success;
        }
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        mm_clear(m);
        m->n = n;
        if (!o->warned++)
            ss_log("oneDNN has no %s kernel for a %lldx%lldx%lld matmul of this model; it runs on "
                   "OpenBLAS in fp32", o->bf16 ? "bf16" : "fp32", (long long)s->M,
                   (long long)s->N, (long long)s->K);
        return -1;
    }
    return 0;
}

/* The primitive of op for n rows, made on first use. */
static struct mm *mm_get(struct onednn *o, struct mm slot[2], int n, const struct shape *s)
{
    struct mm *m = slot[0].n == 0 || slot[0].n == n ? &slot[0] : &slot[1];
    if (m->n != n)
        mm_make(o, m, n, s);
    return m->p ? m : NULL;
}

static int mm_run(struct onednn *o, struct mm *m, const void *a, const void *b, const float *bias,
                  float *c)
{
    const void *ptr[N_ARGS] = {a, b, bias, c, NULL, NULL};
    dnnl_exec_arg_t args[N_ARGS];
    int na = 0;
    one_thread();
    for (int i = 0; i < N_ARGS; i++) {
        if (!m->mem[i])
            continue;
        if (ptr[i] && dnnl_memory_set_data_handle_v2(m->mem[i], (void *)ptr[i], o->st) != dnnl_success)
            return -1;
        args[na].arg = dnnl_arg[i];
        args[na++].memory = m->mem[i];
    }
    return dnnl_primitive_execute(m->p, o->st, na, args) == dnnl_success ? 0 : -1;
}

int onednn_fwd(struct onednn *o, int k, const float *x, const float *w, const float *b, float *y,
               int n, int relu)
{
    struct layer *L = &o->L[k];
    L->xb_n = 0;
    struct shape s = {n, L->out, L->in, {L->in, 1}, {1, L->in}, 1, relu, 0, 0}; /* B = W^T */
    struct mm *m = mm_get(o, L->op[FWD], n, &s);
    if (!m)
        return -1;
    const void *a = x, *wt = w;
    if (o->bf16) { /* this step's weights, and the input the backward uses again */
        ss_to_bf16(L->wb, w, (size_t)L->out * L->in);
        ss_to_bf16(L->xb, x, (size_t)n * L->in);
        L->xb_n = n;
        a = L->xb, wt = L->wb;
    }
    return mm_run(o, m, a, wt, b, y);
}

int onednn_bwd(struct onednn *o, int k, const float *x, const float *w, const float *dy,
               float *tw, float *dx, int n, float alpha, float beta)
{
    struct layer *L = &o->L[k];
    if (o->bf16 && L->xb_n != n) /* its forward ran elsewhere: no bf16 input to use */
        return -1;
    int in = L->in, out = L->out;
    struct shape sd = {n, in, out, {out, 1}, {in, 1}, 0, 0, 0, 0};                /* dy W */
    struct shape sw = {out, in, n, {1, out}, {in, 1}, 0, 0, 1, beta != 0.0f}; /* dy^T x */
    struct mm *md = dx ? mm_get(o, L->op[BWD_DATA], n, &sd) : NULL;
    struct mm *mw = mm_get(o, L->op[beta != 0.0f ? BWD_W1 : BWD_W0], n, &sw);
    if ((dx && !md) || !mw)
        return -1;
    const void *g = dy, *wt = w, *xs = x;
    if (o->bf16) {
        ss_to_bf16(o->dyb, dy, (size_t)n * out);
        g = o->dyb, wt = L->wb, xs = L->xb;
    }
    if (dx && mm_run(o, md, g, wt, NULL, dx) < 0)
        return -1;
    o->alpha = alpha;
    return mm_run(o, mw, g, xs, NULL, tw);
}

const char *onednn_impl(const struct onednn *o, char *buf, size_t len)
{
    snprintf(buf, len, "%s", o->impl[0] ? o->impl : "(no matmul made yet)");
    return buf;
}
#endif
