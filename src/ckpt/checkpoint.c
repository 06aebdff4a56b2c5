/* Checkpoint directories (DESIGN §8): DIR/ckpt-NNNNNN, one per snapshot.
 * A snapshot is written into DIR/ckpt-NNNNNN.tmp, part by part, each part
 * fsynced and hashed; the MANIFEST, which names every part with its size
 * and hash plus the snapshot's figures and ends with "end" and the hash of
 * the lines before it (so a flipped count in a meta line is caught too;
 * an older MANIFEST's bare "end" is refused: its counts cannot be
 * checked), is written last,
 * fsynced, and the directory renamed to its final name (then the parent
 * fsynced). A reader trusts only a directory whose MANIFEST is
 * complete and whose parts all match it, so a half-written checkpoint is
 * never taken for a whole one. The newest `keep` complete ones are kept. */
#include "shadowsync/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MANIFEST "MANIFEST"
#define MAX_PARTS 256
#define KEPT 2 /* complete snapshots kept (ckpt_commit's keep) */

struct ckpt_part {
    char name[64];
    uint64_t bytes, hash;
};

struct ckpt {
    char dir[4096], final[4200], tmp[4300];
    int n_parts, n_meta;
    struct ckpt_part parts[MAX_PARTS];
    char meta_key[MAX_META][48];
    double meta_val[MAX_META];
};

/* 64-bit hash of a file's bytes (not cryptographic: it catches truncation,
 * torn writes and bit rot), several GB/s. */
static int hash_file(const char *path, uint64_t *bytes, uint64_t *hash, struct ss_err *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ss_fail(e, SS_EIO, "%s: %s", path, strerror(errno));
    enum { CHUNK = 1 << 20 };
    uint64_t *buf = ss_xmalloc(CHUNK), h = 0x243F6A8885A308D3ull, n = 0;
    ssize_t k;
    while ((k = read(fd, buf, CHUNK)) > 0) {
        size_t words = (size_t)k / 8;
        for (size_t i = 0; i < words; i++) {
            uint64_t x = (h ^ buf[i]) * 0x9E3779B97F4A7C15ull;
            h = (x << 31 | x >> 33) * 0xBF58476D1CE4E5B9ull;
        }
        for (size_t i = words * 8; i < (size_t)k; i++)
            h = (h ^ ((unsigned char *)buf)[i]) * 0x100000001B3ull;
        n += (uint64_t)k;
        ss_io_step();
    }
    int rc = k < 0 ? ss_fail(e, SS_EIO, "%s: %s", path, strerror(errno)) : 0;
    close(fd);
    free(buf);
    *bytes = n;
    *hash = h ^ n;
    return rc;
}

static int fsync_path(const char *path, struct ss_err *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int rc = ss_fail(e, SS_EIO, "%s: fsync: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    close(fd);
    return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    ss_io_step();
    return remove(p);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void ckpt_remove(const char *ckdir)
{
    char man[4400]; /* the MANIFEST first: a half-removed one is no checkpoint */
    snprintf(man, sizeof man, "%s/%s", ckdir, MANIFEST);
    unlink(man);
    rm_tree(ckdir);
}

/* Sequence numbers of DIR/ckpt-N (complete: no .tmp), descending. */
static int list_ckpts(const char *dir, long *seq, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        char *end;
        if (strncmp(de->d_name, "ckpt-", 5) != 0)
            continue;
        long v = strtol(de->d_name + 5, &end, 10);
        if (*end == 0 && v > 0)
            seq[n++] = v;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int k = i; k > 0 && seq[k] > seq[k - 1]; k--) {
            long t = seq[k];
            seq[k] = seq[k - 1];
            seq[k - 1] = t;
        }
    return n;
}

static uint64_t tree_bytes;
static int add_bytes(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)p, (void)ftw;
    if (flag == FTW_F)
        tree_bytes += (uint64_t)st->st_size;
    return 0;
}

/* Room for the next snapshot: where the disk cannot hold one more of the
 * newest's size beside the KEPT kept, the older ones go first (the newest
 * stays), said once. Else every snapshot after the kept ones failed for
 * room, the run went on, and a resume lost all it trained since. Called
 * from the one thread that takes snapshots. */
static int verify(const char *ckdir, struct ckpt_meta_set *m, int check_parts, struct ss_err *e);

static void make_room(const char *dir, const long *seq, int n)
{
    static int said;
    struct statvfs fs;
    if (n < KEPT || statvfs(dir, &fs) != 0 || fs.f_blocks == 0) /* no figures: none taken */
        return;
    char p[4200];
    int keep = -1; /* the newest complete one (a resume's): never removed */
    for (int i = 0; i < n && keep < 0; i++) {
        struct ckpt_meta_set m;
        struct ss_err ignored = {0};
        snprintf(p, sizeof p, "%s/ckpt-%06ld", dir, seq[i]);
        if (verify(p, &m, 0, &ignored) == 0)
            keep = i;
    }
    if (keep < 0)
        return;
    snprintf(p, sizeof p, "%s/ckpt-%06ld", dir, seq[keep]);
    tree_bytes = 0;
    nftw(p, add_bytes, 16, FTW_PHYS);
    uint64_t free_bytes = (uint64_t)fs.f_bavail * fs.f_frsize, need = tree_bytes + (1u << 20);
    if (free_bytes >= need)
        return;
    for (int i = n - 1; i >= 0; i--) {
        if (i == keep)
            continue;
        snprintf(p, sizeof p, "%s/ckpt-%06ld", dir, seq[i]);
        ckpt_remove(p);
    }
    if (!said++)
        fprintf(stderr, "shadowsync: checkpoint.dir = %s has room for one snapshot more only "
                "without its older ones (%.1f MB free, %.1f MB each): they are removed before "
                "each is written, so only the newest is kept meanwhile\n", dir,
                free_bytes / 1e6, tree_bytes / 1e6);
}

/* The file system's calls of a checkpoint run on the process's writer
 * (ss_file_call): a stop gives up one that hangs. */
struct begin_job {
    char dir[4096], final[4200], tmp[4300];
};

static int begin_job(void *arg, struct ss_err *e)
{
    struct begin_job *b = arg;
    int rc = ss_mkdir_p(b->dir, e);
    if (rc < 0)
        return rc;
    long seq[1024];
    int n = list_ckpts(b->dir, seq, 1024);
    make_room(b->dir, seq, n);
    snprintf(b->final, sizeof b->final, "%s/ckpt-%06ld", b->dir, n ? seq[0] + 1 : 1);
    snprintf(b->tmp, sizeof b->tmp, "%s.tmp", b->final);
    rm_tree(b->tmp);
    if (mkdir(b->tmp, 0755) != 0)
        return ss_fail(e, SS_EIO, "%s: cannot create: %s", b->tmp, strerror(errno));
    return 0;
}

int ckpt_begin(struct ckpt **out, const char *dir, struct ss_err *e)
{
    struct begin_job b;
    snprintf(b.dir, sizeof b.dir, "%s", dir);
    int rc = ss_file_call(begin_job, &b, sizeof b, dir, e);
    if (rc < 0)
        return rc;
    struct ckpt *k = ss_xcalloc(1, sizeof *k);
    memcpy(k->dir, b.dir, sizeof k->dir);
    memcpy(k->final, b.final, sizeof k->final);
    memcpy(k->tmp, b.tmp, sizeof k->tmp);
    *out = k;
    return 0;
}

const char *ckpt_part_path(const struct ckpt *k, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", k->tmp, name);
    return buf;
}

struct add_job {
    char path[4400];
    uint64_t bytes, hash;
};

/* A part fsynced, then read back for its size and hash. */
static int add_job(void *arg, struct ss_err *e)
{
    struct add_job *a = arg;
    int rc = fsync_path(a->path, e);
    return rc < 0 ? rc : hash_file(a->path, &a->bytes, &a->hash, e);
}

int ckpt_add(struct ckpt *k, const char *name, struct ss_err *e)
{
    if (k->n_parts == MAX_PARTS || strlen(name) >= sizeof k->parts[0].name || strchr(name, ' '))
        return ss_fail(e, SS_EINVAL, "checkpoint: bad part name %s", name);
    char p[4400];
    ckpt_part_path(k, name, p, sizeof p);
    struct ckpt_part *pt = &k->parts[k->n_parts];
    struct add_job a;
    snprintf(a.path, sizeof a.path, "%s", p);
    int rc = ss_file_call(add_job, &a, sizeof a, p, e);
    pt->bytes = a.bytes;
    pt->hash = a.hash;
    if (rc == 0) {
        snprintf(pt->name, sizeof pt->name, "%s", name);
        k->n_parts++;
    }
    return rc;
}

const char *ckpt_tmp_dir(const struct ckpt *k)
{
    return k->tmp;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

struct list_job {
    char dir[4300];
    int n;
    char names[MAX_PARTS][64];
};

/* The parts in dir (not its MANIFEST), by name. */
static int list_job(void *arg, struct ss_err *e)
{
    struct list_job *l = arg;
    DIR *d = opendir(l->dir);
    if (!d)
        return ss_fail(e, SS_EIO, "%s: %s", l->dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, MANIFEST))
            continue;
        size_t len = strlen(de->d_name);
        if (l->n == MAX_PARTS || len >= sizeof l->names[0]) {
            rc = ss_fail(e, SS_EINVAL, "%s: more than %d parts, or %s's name is too long",
                         l->dir, MAX_PARTS, de->d_name);
            break;
        }
        memcpy(l->names[l->n++], de->d_name, len + 1);
    }
    closedir(d);
    qsort(l->names, l->n, sizeof l->names[0], by_name);
    return rc;
}

int ckpt_add_all(struct ckpt *k, struct ss_err *e)
{
    struct list_job *l = ss_xcalloc(1, sizeof *l);
    snprintf(l->dir, sizeof l->dir, "%s", k->tmp);
    int rc = ss_file_call(list_job, l, sizeof *l, k->tmp, e);
    for (int i = 0; rc == 0 && i < l->n; i++)
        rc = ckpt_add(k, l->names[i], e);
    free(l);
    return rc;
}

void ckpt_meta(struct ckpt *k, const char *key, double value)
{
    if (k->n_meta == MAX_META)
        return;
    snprintf(k->meta_key[k->n_meta], sizeof k->meta_key[0], "%s", key);
    k->meta_val[k->n_meta++] = value;
}

struct commit_job {
    char dir[4096], final[4200], tmp[4300];
    int keep;
};

/* The MANIFEST written: the directory fsynced and renamed to its final
 * name, the parent fsynced, and the snapshots past the newest keep gone. */
static int commit_job(void *arg, struct ss_err *e)
{
    struct commit_job *c = arg;
    int rc = fsync_path(c->tmp, e);
    if (rc == 0 && rename(c->tmp, c->final) != 0)
        rc = ss_fail(e, SS_EIO, "%s: cannot rename to %s: %s", c->tmp, c->final, strerror(errno));
    if (rc == 0)
        rc = fsync_path(c->dir, e);
    if (rc < 0)
        return rc;
    long seq[1024];
    int n = list_ckpts(c->dir, seq, 1024);
    for (int i = c->keep; i < n; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/ckpt-%06ld", c->dir, seq[i]);
        rm_tree(p);
    }
    return 0;
}

int ckpt_commit(struct ckpt *k, int keep, const char **final, struct ss_err *e)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", k->tmp, MANIFEST);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return ss_fail(e, SS_ENOMEM, "%s: %s", p, strerror(errno));
    char line[256];
    uint64_t h = SS_FNV_BASIS;
#define PUT(...)                                                                                   \
    (snprintf(line, sizeof line, __VA_ARGS__), h = ss_fnv1a(h, line, strlen(line)), fputs(line, f))
    PUT("shadowsync checkpoint 1\n");
    for (int i = 0; i < k->n_meta; i++)
        PUT("meta %s %.17g\n", k->meta_key[i], k->meta_val[i]);
    for (int i = 0; i < k->n_parts; i++)
        PUT("part %s %llu %016llx\n", k->parts[i].name, (unsigned long long)k->parts[i].bytes,
            (unsigned long long)k->parts[i].hash);
#undef PUT
    fprintf(f, "end %016llx\n", (unsigned long long)h);
    fclose(f);
    struct ss_span part = {text, len};
    int rc = ss_write_file(p, &part, 1, 1, text, e);
    if (rc < 0)
        return rc;
    struct commit_job c = {.keep = keep};
    memcpy(c.dir, k->dir, sizeof c.dir);
    memcpy(c.final, k->final, sizeof c.final);
    memcpy(c.tmp, k->tmp, sizeof c.tmp);
    if ((rc = ss_file_call(commit_job, &c, sizeof c, k->tmp, e)) < 0)
        return rc;
    if (final)
        *final = k->final;
    return 0;
}

static int drop_job(void *arg, struct ss_err *e)
{
    (void)e;
    struct stat st;
    if (stat(arg, &st) == 0)
        rm_tree(arg);
    return 0;
}

void ckpt_free(struct ckpt *k)
{
    if (!k)
        return;
    struct ss_err ignored = {0}; /* never committed: gone (a stop's hung file system: left) */
    ss_file_call(drop_job, k->tmp, sizeof k->tmp, k->tmp, &ignored);
    free(k);
}

/* Checks ckdir's MANIFEST and (check_parts) every part; fills its figures. */
static int verify(const char *ckdir, struct ckpt_meta_set *m, int check_parts, struct ss_err *e)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", ckdir, MANIFEST);
    FILE *f = fopen(p, "r");
    if (!f)
        return ss_fail(e, SS_EFORMAT, "%s: no MANIFEST (an unfinished checkpoint)", ckdir);
    char line[512];
    int rc = 0, ended = 0, first = 1, n_parts = 0, cap_parts = 0;
    char (*parts)[48] = NULL; /* the parts listed: any other file is no part of it */
    if (m)
        m->n = 0;
    uint64_t h = SS_FNV_BASIS;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char name[48];
        unsigned long long bytes, hash;
        double v;
        if (ended) {
            rc = ss_fail(e, SS_EFORMAT, "%s: a line after its end: %s", p, line);
            break;
        }
        if (strncmp(line, "end", 3) != 0)
            h = ss_fnv1a(h, line, strlen(line));
        if (first) {
            first = 0;
            if (strcmp(line, "shadowsync checkpoint 1\n") != 0)
                rc = ss_fail(e, SS_EFORMAT, "%s: not a shadowsync checkpoint MANIFEST", p);
        } else if (!strcmp(line, "end\n")) { /* its counts could be edited unseen */
            rc = ss_fail(e, SS_EFORMAT, "%s: ends in a bare \"end\", with no hash of its lines "
                         "(a MANIFEST of an older version, or an edited one): its counts cannot "
                         "be checked", p);
        } else if (sscanf(line, "end %llx", &hash) == 1 && strlen(line) == 21) {
            ended = 1;
            if (hash != h)
                rc = ss_fail(e, SS_EFORMAT, "%s: its lines do not match their hash (a damaged "
                             "MANIFEST)", p);
        } else if (sscanf(line, "meta %47s %lf", name, &v) == 2) {
            if (!(v >= 0 && v < 0x1p62)) /* counts and sums, every one: NaN fails too */
                rc = ss_fail(e, SS_EFORMAT, "%s: meta %s = %g is no count", p, name, v);
            else if (m && m->n < MAX_META) {
                snprintf(m->key[m->n], sizeof m->key[0], "%.47s", name);
                m->val[m->n++] = v;
            }
        } else if (sscanf(line, "part %47s %llu %llx", name, &bytes, &hash) == 3) {
            if (!check_parts)
                continue;
            if (n_parts == cap_parts)
                parts = ss_xrealloc(parts, (size_t)(cap_parts = cap_parts ? 2 * cap_parts : 64) *
                                               sizeof *parts);
            memcpy(parts[n_parts++], name, sizeof name);
            char part[4500];
            uint64_t got_bytes, got_hash;
            snprintf(part, sizeof part, "%s/%s", ckdir, name);
            rc = hash_file(part, &got_bytes, &got_hash, e);
            if (rc == 0 && (got_bytes != bytes || got_hash != hash))
                rc = ss_fail(e, SS_EFORMAT, "%s: %llu bytes (hash %016llx), the MANIFEST says %llu "
                             "(%016llx)", part, (unsigned long long)got_bytes,
                             (unsigned long long)got_hash, bytes, hash);
        } else {
            rc = ss_fail(e, SS_EFORMAT, "%s: bad line: %s", p, line);
        }
    }
    fclose(f);
    if (rc == 0 && !ended)
        rc = ss_fail(e, SS_EFORMAT, "%s: MANIFEST cut short", ckdir);
    DIR *d = rc == 0 && check_parts ? opendir(ckdir) : NULL;
    for (struct dirent *de; d && rc == 0 && (de = readdir(d));) {
        int listed = de->d_name[0] == '.' || !strcmp(de->d_name, MANIFEST);
        for (int i = 0; !listed && i < n_parts; i++)
            listed = !strcmp(parts[i], de->d_name);
        if (!listed) /* a part put there since (a stray reader-1.pos is read as a cluster's) */
            rc = ss_fail(e, SS_EFORMAT, "%s: holds %s, which its MANIFEST does not list",
                         ckdir, de->d_name);
    }
    if (d)
        closedir(d);
    free(parts);
    return rc;
}

int ckpt_latest(const char *dir, char *out, size_t cap, struct ckpt_meta_set *m, int *skipped,
                struct ss_err *e)
{
    long seq[1024];
    int n = list_ckpts(dir, seq, 1024);
    *skipped = 0;
    struct ss_err why = {0};
    for (int i = 0; i < n; i++) {
        snprintf(out, cap, "%s/ckpt-%06ld", dir, seq[i]);
        if (verify(out, m, 1, &why) == 0)
            return 0;
        fprintf(stderr, "shadowsync: skipping checkpoint %s: %s\n", out, why.msg);
        (*skipped)++;
    }
    if (n == 0)
        return ss_fail(e, SS_EIO, "%s: no checkpoint to resume from (no ckpt-N directory)", dir);
    return ss_fail(e, SS_EIO, "%s: no complete checkpoint to resume from; the last refused: %s",
                   dir, why.msg);
}

int ckpt_refuse_earlier(const char *dir, struct ckpt_meta_set *found, struct ss_err *e)
{
    long seq[1024];
    found->n = 0;
    int n = list_ckpts(dir, seq, 1024);
    for (int i = 0; i < n; i++) {
        char ck[4200];
        struct ckpt_meta_set m;
        struct ss_err ignored = {0};
        snprintf(ck, sizeof ck, "%s/ckpt-%06ld", dir, seq[i]);
        /* unfinished, or of a run that trained nothing: nothing to lose, nothing to resume */
        if (verify(ck, &m, 0, &ignored) < 0 || ckpt_meta_get(&m, "examples", 0) <= 0)
            continue;
        *found = m;
        return ss_fail(e, SS_EINVAL, "checkpoint.dir = %s holds an earlier run's checkpoints "
                       "(%s the newest complete one): continue that run with --resume, or give "
                       "another checkpoint.dir (a new run would number its own after them, and "
                       "the newest 2 kept would soon be its own)", dir, ck);
    }
    return 0;
}

int ckpt_read_meta(const char *ckdir, struct ckpt_meta_set *m, struct ss_err *e)
{
    return verify(ckdir, m, 0, e);
}

int ckpt_newest_meta(const char *dir, struct ckpt_meta_set *m)
{
    long seq[1024];
    int n = list_ckpts(dir, seq, 1024);
    for (int i = 0; i < n; i++) {
        char ck[4200];
        struct ss_err ignored = {0};
        snprintf(ck, sizeof ck, "%s/ckpt-%06ld", dir, seq[i]);
        if (verify(ck, m, 0, &ignored) == 0)
            return 0;
    }
    return -1;
}

int ckpt_verify(const char *ckdir, struct ckpt_meta_set *m, struct ss_err *e)
{
    return verify(ckdir, m, 1, e);
}

double ckpt_meta_get(const struct ckpt_meta_set *m, const char *key, double dflt)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->key[i], key))
            return m->val[i];
    return dflt;
}
