/* The reader (DESIGN §5): an ordered list of files handed out as batches
 * under one lock, so every example goes to exactly one caller.
 *
 * Text files are read with read(2) into one 4 MiB buffer and split on '\n'
 * (gzip files, known by their magic bytes, through zlib: positions are then
 * offsets into the uncompressed text, and a resume reads up to its own)
 * (a last line without newline counts; a longer line is reported bad and
 * skipped); header lines are skipped per file; blank lines are ignored; bad
 * lines are counted, the first report_bad printed as FILE:LINE: reason.
 * Only the split is under the lock: a call copies its lines out into a
 * scratch of its own (the reader keeps one per concurrent caller) and
 * parses them after letting go, so the callers parse in parallel. A lone
 * reader's data.max_examples counts good examples: lines out for parsing
 * count as good until parsed, and a caller that would stop only because of
 * them waits for their outcome (bad ones give their room back).
 * Binary shards are all checked at open, then mmap'ed and copied record by
 * record with no parsing. A pipe (a FIFO, a socket) is opened without
 * blocking and polled, so a wait for its writer says what it waits on and
 * ends on a signal (ss_halt_raised): the reader then hands out nothing
 * more, as at its end, and reader_stats says why. Any other file's open
 * and reads run on the reader's io thread (src/core/io.c), so a read that
 * never returns (a hung file system) ends on a signal the same way.
 * example_id = (file index << 40) | (0-based line or record index). With
 * data.epochs (reader_set_epochs) the files are read that many times in
 * the same order, the pass kept in positions. An error
 * (I/O, corrupt shard) is sticky: every later call returns it too. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static int fail_sticky(struct reader *r, int code, struct ss_err *e)
{
    r->err_code = code;
    if (e)
        memcpy(r->err_msg, e->msg, sizeof r->err_msg);
    else
        snprintf(r->err_msg, sizeof r->err_msg, "reader failed (code %d)", code);
    return code;
}

/* Where record or line k (0-based) of files[file] is, as example_id: the
 * file's index in the whole data path's list, also when split by files. */
static uint64_t place(const struct reader *r, int file, uint64_t k)
{
    return (uint64_t)(r->file_ids ? r->file_ids[file] : file) << 40 | k;
}

/* A data line (1-based) of file `file` that yields no example: bad, or blank. */
static void skipped(struct reader *r, int file, int64_t line)
{
    if (r->on_skip)
        r->on_skip(r->skip_arg, place(r, file, (uint64_t)(line - 1)));
}

/* Under the lock. */
static void bad_line(struct reader *r, int file, int64_t line, const char *why)
{
    r->bad_lines++;
    if (r->reported < r->report_bad) {
        r->reported++;
        fprintf(stderr, "%s:%lld: %s\n", r->files[file], (long long)line, why);
    }
}

/* ---- text ------------------------------------------------------------ */

int reader_is_gzip_fd(int fd)
{
    unsigned char m[2];
    return pread(fd, m, 2, 0) == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

static int is_gzip(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int gz = fd >= 0 && reader_is_gzip_fd(fd);
    if (fd >= 0)
        close(fd);
    return gz;
}

/* What a file read as text is instead, by its first bytes (NULL: text,
 * or gzip, which is read): "xz", "bzip2" (its block's magic too, so a line
 * starting "BZh" stays text), "zstd", "shard" (a binary shard) or "utf16"
 * (a UTF-16 byte-order mark; UTF-8's is read). */
static const char *not_text_kind(int fd)
{
    unsigned char m[8];
    ssize_t got = pread(fd, m, 8, 0);
    if (got >= 5 && !memcmp(m, "\xFD" "7zXZ", 5))
        return "xz";
    if (got == 8 && !memcmp(m, "BZh", 3) && m[3] >= '1' && m[3] <= '9' && !memcmp(m + 4, "1AY&", 4))
        return "bzip2";
    if (got >= 4 && !memcmp(m, "\x28\xB5\x2F\xFD", 4))
        return "zstd";
    if (got == 8 && !memcmp(m, SHARD_MAGIC, 8))
        return "shard";
    if (got >= 2 && ((m[0] == 0xFF && m[1] == 0xFE) || (m[0] == 0xFE && m[1] == 0xFF)))
        return "utf16";
    return NULL;
}

/* File f, opened as text, is of that kind (not_text_kind): an error naming it. */
static int text_kind_fail(const char *kind, const char *f, struct ss_err *e)
{
    if (!strcmp(kind, "shard"))
        return ss_fail(e, SS_EFORMAT, "%s: a binary shard (it starts with SSHARD) read as "
                       "text: shards are known by their name, *.bin", f);
    if (!strcmp(kind, "utf16"))
        return ss_fail(e, SS_EFORMAT, "%s: UTF-16 text (its byte-order mark), which is not "
                       "read: convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)", f);
    return ss_fail(e, SS_EFORMAT, "%s: %s-compressed, which is not read: decompress it (or "
                   "recompress it with gzip, which is)", f, kind);
}

/* Every regular file of a text reader's list can be opened and is text
 * (or gzip), so that one the reader would meet late fails before any
 * training; pipes are not read ahead. */
static int text_files_check(const struct reader *r, struct ss_err *e)
{
    for (int i = 0; i < r->n_files; i++) {
        struct stat st;
        if (stat(r->files[i], &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        int fd = open(r->files[i], O_RDONLY | O_CLOEXEC), rc;
        if (fd < 0)
            return ss_fail(e, SS_EIO, "%s: %s", r->files[i], strerror(errno));
        const char *kind = not_text_kind(fd);
        rc = kind ? text_kind_fail(kind, r->files[i], e) : 0;
        close(fd);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* fn(r) on the reader's io thread, for files[cur]: fn's value, or
 * READ_STOPPED when a stop gave it up (the reader then stops). */
static int on_io(struct reader *r, int (*fn)(void *))
{
    int rc = ss_io_call(&r->io, fn, r, r->files[r->cur]);
    if (rc == READ_STOPPED && !r->stopped) {
        r->stopped = ss_halt_raised() ? ss_halt_raised() : -1; /* -1: the job's end */
        fprintf(stderr, "shadowsync: %s: stopped (%s) while a read of it had not returned for "
                "%.1f s: it is left to its thread, and nothing more is read\n", r->files[r->cur],
                ss_io_stop_name(), r->io.stuck_s);
    }
    return rc;
}

/* On the reader's io thread: files[cur] opened, and its first bytes told. */
static int open_job(void *arg)
{
    struct reader *r = arg;
    int fd = r->op.fd = open(r->op.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO's
                                                                          * open waits for no writer */
    r->op.err = errno;
    if (fd < 0)
        return -1;
    struct stat st;
    r->op.is_pipe = fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
    if (!r->op.is_pipe)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    r->op.kind = not_text_kind(fd);
    r->op.gz = !r->op.kind && reader_is_gzip_fd(fd);
    return 0;
}

int reader_text_open(struct reader *r, struct ss_err *e)
{
    const char *f = r->files[r->cur];
    r->op.path = f;
    int rc = on_io(r, open_job);
    if (rc == READ_STOPPED)
        return rc;
    if (rc < 0)
        return ss_fail(e, SS_EIO, "%s: %s", f, strerror(r->op.err));
    r->fd = r->op.fd;
    r->is_pipe = r->op.is_pipe;
    r->pipe_said = 0;
    int kind_rc = r->op.kind ? text_kind_fail(r->op.kind, f, e) : 0;
    if (kind_rc < 0) {
        close(r->fd);
        r->fd = -1;
        return kind_rc;
    }
    r->gz = NULL;
    r->gz_in = 0;
    if (r->op.gz) {
        if (!(r->gz = gzdopen(r->fd, "rb"))) {
            close(r->fd);
            r->fd = -1;
            return ss_fail(e, SS_EIO, "%s: cannot read it as gzip (out of memory?)", f);
        }
        gzbuffer(r->gz, GZ_STEP / 2); /* reads of GZ_STEP inflate straight into buf */
    }
    r->pos = r->end = 0;
    r->eof = r->skipping = 0;
    r->line_no = 0;
    r->file_read = 0;
    return 0;
}

void reader_text_close(struct reader *r)
{
    if (r->gz)
        gzclose(r->gz); /* and its fd */
    else if (r->fd >= 0)
        close(r->fd);
    r->gz = NULL;
    r->fd = -1;
}

/* At a gzip file's end: does something that is not gzip follow its last
 * stream? zlib skips such bytes quietly. Told by bytes past what zlib read
 * (but zeros: padding, which gzip skips too), or, where it read them all,
 * by the last 4 bytes, which are the last stream's length (mod 2^32) and
 * so at most the whole text's; a text of 4 GiB or more is not checked that
 * way. */
static int gz_trailing(struct reader *r)
{
    struct stat st;
    z_off_t in = gzoffset(r->gz);
    unsigned char t[4];
    if (in < 0 || fstat(r->fd, &st) != 0)
        return 0;
    if (st.st_size > in) { /* zeros (a tape's or a tool's padding) are skipped, as gzip does */
        unsigned char buf[65536];
        for (off_t at = in; at < st.st_size;) {
            ssize_t k = pread(r->fd, buf, sizeof buf, at);
            if (k <= 0)
                return 0;
            for (ssize_t i = 0; i < k; i++)
                if (buf[i])
                    return 1;
            at += k;
        }
        return 0;
    }
    if (st.st_size < 18 || r->file_read >= (1ull << 32) || pread(r->fd, t, 4, st.st_size - 4) != 4)
        return 0;
    uint32_t isize = t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
    return isize > r->file_read;
}

/* On the reader's io thread: the read under way (r->rd). */
static int read_job(void *arg)
{
    struct reader *r = arg;
    r->rd.k = r->rd.gz ? gzread(r->rd.gz, r->rd.dst, (unsigned)r->rd.n)
                       : read(r->rd.fd, r->rd.dst, r->rd.n);
    r->rd.err = errno;
    return 0;
}

/* read(2) (or gzread) of the current file into dst, on the io thread: its
 * value (errno set), or -READ_STOPPED when a stop gave it up. */
static ssize_t io_read(struct reader *r, char *dst, size_t n)
{
    r->rd.fd = r->fd;
    r->rd.gz = r->gz;
    r->rd.dst = dst;
    r->rd.n = n;
    if (on_io(r, read_job) == READ_STOPPED)
        return -READ_STOPPED;
    errno = r->rd.err;
    return r->rd.k;
}

/* Inflates more into buf[end..): a truncated or corrupt stream is an error
 * naming the file, never a quiet end. zlib drops what a call inflated when
 * it fails (a bad CRC at the stream's end, say), so the room is filled in
 * steps of GZ_STEP: what steps before the damage brought is kept, and the
 * error comes at the next fill. */
static int gz_fill(struct reader *r, struct ss_err *e)
{
    size_t room = r->buf_cap - r->end, got = 0;
    int k = 0, zerr = Z_OK;
    while (got < room) {
        unsigned ask = (unsigned)(room - got < GZ_STEP ? room - got : GZ_STEP);
        if ((k = (int)io_read(r, r->buf + r->end + got, ask)) == -READ_STOPPED)
            return READ_STOPPED;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    const char *msg = gzerror(r->gz, &zerr), *fd_tag = strstr(msg, ">: ");
    if (!strncmp(msg, "<fd:", 4) && fd_tag) /* gzdopen's name for the stream */
        msg = fd_tag + 3;
    if (!got && (k < 0 || (k == 0 && zerr != Z_OK)))
        return ss_fail(e, SS_EIO, "%s: %s after %llu uncompressed bytes", r->files[r->cur],
                       zerr == Z_BUF_ERROR ? "the gzip stream is truncated" : msg,
                       (unsigned long long)r->file_read);
    k = (int)got;
    z_off_t in = gzoffset(r->gz);
    if (in > r->gz_in) {
        r->bytes_done += (uint64_t)(in - r->gz_in);
        r->gz_in = in;
    }
    if (k == 0 && gz_trailing(r))
        return ss_fail(e, SS_EINVAL, "%s: bytes that are not gzip follow its gzip stream (a "
                       "plain file appended to it?): they would be skipped; gzip them too, or "
                       "give them a file of their own", r->files[r->cur]);
    if (k == 0)
        r->eof = 1;
    r->end += (size_t)k;
    r->file_read += (uint64_t)k;
    return 0;
}

/* Waits until the current file, a pipe, has bytes or its writer has
 * gone; says once, after PIPE_NOTE_S, what it waits on. 0, or READ_STOPPED
 * when a signal came (under the lock: every caller sees it soon). */
static int pipe_wait(struct reader *r)
{
    double t0 = ss_now();
    for (;;) {
        struct pollfd p = {r->fd, POLLIN, 0};
        if (poll(&p, 1, PIPE_POLL_MS) > 0)
            return 0;
        if ((r->stopped = ss_halt_raised()) != 0)
            return READ_STOPPED;
        if (!r->pipe_said && ss_now() - t0 >= PIPE_NOTE_S) {
            r->pipe_said = 1;
            fprintf(stderr, "shadowsync: %s: a pipe with nothing to read for %.0f s: waiting for "
                    "%s (SIGINT or SIGTERM stops the wait)\n", r->files[r->cur], PIPE_NOTE_S,
                    r->file_read ? "its writer to go on" : "a writer");
        }
    }
}

/* Reads more into buf[end..): 0, READ_STOPPED, or a negative code. */
static int text_fill(struct reader *r, struct ss_err *e)
{
    if (r->gz)
        return gz_fill(r, e);
    for (;;) {
        if (r->is_pipe && pipe_wait(r))
            return READ_STOPPED;
        ssize_t k = r->is_pipe ? read(r->fd, r->buf + r->end, r->buf_cap - r->end)
                               : io_read(r, r->buf + r->end, r->buf_cap - r->end);
        if (k == -READ_STOPPED)
            return READ_STOPPED;
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k < 0)
            return ss_fail(e, SS_EIO, "%s: %s", r->files[r->cur], strerror(errno));
        if (k == 0)
            r->eof = 1;
        r->end += (size_t)k;
        r->bytes_done += (uint64_t)k;
        r->file_read += (uint64_t)k;
        return 0;
    }
}

/* The next line of the current file (without its '\n'): 1, 0 at its end,
 * 2 for a line longer than the buffer (line line_no + 1; its bytes are
 * skipped on the next calls), READ_STOPPED, or a negative code. */
static int text_line(struct reader *r, char **line, size_t *len, struct ss_err *e)
{
    for (;;) {
        char *p = r->buf + r->pos;
        char *nl = memchr(p, '\n', r->end - r->pos);
        if (nl || (r->eof && r->pos < r->end)) {
            size_t n = nl ? (size_t)(nl - p) : r->end - r->pos;
            r->pos += n + (nl != NULL);
            r->line_no++;
            if (r->skipping) {
                r->skipping = 0;
                continue;
            }
            if (r->line_no == 1 && n >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3))
                p += 3, n -= 3; /* a UTF-8 byte order mark: not the first field's */
            *line = p;
            *len = n;
            return 1;
        }
        if (r->eof)
            return 0;
        if (r->skipping) {
            r->pos = r->end = 0;
        } else if (r->pos == 0 && r->end == r->buf_cap) {
            r->skipping = 1;
            r->pos = r->end = 0;
            return 2;
        } else if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->end - r->pos);
            r->end -= r->pos;
            r->pos = 0;
        }
        int rc = text_fill(r, e);
        if (rc)
            return rc;
    }
}

/* Past the last file: the next pass from the first file, if one is left
 * (under the lock). */
static int next_pass(struct reader *r)
{
    if (r->epoch + 1 >= r->epochs || r->n_files == 0) /* none: its passes are all empty */
        return 0;
    r->epoch++;
    r->cur = 0;
    return 1;
}

/* Below data.max_examples: good examples handed out by a lone reader (its
 * lines out for parsing counted as good); with shares, the examples met in
 * the data by all of them together. */
static int more(const struct reader *r)
{
    if (!r->max_examples)
        return 1;
    return r->share_count > 1 ? r->seen < r->max_examples
                              : r->handed + r->parsing < r->max_examples;
}

/* Counts one example met in the data; true when it is this reader's. */
static int mine(struct reader *r)
{
    int64_t k = r->seen++;
    return r->share_count <= 1 || k % r->share_count == r->share_index;
}

/* A caller's lines, copied out under the lock and parsed after it: in
 * the order read, the lines to parse and the skipped ones (blank, or too
 * long) whose turn comes among them. */
enum { LINE_PARSE, LINE_BLANK, LINE_LONG };

struct taken {
    int file, kind;
    int64_t line_no;
    size_t off, len; /* in bytes */
};

struct scratch {
    struct scratch *next;
    struct taken *v;
    int n, cap, to_parse;
    char *bytes;
    size_t used, bytes_cap;
};

/* Under the lock. */
static struct scratch *scratch_get(struct reader *r)
{
    struct scratch *w = r->spare;
    if (w)
        r->spare = w->next;
    else
        w = ss_xcalloc(1, sizeof *w);
    return w;
}

static void scratch_add(struct scratch *w, struct reader *r, int kind, const char *p, size_t len)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->v = ss_xrealloc(w->v, (size_t)w->cap * sizeof *w->v);
    }
    if (w->used + len > w->bytes_cap) {
        w->bytes_cap = w->bytes_cap ? 2 * w->bytes_cap : 256u << 10;
        if (w->bytes_cap < w->used + len)
            w->bytes_cap = w->used + len;
        w->bytes = ss_xrealloc(w->bytes, w->bytes_cap);
    }
    if (len)
        memcpy(w->bytes + w->used, p, len);
    w->v[w->n++] = (struct taken){r->cur, kind, kind == LINE_LONG ? r->line_no + 1 : r->line_no,
                                  w->used, len};
    w->used += len;
    w->to_parse += kind == LINE_PARSE;
}

/* Under the lock: splits up to `want` lines of this caller's into w
 * (skipped lines on the way too, at most SKIPS_TAKEN past want, so a run
 * of blank lines does not grow w). With nothing taken yet, waits while only
 * other callers' lines out for parsing hold a lone reader at max_examples.
 * Lines taken count in r->parsing, also when it fails. */
enum { SKIPS_TAKEN = 4096 };

static int text_take(struct reader *r, struct scratch *w, int want, int may_wait,
                     struct ss_err *e)
{
    w->n = w->to_parse = 0;
    w->used = 0;
    while (w->to_parse < want && w->n < want + SKIPS_TAKEN && !r->err_code && !r->stopped) {
        if (!more(r)) {
            if (!may_wait || w->to_parse || !r->parsing || r->share_count > 1)
                return 0;
            pthread_cond_wait(&r->parsed, &r->lock);
            continue;
        }
        if (!r->is_open) {
            if (r->cur >= r->n_files && !next_pass(r))
                return 0;
            int rc = reader_text_open(r, e);
            if (rc)
                return rc < 0 ? rc : 0; /* (READ_STOPPED: what was taken is handed out) */
            r->is_open = 1;
        }
        char *line = NULL;
        size_t len = 0;
        int rc = text_line(r, &line, &len, e);
        if (rc < 0 || rc == READ_STOPPED)
            return rc < 0 ? rc : 0;
        if (rc == 0) {
            reader_text_close(r);
            r->is_open = 0;
            r->files_done++;
            r->cur++;
            continue;
        }
        if (rc == 2) { /* a bad line: its share's reader names and counts it, as any other */
            if (mine(r))
                scratch_add(w, r, LINE_LONG, NULL, 0);
            continue;
        }
        if (r->line_no <= r->s.header_lines)
            continue;
        if (len == 0 || (len == 1 && line[0] == '\r')) {
            scratch_add(w, r, LINE_BLANK, NULL, 0);
            continue;
        }
        if (!mine(r))
            continue;
        scratch_add(w, r, LINE_PARSE, line, len);
        r->parsing++;
    }
    return 0;
}

/* Unlocked: parses w's lines into b, in order. Returns 0, or a hard
 * error (bad lines are counted under the lock and skipped). */
static int text_parse(struct reader *r, struct scratch *w, struct batch *b, struct ss_err *e)
{
    char why[64];
    struct ss_err le;
    for (int i = 0; i < w->n; i++) {
        const struct taken *t = &w->v[i];
        const char *reason = NULL;
        if (t->kind == LINE_LONG) {
            snprintf(why, sizeof why, "line longer than %zu bytes", r->buf_cap);
            reason = why;
        } else if (t->kind == LINE_PARSE) {
            int slot = b->n;
            int rc = parse_line(&r->s, w->bytes + t->off, t->len, b, &le);
            if (rc == 0) {
                b->example_id[slot] = place(r, t->file, (uint64_t)(t->line_no - 1));
                continue;
            }
            if (rc != SS_EFORMAT)
                return ss_fail(e, rc, "%s:%lld: %s", r->files[t->file], (long long)t->line_no,
                               le.msg);
            reason = le.msg;
        }
        skipped(r, t->file, t->line_no);
        if (reason) {
            pthread_mutex_lock(&r->lock);
            bad_line(r, t->file, t->line_no, reason);
            pthread_mutex_unlock(&r->lock);
        }
    }
    return 0;
}

/* Under the lock (let go while parsing): fills b up to its cap. */
static int text_fill_batch(struct reader *r, struct batch *b, struct ss_err *e)
{
    struct scratch *w = scratch_get(r);
    int rc = 0;
    while (b->n < b->cap) {
        int before = b->n;
        if ((rc = text_take(r, w, b->cap - b->n, b->n == 0, e)) == 0 && w->n > 0) {
            pthread_mutex_unlock(&r->lock);
            rc = text_parse(r, w, b, e);
            pthread_mutex_lock(&r->lock);
        }
        r->parsing -= w->to_parse;
        r->handed += b->n - before;
        if (w->to_parse)
            pthread_cond_broadcast(&r->parsed);
        if (rc < 0 || r->err_code) { /* another caller's hard error stops this one too */
            r->handed -= b->n; /* the batch is dropped */
            break;
        }
        if (w->n == 0)
            break;
    }
    w->next = r->spare;
    r->spare = w;
    if (rc == 0 && r->err_code)
        rc = ss_fail(e, r->err_code, "%s", r->err_msg);
    return rc;
}

/* ---- binary ---------------------------------------------------------- */

/* On the reader's io thread: files[cur] opened, checked and mapped (r->op). */
static int shard_open_job(void *arg)
{
    struct reader *r = arg;
    const char *f = r->op.path;
    struct ss_err *e = &r->op.e;
    int fd = open(f, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ss_fail(e, SS_EIO, "%s: %s", f, strerror(errno));
    uint64_t size;
    int rc = reader_shard_check(f, fd, &r->op.hdr, &size, e);
    if (!rc && (r->op.hdr.n_dense != (uint32_t)r->s.n_dense ||
                r->op.hdr.n_tables != (uint32_t)r->s.n_cat))
        rc = ss_fail(e, SS_EFORMAT,
                     "%s: shard has %u dense and %u categorical features, expected %d and %d", f,
                     r->op.hdr.n_dense, r->op.hdr.n_tables, r->s.n_dense, r->s.n_cat);
    if (!rc) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = ss_fail(e, SS_EIO, "%s: mmap: %s", f, strerror(errno));
        } else {
            madvise(m, (size_t)size, MADV_SEQUENTIAL);
            r->op.map = m;
            r->op.map_len = (size_t)size;
        }
    }
    close(fd);
    return rc;
}

int reader_shard_open(struct reader *r, struct ss_err *e)
{
    r->op.path = r->files[r->cur];
    int rc = on_io(r, shard_open_job);
    if (rc == READ_STOPPED)
        return rc;
    if (rc < 0) {
        *e = r->op.e;
        return rc;
    }
    r->hdr = r->op.hdr;
    r->map = r->op.map;
    r->map_len = r->op.map_len;
    r->at = r->touched = SHARD_HEADER_BYTES;
    r->rec = 0;
    r->ids_left = r->hdr.total_ids;
    return 0;
}

/* On the reader's io thread: the pages of map[tc.from, tc.to) read once,
 * so that their faults (a read of the file) happen here. */
static int touch_job(void *arg)
{
    struct reader *r = arg;
    volatile unsigned char sum = 0;
    for (size_t at = r->tc.from; at < r->tc.to; at += 4096)
        sum += r->map[at];
    if (r->tc.to > r->tc.from)
        sum += r->map[r->tc.to - 1];
    (void)sum;
    return 0;
}

/* The shard's bytes up to `to` faulted in by the io thread (SHARD_TOUCH at
 * a time), so that a file system that hangs holds that thread, not the
 * caller: 0, or READ_STOPPED. */
#define SHARD_TOUCH (4u << 20)
static int shard_touch(struct reader *r, size_t to)
{
    if (to <= r->touched)
        return 0;
    r->tc.from = r->touched > r->at ? r->touched : r->at;
    r->tc.to = to + SHARD_TOUCH < r->map_len ? to + SHARD_TOUCH : r->map_len;
    if (on_io(r, touch_job) == READ_STOPPED)
        return READ_STOPPED;
    r->touched = r->tc.to;
    return 0;
}

static void shard_close(struct reader *r)
{
    munmap((void *)r->map, r->map_len);
    r->map = NULL;
    r->is_open = 0;
    r->files_done++;
    r->cur++;
}

/* The first of files that a reader of binary (or text) files leaves out. */
static const char *first_left_out(char **files, int n, int binary)
{
    for (int i = 0; i < n; i++)
        if (reader_has_suffix(files[i], ".bin") != binary)
            return files[i];
    return "?";
}

static int corrupt(struct reader *r, struct ss_err *e)
{
    return ss_fail(e, SS_EFORMAT, "%s: corrupt shard at record %llu", r->files[r->cur],
                   (unsigned long long)r->rec);
}

static int binary_fill_batch(struct reader *r, struct batch *b, struct ss_err *e)
{
    const int nd = r->s.n_dense, T = r->s.n_cat;
    const size_t fixed = (size_t)shard_record_fixed((uint32_t)nd, (uint32_t)T);
    while (b->n < b->cap && more(r) && !r->stopped) {
        if (!r->is_open) {
            if (r->cur >= r->n_files && !next_pass(r))
                return 0;
            int rc = reader_shard_open(r, e);
            if (rc)
                return rc < 0 ? rc : 0; /* (READ_STOPPED: what was taken is handed out) */
            r->is_open = 1;
        }
        if (r->rec == r->hdr.examples) {
            if (r->at != r->map_len || r->ids_left)
                return corrupt(r, e);
            shard_close(r);
            continue;
        }
        const unsigned char *p = r->map + r->at;
        const size_t idb = (size_t)shard_id_bytes(r->hdr.flags); /* per id: 8, or 12 weighed */
        if (r->map_len - r->at < fixed)
            return corrupt(r, e);
        if (shard_touch(r, r->at + fixed))
            return 0;
        int take = mine(r);
        const unsigned char *lens = p + 4 + 4 * (size_t)nd;
        uint64_t k = 0;
        for (int t = 0; t < T; t++) {
            uint32_t l;
            memcpy(&l, lens + 4 * (size_t)t, 4);
            k += l;
        }
        if (k > r->ids_left || (r->map_len - r->at - fixed) / idb < k)
            return corrupt(r, e);
        if (shard_touch(r, r->at + fixed + idb * (size_t)k))
            return 0;
        if (!take) {
            r->at += fixed + idb * (size_t)k;
            r->bytes_done += fixed + idb * k;
            r->ids_left -= k;
            r->rec++;
            continue;
        }
        int i = b->n;
        size_t base = (size_t)i * (size_t)T, pos = (size_t)b->off[base];
        if (pos + k > INT32_MAX) {
            if (i > 0)
                return 0;
            return ss_fail(e, SS_EINVAL, "%s: record %llu has too many ids for a batch",
                           r->files[r->cur], (unsigned long long)r->rec);
        }
        batch_reserve_ids(b, pos + (size_t)k);
        memcpy(&b->label[i], p, 4);
        memcpy(b->dense + (size_t)i * (size_t)nd, p + 4, 4 * (size_t)nd);
        int ok = b->label[i] == 0 || b->label[i] == 1; /* what convert writes: else damage */
        for (int d = 0; ok && d < nd; d++)
            ok = isfinite(b->dense[(size_t)i * (size_t)nd + (size_t)d]);
        if (!ok)
            return ss_fail(e, SS_EFORMAT, "%s: corrupt shard at record %llu (a label other than "
                           "0 or 1, or a dense value that is no finite number)", r->files[r->cur],
                           (unsigned long long)r->rec);
        for (int t = 0; t < T; t++) {
            uint32_t l;
            memcpy(&l, lens + 4 * (size_t)t, 4);
            pos += l;
            b->off[base + (size_t)t + 1] = (int32_t)pos;
        }
        memcpy(b->ids + b->off[base], p + fixed, 8 * (size_t)k);
        if (idb == 12) { /* the weights after the ids */
            if (!b->weighted)
                batch_weigh(b, (size_t)b->off[base]);
            memcpy(b->wts + b->off[base], p + fixed + 8 * (size_t)k, 4 * (size_t)k);
            for (uint64_t q = 0; q < k; q++)
                if (!isfinite(b->wts[b->off[base] + q]))
                    return ss_fail(e, SS_EFORMAT, "%s: corrupt shard at record %llu (a weight "
                                   "that is no finite number)", r->files[r->cur],
                                   (unsigned long long)r->rec);
        }
        b->example_id[i] = place(r, r->cur, r->rec);
        b->n = i + 1;
        r->at += fixed + idb * (size_t)k;
        r->bytes_done += fixed + idb * k;
        r->ids_left -= k;
        r->rec++;
        r->handed++;
    }
    return 0;
}

/* ---- public ---------------------------------------------------------- */

/* Checks every shard up front; takes the feature counts from the first one
 * when the schema leaves them 0. */
static int check_shards(struct reader *r, struct ss_err *e)
{
    for (int i = 0; i < r->n_files; i++) {
        const char *f = r->files[i];
        struct shard_header h;
        int fd = open(f, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return ss_fail(e, SS_EIO, "%s: %s", f, strerror(errno));
        int rc = reader_shard_check(f, fd, &h, NULL, e);
        close(fd);
        if (rc)
            return rc;
        if (r->s.n_dense == 0 && r->s.n_cat == 0 && i == 0) {
            r->s.n_dense = (int)h.n_dense;
            r->s.n_cat = (int)h.n_tables;
        }
        if (h.n_dense != (uint32_t)r->s.n_dense || h.n_tables != (uint32_t)r->s.n_cat)
            return ss_fail(e, SS_EFORMAT,
                           "%s: shard has %u dense and %u categorical features, expected %d and %d",
                           f, h.n_dense, h.n_tables, r->s.n_dense, r->s.n_cat);
    }
    return 0;
}

int reader_open(struct reader **out, const char *path, const struct schema *s,
                int64_t max_examples, int report_bad, struct ss_err *e)
{
    *out = NULL;
    if (s->format != FMT_CRITEO && s->format != FMT_CSV && s->format != FMT_BINARY &&
        s->format != FMT_LIBSVM)
        return ss_fail(e, SS_EINVAL, "reader: the schema's format is not resolved");
    if (s->n_dense < 0 || s->n_cat < 0 || s->n_dense > SS_MAX_COLS || s->n_cat > SS_MAX_COLS)
        return ss_fail(e, SS_EINVAL, "reader: bad schema feature counts");
    struct reader *r = ss_xcalloc(1, sizeof *r);
    r->s = *s;
    r->max_examples = max_examples > 0 ? max_examples : 0;
    r->report_bad = report_bad > 0 ? report_bad : 0;
    r->fd = -1;
    r->epochs = 1;
    ss_io_init(&r->io, 0, READ_GIVE_UP_S);
    int binary = s->format == FMT_BINARY;
    int rc = reader_list_files(path, binary ? PICK_BINARY : PICK_TEXT, &r->files, &r->n_files, e);
    char **all;
    int n_all;
    struct ss_err ignored = {0};
    if (!rc && reader_list_files(path, PICK_ALL, &all, &n_all, &ignored) == 0) {
        if (n_all > r->n_files) /* a directory of shards and text: only one kind is read */
            fprintf(stderr, "shadowsync: warning: %s: %d of its %d files are left out (%s, "
                    "e.g. %s): it is read as %s\n", path, n_all - r->n_files, n_all,
                    binary ? "no binary shards (.bin)" : "binary shards (.bin)",
                    first_left_out(all, n_all, binary), binary ? "binary shards" : "text");
        reader_free_files(all, n_all);
    }
    if (!rc)
        rc = binary ? check_shards(r, e) : text_files_check(r, e);
    if (rc) {
        ss_io_close(&r->io);
        reader_free_files(r->files, r->n_files);
        free(r);
        return rc;
    }
    for (int i = 0; i < r->n_files; i++) {
        struct stat st;
        if (stat(r->files[i], &st) == 0 && st.st_size > (binary ? SHARD_HEADER_BYTES : 0))
            r->bytes_total += (uint64_t)st.st_size - (binary ? SHARD_HEADER_BYTES : 0);
    }
    if (!binary) { /* a buffer no bigger than the biggest file needs */
        size_t biggest = 0;
        for (int i = 0; i < r->n_files; i++) {
            struct stat st;
            if (stat(r->files[i], &st) != 0 || !S_ISREG(st.st_mode) ||
                (size_t)st.st_size >= TEXT_BUF || is_gzip(r->files[i])) {
                biggest = TEXT_BUF;
                break;
            }
            if ((size_t)st.st_size + 1 > biggest)
                biggest = (size_t)st.st_size + 1;
        }
        r->buf_cap = biggest < TEXT_BUF_MIN ? TEXT_BUF_MIN : biggest > TEXT_BUF ? TEXT_BUF : biggest;
        r->buf = ss_xmalloc(r->buf_cap);
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->parsed, NULL);
    *out = r;
    return 0;
}

void reader_set_epochs(struct reader *r, int epochs)
{
    r->epochs = epochs > 1 ? epochs : 1;
}

void reader_warn_bad_share(const char *key, const char *path, int64_t bad, int64_t examples,
                           int named)
{
    int64_t read = bad + examples;
    fflush(stdout); /* after the figures it follows */
    if (bad * 100 <= read)
        return;
    fprintf(stderr, "shadowsync: warning: %lld of the %lld lines read from %s%s%s (%.1f %%) were "
            "not examples and were skipped%s: check data.format and the columns%s%s%s\n",
            (long long)bad, (long long)read, key ? key : "", key ? " = " : "", path,
            100.0 * (double)bad / (double)read, named ? " (the first are named above)" : "",
            key ? ", and which files " : "", key ? key : "", key ? " takes in" : "");
}

int reader_check_passes(const struct reader *r, int epochs, struct ss_err *e)
{
    struct stat st;
    for (int i = 0; epochs > 1 && i < r->n_files; i++)
        if (stat(r->files[i], &st) == 0 && !S_ISREG(st.st_mode))
            return ss_fail(e, SS_EINVAL, "data.train: %s is not a regular file (a pipe or "
                           "device reads once), but data.epochs = %d passes over it", r->files[i],
                           epochs);
    return 0;
}

void reader_on_skip(struct reader *r, void (*fn)(void *arg, uint64_t where), void *arg)
{
    r->on_skip = fn;
    r->skip_arg = arg;
}

/* A file's bytes of data (a shard's less its header), 0 if unreadable. */
static uint64_t data_bytes(const struct reader *r, int i)
{
    struct stat st;
    uint64_t skip = r->s.format == FMT_BINARY ? SHARD_HEADER_BYTES : 0;
    return stat(r->files[i], &st) == 0 && (uint64_t)st.st_size > skip ? (uint64_t)st.st_size - skip
                                                                        : 0;
}

struct sized {
    uint64_t bytes;
    int i;
};

static int by_size_down(const void *a, const void *b)
{
    const struct sized *x = a, *y = b;
    return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1) : (x->i > y->i) - (x->i < y->i);
}

/* Whole files to count shares, largest first each to the share with the
 * fewest bytes so far (ties: the lower index): owner[i] gets file i's
 * share; returns the busiest share's bytes over the mean (inf when a
 * share gets no file). */
static double split_files(const struct reader *r, int count, int *owner)
{
    int n = r->n_files;
    uint64_t *size = ss_xcalloc((size_t)n + 1, sizeof *size);
    uint64_t *load = ss_xcalloc((size_t)count, sizeof *load), total = 0;
    struct sized *order = ss_xcalloc((size_t)n + 1, sizeof *order);
    for (int i = 0; i < n; i++) {
        size[i] = data_bytes(r, i);
        total += size[i];
        order[i] = (struct sized){size[i], i};
    }
    qsort(order, (size_t)n, sizeof *order, by_size_down);
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int sh = 1; sh < count; sh++)
            if (load[sh] < load[best])
                best = sh;
        owner[order[k].i] = best;
        load[best] += order[k].bytes;
    }
    uint64_t busiest = 0;
    for (int sh = 0; sh < count; sh++)
        busiest = load[sh] > busiest ? load[sh] : busiest;
    double imbalance = n < count || total == 0 ? INFINITY
                                                : (double)busiest * count / (double)total;
    free(size);
    free(load);
    free(order);
    return imbalance;
}

int reader_set_share(struct reader *r, int index, int count, int split, double *imbalance)
{
    int *owner = ss_xcalloc((size_t)r->n_files + 1, sizeof *owner);
    double imb = count > 1 && (split != SPLIT_LINES || imbalance) ? split_files(r, count, owner)
                                                                  : 1;
    if (imbalance)
        *imbalance = imb;
    if (count <= 1 || split == SPLIT_LINES || (split == SPLIT_AUTO && !(imb <= SPLIT_AUTO_MAX))) {
        r->share_index = index;
        r->share_count = count;
        free(owner);
        return SPLIT_LINES;
    }
    int64_t part = r->max_examples / count + (index < r->max_examples % count);
    if (r->max_examples && part == 0) /* a cap smaller than the shares: none here */
        for (int i = 0; i < r->n_files; i++)
            owner[i] = -1;
    r->max_examples = part;
    int kept = 0;
    r->file_ids = ss_xcalloc((size_t)r->n_files + 1, sizeof *r->file_ids);
    r->bytes_total = 0;
    for (int i = 0; i < r->n_files; i++) {
        if (owner[i] != index) {
            free(r->files[i]);
            continue;
        }
        r->files[kept] = r->files[i];
        r->file_ids[kept++] = i;
        r->bytes_total += data_bytes(r, kept - 1);
    }
    r->n_files = kept;
    free(owner);
    return SPLIT_FILES;
}

void reader_split_say(const char *path, const struct schema *s, int count, const char *whom,
                      int split)
{
    struct reader *r;
    struct ss_err e;
    if (count <= 1 || reader_open(&r, path, s, 0, 0, &e) < 0) /* (not here: a reader's host) */
        return;
    double imbalance;
    int n_files = r->n_files, taken = reader_set_share(r, 0, count, split, &imbalance);
    reader_close(r);
    if (taken == SPLIT_FILES && isinf(imbalance))
        printf("# data.train: split by whole files between the %d %s: only %d of them get a "
               "file (data.split = files with fewer files than %s)\n", count, whom,
               n_files < count ? n_files : count, whom);
    else if (taken == SPLIT_FILES)
        printf("# data.train: split by whole files between the %d %s, the busiest with %.2fx "
               "an even share of the bytes\n", count, whom, imbalance);
    else if (isinf(imbalance))
        printf("# data.train: split line by line between the %d %s, each reading every file "
               "(fewer files than %s)\n", count, whom, whom);
    else
        printf("# data.train: split line by line between the %d %s, each reading every file "
               "(whole files would give the busiest %.2fx an even share of the bytes)\n", count,
               whom, imbalance);
    fflush(stdout);
}

int reader_next(struct reader *r, struct batch *b, struct ss_err *e)
{
    batch_clear(b);
    if (b->n_dense != r->s.n_dense || b->n_tables != r->s.n_cat)
        return ss_fail(e, SS_EINVAL,
                       "reader: the batch holds %d dense and %d categorical features, "
                       "the data %d and %d", b->n_dense, b->n_tables, r->s.n_dense, r->s.n_cat);
    pthread_mutex_lock(&r->lock);
    int rc = r->err_code;
    b->at = r->handed + r->parsing; /* (the lines out for parsing are ahead of it) */
    if (rc) {
        ss_fail(e, rc, "%s", r->err_msg);
    } else {
        struct ss_err le = {0};
        rc = r->s.format == FMT_BINARY ? binary_fill_batch(r, b, &le) : text_fill_batch(r, b, &le);
        if (rc) {
            fail_sticky(r, rc, &le);
            ss_fail(e, rc, "%s", le.msg);
            b->n = 0;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void reader_stats(struct reader *r, struct reader_stats *st)
{
    pthread_mutex_lock(&r->lock);
    st->examples = r->handed;
    st->bad_lines = r->bad_lines;
    st->files_done = r->files_done;
    st->stopped = r->stopped;
    st->stuck = r->io.stuck;
    pthread_mutex_unlock(&r->lock);
}

double reader_fraction(struct reader *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t ahead = r->is_open && !r->map && !r->gz ? r->end - r->pos : 0; /* read, not yet split */
    double f = r->bytes_total ? (double)(r->bytes_done - ahead) / (double)r->bytes_total /
                                    r->epochs : 0;
    if (r->max_examples > 0) {
        double g = (double)(r->share_count > 1 ? r->seen : r->handed) / (double)r->max_examples;
        f = g > f ? g : f;
    }
    /* the last pass's end (none to make: no files) */
    if ((r->cur >= r->n_files && (r->epoch + 1 >= r->epochs || !r->n_files)) || f > 1)
        f = 1;
    pthread_mutex_unlock(&r->lock);
    return f;
}

double reader_share_bytes(struct reader *r)
{
    pthread_mutex_lock(&r->lock);
    double v = (double)r->bytes_total * r->epochs;
    pthread_mutex_unlock(&r->lock);
    return v;
}

uint64_t reader_bytes_done(struct reader *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t v = r->bytes_done;
    pthread_mutex_unlock(&r->lock);
    return v;
}

void reader_close(struct reader *r)
{
    if (!r || ss_io_close(&r->io)) /* a read given up on a stop keeps the reader (the run ends) */
        return;
    if (r->is_open) {
        if (r->map)
            munmap((void *)r->map, r->map_len);
        else
            reader_text_close(r);
    }
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->parsed);
    free(r->file_ids);
    while (r->spare) {
        struct scratch *w = r->spare;
        r->spare = w->next;
        free(w->v);
        free(w->bytes);
        free(w);
    }
    reader_free_files(r->files, r->n_files);
    free(r->buf);
    free(r);
}
