/* A reader's position (DESIGN §5, §8): the file, the bytes and lines (or
 * records) of it taken, the pass, the counts, and a hash of the file list,
 * saved with a checkpoint and sought on resume; a position that does not
 * fit the files (another list, a file of another size, not a line's start)
 * is refused naming why. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The file list's fingerprint: a position applies only to the same files. */
static uint64_t files_hash(const struct reader *r)
{
    uint64_t h = 0x5EEDF11E5ull ^ (uint64_t)r->n_files;
    for (int i = 0; i < r->n_files; i++)
        h = ss_fnv1a(h, r->files[i], strlen(r->files[i]));
    return h;
}

void reader_tell(struct reader *r, struct reader_pos *p)
{
    pthread_mutex_lock(&r->lock);
    memset(p, 0, sizeof *p);
    p->magic = r->file_ids ? READER_POS_MAGIC_FILES : READER_POS_MAGIC;
    p->files_hash = files_hash(r);
    p->cur = r->cur;
    p->is_open = r->is_open;
    p->skipping = r->skipping;
    p->offset = r->map ? (int64_t)r->at : (int64_t)(r->file_read - (r->end - r->pos));
    /* (gzip: of the uncompressed text, and bytes_done counts compressed bytes) */
    p->line_no = r->line_no;
    p->rec = (int64_t)r->rec;
    p->ids_left = (int64_t)r->ids_left;
    p->seen = r->seen;
    p->handed = r->handed;
    p->bad_lines = r->bad_lines;
    p->reported = r->reported;
    p->files_done = r->files_done;
    p->epoch = r->epoch;
    struct stat st;
    p->cur_bytes = !r->is_open ? -1
                   : r->map    ? (int64_t)r->map_len
                   : fstat(r->fd, &st) == 0 ? (int64_t)st.st_size : -1;
    /* less what a seek reads again: the text buffered, or a gzip file's bytes so far */
    p->bytes_done = r->bytes_done - (r->map ? 0 : r->gz ? (uint64_t)r->gz_in : r->end - r->pos);
    pthread_mutex_unlock(&r->lock);
}

/* A position applies only in the file it was taken in, unchanged: its size
 * then (where the position has it) and, in text, a line starting there. */
static int pos_same_size(struct reader *r, const struct reader_pos *p, struct ss_err *e)
{
    struct stat st;
    int64_t now = r->map ? (int64_t)r->map_len
                  : fstat(r->fd, &st) == 0 ? (int64_t)st.st_size : -1;
    if (p->cur_bytes < 0 || now == p->cur_bytes)
        return 0;
    return ss_fail(e, SS_EINVAL, "%s: is %lld bytes, and was %lld when the checkpoint was taken "
                   "in it: data.train has changed since%s, so the checkpoint's place in it no "
                   "longer applies (resume over the same files, or train afresh into "
                   "another checkpoint.dir)", r->files[r->cur], (long long)now,
                   (long long)p->cur_bytes,
                   r->gz ? " (or its text was compressed anew: its compressed bytes count)" : "");
}

static int pos_not_line_start(struct reader *r, const struct reader_pos *p, struct ss_err *e)
{
    return ss_fail(e, SS_EINVAL, "%s: no line starts at byte %lld%s, where the checkpoint "
                   "left it: data.train has changed since, so the checkpoint's place in it no "
                   "longer applies (resume over the same files, or train afresh into "
                   "another checkpoint.dir)", r->files[r->cur], (long long)p->offset,
                   r->gz ? " of its uncompressed text" : "");
}

static int stopped_opening(struct reader *r, struct ss_err *e)
{
    return ss_fail(e, SS_EIO, "%s: stopped (%s) while opening it", r->files[r->cur],
                   ss_halt_sig_name(r->stopped));
}

int reader_seek(struct reader *r, const struct reader_pos *p, struct ss_err *e)
{
    if (p->magic != READER_POS_MAGIC && p->magic != READER_POS_MAGIC_FILES)
        return ss_fail(e, SS_EFORMAT, "reader position: not one (bad magic)");
    int files = r->file_ids != NULL;
    if ((p->magic == READER_POS_MAGIC_FILES) != files)
        return ss_fail(e, SS_EINVAL, "reader position: taken with data.train split %s between "
                       "the readers, and this run splits it %s: resume with --set data.split=%s",
                       files ? "line by line (data.split = lines, or a shadowsync before "
                               "data.split)" : "by whole files",
                       files ? "by whole files" : "line by line", files ? "lines" : "files");
    if (p->files_hash != files_hash(r))
        return ss_fail(e, SS_EINVAL, "reader position: taken over other files than the %d of "
                       "this data path (data.train; its files are told by their paths as "
                       "given: were files added, removed or renamed, or is the path spelled "
                       "otherwise than in the run that wrote it?%s)", r->n_files,
                       files ? " Split by whole files, a file whose size changed deals the "
                               "shares anew too" : "");
    if (p->cur < 0 || p->cur > r->n_files || r->is_open || r->handed)
        return ss_fail(e, SS_EINVAL, "reader position: file %d of %d, or the reader has started",
                       p->cur, r->n_files);
    if (p->epoch < 0 || p->epoch >= r->epochs)
        return ss_fail(e, SS_EINVAL, "reader position: in pass %lld over data.train, and this "
                       "run makes %d (data.epochs): resume with data.epochs above %lld",
                       (long long)p->epoch + 1, r->epochs, (long long)p->epoch);
    pthread_mutex_lock(&r->lock);
    int rc = 0;
    r->cur = p->cur;
    r->epoch = (int)p->epoch;
    if (p->is_open && p->cur < r->n_files) {
        if (r->s.format == FMT_BINARY) {
            rc = reader_shard_open(r, e);
            if (rc == READ_STOPPED)
                rc = stopped_opening(r, e);
            if (rc == 0)
                rc = pos_same_size(r, p, e);
            if (rc == 0 && (p->offset < SHARD_HEADER_BYTES || (size_t)p->offset > r->map_len ||
                            (uint64_t)p->rec > r->hdr.examples))
                rc = ss_fail(e, SS_EFORMAT, "%s: the position is past the shard's end",
                             r->files[r->cur]);
            if (rc == 0) {
                r->at = (size_t)p->offset;
                r->rec = (uint64_t)p->rec;
                r->ids_left = (uint64_t)p->ids_left;
            } else if (r->map) {
                munmap((void *)r->map, r->map_len);
                r->map = NULL;
            }
        } else {
            rc = reader_text_open(r, e);
            if (rc == READ_STOPPED)
                rc = stopped_opening(r, e);
            if (rc == 0)
                rc = pos_same_size(r, p, e);
            if (rc == 0 && r->gz) { /* inflates up to it (the skip is done at the next read) */
                z_off_t to = (z_off_t)(p->offset > 0 ? p->offset - 1 : 0);
                int prev = '\n', c = -2, zerr = Z_OK;
                if (gzseek(r->gz, to, SEEK_SET) == to &&
                    (p->offset == 0 || (prev = gzgetc(r->gz)) >= 0))
                    c = gzgetc(r->gz);
                gzerror(r->gz, &zerr);
                if (c == -2 || (c == -1 && zerr != Z_OK))
                    rc = ss_fail(e, SS_EIO, "%s: cannot reach byte %lld of its uncompressed text",
                                 r->files[r->cur], (long long)p->offset);
                else if (c >= 0)
                    gzungetc(c, r->gz);
                if (rc == 0 && !p->skipping && prev != '\n' && c >= 0)
                    rc = pos_not_line_start(r, p, e);
                r->gz_in = gzoffset(r->gz);
            } else if (rc == 0 && lseek(r->fd, p->offset, SEEK_SET) != p->offset) {
                rc = ss_fail(e, SS_EIO, "%s: cannot seek to byte %lld: %s", r->files[r->cur],
                             (long long)p->offset, strerror(errno));
            } else if (rc == 0 && !p->skipping && p->offset > 0) {
                char two[2]; /* the byte before it, and one after it unless at the end */
                ssize_t k = pread(r->fd, two, 2, (off_t)p->offset - 1);
                if (k < 1 || (k == 2 && two[0] != '\n'))
                    rc = pos_not_line_start(r, p, e);
            }
            if (rc < 0 && r->fd >= 0)
                reader_text_close(r);
            if (rc == 0) {
                r->file_read = (uint64_t)p->offset;
                r->line_no = p->line_no;
                r->skipping = p->skipping;
            }
        }
        r->is_open = rc == 0;
    }
    r->seen = p->seen;
    r->handed = p->handed;
    r->bad_lines = p->bad_lines;
    r->reported = p->reported;
    r->files_done = p->files_done;
    r->bytes_done = p->bytes_done + (r->gz ? (uint64_t)r->gz_in : 0);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int reader_save_pos(struct reader *r, const char *path, struct ss_err *e)
{
    struct reader_pos pos;
    reader_tell(r, &pos);
    struct ss_span part = {&pos, sizeof pos}; /* (a given-up write's bytes: not read again) */
    return ss_write_file(path, &part, 1, 0, NULL, e);
}

int reader_pos_read(const char *path, struct reader_pos *out, struct ss_err *e)
{
    struct reader_pos pos;
    memset(&pos, 0, sizeof pos);
    pos.cur_bytes = -1;
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT)
        return ss_fail(e, SS_EFORMAT, "%s: no reader's position there: the checkpoint was "
                       "written by other readers (job.readers, job.trainers reading their own "
                       "shares) than this run's", path);
    if (!f)
        return ss_fail(e, SS_EIO, "%s: %s", path, strerror(errno));
    size_t got = fread(&pos, 1, sizeof pos, f);
    fclose(f);
    /* one written before data.epochs ends before the pass (the first), one before
     * cur_bytes before that (not checked) */
    int ok = got == sizeof pos || got == offsetof(struct reader_pos, epoch) ||
             got == offsetof(struct reader_pos, cur_bytes);
    if (!ok)
        return ss_fail(e, SS_EFORMAT, "%s: cannot read a reader's position", path);
    *out = pos;
    return 0;
}

int reader_load_pos(struct reader *r, const char *path, struct ss_err *e)
{
    struct reader_pos pos;
    int rc = reader_pos_read(path, &pos, e);
    return rc < 0 ? rc : reader_seek(r, &pos, e);
}
