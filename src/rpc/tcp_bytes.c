/* The bytes this process has sent and received over TCP: its calls, its
 * services and MPI's own TCP traffic (a cluster job's wire, per rank). The
 * kernel counts them per socket (TCP_INFO: bytes acknowledged by the peer,
 * bytes received); the sockets still open are read when asked, and an
 * rpc_conn adds its socket's counts here as it closes. Traffic that never
 * touches TCP (Open MPI's shared memory between ranks of one host) is not
 * counted. */
#include "shadowsync/rpc.h"

#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

static int64_t closed_sent, closed_received;

static int socket_bytes(int fd, int64_t *sent, int64_t *received)
{
    int proto = 0, domain = 0;
    socklen_t n = sizeof proto;
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &n) != 0 || proto != IPPROTO_TCP)
        return -1;
    n = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &n) != 0 ||
        (domain != AF_INET && domain != AF_INET6))
        return -1;
    struct tcp_info ti = {0};
    n = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0)
        return -1;
    *sent = (int64_t)ti.tcpi_bytes_acked;
    *received = (int64_t)ti.tcpi_bytes_received;
    return 0;
}

void rpc_tcp_note_close(int fd)
{
    int64_t s, r;
    if (fd >= 0 && socket_bytes(fd, &s, &r) == 0) {
        __atomic_add_fetch(&closed_sent, s, __ATOMIC_RELAXED);
        __atomic_add_fetch(&closed_received, r, __ATOMIC_RELAXED);
    }
}

void rpc_tcp_bytes(int64_t *sent, int64_t *received)
{
    *sent = __atomic_load_n(&closed_sent, __ATOMIC_RELAXED);
    *received = __atomic_load_n(&closed_received, __ATOMIC_RELAXED);
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    for (struct dirent *x; (x = readdir(d));) {
        char *end;
        long fd = strtol(x->d_name, &end, 10);
        int64_t s, r;
        if (*end || end == x->d_name || fd == dirfd(d) || socket_bytes((int)fd, &s, &r) != 0)
            continue;
        *sent += s;
        *received += r;
    }
    closedir(d);
}
