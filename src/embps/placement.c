/* The placement pass (DESIGN §4): which rows of which table each embedding
 * PS holds.
 *
 * The profile reads placement.profile_batches batches of data.train and,
 * per table, counts lookups per example and where in the rows they fall (64
 * buckets), then times a real pooled lookup + push of those bags on a table
 * of the same dim on this machine: the load of a table is that measured
 * time per example. Memory is rows x (dim + state) x 4 B.
 *
 * The packer minimizes the most loaded PS within each PS's memory: a table
 * whose load or memory alone exceeds the even share is first split by row
 * ranges into pieces of equal load; pieces go longest-processing-time first
 * to the least loaded PS with room (by bytes first-fit when memory is what
 * binds), then single moves and pairwise swaps lower the busiest PS until no
 * step does. Pins (placement.pin) are placed first and never moved. */
#include "shadowsync/embps.h"
#include "shadowsync/reader.h"

#include <errno.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PS_BASE_BYTES (64.0 * 1048576)   /* a PS's process, Thrift buffers, BLAS */
#define PROFILE_MAX_ROWS (1 << 24)        /* cost table: past the caches either way */
#define PROFILE_MIN_S 0.05                /* time each table's lookups at least this long */
#define MAX_SPLIT_ROUNDS 6

static const char *const strategy_names[] = {"profile", "round_robin", "hash"};

const char *placement_strategy_name(int s)
{
    return s >= 0 && s < 3 ? strategy_names[s] : "?";
}

int placement_strategy(const char *name)
{
    for (int s = 0; s < 3; s++)
        if (!strcmp(name, strategy_names[s]))
            return s;
    return -1;
}

/* ---- profile ---------------------------------------------------------- */

/* The 4-byte words a row keeps beside its dim: row-wise Adagrad's state,
 * and its clock where the workers cache rows (embedding_cache.rows). */
static int opt_state(const struct ss_config *c)
{
    return (c->optim.emb == OPT_ROWWISE_ADAGRAD) + (c->embedding_cache.rows > 0);
}

void placement_uniform(struct table_profile *tp, int64_t rows, int dim, int state)
{
    *tp = (struct table_profile){.rows = rows, .dim = dim, .state = state, .lookups_per_ex = 1,
                                 .mean_bag = 1, .ns_per_lookup = dim, .ns_per_ex = dim};
    for (int k = 0; k < PLACE_BUCKETS; k++)
        tp->bucket[k] = 1.0 / PLACE_BUCKETS;
}

void placement_assume(const struct model_layout *l, const struct ss_config *c,
                      struct table_profile *tp)
{
    for (int t = 0; t < l->n_tables; t++)
        placement_uniform(&tp[t], l->rows[t], l->dim, opt_state(c));
}

/* Times pool + push of table t's bags (all profiled examples, one batch
 * view of rows) on a fresh table of min(rows, PROFILE_MAX_ROWS) rows. Each
 * pass moves every row by a different offset, so its first touches miss
 * the caches as a stream of new batches would, while the popular rows of a
 * pass stay as popular as in the data. */
static int time_table(const struct ss_config *c, struct table_profile *tp, int t,
                      const struct batch *all, struct ss_err *e)
{
    int64_t rows = tp->rows < PROFILE_MAX_ROWS ? tp->rows : PROFILE_MAX_ROWS;
    int32_t gid = t;
    struct emb_opts o = emb_opts_from_config(c, 1, tp->dim, &rows);
    o.global_ids = &gid;
    struct emb_tables *tab;
    int rc = embps_create(&tab, &o, e);
    if (rc < 0)
        return rc;
    size_t n = (size_t)all->n * tp->dim, n_ids = (size_t)all->off[all->n];
    float *out = ss_xcalloc(n, sizeof(float)), *grad = ss_xmalloc(n * sizeof(float));
    uint64_t *shifted = ss_xmalloc((n_ids + 1) * sizeof(uint64_t));
    for (size_t i = 0; i < n; i++)
        grad[i] = 1e-6f;
    struct batch view = *all;
    view.ids = shifted;
    double el = 0;
    int reps = 0;
    do {
        uint64_t shift = (uint64_t)reps * 0x9E3779B1ull;
        for (size_t q = 0; q < n_ids; q++)
            shifted[q] = (all->ids[q] + shift) % (uint64_t)rows;
        double t0 = ss_now();
        embps_pool(tab, &view, out);
        embps_push(tab, &view, grad);
        el += ss_now() - t0;
        reps++;
    } while (el < PROFILE_MIN_S || reps < 2);
    tp->ns_per_ex = el * 1e9 / ((double)reps * all->n);
    double lookups = tp->lookups_per_ex * all->n * reps;
    tp->ns_per_lookup = lookups > 0 ? el * 1e9 / lookups : tp->ns_per_ex;
    free(out);
    free(grad);
    free(shifted);
    embps_free(tab);
    return 0;
}

int profile_rows(const struct ss_config *c, const struct model_layout *l, int batches,
                 struct batch *per, int64_t *examples, struct ss_err *e)
{
    struct schema s;
    struct reader *r = NULL;
    int T = l->n_tables, cap = c->trainer.batch_size;
    *examples = 0;
    for (int t = 0; t < T; t++)
        batch_init(&per[t], cap, 0, 1);
    int rc = schema_from_config(&s, c, c->data.train, e);
    if (rc == 0 && s.n_cat != l->n_tables)
        rc = ss_fail(e, SS_EINVAL, "%s has %d categorical features, model.rows lists %d tables",
                     c->data.train, s.n_cat, l->n_tables);
    if (rc == 0)
        rc = reader_open(&r, c->data.train, &s, 0, 0, e);
    if (rc < 0)
        return rc;
    struct batch b;
    batch_init(&b, cap, s.n_dense, T);
    for (int k = 0; k < batches; k++) {
        if ((rc = reader_next(r, &b, e)) < 0 || b.n == 0)
            break;
        for (int t = 0; t < T; t++) {
            struct batch *p = &per[t];
            if (p->n + b.n > p->cap) {
                int nc = (p->n + b.n) * 2;
                p->off = realloc(p->off, ((size_t)nc + 1) * sizeof(int32_t));
                p->cap = nc;
            }
            for (int i = 0; i < b.n; i++) {
                int32_t lo = b.off[i * T + t], hi = b.off[i * T + t + 1];
                size_t at = (size_t)p->off[p->n];
                batch_reserve_ids(p, at + (size_t)(hi - lo));
                for (int32_t q = lo; q < hi; q++)
                    p->ids[at++] = b.ids[q] % (uint64_t)l->rows[t];
                p->off[++p->n] = (int32_t)at;
            }
        }
        *examples += b.n;
    }
    batch_free(&b);
    reader_close(r);
    if (rc == 0 && *examples == 0)
        return ss_fail(e, SS_EINVAL, "%s: no examples to profile", c->data.train);
    return rc;
}

int placement_profile(const struct ss_config *c, const struct model_layout *l,
                      struct table_profile *tp, struct ss_err *e)
{
    placement_assume(l, c, tp);
    if (c->placement.profile_batches == 0)
        return 0;
    if (!c->data.train[0])
        return ss_fail(e, SS_EINVAL, "placement.strategy = profile reads data.train, which is "
                                     "not set (or set placement.profile_batches = 0)");
    int T = l->n_tables;
    struct batch *per = ss_xcalloc(T, sizeof *per); /* per table, the profiled bags' rows */
    int64_t examples;
    int rc = profile_rows(c, l, c->placement.profile_batches, per, &examples, e);
    for (int t = 0; rc == 0 && t < T; t++) {
        double ids = (double)per[t].off[per[t].n], bags = 0;
        for (int64_t q = 0; q < per[t].off[per[t].n]; q++)
            tp[t].bucket[per[t].ids[q] * PLACE_BUCKETS / (uint64_t)l->rows[t]] += 1;
        for (int i = 0; i < per[t].n; i++)
            bags += per[t].off[i + 1] > per[t].off[i];
        tp[t].lookups_per_ex = ids / (double)examples;
        tp[t].mean_bag = bags > 0 ? ids / bags : 0;
        for (int k = 0; k < PLACE_BUCKETS; k++) /* the 1/64 prior keeps empty buckets >0 */
            tp[t].bucket[k] = ids > 0 ? (tp[t].bucket[k] - 1.0 / PLACE_BUCKETS) / ids
                                      : 1.0 / PLACE_BUCKETS;
        rc = time_table(c, &tp[t], t, &per[t], e);
    }
    for (int t = 0; t < T; t++)
        batch_free(&per[t]);
    free(per);
    return rc;
}

/* ---- row ranges -------------------------------------------------------- */

/* Share of table tp's lookups that fall in rows [lo, hi). */
static double range_share(const struct table_profile *tp, int64_t lo, int64_t hi)
{
    double a = (double)lo * PLACE_BUCKETS / (double)tp->rows;
    double b = (double)hi * PLACE_BUCKETS / (double)tp->rows, s = 0;
    for (int k = (int)a; k < PLACE_BUCKETS && k < b; k++) {
        double from = k > a ? k : a, to = k + 1 < b ? k + 1 : b;
        s += tp->bucket[k] * (to - from);
    }
    return s;
}

static double range_bytes(const struct table_profile *tp, int64_t lo, int64_t hi)
{
    return (double)(hi - lo) * (tp->dim + tp->state) * 4.0;
}

static double range_load(const struct table_profile *tp, int64_t lo, int64_t hi)
{
    return tp->ns_per_ex * range_share(tp, lo, hi);
}

/* Cuts rows [lo, hi) into m pieces of about equal load; cut[0..m]. */
static void cut_equal_load(const struct table_profile *tp, int64_t lo, int64_t hi, int m,
                           int64_t *cut)
{
    double total = range_share(tp, lo, hi);
    cut[0] = lo;
    cut[m] = hi;
    int64_t at = lo;
    for (int k = 1; k < m; k++) {
        double want = total * k / m;
        int64_t a = at, b = hi; /* smallest row r with share(lo, r) >= want */
        while (a < b) {
            int64_t mid = a + (b - a) / 2;
            if (range_share(tp, lo, mid) >= want)
                b = mid;
            else
                a = mid + 1;
        }
        int64_t min_r = cut[k - 1] + 1, max_r = hi - (m - k);
        cut[k] = at = a < min_r ? min_r : a > max_r ? max_r : a;
    }
}

/* ---- the packer -------------------------------------------------------- */

static int by_load_desc(const void *a, const void *b, void *arg)
{
    const double *load = arg;
    int i = *(const int *)a, j = *(const int *)b;
    return load[i] < load[j] ? 1 : load[i] > load[j] ? -1 : i - j;
}

/* Moves and swaps off the busiest bin while one strictly lowers it and
 * leaves the other bin below its old load. */
static void improve(const double *load, const double *bytes, int n, int P, double cap,
                    const int *fixed, int *bin, double *L, double *M)
{
    for (int iter = 0; iter < 100000; iter++) {
        int b = 0;
        for (int q = 1; q < P; q++)
            if (L[q] > L[b])
                b = q;
        double best = L[b];
        int bi = -1, bj = -1, bq = -1;
        for (int i = 0; i < n; i++) {
            if (bin[i] != b || (fixed && fixed[i] >= 0))
                continue;
            for (int q = 0; q < P; q++) {
                if (q == b)
                    continue;
                double nb = L[b] - load[i], nq = L[q] + load[i];
                double worse = nb > nq ? nb : nq;
                if (worse < best - 1e-12 && M[q] + bytes[i] <= cap) {
                    best = worse;
                    bi = i, bj = -1, bq = q;
                }
                for (int j = 0; j < n; j++) {
                    if (bin[j] != q || (fixed && fixed[j] >= 0) || load[j] >= load[i])
                        continue;
                    nb = L[b] - load[i] + load[j];
                    nq = L[q] + load[i] - load[j];
                    worse = nb > nq ? nb : nq;
                    if (worse < best - 1e-12 && M[q] - bytes[j] + bytes[i] <= cap &&
                        M[b] - bytes[i] + bytes[j] <= cap) {
                        best = worse;
                        bi = i, bj = j, bq = q;
                    }
                }
            }
        }
        if (bi < 0)
            return;
        L[b] -= load[bi], M[b] -= bytes[bi];
        L[bq] += load[bi], M[bq] += bytes[bi];
        bin[bi] = bq;
        if (bj >= 0) {
            L[bq] -= load[bj], M[bq] -= bytes[bj];
            L[b] += load[bj], M[b] += bytes[bj];
            bin[bj] = b;
        }
    }
}

/* Puts the fixed items in their bins, then each of order[0..m) where its
 * bytes fit, in the bin of least load (by_bytes: least memory). */
static int assign(const double *load, const double *bytes, int n, int P, double cap,
                  const int *fixed, const int *order, int m, int by_bytes, int *bin, double *L,
                  double *M)
{
    memset(L, 0, P * sizeof *L);
    memset(M, 0, P * sizeof *M);
    for (int i = 0; i < n; i++)
        if (fixed && fixed[i] >= 0)
            bin[i] = fixed[i], L[bin[i]] += load[i], M[bin[i]] += bytes[i];
    const double *key = by_bytes ? M : L;
    for (int k = 0; k < m; k++) {
        int i = order[k], q = -1;
        for (int p = 0; p < P; p++)
            if (M[p] + bytes[i] <= cap && (q < 0 || key[p] < key[q]))
                q = p;
        if (q < 0)
            return -1;
        bin[i] = q, L[q] += load[i], M[q] += bytes[i];
    }
    return 0;
}

int place_pack(const double *load, const double *bytes, int n, int P, double cap,
               const int *fixed, int *bin)
{
    double *L = ss_xcalloc(P, sizeof *L), *M = ss_xcalloc(P, sizeof *M);
    int *order = ss_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int)), m = 0;
    for (int i = 0; i < n; i++)
        if (!fixed || fixed[i] < 0)
            order[m++] = i;
    /* longest processing time first; when memory binds, first fit by bytes
     * and let the moves work */
    qsort_r(order, m, sizeof(int), by_load_desc, (void *)load);
    int rc = assign(load, bytes, n, P, cap, fixed, order, m, 0, bin, L, M);
    if (rc < 0) {
        qsort_r(order, m, sizeof(int), by_load_desc, (void *)bytes);
        rc = assign(load, bytes, n, P, cap, fixed, order, m, 1, bin, L, M);
    }
    if (rc == 0)
        improve(load, bytes, n, P, cap, fixed, bin, L, M);
    free(L);
    free(M);
    free(order);
    return rc;
}

/* ---- pins ---------------------------------------------------------------- */

struct pin {
    int table, ps;
    int64_t lo, hi;
};

/* What holds a plan's shards, for the messages: embedding PSs, or the
 * trainers under DES. */
static const char *holder(const struct placement *pl)
{
    return pl->on_trainers ? "trainer" : "embedding PS";
}

static const char *holders(const struct placement *pl)
{
    return pl->on_trainers ? "trainers" : "embedding PSs";
}

static const char *holders_key(const struct placement *pl)
{
    return pl->on_trainers ? "job.trainers" : "job.embedding_ps";
}

/* "T:PS" or "T@LO-HI:PS", comma separated. */
static int parse_pins(const struct placement *pl, const char *s, const struct table_profile *tp,
                      int T, int P, struct pin **out, int *n_out, struct ss_err *e)
{
    *out = NULL;
    *n_out = 0;
    if (!s || !*s)
        return 0;
    char *dup = strdup(s), *save = NULL;
    int n = 0, cap = 8, rc = 0;
    struct pin *pins = ss_xmalloc(cap * sizeof *pins);
    for (char *tok = strtok_r(dup, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        char *d = tok; /* blanks anywhere in an item: " 3 : 0" is 3:0 */
        for (const char *q = tok; *q; q++)
            if (!isspace((unsigned char)*q))
                *d++ = *q;
        *d = 0;
        if (!*tok) /* an empty item ("3:0,,") */
            continue;
        long long t, ps, lo = -1, hi = -1;
        int used = 0, ok, ranged = strchr(tok, '@') != NULL;
        if (ranged)
            ok = sscanf(tok, "%lld@%lld-%lld:%lld%n", &t, &lo, &hi, &ps, &used) == 4;
        else
            ok = sscanf(tok, "%lld:%lld%n", &t, &ps, &used) == 2;
        if (!ok || tok[used])
            rc = ss_fail(e, SS_EINVAL, "placement.pin: \"%s\" is not TABLE:PS or TABLE@LO-HI:PS",
                         tok);
        else if (t < 0 || t >= T)
            rc = ss_fail(e, SS_EINVAL, "placement.pin: \"%s\": table %lld, the model has %d "
                                       "tables (0..%d)", tok, t, T, T - 1);
        else if (ps < 0 || ps >= P)
            rc = ss_fail(e, SS_EINVAL, "placement.pin: \"%s\": %s %lld, the job has %d %s "
                                       "(0..%d)", tok, holder(pl), ps, P, holders(pl), P - 1);
        else if (ranged && (lo < 0 || lo >= hi || hi > tp[t].rows))
            rc = ss_fail(e, SS_EINVAL, "placement.pin: \"%s\": rows [%lld, %lld) are not within "
                                       "table %lld's %lld rows", tok, lo, hi, t,
                         (long long)tp[t].rows);
        if (rc < 0)
            break;
        if (n == cap)
            pins = realloc(pins, (cap *= 2) * sizeof *pins);
        pins[n++] = (struct pin){(int)t, (int)ps, ranged ? lo : 0, ranged ? hi : tp[t].rows};
        for (int k = 0; k < n - 1; k++)
            if (pins[k].table == t && pins[k].lo < pins[n - 1].hi && pins[n - 1].lo < pins[k].hi)
                rc = ss_fail(e, SS_EINVAL, "placement.pin: \"%s\" overlaps an earlier pin of "
                                           "table %lld", tok, t);
    }
    free(dup);
    if (rc < 0) {
        free(pins);
        return rc;
    }
    *out = pins;
    *n_out = n;
    return 0;
}

/* ---- plans --------------------------------------------------------------- */

static void add_shard(struct placement *pl, int *cap, int table, int64_t lo, int64_t hi, int ps,
                      int pinned)
{
    if (pl->n_shards == *cap)
        pl->shards = realloc(pl->shards, (*cap = *cap ? *cap * 2 : 64) * sizeof *pl->shards);
    pl->shards[pl->n_shards++] = (struct shard){table, ps, lo, hi, 0, 0, 0, pinned};
}

static int by_ps_table_lo(const void *a, const void *b)
{
    const struct shard *x = a, *y = b;
    if (x->ps != y->ps)
        return x->ps - y->ps;
    if (x->table != y->table)
        return x->table - y->table;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int hash_ps(int table, int P)
{
    uint64_t s = 0x5EEDull ^ (uint64_t)table * 0x9E3779B97F4A7C15ull;
    return (int)(ss_splitmix(&s) % (uint64_t)P);
}

/* The free (unpinned) row ranges of table t, given the pins. */
static int free_ranges(const struct pin *pins, int n_pins, int t, int64_t rows, int64_t *lo,
                       int64_t *hi, int max)
{
    int n = 0;
    int64_t at = 0;
    while (at < rows && n < max) {
        int64_t next = rows, skip = -1;
        for (int k = 0; k < n_pins; k++)
            if (pins[k].table == t && pins[k].hi > at && pins[k].lo < next) {
                if (pins[k].lo <= at)
                    skip = pins[k].hi;
                else
                    next = pins[k].lo;
            }
        if (skip >= 0) {
            at = skip;
            continue;
        }
        lo[n] = at;
        hi[n++] = next;
        at = next;
    }
    return n;
}

static void finish(struct placement *pl, const struct table_profile *tp)
{
    qsort(pl->shards, pl->n_shards, sizeof *pl->shards, by_ps_table_lo);
    pl->load = ss_xcalloc(pl->n_ps, sizeof(double));
    pl->bytes = ss_xcalloc(pl->n_ps, sizeof(double));
    double total = 0, biggest = 0;
    for (int p = 0; p < pl->n_ps; p++)
        pl->bytes[p] = PS_BASE_BYTES;
    for (int i = 0; i < pl->n_shards; i++) {
        struct shard *s = &pl->shards[i];
        s->load = range_load(&tp[s->table], s->lo, s->hi);
        s->ns_per_row = tp[s->table].ns_per_lookup;
        s->bytes = range_bytes(&tp[s->table], s->lo, s->hi);
        pl->load[s->ps] += s->load;
        pl->bytes[s->ps] += s->bytes;
        total += s->load;
        if (s->load > biggest)
            biggest = s->load;
    }
    pl->mean = total / pl->n_ps;
    pl->max = 0;
    pl->over_memory = 0;
    for (int p = 0; p < pl->n_ps; p++) {
        if (pl->load[p] > pl->max)
            pl->max = pl->load[p];
        pl->over_memory += pl->bytes[p] > pl->capacity;
    }
    pl->lower_bound = pl->mean > biggest ? pl->mean : biggest;
    pl->imbalance = pl->mean > 0 ? pl->max / pl->mean : 1;
}

/* embedding_ps.memory_mb within what the process itself is counted */
static int no_room(const struct placement *pl, struct ss_err *e)
{
    return ss_fail(e, SS_ENOMEM, "placement: embedding_ps.memory_mb = %.0f%s leaves no room for "
                   "the tables: %.0f MiB of it are counted for the process itself",
                   pl->capacity / 1048576, pl->on_trainers ? " (each trainer's room for its "
                   "shards under embedding.placement = trainers)" : "", PS_BASE_BYTES / 1048576);
}

static int pins_too_big(const struct placement *pl, int ps, double bytes, struct ss_err *e)
{
    return ss_fail(e, SS_ENOMEM, "placement.pin: the rows pinned to %s %d need %.0f MiB with "
                   "the process, more than embedding_ps.memory_mb = %.0f: pin fewer rows there "
                   "(TABLE@LO-HI:PS pins a range) or raise it", holder(pl), ps, bytes / 1048576,
                   pl->capacity / 1048576);
}

/* profile: items from splitting the free ranges, packed around the pins. */
static int pack_profile(struct placement *pl, const struct table_profile *tp,
                        const struct pin *pins, int n_pins, int *cap_shards, struct ss_err *e)
{
    int T = pl->n_tables, P = pl->n_ps;
    double total_load = 0, total_bytes = 0, room = pl->capacity - PS_BASE_BYTES;
    for (int t = 0; t < T; t++) {
        total_load += range_load(&tp[t], 0, tp[t].rows);
        total_bytes += range_bytes(&tp[t], 0, tp[t].rows);
    }
    const char *room_of = pl->on_trainers ? ", each trainer's room for its shards under "
                                            "embedding.placement = trainers" : "";
    if (room <= 0)
        return no_room(pl, e);
    if (total_bytes > room * P)
        return ss_fail(e, SS_ENOMEM,
                       "placement: the tables need %.0f MiB but %d %s hold %.0f MiB "
                       "(embedding_ps.memory_mb = %.0f%s, of which %.0f MiB are counted for "
                       "each process): raise %s or embedding_ps.memory_mb",
                       (total_bytes + PS_BASE_BYTES * P) / 1048576, P, holders(pl),
                       pl->capacity * P / 1048576, pl->capacity / 1048576, room_of,
                       PS_BASE_BYTES / 1048576, holders_key(pl));
    for (int p = 0; p < P; p++) {
        double pinned = 0;
        for (int k = 0; k < n_pins; k++)
            pinned += pins[k].ps == p ? range_bytes(&tp[pins[k].table], pins[k].lo, pins[k].hi) : 0;
        if (pinned > room)
            return pins_too_big(pl, p, pinned + PS_BASE_BYTES, e);
    }
    double share_load = total_load / P, share_bytes = total_bytes / P;
    for (int round = 0; round < MAX_SPLIT_ROUNDS; round++) {
        pl->n_shards = 0;
        for (int k = 0; k < n_pins; k++)
            add_shard(pl, cap_shards, pins[k].table, pins[k].lo, pins[k].hi, pins[k].ps, 1);
        int n_fixed = pl->n_shards;
        for (int t = 0; t < T; t++) {
            int64_t lo[SS_MAX_TABLES], hi[SS_MAX_TABLES];
            int nr = free_ranges(pins, n_pins, t, tp[t].rows, lo, hi, SS_MAX_TABLES);
            for (int r = 0; r < nr; r++) {
                double ld = range_load(&tp[t], lo[r], hi[r]);
                double by = range_bytes(&tp[t], lo[r], hi[r]);
                int m = 1;
                if (ld > share_load * 1.000001)
                    m = (int)ceil(ld / share_load - 1e-9);
                if (by > share_bytes * 1.000001 && (int)ceil(by / share_bytes - 1e-9) > m)
                    m = (int)ceil(by / share_bytes - 1e-9);
                if (m > P)
                    m = P;
                while (by / m > room)
                    m++;
                m <<= round; /* memory would not pack: finer pieces */
                if (m > hi[r] - lo[r])
                    m = (int)(hi[r] - lo[r]);
                int64_t *cut = ss_xmalloc(((size_t)m + 1) * sizeof *cut);
                cut_equal_load(&tp[t], lo[r], hi[r], m, cut);
                for (int k = 0; k < m; k++)
                    add_shard(pl, cap_shards, t, cut[k], cut[k + 1], -1, 0);
                free(cut);
            }
        }
        int n = pl->n_shards;
        double *ld = ss_xmalloc(n * sizeof *ld), *by = ss_xmalloc(n * sizeof *by);
        int *fixed = ss_xmalloc(n * sizeof *fixed), *bin = ss_xmalloc(n * sizeof *bin);
        for (int i = 0; i < n; i++) {
            const struct shard *s = &pl->shards[i];
            ld[i] = range_load(&tp[s->table], s->lo, s->hi);
            by[i] = range_bytes(&tp[s->table], s->lo, s->hi);
            fixed[i] = i < n_fixed ? s->ps : -1;
        }
        int rc = place_pack(ld, by, n, P, room, fixed, bin);
        for (int i = 0; i < n; i++)
            pl->shards[i].ps = bin[i];
        free(ld);
        free(by);
        free(fixed);
        free(bin);
        if (rc == 0)
            return 0;
    }
    return ss_fail(e, SS_ENOMEM, "placement: the tables (%.0f MiB) do not pack into %d %s of "
                                 "%.0f MiB around the pins", total_bytes / 1048576, P,
                   holders(pl), pl->capacity / 1048576);
}

int placement_make(struct placement *pl, int strategy, const struct table_profile *tp, int T,
                   int P, double capacity_mb, const char *pin_spec, struct ss_err *e)
{
    return placement_make_on(pl, 0, strategy, tp, T, P, capacity_mb, pin_spec, e);
}

int placement_make_on(struct placement *pl, int on_trainers, int strategy,
                      const struct table_profile *tp, int T, int P, double capacity_mb,
                      const char *pin_spec, struct ss_err *e)
{
    memset(pl, 0, sizeof *pl);
    pl->on_trainers = on_trainers;
    pl->strategy = strategy;
    pl->n_tables = T;
    pl->n_ps = P;
    pl->capacity = capacity_mb * 1048576;
    pl->table_rows = ss_xmalloc((size_t)T * sizeof(int64_t));
    for (int t = 0; t < T; t++)
        pl->table_rows[t] = tp[t].rows;
    if (P < 1)
        return ss_fail(e, SS_EINVAL, "placement: no %s to place the tables on", holder(pl));
    struct pin *pins;
    int n_pins, cap = 0, rc = parse_pins(pl, pin_spec, tp, T, P, &pins, &n_pins, e);
    for (int t = 0; rc == 0 && t < T; t++) { /* the rows between pins: at most a table's worth */
        int64_t lo[SS_MAX_TABLES + 1], hi[SS_MAX_TABLES + 1];
        if (free_ranges(pins, n_pins, t, tp[t].rows, lo, hi, SS_MAX_TABLES + 1) > SS_MAX_TABLES) {
            free(pins);
            rc = ss_fail(e, SS_EINVAL, "placement.pin: table %d's pins leave more than %d "
                         "ranges of rows between them: pin fewer, larger ranges", t,
                         SS_MAX_TABLES);
        }
    }
    if (rc < 0) {
        placement_free(pl);
        return rc;
    }
    if (strategy == PLACE_PROFILE) {
        rc = pack_profile(pl, tp, pins, n_pins, &cap, e);
    } else {
        for (int k = 0; k < n_pins; k++)
            add_shard(pl, &cap, pins[k].table, pins[k].lo, pins[k].hi, pins[k].ps, 1);
        for (int t = 0; t < T; t++) {
            int64_t lo[SS_MAX_TABLES], hi[SS_MAX_TABLES];
            int nr = free_ranges(pins, n_pins, t, tp[t].rows, lo, hi, SS_MAX_TABLES);
            int ps = strategy == PLACE_HASH ? hash_ps(t, P) : t % P;
            for (int r = 0; r < nr; r++)
                add_shard(pl, &cap, t, lo[r], hi[r], ps, 0);
        }
    }
    free(pins);
    if (rc < 0) {
        placement_free(pl);
        return rc;
    }
    finish(pl, tp);
    return 0;
}

int placement_check_memory(const struct placement *pl, struct ss_err *e)
{
    for (int p = 0; p < pl->n_ps; p++) {
        if (pl->bytes[p] <= pl->capacity)
            continue;
        double pinned = PS_BASE_BYTES;
        for (int i = 0; i < pl->n_shards; i++)
            if (pl->shards[i].ps == p && pl->shards[i].pinned)
                pinned += pl->shards[i].bytes;
        if (pl->capacity <= PS_BASE_BYTES)
            return no_room(pl, e);
        if (pinned > PS_BASE_BYTES && pinned > pl->capacity)
            return pins_too_big(pl, p, pinned, e);
        return ss_fail(e, SS_ENOMEM,
                           "placement %s: %s %d would need %.0f MiB, more than "
                           "embedding_ps.memory_mb = %.0f: raise it, add %s (%s), or use "
                           "placement.strategy = profile (it splits big tables)",
                           placement_strategy_name(pl->strategy), holder(pl), p,
                           pl->bytes[p] / 1048576, pl->capacity / 1048576, holders(pl),
                           holders_key(pl));
    }
    return 0;
}

void placement_free(struct placement *pl)
{
    free(pl->shards);
    free(pl->load);
    free(pl->bytes);
    free(pl->table_rows);
    memset(pl, 0, sizeof *pl);
}

int placement_ps_shards(const struct placement *pl, int ps, int32_t *ids)
{
    int k = 0;
    for (int i = 0; i < pl->n_shards; i++)
        if (pl->shards[i].ps == ps)
            ids[k++] = i;
    return k;
}

/* ---- output -------------------------------------------------------------- */

void placement_print(const struct placement *pl, FILE *f)
{
    fprintf(f, "placement %s: %d tables on %d %s (%d shards)\n",
            placement_strategy_name(pl->strategy), pl->n_tables, pl->n_ps, holders(pl),
            pl->n_shards);
    fprintf(f, "  %-4s %12s %10s  %s\n", "ps", "load ns/ex", "memory MiB", "tables [row range)");
    for (int p = 0; p < pl->n_ps; p++) {
        fprintf(f, "  %-4d %12.1f %10.1f %s ", p, pl->load[p], pl->bytes[p] / 1048576,
                pl->bytes[p] > pl->capacity ? "!" : " ");
        int first = 1;
        for (int i = 0; i < pl->n_shards; i++) {
            const struct shard *s = &pl->shards[i];
            if (s->ps != p)
                continue;
            fprintf(f, "%s%d", first ? "" : ",", s->table);
            if (s->lo != 0 || s->hi != pl->table_rows[s->table])
                fprintf(f, "[%lld-%lld)", (long long)s->lo, (long long)s->hi);
            first = 0;
        }
        fprintf(f, "%s\n", first ? "-" : "");
    }
    fprintf(f, "  max %.1f  mean %.1f  imbalance (max/mean) %.3f  lower bound %.1f "
               "(max/lower bound %.3f)\n",
            pl->max, pl->mean, pl->imbalance, pl->lower_bound,
            pl->lower_bound > 0 ? pl->max / pl->lower_bound : 1);
    if (pl->over_memory)
        fprintf(f, "  ! %d PS%s over embedding_ps.memory_mb = %.0f MiB\n", pl->over_memory,
                pl->over_memory > 1 ? "s" : "", pl->capacity / 1048576);
}

void placement_json(const struct placement *pl, FILE *f)
{
    fprintf(f, "{\"strategy\": \"%s\", \"tables\": %d, \"embedding_ps\": %d, "
               "\"capacity_mib\": %.1f, \"max_load\": %.3f, \"mean_load\": %.3f, "
               "\"imbalance\": %.4f, \"lower_bound\": %.3f, \"over_memory\": %d,\n  \"ps\": [",
            placement_strategy_name(pl->strategy), pl->n_tables, pl->n_ps,
            pl->capacity / 1048576, pl->max, pl->mean, pl->imbalance, pl->lower_bound,
            pl->over_memory);
    for (int p = 0; p < pl->n_ps; p++)
        fprintf(f, "%s{\"load_ns_per_example\": %.3f, \"memory_mib\": %.3f}", p ? ", " : "",
                pl->load[p], pl->bytes[p] / 1048576);
    fprintf(f, "],\n  \"shards\": [");
    for (int i = 0; i < pl->n_shards; i++) {
        const struct shard *s = &pl->shards[i];
        fprintf(f, "%s\n    {\"id\": %d, \"table\": %d, \"ps\": %d, \"lo\": %lld, \"hi\": %lld, "
                   "\"load\": %.3f, \"memory_mib\": %.3f}",
                i ? "," : "", i, s->table, s->ps, (long long)s->lo, (long long)s->hi, s->load,
                s->bytes / 1048576);
    }
    fprintf(f, "]}\n");
}

/* ---- the plan of a config ------------------------------------------------ */

static void profile_json(const struct table_profile *tp, int T, FILE *f)
{
    fprintf(f, "  \"tables\": [");
    for (int t = 0; t < T; t++)
        fprintf(f, "%s\n    {\"table\": %d, \"rows\": %lld, \"dim\": %d, \"lookups_per_example\": "
                   "%.4f, \"mean_bag\": %.4f, \"ns_per_example\": %.3f, \"ns_per_lookup\": %.3f, "
                   "\"memory_mib\": %.3f}",
                t ? "," : "", t, (long long)tp[t].rows, tp[t].dim, tp[t].lookups_per_ex,
                tp[t].mean_bag, tp[t].ns_per_ex, tp[t].ns_per_lookup,
                range_bytes(&tp[t], 0, tp[t].rows) / 1048576);
    fprintf(f, "]");
}

static int write_plans(const char *dir, const struct placement *plans, int chosen,
                       const struct table_profile *tp, int profiled, struct ss_err *e)
{
    int rc = ss_mkdir_p(dir, e);
    if (rc < 0)
        return rc;
    char p[4096];
    snprintf(p, sizeof p, "%s/placement.txt", dir);
    FILE *f = fopen(p, "w");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", p, strerror(errno));
    placement_summary(plans, chosen, profiled, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/placement.json", dir);
    if (!(f = fopen(p, "w")))
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", p, strerror(errno));
    fprintf(f, "{\"strategy\": \"%s\", \"profiled\": %s,\n",
            placement_strategy_name(plans[chosen].strategy), profiled ? "true" : "false");
    profile_json(tp, plans[chosen].n_tables, f);
    fprintf(f, ",\n  \"plans\": {");
    for (int s = 0; s < 3; s++) {
        fprintf(f, "%s\"%s\": ", s ? ",\n  " : "", placement_strategy_name(s));
        if (plans[s].load)
            placement_json(&plans[s], f);
        else
            fprintf(f, "null");
    }
    fprintf(f, "}}\n");
    return fclose(f) ? ss_fail(e, SS_EIO, "%s: write failed", p) : 0;
}

int placement_bins(const struct ss_config *c, int embedding_ps, int trainers)
{
    if (c->embedding.placement != EMB_ON_TRAINERS)
        return embedding_ps;
    return trainers;
}

void placement_summary(const struct placement *plans, int chosen, int profiled, FILE *f)
{
    if (!profiled)
        fprintf(f, "(not profiled: every table assumed one lookup per example at a cost of dim; "
                   "placement.strategy = profile measures)\n");
    placement_print(&plans[chosen], f);
    fprintf(f, "\n%-12s %12s %10s %12s %10s\n", "strategy", "max load", "imbalance",
            "lower bound", "max MiB");
    for (int s = 0; s < 3; s++) {
        double mb = 0;
        if (!plans[s].load) {
            fprintf(f, "%-12s does not fit in the PSs' memory\n", placement_strategy_name(s));
            continue;
        }
        for (int p = 0; p < plans[s].n_ps; p++)
            if (plans[s].bytes[p] > mb)
                mb = plans[s].bytes[p];
        fprintf(f, "%-12s %12.1f %10.3f %12.1f %10.1f%s%s\n", placement_strategy_name(s),
                plans[s].max, plans[s].imbalance, plans[s].lower_bound, mb / 1048576,
                plans[s].over_memory ? "  over memory" : "", s == chosen ? "  <- chosen" : "");
    }
}

int placement_for_config(const struct ss_config *c, const struct model_layout *l, int n_ps,
                         int compare, struct placement *pl, FILE *f, struct ss_err *e)
{
    int chosen = placement_strategy(c->placement.strategy), T = l->n_tables;
    struct table_profile *tp = ss_xcalloc(T, sizeof *tp);
    struct placement plans[3];
    memset(plans, 0, sizeof plans);
    int profiled = (chosen == PLACE_PROFILE || compare) && c->placement.profile_batches > 0;
    int rc = 0;
    if (profiled) {
        double t0 = ss_now();
        if (f)
            fprintf(f, "# profiling %d batches of %s for placement...\n",
                    c->placement.profile_batches, c->data.train), fflush(f);
        rc = placement_profile(c, l, tp, e);
        if (rc == 0 && f)
            fprintf(f, "# profiled in %.1f s\n", ss_now() - t0);
    } else {
        placement_assume(l, c, tp);
    }
    double cap = (double)c->embedding_ps.memory_mb, t_pack = ss_now();
    for (int s = 0; rc == 0 && s < 3; s++) {
        struct ss_err ignore;
        int r = placement_make_on(&plans[s], c->embedding.placement == EMB_ON_TRAINERS, s, tp,
                                  T, n_ps, cap, c->placement.pin, s == chosen ? e : &ignore);
        if (r < 0 && s == chosen)
            rc = r;
        else if (r < 0) /* only profile fails (on memory): shown as such */
            plans[s].strategy = s;
    }
    t_pack = ss_now() - t_pack;
    if (rc == 0)
        rc = placement_check_memory(&plans[chosen], e);
    if (rc == 0 && f) {
        if (c->embedding.placement == EMB_ON_TRAINERS)
            fprintf(f, "# embedding.placement = trainers: the tables go to the %d trainers (PS p "
                       "below is trainer p)\n", n_ps);
        placement_summary(plans, chosen, profiled, f);
        fprintf(f, "# the three plans computed in %.3f s\n", t_pack);
    }
    if (rc == 0 && c->output.dir[0])
        rc = write_plans(c->output.dir, plans, chosen, tp, profiled, e);
    for (int s = 0; s < 3; s++) {
        if (s == chosen && rc == 0)
            *pl = plans[s];
        else
            placement_free(&plans[s]);
    }
    free(tp);
    return rc;
}
