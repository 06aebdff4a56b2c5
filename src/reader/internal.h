/* Internals shared by the files of src/reader/: the data-file listing, the
 * shard header codec and a few small helpers. Not part of the public API
 * (include/shadowsync/reader.h is). */
#ifndef SS_READER_INTERNAL_H
#define SS_READER_INTERNAL_H

#include "shadowsync/reader.h"

/* Which files of a directory or glob to keep. */
enum file_pick {
    PICK_ALL,    /* every regular file but *.tmp */
    PICK_TEXT,   /* ... and not *.bin */
    PICK_BINARY, /* only *.bin */
};

/* Lists the data files of path (a file, a directory whose regular, non-hidden
 * files are taken in name order, or a glob), filtered by pick (a single named
 * file is always kept). *files is NULL-free and owned by the caller. */
int reader_list_files(const char *path, int pick, char ***files, int *n, struct ss_err *e);
void reader_free_files(char **files, int n);
int reader_has_suffix(const char *name, const char *suffix);

#define SHARD_FLAG_MULTIHOT 1u

struct shard_header {
    uint32_t n_dense, n_tables;
    uint64_t examples, total_ids;
    uint32_t flags;
};

void reader_shard_encode(unsigned char raw[SHARD_HEADER_BYTES], const struct shard_header *h);
/* Reads and checks the header of the open shard fd (named file in messages)
 * and that the file's size is exactly what the header promises. */
int reader_shard_check(const char *file, int fd, struct shard_header *h, uint64_t *size,
                struct ss_err *e);
/* Bytes of one record without its ids. */
static inline uint64_t shard_record_fixed(uint32_t n_dense, uint32_t n_tables)
{
    return 4u + 4ull * n_dense + 4ull * n_tables;
}

/* Bytes of input consumed so far (text bytes read or shard bytes walked). */
uint64_t reader_bytes_done(struct reader *r);


#endif
