/* The worker's step (src/trainer/step.c) with an embedding client of the
 * test's own: it looks up once and pushes once per batch; the batch is
 * scored with the weights before the step; the dense step is the model's
 * (SGD fused, Adagrad through the optimizer); the pushed gradients are the
 * pooled rows' (scaled back by mean pooling); a failed lookup or a
 * diverged forward trains nothing and pushes nothing; a failed push is
 * returned with its error. */
#include "check.h"
#include "layout.h"
#include "../src/trainer/step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { T = 2, DIM = 4, CAP = 16 };

/* The fake client: pooled rows computed from the ids, pushes kept. */
struct fake {
    struct emb_client c;
    int lookups, pushes, fail_lookup, fail_push;
    float pushed[CAP * T * DIM];
};

static int fake_lookup(struct emb_client *c, const struct batch *b, float *out, struct ss_err *e)
{
    struct fake *f = c->impl;
    f->lookups++;
    if (f->fail_lookup)
        return ss_fail(e, SS_EIO, "fake lookup failed");
    for (int i = 0; i < b->n; i++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)i * T + t) * DIM;
            for (int d = 0; d < DIM; d++)
                o[d] = 0;
            for (int k = b->off[i * T + t]; k < b->off[i * T + t + 1]; k++)
                for (int d = 0; d < DIM; d++)
                    o[d] += 0.01f * (float)(b->ids[k] % 7) * (float)(d + 1) - 0.02f;
        }
    return 0;
}

static int fake_push(struct emb_client *c, const struct batch *b, const float *g, struct ss_err *e)
{
    struct fake *f = c->impl;
    f->pushes++;
    if (f->fail_push)
        return ss_fail(e, SS_EIO, "fake push failed");
    memcpy(f->pushed, g, (size_t)b->n * T * DIM * sizeof(float));
    return 0;
}

static void fake_free(struct emb_client *c)
{
    (void)c;
}

static const struct emb_client_ops fake_ops = {"fake", fake_lookup, fake_push, fake_free,
                                               NULL, NULL};

static struct ss_config cfg;
static struct model_layout lay;

static int configure(const char *pooling, const char *opt)
{
    char p[64], o[64];
    snprintf(p, sizeof p, "model.pooling=%s", pooling);
    snprintf(o, sizeof o, "optim.dense=%s", opt);
    char *sets[] = {p, o, "model.dim=4", "model.rows=100,50", "data.cat_cols=1-2",
                    "model.bottom=13-8-4", "model.top=auto-8-1"};
    return load_layout(&cfg, &lay, sets, sizeof sets / sizeof *sets);
}

/* A batch of n examples: dense values, labels, bags of 1-3 ids. */
static void make_batch(struct batch *b, int n, uint64_t seed)
{
    b->n = n;
    b->off[0] = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        b->label[i] = (float)(ss_splitmix(&seed) % 2);
        for (int k = 0; k < b->n_dense; k++)
            b->dense[i * b->n_dense + k] = (float)(ss_splitmix(&seed) % 100);
        for (int t = 0; t < T; t++) {
            int bag = 1 + (int)(ss_splitmix(&seed) % 3);
            for (int k = 0; k < bag; k++)
                b->ids[at++] = ss_splitmix(&seed) % 1000;
            b->off[i * T + t + 1] = at;
        }
    }
}

static const char *label(char *buf, const char *pooling, const char *opt, const char *what)
{
    snprintf(buf, 160, "step (%s pooling, %s): %s", pooling, opt, what);
    return buf;
}

/* One step through step_train against the model's own calls on copies. */
static void test_step(const char *pooling, const char *opt)
{
    char name[160];
    if (configure(pooling, opt) < 0)
        return;
    size_t np = lay.n_params;
    float *w = ss_aligned(np * sizeof(float)), *st8 = ss_aligned(np * sizeof(float));
    float *rw = ss_aligned(np * sizeof(float)), *rst = ss_aligned(np * sizeof(float));
    model_init_params(&lay, w, 5);
    for (size_t i = 0; i < np; i++)
        st8[i] = 0.01f;
    memcpy(rw, w, np * sizeof(float));
    memcpy(rst, st8, np * sizeof(float));
    struct batch b;
    batch_init(&b, CAP, lay.n_dense, T);
    batch_reserve_ids(&b, CAP * T * 3);
    make_batch(&b, 13, 7);
    struct fake f = {.c = {&fake_ops, NULL}};
    f.c.impl = &f;
    struct step s;
    struct ss_err e = {0};
    int rc = step_init(&s, &lay, cfg.optim.dense, 1e-8f, w, st8, NULL, CAP, &e);
    struct ne_acc scored = {0};
    double t[3] = {0};
    if (rc == 0)
        rc = step_train(&s, &f.c, &b, 0.05f, &scored, t, &e);
    snprintf(name, sizeof name, "step (%s pooling, %s): trains a batch", pooling, opt);
    CHECK(rc == 0 && f.lookups == 1 && f.pushes == 1 && s.examples == 13, name,
          "rc %d (%s), lookups %d, pushes %d, examples %lld", rc, e.msg, f.lookups, f.pushes,
          (long long)s.examples);
    snprintf(name, sizeof name, "step (%s pooling, %s): its part times in order", pooling, opt);
    CHECK(t[0] > 0 && t[0] <= t[1] && t[1] <= t[2], name, "%f %f %f", t[0], t[1], t[2]);

    /* the reference: the same rows, pooled, forward, backward, step */
    struct model_scratch r;
    model_scratch_init(&r, &lay, CAP);
    fake_lookup(&f.c, &b, r.emb, NULL);
    model_pool_scale(&lay, &b, r.emb);
    model_forward(&lay, rw, &b, &r);
    struct ne_acc want = {0};
    ne_add(&want, r.prob, b.label, b.n);
    if (cfg.optim.dense == OPT_SGD) {
        model_backward_sgd(&lay, rw, &b, &r, 0.05f);
    } else {
        model_backward(&lay, rw, &b, &r);
        optim_dense_step(cfg.optim.dense, rw, rst, r.grad, np, 0.05f, 1e-8f);
    }
    model_pool_scale(&lay, &b, r.d_emb);
    snprintf(name, sizeof name, "step (%s pooling, %s): scored before it trains", pooling, opt);
    CHECK(fabs(scored.loss_sum - want.loss_sum) <= 1e-6 * fabs(want.loss_sum) &&
          scored.n == 13, name, "loss %.9g, want %.9g", scored.loss_sum, want.loss_sum);
    double dw = max_diff(w, rw, np), ds = max_diff(st8, rst, np);
    snprintf(name, sizeof name, "step (%s pooling, %s): the dense step is the model's", pooling,
             opt);
    CHECK(dw <= 1e-6 && ds <= 1e-6, name, "w %.3g, state %.3g",
          dw, ds);
    int moved = 0, state_moved = 0;
    float *w0 = ss_aligned(np * sizeof(float));
    model_init_params(&lay, w0, 5);
    for (size_t i = 0; i < np; i++)
        moved += w[i] != w0[i], state_moved += st8[i] != 0.01f;
    snprintf(name, sizeof name, "step (%s pooling, %s): parameters moved", pooling, opt);
    CHECK(moved > 0 && (cfg.optim.dense == OPT_SGD) == (state_moved == 0), name,
          "%d moved, %d states moved", moved, state_moved);
    double dg = max_diff(f.pushed, r.d_emb, (size_t)b.n * T * DIM);
    snprintf(name, sizeof name, "step (%s pooling, %s): pushes the pooled rows' gradients",
             pooling, opt);
    CHECK(dg <= 1e-6, name, "max diff %.3g", dg);

    /* a failed lookup: nothing trained, nothing pushed */
    memcpy(rw, w, np * sizeof(float));
    f.fail_lookup = 1;
    rc = step_train(&s, &f.c, &b, 0.05f, &scored, t, &e);
    CHECK(rc == SS_EIO && f.pushes == 1 && max_diff(w, rw, np) == 0 && strstr(e.msg, "fake lookup"),
          label(name, pooling, opt, "a failed lookup trains nothing and is returned"), "rc %d, pushes %d: %s", rc,
          f.pushes, e.msg);
    f.fail_lookup = 0;
    f.fail_push = 1;
    rc = step_train(&s, &f.c, &b, 0.05f, &scored, t, &e);
    CHECK(rc == SS_EIO && f.pushes == 2 && strstr(e.msg, "fake push"),
          label(name, pooling, opt, "a failed push is returned"), "rc %d: %s", rc, e.msg);
    f.fail_push = 0;

    /* a diverged model: NaN predictions train nothing, and say so */
    for (size_t i = 0; i < np; i++)
        w[i] = NAN;
    struct ne_acc nan_scored = {0};
    int pushes = f.pushes;
    s.advice = "the advice";
    rc = step_train(&s, &f.c, &b, 0.05f, &nan_scored, t, &e);
    CHECK(rc == SS_EINVAL && f.pushes == pushes && strstr(e.msg, "diverged") &&
          strstr(e.msg, "after 52 examples") && strstr(e.msg, "the advice"),
          label(name, pooling, opt, "a diverged forward trains nothing and names the advice"), "rc %d, pushes %d: %s",
          rc, f.pushes - pushes, e.msg);
    step_free(&s);
    model_scratch_free(&r);
    batch_free(&b);
    free(w), free(st8), free(rw), free(rst), free(w0);
}

int main(void)
{
    test_step("sum", "sgd");
    test_step("mean", "sgd");
    test_step("sum", "adagrad");
    ss_config_free(&cfg);
    model_layout_free(&lay);
    CHECK_DONE();
}
