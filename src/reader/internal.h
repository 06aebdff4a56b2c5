/* Internals shared by the files of src/reader/: the data-file listing, the
 * shard header codec and a few small helpers. Not part of the public API
 * (include/shadowsync/reader.h is). */
#ifndef SS_READER_INTERNAL_H
#define SS_READER_INTERNAL_H

#include "shadowsync/reader.h"

#include <pthread.h>
#include <zlib.h>

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
#define SHARD_FLAG_WEIGHTS 2u

/* Bytes of one id in a record: the id, and its weight when the shard keeps them. */
static inline uint64_t shard_id_bytes(uint32_t flags)
{
    return flags & SHARD_FLAG_WEIGHTS ? 12u : 8u;
}

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

/* fd's first bytes are gzip's magic (reader.c). */
int reader_is_gzip_fd(int fd);

/* count.c: a gzip file's lines are counted in its first this many bytes inflated */
extern int64_t reader_count_gz_bytes;

/* ---- the reader (reader.c; its positions in position.c) ---- */

#define TEXT_BUF (4u << 20)       /* the longest line read */
/* gzip is inflated GZ_STEP bytes a call, straight into the buffer (zlib
 * reads its input GZ_STEP / 2 at a time): a call that fails drops what it
 * inflated (gz_fill) */
#define GZ_STEP (256u << 10)
#define TEXT_BUF_MIN (64u << 10)
#define PIPE_NOTE_S SS_IO_NOTE_S /* a pipe silent this long is named, once per open */
#define PIPE_POLL_MS SS_IO_POLL_MS /* how soon a wait on a pipe sees a signal */
#define READ_GIVE_UP_S 0.5 /* a read this old when a stop is seen is given up */
/* text_fill, text_line: a signal ended a wait on a pipe or a read */
enum { READ_STOPPED = SS_IO_STOPPED };


struct reader {
    pthread_mutex_t lock;
    struct schema s;
    char **files;
    int n_files;
    int cur;     /* file being read; n_files at the end */
    int epochs, epoch; /* the passes over the files to make, and the one under way */
    int is_open;
    int64_t max_examples, handed, bad_lines, files_done;
    int share_index, share_count; /* this reader's share: examples seen % count == index */
    int *file_ids;                /* split by files: files[i]'s index in the whole list */
    int64_t seen;                 /* data lines / records met so far, every share's */
    int report_bad;
    int64_t reported;
    void (*on_skip)(void *, uint64_t); /* reader_on_skip */
    void *skip_arg;
    uint64_t bytes_done;
    uint64_t bytes_total; /* the files' sizes (binary: less their headers) */
    int64_t parsing;      /* text lines taken out to parse, not yet counted */
    pthread_cond_t parsed;            /* parsing went down */
    struct scratch *spare;            /* scratches not in use */
    int err_code;
    char err_msg[sizeof(((struct ss_err *)0)->msg)];

    /* text */
    int fd;
    gzFile gz;          /* the current file is gzip: read through it (it owns fd) */
    z_off_t gz_in;      /* its compressed bytes counted in bytes_done */
    char *buf;
    size_t buf_cap;  /* TEXT_BUF, or less when every file is smaller */
    size_t pos, end; /* unread bytes buf[pos, end) */
    int eof, skipping;
    int64_t line_no; /* lines of the current file taken so far */
    uint64_t file_read; /* bytes of the current file read into buf */
    int is_pipe;        /* the current file: polled (O_NONBLOCK) */
    int pipe_said;      /* its wait was named */
    int stopped;        /* a signal ended a wait on a pipe or a read: nothing more is handed out */
    struct ss_io io;      /* where the open and the reads of a file (not a pipe's) run */
    struct {            /* the read under way on io: read(2) of fd, or gzread of gz */
        int fd;
        gzFile gz;
        char *dst;
        size_t n;
        ssize_t k;
        int err;
    } rd;
    struct { /* the open under way on io */
        const char *path;
        int fd, err, is_pipe, gz;
        const char *kind; /* not_text_kind's */
        struct ss_err e;  /* a shard's: */
        struct shard_header hdr;
        const unsigned char *map;
        size_t map_len;
    } op;
    struct {
        size_t from, to;
    } tc; /* the shard's bytes being faulted in on io */

    /* binary */
    const unsigned char *map;
    size_t map_len, at;
    size_t touched; /* map[0, touched) faulted in on io (shard_touch) */
    uint64_t rec, ids_left;
    struct shard_header hdr;
};

/* The current file opened (text: files[cur] at its start; binary: mapped). */
int reader_text_open(struct reader *r, struct ss_err *e);
void reader_text_close(struct reader *r);
int reader_shard_open(struct reader *r, struct ss_err *e);

/* Bytes of input consumed so far (text bytes read or shard bytes walked). */
uint64_t reader_bytes_done(struct reader *r);


#endif
