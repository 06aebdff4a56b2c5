/* Optimizer steps, NE/logloss/AUC and the embedding tables against hand
 * computations. */
#include "check.h"
#include "shadowsync/embps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The rates' schedule (optim_lr_scale) at its corners. */
static void test_lr_schedule(void)
{
    struct ss_config c;
    struct ss_err e = {0};
    CHECK(ss_config_load(&c, NULL, NULL, 0, &e) == 0, "default config", "%s", e.msg);
    CHECK(optim_lr_scale(&c, 0) == 1 && optim_lr_scale(&c, 1000000) == 1,
          "no schedule: the rates as set", "%g", optim_lr_scale(&c, 0));
    c.optim.warmup_examples = 1000;
    c.optim.decay_start = 2000, c.optim.decay_examples = 1000, c.optim.decay_to = 0.1;
    double s0 = optim_lr_scale(&c, 0), s1 = optim_lr_scale(&c, 499), s2 = optim_lr_scale(&c, 1000),
           s3 = optim_lr_scale(&c, 2000), s4 = optim_lr_scale(&c, 2500),
           s5 = optim_lr_scale(&c, 3000), s6 = optim_lr_scale(&c, 100000);
    CHECK(near(s0, 0.001, 1e-12) && near(s1, 0.5, 1e-12) && s2 == 1,
          "warmup: linear from 1/N to 1 over N examples", "%g %g %g", s0, s1, s2);
    CHECK(s3 == 1 && near(s4, 0.1 + 0.9 * 0.25, 1e-12) && near(s5, 0.1, 1e-12) &&
              near(s6, 0.1, 1e-12),
          "decay: as the square of the part left, to decay_to, held after", "%g %g %g %g", s3,
          s4, s5, s6);
    c.optim.decay_to = 0;
    CHECK(optim_lr_scale(&c, 5000) == 0, "decay to 0: no step after it", "%g",
          optim_lr_scale(&c, 5000));
    ss_config_free(&c);
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
    b.lr_scale = 0.25f; /* the rates' schedule: a quarter of the step */
    embps_push(t, &b, g);
    embps_pool(t, &b, out);
    CHECK(near(out[0], before[0] - 2.5, 1e-6), "a push at lr_scale 0.25 steps a quarter as far",
          "%g vs %g", out[0], before[0] - 2.5);

    /* weighted bags (libsvm values): ids 1 and 6 share table 0's row 1, weights 0.5 and 2
     * pool to 2.5 x the row; a push moves the row by lr x (0.5 + 2) x g */
    b.lr_scale = 1;
    float row0[8], wout[8];
    embps_pool(t, &b, row0);
    batch_weigh(&b, 4);
    b.wts[0] = 0.5f, b.wts[1] = 2.0f, b.wts[2] = -1.0f;
    embps_pool(t, &b, wout);
    CHECK(near(wout[0], 1.25 * row0[0], 1e-6) && near(wout[2], -row0[2], 1e-7) &&
              wout[4] == row0[4],
          "a weighted bag pools each row times its weight", "%g vs %g", wout[0], row0[0]);
    embps_push(t, &b, g);
    embps_pool(t, &b, out);
    CHECK(near(out[0], wout[0] - 2.5 * 0.5 * 2.5, 1e-5),
          "a weighted push steps each row by its weight's share", "%g vs %g", out[0],
          wout[0] - 3.125);
    batch_clear(&b);
    CHECK(!b.weighted && batch_wt(&b, 0) == 1.0f, "a cleared batch weighs every id 1", "%d",
          b.weighted);
    batch_free(&b);
    embps_free(t);
}

/* Rows are filled by several threads when a model is large: a whole table
 * must equal the same table made as small shards (filled by one thread),
 * row for row. */
static void test_tables_init_threads(void)
{
    int64_t rows[2] = {300000, 70001}, lo_whole[2] = {0, 0};
    int32_t gids[2] = {4, 9};
    struct emb_opts o = {.n_tables = 2, .dim = 3, .rows = rows, .opt = OPT_ROWWISE_ADAGRAD,
                         .init_acc = 0.25f, .seed = 11, .global_ids = gids, .row_lo = lo_whole};
    struct emb_tables *whole, *shard;
    struct ss_err e;
    CHECK(embps_create(&whole, &o, &e) == 0, "a large table created", "%s", e.msg);
    int64_t piece = 20000, diffs = 0, checked = 0;
    for (int k = 0; k < 2; k++)
        for (int64_t lo = 0; lo < rows[k]; lo += piece) {
            int64_t n = rows[k] - lo < piece ? rows[k] - lo : piece, tr = rows[k];
            struct emb_opts so = {.n_tables = 1, .dim = 3, .rows = &n, .opt = OPT_ROWWISE_ADAGRAD,
                                  .init_acc = 0.25f, .seed = 11, .global_ids = &gids[k],
                                  .table_rows = &tr, .row_lo = &lo};
            if (embps_create(&shard, &so, &e) != 0) {
                diffs++;
                continue;
            }
            /* pool every row of the shard from both: one id a bag */
            struct batch b;
            batch_init(&b, (int)n, 1, 1);
            struct batch bw;
            batch_init(&bw, (int)n, 1, 2);
            float *a = malloc(n * 3 * sizeof(float)), *w = malloc(n * 2 * 3 * sizeof(float));
            /* in the whole tables, table k's bag holds the row, the other is empty */
            for (int64_t i = 0; i < n; i++) {
                b.ids[i] = bw.ids[i] = (uint64_t)(lo + i);
                b.off[i] = bw.off[2 * i] = (int32_t)i;
                bw.off[2 * i + 1] = (int32_t)(k == 0 ? i + 1 : i);
            }
            b.off[n] = bw.off[2 * n] = (int32_t)n;
            b.n = bw.n = (int)n;
            embps_pool(shard, &b, a);
            embps_pool(whole, &bw, w);
            for (int64_t i = 0; i < n; i++, checked++)
                diffs += memcmp(a + i * 3, w + (i * 2 + k) * 3, 3 * sizeof(float)) != 0;
            free(a);
            free(w);
            batch_free(&b);
            batch_free(&bw);
            embps_free(shard);
        }
    CHECK(diffs == 0 && checked == rows[0] + rows[1],
          "a table filled by several threads equals its shards filled by one, row for row",
          "%lld of %lld rows differ", (long long)diffs, (long long)checked);
    embps_free(whole);
}

/* An error naming a ~2000-char path keeps the path's head and its reason
 * (cut in the middle, within the message's room). */
static void test_long_error(void)
{
    char path[2001];
    memset(path, 'd', sizeof path - 1);
    path[sizeof path - 1] = '\0';
    for (int i = 0; i < 2000; i += 100)
        path[i] = '/';
    path[243] = path[1264] = (char)0xC3; /* a UTF-8 char (two bytes) at each side of the cut */
    path[244] = path[1265] = (char)0xA9;
    struct ss_err e;
    int rc = ss_fail(&e, SS_EIO, "data.train: %s: No such file or directory", path);
    size_t n = strlen(e.msg);
    CHECK(rc == SS_EIO && e.code == SS_EIO && n < sizeof e.msg && n > sizeof e.msg - 8 &&
              !strncmp(e.msg, "data.train: /ddd", 16) && strstr(e.msg, "d ... d") &&
              !strcmp(e.msg + n - 28, "d: No such file or directory"),
          "an error naming a 2000-char path keeps its head and its reason", "%zu: %s", n, e.msg);
    for (size_t i = 0; i < n; i++) /* no UTF-8 char cut in two */
        if (((unsigned char)e.msg[i] == 0xC3) != (i + 1 < n && (unsigned char)e.msg[i + 1] == 0xA9))
            n = 0;
    rc = ss_fail(&e, SS_EINVAL, "short: %d", 7);
    CHECK(n && rc == SS_EINVAL && !strcmp(e.msg, "short: 7"), "a short error is kept whole",
          "%s", e.msg);
}

/* A file call that never returns (a hung file system): it reads the end
 * of a pipe nobody writes to. */
static int hang_job(void *arg, struct ss_err *e)
{
    (void)e;
    char c;
    return read(*(int *)arg, &c, 1) > 0 ? 0 : SS_EIO;
}

/* The writer (src/core/io.c): a file written whole from its spans in 4 MiB
 * steps; an error names the file; a stop gives up a call without progress
 * after 1 s, and later calls on its mount fail at once. Last: it raises
 * the stop, which the process keeps. */
static void test_writer(void)
{
    char dir[] = "/tmp/ss-writer-XXXXXX", p[128];
    if (!mkdtemp(dir))
        return;
    size_t n = (9u << 20) + 3; /* three steps, the last a short one */
    unsigned char *big = malloc(n), head[5] = "head";
    for (size_t i = 0; i < n; i++)
        big[i] = (unsigned char)(i * 7 + (i >> 20));
    struct ss_span parts[2] = {{head, 4}, {big, n}};
    struct ss_err e = {0};
    snprintf(p, sizeof p, "%s/f.bin", dir);
    int rc = ss_write_file(p, parts, 2, 1, NULL, &e);
    FILE *f = fopen(p, "rb");
    unsigned char *back = malloc(n + 4);
    size_t got = f ? fread(back, 1, n + 5, f) : 0;
    if (f)
        fclose(f);
    CHECK(rc == 0 && got == n + 4 && !memcmp(back, "head", 4) && !memcmp(back + 4, big, n),
          "writer: a file written whole from its spans", "rc %d, %zu of %zu bytes: %s", rc, got,
          n + 4, e.msg);
    snprintf(p, sizeof p, "%s/no/such/dir/f.bin", dir);
    rc = ss_write_file(p, parts, 1, 0, NULL, &e);
    CHECK(rc == SS_EIO && strstr(e.msg, p) && strstr(e.msg, "No such file"),
          "writer: a file that cannot be written is named, with the cause", "%d %s", rc, e.msg);
    int fds[2];
    if (pipe(fds) != 0)
        return;
    ss_halt_request(); /* a stop, as a signal's */
    double t0 = ss_now();
    snprintf(p, sizeof p, "%s/hung", dir);
    rc = ss_file_call(hang_job, &fds[0], sizeof fds[0], p, &e);
    double took = ss_now() - t0;
    CHECK(rc == SS_ESTOPPED && took >= 0.9 && took < 2.0 && strstr(e.msg, p) &&
              strstr(e.msg, "had made no progress for"),
          "writer: a stop gives up a call without progress after 1 s, naming it", "%d in %.2f s: %s",
          rc, took, e.msg);
    t0 = ss_now();
    snprintf(p, sizeof p, "%s/after.bin", dir);
    rc = ss_write_file(p, parts, 1, 0, NULL, &e);
    CHECK(rc == SS_ESTOPPED && ss_now() - t0 < 0.2 && strstr(e.msg, "not written") &&
              access(p, F_OK) != 0,
          "writer: later writes on the hung one's mount fail at once", "%d: %s", rc, e.msg);
    struct stat a, b;
    char shm[] = "/dev/shm/ss-writer-XXXXXX";
    if (stat("/dev/shm", &a) == 0 && stat(dir, &b) == 0 && a.st_dev != b.st_dev && mkdtemp(shm)) {
        snprintf(p, sizeof p, "%s/other.bin", shm);
        rc = ss_write_file(p, parts, 1, 0, NULL, &e);
        CHECK(rc == 0 && access(p, F_OK) == 0, "writer: a write on another mount still runs",
              "%d: %s", rc, e.msg);
        unlink(p);
        rmdir(shm);
    }
    free(big);
    free(back);
    snprintf(p, sizeof p, "rm -rf %s", dir);
    if (system(p) != 0)
        fprintf(stderr, "%s failed\n", p);
}

int main(void)
{
    test_long_error();
    test_optim();
    test_lr_schedule();
    test_metrics();
    test_tables();
    test_tables_init_threads();
    test_writer(); /* last: it raises the stop */
    CHECK_DONE();
}
