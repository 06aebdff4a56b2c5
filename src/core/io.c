/* Blocking file calls that a stop can give up (docs/design.md §8). A call
 * that may block on a file system (an open, a read, a write, an fsync)
 * runs on a thread of an ss_io's own while the caller waits in steps of
 * SS_IO_POLL_MS. A call that never returns (a hung network file system)
 * then cannot hold the caller past a stop: once a signal has come
 * (ss_halt_raised) and the call has made no progress for the io's
 * give_up_s (since it began, or since its last ss_io_step), the caller
 * gives it up. A call without progress for SS_IO_NOTE_S is named once.
 * The given-up call keeps what it works on (its thread, its argument):
 * the io is stuck from then on, takes no other call, and ss_io_close
 * says so (nothing it points at may be freed). Each reader has an io of
 * its own (src/reader); the process's writes of its state (checkpoints,
 * the model) go through one more (ss_write_file, ss_file_call). */
#include "shadowsync/core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static _Thread_local struct ss_io *self; /* the io whose thread this is */
static int ending;                       /* ss_io_end: the job has ended */

void ss_io_end(void)
{
    __atomic_store_n(&ending, 1, __ATOMIC_SEQ_CST);
}

/* Whether a stuck call may be given up: a signal came, or the job ended. */
static int stopping(void)
{
    return ss_halt_raised() || __atomic_load_n(&ending, __ATOMIC_SEQ_CST);
}

const char *ss_io_stop_name(void)
{
    int sig = ss_halt_raised();
    return sig ? ss_halt_sig_name(sig) : "the job's end";
}

static void *io_main(void *arg)
{
    struct ss_io *io = self = arg;
    sigset_t all; /* a signal for the process must not wait on a thread held in a call */
    sigfillset(&all);
    int sync_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}; /* its own faults */
    for (size_t i = 0; i < sizeof sync_sigs / sizeof *sync_sigs; i++)
        sigdelset(&all, sync_sigs[i]);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->fn && !io->quit)
            pthread_cond_wait(&io->go, &io->mu);
        if (!io->fn)
            break;
        int (*fn)(void *) = io->fn;
        void *a = io->arg;
        pthread_mutex_unlock(&io->mu);
        int rc = fn(a);
        pthread_mutex_lock(&io->mu);
        io->rc = rc;
        io->fn = NULL;
        pthread_cond_signal(&io->done);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

void ss_io_init(struct ss_io *io, int writes, double give_up_s)
{
    memset(io, 0, sizeof *io);
    io->writes = writes;
    io->give_up_s = give_up_s;
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->go, NULL);
    pthread_cond_init(&io->done, NULL);
}

void ss_io_step(void)
{
    struct ss_io *io = self;
    if (!io)
        return;
    pthread_mutex_lock(&io->mu);
    io->step_at = ss_now();
    pthread_mutex_unlock(&io->mu);
}

int ss_io_call(struct ss_io *io, int (*fn)(void *), void *arg, const char *file)
{
    if (io->stuck)
        return SS_IO_STOPPED;
    pthread_mutex_lock(&io->mu);
    if (!io->started) {
        if (pthread_create(&io->th, NULL, io_main, io) != 0) { /* run it here, as before */
            pthread_mutex_unlock(&io->mu);
            return fn(arg);
        }
        io->started = 1;
    }
    io->fn = fn;
    io->arg = arg;
    io->step_at = ss_now();
    pthread_cond_signal(&io->go);
    int said = 0;
    while (io->fn) {
        struct timespec ts = ss_deadline(SS_IO_POLL_MS / 1000.0);
        if (pthread_cond_timedwait(&io->done, &io->mu, &ts) == 0 || !io->fn)
            continue;
        double quiet = ss_now() - io->step_at;
        if (stopping() && quiet >= io->give_up_s) {
            io->stuck = 1;
            io->stuck_s = quiet;
            pthread_mutex_unlock(&io->mu);
            return SS_IO_STOPPED;
        }
        if (!said && quiet >= SS_IO_NOTE_S) {
            said = 1;
            fprintf(stderr, "shadowsync: %s: a %s for %.0f s (a slow or hung file system?): "
                    "waiting for it (SIGINT or SIGTERM stops the wait)\n", file,
                    io->writes ? "write has made no progress" : "read has not returned",
                    SS_IO_NOTE_S);
        }
    }
    int rc = io->rc;
    pthread_mutex_unlock(&io->mu);
    return rc;
}

int ss_io_close(struct ss_io *io)
{
    if (io->stuck) /* its thread may yet write where its call pointed */
        return 1;
    if (io->started) {
        pthread_mutex_lock(&io->mu);
        io->quit = 1;
        pthread_cond_signal(&io->go);
        pthread_mutex_unlock(&io->mu);
        pthread_join(io->th, NULL);
    }
    pthread_mutex_destroy(&io->mu);
    pthread_cond_destroy(&io->go);
    pthread_cond_destroy(&io->done);
    return 0;
}

/* ---- the process's writes of its state -------------------------------- */
#define WRITE_GIVE_UP_S 1.0  /* a write without progress this long at a stop is given up */
#define WRITE_STEP (4u << 20) /* bytes a write(2): its progress, seen by ss_io_step */

/* The writer: an io made at the first call, and again after one was given
 * up (it stays with its stuck call). Once one was, the calls for a path on
 * the same mount fail at once (a file system that hung stays hung for the
 * few seconds the run has left); the others still run. */
static struct ss_io *writer;
static pthread_mutex_t writer_mu = PTHREAD_MUTEX_INITIALIZER; /* one call at a time */
#define MAX_HUNG 8
static struct {
    char mount[4096], file[512]; /* the mount, and the file given up on under it */
} hung[MAX_HUNG];
static int n_hung;

/* The mount point that path lies under: the longest of
 * /proc/self/mountinfo's that is a prefix of its absolute path (text only:
 * the file system itself is never asked, it may be the hung one). */
static void mount_of(const char *path, char *out, size_t cap)
{
    char abs[4400], cwd[4096], line[8192], mp[4096];
    if (path[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(abs, sizeof abs, "%s/%s", cwd, path);
    else
        snprintf(abs, sizeof abs, "%s", path);
    snprintf(out, cap, "/");
    size_t best = 1;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
            continue;
        size_t n = 0; /* its octal escapes (a space: \040) undone in place */
        for (size_t i = 0; mp[i]; i++, n++)
            if (mp[i] == '\\' && mp[i + 1] && mp[i + 2] && mp[i + 3]) {
                mp[n] = (char)strtol((char[4]){mp[i + 1], mp[i + 2], mp[i + 3], 0}, NULL, 8);
                i += 3;
            } else {
                mp[n] = mp[i];
            }
        mp[n] = '\0';
        if (n > best && strncmp(abs, mp, n) == 0 && (abs[n] == '/' || abs[n] == '\0')) {
            best = n;
            snprintf(out, cap, "%s", mp);
        }
    }
    if (f)
        fclose(f);
}

/* A call the writer runs: fn(job, err) on a copy of the caller's job,
 * which a given-up call keeps (never freed). */
struct file_call {
    int (*fn)(void *job, struct ss_err *e);
    struct ss_err err;
    size_t size;
    char job[];
};

static int run_file_call(void *arg)
{
    struct file_call *c = arg;
    return c->fn(c->job, &c->err);
}

/* SS_ESTOPPED when path's mount had a call given up; under writer_mu. */
static int refuse_hung(const char *path, struct ss_err *e)
{
    char mount[4096];
    if (n_hung)
        mount_of(path, mount, sizeof mount);
    for (int i = 0; i < n_hung; i++)
        if (!strcmp(mount, hung[i].mount))
            return ss_fail(e, SS_ESTOPPED, "%s: not written: a write to %s made no progress "
                           "when the run was stopped (%s): nothing more is written under %s",
                           path, hung[i].file, ss_io_stop_name(), mount);
    return 0;
}

int ss_file_call(int (*fn)(void *job, struct ss_err *e), void *job, size_t size,
                 const char *path, struct ss_err *e)
{
    pthread_mutex_lock(&writer_mu);
    int refused = refuse_hung(path, e);
    if (refused) {
        pthread_mutex_unlock(&writer_mu);
        return refused;
    }
    if (!writer) {
        writer = ss_xmalloc(sizeof *writer);
        ss_io_init(writer, 1, WRITE_GIVE_UP_S);
    }
    struct file_call *c = ss_xcalloc(1, sizeof *c + size);
    c->fn = fn;
    c->size = size;
    memcpy(c->job, job, size);
    int rc = ss_io_call(writer, run_file_call, c, path);
    if (rc == SS_IO_STOPPED) { /* c and the io are the stuck call's */
        rc = ss_fail(e, SS_ESTOPPED, "%s: stopped (%s) while a write to it had made no "
                     "progress for %.1f s (a hung file system?): given up, left to its thread; "
                     "nothing more is written on its mount", path,
                     ss_io_stop_name(), writer->stuck_s);
        writer = NULL;
        if (n_hung < MAX_HUNG) {
            mount_of(path, hung[n_hung].mount, sizeof hung[0].mount);
            snprintf(hung[n_hung++].file, sizeof hung[0].file, "%s", path);
        }
        pthread_mutex_unlock(&writer_mu);
        return rc;
    }
    pthread_mutex_unlock(&writer_mu);
    memcpy(job, c->job, size);
    if (rc < 0 && e)
        *e = c->err;
    free(c);
    return rc;
}


static int mkdir_job(void *dir, struct ss_err *e)
{
    return ss_mkdir_p(dir, e);
}

int ss_file_mkdir_p(const char *dir, struct ss_err *e)
{
    char d[4096];
    if (snprintf(d, sizeof d, "%s", dir) >= (int)sizeof d)
        return ss_fail(e, SS_EINVAL, "%s: path too long", dir);
    return ss_file_call(mkdir_job, d, sizeof d, dir, e);
}

/* ss_write_file's job: path written whole from its spans. */
struct write_job {
    char path[4400];
    const struct ss_span *parts; /* a copy the call owns */
    int n, sync;
};

static int write_all(void *arg, struct ss_err *e)
{
    struct write_job *w = arg;
    int fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ss_fail(e, SS_EIO, "%s: cannot write: %s", w->path, strerror(errno));
    int rc = 0;
    for (int i = 0; rc == 0 && i < w->n; i++) {
        const char *p = w->parts[i].p;
        size_t left = w->parts[i].n;
        while (left > 0) {
            ssize_t k = write(fd, p, left < WRITE_STEP ? left : WRITE_STEP);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = ss_fail(e, SS_EIO, "%s: write failed: %s", w->path,
                             k < 0 ? strerror(errno) : "no progress");
                break;
            }
            p += k;
            left -= (size_t)k;
            ss_io_step();
        }
    }
    if (rc == 0 && w->sync && fsync(fd) != 0)
        rc = ss_fail(e, SS_EIO, "%s: fsync: %s", w->path, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = ss_fail(e, SS_EIO, "%s: write failed: %s", w->path, strerror(errno));
    return rc;
}

int ss_write_file(const char *path, const struct ss_span *parts, int n, int sync, void *owned,
                  struct ss_err *e)
{
    struct write_job w = {.n = n, .sync = sync};
    pthread_mutex_lock(&writer_mu);
    int rc = refuse_hung(path, e); /* (then nothing is the stuck call's) */
    pthread_mutex_unlock(&writer_mu);
    if (rc == 0 && snprintf(w.path, sizeof w.path, "%s", path) >= (int)sizeof w.path)
        rc = ss_fail(e, SS_EINVAL, "%s: path too long", path);
    if (rc < 0) {
        free(owned);
        return rc;
    }
    struct ss_span *own = ss_xmalloc((size_t)(n ? n : 1) * sizeof *own);
    memcpy(own, parts, (size_t)n * sizeof *own);
    w.parts = own;
    rc = ss_file_call(write_all, &w, sizeof w, path, e);
    if (rc != SS_ESTOPPED) { /* else the stuck call's */
        free(own);
        free(owned);
    }
    return rc;
}

/* A stream's buffered lines written (fflush), or the stream closed, on the
 * writer; given up, the stream is the stuck call's: *f is then NULL. */
struct stream_job {
    FILE *f;
    int close;
};

static int stream_job(void *arg, struct ss_err *e)
{
    struct stream_job *s = arg;
    int bad = s->close ? fclose(s->f) : fflush(s->f);
    return bad ? ss_fail(e, SS_EIO, "write failed: %s", strerror(errno)) : 0;
}

int ss_file_flush(FILE **f, const char *path, int close)
{
    if (!*f)
        return 0;
    struct stream_job s = {*f, close};
    struct ss_err ignored = {0}; /* (a report's line: its failure is not the run's) */
    int rc = ss_file_call(stream_job, &s, sizeof s, path, &ignored);
    if (rc == SS_ESTOPPED || close)
        *f = NULL;
    return rc;
}
