/* An LD_PRELOAD shim for tests/e2e_hang.sh: a hung file system. Once
 * SLOWREAD_AFTER bytes of the file SLOWREAD_PATH (its absolute path) have
 * been read, the next read(2) of it never returns, and signals do not end
 * it (as they do not end a read on a hard-mounted NFS share). A mapping of
 * it (mmap) hangs the same way at the first touch of a page past those
 * bytes (they are mapped PROT_NONE, and the fault's handler never returns).
 * The shim creates the file SLOWREAD_MARK when it starts to hang.
 *
 * Writes: once SLOWWRITE_AFTER bytes in all have been written (write(2))
 * to files under the directory SLOWWRITE_DIR (absolute), the file system
 * there dies: the write that would pass them, and from then on every
 * open, mkdir, rename, unlink, stat, read, write or fsync of a path or a
 * file under it never returns, signals or not (fflush and fclose of a
 * stream on such a file too). It dies as well once the file SLOWWRITE_KILL
 * exists. It creates SLOWWRITE_MARK when it dies. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int is_target(int fd)
{
    const char *path = getenv("SLOWREAD_PATH");
    char link[64], at[4096];
    if (!path)
        return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, at, sizeof at - 1);
    if (k <= 0)
        return 0;
    at[k] = '\0';
    return strcmp(at, path) == 0;
}

static long long after(void)
{
    const char *a = getenv("SLOWREAD_AFTER");
    return atoll(a ? a : "0");
}

static void hang_marking(const char *mark_env)
{
    const char *mark = getenv(mark_env);
    if (mark)
        close(open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    for (;;) { /* an EINTR ends a nap, never the hang */
        struct timespec nap = {1, 0};
        nanosleep(&nap, NULL);
    }
}

static void hang(void)
{
    hang_marking("SLOWREAD_MARK");
}

/* ---- the dying file system of SLOWWRITE_DIR ---- */
static int dead;
static long long written;

static int under_dir(const char *path)
{
    const char *d = getenv("SLOWWRITE_DIR");
    size_t n = d ? strlen(d) : 0;
    return n && path && strncmp(path, d, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static int fd_under_dir(int fd)
{
    char link[64], at[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, at, sizeof at - 1);
    if (k <= 0)
        return 0;
    at[k] = '\0';
    return under_dir(at);
}

static int is_dead(void)
{
    const char *kill = getenv("SLOWWRITE_KILL");
    if (kill && access(kill, F_OK) == 0)
        __atomic_store_n(&dead, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&dead, __ATOMIC_SEQ_CST);
}

static void die_if_dead(const char *path)
{
    if (is_dead() && under_dir(path))
        hang_marking("SLOWWRITE_MARK");
}

static void die_if_dead_fd(int fd)
{
    if (is_dead() && fd_under_dir(fd))
        hang_marking("SLOWWRITE_MARK");
}

#define REAL(ret, name, ...)                                                                       \
    static ret (*real)(__VA_ARGS__);                                                               \
    if (!real)                                                                                     \
        real = (ret (*)(__VA_ARGS__))dlsym(RTLD_NEXT, name)

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(ssize_t, "write", int, const void *, size_t);
    if (getenv("SLOWWRITE_DIR") && fd > 2 && fd_under_dir(fd)) {
        const char *a = getenv("SLOWWRITE_AFTER");
        if (__atomic_add_fetch(&written, (long long)n, __ATOMIC_SEQ_CST) > atoll(a ? a : "0"))
            __atomic_store_n(&dead, 1, __ATOMIC_SEQ_CST);
        die_if_dead_fd(fd);
    }
    return real(fd, buf, n);
}

int fflush(FILE *f)
{
    REAL(int, "fflush", FILE *);
    if (f && getenv("SLOWWRITE_DIR"))
        die_if_dead_fd(fileno(f));
    return real(f);
}

int fclose(FILE *f)
{
    REAL(int, "fclose", FILE *);
    if (f && getenv("SLOWWRITE_DIR"))
        die_if_dead_fd(fileno(f));
    return real(f);
}

int fsync(int fd)
{
    REAL(int, "fsync", int);
    die_if_dead_fd(fd);
    return real(fd);
}

int fdatasync(int fd)
{
    REAL(int, "fdatasync", int);
    die_if_dead_fd(fd);
    return real(fd);
}

/* open and open64 alike: the mode is there only with O_CREAT, read as an int */
#define OPEN_SHIM(name)                                                                            \
    int name(const char *path, int flags, ...)                                                     \
    {                                                                                              \
        REAL(int, #name, const char *, int, ...);                                                  \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;                             \
        va_end(ap);                                                                                \
        die_if_dead(path);                                                                         \
        return real(path, flags, mode);                                                            \
    }
OPEN_SHIM(open)
OPEN_SHIM(open64)

int mkdir(const char *path, mode_t mode)
{
    REAL(int, "mkdir", const char *, mode_t);
    die_if_dead(path);
    return real(path, mode);
}

int rename(const char *from, const char *to)
{
    REAL(int, "rename", const char *, const char *);
    die_if_dead(from);
    die_if_dead(to);
    return real(from, to);
}

int unlink(const char *path)
{
    REAL(int, "unlink", const char *);
    die_if_dead(path);
    return real(path);
}

int stat(const char *path, struct stat *st)
{
    REAL(int, "stat", const char *, struct stat *);
    die_if_dead(path);
    return real(path, st);
}

DIR *opendir(const char *path)
{
    REAL(DIR *, "opendir", const char *);
    die_if_dead(path);
    return real(path);
}

ssize_t read(int fd, void *buf, size_t n)
{
    static ssize_t (*real)(int, void *, size_t);
    if (!real)
        real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    if (is_target(fd) && lseek(fd, 0, SEEK_CUR) >= after())
        hang();
    die_if_dead_fd(fd);
    return real(fd, buf, n);
}

static char *hung_from, *hung_to; /* the mapping's pages that hang */

static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    char *at = si->si_addr;
    if (at >= hung_from && at < hung_to)
        hang();
    signal(sig, SIG_DFL); /* another fault: the crash it would be */
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    static void *(*real)(void *, size_t, int, int, int, off_t);
    if (!real)
        real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    char *m = real(addr, len, prot, flags, fd, off);
    long page = sysconf(_SC_PAGESIZE);
    size_t from = (size_t)((after() + page - 1) / page * page);
    if (m == MAP_FAILED || fd < 0 || !is_target(fd) || from >= len)
        return m;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigfillset(&sa.sa_mask); /* no signal reaches the hung thread */
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = on_fault;
    sigaction(SIGSEGV, &sa, NULL);
    hung_from = m + from;
    hung_to = m + len;
    mprotect(hung_from, len - from, PROT_NONE);
    return m;
}
