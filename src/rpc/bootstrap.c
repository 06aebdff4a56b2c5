/* The cluster job's bootstrap over MPI (DESIGN §2): a launch of N ranks must
 * match the config's role counts; ranks take roles in a fixed order
 * (trainers, embedding PSs, sync PSs, readers); rank 0, the master, makes
 * the job token (16 random bytes) and broadcasts it; every rank's host name
 * is gathered so a lost service can later be named by role, rank and host. */
#include "shadowsync/rpc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

static const char *const role_names[N_ROLES] = {"trainer", "embedding_ps", "sync_ps", "reader"};

const char *rpc_role_name(int role)
{
    return role >= 0 && role < N_ROLES ? role_names[role] : "?";
}

int rpc_role_counts(const struct ss_config *c, int size, int count[N_ROLES], struct ss_err *e)
{
    count[ROLE_TRAINER] = c->job.trainers;
    count[ROLE_EMBEDDING_PS] = c->job.embedding_ps;
    count[ROLE_SYNC_PS] = c->job.sync_ps;
    count[ROLE_READER] = c->job.readers;
    int sum = 0;
    for (int r = 0; r < N_ROLES; r++)
        sum += count[r];
    if (sum != size)
        return ss_fail(e, SS_EINVAL,
                       "mpirun started %d ranks but the config's roles add up to %d "
                       "(job.trainers %d + job.embedding_ps %d + job.sync_ps %d + job.readers %d); "
                       "launch with -np %d or use tools/submit",
                       size, sum, count[0], count[1], count[2], count[3], sum);
    return 0;
}

void rpc_assign_role(const int count[N_ROLES], int rank, int *role, int *index)
{
    int first = 0;
    for (int r = 0; r < N_ROLES; r++) {
        if (rank < first + count[r]) {
            *role = r;
            *index = rank - first;
            return;
        }
        first += count[r];
    }
    *role = -1;
    *index = -1;
}

int rpc_under_mpirun(void)
{
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    return n && atoi(n) > 1;
}

/* 32 hex digits from /dev/urandom (rank 0 only). */
static int make_token(char out[33], struct ss_err *e)
{
    unsigned char raw[16];
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw) {
        if (fd >= 0)
            close(fd);
        return ss_fail(e, SS_EIO, "cannot read /dev/urandom for the job token");
    }
    close(fd);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

static int interface_address(const char *spec, char out[64], char *why, size_t cap);

int rpc_bootstrap(struct job_plan *p, const struct ss_config *c, struct ss_err *e)
{
    memset(p, 0, sizeof *p);
    p->trainers = MPI_COMM_NULL;
    /* Open MPI's own TCP traffic on the same interface or network, unless
     * the launch says otherwise (its default leaves out 127.0.0.0/8,
     * which a lab of hosts on one machine uses) */
    const char *iface = c->job.interface;
    char a[64], why[256];
    if (iface && *iface && !getenv("OMPI_MCA_btl_tcp_if_include") &&
        !getenv("OMPI_MCA_btl_tcp_if_exclude") && interface_address(iface, a, why, sizeof why) == 0)
        setenv("OMPI_MCA_btl_tcp_if_include", iface, 0); /* (a rank without: rpc_check_bind) */
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &p->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p->size);
    if (provided < MPI_THREAD_MULTIPLE)
        return ss_fail(e, SS_ESTATE, "MPI grants thread level %d, shadowsync needs MULTIPLE",
                       provided);
    int rc = rpc_role_counts(c, p->size, p->count, e);
    if (rc < 0)
        return rc;
    rpc_assign_role(p->count, p->rank, &p->role, &p->role_index);
    MPI_Comm_split(MPI_COMM_WORLD, p->role == ROLE_TRAINER ? 0 : MPI_UNDEFINED, p->rank,
                   &p->trainers);
    int ok = 1;
    if (p->rank == 0 && make_token(p->token, e) < 0)
        ok = 0;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok)
        return p->rank == 0 ? SS_EIO : ss_fail(e, SS_EIO, "the master could not make a job token");
    MPI_Bcast(p->token, sizeof p->token, MPI_CHAR, 0, MPI_COMM_WORLD);
    char me[64] = {0};
    gethostname(me, sizeof me - 1);
    p->hosts = ss_xcalloc(p->size, sizeof *p->hosts);
    MPI_Allgather(me, 64, MPI_CHAR, p->hosts, 64, MPI_CHAR, MPI_COMM_WORLD);
    return 0;
}

/* MPI_Finalize waits for every rank (Open MPI's PMIx fence), so a rank
 * stalled at the job's end would hang the job for good: past twice
 * p->end_wait_s (the master's wait for the figures and its last writes
 * fit in it) a stall guard ends it. */
void rpc_finalize(struct job_plan *p)
{
    stall_guard_disarm(p->start_guard); /* a rank that left before its role */
    p->start_guard = NULL;
    rpc_pulse_free(p->pulse);
    p->pulse = NULL;
    if (p->trainers != MPI_COMM_NULL)
        MPI_Comm_free(&p->trainers);
    char msg[512] = "", me[128];
    if (p->hosts) {
        rpc_rank_name(p, p->rank, me, sizeof me);
        snprintf(msg, sizeof msg, "%s: MPI_Finalize has not finished in %g s (4 x "
                 "sync.timeout_s): another rank has stalled at the job's end (the master's "
                 "lines above say what was written); ending the job", me, 2 * p->end_wait_s);
    }
    free(p->hosts);
    p->hosts = NULL;
    free(p->addrs);
    p->addrs = NULL;
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) {
        struct stall_guard *g = *msg ? stall_guard_arm(2 * p->end_wait_s, msg) : NULL;
        MPI_Finalize();
        stall_guard_disarm(g);
    }
}

int rpc_multi_host(const struct job_plan *p)
{
    if (p->multi_host)
        return 1;
    for (int r = 1; p->hosts && r < p->size; r++)
        if (strcmp(p->hosts[r], p->hosts[0]))
            return 1;
    return 0;
}

static int unreachable(const char *addr)
{
    return !strncmp(addr, "127.", 4) || !strcmp(addr, "0.0.0.0");
}

/* "lo 127.0.0.1, eth0 10.0.0.2" (loopback too: with_lo), this rank's up
 * IPv4 addresses in the order the kernel lists them. */
static void list_addresses(int with_lo, char *out, size_t cap)
{
    struct ifaddrs *ifs = NULL;
    *out = 0;
    if (getifaddrs(&ifs) != 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (!with_lo && (i->ifa_flags & IFF_LOOPBACK)))
            continue;
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof a);
        size_t k = strlen(out);
        snprintf(out + k, cap - k, "%s%s %s", k ? ", " : "", i->ifa_name, a);
    }
    freeifaddrs(ifs);
}

/* job.interface as a CIDR ("10.1.0.0/16": 1, net and mask set), a name
 * (0), or neither (-1). */
static int parse_cidr(const char *spec, uint32_t *net, uint32_t *mask)
{
    const char *slash = strchr(spec, '/');
    if (!slash)
        return 0;
    char a[32];
    char *end;
    long bits = strtol(slash + 1, &end, 10);
    if ((size_t)(slash - spec) >= sizeof a || slash[1] == 0 || *end || bits < 0 || bits > 32)
        return -1;
    memcpy(a, spec, (size_t)(slash - spec));
    a[slash - spec] = 0;
    struct in_addr in;
    if (inet_pton(AF_INET, a, &in) != 1)
        return -1;
    *mask = bits ? htonl(~0u << (32 - bits)) : 0;
    *net = in.s_addr & *mask;
    return 1;
}

/* job.interface's address on this rank: the interface's first IPv4
 * address, or the first of this rank's that lies in the CIDR. */
static int interface_address(const char *spec, char out[64], char *why, size_t cap)
{
    uint32_t net = 0, mask = 0;
    int cidr = parse_cidr(spec, &net, &mask);
    struct ifaddrs *ifs = NULL;
    if (cidr < 0) {
        snprintf(why, cap, "is no IPv4 network");
        return -1;
    }
    if (getifaddrs(&ifs) != 0) {
        snprintf(why, cap, "cannot list its interfaces (getifaddrs)");
        return -1;
    }
    int found = 0, named = 0;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        named |= !cidr && !strcmp(i->ifa_name, spec);
        if (cidr ? (a.s_addr & mask) == net : !strcmp(i->ifa_name, spec)) {
            inet_ntop(AF_INET, &a, out, 64);
            found = 1;
        }
    }
    freeifaddrs(ifs);
    if (found)
        return 0;
    char all[160];
    list_addresses(1, all, sizeof all);
    snprintf(why, cap, "%s (its up IPv4 addresses: %s)", cidr ? "has no address in it" :
             named ? "has no IPv4 address on it" : "has no such interface up", *all ? all : "none");
    return -1;
}

/* This rank's address: p->addrs' (rpc_check_bind), job.bind, or the loopback. */
static void rank_address(const struct ss_config *c, const struct job_plan *p, char host[64])
{
    if (p && p->addrs)
        snprintf(host, 64, "%s", p->addrs[p->rank]);
    else if (c->job.bind && *c->job.bind)
        snprintf(host, 64, "%s", c->job.bind);
    else
        snprintf(host, 64, "127.0.0.1");
}

/* The speed the kernel reports for the interface that holds addr
 * (/sys/class/net/IF/speed, Mbit/s), in bytes/s; 0 where there is none
 * (a loopback, an interface that reports -1 or nothing), its name in dev. */
static double interface_speed(const char *addr, char dev[IF_NAMESIZE + 1])
{
    struct in_addr want;
    struct ifaddrs *ifs = NULL;
    *dev = 0;
    if (inet_pton(AF_INET, addr, &want) != 1 || getifaddrs(&ifs) != 0)
        return 0;
    int lo = 0;
    for (struct ifaddrs *i = ifs; i && !*dev; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == want.s_addr) {
            snprintf(dev, IF_NAMESIZE + 1, "%s", i->ifa_name);
            lo = !!(i->ifa_flags & IFF_LOOPBACK);
        }
    freeifaddrs(ifs);
    char path[64], text[32] = "";
    snprintf(path, sizeof path, "/sys/class/net/%s/speed", dev);
    FILE *f = *dev && !lo ? fopen(path, "r") : NULL;
    if (f && !fgets(text, sizeof text, f))
        *text = 0;
    if (f)
        fclose(f);
    long mbit = atol(text);
    return mbit > 0 ? mbit * 1e6 / 8 : 0;
}

double rpc_link_pace(const struct ss_config *c, const struct job_plan *p, char *how, size_t cap)
{
    double share = c->sync.link_share, rate = 0;
    char dev[IF_NAMESIZE + 1] = "", addr[64];
    const char *r = c->job.link_rate;
    rank_address(c, p, addr);
    if (!strcmp(r, "auto"))
        rate = interface_speed(addr, dev);
    else if (ss_parse_rate(r, &rate) < 0 || isinf(rate))
        rate = 0;
    if (!(share > 0) || !(rate > 0)) {
        snprintf(how, cap, "unpaced (%s)", !(share > 0) ? "sync.link_share = 0"
                 : strcmp(r, "auto") ? "job.link_rate = off"
                 : *dev ? "job.link_rate = auto: its interface reports no speed"
                        : "job.link_rate = auto: no interface holds its address");
        return 0;
    }
    char src[96];
    if (*dev)
        snprintf(src, sizeof src, "%s's %.0f Mbit/s", dev, rate * 8 / 1e6);
    else
        snprintf(src, sizeof src, "job.link_rate = %s", r);
    snprintf(how, cap, "paced to %.0f Mbit/s (sync.link_share %g of %s)", share * rate * 8 / 1e6,
             share, src);
    return share * rate;
}

/* The rule without job.bind or job.interface: the host's name's address;
 * where that is a loopback one (Debian's 127.0.1.1, or no address) and the
 * ranks run on several hosts, the first up interface's that is not a
 * loopback; else 127.0.0.1 (one host). */
static void host_address(const struct job_plan *p, char out[64])
{
    snprintf(out, 64, "127.0.0.1");
    char host[256] = {0};
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (gethostname(host, sizeof host - 1) == 0 && getaddrinfo(host, NULL, &hints, &res) == 0 &&
        res) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, out, 64);
        freeaddrinfo(res);
    }
    struct ifaddrs *ifs = NULL;
    if (!unreachable(out) || !rpc_multi_host(p) || getifaddrs(&ifs) != 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, 64);
            break;
        }
    freeifaddrs(ifs);
}

static void list_hosts(const struct job_plan *p, char *hosts, size_t cap, int *n)
{
    *n = 0;
    *hosts = 0;
    for (int r = 0; r < p->size; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = !strcmp(p->hosts[q], p->hosts[r]);
        if (!seen && (*n)++ < 4) {
            size_t k = strlen(hosts);
            snprintf(hosts + k, cap - k, "%s%s", k ? ", " : "", p->hosts[r]);
        }
    }
}

/* Which address each rank's services take (collective): every rank's
 * non-loopback addresses are gathered too, so ranks that share a host
 * name but not a network (namespaces, or hosts named alike) count as
 * several hosts. */
static int resolve_addresses(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    enum { REC = 256 };
    char mine[REC] = {0};
    list_addresses(0, mine, sizeof mine);
    char *all = ss_xcalloc(p->size, REC);
    MPI_Allgather(mine, REC, MPI_CHAR, all, REC, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 1; r < p->size; r++)
        p->multi_host |= strcmp(all + (size_t)r * REC, all) != 0;
    const char *iface = c->job.interface;
    char rec[REC] = {0}; /* "+ADDRESS", or "-why" */
    if (c->job.bind && *c->job.bind) {
        snprintf(rec, sizeof rec, "+%s", c->job.bind);
    } else if (iface && *iface) {
        char why[REC - 1];
        rec[0] = interface_address(iface, rec + 1, why, sizeof why) == 0 ? '+' : '-';
        if (rec[0] == '-')
            snprintf(rec + 1, sizeof rec - 1, "%s", why);
    } else {
        rec[0] = '+';
        host_address(p, rec + 1);
    }
    MPI_Allgather(rec, REC, MPI_CHAR, all, REC, MPI_CHAR, MPI_COMM_WORLD);
    p->addrs = ss_xcalloc(p->size, sizeof *p->addrs);
    int bad = -1, n_bad = 0;
    for (int r = 0; r < p->size; r++) {
        const char *x = all + (size_t)r * REC;
        if (x[0] == '+')
            snprintf(p->addrs[r], sizeof p->addrs[r], "%s", x + 1);
        else if (n_bad++ == 0)
            bad = r;
    }
    int rc = 0;
    if (bad >= 0) {
        char who[128];
        rpc_rank_name(p, bad, who, sizeof who);
        char more[48] = "";
        if (n_bad > 1)
            snprintf(more, sizeof more, "; %d other rank%s too", n_bad - 1, n_bad > 2 ? "s" : "");
        rc = ss_fail(e, SS_EINVAL, "job.interface = %s: %s %s%s", iface, who,
                     all + (size_t)bad * REC + 1, more);
    }
    free(all);
    return rc;
}

int rpc_address_keys_ok(const struct ss_config *c, struct ss_err *e)
{
    struct in_addr a;
    const char *iface = c->job.interface;
    uint32_t net, mask;
    if (c->job.bind && *c->job.bind && inet_pton(AF_INET, c->job.bind, &a) != 1)
        return ss_fail(e, SS_EINVAL, "job.bind = %s is not an IPv4 address (services bind to "
                       "one, e.g. 127.0.0.1; empty: each host's own)", c->job.bind);
    if (iface && *iface && c->job.bind && *c->job.bind)
        return ss_fail(e, SS_EINVAL, "job.bind = %s and job.interface = %s: set one (job.bind: "
                       "one address for every rank; job.interface: each rank's own address on "
                       "that interface or network)", c->job.bind, iface);
    if (iface && *iface && (parse_cidr(iface, &net, &mask) < 0 || strlen(iface) >= IFNAMSIZ))
        return ss_fail(e, SS_EINVAL, "job.interface = %s is neither an interface name (as `ip "
                       "addr` lists them, e.g. eth0) nor an IPv4 network (e.g. 10.1.0.0/16)",
                       iface);
    return 0;
}

int rpc_check_bind(const struct ss_config *c, struct job_plan *p, struct ss_err *e)
{
    int rc = rpc_address_keys_ok(c, e);
    if (rc == 0)
        rc = resolve_addresses(c, p, e);
    if (rc < 0 || !c->job.bind || !*c->job.bind || !unreachable(c->job.bind) ||
        !rpc_multi_host(p))
        return rc;
    char hosts[256];
    int n;
    list_hosts(p, hosts, sizeof hosts, &n);
    char where[320];
    if (n > 1)
        snprintf(where, sizeof where, "%d hosts (%s%s)", n, hosts, n > 4 ? ", ..." : "");
    else
        snprintf(where, sizeof where, "hosts named alike (%s) whose addresses differ", hosts);
    return ss_fail(e, SS_EINVAL, "job.bind = %s: the ranks run on %s, and a service announced "
                   "at %s is out of the others' reach; leave job.bind empty (each host's own "
                   "address) or set job.interface", c->job.bind, where, c->job.bind);
}

int rpc_role_server(struct rpc_server **out, const struct ss_config *c, const struct job_plan *p,
                    ThriftProcessor *proc, size_t max_message, char host[64], struct ss_err *e)
{
    rank_address(c, p, host);
    char name[160];
    rpc_rank_name(p, p->rank, name, sizeof name);
    struct rpc_guard g = {name, p->token, c->job.rpc_timeout_s, max_message, 0};
    return rpc_server_start_guarded(out, host, 0, proc, &g, e);
}

void rpc_exchange_endpoints(struct job_plan *p, const struct endpoint *mine, struct endpoint *all)
{
    MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE,
                  MPI_COMM_WORLD);
    (void)p;
}

void rpc_started(struct job_plan *p)
{
    stall_guard_disarm(p->start_guard);
    p->start_guard = NULL;
    rpc_pulse_start(p->pulse);
}

void rpc_wait_job_end(struct job_plan *p)
{
    MPI_Request req;
    rpc_started(p); /* a service's role: from here */
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    const struct timespec pause = {0, 1000000};
    for (int done = 0; !done;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done)
            nanosleep(&pause, NULL);
    }
    /* the heartbeat goes on: a rank stopped inside the barrier lets some
     * ranks out of it and holds others, who still listen for it */
    ss_io_end(); /* a save still under way (a service's, on a hung disk) waits for nobody */
}

void rpc_announce(struct job_plan *p, struct endpoint *mine, struct rpc_server *srv,
                  struct endpoint *all)
{
    mine->port = srv ? rpc_server_port(srv) : -1;
    rpc_exchange_endpoints(p, mine, all);
}

/* Every rank's figures to rank 0, the heartbeat still going: past
 * p->end_wait_s the master names every rank whose figures are missing (one
 * has stalled, or waits on one that has). */
static void gather_figures(struct job_plan *p, double *all)
{
    enum { TAG_FIGURES = 7001 };
    if (p->rank != 0) {
        MPI_Send(p->figures, ROLE_FIGURES, MPI_DOUBLE, 0, TAG_FIGURES, MPI_COMM_WORLD);
        return;
    }
    memcpy(all, p->figures, sizeof p->figures);
    MPI_Request *req = ss_xcalloc(p->size, sizeof *req);
    req[0] = MPI_REQUEST_NULL;
    for (int r = 1; r < p->size; r++)
        MPI_Irecv(all + (size_t)r * ROLE_FIGURES, ROLE_FIGURES, MPI_DOUBLE, r, TAG_FIGURES,
                  MPI_COMM_WORLD, &req[r]);
    double deadline = p->end_wait_s > 0 ? ss_now() + p->end_wait_s : 0;
    const struct timespec pause = {0, 1000000};
    for (int waiting = 1; waiting;) {
        waiting = 0;
        for (int r = 1; r < p->size; r++) {
            int done = 1;
            if (req[r] != MPI_REQUEST_NULL)
                MPI_Test(&req[r], &done, MPI_STATUS_IGNORE);
            waiting += !done;
        }
        if (waiting && deadline && ss_now() > deadline) {
            char me[128], who[1024] = "", one[128];
            rpc_rank_name(p, 0, me, sizeof me);
            for (int r = 1, k = 0; r < p->size; r++)
                if (req[r] != MPI_REQUEST_NULL && k++ < 6) {
                    rpc_rank_name(p, r, one, sizeof one);
                    snprintf(who + strlen(who), sizeof who - strlen(who), "%s%s", *who ? ", " : "",
                             one);
                }
            fprintf(stderr, "shadowsync: %s: the job's end has waited %g s (twice "
                    "sync.timeout_s) for the figures of %s%s: %s stalled, or %s on one that "
                    "has; ending the job\n", me, p->end_wait_s, who, waiting > 6 ? ", ..." : "",
                    waiting > 1 ? "one has" : "it has", waiting > 1 ? "they wait" : "waits");
            job_abort();
        }
        if (waiting)
            nanosleep(&pause, NULL);
    }
    free(req);
}

/* The bytes each role's ranks sent and received over TCP, said and added
 * to the master's metrics.json (written by then) as tcp_bytes_sent_ROLE
 * and tcp_bytes_received_ROLE. */
static void tcp_bytes_by_role(const struct job_plan *p, const double *all, const char *dir)
{
    double sum[N_ROLES][2] = {{0}};
    for (int r = 0; r < p->size; r++) {
        int role, idx;
        rpc_assign_role(p->count, r, &role, &idx);
        sum[role][0] += all[(size_t)r * ROLE_FIGURES + 10];
        sum[role][1] += all[(size_t)r * ROLE_FIGURES + 11];
    }
    char line[512] = "# bytes over TCP, sent / received:", keys[1024] = "";
    for (int r = 0; r < N_ROLES; r++) {
        if (!p->count[r])
            continue;
        size_t k = strlen(line);
        snprintf(line + k, sizeof line - k, "%s %s %.1f / %.1f MB (%d rank%s)",
                 k > 35 ? "," : "", rpc_role_name(r), sum[r][0] / 1e6, sum[r][1] / 1e6,
                 p->count[r], p->count[r] > 1 ? "s" : "");
        k = strlen(keys);
        snprintf(keys + k, sizeof keys - k, ",\n  \"tcp_bytes_sent_%s\": %.0f,\n  "
                 "\"tcp_bytes_received_%s\": %.0f", rpc_role_name(r), sum[r][0],
                 rpc_role_name(r), sum[r][1]);
    }
    printf("%s\n", line);
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    gchar *text = NULL;
    gsize len = 0;
    if (!g_file_get_contents(path, &text, &len, NULL))
        return; /* (a run that wrote none: a failed eval's, say) */
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
        len--;
    if (len && text[len - 1] == '}') {
        while (len > 1 && (text[len - 2] == '\n' || text[len - 2] == ' '))
            len--; /* "...last\n}" -> "...last" + keys + "\n}" */
        GString *g = g_string_new_len(text, (gssize)len - 1);
        g_string_append_printf(g, "%s\n}\n", keys);
        struct ss_span whole = {g->str, g->len};
        struct ss_err e = {0};
        if (ss_write_file(path, &whole, 1, 0, g_string_free(g, FALSE), &e) < 0)
            fprintf(stderr, "shadowsync: warning: %s\n", e.msg);
    }
    g_free(text);
}

void rpc_report_roles(struct job_plan *p, const char *dir)
{
    double *all = p->rank == 0 ? ss_xcalloc((size_t)p->size * ROLE_FIGURES, sizeof(double)) : NULL;
    int64_t sent, received;
    rpc_tcp_bytes(&sent, &received);
    p->figures[10] = (double)sent, p->figures[11] = (double)received;
    gather_figures(p, all);
    if (p->rank != 0)
        return;
    tcp_bytes_by_role(p, all, dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/roles.json", dir);
    FILE *f = fopen(path, "w");
    if (f)
        fprintf(f, "{\"ranks\": [\n");
    for (int r = 0; r < p->size; r++) {
        int role, idx;
        rpc_assign_role(p->count, r, &role, &idx);
        const double *v = all + (size_t)r * ROLE_FIGURES;
        char extra[512] = "";
        if (role == ROLE_READER) {
            double s = v[4] > 0 ? v[4] : 1;
            printf("# reader %d (rank %d on %s): batches served %.0f (%.0f/s) examples %.0f "
                   "bad lines %.0f refused %.0f\n", idx, r, p->hosts[r], v[0], v[0] / s, v[1],
                   v[2], v[3]);
            snprintf(extra, sizeof extra, ", \"batches_served\": %.0f, \"batches_per_s\": %.1f, "
                     "\"examples\": %.0f, \"bad_lines\": %.0f, \"refused\": %.0f", v[0], v[0] / s,
                     v[1], v[2], v[3]);
        } else if (role == ROLE_EMBEDDING_PS) {
            double s = v[5] > 0 ? v[5] : 1;
            char rows[96] = ""; /* the embedding caches' calls, when there were any */
            if (v[8] > 0)
                snprintf(rows, sizeof rows, " rows calls %.0f rows sent %.0f", v[8], v[9]);
            printf("# embedding_ps %d (rank %d on %s): lookups %.0f (%.0f/s) pushes %.0f "
                   "refused %.0f in %.1f MB out %.1f MB busy %.2f s load %.2f s%s\n", idx, r,
                   p->hosts[r], v[0], v[0] / s, v[1], v[2], v[3] / 1e6, v[4] / 1e6, v[6], v[7],
                   rows);
            snprintf(extra, sizeof extra, ", \"lookups\": %.0f, \"lookups_per_s\": %.1f, "
                     "\"pushes\": %.0f, \"refused\": %.0f, \"bytes_in\": %.0f, "
                     "\"bytes_out\": %.0f, \"busy_s\": %.4f, \"load_s\": %.4f, "
                     "\"rows_calls\": %.0f, \"rows_sent\": %.0f", v[0], v[0] / s, v[1], v[2],
                     v[3], v[4], v[6], v[7], v[8], v[9]);
        } else if (role == ROLE_TRAINER) {
            char clock[96] = ""; /* a schedule's clock (optim.*), when one is set */
            if (v[1] > 0)
                snprintf(clock, sizeof clock, ", its last batch at the job's example %.0f on the "
                         "rates' clock", v[1]);
            printf("# trainer %d (rank %d on %s): examples %.0f%s\n", idx, r, p->hosts[r], v[0],
                   clock);
            snprintf(extra, sizeof extra, ", \"examples\": %.0f, \"lr_clock\": %.0f", v[0], v[1]);
        } else if (role == ROLE_SYNC_PS) {
            double s = v[2] > 0 ? v[2] : 1;
            printf("# sync_ps %d (rank %d on %s): syncs served %.0f (%.1f/s) center reads %.0f "
                   "refused %.0f\n", idx, r, p->hosts[r], v[0], v[0] / s, v[3], v[1]);
            snprintf(extra, sizeof extra, ", \"syncs_served\": %.0f, \"syncs_per_s\": %.2f, "
                     "\"center_reads\": %.0f, \"refused\": %.0f", v[0], v[0] / s, v[3], v[1]);
        }
        if (f)
            fprintf(f, "  {\"rank\": %d, \"role\": \"%s\", \"index\": %d, \"host\": \"%s\", "
                    "\"address\": \"%s\", \"tcp_bytes_sent\": %.0f, \"tcp_bytes_received\": %.0f%s}%s\n",
                    r, rpc_role_name(role), idx, p->hosts[r], p->addrs ? p->addrs[r] : "", v[10],
                    v[11], extra, r + 1 < p->size ? "," : "");
    }
    if (f) {
        fprintf(f, "]}\n");
        fclose(f);
    }
    fflush(stdout);
    free(all);
}
