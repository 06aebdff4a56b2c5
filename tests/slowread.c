/* An LD_PRELOAD shim for tests/e2e_hang.sh: a hung file system. Once
 * SLOWREAD_AFTER bytes of the file SLOWREAD_PATH (its absolute path) have
 * been read, the next read(2) of it never returns, and signals do not end
 * it (as they do not end a read on a hard-mounted NFS share). A mapping of
 * it (mmap) hangs the same way at the first touch of a page past those
 * bytes (they are mapped PROT_NONE, and the fault's handler never returns).
 * The shim creates the file SLOWREAD_MARK when it starts to hang. */
#define _GNU_SOURCE
#include <dlfcn.h>
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

static void hang(void)
{
    const char *mark = getenv("SLOWREAD_MARK");
    if (mark)
        close(open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    for (;;) { /* an EINTR ends a nap, never the hang */
        struct timespec nap = {1, 0};
        nanosleep(&nap, NULL);
    }
}

ssize_t read(int fd, void *buf, size_t n)
{
    static ssize_t (*real)(int, void *, size_t);
    if (!real)
        real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    if (is_target(fd) && lseek(fd, 0, SEEK_CUR) >= after())
        hang();
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
