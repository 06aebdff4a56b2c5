/* The dense part of a saved model: DIR/dense.bin, a small header (magic,
 * version, parameter count) then the flat float vector. */
#include "shadowsync/trainer.h"

#include <errno.h>
#include <string.h>

#define DENSE_MAGIC "SSDENSE\0"

int dense_save(const float *w, size_t n, const char *path, struct ss_err *e)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", path, strerror(errno));
    uint32_t version = 1;
    uint64_t count = n;
    int ok = fwrite(DENSE_MAGIC, 8, 1, f) == 1 && fwrite(&version, 4, 1, f) == 1 &&
             fwrite(&count, 8, 1, f) == 1 && fwrite(w, sizeof(float), n, f) == n;
    if (fclose(f) != 0 || !ok)
        return ss_fail(e, SS_EIO, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

int dense_load(float *w, size_t n, const char *path, struct ss_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ss_fail(e, SS_EIO, "%s: cannot open: %s", path, strerror(errno));
    char magic[8];
    uint32_t version = 0;
    uint64_t count = 0;
    int rc = 0;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, DENSE_MAGIC, 8) != 0 ||
        fread(&version, 4, 1, f) != 1 || fread(&count, 8, 1, f) != 1)
        rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync dense model file", path);
    else if (version != 1)
        rc = ss_fail(e, SS_EFORMAT, "%s: unsupported version %u", path, version);
    else if (count != n)
        rc = ss_fail(e, SS_EFORMAT, "%s: %llu parameters, the config's model has %zu", path,
                     (unsigned long long)count, n);
    else if (fread(w, sizeof(float), n, f) != n)
        rc = ss_fail(e, SS_EFORMAT, "%s: truncated", path);
    fclose(f);
    return rc;
}
