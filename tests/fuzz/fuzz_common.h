/* Shared by the fuzz targets (libFuzzer, built by `make fuzz` with ASan and
 * UBSan): a memfd standing in for a file, and one Thrift request run
 * through a service's processor from memory. */
#ifndef SS_FUZZ_COMMON_H
#define SS_FUZZ_COMMON_H
#include "shadowsync/rpc.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* $TMPDIR/name (/tmp/name without TMPDIR): a run's files stay its own. */
static inline const char *fuzz_tmp(const char *name)
{
    static char path[4][4200];
    static int next;
    const char *d = getenv("TMPDIR");
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", d && *d ? d : "/tmp", name);
    return p;
}

/* A path whose contents are data[0..n). */
static inline const char *fuzz_file(const uint8_t *data, size_t n)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz", 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, data, n, 0) != (ssize_t)n))
        abort();
    return path;
}

/* data as one request to proc, through the production connection stack (a
 * buffered socket transport): the request comes in over a socketpair whose
 * other end is closed after it (so a cut-short request meets the end of
 * the connection, as in the server), the answer goes to /dev/null. */
static inline void fuzz_request(ThriftProcessor *proc, const uint8_t *data, size_t n)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || (n && write(sv[0], data, n) != (ssize_t)n))
        abort();
    close(sv[0]);
    struct rpc_conn *in = rpc_conn_on_fd(sv[1]), *out = rpc_conn_on_fd(open("/dev/null", O_WRONLY));
    rpc_conn_limit(in, 1 << 20); /* no 100 MiB buffers for lengths the input cannot hold */
    GError *err = NULL;
    rpc_process(proc, rpc_conn_protocol(in), rpc_conn_protocol(out), &err);
    if (err)
        g_error_free(err);
    rpc_conn_close(in);
    rpc_conn_close(out);
}

static const char fuzz_token[] = "0123456789abcdef0123456789abcdef";
#endif
