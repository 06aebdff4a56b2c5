/* Text lines into batch slots: Criteo TSV, schema-driven CSV/TSV and
 * libSVM/libFM (a line's features by field, each a weighted bag).
 *
 * This is on the training path, so a line is parsed in one pass with no
 * allocation: the separators are found eight bytes at a time (SWAR), the
 * field starts land in a stack array, then the label, dense and categorical
 * columns are read by index with hand-written number parsers. A bad line
 * leaves the batch as it was and says why in e (SS_EFORMAT). */
#include "internal.h"

#include <math.h>
#include <string.h>

#define SHOW 48 /* characters of a bad value quoted in a message */

/* 0x10 | hex digit value; 0 = not a hex digit */
static const unsigned char hexv[256] = {
    ['0'] = 0x10, ['1'] = 0x11, ['2'] = 0x12, ['3'] = 0x13, ['4'] = 0x14, ['5'] = 0x15,
    ['6'] = 0x16, ['7'] = 0x17, ['8'] = 0x18, ['9'] = 0x19, ['a'] = 0x1a, ['b'] = 0x1b,
    ['c'] = 0x1c, ['d'] = 0x1d, ['e'] = 0x1e, ['f'] = 0x1f, ['A'] = 0x1a, ['B'] = 0x1b,
    ['C'] = 0x1c, ['D'] = 0x1d, ['E'] = 0x1e, ['F'] = 0x1f,
};

static const double pow10_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int is_digit(char c) { return (unsigned)(c - '0') <= 9; }

static void trim_spaces(const char **p, size_t *n)
{
    while (*n && (*p)[0] == ' ')
        (*p)++, (*n)--;
    while (*n && (*p)[*n - 1] == ' ')
        (*n)--;
}

/* [+-]digits[.digits][(e|E)[+-]digits] (or .5, 5.), blanks around allowed.
 * Returns 0 with *out finite as a float, or -1. */
static int parse_number(const char *p, size_t n, double *out)
{
    trim_spaces(&p, &n);
    size_t i = 0;
    int neg = 0, digits = 0, seen = 0, exp10 = 0;
    uint64_t mant = 0;
    if (n && (p[0] == '-' || p[0] == '+'))
        neg = p[i++] == '-';
    for (; i < n && is_digit(p[i]); i++) {
        seen = 1;
        if (digits < 19) {
            mant = mant * 10 + (uint64_t)(p[i] - '0');
            digits += mant != 0;
        } else {
            exp10++;
        }
    }
    if (i < n && p[i] == '.') {
        for (i++; i < n && is_digit(p[i]); i++) {
            seen = 1;
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(p[i] - '0');
                digits += mant != 0;
                exp10--;
            }
        }
    }
    if (!seen)
        return -1;
    if (i < n && (p[i] | 0x20) == 'e') {
        int eneg = 0, ev = 0, eseen = 0;
        i++;
        if (i < n && (p[i] == '-' || p[i] == '+'))
            eneg = p[i++] == '-';
        for (; i < n && is_digit(p[i]); i++) {
            eseen = 1;
            if (ev < 100000)
                ev = ev * 10 + (p[i] - '0');
        }
        if (!eseen)
            return -1;
        exp10 += eneg ? -ev : ev;
    }
    if (i != n)
        return -1;
    double v = (double)mant;
    if (mant == 0) /* 0e400 is 0, not 0 x inf */
        exp10 = 0;
    if (exp10 > 0)
        v *= exp10 <= 22 ? pow10_exact[exp10] : pow(10.0, exp10);
    else if (exp10 < 0)
        v /= exp10 >= -22 ? pow10_exact[-exp10] : pow(10.0, -exp10);
    if (!isfinite((float)v))
        return -1;
    *out = neg ? -v : v;
    return 0;
}

/* A dense value; empty = missing (0, or NAN for inspect). Small
 * non-negative integers (all of Criteo but its few negatives) take the
 * short path. */
static inline int dense_value(const char *p, size_t n, float missing, float *out)
{
    if (n == 0) {
        *out = missing;
        return 0;
    }
    if (n <= 9) {
        uint32_t v = 0;
        size_t i = 0;
        for (; i < n && is_digit(p[i]); i++)
            v = v * 10 + (uint32_t)(p[i] - '0');
        if (i == n) {
            *out = (float)v;
            return 0;
        }
    }
    double x;
    if (parse_number(p, n, &x))
        return -1;
    *out = (float)x;
    return 0;
}

static inline int hex_id(const char *p, size_t n, uint64_t *out)
{
    const unsigned char *u = (const unsigned char *)p;
    if (n == 8) { /* Criteo's tokens: eight independent lookups, one check */
        unsigned d0 = hexv[u[0]], d1 = hexv[u[1]], d2 = hexv[u[2]], d3 = hexv[u[3]];
        unsigned d4 = hexv[u[4]], d5 = hexv[u[5]], d6 = hexv[u[6]], d7 = hexv[u[7]];
        if (!(d0 & d1 & d2 & d3 & d4 & d5 & d6 & d7 & 0x10))
            return -1;
        *out = (uint64_t)((d0 & 15u) << 28 | (d1 & 15u) << 24 | (d2 & 15u) << 20 |
                          (d3 & 15u) << 16 | (d4 & 15u) << 12 | (d5 & 15u) << 8 |
                          (d6 & 15u) << 4 | (d7 & 15u));
        return 0;
    }
    uint64_t v = 0;
    if (n > 16)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned d = hexv[u[i]];
        if (!d)
            return -1;
        v = v << 4 | (d & 15u);
    }
    *out = v;
    return 0;
}

/* A decimal id; a negative one keeps its two's-complement bits. */
static int dec_id(const char *p, size_t n, uint64_t *out)
{
    trim_spaces(&p, &n);
    int neg = n && p[0] == '-';
    size_t i = (size_t)(n && (p[0] == '-' || p[0] == '+'));
    uint64_t v = 0;
    if (i == n)
        return -1;
    for (; i < n; i++) {
        if (!is_digit(p[i]))
            return -1;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (uint64_t)0 - v : v;
    return 0;
}

/* Token → id by the schema's encoding; empty = id 0. */
static inline int token_id(int enc, const char *p, size_t n, uint64_t *out)
{
    if (n == 0) {
        *out = 0;
        return 0;
    }
    if (enc == CAT_HEX)
        return hex_id(p, n, out);
    if (enc == CAT_DEC)
        return dec_id(p, n, out);
    *out = ss_fnv1a(SS_FNV_BASIS, p, n);
    return 0;
}

/* A field as a message quotes it: its first SHOW bytes, a byte that is not
 * printable ASCII as \xNN (a NUL had cut the quote short, raw bytes reached
 * the terminal), "..." past them. */
struct shown {
    char s[SHOW * 4 + 4];
};

static struct shown show(const char *p, size_t n)
{
    struct shown o;
    size_t k = 0;
    for (size_t i = 0; i < n && i < SHOW; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            o.s[k++] = (char)c;
        else
            k += (size_t)snprintf(o.s + k, sizeof o.s - k, "\\x%02x", c);
    }
    if (n > SHOW)
        memcpy(o.s + k, "...", 3), k += 3;
    o.s[k] = 0;
    return o;
}

static int bad_token(struct ss_err *e, int enc, int col, const char *p, size_t n)
{
    return ss_fail(e, SS_EFORMAT, "column %d: bad %s \"%s\"", col,
                   enc == CAT_HEX ? "hex token" : "decimal id", show(p, n).s);
}

/* Finds the separators of line. fs[k] = start of field k for k <= want (the
 * start of field `want`, or len + 1 when the line has exactly `want` fields,
 * closes field want-1). Returns the number of fields in the line. */
static int64_t split_fields(const char *line, size_t len, char sep, uint32_t *fs, int want)
{
    const uint64_t ones = 0x0101010101010101ull, low7 = 0x7f7f7f7f7f7f7f7full;
    const uint64_t pat = ones * (unsigned char)sep;
    int64_t nf = 1;
    size_t i = 0;
    fs[0] = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, line + i, 8);
        v ^= pat;                                     /* separator bytes become 0 */
        uint64_t z = ~(((v & low7) + low7) | v | low7); /* 0x80 exactly at zero bytes */
        while (z) {
            uint32_t at = (uint32_t)(i + ((unsigned)__builtin_ctzll(z) >> 3));
            if (nf <= want)
                fs[nf] = at + 1;
            nf++;
            z &= z - 1;
        }
    }
    for (; i < len; i++) {
        if (line[i] == sep) {
            if (nf <= want)
                fs[nf] = (uint32_t)i + 1;
            nf++;
        }
    }
    if (nf <= want)
        fs[nf] = (uint32_t)len + 1;
    return nf;
}

/* A multi-hot field: the ids of its non-empty tokens, or one id 0. */
static int parse_bag(const struct schema *s, int col, const char *p, size_t n, struct batch *b,
                     size_t *pos, int tables_left, struct ss_err *e)
{
    size_t k = 1;
    for (size_t i = 0; i < n; i++)
        k += p[i] == s->multihot_sep;
    batch_reserve_ids(b, *pos + k + (size_t)tables_left);
    size_t start = *pos;
    const char *end = p + n;
    while (p <= end) {
        const char *q = memchr(p, s->multihot_sep, (size_t)(end - p));
        if (!q)
            q = end;
        if (q > p) {
            uint64_t id;
            if (token_id(s->cat_encoding, p, (size_t)(q - p), &id))
                return bad_token(e, s->cat_encoding, col, p, (size_t)(q - p));
            b->ids[(*pos)++] = id;
        }
        p = q + 1;
    }
    if (*pos == start)
        b->ids[(*pos)++] = 0;
    return 0;
}

/* ---- libSVM / libFM: "label [field:]index:value ..." ----------------------
 * The label 0/1 or -1/+1; blanks (spaces, tabs) between features; "#"
 * opens a comment, "qid:" tokens are skipped. A feature's field is libFM's
 * or the data.fields range its index falls in; a field no column key names
 * is not read. A table's bag holds its field's indices as ids, each
 * weighing its value; a field absent from the line is id 0, as an empty
 * TSV cell. A dense field's value is the feature's. */

struct feature {
    int field;
    uint64_t idx;
    double val;
};

static int field_of(const struct schema *s, uint64_t idx)
{
    for (int f = 0; f < s->n_fields; f++) /* few: a walk */
        if (idx >= s->field_lo[f] && idx <= s->field_hi[f])
            return f;
    return -1;
}

/* One token [field:]index:value into f; 1 when it is to be skipped. */
static int feature(const struct schema *s, const char *p, size_t n, struct feature *f,
                   struct ss_err *e)
{
    const char *c1 = memchr(p, ':', n);
    if (!c1)
        return ss_fail(e, SS_EFORMAT, "feature \"%s\" is not index:value or "
                       "field:index:value", show(p, n).s);
    if (c1 - p == 3 && !memcmp(p, "qid", 3))
        return 1;
    const char *c2 = memchr(c1 + 1, ':', (size_t)(p + n - c1 - 1));
    const char *ix = c2 ? c1 + 1 : p, *v = (c2 ? c2 : c1) + 1;
    uint64_t field = 0;
    if ((c2 && (dec_id(p, (size_t)(c1 - p), &field) || p[0] == '-')) ||
        dec_id(ix, (size_t)((c2 ? c2 : c1) - ix), &f->idx) || ix[0] == '-' ||
        parse_number(v, (size_t)(p + n - v), &f->val))
        return ss_fail(e, SS_EFORMAT, "feature \"%s\" is not index:value or "
                       "field:index:value (decimal field and index, a number)", show(p, n).s);
    if (c2) {
        if (field >= SS_MAX_COLS)
            return ss_fail(e, SS_EFORMAT, "feature \"%s\": field %llu is past %d",
                           show(p, n).s, (unsigned long long)field, SS_MAX_COLS - 1);
        f->field = (int)field;
    } else if (!s->n_fields) {
        return ss_fail(e, SS_EFORMAT, "feature \"%s\" names no field: write libFM's "
                       "field:index:value, or set data.fields (each field's index range)",
                       show(p, n).s);
    } else if ((f->field = field_of(s, f->idx)) < 0) {
        return ss_fail(e, SS_EFORMAT, "feature \"%s\": index %llu is in no range of "
                       "data.fields", show(p, n).s, (unsigned long long)f->idx);
    }
    return 0;
}

/* The next blank-separated token of [*p, end) (up to a "#"), or 0. */
static size_t next_token(const char **p, const char *end, const char **tok)
{
    const char *q = *p;
    while (q < end && (*q == ' ' || *q == '\t'))
        q++;
    if (q == end || *q == '#') {
        *p = end;
        return 0;
    }
    *tok = q;
    while (q < end && *q != ' ' && *q != '\t')
        q++;
    *p = q;
    return (size_t)(q - *tok);
}

static int libsvm_label(const char *p, size_t n, float *out, struct ss_err *e)
{
    double v;
    if (parse_number(p, n, &v) || (v != 0.0 && v != 1.0 && v != -1.0))
        return ss_fail(e, SS_EFORMAT, "label \"%s\" is not 0/1 or -1/+1", show(p, n).s);
    *out = v > 0 ? 1.0f : 0.0f;
    return 0;
}

/* Two passes over the features: the first counts each table's ids (and
 * reads the dense ones), the second places them. */
static int parse_libsvm(const struct schema *s, const char *line, size_t len, struct batch *b,
                        struct ss_err *e)
{
    const char *p = line, *end = line + len, *tok;
    size_t n = next_token(&p, end, &tok);
    float label = 0;
    if (!n)
        return ss_fail(e, SS_EFORMAT, "no label");
    if (libsvm_label(tok, n, &label, e))
        return SS_EFORMAT;
    int i = b->n, T = s->n_cat, rc;
    float *dense = b->dense + (size_t)i * (size_t)s->n_dense;
    const float missing = s->missing_is_nan ? NAN : 0.0f;
    for (int j = 0; j < s->n_dense; j++)
        dense[j] = s->dense_cols[j] < 0 ? 0.0f : missing;
    int32_t count[SS_MAX_COLS + 1];
    unsigned char dense_seen[SS_MAX_COLS];
    memset(count, 0, (size_t)(T + 1) * sizeof *count);
    memset(dense_seen, 0, (size_t)s->n_dense);
    const char *feats = p;
    struct feature f;
    while ((n = next_token(&p, end, &tok))) {
        if ((rc = feature(s, tok, n, &f, e)) > 0)
            continue;
        if (rc < 0)
            return rc;
        int role = s->field_role[f.field];
        if (role > 0) {
            count[role]++;
        } else if (role < 0) {
            if (dense_seen[-role - 1]++)
                return ss_fail(e, SS_EFORMAT, "dense field %d twice", f.field);
            if (!isfinite((float)f.val))
                return ss_fail(e, SS_EFORMAT, "dense field %d: %g is past a float", f.field, f.val);
            dense[-role - 1] = (float)f.val;
        }
    }
    size_t base = (size_t)i * (size_t)T, pos = (size_t)b->off[base], ids = 0;
    for (int t = 1; t <= T; t++) { /* count[t]: where table t - 1's bag starts */
        int32_t k = count[t] ? count[t] : 1;
        count[t] = (int32_t)(pos + ids);
        ids += (size_t)k;
        if (pos + ids > INT32_MAX)
            return ss_fail(e, SS_EINVAL, "parse_line: more than 2^31 ids in one batch");
        b->off[base + (size_t)t] = (int32_t)(pos + ids);
    }
    batch_reserve_ids(b, pos + ids);
    for (int t = 0; t < T; t++) { /* an absent field: id 0, as an empty TSV cell */
        b->ids[b->off[base + t]] = 0;
        if (b->weighted)
            b->wts[b->off[base + t]] = 1.0f;
    }
    for (p = feats; (n = next_token(&p, end, &tok));) {
        int role = feature(s, tok, n, &f, e) == 0 ? s->field_role[f.field] : 0;
        if (role <= 0)
            continue;
        int32_t at = count[role]++;
        b->ids[at] = f.idx;
        if ((float)f.val != 1.0f && !b->weighted)
            batch_weigh(b, pos + ids);
        if (b->weighted)
            b->wts[at] = (float)f.val;
    }
    b->label[i] = label;
    b->n = i + 1;
    return 0;
}

int parse_line(const struct schema *s, char *line, size_t len, struct batch *b, struct ss_err *e)
{
    if (s->format == FMT_BINARY || s->n_cols <= 0 || s->n_cols > SS_MAX_COLS)
        return ss_fail(e, SS_EINVAL, "parse_line: the schema is not a text schema");
    if (b->n >= b->cap)
        return ss_fail(e, SS_EINVAL, "parse_line: the batch is full (%d examples)", b->cap);
    if (b->n_dense != s->n_dense || b->n_tables != s->n_cat)
        return ss_fail(e, SS_EINVAL,
                       "parse_line: the batch holds %d dense and %d categorical features, "
                       "the data %d and %d", b->n_dense, b->n_tables, s->n_dense, s->n_cat);
    if (len && line[len - 1] == '\r')
        len--;
    if (len >= UINT32_MAX - 1)
        return ss_fail(e, SS_EFORMAT, "line longer than %u bytes", UINT32_MAX - 2);
    if (s->format == FMT_LIBSVM)
        return parse_libsvm(s, line, len, b, e);

    uint32_t fs[SS_MAX_COLS + 1];
    int want = s->n_cols;
    int64_t nf = split_fields(line, len, s->sep, fs, want);
    if (s->format == FMT_CRITEO ? nf != want : nf < want)
        return ss_fail(e, SS_EFORMAT, "expected %s%d fields, found %lld",
                       s->format == FMT_CRITEO ? "" : "at least ", want, (long long)nf);
#define FIELD(c) (line + fs[c])
#define FLEN(c) ((size_t)(fs[(c) + 1] - 1 - fs[c]))
    /* CSV quoting is not read: a separator inside quotes would shift every
     * later column, and a quoted value would hash as another id */
    for (int c = 0; s->format != FMT_CRITEO && c < want; c++)
        if (FLEN(c) && FIELD(c)[0] == '"')
            return ss_fail(e, SS_EFORMAT, "column %d: a quoted field (%s): quotes are not "
                           "read, so a separator inside them would shift the columns; write "
                           "the data without quotes", c, show(FIELD(c), FLEN(c)).s);

    float label = NAN; /* no label column: unlabeled data, only scored */
    if (s->label_col >= 0) {
        const char *p = FIELD(s->label_col);
        size_t n = FLEN(s->label_col);
        double v;
        if (n == 1 && (p[0] == '0' || p[0] == '1'))
            label = (float)(p[0] - '0');
        else if (!parse_number(p, n, &v) && (v == 0.0 || v == 1.0))
            label = (float)v;
        else
            return ss_fail(e, SS_EFORMAT, "label \"%s\" is not 0 or 1", show(p, n).s);
    }

    int i = b->n;
    float *dense = b->dense + (size_t)i * (size_t)s->n_dense;
    const float missing = s->missing_is_nan ? NAN : 0.0f;
    for (int j = 0; j < s->n_dense; j++) {
        int c = s->dense_cols[j];
        if (c < 0) { /* no dense column: the constant input */
            dense[j] = 0;
            continue;
        }
        if (dense_value(FIELD(c), FLEN(c), missing, &dense[j])) {
            size_t n = FLEN(c);
            return ss_fail(e, SS_EFORMAT, "column %d: dense value \"%s\" is not a number", c,
                           show(FIELD(c), n).s);
        }
    }

    int T = s->n_cat;
    size_t base = (size_t)i * (size_t)T;
    size_t pos = (size_t)b->off[base];
    batch_reserve_ids(b, pos + (size_t)T);
    for (int t = 0; t < T; t++) {
        int c = s->cat_cols[t];
        const char *p = FIELD(c);
        size_t n = FLEN(c);
        if (s->is_multihot[t] && n) {
            int rc = parse_bag(s, c, p, n, b, &pos, T - t - 1, e);
            if (rc)
                return rc;
        } else {
            uint64_t id;
            if (token_id(s->cat_encoding, p, n, &id))
                return bad_token(e, s->cat_encoding, c, p, n);
            b->ids[pos++] = id;
        }
        if (pos > INT32_MAX)
            return ss_fail(e, SS_EINVAL, "parse_line: more than 2^31 ids in one batch");
        b->off[base + (size_t)t + 1] = (int32_t)pos;
    }
#undef FIELD
#undef FLEN
    b->label[i] = label;
    b->n = i + 1;
    return 0;
}
