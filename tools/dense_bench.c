/* tools/dense_bench: the dense step of one worker on one core, measured on
 * the model's own shapes (the config's: the peer's model by default).
 *   1. each layer's matmuls through the dense seam (forward, backward data,
 *      the weights' SGD step in place): microseconds and GFLOP/s; their sum
 *      per batch gives the GEMM-bound ceiling, the examples/s of one core
 *      that did nothing but these matmuls;
 *   2. the whole dense step (model_forward + the fused SGD backward, on
 *      random pooled embeddings): examples/s, and the share of it spent in
 *      the matmuls (the rest: interaction, activations, bias sums, ...);
 *   3. the same step with dense Adagrad;
 *   4. with bf16, the refresh of the bf16 weights (every layer's
 *      conversion, made once per step) alone.
 * Built by `make` as build/dense_bench; tools/bench runs it (section 1).
 *   dense_bench [--seconds S] [--set section.key=value ...]
 * Its last line is JSON. */
#include "shadowsync/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double budget = 0.5; /* seconds per measurement */

/* Seconds per call of fn(arg), over about `budget` seconds (best of 3 thirds). */
static double per_call(void (*fn)(void *), void *arg)
{
    fn(arg); /* a first call makes the primitives */
    int reps = 1;
    double t0 = ss_now();
    while (ss_now() - t0 < budget / 30)
        fn(arg), reps++;
    reps = reps * 10 > 3 ? reps * 10 : 3;
    double best = INFINITY;
    for (int k = 0; k < 3; k++) {
        double t = ss_now();
        for (int i = 0; i < reps; i++)
            fn(arg);
        best = fmin(best, (ss_now() - t) / reps);
    }
    return best;
}

struct op {
    struct dense *d;
    int k, n, in, out, kind; /* kind 0 forward, 1 backward data, 2 weights' step */
    int relu;
    float *x, *w, *b, *y, *dy, *dx, *tw, *tb;
};

static void run_op(void *arg)
{
    struct op *o = arg;
    if (o->kind == 0)
        dense_fwd(o->d, o->k, o->x, o->w, o->b, o->y, o->n, o->relu);
    else if (o->kind == 1) { /* dx alone: the weights' half into a throwaway, subtracted below */
        dense_bwd(o->d, o->k, o->x, o->w, o->dy, o->tw, o->tb, o->dx, o->n, -1e-9f, 1.0f);
    } else {
        dense_bwd(o->d, o->k, o->x, o->w, o->dy, o->tw, o->tb, NULL, o->n, -1e-9f, 1.0f);
    }
}

struct step {
    const struct model_layout *l;
    float *p;
    struct batch *b;
    struct model_scratch *s;
};

static void run_step(void *arg)
{
    struct step *st = arg;
    model_forward(st->l, st->p, st->b, st->s);
    model_backward_sgd(st->l, st->p, st->b, st->s, 1e-9f);
}

struct ada {
    struct step st;
    float *state;
};

/* dense Adagrad as a worker steps it: the gradient, then the step over the
 * whole vector (fused into the backward layer by layer it ran no faster:
 * 3,009 against 3,006 us per batch of 128 here, alternated in one process) */
static void run_adagrad(void *arg)
{
    struct ada *a = arg;
    const struct model_layout *l = a->st.l;
    model_forward(l, a->st.p, a->st.b, a->st.s);
    model_backward(l, a->st.p, a->st.b, a->st.s);
    optim_dense_step(OPT_ADAGRAD, a->st.p, a->state, a->st.s->grad, l->n_params, 1e-9f, 1e-8f);
}

struct refresh {
    const struct model_layout *l;
    const float *p;
    uint16_t *out;
};

static void run_refresh(void *arg)
{
    struct refresh *r = arg;
    size_t at = 0;
    for (int k = 0; k < r->l->n_bot + r->l->n_top; k++) {
        int top = k >= r->l->n_bot, i = top ? k - r->l->n_bot : k;
        const int *w = top ? r->l->top : r->l->bot;
        size_t n = (size_t)w[i] * w[i + 1];
        ss_to_bf16(r->out + at, r->p + (top ? r->l->top_w[i] : r->l->bot_w[i]), n);
        at += n;
    }
}

int main(int argc, char **argv)
{
    char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc)
            sets[n_sets++] = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc && atof(argv[i + 1]) > 0)
            budget = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: dense_bench [--seconds S] [--set section.key=value ...]\n"
                            "  one worker's dense step on one core, on the config's model "
                            "(the peer's by default)\n");
            return 2;
        }
    }
    struct ss_config c;
    struct model_layout l;
    struct ss_err e = {0};
    if (ss_config_load(&c, NULL, sets, n_sets, &e) < 0 || model_layout_init(&l, &c, &e) < 0) {
        fprintf(stderr, "dense_bench: %s\n", e.msg);
        return 1;
    }
    int n = c.trainer.batch_size;
    struct model_scratch s;
    model_scratch_init(&s, &l, n);
    float *p = ss_aligned(l.n_params * sizeof(float));
    model_init_params(&l, p, 1);
    uint64_t r = 5;
    size_t widest = (size_t)n * model_widest(&l);
    float *x = ss_aligned(widest * 4), *y = ss_aligned(widest * 4), *dy = ss_aligned(widest * 4),
          *dx = ss_aligned(widest * 4), *tw = ss_aligned(l.n_params * 4);
    for (size_t i = 0; i < widest; i++)
        x[i] = (float)ss_uniform(&r), dy[i] = (float)(ss_normal(&r) * 1e-3);
    memcpy(tw, p, l.n_params * 4);

    printf("# dense_bench: batch %d, one core\n", n);
    double mm_total = 0, flops = 0;
    char layers[4096] = "";
    for (int k = 0; k < l.n_bot + l.n_top; k++) {
        int top = k >= l.n_bot, i = top ? k - l.n_bot : k;
        const int *wd = top ? l.top : l.bot;
        size_t wo = top ? l.top_w[i] : l.bot_w[i], bo = top ? l.top_b[i] : l.bot_b[i];
        struct op o = {s.mm, k, n, wd[i], wd[i + 1], 0, i < (top ? l.n_top : l.n_bot) - 1,
                       x, p + wo, p + bo, y, dy, dx, tw + wo, tw + bo};
        double t[3];
        for (o.kind = 0; o.kind < 3; o.kind++)
            t[o.kind] = (o.kind == 1 && k == 0) ? 0 : per_call(run_op, &o);
        if (k > 0)
            t[1] = fmax(t[1] - t[2], 0); /* backward data: the call with dx less the one without */
        double f = 2.0 * n * o.in * o.out;
        double lt = t[0] + t[1] + t[2], lf = f * (k > 0 ? 3 : 2);
        mm_total += lt, flops += lf;
        printf("  layer %d %4dx%-4d  forward %7.1f us  backward data %7.1f us  weights %7.1f us  "
               "%6.1f GFLOP/s\n", k, o.in, o.out, t[0] * 1e6, t[1] * 1e6, t[2] * 1e6,
               lf / lt * 1e-9);
        size_t m = strlen(layers);
        snprintf(layers + m, sizeof layers - m, "%s{\"in\": %d, \"out\": %d, \"us\": %.2f, "
                 "\"gflops\": %.2f}", k ? ", " : "", o.in, o.out, lt * 1e6, lf / lt * 1e-9);
    }
    double ceiling = n / mm_total;
    printf("  matmuls: %.1f us per batch, %.1f GFLOP/s, %.3f MFLOP per example: GEMM-bound "
           "ceiling %.0f examples/s per core\n", mm_total * 1e6, flops / mm_total * 1e-9,
           flops / n * 1e-6, ceiling);

    struct batch b;
    batch_init(&b, n, l.n_dense, l.n_tables);
    b.n = n;
    for (int i = 0; i < n; i++) {
        b.label[i] = ss_uniform(&r) < 0.25f;
        for (int k = 0; k < l.n_dense; k++)
            b.dense[i * l.n_dense + k] = (float)(ss_uniform(&r) * 10);
    }
    for (size_t i = 0; i < (size_t)n * l.n_tables * l.dim; i++)
        s.emb[i] = (float)(ss_normal(&r) * 0.05);
    struct step st = {&l, p, &b, &s};
    double step = per_call(run_step, &st);
    printf("  whole dense step: %.1f us per batch, %.0f examples/s per core; matmuls %.0f%% of "
           "it\n", step * 1e6, n / step, 100 * mm_total / step);
    struct ada ad = {st, ss_aligned(l.n_params * sizeof(float))};
    double ada = per_call(run_adagrad, &ad);
    printf("  with dense Adagrad (its step after the backward): %.1f us per batch, %.0f "
           "examples/s per core\n", ada * 1e6, n / ada);
    free(ad.state);
    double refresh = 0;
    if (l.precision == PREC_BF16) {
        struct refresh rf = {&l, p, ss_aligned(l.n_params * sizeof(uint16_t))};
        refresh = per_call(run_refresh, &rf);
        printf("  bf16 weights' refresh (all layers, once per step): %.1f us, %.1f%% of the step\n",
               refresh * 1e6, 100 * refresh / step);
        free(rf.out);
    }
    char desc[200];
    dense_describe(s.mm, desc, sizeof desc);
    printf("  %s\n", desc);
    printf("{\"backend\": \"%s\", \"precision\": \"%s\", \"kernels\": \"%s\", \"batch\": %d, "
           "\"mflop_per_example\": %.4f, \"matmul_gflops\": %.2f, \"ceiling_eps_per_core\": %.1f, "
           "\"step_eps_per_core\": %.1f, \"matmul_share\": %.4f, \"bf16_refresh_us\": %.2f, "
           "\"adagrad_step_eps_per_core\": %.1f, "
           "\"layers\": [%s]}\n",
           l.backend == DENSE_ONEDNN ? "onednn" : "openblas",
           l.precision == PREC_BF16 ? "bf16" : "fp32", desc, n, flops / n * 1e-6,
           flops / mm_total * 1e-9, ceiling, n / step, mm_total / step, refresh * 1e6, n / ada, layers);
    batch_free(&b);
    free(x), free(y), free(dy), free(dx), free(tw), free(p), free(sets);
    model_scratch_free(&s);
    model_layout_free(&l);
    ss_config_free(&c);
    return 0;
}
