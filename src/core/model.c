/* DLRM forward and backward on one batch (DESIGN §1), CPU path.
 *
 * dense x -> log(1+max(x,0)) -> bottom MLP (ReLU between layers, none after
 * the last) -> v0; pooled embeddings v1..vT come in s->emb from the caller's
 * emb_client. Interaction: v0 concatenated with the dots vi.vj for i > j in
 * row-major lower-triangle order ((1,0),(2,0),(2,1),...), like the peer's
 * torch.tril_indices(n, n, -1). Top MLP -> logit -> sigmoid; loss is the mean
 * binary cross entropy, so gradients are those of the mean.
 * Weights are row-major [out x in] like torch.nn.Linear; the matmuls go
 * through the dense seam (dense.c: oneDNN or OpenBLAS, fp32 or bf16), one
 * thread per worker. Nothing here allocates after model_scratch_init: all
 * buffers are in struct model_scratch. */
#include "shadowsync/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int model_rows_parse(const struct ss_config *c, int64_t *rows, struct ss_err *e)
{
    int nt = 0;
    for (const char *p = c->model.rows; *p;) {
        char *end = (char *)p + 4;
        int is_auto = !strncmp(p, "auto", 4);
        long long v = is_auto ? MODEL_ROWS_AUTO : strtoll(p, &end, 10);
        if (end == p || (!is_auto && v <= 0) || (*end && *end != ','))
            return ss_fail(e, SS_EINVAL, "config: model.rows = \"%s\" is not a list of positive "
                           "integers (or auto)", c->model.rows);
        if (nt == SS_MAX_TABLES)
            return ss_fail(e, SS_EINVAL, "config: model.rows lists more than %d tables", SS_MAX_TABLES);
        rows[nt++] = v;
        p = *end ? end + 1 : end;
    }
    if (nt == 0)
        return ss_fail(e, SS_EINVAL, "config: model.rows is empty");
    if (nt > 1)
        return nt;
    /* One number: every table the same, as many tables as data.cat_cols. */
    int cols[SS_MAX_COLS];
    int ncat = ss_parse_named_cols(c->data.cat_cols, cols, SS_MAX_COLS, NULL, 0, e,
                                   "data.cat_cols");
    if (ncat < 0)
        return ncat;
    if (ncat == 0)
        return ss_config_fail(e, c, "data.cat_cols model.rows", "no categorical features "
                              "(data.cat_cols is empty, and model.rows gives one number)");
    for (int t = 1; t < ncat; t++)
        rows[t] = rows[0];
    return ncat;
}

int model_rows_auto(const struct ss_config *c)
{
    return strstr(c->model.rows, "auto") != NULL;
}

int model_layout_init(struct model_layout *l, const struct ss_config *c, struct ss_err *e)
{
    int dims[SS_MAX_LAYERS + 2];
    memset(l, 0, sizeof *l);
    int nb = ss_parse_dims(c->model.bottom, dims, SS_MAX_LAYERS + 1, e, "model.bottom");
    if (nb < 0)
        return nb;
    l->n_bot = nb - 1;
    memcpy(l->bot, dims, nb * sizeof(int));
    l->n_dense = l->bot[0];
    l->dim = c->model.dim;
    l->pooling = c->model.pooling;
    if (l->bot[l->n_bot] != l->dim)
        return ss_config_fail(e, c, "model.bottom model.dim", "model.bottom = %s must end at "
                              "model.dim = %d", c->model.bottom, l->dim);

    int64_t rows[SS_MAX_TABLES];
    int ncat = model_rows_parse(c, rows, e);
    if (ncat < 0)
        return ncat;
    if (model_rows_auto(c)) /* a verb that sizes none: train, plan, eval and inspect do */
        return ss_config_fail(e, c, "model.rows", "model.rows = %s: auto tables are sized when "
                              "train or plan starts (from data.train), or by eval from the "
                              "model's own; here give their rows as numbers", c->model.rows);
    l->n_tables = ncat;

    int T = l->n_tables, top_in = l->dim + (T + 1) * T / 2;
    const char *top = c->model.top;
    int nt_dims;
    if (strncmp(top, "auto-", 5) == 0) {
        nt_dims = ss_parse_dims(top + 5, dims + 1, SS_MAX_LAYERS, e, "model.top");
        if (nt_dims == SS_EINVAL && strchr(top + 5, '-') == NULL) /* "auto-1" */
            nt_dims = (dims[1] = atoi(top + 5)) > 0 ? 1 : SS_EINVAL;
        if (nt_dims < 0)
            return nt_dims;
        dims[0] = top_in;
        nt_dims++;
    } else {
        nt_dims = ss_parse_dims(top, dims, SS_MAX_LAYERS + 1, e, "model.top");
        if (nt_dims < 0)
            return nt_dims;
        if (dims[0] != top_in)
            return ss_config_fail(e, c, "model.top model.dim model.rows data.cat_cols",
                                  "model.top = %s must start at %d (dim %d + %d pairwise dots of "
                                  "%d vectors), or write it as auto-...",
                                  top, top_in, l->dim, (T + 1) * T / 2, T + 1);
    }
    if (dims[nt_dims - 1] != 1)
        return ss_fail(e, SS_EINVAL, "config: model.top = %s must end at 1 (the logit)", top);
    l->n_top = nt_dims - 1;
    memcpy(l->top, dims, nt_dims * sizeof(int));

    size_t off = 0;
    for (int i = 0; i < l->n_bot; i++) {
        l->bot_w[i] = off, off += (size_t)l->bot[i] * l->bot[i + 1];
        l->bot_b[i] = off, off += l->bot[i + 1];
    }
    for (int i = 0; i < l->n_top; i++) {
        l->top_w[i] = off, off += (size_t)l->top[i] * l->top[i + 1];
        l->top_b[i] = off, off += l->top[i + 1];
    }
    l->n_params = off;
    int rc = dense_resolve(c, &l->backend, &l->precision, e);
    if (rc < 0)
        return rc;
    l->rows = ss_xmalloc(ncat * sizeof(int64_t)); /* last: nothing to free on failure */
    memcpy(l->rows, rows, ncat * sizeof(int64_t));
    return 0;
}

void model_layout_free(struct model_layout *l)
{
    free(l->rows);
    l->rows = NULL;
}

static void init_layer(float *w, float *b, int in, int out, uint64_t *rng)
{
    double sw = sqrt(2.0 / (in + out)), sb = sqrt(1.0 / out);
    for (size_t i = 0; i < (size_t)in * out; i++)
        w[i] = (float)(ss_normal(rng) * sw);
    for (int i = 0; i < out; i++)
        b[i] = (float)(ss_normal(rng) * sb);
}

void model_init_params(const struct model_layout *l, float *p, uint64_t seed)
{
    uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 17;
    for (int i = 0; i < l->n_bot; i++)
        init_layer(p + l->bot_w[i], p + l->bot_b[i], l->bot[i], l->bot[i + 1], &rng);
    for (int i = 0; i < l->n_top; i++)
        init_layer(p + l->top_w[i], p + l->top_b[i], l->top[i], l->top[i + 1], &rng);
}

/* The interaction works on SS_LANES-float blocks kept in registers. Written
 * as one dot product per pair, each summed across its lanes, it took more
 * time than all the rest of the model outside sgemm; an accumulator left
 * in memory makes every add wait on the store before it. */
#define SS_LANES 16

static int vt_width(const struct model_layout *l)
{
    return (l->n_tables + 1 + SS_LANES - 1) / SS_LANES * SS_LANES;
}

void model_scratch_init(struct model_scratch *s, const struct model_layout *l, int cap)
{
    size_t n = cap, TD = (size_t)l->n_tables * l->dim;
    memset(s, 0, sizeof *s);
    s->cap = cap;
    s->x0 = ss_aligned(n * l->n_dense * sizeof(float));
    for (int i = 0; i < l->n_bot; i++)
        s->bot_act[i] = ss_aligned(n * l->bot[i + 1] * sizeof(float));
    for (int i = 0; i < l->n_top; i++)
        s->top_act[i] = ss_aligned(n * l->top[i + 1] * sizeof(float));
    s->emb = ss_aligned(n * TD * sizeof(float));
    s->top_in = ss_aligned(n * l->top[0] * sizeof(float));
    s->logit = s->top_act[l->n_top - 1];
    s->prob = ss_aligned(n * sizeof(float));
    s->d_a = ss_aligned(n * model_widest(l) * sizeof(float));
    s->d_b = ss_aligned(n * model_widest(l) * sizeof(float));
    s->d_top_in = ss_aligned(n * l->top[0] * sizeof(float));
    s->d_emb = ss_aligned(n * TD * sizeof(float));
    s->d_bot_out = ss_aligned(n * l->dim * sizeof(float));
    s->vt = ss_aligned((size_t)l->dim * vt_width(l) * sizeof(float));
    s->sym = ss_aligned((size_t)(l->n_tables + 1) * (l->n_tables + 1) * sizeof(float));
    s->grad = ss_aligned(l->n_params * sizeof(float));
    s->mm = dense_create(l, cap);
}

void model_scratch_free(struct model_scratch *s)
{
    free(s->x0);
    for (int i = 0; i < SS_MAX_LAYERS; i++) {
        free(s->bot_act[i]);
        free(s->top_act[i]);
    }
    free(s->emb);
    free(s->top_in);
    free(s->prob);
    free(s->d_a);
    free(s->d_b);
    free(s->d_top_in);
    free(s->d_emb);
    free(s->d_bot_out);
    free(s->vt);
    free(s->sym);
    free(s->grad);
    dense_free(s->mm);
    memset(s, 0, sizeof *s);
}

static void relu_bwd(float *restrict dy, const float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++) /* branch-free, so it vectorizes */
        dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static inline const float *vec(const struct model_layout *l, const struct model_scratch *s, int i,
                               int j)
{
    const float *bot = s->bot_act[l->n_bot - 1];
    return j == 0 ? bot + (size_t)i * l->dim
                  : s->emb + ((size_t)i * l->n_tables + (j - 1)) * l->dim;
}

/* SS_LANES floats in one register (GCC vector extension; loads and stores
 * through memcpy compile to single unaligned moves). Never passed or
 * returned by value: without AVX-512 (sanitizer builds) that is an ABI
 * change GCC warns about. */
typedef float lanes __attribute__((vector_size(SS_LANES * sizeof(float))));

/* out[0..SS_LANES) = sum over c < d of x[c] * m[c*ld + 0..SS_LANES) */
static inline void block_gemv(float *out, const float *restrict x, const float *restrict m, int d,
                              size_t ld)
{
    lanes acc = {0}, acc2 = {0}, t, u;
    int c = 0;
    for (; c + 1 < d; c += 2) {
        memcpy(&t, m + c * ld, sizeof t);
        memcpy(&u, m + (c + 1) * ld, sizeof u);
        acc += x[c] * t;
        acc2 += x[c + 1] * u;
    }
    if (c < d) {
        memcpy(&t, m + c * ld, sizeof t);
        acc += x[c] * t;
    }
    acc += acc2;
    memcpy(out, &acc, sizeof acc);
}

/* Pair (a, b), a > b, goes to d + a(a-1)/2 + b of the top input: for each a,
 * the dots with every b < a at once, from the example's vectors transposed
 * (vt[c][b] = v_b[c], lanes past V zero). */
static void interact_fwd(const struct model_layout *l, struct model_scratch *s, int n)
{
    int d = l->dim, V = l->n_tables + 1, w = l->top[0];
    size_t ld = vt_width(l);
    float *vt = s->vt;
    for (int i = 0; i < n; i++) {
        float *out = s->top_in + (size_t)i * w;
        for (int b = 0; b < V; b++) {
            const float *vb = vec(l, s, i, b);
            for (int c = 0; c < d; c++)
                vt[c * ld + b] = vb[c];
        }
        memcpy(out, vec(l, s, i, 0), d * sizeof(float));
        for (int a = 1; a < V; a++) {
            float *row = out + d + a * (a - 1) / 2;
            for (int b0 = 0; b0 < a; b0 += SS_LANES) {
                float dots[SS_LANES];
                block_gemv(dots, vec(l, s, i, a), vt + b0, d, ld);
                memcpy(row + b0, dots, (a - b0 < SS_LANES ? a - b0 : SS_LANES) * sizeof(float));
            }
        }
    }
}

/* The rows a and a + 1 of dv = S v at once (a + 1 < V, or alone when
 * `two` is 0): the two rows' sums share each vector's load and run as four
 * independent chains; each row's order of adds is the one-row loop's. */
static void interact_rows(const struct model_layout *l, const struct model_scratch *s, int i,
                          const float *g, const float *sa, const float *sb, float *dva,
                          float *dvb, int a, int two)
{
    int d = l->dim, V = l->n_tables + 1;
    int c0 = 0;
    for (; c0 + SS_LANES <= d; c0 += SS_LANES) {
        lanes acc = {0}, acc2 = {0}, bcc = {0}, bcc2 = {0}, t, u;
        if (a == 0)
            memcpy(&acc, g + c0, sizeof acc);
        int b = 0;
        for (; b + 1 < V; b += 2) {
            memcpy(&t, vec(l, s, i, b) + c0, sizeof t);
            memcpy(&u, vec(l, s, i, b + 1) + c0, sizeof u);
            acc += sa[b] * t;
            acc2 += sa[b + 1] * u;
            bcc += sb[b] * t;
            bcc2 += sb[b + 1] * u;
        }
        if (b < V) {
            memcpy(&t, vec(l, s, i, b) + c0, sizeof t);
            acc += sa[b] * t;
            bcc += sb[b] * t;
        }
        acc += acc2;
        bcc += bcc2;
        memcpy(dva + c0, &acc, sizeof acc);
        if (two)
            memcpy(dvb + c0, &bcc, sizeof bcc);
    }
    for (int c = c0; c < d; c++) { /* the dimension's tail */
        float t = a == 0 ? g[c] : 0.0f, u = 0.0f;
        for (int b = 0; b < V; b++) {
            t += sa[b] * vec(l, s, i, b)[c];
            u += sb[b] * vec(l, s, i, b)[c];
        }
        dva[c] = t;
        if (two)
            dvb[c] = u;
    }
}

/* dv_a = sum_b S_ab v_b, S the symmetric matrix of the pair gradients with a
 * zero diagonal; pair (hi, lo), hi > lo, sits at d + hi(hi-1)/2 + lo of the
 * top input. Per example: S whole (into s->sym), then the rows two at a
 * time (interact_rows), the vectors read in place (the bottom one is apart
 * from the tables' rows; gathering them made the dense half slower). Two
 * rows at a time, the same sums bit for bit: 117 against 91-97 us per
 * batch of 128 of the peer's model, alternated in one process. */
static void interact_bwd(const struct model_layout *l, struct model_scratch *s, int n)
{
    int d = l->dim, T = l->n_tables, V = T + 1, w = l->top[0];
    float *S = s->sym; /* [V x V] */
    for (int a = 0; a < V; a++)
        S[(size_t)a * V + a] = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *g = s->d_top_in + (size_t)i * w, *pair = g + d;
        for (int a = 1, at = 0; a < V; a++)
            for (int b = 0; b < a; b++, at++)
                S[(size_t)a * V + b] = S[(size_t)b * V + a] = pair[at];
        for (int a = 0; a < V; a += 2) {
            int two = a + 1 < V;
            float *dva = a == 0 ? s->d_bot_out + (size_t)i * d
                                : s->d_emb + ((size_t)i * T + (a - 1)) * d;
            float *dvb = s->d_emb + ((size_t)i * T + a) * d; /* row a + 1: a table's */
            interact_rows(l, s, i, g, S + (size_t)a * V, S + (size_t)(a + two) * V, dva, dvb, a,
                          two);
        }
    }
}

double model_forward(const struct model_layout *l, const float *p, const struct batch *b,
                     struct model_scratch *s)
{
    int n = b->n;
    for (size_t i = 0; i < (size_t)n * l->n_dense; i++) {
        float x = b->dense[i];
        s->x0[i] = log1pf(x > 0.0f ? x : 0.0f);
    }
    const float *in = s->x0;
    for (int i = 0; i < l->n_bot; i++) {
        dense_fwd(s->mm, i, in, p + l->bot_w[i], p + l->bot_b[i], s->bot_act[i], n,
                  i < l->n_bot - 1);
        in = s->bot_act[i];
    }
    interact_fwd(l, s, n);
    in = s->top_in;
    for (int i = 0; i < l->n_top; i++) {
        dense_fwd(s->mm, l->n_bot + i, in, p + l->top_w[i], p + l->top_b[i], s->top_act[i], n,
                  i < l->n_top - 1);
        in = s->top_act[i];
    }
    double loss = 0.0;
    for (int i = 0; i < n; i++) {
        float z = s->logit[i], y = b->label[i];
        s->prob[i] = 1.0f / (1.0f + expf(-z));
        loss += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
    }
    return n ? loss / n : 0.0;
}

/* The backward pass; the dense gradient goes to target as dense_bwd says. */
static void backward(const struct model_layout *l, const float *p, const struct batch *b,
                     struct model_scratch *s, float *target, float alpha, float beta)
{
    int n = b->n;
    float *dy = s->d_a, *dx = s->d_b;
    float inv = n ? 1.0f / n : 0.0f;
    for (int i = 0; i < n; i++)
        dy[i] = (s->prob[i] - b->label[i]) * inv;
    for (int i = l->n_top - 1; i >= 0; i--) {
        const float *x = i ? s->top_act[i - 1] : s->top_in;
        float *dxi = i ? dx : s->d_top_in;
        dense_bwd(s->mm, l->n_bot + i, x, p + l->top_w[i], dy, target + l->top_w[i],
                  target + l->top_b[i], dxi, n, alpha, beta);
        if (i) {
            relu_bwd(dx, s->top_act[i - 1], (size_t)n * l->top[i]);
            float *t = dy; dy = dx; dx = t;
        }
    }
    interact_bwd(l, s, n);
    memcpy(dy, s->d_bot_out, (size_t)n * l->dim * sizeof(float));
    for (int i = l->n_bot - 1; i >= 0; i--) {
        const float *x = i ? s->bot_act[i - 1] : s->x0;
        dense_bwd(s->mm, i, x, p + l->bot_w[i], dy, target + l->bot_w[i], target + l->bot_b[i],
                  i ? dx : NULL, n, alpha, beta);
        if (i) {
            relu_bwd(dx, s->bot_act[i - 1], (size_t)n * l->bot[i]);
            float *t = dy; dy = dx; dx = t;
        }
    }
}

void model_backward(const struct model_layout *l, const float *p, const struct batch *b,
                    struct model_scratch *s)
{
    backward(l, p, b, s, s->grad, 1.0f, 0.0f);
}

void model_backward_sgd(const struct model_layout *l, float *p, const struct batch *b,
                        struct model_scratch *s, float lr)
{
    backward(l, p, b, s, p, -lr, 1.0f);
}

void model_pool_scale(const struct model_layout *l, const struct batch *b, float *v)
{
    if (l->pooling != POOL_MEAN)
        return;
    int T = l->n_tables, d = l->dim;
    for (int k = 0; k < b->n * T; k++) {
        int len = b->off[k + 1] - b->off[k];
        if (len < 2)
            continue; /* an empty bag pools to zeros either way */
        float inv = 1.0f / (float)len, *x = v + (size_t)k * d;
        for (int i = 0; i < d; i++)
            x[i] *= inv;
    }
}
