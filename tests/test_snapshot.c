/* The snapshot protocol's files (src/trainer/checkpoint.c): a committed
 * checkpoint is found whole with its figures; a part cut short by a write
 * that fails (the file size limit stands in for a full disk), a MANIFEST
 * that cannot be written, a part changed after it was hashed, a MANIFEST
 * cut short and a directory left half-written all leave the last good
 * checkpoint as the newest one found, each refusal named; only the newest
 * `keep` complete ones stay. */
#include "check.h"
#include "shadowsync/trainer.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static struct ss_config cfg;
static struct model_layout lay;
static char dir[4200];

/* A file size limit of `bytes` (RLIM_INFINITY: none); writes past it fail
 * with EFBIG, as on a full disk. */
static void file_limit(rlim_t bytes)
{
    struct rlimit r;
    getrlimit(RLIMIT_FSIZE, &r);
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
}

/* A checkpoint of w (n floats) with figure `examples`; part of it written
 * under a file size limit (limit_part: the part's, limit_manifest: the
 * commit's). Returns the commit's (or the first failure's) status. */
static int snapshot(const float *w, size_t n, double examples, rlim_t limit_part,
                    rlim_t limit_manifest, char *final, struct ss_err *e)
{
    struct ckpt *k = NULL;
    char p[4500];
    int rc = ckpt_begin(&k, dir, e);
    if (rc < 0)
        return rc;
    file_limit(limit_part);
    rc = dense_save(w, n, &lay, ckpt_part_path(k, "dense-0.bin", p, sizeof p), e);
    file_limit(RLIM_INFINITY);
    if (rc == 0)
        rc = ckpt_add(k, "dense-0.bin", e);
    ckpt_meta(k, "examples", examples);
    const char *f = NULL;
    file_limit(limit_manifest);
    if (rc == 0)
        rc = ckpt_commit(k, 2, &f, e);
    file_limit(RLIM_INFINITY);
    if (rc == 0 && final)
        snprintf(final, 4400, "%s", f);
    ckpt_free(k);
    return rc;
}

/* The newest complete checkpoint's examples (-1: none), refusals counted. */
static double newest(int *skipped)
{
    char out[4400];
    struct ckpt_meta_set m;
    struct ss_err e = {0};
    *skipped = 0;
    if (ckpt_latest(dir, out, sizeof out, &m, skipped, &e) != 0)
        return -1;
    return ckpt_meta_get(&m, "examples", -2);
}

/* Entries of dir whose names start with prefix. */
static int count_entries(const char *prefix, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        n += !strncmp(de->d_name, prefix, strlen(prefix)) && l >= s &&
             !strcmp(de->d_name + l - s, suffix);
    }
    if (d)
        closedir(d);
    return n;
}

int main(void)
{
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
    char *sets[] = {"model.dim=4", "model.rows=100,50", "data.cat_cols=1-2",
                    "model.bottom=13-64-4", "model.top=auto-64-1"};
    struct ss_err e = {0};
    if (ss_config_load(&cfg, NULL, sets, 5, &e) < 0 || model_layout_init(&lay, &cfg, &e) < 0) {
        CHECK(0, "test config loads", "%s", e.msg);
        CHECK_DONE();
    }
    snprintf(dir, sizeof dir, "%s/ck", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    char tmpl[4300];
    snprintf(tmpl, sizeof tmpl, "%s.XXXXXX", dir);
    if (!mkdtemp(tmpl)) {
        CHECK(0, "a temporary directory", "%s", tmpl);
        CHECK_DONE();
    }
    snprintf(dir, sizeof dir, "%.4100s", tmpl);
    size_t n = lay.n_params;
    float *w = ss_aligned(n * sizeof(float));
    model_init_params(&lay, w, 3);
    int skipped;
    char final[4400] = "";

    int rc = snapshot(w, n, 100, RLIM_INFINITY, RLIM_INFINITY, final, &e);
    double ex = newest(&skipped);
    CHECK(rc == 0 && ex == 100 && skipped == 0 && strstr(final, "ckpt-"),
          "snapshot: a committed checkpoint is found with its figures",
          "rc %d (%s), examples %g, skipped %d", rc, e.msg, ex, skipped);
    struct ckpt_meta_set m;
    CHECK(ckpt_verify(final, &m, &e) == 0, "snapshot: it verifies as a resume checks it", "%s",
          e.msg);

    rc = snapshot(w, n, 200, 1000, RLIM_INFINITY, NULL, &e); /* the part cut at 1000 bytes */
    ex = newest(&skipped);
    CHECK(rc < 0 && strstr(e.msg, "dense-0.bin") && ex == 100 && count_entries("", ".tmp") == 0,
          "snapshot: a part cut short fails naming it; the last good one stays, no .tmp left",
          "rc %d (%s), newest %g, .tmp %d", rc, e.msg, ex, count_entries("", ".tmp"));

    rc = snapshot(w, n, 300, RLIM_INFINITY, 16, NULL, &e); /* the MANIFEST cut at 16 bytes */
    ex = newest(&skipped);
    CHECK(rc < 0 && ex == 100 && count_entries("ckpt-", "") == 1,
          "snapshot: a MANIFEST that cannot be written commits nothing",
          "rc %d (%s), newest %g, ckpt dirs %d", rc, e.msg, ex, count_entries("ckpt-", ""));

    /* a part changed after it was hashed: the commit's checkpoint is refused */
    struct ckpt *k = NULL;
    char p[4500];
    const char *f = NULL;
    rc = ckpt_begin(&k, dir, &e);
    if (rc == 0)
        rc = dense_save(w, n, &lay, ckpt_part_path(k, "dense-0.bin", p, sizeof p), &e);
    if (rc == 0)
        rc = ckpt_add(k, "dense-0.bin", &e);
    FILE *fp = rc == 0 ? fopen(p, "r+b") : NULL;
    if (fp) { /* one byte flipped in place */
        fseek(fp, 40, SEEK_SET);
        int ch = fgetc(fp);
        fseek(fp, 40, SEEK_SET);
        fputc(ch ^ 1, fp);
        fclose(fp);
    }
    ckpt_meta(k, "examples", 400);
    if (rc == 0)
        rc = ckpt_commit(k, 3, &f, &e);
    ckpt_free(k);
    ex = newest(&skipped);
    CHECK(rc == 0 && ex == 100 && skipped == 1,
          "snapshot: a part changed after it was hashed is refused; the one before is found",
          "rc %d (%s), newest %g, skipped %d", rc, e.msg, ex, skipped);

    /* a directory left half-written (a crash before the commit) is not a checkpoint */
    rc = ckpt_begin(&k, dir, &e);
    if (rc == 0)
        rc = dense_save(w, n, &lay, ckpt_part_path(k, "dense-0.bin", p, sizeof p), &e);
    ex = newest(&skipped);
    CHECK(rc == 0 && ex == 100, "snapshot: a directory still being written is not taken",
          "rc %d, newest %g", rc, ex);
    ckpt_free(k);

    /* newer good ones: the newest `keep` (2) complete ones stay */
    for (int i = 0; i < 3; i++)
        rc |= snapshot(w, n, 500 + i, RLIM_INFINITY, RLIM_INFINITY, final, &e);
    ex = newest(&skipped);
    CHECK(rc == 0 && ex == 502 && count_entries("ckpt-", "") == 2,
          "snapshot: the newest 2 complete ones are kept", "rc %d, newest %g, ckpt dirs %d", rc,
          ex, count_entries("ckpt-", ""));

    /* a MANIFEST cut short (a crash while it was written): refused, the one before found */
    snprintf(p, sizeof p, "%s/MANIFEST", final);
    rc = truncate(p, 30);
    ex = newest(&skipped);
    CHECK(rc == 0 && ex == 501 && skipped == 1,
          "snapshot: a MANIFEST cut short is refused; the one before is found",
          "rc %d, newest %g, skipped %d", rc, ex, skipped);

    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(w);
    model_layout_free(&lay);
    ss_config_free(&cfg);
    CHECK_DONE();
}
