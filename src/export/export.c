/* `shadowsync export` (docs/export.md): a saved model's files into an ONNX
 * graph (onnx.c), its tables as external data and the preprocessing JSON
 * (prep.c). The tables are streamed from tables*.bin into the data file
 * row chunk by row chunk (embps_saved_walk), their optimizer state
 * dropped, the hot rows' values (hot.bin) written over their tables'
 * stale copies; so the export holds the dense parameters and a chunk, not
 * the tables. Each file is written as NAME.tmp and renamed once all three
 * are whole, the graph last. */
#include "internal.h"
#include "shadowsync/ckpt.h"
#include "shadowsync/embps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ALIGN 4096 /* each table's offset in the data file: a page, so a runtime may map it */

/* The tables' data file being written. */
struct data_file {
    const struct model_layout *l;
    const char *path;
    int fd;
    int64_t *offset, *bytes, *got;  /* [n_tables]: where each table sits, rows written */
    float *row;                     /* one chunk's rows without their state */
    size_t row_cap;
};

static int put(struct data_file *d, const void *p, size_t n, int64_t at, struct ss_err *e)
{
    for (const char *c = p; n;) {
        ssize_t k = pwrite(d->fd, c, n, at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return ss_fail(e, SS_EIO, "%s: write failed: %s", d->path,
                           k < 0 ? strerror(errno) : "no room");
        c += k, n -= (size_t)k, at += k;
    }
    return 0;
}

/* embps_saved_walk's chunk: rows [row, row + n) of table gid, their dim
 * floats to the table's place. */
static int put_rows(void *arg, int32_t gid, int64_t table_rows, int64_t row, int64_t n,
                    const float *rows, int stride, struct ss_err *e)
{
    struct data_file *d = arg;
    const struct model_layout *l = d->l;
    if (gid < 0 || gid >= l->n_tables)
        return ss_fail(e, SS_EFORMAT, "the saved tables hold a table %d; the config's model "
                       "has %d tables (data.cat_cols, model.rows): give the model's own", gid,
                       l->n_tables);
    if (table_rows != l->rows[gid])
        return ss_fail(e, SS_EFORMAT, "table %d was saved with %lld rows, the config's has "
                       "%lld (model.rows: give the model's own)", gid, (long long)table_rows,
                       (long long)l->rows[gid]);
    size_t dim = (size_t)l->dim, need = (size_t)n * dim;
    const float *src = rows;
    if (stride != l->dim) { /* the optimizer state dropped */
        if (need > d->row_cap)
            d->row = ss_xrealloc(d->row, (d->row_cap = need) * sizeof(float));
        for (int64_t r = 0; r < n; r++)
            memcpy(d->row + (size_t)r * dim, rows + (size_t)r * (size_t)stride,
                   dim * sizeof(float));
        src = d->row;
    }
    d->got[gid] += n;
    return put(d, src, need * sizeof(float), d->offset[gid] + row * (int64_t)(dim * sizeof(float)),
               e);
}

/* The hot rows' values (dir/hot.bin, in hot-rows.bin's order) over their
 * tables' copies; *n_hot: how many. */
static int fold_hot(struct data_file *d, const char *dir, int64_t *n_hot, struct ss_err *e)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/hot-rows.bin", dir);
    *n_hot = 0;
    if (access(p, F_OK) != 0)
        return 0;
    struct hot_set *h = NULL;
    int rc = hot_load(&h, p, d->l, e);
    if (rc < 0)
        return rc;
    size_t dim = (size_t)d->l->dim, n = (size_t)h->n * dim;
    float *v = ss_xmalloc((n ? n : 1) * sizeof(float));
    snprintf(p, sizeof p, "%s/hot.bin", dir);
    rc = dense_load(v, n, d->l, p, e);
    for (int64_t i = 0; rc == 0 && i < h->n; i++)
        rc = put(d, v + (size_t)i * dim, dim * sizeof(float),
                 d->offset[h->table[i]] + h->row[i] * (int64_t)(dim * sizeof(float)), e);
    *n_hot = h->n;
    free(v);
    hot_free(h);
    return rc;
}

/* The model's files: dir itself, or a run directory's model/. */
static int find_model(const char *dir, char *src, size_t cap, struct ss_err *e)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/dense.bin", dir);
    if (access(p, F_OK) == 0) {
        snprintf(src, cap, "%s", dir);
        return 0;
    }
    snprintf(p, sizeof p, "%s/model/dense.bin", dir);
    if (access(p, F_OK) == 0) {
        snprintf(src, cap, "%s/model", dir);
        return 0;
    }
    snprintf(p, sizeof p, "%s/MANIFEST", dir);
    return ss_fail(e, SS_EINVAL, "--model %s: %s", dir,
                   access(p, F_OK) == 0
                       ? "a checkpoint: export a saved model (a run's model/, written when the "
                         "run ends); a checkpoint's model is saved by training on from it "
                         "(train --resume)"
                       : "no dense.bin there or in its model/ (a run with output.save_model = "
                         "false saves none)");
}

/* The tables into path (created whole, then filled); d's arrays owned by
 * the caller. */
static int write_tables(struct data_file *d, const char *src, int64_t *n_hot, struct ss_err *e)
{
    const struct model_layout *l = d->l;
    int64_t at = 0;
    for (int t = 0; t < l->n_tables; t++) {
        d->offset[t] = at;
        d->bytes[t] = l->rows[t] * l->dim * (int64_t)sizeof(float);
        at += (d->bytes[t] + ALIGN - 1) / ALIGN * ALIGN;
    }
    d->fd = open(d->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (d->fd < 0)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", d->path, strerror(errno));
    int rc = 0;
    if (ftruncate(d->fd, at) != 0)
        rc = ss_fail(e, SS_EIO, "%s: cannot make it %lld bytes: %s", d->path, (long long)at,
                     strerror(errno));
    if (rc == 0)
        rc = embps_saved_walk(src, l->dim, put_rows, d, e);
    for (int t = 0; rc == 0 && t < l->n_tables; t++)
        if (d->got[t] != l->rows[t])
            rc = ss_fail(e, SS_EFORMAT, "%s: table %d: %lld of its %lld rows found in "
                         "tables*.bin: a file of the set is missing? (a cluster job writes one "
                         "tables-psK.bin per embedding PS, DES one per trainer)", src, t,
                         (long long)d->got[t], (long long)l->rows[t]);
    if (rc == 0)
        rc = fold_hot(d, src, n_hot, e);
    if (close(d->fd) != 0 && rc == 0)
        rc = ss_fail(e, SS_EIO, "%s: write failed: %s", d->path, strerror(errno));
    return rc;
}

/* The last part of a path: the name the graph and the JSON know a file by
 * (they sit side by side). */
static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int export_onnx(const struct ss_config *c, const char *dir, const char *out, FILE *say,
                struct ss_err *e)
{
    char why[512], src[4200];
    if (!export_available(why, sizeof why))
        return ss_fail(e, SS_ESTATE, "export: %s", why);
    size_t len = strlen(out);
    if (len == 0 || out[len - 1] == '/')
        return ss_fail(e, SS_EINVAL, "--out needs a file name (FILE.onnx)");
    double t0 = ss_now();
    /* scoring reads no matmul seam: bf16 models export their fp32 master weights */
    struct ss_config cc = *c;
    cc.trainer.precision = PREC_FP32;
    cc.trainer.dense_backend = DENSE_AUTO;
    struct model_layout l;
    int rc = find_model(dir, src, sizeof src, e);
    if (rc < 0 || (rc = model_layout_init(&l, &cc, e)) < 0)
        return rc;
    if (c->trainer.precision == PREC_BF16)
        fprintf(say, "# trainer.precision = bf16: the graph computes in fp32 with the model's "
                "fp32 master weights, so its scores differ from a bf16 eval's by bf16's "
                "rounding\n");
    size_t plen = len + 16;
    char *data = ss_xmalloc(plen), *json = ss_xmalloc(plen), *tmp[3];
    snprintf(data, plen, "%s.data", out);
    snprintf(json, plen, "%s.json", out);
    const char *final[3] = {data, json, out};
    for (int i = 0; i < 3; i++) {
        tmp[i] = ss_xmalloc(plen + 4);
        snprintf(tmp[i], plen + 4, "%s.tmp", final[i]);
    }
    int T = l.n_tables;
    struct data_file d = {.l = &l, .path = tmp[0], .fd = -1};
    d.offset = ss_xcalloc((size_t)T, sizeof(int64_t));
    d.bytes = ss_xcalloc((size_t)T, sizeof(int64_t));
    d.got = ss_xcalloc((size_t)T, sizeof(int64_t));
    float *w = ss_aligned(l.n_params * sizeof(float));
    int64_t n_hot = 0;
    char p[4300];
    snprintf(p, sizeof p, "%s/dense.bin", src);
    rc = dense_load(w, l.n_params, &l, p, e);
    if (rc == 0)
        rc = write_tables(&d, src, &n_hot, e);
    struct export_tables x = {base_name(data), d.offset, d.bytes};
    int weighted = 0;
    if (rc == 0)
        rc = export_prep(&cc, &l, base_name(out), base_name(data), tmp[1], &weighted, e);
    if (rc == 0)
        rc = export_graph(&l, w, &x, weighted, tmp[2], e);
    for (int i = 0; rc == 0 && i < 3; i++)
        if (rename(tmp[i], final[i]) != 0)
            rc = ss_fail(e, SS_EIO, "%s: cannot rename it to %s: %s", tmp[i], final[i],
                         strerror(errno));
    if (rc < 0)
        for (int i = 0; i < 3; i++)
            unlink(tmp[i]);
    if (rc == 0) {
        double bytes = 0;
        for (int t = 0; t < T; t++)
            bytes += (double)d.bytes[t];
        struct stat st;
        double graph = stat(out, &st) == 0 ? (double)st.st_size : 0;
        fprintf(say, "export: %s (the graph, %.1f MB), %s (%d table%s, %.1f MB%s), %s (the "
                "preprocessing) in %.1f s\n", out, graph / 1e6, data, T, T == 1 ? "" : "s",
                bytes / 1e6, n_hot ? ", hot rows folded in" : "", json, ss_now() - t0);
    }
    for (int i = 0; i < 3; i++)
        free(tmp[i]);
    free(w);
    free(d.offset);
    free(d.bytes);
    free(d.got);
    free(d.row);
    free(data);
    free(json);
    model_layout_free(&l);
    return rc;
}
