/* The dense part of a saved model: DIR/dense.bin, a small header (magic,
 * version, parameter count; version 2 adds model.pooling; version 3 adds
 * the MLPs' widths) then the flat float vector. A file is refused with a
 * config of other pooling or other layers: its weights fit those, even
 * where the parameter count is the same. Versions 1 and 2 (no widths)
 * still load. */
#include "shadowsync/ckpt.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define DENSE_MAGIC "SSDENSE\0"
#define DENSE_VERSION 3

static const char *const pool_names[] = {"sum", "mean"};

/* The MLPs' widths as stored: n_bot, bot[0..n_bot], n_top, top[0..n_top]. */
static int shape_of(const struct model_layout *l, uint32_t *v)
{
    int k = 0;
    v[k++] = (uint32_t)l->n_bot;
    for (int i = 0; i <= l->n_bot; i++)
        v[k++] = (uint32_t)l->bot[i];
    v[k++] = (uint32_t)l->n_top;
    for (int i = 0; i <= l->n_top; i++)
        v[k++] = (uint32_t)l->top[i];
    return k;
}

/* "bottom 13-64-8, top 36-16-1" of a stored shape. */
static void shape_text(const uint32_t *v, char *out, size_t cap)
{
    size_t at = 0;
    int k = 0;
    for (int part = 0; part < 2; part++) {
        uint32_t n = v[k++];
        at += (size_t)snprintf(out + at, cap - at, "%s", part ? ", top " : "bottom ");
        for (uint32_t i = 0; i <= n && at < cap; i++)
            at += (size_t)snprintf(out + at, cap - at, i ? "-%u" : "%u", v[k++]);
    }
}

/* dense.bin's head as written: the magic, the version, the count (a
 * uint64_t at offset 12, kept as two words: no padding), the pooling and
 * the shape's words. */
struct dense_head {
    char magic[8];
    uint32_t version, count[2], pool, shape[2 * SS_MAX_LAYERS + 4];
};

int dense_save(const float *w, size_t n, const struct model_layout *l, const char *path,
               struct ss_err *e)
{
    struct dense_head head = {DENSE_MAGIC, DENSE_VERSION, {0, 0}, (uint32_t)l->pooling, {0}};
    uint64_t count = n;
    memcpy(head.count, &count, 8);
    size_t k = (size_t)shape_of(l, head.shape);
    /* a copy taken at once: w may be a replica the shadow thread blends
     * into (a Hogwild read, docs/design.md §8), and the write runs on the
     * writer's thread, which a stop may leave holding it */
    float *v = ss_xmalloc(n ? n * sizeof(float) : 1);
    memcpy(v, w, n * sizeof(float));
    struct ss_span parts[2] = {{&head, offsetof(struct dense_head, shape) + 4 * k},
                               {v, n * sizeof(float)}};
    return ss_write_file(path, parts, 2, 0, v, e);
}

/* Version 3's widths: 0, or -1 with e set where they are not the config's. */
static int check_shape(FILE *f, const struct model_layout *l, const char *path, struct ss_err *e)
{
    uint32_t want[2 * SS_MAX_LAYERS + 4], got[2 * SS_MAX_LAYERS + 4];
    int k = shape_of(l, want), at = 0;
    for (int part = 0; part < 2; part++) { /* a count, then its widths */
        if (fread(&got[at], 4, 1, f) != 1 || got[at] > SS_MAX_LAYERS ||
            fread(&got[at + 1], 4, got[at] + 1, f) != got[at] + 1)
            return ss_fail(e, SS_EFORMAT, "%s: not a shadowsync dense model file", path);
        at += (int)got[at] + 2;
    }
    if (at == k && !memcmp(got, want, (size_t)k * 4))
        return 0;
    char a[256], b[256];
    shape_text(got, a, sizeof a);
    shape_text(want, b, sizeof b);
    int tb = (int)got[0] + 2; /* the top's count; only its input width differs: the tables */
    if (at == k && !memcmp(got, want, (size_t)tb * 4) && got[tb] == want[tb] &&
        !memcmp(got + tb + 2, want + tb + 2, (size_t)(k - tb - 2) * 4))
        return ss_fail(e, SS_EINVAL, "%s: a model of %s; the config's is %s: the top's input "
                       "(the bottom's output and its dot products with every embedding table) "
                       "differs, so the model has another number of tables: set data.cat_cols "
                       "and model.rows to the model's (model.top follows with auto)", path, a, b);
    return ss_fail(e, SS_EINVAL, "%s: a model of %s; the config's is %s: set model.bottom and "
                   "model.top to the model's", path, a, b);
}

int dense_load(float *w, size_t n, const struct model_layout *l, const char *path,
               struct ss_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot open: %s", path, strerror(errno));
    char magic[8];
    uint32_t version = 0;
    uint32_t pool = POOL_SUM;
    uint64_t count = 0;
    int rc = 0, pooling = l->pooling;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, DENSE_MAGIC, 8) != 0 ||
        fread(&version, 4, 1, f) != 1 || fread(&count, 8, 1, f) != 1 ||
        (version >= 2 && fread(&pool, 4, 1, f) != 1))
        rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync dense model file", path);
    else if (version < 1 || version > DENSE_VERSION)
        rc = ss_fail(e, SS_EFORMAT, "%s: unsupported version %u", path, version);
    else if (pool > POOL_MEAN)
        rc = ss_fail(e, SS_EFORMAT, "%s: unknown pooling %u", path, pool);
    else if ((int)pool != pooling)
        rc = ss_fail(e, SS_EINVAL, "%s: trained with model.pooling = %s, the config has %s: "
                     "set model.pooling = %s", path, pool_names[pool], pool_names[pooling],
                     pool_names[pool]);
    else if (version == 3 && check_shape(f, l, path, e) < 0)
        rc = e->code;
    else if (count != n)
        rc = ss_fail(e, SS_EFORMAT, "%s: %llu parameters, the config's model has %zu", path,
                     (unsigned long long)count, n);
    else if (fread(w, sizeof(float), n, f) != n)
        rc = ss_fail(e, SS_EFORMAT, "%s: truncated", path);
    else if (fgetc(f) != EOF) /* something appended, or another file's tail */
        rc = ss_fail(e, SS_EFORMAT, "%s: bytes past its %zu parameters: not the file it was "
                     "written as", path, n);
    fclose(f);
    return rc;
}
