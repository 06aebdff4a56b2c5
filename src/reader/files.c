/* Which files a data path names: a file, a directory (its regular,
 * non-hidden files in name order) or a glob (sorted). The file's position in
 * the list is the file index in example ids, so the order is deterministic
 * (strcmp, whatever the locale). */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILES (1 << 24) /* file index takes the top 24 bits of an example id */

int reader_has_suffix(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !strcmp(name + n - k, suffix);
}

static int keep(const char *name, int pick)
{
    if (reader_has_suffix(name, ".tmp") || reader_has_suffix(name, ".part")) /* being written */
        return 0;
    if (pick == PICK_TEXT)
        return !reader_has_suffix(name, ".bin");
    if (pick == PICK_BINARY)
        return reader_has_suffix(name, ".bin");
    return 1;
}

struct list {
    char **v;
    int n, cap;
};

static void list_add(struct list *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, (size_t)l->cap * sizeof *v);
        if (!v) {
            fprintf(stderr, "shadowsync: out of memory listing files\n");
            abort();
        }
        l->v = v;
    }
    size_t n = strlen(s) + 1;
    l->v[l->n] = ss_xmalloc(n);
    memcpy(l->v[l->n++], s, n);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_regular(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A symbolic link whose target is missing. */
static int dangling(const char *p)
{
    struct stat st;
    return stat(p, &st) != 0 && errno == ENOENT && lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
}

/* The entries of a directory or glob that are no regular file (not read):
 * how many, and the first, named. */
struct not_read {
    int n;
    char first[512];
    const char *kind;
};

/* Lists the regular file p (shown as name), or counts it in nr (or NULL). */
static void take(struct list *l, const char *p, const char *name, struct not_read *nr)
{
    struct stat st;
    if (is_regular(p))
        list_add(l, p);
    else if (nr && stat(p, &st) == 0 && nr->n++ == 0) {
        snprintf(nr->first, sizeof nr->first, "%s", name);
        nr->kind = S_ISDIR(st.st_mode) ? "a directory" : "not a regular file";
    }
}

static int list_dir(const char *path, int pick, struct list *l, struct not_read *nr,
                    struct ss_err *e)
{
    DIR *d = opendir(path);
    if (!d)
        return ss_fail(e, SS_EIO, "%s: %s", path, strerror(errno));
    size_t plen = strlen(path);
    int slash = plen > 0 && path[plen - 1] == '/';
    char *full = NULL;
    size_t full_cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !keep(de->d_name, pick))
            continue;
        size_t need = plen + strlen(de->d_name) + 2;
        if (need > full_cap) {
            free(full);
            full_cap = need * 2;
            full = ss_xmalloc(full_cap);
        }
        snprintf(full, full_cap, "%s%s%s", path, slash ? "" : "/", de->d_name);
        if (dangling(full)) {
            int rc = ss_fail(e, SS_EIO, "%s: a link to a file that does not exist (an unmounted "
                             "volume?): its data would be missed", full);
            free(full);
            closedir(d);
            return rc;
        }
        take(l, full, de->d_name, nr);
    }
    free(full);
    closedir(d);
    return 0;
}

static int list_glob(const char *path, int pick, struct list *l, struct not_read *nr,
                     struct ss_err *e)
{
    glob_t g;
    int rc = glob(path, 0, NULL, &g);
    if (rc == GLOB_NOMATCH)
        return ss_fail(e, SS_EIO, "%s: no files match", path);
    if (rc)
        return ss_fail(e, SS_EIO, "%s: cannot expand the pattern", path);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *p = g.gl_pathv[i];
        const char *base = strrchr(p, '/');
        if (keep(base ? base + 1 : p, pick) && dangling(p)) {
            int rc = ss_fail(e, SS_EIO, "%s: a link to a file that does not exist (an unmounted "
                             "volume?): its data would be missed", p);
            globfree(&g);
            return rc;
        }
        if (keep(base ? base + 1 : p, pick))
            take(l, p, p, nr);
    }
    globfree(&g);
    return 0;
}

int reader_list_files(const char *path, int pick, char ***files, int *n, struct ss_err *e)
{
    struct list l = {0};
    struct stat st;
    int rc = 0;
    *files = NULL;
    *n = 0;
    if (!path || !*path)
        return ss_fail(e, SS_EINVAL, "no data path given");
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            rc = list_dir(path, pick, &l, NULL, e);
        else
            list_add(&l, path);
    } else if (strpbrk(path, "*?[")) {
        rc = list_glob(path, pick, &l, NULL, e);
    } else {
        return ss_fail(e, SS_EIO, "%s: %s", path, strerror(errno));
    }
    if (!rc && l.n == 0)
        rc = ss_fail(e, SS_EIO, "%s: no %sdata files", path,
                     pick == PICK_BINARY ? "binary (.bin) " : "");
    if (!rc && l.n > MAX_FILES)
        rc = ss_fail(e, SS_EINVAL, "%s: %d files, more than the %d a reader takes", path, l.n,
                     MAX_FILES);
    if (rc) {
        reader_free_files(l.v, l.n);
        return rc;
    }
    qsort(l.v, (size_t)l.n, sizeof *l.v, by_name);
    *files = l.v;
    *n = l.n;
    return 0;
}

/* Says (once, before training) what a data directory or glob holds that is
 * not read: subdirectories, pipes, sockets (a pipe named itself is read). */
static void note_not_read(const char *key, const char *path)
{
    struct stat st;
    struct list l = {0};
    struct not_read nr = {0};
    struct ss_err ignored = {0};
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        list_dir(path, PICK_ALL, &l, &nr, &ignored);
    else if (strpbrk(path, "*?["))
        list_glob(path, PICK_ALL, &l, &nr, &ignored);
    reader_free_files(l.v, l.n);
    if (nr.n)
        fprintf(stderr, "shadowsync: warning: %s = %s: %d of its entries %s no file and %s not "
                "read (%s: %s; a subdirectory's files are read only where named, or by a glob)\n",
                key, path, nr.n, nr.n == 1 ? "is" : "are", nr.n == 1 ? "is" : "are", nr.first,
                nr.kind);
}

/* Lists a data key's files, a failure naming the key. */
static int list_key(const char *key, const char *path, char ***files, int *n, struct ss_err *e)
{
    int rc = reader_list_files(path, PICK_ALL, files, n, e);
    if (rc < 0) {
        char why[sizeof e->msg], hint[600] = "";
        snprintf(why, sizeof why, "%s", e->msg);
        struct stat st;
        if (*path && !strpbrk(path, "*?[") && stat(path, &st) != 0 && errno == ENOENT) {
            char *cwd = getcwd(NULL, 0); /* a path of no file: where it was looked for, and how
                                          * to make data of the config's shape */
            if (path[0] != '/' && cwd)
                snprintf(hint, sizeof hint, "; a relative path is taken from the working "
                         "directory, %s", cwd);
            size_t k = strlen(hint);
            snprintf(hint + k, sizeof hint - k, "; `shadowsync gen --out DIR --config CONFIG` "
                     "writes data of a config's shape (DIR/train.tsv, DIR/eval.tsv)");
            free(cwd);
        }
        return ss_fail(e, rc, "%s: %s (checked before training)%s", key, why, hint);
    }
    return 0;
}

int reader_check_train(const char *train, struct ss_err *e)
{
    char **tr;
    int n_tr, rc = list_key("data.train", train, &tr, &n_tr, e);
    if (rc == 0) {
        reader_free_files(tr, n_tr);
        note_not_read("data.train", train);
    }
    return rc;
}

int reader_check_eval(const char *train, const char *eval, struct ss_err *e)
{
    char **ev, **tr;
    int n_ev, n_tr, rc;
    if ((rc = list_key("data.eval", eval, &ev, &n_ev, e)) < 0)
        return rc;
    note_not_read("data.eval", eval);
    /* the same file by any name (a symbolic or a hard link too): the same inode */
    struct stat *st = ss_xcalloc((size_t)n_ev, sizeof *st);
    for (int i = 0; i < n_ev; i++)
        if (stat(ev[i], &st[i]) != 0)
            st[i].st_ino = 0;
    struct ss_err ignored = {0};
    if (reader_list_files(train, PICK_ALL, &tr, &n_tr, &ignored) == 0) {
        for (int k = 0; k < n_tr && rc == 0; k++) {
            struct stat b;
            if (stat(tr[k], &b) != 0)
                continue;
            for (int i = 0; i < n_ev && rc == 0; i++)
                if (st[i].st_ino && st[i].st_ino == b.st_ino && st[i].st_dev == b.st_dev)
                    rc = ss_fail(e, SS_EINVAL, "data.eval's file %s is also one of data.train = "
                                 "%s: the model would be scored on examples it trained on (name "
                                 "the training file itself, or move the eval file out)", ev[i],
                                 train);
        }
        reader_free_files(tr, n_tr);
    }
    free(st);
    reader_free_files(ev, n_ev);
    return rc;
}

/* Would glob(pattern) list out (whose directory is out_dir)? Its directory
 * by inode where the pattern's is a plain path (./d/x and /abs/d/x alike),
 * its name by the last part; else the whole path as written. */
static int glob_would_list(const char *pattern, const char *out, const char *out_dir)
{
    const char *slash = strrchr(pattern, '/'), *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    if (slash && memchr(pattern, '*', (size_t)(slash - pattern)) == NULL &&
        memchr(pattern, '?', (size_t)(slash - pattern)) == NULL &&
        memchr(pattern, '[', (size_t)(slash - pattern)) == NULL) {
        char *pd = strndup(pattern, (size_t)(slash - pattern) + (slash == pattern));
        struct stat a, b;
        int same = pd && stat(pd, &a) == 0 && stat(out_dir, &b) == 0 && a.st_dev == b.st_dev &&
                   a.st_ino == b.st_ino;
        free(pd);
        return same && fnmatch(slash + 1, base, FNM_PERIOD) == 0;
    }
    if (!slash) { /* a pattern of names in the working directory */
        struct stat a, b;
        return stat(".", &a) == 0 && stat(out_dir, &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino && fnmatch(pattern, base, FNM_PERIOD) == 0;
    }
    return fnmatch(pattern, out, FNM_PATHNAME | FNM_PERIOD) == 0;
}

int reader_check_output(const char *what, const char *out, const char *key, const char *path,
                        struct ss_err *e)
{
    char **f, *dir = ss_xmalloc(strlen(out) + 2);
    int n, rc = 0;
    struct stat o, d, p;
    int out_there = stat(out, &o) == 0;
    /* out's directory: where a new file of that name would be listed */
    strcpy(dir, out);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else
        slash[slash == dir] = 0; /* "/x" -> "/" */
    if (stat(path, &p) == 0 && S_ISDIR(p.st_mode) && stat(dir, &d) == 0 &&
        p.st_dev == d.st_dev && p.st_ino == d.st_ino)
        rc = ss_fail(e, SS_EINVAL, "%s %s would be written into %s = %s, which a later run "
                     "would read as data: write it elsewhere", what, out, key, path);
    else if (strpbrk(path, "*?[") && glob_would_list(path, out, dir))
        rc = ss_fail(e, SS_EINVAL, "%s %s matches %s = %s, which a later run would read as "
                     "data: write it elsewhere", what, out, key, path);
    struct ss_err ignored = {0};
    if (rc == 0 && out_there && reader_list_files(path, PICK_ALL, &f, &n, &ignored) == 0) {
        for (int i = 0; i < n && rc == 0; i++) {
            struct stat b;
            if (stat(f[i], &b) == 0 && b.st_dev == o.st_dev && b.st_ino == o.st_ino)
                rc = ss_fail(e, SS_EINVAL, "%s %s is %s's file %s: writing it would destroy the "
                             "data it is read from; write it elsewhere", what, out, key, f[i]);
        }
        reader_free_files(f, n);
    }
    free(dir);
    return rc;
}

void reader_free_files(char **files, int n)
{
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
}

