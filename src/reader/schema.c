/* Resolving a data path's schema from the config (DESIGN §5): binary shards
 * when the path says so (a *.bin file, a directory or glob of only *.bin
 * files) or data.format = binary, their feature counts taken from the first
 * shard's header; otherwise Criteo TSV (format criteo, or auto with the
 * column keys at their defaults), the column keys (format csv, or auto
 * with any of them set), or libSVM/libFM lines whose fields the column keys
 * name (format libsvm). */
#include "internal.h"

#include <errno.h>
#include <glib.h>
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
        s->weighted = !!(h.flags & SHARD_FLAG_WEIGHTS);
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

/* A text file's first line, its columns' names (data.cat_cols = hour,C1,...). */
struct header {
    const struct ss_config *c;
    const char *path; /* the data: its first text file holds the names */
    char sep;
    int lines;        /* data.header */
    char *buf, *file;
    char **name;
    int n;            /* -1: not read yet */
};

static int read_header(struct header *h, const char *key, struct ss_err *e)
{
    if (h->n >= 0)
        return 0;
    if (h->lines < 1 || !h->path || !*h->path)
        return ss_config_fail(e, h->c, h->lines < 1 ? "data.header" : key, "%s names columns, which are read from the data's "
                              "header: %s", key, h->lines < 1 ? "set data.header = 1 (the first "
                              "line of each file holds the names)" : "no data path to read it from");
    char **f;
    int nf, rc = reader_list_files(h->path, PICK_TEXT, &f, &nf, e);
    if (rc)
        return rc;
    gzFile gz = gzopen(f[0], "rb");
    size_t cap = 1u << 20;
    h->buf = ss_xmalloc(cap);
    if (!gz || !gzgets(gz, h->buf, (int)cap))
        rc = ss_fail(e, SS_EIO, "%s: no header line to find %s's names in", f[0], key);
    if (gz)
        gzclose(gz);
    h->file = g_strdup(f[0]);
    reader_free_files(f, nf);
    if (rc)
        return rc;
    char *p = h->buf;
    if (!memcmp(p, "\xef\xbb\xbf", 3)) /* a UTF-8 byte order mark */
        p += 3;
    p[strcspn(p, "\r\n")] = 0;
    h->name = ss_xmalloc(SS_MAX_COLS * sizeof *h->name);
    for (h->n = 0; h->n < SS_MAX_COLS;) {
        char *q = strchr(p, h->sep);
        h->name[h->n++] = p;
        if (!q)
            break;
        *q = 0;
        p = q + 1;
    }
    return 0;
}

static int cols(const char *v, int *out, const char *key, struct header *h, struct ss_err *e)
{
    if (!v || !*v)
        return 0;
    int n = ss_parse_named_cols(v, out, SS_MAX_COLS, NULL, 0, e, key);
    for (int k = 0; k < n; k++)
        if (out[k] == SS_COL_NAMED) {
            int rc = read_header(h, key, e);
            if (rc || (rc = ss_parse_named_cols(v, out, SS_MAX_COLS, h->name, h->n, e, key)) >= 0)
                return rc;
            char names[256];
            int at = 0;
            for (int i = 0; i < h->n && at < (int)sizeof names - 1; i++)
                at += snprintf(names + at, sizeof names - (size_t)at, "%s%s", i ? ", " : "",
                               h->name[i]);
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg + strlen("config: "));
            return ss_config_fail(e, h->c, key, "%s of %s (data.separator \"%c\"): %s%s", why,
                                  h->file, h->sep, names, at >= (int)sizeof names - 1 ? "..." : "");
        }
    return n;
}

/* Data with no dense column gives the model one dense input, always 0: the
 * bottom MLP's biases learn the vector the interaction pairs with each
 * table's (a DLRM needs one), and the reader and model keep one shape. */
static int dense_or_constant(const char *v, int *out, struct header *h, struct ss_err *e)
{
    int nd = cols(v, out, "data.dense_cols", h, e);
    if (nd == 0)
        out[nd++] = -1;
    return nd;
}

/* data.multihot_cols: which categorical features hold bags (every column
 * one of the categorical columns, those of `where`). */
static int mark_multihot(struct schema *s, const struct ss_config *c, const char *where,
                         struct header *h, struct ss_err *e)
{
    int multihot[SS_MAX_COLS];
    int nm = cols(c->data.multihot_cols, multihot, "data.multihot_cols", h, e);
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

/* data.dense_cols and data.cat_cols into s (columns, or libsvm's fields). */
static int feature_keys(struct schema *s, const struct ss_config *c, struct header *h,
                        struct ss_err *e)
{
    int nd = dense_or_constant(c->data.dense_cols, s->dense_cols, h, e);
    if (nd < 0)
        return nd;
    int nc = cols(c->data.cat_cols, s->cat_cols, "data.cat_cols", h, e);
    if (nc < 0)
        return nc;
    s->n_dense = nd;
    s->n_cat = nc;
    return 0;
}

/* format = csv: the column keys, checked for overlaps. */
static int csv_schema(struct schema *s, const struct ss_config *c, struct header *h,
                      struct ss_err *e)
{
    int rc;
    unsigned char role[SS_MAX_COLS] = {0}; /* 1 label, 2 dense, 3 categorical */
    s->format = FMT_CSV;
    s->label_col = c->data.label_col;
    if (s->label_col < -1 || s->label_col >= SS_MAX_COLS)
        return ss_fail(e, SS_EINVAL, "config: data.label_col = %d is out of range", s->label_col);
    if ((rc = feature_keys(s, c, h, e)) < 0)
        return rc;
    int nd = s->n_dense, nc = s->n_cat;
    if (s->label_col >= 0) /* -1: no label (unlabeled data to score) */
        role[s->label_col] = 1;
    int maxc = s->label_col;
    for (int j = 0; j < nd && s->dense_cols[0] >= 0; j++) {
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
    if ((rc = mark_multihot(s, c, "data.cat_cols", h, e)) < 0)
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
static int libsvm_schema(struct schema *s, const struct ss_config *c, struct header *h,
                         struct ss_err *e)
{
    int rc = field_ranges(s, c, e);
    if (rc)
        return rc;
    s->format = FMT_LIBSVM;
    s->weighted = 1;
    s->label_col = 0;
    s->n_cols = 1;
    s->cat_encoding = CAT_DEC;
    if ((rc = feature_keys(s, c, h, e)) < 0)
        return rc;
    int nd = s->n_dense, nc = s->n_cat;
    for (int j = 0; j < nd && s->dense_cols[0] >= 0; j++) {
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
        if (f < 0)
            continue;
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
    /* libsvm's shards from convert are read as shards: no auto finds libsvm text */
    if ((fmt == FMT_CRITEO || fmt == FMT_CSV) && path_is_binary(path))
        return ss_fail(e, SS_EINVAL, "%s holds binary shards (*.bin), but data.format = %s: set "
                       "data.format = binary (or auto)", path, fmt == FMT_CSV ? "csv" : "criteo");
    if (fmt == FMT_BINARY || path_is_binary(path))
        return binary_schema(s, path, e);
    if (c->data.fields && *c->data.fields && fmt != FMT_LIBSVM)
        return ss_config_fail(e, c, "data.fields data.format", "data.fields applies to "
                              "data.format = libsvm");
    const char *cols = fmt == FMT_LIBSVM ? NULL : column_key_set(c); /* the user's layout */
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
    struct header h = {c, path, s->sep, fmt == FMT_LIBSVM ? 0 : s->header_lines, NULL, NULL,
                       NULL, -1};
    if (fmt == FMT_LIBSVM)
        rc = libsvm_schema(s, c, &h, e);
    else if (fmt == FMT_CSV)
        rc = csv_schema(s, c, &h, e);
    else {
        criteo_schema(s);
        rc = mark_multihot(s, c, "the Criteo columns 14-39", &h, e);
    }
    free(h.buf);
    g_free(h.file);
    free(h.name);
    return rc;
}
