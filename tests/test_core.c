/* Optimizer steps, NE/logloss/AUC and the embedding tables against hand
 * computations. */
#include "check.h"
#include "shadowsync/embps.h"

#include <math.h>
#include <string.h>

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void test_optim(void)
{
    float w[2] = {1.0f, -2.0f}, s[2] = {0.5f, 0.0f}, g[2] = {0.2f, -0.4f};
    optim_dense_step(OPT_SGD, w, s, g, 2, 0.5f, 0);
    CHECK(near(w[0], 0.9, 1e-6) && near(w[1], -1.8, 1e-6), "dense SGD step", "%g %g", w[0], w[1]);
    optim_dense_step(OPT_ADAGRAD, w, s, g, 2, 0.1f, 1e-8f);
    /* s0 = 0.5 + 0.04 = 0.54: w0 = 0.9 - 0.1*0.2/sqrt(0.54); s1 = 0.16: w1 = -1.8 + 0.1*0.4/0.4 */
    CHECK(near(s[0], 0.54, 1e-6) && near(w[0], 0.9 - 0.02 / sqrt(0.54), 1e-6) &&
              near(w[1], -1.7, 1e-6), "dense Adagrad step", "%g %g %g", s[0], w[0], w[1]);
    float row[3] = {1, 2, 3}, st = 1.0f, gr[3] = {1, 2, 2};
    optim_row_step(OPT_ROWWISE_ADAGRAD, row, &st, gr, 3, 0.3f, 0);
    /* state = 1 + (1+4+4)/3 = 4, step 0.3/2 = 0.15 */
    CHECK(near(st, 4, 1e-6) && near(row[0], 0.85, 1e-6) && near(row[2], 2.7, 1e-6),
          "row-wise Adagrad step", "%g %g %g", st, row[0], row[2]);
}

static void test_metrics(void)
{
    float p[4] = {0.9f, 0.2f, 0.6f, 0.4f}, y[4] = {1, 0, 0, 1};
    struct ne_acc a = {0};
    ne_add(&a, p, y, 4);
    double ll = -(log(0.9) + log(0.8) + log(0.4) + log(0.4)) / 4, h = log(2.0);
    CHECK(near(ne_logloss(&a), ll, 1e-6), "logloss by hand", "%g vs %g", ne_logloss(&a), ll);
    CHECK(near(ne_value(&a), ll / h, 1e-6), "NE = logloss / H(ctr) by hand", "%g", ne_value(&a));
    /* positives 0.9, 0.4; negatives 0.2, 0.6: pairs won 0.9>0.2, 0.9>0.6, 0.4>0.2 -> 3/4 */
    CHECK(near(metric_auc(p, y, 4), 0.75, 1e-9), "AUC by hand", "%g", metric_auc(p, y, 4));
    float pt[5] = {0.5f, 0.5f, 0.5f, 0.1f, 0.9f}, yt[5] = {1, 0, 0, 0, 1};
    /* positive 0.5 ties two negatives (0.5 credit each) and beats 0.1: 2/3 of its 3 pairs
     * = (1 + 0.5 + 0.5)... pairs: (0.5p vs 0.5n)x2 = 1, (0.5p vs 0.1) = 1, 0.9 wins all 3 -> 5/6 */
    CHECK(near(metric_auc(pt, yt, 5), 5.0 / 6, 1e-9), "AUC with ties gives half credit", "%g",
          metric_auc(pt, yt, 5));
    float one[2] = {0.3f, 0.7f}, ones[2] = {1, 1};
    CHECK(isnan(metric_auc(one, ones, 2)), "AUC of one class is undefined", "not NaN");
    CHECK(near(metric_bce(0.0, 1.0), -log(1e-7), 1e-9), "BCE clips at 1e-7", "%g",
          metric_bce(0.0, 1.0));
}

static void test_tables(void)
{
    int64_t rows[2] = {5, 7};
    struct emb_opts o = {.n_tables = 2, .dim = 2, .rows = rows, .opt = OPT_SGD, .lr = 0.5f, .seed = 3};
    struct emb_tables *t;
    struct ss_err e;
    CHECK(embps_create(&t, &o, &e) == 0, "tables created", "%s", e.msg);
    struct batch b;
    batch_init(&b, 2, 1, 2);
    /* example 0: table0 bag {1, 6} (6 mod 5 = 1: same row twice), table1 {3};
     * example 1: table0 {2}, table1 empty bag */
    uint64_t ids[] = {1, 6, 3, 2};
    int32_t off[] = {0, 2, 3, 4, 4};
    memcpy(b.ids, ids, sizeof ids);
    memcpy(b.off, off, sizeof off);
    b.n = 2;
    float out[8], before[8];
    embps_pool(t, &b, out);
    memcpy(before, out, sizeof out);
    CHECK(out[6] == 0 && out[7] == 0, "an empty bag pools to zero", "%g %g", out[6], out[7]);
    float g[8] = {1, 1, 0, 0, 0, 0, 0, 0}; /* gradient on example 0 table 0 only */
    embps_push(t, &b, g);
    embps_pool(t, &b, out);
    /* row 1 of table 0 got two SGD steps of 0.5: pooled (2 copies) moves by -2 */
    CHECK(near(out[0], before[0] - 2.0, 1e-6) && near(out[4], before[4], 1e-7),
          "push applies SGD to each id of the bag", "%g vs %g", out[0], before[0]);
    batch_free(&b);
    embps_free(t);
}

int main(void)
{
    test_optim();
    test_metrics();
    test_tables();
    CHECK_DONE();
}
