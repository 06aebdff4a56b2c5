/* An LD_PRELOAD shim for tests/e2e_hang.sh: a hung file system. Once
 * SLOWREAD_AFTER bytes of the file SLOWREAD_PATH (its absolute path) have
 * been read, the next read(2) of it never returns, and signals do not end
 * it (as they do not end a read on a hard-mounted NFS share); the shim
 * creates the file SLOWREAD_MARK when it starts to hang. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
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

ssize_t read(int fd, void *buf, size_t n)
{
    static ssize_t (*real)(int, void *, size_t);
    if (!real)
        real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    const char *after = getenv("SLOWREAD_AFTER");
    if (is_target(fd) && lseek(fd, 0, SEEK_CUR) >= atoll(after ? after : "0")) {
        const char *mark = getenv("SLOWREAD_MARK");
        if (mark)
            close(open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        for (;;) { /* an EINTR ends a nap, never the read */
            struct timespec nap = {1, 0};
            nanosleep(&nap, NULL);
        }
    }
    return real(fd, buf, n);
}
