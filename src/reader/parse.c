/* Text lines into batch slots: Criteo TSV and schema-driven CSV/TSV.
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
