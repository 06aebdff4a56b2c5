/* `shadowsync convert`: text (file, directory or glob) through the reader
 * into binary shards out_dir/part-00000.bin, ... of up to shard_examples
 * each. Memory stays constant: one batch and one write buffer. Each shard is
 * written as part-N.bin.tmp with zero counts in its header, the counts are
 * patched at its end, then fsync; once every shard is whole they are all
 * renamed, and shards left from an earlier, longer conversion into the same
 * directory removed, so the directory holds exactly this data. A conversion
 * that fails, or reads no example, removes its .tmp files and leaves the
 * directory as it was. */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONVERT_BATCH 4096
#define PROGRESS_S 2.0

struct shard_writer {
    const char *dir;
    int index;          /* shards finished so far */
    FILE *f;
    char *tmp, *final;
    size_t path_cap;
    char *wbuf;         /* stdio buffer */
    unsigned char *rec; /* one record */
    size_t rec_cap;
    struct shard_header h;
};

/* Shard i's paths into w->tmp and w->final. */
static void shard_paths(struct shard_writer *w, int i)
{
    snprintf(w->final, w->path_cap, "%s/part-%05d.bin", w->dir, i);
    snprintf(w->tmp, w->path_cap, "%s/part-%05d.bin.tmp", w->dir, i);
}

static int writer_begin(struct shard_writer *w, const struct schema *s, struct ss_err *e)
{
    shard_paths(w, w->index);
    w->f = fopen(w->tmp, "wb");
    if (!w->f)
        return ss_fail(e, SS_EIO, "%s: %s", w->tmp, strerror(errno));
    setvbuf(w->f, w->wbuf, _IOFBF, 4u << 20);
    memset(&w->h, 0, sizeof w->h);
    w->h.n_dense = (uint32_t)s->n_dense;
    w->h.n_tables = (uint32_t)s->n_cat;
    if (s->format == FMT_LIBSVM) /* its values: each id's weight */
        w->h.flags |= SHARD_FLAG_WEIGHTS;
    unsigned char raw[SHARD_HEADER_BYTES];
    struct shard_header zero = {w->h.n_dense, w->h.n_tables, 0, 0, 0};
    reader_shard_encode(raw, &zero);
    if (fwrite(raw, 1, sizeof raw, w->f) != sizeof raw)
        return ss_fail(e, SS_EIO, "%s: %s", w->tmp, strerror(errno));
    return 0;
}

static int writer_example(struct shard_writer *w, const struct batch *b, int i, struct ss_err *e)
{
    const int nd = b->n_dense, T = b->n_tables;
    const int32_t *off = b->off + (size_t)i * (size_t)T;
    size_t k = (size_t)(off[T] - off[0]);
    size_t fixed = (size_t)shard_record_fixed((uint32_t)nd, (uint32_t)T);
    size_t need = fixed + (size_t)shard_id_bytes(w->h.flags) * k;
    if (need > w->rec_cap) {
        free(w->rec);
        w->rec_cap = need * 2;
        w->rec = ss_xmalloc(w->rec_cap);
    }
    unsigned char *p = w->rec;
    memcpy(p, &b->label[i], 4);
    memcpy(p + 4, b->dense + (size_t)i * (size_t)nd, 4 * (size_t)nd);
    unsigned char *lens = p + 4 + 4 * (size_t)nd;
    for (int t = 0; t < T; t++) {
        uint32_t l = (uint32_t)(off[t + 1] - off[t]);
        memcpy(lens + 4 * (size_t)t, &l, 4);
        if (l > 1)
            w->h.flags |= SHARD_FLAG_MULTIHOT;
    }
    memcpy(p + fixed, b->ids + off[0], 8 * k);
    for (size_t q = 0; q < k && (w->h.flags & SHARD_FLAG_WEIGHTS); q++) {
        float wt = batch_wt(b, (size_t)off[0] + q);
        memcpy(p + fixed + 8 * k + 4 * q, &wt, 4);
    }
    if (fwrite(p, 1, need, w->f) != need)
        return ss_fail(e, SS_EIO, "%s: %s", w->tmp, strerror(errno));
    w->h.examples++;
    w->h.total_ids += k;
    return 0;
}

static int writer_finish(struct shard_writer *w, struct ss_err *e)
{
    unsigned char raw[SHARD_HEADER_BYTES];
    int rc = 0;
    reader_shard_encode(raw, &w->h);
    if (fflush(w->f) || ferror(w->f))
        rc = ss_fail(e, SS_EIO, "%s: %s", w->tmp, strerror(errno));
    else if (pwrite(fileno(w->f), raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        rc = ss_fail(e, SS_EIO, "%s: %s", w->tmp, strerror(errno));
    else if (fsync(fileno(w->f)))
        rc = ss_fail(e, SS_EIO, "%s: fsync: %s", w->tmp, strerror(errno));
    if (fclose(w->f) && !rc)
        rc = ss_fail(e, SS_EIO, "%s: %s", w->tmp, strerror(errno));
    w->f = NULL;
    if (rc)
        unlink(w->tmp);
    else
        w->index++;
    return rc;
}

/* The finished shards: renamed to their names (ok), or removed. */
static int writer_commit(struct shard_writer *w, int ok, struct ss_err *e)
{
    int rc = 0;
    for (int i = 0; i < w->index; i++) {
        shard_paths(w, i);
        if (ok && rc == 0 && rename(w->tmp, w->final))
            rc = ss_fail(e, SS_EIO, "%s: rename: %s", w->final, strerror(errno));
        else if (!ok || rc)
            unlink(w->tmp);
    }
    return rc;
}

/* Removes part-N.bin with N >= first (left by an earlier conversion). */
static void remove_stale(const char *dir, int first)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    size_t cap = strlen(dir) + 300;
    char *p = ss_xmalloc(cap);
    int removed = 0;
    while ((de = readdir(d))) {
        int idx, used = 0;
        if (sscanf(de->d_name, "part-%d.bin%n", &idx, &used) == 1 && used > 0 &&
            de->d_name[used] == '\0' && idx >= first) {
            snprintf(p, cap, "%s/%s", dir, de->d_name);
            if (!unlink(p) && ++removed <= 3) /* the first few named, then a count */
                ss_log("convert: removed %s, a shard of an earlier conversion", p);
        }
    }
    if (removed > 3)
        ss_log("convert: removed %d shards of an earlier conversion in all", removed);
    free(p);
    closedir(d);
}

int reader_convert(const char *in, const char *out_dir, const struct schema *s,
                   int64_t shard_examples, int report_bad, struct ss_err *e)
{
    if (s->format == FMT_BINARY)
        return ss_fail(e, SS_EINVAL, "convert: %s is already binary shards", in);
    if (shard_examples < 0)
        return ss_fail(e, SS_EINVAL, "convert: shard size %lld is negative",
                       (long long)shard_examples);
    struct stat was;
    int made = stat(out_dir, &was) != 0; /* removed again if the conversion fails */
    int rc = ss_mkdir_p(out_dir, e);
    if (rc)
        return rc;
    struct reader *r;
    rc = reader_open(&r, in, s, 0, report_bad, e);
    if (rc) {
        if (made)
            rmdir(out_dir);
        return rc;
    }

    struct shard_writer w = {.dir = out_dir};
    w.path_cap = strlen(out_dir) + 64;
    w.tmp = ss_xmalloc(w.path_cap);
    w.final = ss_xmalloc(w.path_cap);
    w.wbuf = ss_xmalloc(4u << 20);
    struct batch b;
    batch_init(&b, CONVERT_BATCH, s->n_dense, s->n_cat);
    double t0 = ss_now(), last = t0;
    int64_t total = 0;

    for (;;) {
        rc = reader_next(r, &b, e);
        if (rc || b.n == 0)
            break;
        for (int i = 0; i < b.n && !rc; i++) {
            if (!w.f)
                rc = writer_begin(&w, s, e);
            if (!rc)
                rc = writer_example(&w, &b, i, e);
            if (!rc && shard_examples && (int64_t)w.h.examples == shard_examples)
                rc = writer_finish(&w, e);
        }
        if (rc)
            break;
        total += b.n;
        double now = ss_now();
        if (now - last >= PROGRESS_S) {
            ss_log("convert: %lld examples, %.1f MB/s", (long long)total,
                   (double)reader_bytes_done(r) / 1e6 / (now - t0));
            last = now;
        }
    }
    if (!rc && w.f)
        rc = writer_finish(&w, e);
    if (rc && w.f) {
        fclose(w.f);
        unlink(w.tmp);
    }
    struct reader_stats st;
    reader_stats(r, &st);
    if (!rc && st.examples == 0)
        rc = ss_fail(e, SS_EFORMAT, "convert: no example was read from %s (%lld bad lines%s): "
                     "nothing written; check data.format, data.separator, data.header and the "
                     "columns (data.*_cols)", in, (long long)st.bad_lines,
                     st.bad_lines && report_bad ? ", the first named above" : "");
    int crc = writer_commit(&w, rc == 0, e);
    rc = rc ? rc : crc;
    if (!rc) {
        remove_stale(out_dir, w.index);
        double dt = ss_now() - t0;
        ss_log("convert: %lld examples, %lld bad lines, %d shards in %s (%.1f s, %.1f MB/s)",
               (long long)st.examples, (long long)st.bad_lines, w.index, out_dir, dt,
               (double)reader_bytes_done(r) / 1e6 / (dt > 0 ? dt : 1e-9));
        reader_warn_bad_share(NULL, in, st.bad_lines, st.examples, report_bad);
    }
    batch_free(&b);
    reader_close(r);
    free(w.tmp);
    free(w.final);
    free(w.wbuf);
    free(w.rec);
    if (rc && made) /* a failure leaves out_dir as it was: not there (rmdir: only if empty) */
        rmdir(out_dir);
    return rc;
}

int reader_convert_config(const struct ss_config *c, const char *in, const char *out_dir,
                          int64_t shard_examples, struct ss_err *e)
{
    struct schema s;
    int rc = schema_from_config(&s, c, in, e);
    if (rc == 0 && s.format == FMT_BINARY)
        rc = ss_fail(e, SS_EINVAL, "convert: %s is already binary", in);
    if (rc == 0 && s.label_col < 0)
        rc = ss_config_fail(e, c, "data.label_col", "convert: data.label_col = -1 (no label "
                            "column), but a binary shard holds each example's label");
    if (rc == 0)
        rc = reader_convert(in, out_dir, &s, shard_examples, c->data.report_bad_lines, e);
    return rc;
}
