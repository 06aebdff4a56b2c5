/* The dense part of a saved model: DIR/dense.bin, a small header (magic,
 * version, parameter count; version 2 adds model.pooling, written only for
 * mean, so a sum model's file is as before) then the flat float vector. A
 * file is refused with a config of other pooling: its weights fit that. */
#include "shadowsync/trainer.h"

#include <errno.h>
#include <string.h>

#define DENSE_MAGIC "SSDENSE\0"

static const char *const pool_names[] = {"sum", "mean"};

int dense_save(const float *w, size_t n, int pooling, const char *path, struct ss_err *e)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", path, strerror(errno));
    uint32_t version = pooling == POOL_SUM ? 1 : 2, pool = (uint32_t)pooling;
    uint64_t count = n;
    int ok = fwrite(DENSE_MAGIC, 8, 1, f) == 1 && fwrite(&version, 4, 1, f) == 1 &&
             fwrite(&count, 8, 1, f) == 1 && (version == 1 || fwrite(&pool, 4, 1, f) == 1) &&
             fwrite(w, sizeof(float), n, f) == n;
    if (fclose(f) != 0 || !ok)
        return ss_fail(e, SS_EIO, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

int dense_load(float *w, size_t n, int pooling, const char *path, struct ss_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot open: %s", path, strerror(errno));
    char magic[8];
    uint32_t version = 0;
    uint32_t pool = POOL_SUM;
    uint64_t count = 0;
    int rc = 0;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, DENSE_MAGIC, 8) != 0 ||
        fread(&version, 4, 1, f) != 1 || fread(&count, 8, 1, f) != 1 ||
        (version == 2 && fread(&pool, 4, 1, f) != 1))
        rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync dense model file", path);
    else if (version != 1 && version != 2)
        rc = ss_fail(e, SS_EFORMAT, "%s: unsupported version %u", path, version);
    else if (pool > POOL_MEAN)
        rc = ss_fail(e, SS_EFORMAT, "%s: unknown pooling %u", path, pool);
    else if ((int)pool != pooling)
        rc = ss_fail(e, SS_EINVAL, "%s: trained with model.pooling = %s, the config has %s: "
                     "set model.pooling = %s", path, pool_names[pool], pool_names[pooling],
                     pool_names[pool]);
    else if (count != n)
        rc = ss_fail(e, SS_EFORMAT, "%s: %llu parameters, the config's model has %zu", path,
                     (unsigned long long)count, n);
    else if (fread(w, sizeof(float), n, f) != n)
        rc = ss_fail(e, SS_EFORMAT, "%s: truncated", path);
    fclose(f);
    return rc;
}
