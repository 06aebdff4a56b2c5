/* `shadowsync gen` (DESIGN §5): Criteo-shaped synthetic data whose labels
 * come from a hidden teacher, with the teacher's probabilities written
 * beside the data so the best achievable NE (the Bayes NE) is known.
 *
 * Dense column j: floor(exp(N(0,1)·sigma_j)), heavy-tailed counts, empty with
 * probability 5–40 %. Categorical feature t: a popularity rank r drawn from a
 * continuous power law (exponent 1.05–1.2, inverse CDF, O(1)), printed as an
 * 8-hex-digit 32-bit hash of (t, r); a few features are sometimes empty.
 * Teacher logit = bias + scale·(Σ_j a_j·log1p(x_j) + Σ_t s_t·u(t,r)
 *                                + Σ_pairs ⟨v(t1,r1), v(t2,r2)⟩),
 * u and v being gaussians hashed from (seed, t, r): nothing is stored per id.
 * A multi-hot feature (--bag-size K with the config's data.multihot_cols)
 * holds a bag of 1 to 2K-1 ranks drawn alike; its u and v are the sums over
 * the bag times 1/sqrt(K), so the model's sum-pooled bag can learn them.
 * bias and scale are calibrated on a sample so the CTR is ~0.25 and the Bayes
 * NE ~0.80 whatever the shape. Everything follows from the seed, so the same
 * seed writes the same bytes. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PAIRS 8
#define MAX_BAG 64
#define VDIM 4
#define TARGET_CTR 0.25
#define TARGET_NE 0.80
#define CALIB_SAMPLES 8192
#define PROGRESS_S 2.0

struct teacher {
    uint64_t seed;
    int nd, nt;
    double *sigma, *miss_d, *a;        /* [nd] */
    double *miss_c, *s, *pl_c, *pl_inv; /* [nt]; power-law sampler constants */
    const int64_t *card;
    const int *mh;                     /* [nt] multi-hot, or NULL */
    int maxk;                          /* the largest bag */
    double bag_c;                      /* 1/sqrt(K) */
    int n_pairs, pa[MAX_PAIRS], pb[MAX_PAIRS];
    double v_scale, scale, bias;
};

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A deterministic ~N(0,1) of (seed, t, r, k): Irwin–Hall of four 16-bit
 * uniforms of one hash (cheap, tails cut at ±3.46). */
static inline double hash_gauss(uint64_t seed, int t, int64_t r, int k)
{
    uint64_t key = (uint64_t)r * 0x9E3779B97F4A7C15ull + (uint64_t)t * 0xC2B2AE3D27D4EB4Full +
                   (uint64_t)k * 0x165667B1ull;
    uint64_t h = mix64(seed ^ mix64(key));
    double sum = (double)(h & 0xffff) + (double)(h >> 16 & 0xffff) + (double)(h >> 32 & 0xffff) +
                 (double)(h >> 48);
    return (sum / 65536.0 - 2.0) * 1.7320508075688772;
}

static inline uint32_t token_of(int t, int64_t r)
{
    return (uint32_t)(mix64(((uint64_t)(t + 1) << 40) ^ (uint64_t)r) >> 32);
}

static int64_t draw_rank(const struct teacher *tc, int t, double u)
{
    double x = pow(tc->pl_c[t] * u + 1.0, tc->pl_inv[t]);
    int64_t r = (int64_t)x - 1;
    if (r < 0)
        r = 0;
    if (r >= tc->card[t])
        r = tc->card[t] - 1;
    return r;
}

/* A feature's v: the sum over its bag (scaled when multi-hot). */
static void bag_v(const struct teacher *tc, int t, const int64_t *rank, int len, double *v)
{
    double c = tc->mh && tc->mh[t] ? tc->bag_c : 1.0;
    for (int k = 0; k < VDIM; k++) {
        v[k] = 0.0;
        for (int i = 0; i < len; i++)
            v[k] += hash_gauss(tc->seed, t, rank[i], 1 + k);
        v[k] *= c;
    }
}

/* Draws one example's features (dense -1 = missing; feature t's ranks at
 * rank[t·maxk], len[t] of them, 0 = missing) and returns the teacher's
 * logit before bias and scale. */
static double draw_example(const struct teacher *tc, uint64_t *rng, int64_t *dense, int64_t *rank,
                           int *len)
{
    double z = 0.0;
    for (int j = 0; j < tc->nd; j++) {
        if (ss_uniform(rng) < tc->miss_d[j]) {
            dense[j] = -1;
            continue;
        }
        double x = floor(exp(ss_normal(rng) * tc->sigma[j]));
        if (x > 1e12)
            x = 1e12;
        dense[j] = (int64_t)x;
        z += tc->a[j] * log1p(x);
    }
    for (int t = 0; t < tc->nt; t++) {
        int64_t *r = rank + (size_t)t * tc->maxk;
        if (!tc->mh || !tc->mh[t]) { /* one-hot: the draws of the first version */
            double u = ss_uniform(rng), m = ss_uniform(rng);
            len[t] = m >= tc->miss_c[t];
            if (len[t]) {
                r[0] = draw_rank(tc, t, u);
                z += tc->s[t] * hash_gauss(tc->seed, t, r[0], 0);
            }
            continue;
        }
        len[t] = 0;
        if (ss_uniform(rng) < tc->miss_c[t])
            continue;
        len[t] = 1 + (int)(ss_splitmix(rng) % (uint64_t)tc->maxk);
        double u = 0.0;
        for (int i = 0; i < len[t]; i++) {
            r[i] = draw_rank(tc, t, ss_uniform(rng));
            u += hash_gauss(tc->seed, t, r[i], 0);
        }
        z += tc->s[t] * tc->bag_c * u;
    }
    for (int q = 0; q < tc->n_pairs; q++) {
        int t1 = tc->pa[q], t2 = tc->pb[q];
        if (!len[t1] || !len[t2])
            continue;
        double v1[VDIM], v2[VDIM], d = 0.0;
        bag_v(tc, t1, rank + (size_t)t1 * tc->maxk, len[t1], v1);
        bag_v(tc, t2, rank + (size_t)t2 * tc->maxk, len[t2], v2);
        for (int k = 0; k < VDIM; k++)
            d += v1[k] * v2[k];
        z += tc->v_scale * tc->v_scale * d;
    }
    return z;
}

static inline double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static double entropy(double p)
{
    if (p <= 0.0 || p >= 1.0)
        return 0.0;
    return -(p * log(p) + (1.0 - p) * log(1.0 - p));
}

static double bce(double p, double y)
{
    const double lo = 1e-7, hi = 1.0 - 1e-7;
    p = p < lo ? lo : p > hi ? hi : p;
    return y > 0.5 ? -log(p) : -log(1.0 - p);
}

/* The bias making the mean probability TARGET_CTR at this scale. */
static double calib_bias(const double *z, int n, double scale)
{
    double lo = -40.0, hi = 40.0;
    for (int it = 0; it < 50; it++) {
        double mid = 0.5 * (lo + hi), m = 0.0;
        for (int i = 0; i < n; i++)
            m += sigmoid(mid + scale * z[i]);
        if (m / n < TARGET_CTR)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

static double calib_ne(const double *z, int n, double scale, double bias)
{
    double h = 0.0, m = 0.0;
    for (int i = 0; i < n; i++) {
        double p = sigmoid(bias + scale * z[i]);
        h += entropy(p);
        m += p;
    }
    return (h / n) / entropy(m / n);
}

static int any_multihot(const struct gen_opts *o)
{
    int any = 0;
    for (int t = 0; o->multihot && t < o->n_tables; t++)
        any |= o->multihot[t] != 0;
    return any;
}

static void teacher_init(struct teacher *tc, const struct gen_opts *o)
{
    uint64_t rng = mix64(o->seed ^ 0x7EAC4E5ull);
    memset(tc, 0, sizeof *tc);
    tc->seed = mix64(o->seed + 0x51ED);
    tc->nd = o->n_dense;
    tc->nt = o->n_tables;
    tc->card = o->cardinality;
    int any = any_multihot(o);
    tc->mh = any ? o->multihot : NULL;
    tc->maxk = any ? 2 * o->bag_size - 1 : 1;
    tc->bag_c = any ? 1.0 / sqrt((double)o->bag_size) : 1.0;
    tc->sigma = ss_xcalloc((size_t)tc->nd + 1, sizeof(double));
    tc->miss_d = ss_xcalloc((size_t)tc->nd + 1, sizeof(double));
    tc->a = ss_xcalloc((size_t)tc->nd + 1, sizeof(double));
    tc->miss_c = ss_xcalloc((size_t)tc->nt + 1, sizeof(double));
    tc->s = ss_xcalloc((size_t)tc->nt + 1, sizeof(double));
    tc->pl_c = ss_xcalloc((size_t)tc->nt + 1, sizeof(double));
    tc->pl_inv = ss_xcalloc((size_t)tc->nt + 1, sizeof(double));
    for (int j = 0; j < tc->nd; j++) {
        tc->sigma[j] = 0.8 + 2.2 * ss_uniform(&rng);
        tc->miss_d[j] = 0.05 + 0.35 * ss_uniform(&rng);
        tc->a[j] = 0.3 * ss_normal(&rng);
    }
    for (int t = 0; t < tc->nt; t++) {
        double alpha = 1.05 + 0.15 * ss_uniform(&rng);
        tc->pl_c[t] = pow((double)tc->card[t] + 1.0, 1.0 - alpha) - 1.0;
        tc->pl_inv[t] = 1.0 / (1.0 - alpha);
        double u = ss_uniform(&rng);
        tc->miss_c[t] = u < 0.4 ? 0.005 + 0.1 * ss_uniform(&rng) : 0.0;
        tc->s[t] = 0.2 + 0.6 * ss_uniform(&rng);
    }
    int max_pairs = tc->nt * (tc->nt - 1) / 2;
    tc->n_pairs = max_pairs < MAX_PAIRS ? max_pairs : MAX_PAIRS;
    for (int q = 0; q < tc->n_pairs;) {
        int t1 = (int)(ss_splitmix(&rng) % (uint64_t)tc->nt);
        int t2 = (int)(ss_splitmix(&rng) % (uint64_t)tc->nt);
        if (t1 == t2)
            continue;
        if (t1 > t2) {
            int x = t1;
            t1 = t2;
            t2 = x;
        }
        int dup = 0;
        for (int k = 0; k < q; k++)
            dup |= tc->pa[k] == t1 && tc->pb[k] == t2;
        if (dup)
            continue;
        tc->pa[q] = t1;
        tc->pb[q++] = t2;
    }
    tc->v_scale = 0.7;

    /* scale and bias: CTR ~ TARGET_CTR, Bayes NE ~ TARGET_NE (DESIGN §3's NE) */
    double *z = ss_xmalloc(CALIB_SAMPLES * sizeof *z);
    int64_t *dense = ss_xcalloc((size_t)tc->nd + 1, sizeof *dense);
    int64_t *rank = ss_xcalloc((size_t)tc->nt * tc->maxk + 1, sizeof *rank);
    int *len = ss_xcalloc((size_t)tc->nt + 1, sizeof *len);
    uint64_t crng = mix64(o->seed ^ 0xCA1Bull);
    for (int i = 0; i < CALIB_SAMPLES; i++)
        z[i] = draw_example(tc, &crng, dense, rank, len);
    double lo = 0.0, hi = 20.0;
    if (calib_ne(z, CALIB_SAMPLES, hi, calib_bias(z, CALIB_SAMPLES, hi)) > TARGET_NE) {
        lo = hi; /* too little signal to reach the target: use the most there is */
    } else {
        for (int it = 0; it < 30; it++) {
            double mid = 0.5 * (lo + hi);
            if (calib_ne(z, CALIB_SAMPLES, mid, calib_bias(z, CALIB_SAMPLES, mid)) > TARGET_NE)
                lo = mid;
            else
                hi = mid;
        }
    }
    tc->scale = 0.5 * (lo + hi);
    tc->bias = calib_bias(z, CALIB_SAMPLES, tc->scale);
    free(z);
    free(dense);
    free(rank);
    free(len);
}

static void teacher_free(struct teacher *tc)
{
    free(tc->sigma);
    free(tc->miss_d);
    free(tc->a);
    free(tc->miss_c);
    free(tc->s);
    free(tc->pl_c);
    free(tc->pl_inv);
}

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_hex8(char *p, uint32_t v)
{
    static const char hex[] = "0123456789abcdef";
    for (int k = 7; k >= 0; k--)
        *p++ = hex[(v >> (4 * k)) & 15];
    return p;
}

/* p as "%.6f" (p in [0,1]). */
static char *put_prob(char *p, double x)
{
    int64_t v = (int64_t)(x * 1e6 + 0.5);
    if (v < 0)
        v = 0;
    if (v > 1000000)
        v = 1000000;
    *p++ = v == 1000000 ? '1' : '0';
    *p++ = '.';
    v %= 1000000;
    for (int k = 5; k >= 0; k--) {
        p[k] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + 6;
}

struct split_result {
    double loss, labels;
    int64_t n;
};

static FILE *open_out(const char *dir, const char *name, char *path, size_t cap, char *buf,
                      struct ss_err *e)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        ss_fail(e, SS_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    setvbuf(f, buf, _IOFBF, 1u << 20);
    return f;
}

static int close_out(FILE *f, const char *path, int rc, struct ss_err *e)
{
    if (!f)
        return rc;
    int bad = ferror(f);
    if (fclose(f) || bad)
        return rc ? rc : ss_fail(e, SS_EIO, "%s: write failed: %s", path, strerror(errno));
    return rc;
}

/* Writes name.tsv and name.prob with n examples from stream rng. */
static int write_split(const struct teacher *tc, const char *dir, const char *name, int64_t n,
                       uint64_t rng, char sep, struct split_result *res, struct ss_err *e)
{
    size_t cap = strlen(dir) + strlen(name) + 16;
    char *tsv_path = ss_xmalloc(cap), *prob_path = ss_xmalloc(cap);
    char *tsv_buf = ss_xmalloc(1u << 20), *prob_buf = ss_xmalloc(1u << 20);
    char *line = ss_xmalloc(4 + 24 * (size_t)tc->nd + (size_t)tc->nt * (1 + 9 * tc->maxk));
    int64_t *dense = ss_xcalloc((size_t)tc->nd + 1, sizeof *dense);
    int64_t *rank = ss_xcalloc((size_t)tc->nt * tc->maxk + 1, sizeof *rank);
    int *len = ss_xcalloc((size_t)tc->nt + 1, sizeof *len);
    char tsv_name[256], prob_name[256];
    snprintf(tsv_name, sizeof tsv_name, "%s.tsv", name);
    snprintf(prob_name, sizeof prob_name, "%s.prob", name);
    memset(res, 0, sizeof *res);
    int rc = 0;
    FILE *ft = open_out(dir, tsv_name, tsv_path, cap, tsv_buf, e), *fp = NULL;
    if (!ft)
        rc = SS_EIO;
    else if (!(fp = open_out(dir, prob_name, prob_path, cap, prob_buf, e)))
        rc = SS_EIO;
    double t0 = ss_now(), last = t0;
    for (int64_t i = 0; i < n && !rc; i++) {
        double p = sigmoid(tc->bias + tc->scale * draw_example(tc, &rng, dense, rank, len));
        int y = ss_uniform(&rng) < p;
        char *q = line;
        *q++ = (char)('0' + y);
        for (int j = 0; j < tc->nd; j++) {
            *q++ = '\t';
            if (dense[j] >= 0)
                q = put_u64(q, (uint64_t)dense[j]);
        }
        for (int t = 0; t < tc->nt; t++) {
            *q++ = '\t';
            for (int i = 0; i < len[t]; i++) {
                if (i)
                    *q++ = sep;
                q = put_hex8(q, token_of(t, rank[(size_t)t * tc->maxk + i]));
            }
        }
        *q++ = '\n';
        char pl[16];
        char *pe = put_prob(pl, p);
        *pe++ = '\n';
        if (fwrite(line, 1, (size_t)(q - line), ft) != (size_t)(q - line) ||
            fwrite(pl, 1, (size_t)(pe - pl), fp) != (size_t)(pe - pl))
            rc = ss_fail(e, SS_EIO, "%s/%s: write failed: %s", dir, name, strerror(errno));
        res->loss += bce(p, y);
        res->labels += y;
        res->n++;
        if ((i & 0xffff) == 0xffff) {
            double now = ss_now();
            if (now - last >= PROGRESS_S) {
                ss_log("gen: %s %lld/%lld lines (%.0f lines/s)", tsv_name, (long long)(i + 1),
                       (long long)n, (double)(i + 1) / (now - t0));
                last = now;
            }
        }
    }
    rc = close_out(ft, tsv_path, rc, e);
    rc = close_out(fp, prob_path, rc, e);
    free(tsv_path);
    free(prob_path);
    free(tsv_buf);
    free(prob_buf);
    free(line);
    free(dense);
    free(rank);
    free(len);
    return rc;
}

int gen_write(const struct gen_opts *o, double *bayes_ne, struct ss_err *e)
{
    if (!o->out_dir || !*o->out_dir)
        return ss_fail(e, SS_EINVAL, "gen: no output directory");
    if (o->examples < 0 || o->eval_examples < 0)
        return ss_fail(e, SS_EINVAL, "gen: negative example count");
    if (o->n_dense < 0 || o->n_dense > SS_MAX_COLS || o->n_tables < 0 ||
        o->n_tables > SS_MAX_COLS || 1 + o->n_dense + o->n_tables > SS_MAX_COLS)
        return ss_fail(e, SS_EINVAL, "gen: %d dense and %d categorical features is out of range",
                       o->n_dense, o->n_tables);
    for (int t = 0; t < o->n_tables; t++)
        if (!o->cardinality || o->cardinality[t] < 1)
            return ss_fail(e, SS_EINVAL, "gen: feature %d needs a cardinality of at least 1", t);
    int any = any_multihot(o);
    if (any && (o->bag_size < 1 || o->bag_size > MAX_BAG))
        return ss_fail(e, SS_EINVAL, "gen: a bag size of %d is out of range (1 to %d)",
                       o->bag_size, MAX_BAG);
    char sep = o->multihot_sep ? o->multihot_sep : ',';
    if (any && (sep == '\t' || sep == '\n' || sep == '\r' || isxdigit((unsigned char)sep)))
        return ss_fail(e, SS_EINVAL, "gen: '%c' cannot separate a bag's hex ids", sep);
    int rc = ss_mkdir_p(o->out_dir, e);
    if (rc)
        return rc;
    struct teacher tc;
    teacher_init(&tc, o);
    struct split_result tr, ev;
    rc = write_split(&tc, o->out_dir, "train", o->examples, mix64(o->seed ^ 0x7A1Full), sep, &tr,
                     e);
    if (!rc)
        rc = write_split(&tc, o->out_dir, "eval", o->eval_examples, mix64(o->seed ^ 0xE7A1ull),
                         sep, &ev, e);
    teacher_free(&tc);
    if (rc)
        return rc;
    const struct split_result *r = ev.n ? &ev : &tr;
    double ctr = r->n ? r->labels / (double)r->n : 0.0;
    double h = entropy(ctr);
    if (bayes_ne)
        *bayes_ne = h > 0 ? (r->loss / (double)r->n) / h : NAN;
    return 0;
}

int gen_multihot_features(const struct gen_opts *o)
{
    int n = 0;
    for (int t = 0; o->multihot && t < o->n_tables; t++)
        n += o->multihot[t] != 0;
    return n;
}

static const int64_t criteo_cardinality[26] = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

void gen_criteo_shape(struct gen_opts *o)
{
    o->n_dense = 13;
    o->n_tables = 26;
    o->cardinality = criteo_cardinality;
    o->multihot = NULL;
}

/* The config's text schema, when gen's files (label, dense, categorical
 * columns in that order, tab-separated, hex ids) are what it reads; a
 * config of binary shards gives only the model's shape (its multi-hot
 * columns and layout are convert's business). */
static int gen_schema(const struct ss_config *c, const struct model_layout *l, struct schema *s,
                      struct ss_err *e)
{
    int rc = schema_from_config(s, c, NULL, e);
    if (rc < 0)
        return rc;
    if (s->format == FMT_BINARY) {
        memset(s->is_multihot, 0, sizeof s->is_multihot);
        return 0;
    }
    if (s->n_dense != l->n_dense || s->n_cat != l->n_tables)
        return ss_config_fail(e, c, "data.dense_cols data.cat_cols model.bottom model.rows",
                              "gen: the model takes %d dense and %d categorical features, the "
                              "config's data columns hold %d and %d", l->n_dense, l->n_tables,
                              s->n_dense, s->n_cat);
    int dense_ok = 1, cat_ok = 1;
    for (int j = 0; j < s->n_dense; j++)
        dense_ok &= s->dense_cols[j] == 1 + j;
    for (int t = 0; t < s->n_cat; t++)
        cat_ok &= s->cat_cols[t] == 1 + s->n_dense + t;
    static const char *const keys[] = {"data.separator", "data.header", "data.label_col",
                                       "data.dense_cols", "data.cat_cols", "data.cat_encoding"};
    static const char *const what[] = {
        "data.separator (gen writes tabs)", "data.header (gen writes none)",
        "data.label_col (gen writes it in column 0)", "data.dense_cols (gen writes them next)",
        "data.cat_cols (gen writes them last)", "data.cat_encoding = dec (gen writes hex ids)"};
    int bad = s->sep != '\t'              ? 0
              : s->header_lines            ? 1
              : s->label_col != 0          ? 2
              : !dense_ok                  ? 3
              : !cat_ok                    ? 4
              : s->cat_encoding == CAT_DEC ? 5
                                           : -1;
    if (bad >= 0)
        return ss_config_fail(e, c, keys[bad], "gen: it writes tab-separated text, label in "
                              "column 0, then the %d dense and %d categorical columns in order, "
                              "hex ids, no header; the config's %s reads another layout",
                              s->n_dense, s->n_cat, what[bad]);
    return 0;
}

int gen_shape_from_config(struct gen_opts *o, const struct ss_config *c, struct model_layout *l,
                          struct schema *s, struct ss_err *e)
{
    memset(l, 0, sizeof *l);
    if (model_rows_auto(c)) /* (auto sizes a run's tables from data like gen's) */
        return ss_config_fail(e, c, "model.rows", "gen: model.rows = %s: gen draws each "
                              "table's ids from as many values as its model.rows, so it needs "
                              "numbers (the vocabularies)", c->model.rows);
    int rc = model_layout_init(l, c, e);
    if (rc == 0)
        rc = gen_schema(c, l, s, e);
    if (rc < 0)
        return rc;
    o->n_dense = l->n_dense;
    o->n_tables = l->n_tables;
    o->cardinality = l->rows;
    o->multihot = s->is_multihot;
    o->multihot_sep = s->multihot_sep;
    return 0;
}

int gen_run(const struct gen_opts *o, FILE *out, struct ss_err *e)
{
    double bayes = 0;
    int rc = gen_write(o, &bayes, e), bags = gen_multihot_features(o);
    if (rc < 0)
        return rc;
    if (bags)
        fprintf(out, "# %d multi-hot feature(s), bags of 1 to %d ids\n", bags, 2 * o->bag_size - 1);
    fprintf(out, "bayes_ne=%.6f\n", bayes);
    fprintf(out, "# bayes_ne: the best NE on the %s split (the generator's own probabilities)%s%s\n",
            o->eval_examples ? "eval" : "train",
            o->eval_examples ? "" : ", as there is no eval split",
            isnan(bayes) ? "; nan: its labels are all 0 or all 1 (too few examples)" : "");
    return 0;
}
