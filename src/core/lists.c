/* The lists a config value may hold, parsed and checked: MLP widths
 * ("13-512-256"), column lists ("1-13,15"), table rows ("1000,2000"). */
#include "shadowsync/core.h"

#include <glib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Digits only, at most limit; len characters of s. */
static int parse_uint(const char *s, size_t len, int64_t limit, int64_t *out)
{
    int64_t v = 0;
    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!g_ascii_isdigit(s[i]) || v > (limit - (s[i] - '0')) / 10)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

static int parse_positive(const char *s, size_t len, int64_t limit, int64_t *out)
{
    return parse_uint(s, len, limit, out) || *out == 0 ? -1 : 0;
}

int ss_check_rows(const char *rows, struct ss_err *e)
{
    int n = 0;
    for (const char *p = rows;; n++) {
        const char *end = strchrnul(p, ',');
        int64_t v;
        if (n == SS_MAX_TABLES)
            return ss_fail(e, SS_EINVAL, "config: model.rows = \"%s\" lists more than %d tables",
                           rows, SS_MAX_TABLES);
        int is_auto = end - p == 4 && !strncmp(p, "auto", 4);
        if (!is_auto && parse_positive(p, (size_t)(end - p), INT64_MAX, &v))
            return ss_fail(e, SS_EINVAL,
                           "config: model.rows = \"%s\" is not a positive integer (or auto) or "
                           "a comma list of them", rows);
        if (!*end)
            return 0;
        p = end + 1;
    }
}

static int dims_parse(const char *s, int *dims, int max, int min_n, struct ss_err *e,
                      const char *key, const char *shown);

/* model.top may begin with "auto": its input width is computed. */
int ss_check_top(const char *top, struct ss_err *e)
{
    int dims[SS_MAX_LAYERS + 1], n;
    if (strncmp(top, "auto", 4))
        n = ss_parse_dims(top, dims, SS_MAX_LAYERS + 1, e, "model.top");
    else if (top[4] != '-')
        n = ss_fail(e, SS_EINVAL, "config: model.top = \"%s\" is not W-...-1 or auto-...-1", top);
    else
        n = dims_parse(top + 5, dims, SS_MAX_LAYERS, 1, e, "model.top", top);
    return n < 0 ? n : 0;
}

static int dims_parse(const char *s, int *dims, int max, int min_n, struct ss_err *e,
                      const char *key, const char *shown)
{
    int n = 0;
    key = key ? key : "dims";
    for (const char *p = s;;) {
        const char *end = strchrnul(p, '-');
        int64_t v;
        if (parse_positive(p, (size_t)(end - p), INT32_MAX, &v))
            return ss_fail(e, SS_EINVAL,
                           "config: %s = \"%s\" is not widths like 13-512-256 (each positive)",
                           key, shown);
        if (n == max)
            return ss_fail(e, SS_EINVAL, "config: %s = \"%s\" has more than %d widths", key,
                           shown, max);
        dims[n++] = (int)v;
        if (!*end)
            break;
        p = end + 1;
    }
    if (n < min_n)
        return ss_fail(e, SS_EINVAL, "config: %s = \"%s\" needs at least %d widths", key, shown,
                       min_n);
    return n;
}

int ss_parse_dims(const char *s, int *dims, int max, struct ss_err *e, const char *key)
{
    return dims_parse(s, dims, max, 2, e, key, s);
}

/* One item of a column list: "7" or "1-13", surrounding blanks allowed. */
static int parse_col_item(const char *p, size_t len, int64_t *lo, int64_t *hi)
{
    while (len && g_ascii_isspace(*p))
        p++, len--;
    while (len && g_ascii_isspace(p[len - 1]))
        len--;
    const char *dash = memchr(p, '-', len);
    if (!dash) {
        if (parse_uint(p, len, SS_MAX_COLS - 1, lo))
            return -1;
        *hi = *lo;
        return 0;
    }
    size_t a = (size_t)(dash - p);
    if (parse_uint(p, a, SS_MAX_COLS - 1, lo) ||
        parse_uint(dash + 1, len - a - 1, SS_MAX_COLS - 1, hi))
        return -1;
    return *lo > *hi ? -1 : 0;
}

/* A column's name: a letter or _ first, then letters, digits, _ . - */
static int is_name(const char *p, size_t len)
{
    if (!len || !(g_ascii_isalpha(*p) || *p == '_'))
        return 0;
    for (size_t i = 1; i < len; i++)
        if (!(g_ascii_isalnum(p[i]) || p[i] == '_' || p[i] == '.' || p[i] == '-'))
            return 0;
    return 1;
}

int ss_parse_named_cols(const char *s, int *cols, int max, char *const *names, int n_names,
                        struct ss_err *e, const char *key)
{
    int n = 0;
    key = key ? key : "columns";
    if (!*s)
        return 0;
    for (const char *p = s;;) {
        const char *end = strchrnul(p, ',');
        int64_t lo, hi;
        const char *q = p;
        size_t len = (size_t)(end - p);
        while (len && g_ascii_isspace(*q))
            q++, len--;
        while (len && g_ascii_isspace(q[len - 1]))
            len--;
        if (n_names >= 0 && is_name(q, len)) {
            lo = hi = SS_COL_NAMED;
            for (int k = 0; names && k < n_names && lo < 0; k++)
                if (strlen(names[k]) == len && !memcmp(names[k], q, len))
                    lo = hi = k;
            if (names && lo < 0)
                return ss_fail(e, SS_EINVAL, "config: %s: no column is named \"%.*s\" in the "
                               "header", key, (int)len, q);
        } else if (parse_col_item(p, (size_t)(end - p), &lo, &hi)) {
            return ss_fail(e, SS_EINVAL,
                           "config: %s = \"%s\" is not columns like 1-13,20 (0-based, below %d)%s",
                           key, s, SS_MAX_COLS, n_names >= 0 ? " or the header's names" : "");
        }
        if (hi - lo + 1 > max - n)
            return ss_fail(e, SS_EINVAL, "config: %s = \"%s\" lists more than %d columns", key, s,
                           max);
        for (int64_t i = lo; i <= hi; i++)
            cols[n++] = (int)i;
        if (!*end)
            return n;
        p = end + 1;
    }
}

int ss_parse_cols(const char *s, int *cols, int max, struct ss_err *e, const char *key)
{
    return ss_parse_named_cols(s, cols, max, NULL, -1, e, key);
}
