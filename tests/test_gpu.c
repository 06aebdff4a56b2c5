/* The CUDA trainer against the CPU path (DESIGN §6): one batch's forward
 * outputs, loss, dense gradient and pooled-embedding gradient within 1e-4
 * relative, on a small model and on the Criteo-Kaggle shape; one SGD and
 * one Adagrad step on the device copy against the CPU's; the staging add;
 * two workers training at once on one device copy (Hogwild) stay finite.
 * Where there is no usable GPU (or no GPU support in the build) it prints
 * "SKIP ... skipped: no GPU" and passes nothing. tests/e2e_gpu.sh runs it
 * again with SS_GPU_LIB naming the CPU simulation of the device library
 * (src/gpu/sim.c), which checks the device trainer's logic, GEMM arguments
 * and kernel bodies included, on any machine. */
#include "check.h"
#include "shadowsync/gpu.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void make_batch(const struct model_layout *L, struct batch *b, int n, uint64_t seed)
{
    batch_init(b, n, L->n_dense, L->n_tables);
    b->off[0] = 0;
    uint64_t r = seed;
    for (int i = 0; i < n; i++) {
        b->label[i] = ss_uniform(&r) < 0.3 ? 1.0f : 0.0f;
        for (int k = 0; k < L->n_dense; k++)
            b->dense[i * L->n_dense + k] = (float)(ss_uniform(&r) * 20 - 3);
        for (int t = 0; t < L->n_tables; t++) {
            b->off[i * L->n_tables + t + 1] = i * L->n_tables + t + 1;
            b->ids[i * L->n_tables + t] = ss_splitmix(&r) % 50;
        }
    }
    b->n = n;
}

/* max |a - b| / max |b|: the error relative to the array's scale */
static double rel(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* rel() of each weight matrix and bias vector on its own: a small layer's
 * error is not hidden by a large one's scale */
static double rel_layers(const float *a, const float *b, const struct model_layout *L)
{
    double worst = 0;
    for (int i = 0; i < L->n_bot; i++) {
        worst = fmax(worst, rel(a + L->bot_w[i], b + L->bot_w[i], (size_t)L->bot[i] * L->bot[i + 1]));
        worst = fmax(worst, rel(a + L->bot_b[i], b + L->bot_b[i], L->bot[i + 1]));
    }
    for (int i = 0; i < L->n_top; i++) {
        worst = fmax(worst, rel(a + L->top_w[i], b + L->top_w[i], (size_t)L->top[i] * L->top[i + 1]));
        worst = fmax(worst, rel(a + L->top_b[i], b + L->top_b[i], L->top[i + 1]));
    }
    return worst;
}

/* The steps a - w0 and b - w0 compared layer by layer as rel() does, less
 * the rounding that storing each weight costs (half an ulp of the layer's
 * largest weight, on both sides): a small step on a large weight loses
 * bits to it however the sums are ordered (cuBLAS's order is not ours). */
static double step_err(const float *a, const float *b, const float *w0, size_t off, size_t n)
{
    double d = 0, m = 1e-30, wm = 0;
    for (size_t i = off; i < off + n; i++) {
        double sa = (double)a[i] - w0[i], sb = (double)b[i] - w0[i];
        d = fmax(d, fabs(sa - sb));
        m = fmax(m, fabs(sb));
        wm = fmax(wm, fmax(fabs((double)w0[i]), fabs((double)b[i])));
    }
    return fmax(0, d - wm * FLT_EPSILON) / m;
}

static double step_err_layers(const float *a, const float *b, const float *w0,
                              const struct model_layout *L)
{
    double worst = 0;
    for (int i = 0; i < L->n_bot; i++) {
        worst = fmax(worst, step_err(a, b, w0, L->bot_w[i], (size_t)L->bot[i] * L->bot[i + 1]));
        worst = fmax(worst, step_err(a, b, w0, L->bot_b[i], L->bot[i + 1]));
    }
    for (int i = 0; i < L->n_top; i++) {
        worst = fmax(worst, step_err(a, b, w0, L->top_w[i], (size_t)L->top[i] * L->top[i + 1]));
        worst = fmax(worst, step_err(a, b, w0, L->top_b[i], L->top[i + 1]));
    }
    return worst;
}

struct hog {
    struct gpu_dense *g;
    const struct model_layout *L;
    int rc;
    struct ss_err e;
};

static void *hog_main(void *arg)
{
    struct hog *h = arg;
    struct gpu_worker *w;
    struct batch b;
    if ((h->rc = gpu_worker_create(&w, h->g, 80, &h->e)) < 0)
        return NULL;
    for (int it = 0; it < 50 && h->rc == 0; it++) {
        make_batch(h->L, &b, 64, 100 + it);
        uint64_t r = it;
        size_t m = (size_t)64 * h->L->n_tables * h->L->dim;
        for (size_t i = 0; i < m; i++)
            gpu_worker_emb(w)[i] = (float)(ss_normal(&r) * 0.3);
        h->rc = gpu_worker_train(w, &b, OPT_SGD, 0.05f, 1e-8f, &h->e);
        batch_free(&b);
    }
    gpu_worker_free(w);
    return NULL;
}

static void parity(const char *name, char **sets, int n_sets, int n)
{
    struct ss_config cfg;
    struct model_layout L;
    struct ss_err e = {0};
    char what[160];
    if (ss_config_load(&cfg, NULL, sets, n_sets, &e) < 0 || model_layout_init(&L, &cfg, &e) < 0) {
        CHECK(0, name, "%s", e.msg);
        return;
    }
    size_t P = L.n_params, TD = (size_t)n * L.n_tables * L.dim;
    float *p = ss_aligned(P * sizeof(float)), *st = ss_aligned(P * sizeof(float));
    float *g_gpu = ss_aligned(P * sizeof(float)), *w_gpu = ss_aligned(P * sizeof(float));
    float *st_gpu = ss_aligned(P * sizeof(float));
    model_init_params(&L, p, 11);
    for (size_t i = 0; i < P; i++)
        st[i] = 0.1f;
    struct batch b;
    make_batch(&L, &b, n, 5);
    struct model_scratch s;
    model_scratch_init(&s, &L, n);
    uint64_t r = 3;
    for (size_t i = 0; i < TD; i++)
        s.emb[i] = (float)(ss_normal(&r) * 0.5);
    double loss_cpu = model_forward(&L, p, &b, &s);
    model_backward(&L, p, &b, &s);

    struct gpu_dense *g = NULL;
    struct gpu_worker *w = NULL;
    double loss_gpu = 0;
    int rc = gpu_dense_create(&g, &L, 0, p, st, &e);
    if (rc == 0) /* room for more than the batch, as for a data set's last batch */
        rc = gpu_worker_create(&w, g, n + 5, &e);
    if (rc == 0) {
        memcpy(gpu_worker_emb(w), s.emb, TD * sizeof(float));
        rc = gpu_worker_grad(w, &b, g_gpu, &loss_gpu, &e);
    }
    snprintf(what, sizeof what, "%s: the device copy, a worker, one batch's gradient", name);
    CHECK(rc == 0, what, "%s", e.msg);
    if (rc < 0)
        goto out;
    double ep = rel(gpu_worker_prob(w), s.prob, n), eg = rel_layers(g_gpu, s.grad, &L);
    double ee = rel(gpu_worker_d_emb(w), s.d_emb, TD), el = fabs(loss_gpu - loss_cpu) / loss_cpu;
    snprintf(what, sizeof what, "%s: forward outputs within 1e-4 of the CPU's (%.1e)", name, ep);
    CHECK(ep <= 1e-4, what, "relative error %.3g", ep);
    snprintf(what, sizeof what, "%s: loss within 1e-4 (%.6f vs %.6f)", name, loss_gpu, loss_cpu);
    CHECK(el <= 1e-4, what, "relative error %.3g", el);
    snprintf(what, sizeof what, "%s: dense gradient within 1e-4, layer by layer (%.1e)", name, eg);
    CHECK(eg <= 1e-4, what, "relative error %.3g", eg);
    snprintf(what, sizeof what, "%s: embedding gradient within 1e-4 (%.1e)", name, ee);
    CHECK(ee <= 1e-4, what, "relative error %.3g", ee);

    /* one SGD step on the device copy against the CPU's fused one */
    float *p_sgd = ss_aligned(P * sizeof(float));
    memcpy(p_sgd, p, P * sizeof(float));
    model_forward(&L, p_sgd, &b, &s);
    model_backward_sgd(&L, p_sgd, &b, &s, 0.5f);
    rc = gpu_worker_train(w, &b, OPT_SGD, 0.5f, 1e-8f, &e);
    if (rc == 0)
        rc = gpu_dense_read(g, w_gpu, NULL, &e);
    double es = step_err_layers(w_gpu, p_sgd, p, &L); /* the steps, not the weights */
    snprintf(what, sizeof what, "%s: an SGD step on the device equals the CPU's (%.1e)", name, es);
    CHECK(rc == 0 && es <= 1e-4, what, "rc %d relative error %.3g %s", rc, es, e.msg);
    free(p_sgd);

    /* Adagrad from the same start (a worker goes before its device copy) */
    gpu_worker_free(w);
    gpu_dense_free(g);
    g = NULL, w = NULL;
    rc = gpu_dense_create(&g, &L, 0, p, st, &e);
    if (rc == 0)
        rc = gpu_worker_create(&w, g, n + 5, &e);
    if (rc == 0) {
        memcpy(gpu_worker_emb(w), s.emb, TD * sizeof(float));
        rc = gpu_worker_train(w, &b, OPT_ADAGRAD, 0.05f, 1e-8f, &e);
    }
    if (rc == 0)
        rc = gpu_dense_read(g, w_gpu, st_gpu, &e);
    float *p_ada = ss_aligned(P * sizeof(float)), *st_ada = ss_aligned(P * sizeof(float));
    memcpy(p_ada, p, P * sizeof(float));
    memcpy(st_ada, st, P * sizeof(float));
    model_forward(&L, p_ada, &b, &s);
    model_backward(&L, p_ada, &b, &s);
    optim_dense_step(OPT_ADAGRAD, p_ada, st_ada, s.grad, P, 0.05f, 1e-8f);
    /* the states whole: their increments (squared gradients of ~1e-5 on 0.1)
     * would take one rounding of 0.1f for an error of ~5e-4 */
    double eas = rel_layers(st_gpu, st_ada, &L);
    double ea = step_err_layers(w_gpu, p_ada, p, &L); /* the steps */
    snprintf(what, sizeof what, "%s: an Adagrad step and its state equal the CPU's (%.1e, %.1e)",
             name, ea, eas);
    CHECK(rc == 0 && ea <= 1e-4 && eas <= 1e-6, what, "rc %d errors %.3g %.3g %s", rc, ea, eas,
          e.msg);
    free(p_ada);
    free(st_ada);
    if (rc < 0)
        goto out;

    /* the shadow thread's staging add: w + delta, exactly */
    for (size_t i = 0; i < P; i++)
        g_gpu[i] = (float)((int)(i % 7) - 3) * 1e-3f; /* a sync round's size: the workers go on from it */
    float *before = ss_aligned(P * sizeof(float));
    rc = gpu_dense_read(g, before, NULL, &e);
    if (rc == 0)
        rc = gpu_dense_add(g, g_gpu, &e);
    if (rc == 0)
        rc = gpu_dense_read(g, w_gpu, NULL, &e);
    int same = rc == 0;
    for (size_t i = 0; same && i < P; i++)
        same = w_gpu[i] == before[i] + g_gpu[i];
    snprintf(what, sizeof what, "%s: the staging add leaves w + delta on the device", name);
    CHECK(same, what, "rc %d %s", rc, e.msg);
    free(before);

    /* Hogwild: two workers on the one copy, at once */
    struct hog h[2] = {{g, &L, 0, {0}}, {g, &L, 0, {0}}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        pthread_create(&th[k], NULL, hog_main, &h[k]);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    rc = h[0].rc < 0 ? h[0].rc : h[1].rc;
    if (rc == 0)
        rc = gpu_dense_read(g, w_gpu, NULL, &e);
    int finite = rc == 0;
    for (size_t i = 0; finite && i < P; i++)
        finite = isfinite(w_gpu[i]);
    snprintf(what, sizeof what, "%s: two workers train the one device copy at once (Hogwild)", name);
    CHECK(finite, what, "rc %d %s %s", rc, h[0].e.msg, h[1].e.msg);
out:
    gpu_worker_free(w); /* before the copy it works on */
    gpu_dense_free(g);
    model_scratch_free(&s);
    batch_free(&b);
    free(p), free(st), free(g_gpu), free(w_gpu), free(st_gpu);
    model_layout_free(&L);
    ss_config_free(&cfg);
}

int main(void)
{
    char why[256];
    if (gpu_probe(why, sizeof why) <= 0) {
        printf("SKIP gpu parity: skipped: no GPU (%s)\n", why);
        return 0;
    }
    printf("# gpu: %s; %s\n", gpu_build_info(), why);
    /* SS_GPU_LIB may name the CPU simulation (tests/e2e_gpu.sh): its lines say so */
    int sim = strstr(why, "CPU simulation") != NULL;
    char *small[] = {"model.bottom=4-8-6-3", "model.dim=3", "model.rows=50", "data.cat_cols=5-7",
                     "model.top=auto-7-5-1"};
    parity(sim ? "CPU simulation, small model" : "small model", small, 5, 6);
    char *criteo[] = {"model.bottom=13-512-256-64-16", "model.dim=16", "model.rows=100",
                      "data.cat_cols=14-39", "model.top=367-512-256-1"};
    parity(sim ? "CPU simulation, Criteo-Kaggle shape, batch 128" : "Criteo-Kaggle shape, batch 128",
           criteo, 5, 128);
    CHECK_DONE();
}
