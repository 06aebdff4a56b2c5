/* The DLRM gradient against central finite differences: every dense
 * parameter of a small model and every pooled-embedding input; with
 * model.pooling = mean, the gradient of the bags' sums (what each row of a
 * bag gets) through model_pool_scale. */
#include "check.h"
#include "shadowsync/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct ss_config cfg;
static struct model_layout L;

static void make_batch(struct batch *b, int n, uint64_t seed)
{
    batch_init(b, n, L.n_dense, L.n_tables);
    b->off[0] = 0;
    uint64_t r = seed;
    for (int i = 0; i < n; i++) {
        b->label[i] = ss_uniform(&r) < 0.4 ? 1.0f : 0.0f;
        for (int k = 0; k < L.n_dense; k++) /* some negatives: log(1+max(x,0)) clips them */
            b->dense[i * L.n_dense + k] = (float)(ss_uniform(&r) * 20 - 3);
        for (int t = 0; t < L.n_tables; t++) {
            b->off[i * L.n_tables + t + 1] = i * L.n_tables + t + 1;
            b->ids[i * L.n_tables + t] = ss_splitmix(&r) % 50;
        }
    }
    b->n = n;
}

static void random_emb(struct model_scratch *s, int n, uint64_t seed)
{
    uint64_t r = seed;
    for (size_t i = 0; i < (size_t)n * L.n_tables * L.dim; i++)
        s->emb[i] = (float)(ss_normal(&r) * 0.5);
}

/* Compares analytic g with the central difference of the loss in x[i].
 * Where the two one-sided slopes disagree, a ReLU kink lies within h and
 * the loss is not differentiable there: such coordinates are counted in
 * *kinks and skipped (the caller bounds how many). */
static int check_grads(float *x, const float *g, size_t n, struct batch *b, struct model_scratch *s,
                       const float *params, const char *what, double *worst, int *kinks)
{
    int bad = 0;
    const float h = 2e-3f;
    double base = model_forward(&L, params, b, s);
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + h;
        double up = model_forward(&L, params, b, s);
        x[i] = keep - h;
        double down = model_forward(&L, params, b, s);
        x[i] = keep;
        double right = (up - base) / h, left = (base - down) / h;
        if (fabs(right - left) > 0.01 * (fabs(right) + fabs(left)) + 1e-4) {
            (*kinks)++;
            continue;
        }
        double num = (up - down) / (2 * h), ana = g[i];
        double err = fabs(num - ana) / (fabs(num) + fabs(ana) + 1e-3);
        if (err > *worst)
            *worst = err;
        if (err > 1e-2) {
            if (bad < 3)
                printf("  %s[%zu]: analytic %.6g numeric %.6g\n", what, i, ana, num);
            bad++;
        }
    }
    model_forward(&L, params, b, s);
    return bad;
}

static void check_batch(uint64_t seed)
{
    float *p = ss_aligned(L.n_params * sizeof(float));
    model_init_params(&L, p, 7);
    int n = 6;
    struct batch b;
    make_batch(&b, n, seed);
    struct model_scratch s;
    model_scratch_init(&s, &L, n);
    random_emb(&s, n, seed + 2);
    double loss = model_forward(&L, p, &b, &s);
    CHECK(isfinite(loss) && loss > 0, "forward gives a finite positive loss", "%g", loss);
    double mean = 0;
    for (int i = 0; i < n; i++)
        mean += metric_bce(s.prob[i], b.label[i]) / n;
    CHECK(fabs(mean - loss) < 1e-5, "loss is the mean BCE of the probabilities", "%g vs %g", mean,
          loss);
    model_backward(&L, p, &b, &s);
    float *g = ss_aligned(L.n_params * sizeof(float));
    memcpy(g, s.grad, L.n_params * sizeof(float));
    size_t ne = (size_t)n * L.n_tables * L.dim;
    float *ge = ss_aligned(ne * sizeof(float));
    memcpy(ge, s.d_emb, ne * sizeof(float));
    double worst = 0, worst_e = 0;
    int kinks = 0;
    int bad = check_grads(p, g, L.n_params, &b, &s, p, "dense", &worst, &kinks);
    CHECK(bad == 0, "every dense gradient matches finite differences", "%d mismatches", bad);
    bad = check_grads(s.emb, ge, ne, &b, &s, p, "emb", &worst_e, &kinks);
    CHECK(bad == 0, "every pooled-embedding gradient matches finite differences",
          "%d mismatches", bad);
    /* the fused SGD backward = params - lr * gradient, and the same d_emb */
    float *q = ss_aligned(L.n_params * sizeof(float));
    memcpy(q, p, L.n_params * sizeof(float));
    model_forward(&L, q, &b, &s);
    model_backward_sgd(&L, q, &b, &s, 0.5f);
    double off = 0, off_e = 0;
    for (size_t i = 0; i < L.n_params; i++)
        off = fmax(off, fabs(q[i] - (p[i] - 0.5f * g[i])));
    for (size_t i = 0; i < ne; i++)
        off_e = fmax(off_e, fabs(s.d_emb[i] - ge[i]));
    CHECK(off < 1e-6 && off_e < 1e-7, "fused SGD backward = params - lr * gradient",
          "max difference %g (params) %g (d_emb)", off, off_e);
    free(q);
    printf("  seed %llu: worst relative error dense %.2g, embeddings %.2g; %d coordinates at a "
           "ReLU kink skipped\n", (unsigned long long)seed, worst, worst_e, kinks);
    CHECK(kinks * 20 < (int)(L.n_params + ne), "fewer than 5% of coordinates skipped at kinks",
          "%d of %zu", kinks, L.n_params + ne);
    free(g);
    free(ge);
    free(p);
    model_scratch_free(&s);
    batch_free(&b);
}

/* Mean pooling on bags of 0 to 3 ids: the model's input is each bag's sum
 * over its length, and model_pool_scale on d_emb gives the loss's gradient
 * in the sum (the gradient every row of the bag gets). */
static void check_mean_pooling(void)
{
    struct model_layout M = L;
    M.pooling = POOL_MEAN;
    float *p = ss_aligned(M.n_params * sizeof(float));
    model_init_params(&M, p, 7);
    int n = 4, T = M.n_tables, d = M.dim;
    struct batch b;
    batch_init(&b, n, M.n_dense, T);
    batch_reserve_ids(&b, (size_t)n * T * 3);
    uint64_t r = 11;
    b.off[0] = 0;
    for (int k = 0; k < n * T; k++) {
        int len = k % 4; /* 0, 1, 2, 3 ids */
        for (int q = 0; q < len; q++)
            b.ids[b.off[k] + q] = ss_splitmix(&r) % 50;
        b.off[k + 1] = b.off[k] + len;
    }
    for (int i = 0; i < n; i++) {
        b.label[i] = (float)(i & 1);
        for (int k = 0; k < M.n_dense; k++)
            b.dense[i * M.n_dense + k] = (float)(ss_uniform(&r) * 20 - 3);
    }
    b.n = n;
    struct model_scratch s;
    model_scratch_init(&s, &M, n);
    size_t ne = (size_t)n * T * d;
    float *sum = ss_aligned(ne * sizeof(float)), *g = ss_aligned(ne * sizeof(float));
    for (size_t i = 0; i < ne; i++) /* an empty bag pools to zeros */
        sum[i] = b.off[i / d + 1] == b.off[i / d] ? 0.0f : (float)(ss_normal(&r) * 0.5);
    memcpy(s.emb, sum, ne * sizeof(float));
    model_pool_scale(&M, &b, s.emb);
    double off = 0;
    for (size_t i = 0; i < ne; i++) {
        int len = b.off[i / d + 1] - b.off[i / d];
        off = fmax(off, fabs(s.emb[i] - (len ? sum[i] / len : 0.0f)));
    }
    CHECK(off < 1e-7, "mean pooling: each bag's vector is its sum over its length",
          "max difference %g", off);
    model_forward(&M, p, &b, &s);
    model_backward(&M, p, &b, &s);
    memcpy(g, s.d_emb, ne * sizeof(float));
    model_pool_scale(&M, &b, g);
    int bad = 0, kinks = 0;
    double worst = 0;
    const float h = 2e-3f;
    for (size_t i = 0; i < ne; i++) {
        double f[3];
        for (int k = 0; k < 3; k++) { /* the loss at sum - h, sum, sum + h */
            memcpy(s.emb, sum, ne * sizeof(float));
            s.emb[i] += (k - 1) * h;
            model_pool_scale(&M, &b, s.emb);
            f[k] = model_forward(&M, p, &b, &s);
        }
        double right = (f[2] - f[1]) / h, left = (f[1] - f[0]) / h;
        if (fabs(right - left) > 0.01 * (fabs(right) + fabs(left)) + 1e-4) {
            kinks++;
            continue;
        }
        double num = (f[2] - f[0]) / (2 * h);
        double err = fabs(num - g[i]) / (fabs(num) + fabs(g[i]) + 1e-3);
        worst = fmax(worst, err);
        bad += err > 1e-2;
    }
    CHECK(bad == 0 && kinks * 10 < (int)ne,
          "mean pooling: the scaled d_emb is the loss's gradient in each bag's sum",
          "%d mismatches, %d kinks of %zu, worst %.2g", bad, kinks, ne, worst);
    /* sum pooling leaves the vectors alone */
    memcpy(s.emb, sum, ne * sizeof(float));
    model_pool_scale(&L, &b, s.emb);
    CHECK(memcmp(s.emb, sum, ne * sizeof(float)) == 0, "sum pooling: the vectors as pooled",
          "changed");
    free(sum);
    free(g);
    free(p);
    model_scratch_free(&s);
    batch_free(&b);
}

int main(void)
{
    char *sets[] = {"model.bottom=4-8-6-3", "model.dim=3", "model.rows=50",
                    "data.cat_cols=5-7", "model.top=auto-7-5-1"};
    struct ss_err e = {0};
    int rc = ss_config_load(&cfg, NULL, sets, 5, &e);
    CHECK(rc == 0, "config for a small model", "%s", e.msg);
    rc = model_layout_init(&L, &cfg, &e);
    CHECK(rc == 0 && L.n_tables == 3 && L.top[0] == 3 + 6, "layout: 3 tables, top input 9",
          "rc %d tables %d top0 %d: %s", rc, L.n_tables, L.top[0], e.msg);
    size_t expect = 4 * 8 + 8 + 8 * 6 + 6 + 6 * 3 + 3 + 9 * 7 + 7 + 7 * 5 + 5 + 5 * 1 + 1;
    CHECK(L.n_params == expect, "flat buffer size", "%zu vs %zu", L.n_params, expect);

    /* Batches whose ReLUs sit clear of their kinks, so the loss is smooth
     * around the point: a wrong gradient fails on any of them. */
    static const uint64_t seeds[] = {4, 5, 9, 10};
    int have_onednn = L.backend == DENSE_ONEDNN; /* auto: oneDNN where built in */
    for (int be = DENSE_ONEDNN; be <= DENSE_OPENBLAS; be++) { /* both sides of the dense seam */
        int built = be == DENSE_OPENBLAS || have_onednn;
        L.backend = built ? be : DENSE_OPENBLAS;
        printf("  the matmuls through %s%s\n", be == DENSE_ONEDNN ? "oneDNN" : "OpenBLAS",
               built ? "" : " (not built: its fallback, OpenBLAS)");
        for (int k = 0; k < 4; k++)
            check_batch(seeds[k]);
    }
    check_mean_pooling();

    /* a bad top is refused with the expected width named */
    char *bad_top[] = {"model.top=100-1"};
    struct ss_config c2;
    struct model_layout l2;
    ss_config_load(&c2, NULL, bad_top, 1, &e);
    rc = model_layout_init(&l2, &c2, &e);
    CHECK(rc < 0 && strstr(e.msg, "367"), "a wrong model.top names the width it must start at",
          "rc %d: %s", rc, e.msg);
    ss_config_free(&c2);

    model_layout_free(&L);
    ss_config_free(&cfg);
    CHECK_DONE();
}
