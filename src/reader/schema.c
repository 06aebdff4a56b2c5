/* Resolving a data path's schema from the config (DESIGN §5): binary shards
 * when the path says so (a *.bin file, a directory or glob of only *.bin
 * files) or data.format = binary, their feature counts taken from the first
 * shard's header; otherwise Criteo TSV (format criteo, or auto with the
 * column keys at their defaults), the column keys (format csv, or auto
 * with any of them set), or libSVM/libFM lines whose fields the column keys
 * name (format libsvm). */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A one-character config string; "\t" as a tab or as backslash-t, or "tab". */
static int one_char(const char *v, char dflt, const char *key, char *out, struct ss_err *e)
{
    if (!v || !*v)
        *out = dflt;
    else if (!strcmp(v, "\\t") || !strcmp(v, "tab"))
        *out = '\t';
    else if (strlen(v) == 1)
        *out = v[0];
    else
        return ss_fail(e, SS_EINVAL, "config: %s = \"%s\" is not one character", key, v);
    if (*out == '\n' || *out == '\r')
        return ss_fail(e, SS_EINVAL, "config: %s cannot be a line break", key);
    return 0;
}

static int path_is_binary(const char *path)
{
    if (!path || !*path)
        return 0;
    if (reader_has_suffix(path, ".bin"))
        return 1;
    char **f;
    int n, bin = 1, shards = 0;
    struct ss_err e;
    if (reader_list_files(path, PICK_ALL, &f, &n, &e))
        return 0;
    for (int i = 0; i < n; i++) { /* an empty marker beside shards (_SUCCESS) is no text */
        struct stat st;
        int is_bin = reader_has_suffix(f[i], ".bin");
        shards += is_bin;
        bin &= is_bin || (stat(f[i], &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);
    }
    reader_free_files(f, n);
    return bin && shards > 0;
}

static int binary_schema(struct schema *s, const char *path, struct ss_err *e)
{
    char **f;
    int n;
    s->format = FMT_BINARY;
    if (!path || !*path)
        return 0;
    int rc = reader_list_files(path, PICK_BINARY, &f, &n, e);
    if (rc)
        return rc;
    int fd = open(f[0], O_RDONLY | O_CLOEXEC);
    struct shard_header h;
    if (fd < 0)
        rc = ss_fail(e, SS_EIO, "%s: %s", f[0], strerror(errno));
    else
        rc = reader_shard_check(f[0], fd, &h, NULL, e);
    if (fd >= 0)
        close(fd);
    if (!rc) {
        s->n_dense = (int)h.n_dense;
        s->n_cat = (int)h.n_tables;
    }
    reader_free_files(f, n);
    return rc;
}

static void criteo_schema(struct schema *s)
{
    s->format = FMT_CRITEO;
    s->label_col = 0;
    s->n_dense = 13;
    s->n_cat = 26;
    for (int j = 0; j < 13; j++)
        s->dense_cols[j] = 1 + j;
    for (int t = 0; t < 26; t++)
        s->cat_cols[t] = 14 + t;
    s->cat_encoding = CAT_HEX;
    s->n_cols = 40;
}

static int cols(const char *v, int *out, const char *key, struct ss_err *e)
{
    if (!v || !*v)
        return 0;
    return ss_parse_cols(v, out, SS_MAX_COLS, e, key);
}

/* data.multihot_cols: which categorical features hold bags (every column
 * one of the categorical columns, those of `where`). */
static int mark_multihot(struct schema *s, const struct ss_config *c, const char *where,
                         struct ss_err *e)
{
    int multihot[SS_MAX_COLS];
    int nm = cols(c->data.multihot_cols, multihot, "data.multihot_cols", e);
    if (nm < 0)
        return nm;
    for (int m = 0; m < nm; m++) {
        int t = 0;
        while (t < s->n_cat && s->cat_cols[t] != multihot[m])
            t++;
        if (t == s->n_cat)
            return ss_config_fail(e, c, "data.multihot_cols data.cat_cols",
                                  "data.multihot_cols: column %d is not in %s", multihot[m],
                                  where);
        s->is_multihot[t] = 1;
    }
    if (nm && s->multihot_sep == s->sep)
        return ss_config_fail(e, c, "data.multihot_sep data.separator",
                              "data.multihot_sep is the same character as data.separator");
    return 0;
}

/* format = csv: the column keys, checked for overlaps. */
static int csv_schema(struct schema *s, const struct ss_config *c, struct ss_err *e)
{
    int rc;
    unsigned char role[SS_MAX_COLS] = {0}; /* 1 label, 2 dense, 3 categorical */
    s->format = FMT_CSV;
    s->label_col = c->data.label_col;
    if (s->label_col < -1 || s->label_col >= SS_MAX_COLS)
        return ss_fail(e, SS_EINVAL, "config: data.label_col = %d is out of range", s->label_col);
    int nd = cols(c->data.dense_cols, s->dense_cols, "data.dense_cols", e);
    if (nd < 0)
        return nd;
    int nc = cols(c->data.cat_cols, s->cat_cols, "data.cat_cols", e);
    if (nc < 0)
        return nc;
    s->n_dense = nd;
    s->n_cat = nc;
    if (s->label_col >= 0) /* -1: no label (unlabeled data to score) */
        role[s->label_col] = 1;
    int maxc = s->label_col;
    for (int j = 0; j < nd; j++) {
        int k = s->dense_cols[j];
        if (role[k])
            return ss_config_fail(e, c, role[k] == 1 ? "data.dense_cols data.label_col"
                                                     : "data.dense_cols",
                                  "data.dense_cols: column %d is %s", k,
                                  role[k] == 1 ? "the label column" : "listed twice");
        role[k] = 2;
        maxc = k > maxc ? k : maxc;
    }
    for (int t = 0; t < nc; t++) {
        int k = s->cat_cols[t];
        if (role[k])
            return ss_config_fail(e, c, role[k] == 1   ? "data.cat_cols data.label_col"
                                        : role[k] == 2 ? "data.cat_cols data.dense_cols"
                                                       : "data.cat_cols",
                                  "data.cat_cols: column %d is %s", k,
                                  role[k] == 1   ? "the label column"
                                  : role[k] == 2 ? "also a dense column" : "listed twice");
        role[k] = 3;
        maxc = k > maxc ? k : maxc;
    }
    if ((rc = mark_multihot(s, c, "data.cat_cols", e)) < 0)
        return rc;
    s->cat_encoding = c->data.cat_encoding;
    if (s->cat_encoding != CAT_HEX && s->cat_encoding != CAT_DEC && s->cat_encoding != CAT_HASH)
        return ss_fail(e, SS_EINVAL, "config: data.cat_encoding %d is unknown", s->cat_encoding);
    s->n_cols = maxc + 1;
    return 0;
}

/* data.fields: "lo-hi,lo-hi,...", a range per field in field order, none
 * overlapping (a lone number is a field of one index). */
static int field_ranges(struct schema *s, const struct ss_config *c, struct ss_err *e)
{
    const char *p = c->data.fields;
    if (!p || !*p)
        return 0;
    while (*p) {
        char *end;
        while (*p == ' ')
            p++;
        uint64_t lo = strtoull(p, &end, 10), hi = lo;
        int ok = end > p && *p != '-';
        if (ok && *end == '-') {
            p = end + 1;
            hi = strtoull(p, &end, 10);
            ok = end > p && *p != '-' && hi >= lo;
        }
        while (ok && *end == ' ')
            end++;
        if (!ok || (*end && *end != ','))
            return ss_config_fail(e, c, "data.fields", "data.fields = \"%s\": field %d is not "
                                  "an index range lo-hi", c->data.fields, s->n_fields);
        if (s->n_fields == SS_MAX_COLS)
            return ss_config_fail(e, c, "data.fields", "data.fields lists more than %d fields",
                                  SS_MAX_COLS);
        for (int f = 0; f < s->n_fields; f++)
            if (lo <= s->field_hi[f] && s->field_lo[f] <= hi)
                return ss_config_fail(e, c, "data.fields", "data.fields: fields %d and %d "
                                      "share indices", f, s->n_fields);
        s->field_lo[s->n_fields] = lo;
        s->field_hi[s->n_fields++] = hi;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* format = libsvm: data.dense_cols and data.cat_cols name fields (libFM's
 * field numbers, or data.fields' ranges by place); the label opens each
 * line. */
static int libsvm_schema(struct schema *s, const struct ss_config *c, struct ss_err *e)
{
    int rc = field_ranges(s, c, e);
    if (rc)
        return rc;
    s->format = FMT_LIBSVM;
    s->label_col = 0;
    s->n_cols = 1;
    s->cat_encoding = CAT_DEC;
    int nd = cols(c->data.dense_cols, s->dense_cols, "data.dense_cols", e);
    if (nd < 0)
        return nd;
    int nc = cols(c->data.cat_cols, s->cat_cols, "data.cat_cols", e);
    if (nc < 0)
        return nc;
    s->n_dense = nd;
    s->n_cat = nc;
    for (int j = 0; j < nd; j++) {
        int f = s->dense_cols[j];
        if (s->field_role[f])
            return ss_config_fail(e, c, "data.dense_cols", "data.dense_cols: field %d is listed "
                                  "twice", f);
        s->field_role[f] = -(j + 1);
    }
    for (int t = 0; t < nc; t++) {
        int f = s->cat_cols[t];
        if (s->field_role[f])
            return ss_config_fail(e, c, s->field_role[f] < 0 ? "data.cat_cols data.dense_cols"
                                                             : "data.cat_cols",
                                  "data.cat_cols: field %d is %s", f,
                                  s->field_role[f] < 0 ? "also a dense field" : "listed twice");
        s->field_role[f] = t + 1;
    }
    for (int k = 0; k < nd + nc && s->n_fields; k++) {
        int f = k < nd ? s->dense_cols[k] : s->cat_cols[k - nd];
        if (f >= s->n_fields)
            return ss_config_fail(e, c, k < nd ? "data.dense_cols data.fields"
                                               : "data.cat_cols data.fields",
                                  "%s names field %d, but data.fields has %d fields (0-%d)",
                                  k < nd ? "data.dense_cols" : "data.cat_cols", f, s->n_fields,
                                  s->n_fields - 1);
    }
    if (c->data.multihot_cols && *c->data.multihot_cols)
        return ss_config_fail(e, c, "data.multihot_cols data.format", "data.multihot_cols "
                              "applies to csv and criteo: a libsvm line's field is a bag "
                              "already (every feature of the field in it)");
    return 0;
}

/* The first column key set away from Criteo's layout (label 0, dense 1-13,
 * categorical 14-39 in hex; an empty one is unset), or NULL. */
static const char *column_key_set(const struct ss_config *c)
{
    const char *d = c->data.dense_cols, *k = c->data.cat_cols;
    return c->data.label_col != 0           ? "data.label_col"
           : d && *d && strcmp(d, "1-13")   ? "data.dense_cols"
           : k && *k && strcmp(k, "14-39")  ? "data.cat_cols"
           : c->data.cat_encoding != CAT_HEX ? "data.cat_encoding"
                                             : NULL;
}

int schema_from_config(struct schema *s, const struct ss_config *c, const char *path,
                       struct ss_err *e)
{
    memset(s, 0, sizeof *s);
    int fmt = c->data.format;
    if (fmt != FMT_AUTO && fmt != FMT_CRITEO && fmt != FMT_CSV && fmt != FMT_BINARY &&
        fmt != FMT_LIBSVM)
        return ss_fail(e, SS_EINVAL, "config: data.format %d is unknown", fmt);
    if ((fmt == FMT_CRITEO || fmt == FMT_CSV || fmt == FMT_LIBSVM) && path_is_binary(path))
        return ss_fail(e, SS_EINVAL, "%s holds binary shards (*.bin), but data.format = %s: set "
                       "data.format = binary (or auto)", path,
                       fmt == FMT_CSV ? "csv" : fmt == FMT_LIBSVM ? "libsvm" : "criteo");
    if (fmt == FMT_BINARY || path_is_binary(path))
        return binary_schema(s, path, e);
    if (c->data.fields && *c->data.fields && fmt != FMT_LIBSVM)
        return ss_config_fail(e, c, "data.fields data.format", "data.fields applies to "
                              "data.format = libsvm");
    if (fmt == FMT_LIBSVM) {
        s->header_lines = c->data.header > 0 ? c->data.header : 0;
        return libsvm_schema(s, c, e);
    }
    const char *cols = column_key_set(c); /* a layout of the user's: the column keys apply */
    if (fmt == FMT_CRITEO && cols) {
        char keys[64];
        snprintf(keys, sizeof keys, "%s data.format", cols);
        return ss_config_fail(e, c, keys, "%s applies to data.format = csv (criteo is label, 13 "
                              "dense and 26 hex categorical columns): set data.format = csv (or "
                              "auto)", cols);
    }
    if (fmt == FMT_AUTO && cols)
        fmt = FMT_CSV;
    int rc = one_char(c->data.separator, '\t', "data.separator", &s->sep, e);
    if (!rc)
        rc = one_char(c->data.multihot_sep, ',', "data.multihot_sep", &s->multihot_sep, e);
    if (rc)
        return rc;
    s->header_lines = c->data.header > 0 ? c->data.header : 0;
    if (fmt == FMT_CSV)
        return csv_schema(s, c, e);
    criteo_schema(s);
    return mark_multihot(s, c, "the Criteo columns 14-39", e);
}
