/* The binary shard header (layout in reader.h): encoding it, and checking a
 * shard before anything trusts it — magic, version, header size, and a file
 * size exactly equal to header + records, so a truncated copy or a foreign
 * file is refused by name before a single example is read. Little-endian
 * hosts only (x86-64, aarch64), as the format is. */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

void reader_shard_encode(unsigned char raw[SHARD_HEADER_BYTES], const struct shard_header *h)
{
    memset(raw, 0, SHARD_HEADER_BYTES);
    memcpy(raw, SHARD_MAGIC, 8);
    put32(raw + 8, SHARD_VERSION);
    put32(raw + 12, SHARD_HEADER_BYTES);
    put32(raw + 16, h->n_dense);
    put32(raw + 20, h->n_tables);
    put64(raw + 24, h->examples);
    put64(raw + 32, h->total_ids);
    put32(raw + 40, h->flags);
}

/* header + examples * fixed + total_ids * (8 or 12), or -1 on overflow. */
static int expected_size(const struct shard_header *h, uint64_t *size)
{
    uint64_t fixed = shard_record_fixed(h->n_dense, h->n_tables);
    if (h->examples && fixed > (UINT64_MAX / 2) / h->examples)
        return -1;
    if (h->total_ids > (UINT64_MAX / 4) / 12)
        return -1;
    *size = SHARD_HEADER_BYTES + h->examples * fixed + h->total_ids * shard_id_bytes(h->flags);
    return 0;
}

int reader_shard_check(const char *file, int fd, struct shard_header *h, uint64_t *size,
                struct ss_err *e)
{
    unsigned char raw[SHARD_HEADER_BYTES];
    struct stat st;
    if (fstat(fd, &st))
        return ss_fail(e, SS_EIO, "%s: %s", file, strerror(errno));
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t k = pread(fd, raw + got, sizeof raw - got, (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return ss_fail(e, SS_EIO, "%s: %s", file, strerror(errno));
        if (k == 0)
            break;
        got += (size_t)k;
    }
    if (got < 8 || memcmp(raw, SHARD_MAGIC, 8))
        return ss_fail(e, SS_EFORMAT, "%s: not a shadowsync shard (bad magic)", file);
    if (got < sizeof raw)
        return ss_fail(e, SS_EFORMAT, "%s: truncated shard (expected at least %d bytes, found %zu)",
                       file, SHARD_HEADER_BYTES, got);
    uint32_t version = get32(raw + 8), hbytes = get32(raw + 12);
    if (version != SHARD_VERSION)
        return ss_fail(e, SS_EFORMAT, "%s: unsupported shard version %u (this build reads %d)",
                       file, version, SHARD_VERSION);
    if (hbytes != SHARD_HEADER_BYTES)
        return ss_fail(e, SS_EFORMAT, "%s: bad shard header size %u (expected %d)", file, hbytes,
                       SHARD_HEADER_BYTES);
    h->n_dense = get32(raw + 16);
    h->n_tables = get32(raw + 20);
    h->examples = get64(raw + 24);
    h->total_ids = get64(raw + 32);
    h->flags = get32(raw + 40);
    if (h->n_dense > SS_MAX_COLS || h->n_tables > SS_MAX_COLS)
        return ss_fail(e, SS_EFORMAT, "%s: shard claims %u dense and %u categorical features",
                       file, h->n_dense, h->n_tables);
    uint64_t want;
    if (expected_size(h, &want))
        return ss_fail(e, SS_EFORMAT, "%s: corrupt shard header (sizes overflow)", file);
    uint64_t have = (uint64_t)st.st_size;
    if (have < want)
        return ss_fail(e, SS_EFORMAT, "%s: truncated shard (expected %llu bytes, found %llu)",
                       file, (unsigned long long)want, (unsigned long long)have);
    if (have > want)
        return ss_fail(e, SS_EFORMAT,
                       "%s: shard has trailing bytes (expected %llu bytes, found %llu)", file,
                       (unsigned long long)want, (unsigned long long)have);
    if (size)
        *size = have;
    return 0;
}
