/* How many examples data.train holds, before a run (issue 39): what the
 * default schedule (optim.schedule = auto) fits its decay to. Cheap on
 * any size: a shard's header says it; a text file up to COUNT_ALL_BYTES
 * has its lines counted; a bigger one is sampled at COUNT_SPOTS places
 * spread over it (lines = size / the sampled bytes a line); gzip counts
 * its lines, or past 128 MiB inflated those of its first 128 MiB against
 * the compressed bytes they took. Lines are taken as examples (bad and
 * blank lines are few where a run is worth training). A pipe or a
 * character device has no size, nor files this host cannot list (a
 * cluster job's readers may hold them): unknown, said why. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT_ALL_BYTES (64u << 20)
#define COUNT_SPOTS 32
#define COUNT_SPOT_BYTES (128u << 10)
/* gzip inflated up to this many bytes (~0.3 s); a test makes it smaller */
int64_t reader_count_gz_bytes = 128ll << 20;

static int64_t newlines(const char *p, size_t n)
{
    int64_t k = 0;
    for (const char *q = p, *end = p + n; (q = memchr(q, '\n', (size_t)(end - q))); q++)
        k++;
    return k;
}

/* A plain file's lines: counted, or estimated from spots spread over it. */
static int text_lines(int fd, uint64_t size, double *lines, int *exact)
{
    char *buf = ss_xmalloc(COUNT_SPOT_BYTES);
    int64_t nl = 0;
    char last = '\n';
    if (size <= COUNT_ALL_BYTES) {
        for (uint64_t at = 0; at < size;) {
            ssize_t k = pread(fd, buf, COUNT_SPOT_BYTES, (off_t)at);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                break;
            nl += newlines(buf, (size_t)k);
            last = buf[k - 1];
            at += (uint64_t)k;
        }
        free(buf);
        *lines = (double)nl + (last != '\n'); /* a last line without its newline */
        *exact = 1;
        return 0;
    }
    double span = 0; /* the sampled bytes from a line's start to a later line's end */
    for (int s = 0; s < COUNT_SPOTS; s++) {
        off_t at = (off_t)((size - COUNT_SPOT_BYTES) / (COUNT_SPOTS - 1) * (uint64_t)s);
        ssize_t k = pread(fd, buf, COUNT_SPOT_BYTES, at);
        const char *first = k > 0 ? memchr(buf, '\n', (size_t)k) : NULL;
        const char *end = k > 0 ? memrchr(buf, '\n', (size_t)k) : NULL;
        if (!first || end == first)
            continue;
        nl += newlines(first + 1, (size_t)(end - first));
        span += (double)(end - first);
    }
    free(buf);
    if (nl == 0) /* lines longer than a spot: one a spot at most */
        return -1;
    *lines = (double)size * (double)nl / span;
    *exact = 0;
    return 0;
}

/* A gzip file's lines: its first reader_count_gz_bytes inflated, scaled by the
 * compressed bytes they took (exact when that is the whole file). */
static int gz_lines(int fd, uint64_t size, double *lines, int *exact)
{
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return -1;
    }
    char *buf = ss_xmalloc(GZ_STEP);
    int64_t nl = 0, got = 0;
    char last = '\n';
    int k;
    while (got < reader_count_gz_bytes && (k = gzread(gz, buf, GZ_STEP)) > 0) {
        nl += newlines(buf, (size_t)k);
        last = buf[k - 1];
        got += k;
    }
    int eof = gzeof(gz);
    z_off_t used = gzoffset(gz);
    gzclose(gz); /* closes fd */
    free(buf);
    if (eof) {
        *lines = (double)nl + (got && last != '\n');
        *exact = 1;
        return 0;
    }
    if (nl == 0 || used <= 0)
        return -1;
    *lines = (double)size * (double)nl / (double)used;
    *exact = 0;
    return 0;
}

int reader_count_examples(const struct ss_config *c, struct example_count *out, struct ss_err *e)
{
    memset(out, 0, sizeof *out);
    out->examples = -1;
    out->exact = 1;
    struct schema s;
    char **files = NULL;
    int n = 0, rc = schema_from_config(&s, c, c->data.train, e);
    int binary = rc == 0 && s.format == FMT_BINARY;
    if (rc == 0)
        rc = reader_list_files(c->data.train, binary ? PICK_BINARY : PICK_TEXT, &files, &n, e);
    if (rc < 0) { /* not here: a cluster job's reader services may hold the files elsewhere */
        snprintf(out->why, sizeof out->why, "%s", e->msg);
        return 0;
    }
    double total = 0;
    for (int i = 0; i < n; i++) {
        struct stat st; /* a pipe is never opened here: its writer would take that for the
                         * reader's open, and a close for its end */
        int fd = stat(files[i], &st) != 0 ? -1
                 : S_ISREG(st.st_mode) ? open(files[i], O_RDONLY | O_CLOEXEC) : -2;
        if (fd == -2)
            snprintf(out->why, sizeof out->why, "%s is a stream (no size to count)", files[i]);
        else if (fd < 0)
            snprintf(out->why, sizeof out->why, "%s: %s", files[i], strerror(errno));
        if (fd < 0)
            goto unknown;
        double lines = 0;
        int exact = 1, got;
        if (binary) {
            struct shard_header h;
            uint64_t size;
            struct ss_err ignored = {0};
            got = reader_shard_check(files[i], fd, &h, &size, &ignored);
            lines = got == 0 ? (double)h.examples : 0;
            close(fd);
        } else {
            int gz = reader_is_gzip_fd(fd);
            got = gz ? gz_lines(fd, (uint64_t)st.st_size, &lines, &exact)
                     : text_lines(fd, (uint64_t)st.st_size, &lines, &exact);
            if (!gz)
                close(fd);
            lines -= s.header_lines;
        }
        if (got < 0) {
            snprintf(out->why, sizeof out->why, "%s: its lines could not be counted", files[i]);
            goto unknown;
        }
        total += lines > 0 ? lines : 0;
        out->exact &= exact;
    }
    reader_free_files(files, n);
    out->n_files = n;
    out->per_pass = (int64_t)(total + 0.5);
    double job = total * (c->data.epochs > 0 ? c->data.epochs : 1);
    out->capped = c->data.max_examples > 0 && (double)c->data.max_examples < job;
    out->examples = out->capped ? c->data.max_examples : (int64_t)(job + 0.5);
    return 0;
unknown:
    reader_free_files(files, n);
    out->examples = -1;
    return 0;
}
