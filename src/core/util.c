/* Small shared helpers: error filling, allocation, time, a deterministic
 * PRNG (splitmix64) and logging. Everything here is thread-safe. */
#include "shadowsync/core.h"
#include <sched.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ss_fail(struct ss_err *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ss_vfail(e, code, fmt, ap);
    va_end(ap);
    return code;
}

void *ss_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "shadowsync: out of memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}

void *ss_xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) {
        fprintf(stderr, "shadowsync: out of memory allocating %zu x %zu bytes\n", n, sz);
        abort();
    }
    return p;
}

void *ss_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "shadowsync: out of memory growing a block to %zu bytes\n", n);
        abort();
    }
    return q;
}

void *ss_grown(void *p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return p;
    free(p);
    *cap = n + n / 2;
    return ss_xmalloc(*cap * size);
}

static void *aligned_to(size_t align, size_t n)
{
    size_t sz = n ? (n + align - 1) / align * align : align;
    void *p = aligned_alloc(align, sz);
    if (!p) {
        fprintf(stderr, "shadowsync: out of memory allocating %zu bytes\n", n);
        abort();
    }
    memset(p, 0, sz);
    return p;
}

void *ss_aligned(size_t n)
{
    return aligned_to(64, n);
}

void *ss_pages(size_t n)
{
    return aligned_to((size_t)sysconf(_SC_PAGESIZE), n);
}

/* Memory read at random (embedding tables): from 2 MiB up it is 2 MiB
 * aligned and asks for transparent huge pages, so a random row costs no
 * page walk of its own (this kernel kind runs THP in madvise mode). */
void *ss_alloc_big(size_t n)
{
    const size_t huge = 2u << 20;
    if (n < huge)
        return malloc(n ? n : 1);
    size_t whole = (n + huge - 1) / huge * huge;
    void *p = NULL;
    if (posix_memalign(&p, huge, whole) != 0)
        return NULL;
    madvise(p, whole, MADV_HUGEPAGE); /* advice: a refusal changes nothing */
    return p;
}

/* A number read from the start of a small file; -1 if none. */
static int64_t read_number(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    long long v = -1;
    size_t klen = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f))
        if (!key || !strncmp(line, key, klen)) {
            if (sscanf(line + klen, "%lld", &v) != 1)
                v = -1;
            break;
        }
    fclose(f);
    return v;
}

/* This process's cgroup paths: v2's ("0::PATH"), and v1's of controller
 * (a line "N:...,controller,...:PATH"); "" for the root or none. */
static void cgroup_paths(const char *controller, char v1[1024], char v2[1024])
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return;
    char line[1024];
    size_t cl = strlen(controller);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        const char *path = strcmp(b + 1, "/") ? b + 1 : "";
        if (!strncmp(line, "0::", 3)) {
            snprintf(v2, 1024, "%s", path);
            continue;
        }
        for (char *c = a + 1; c < b; c += strcspn(c, ",:") + 1) /* the controllers listed */
            if (!strncmp(c, controller, cl) && (c[cl] == ',' || c[cl] == ':'))
                snprintf(v1, 1024, "%s", path);
    }
    fclose(f);
}

double ss_host_cores(void)
{
    cpu_set_t set;
    double cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    char v1[1024] = "", v2[1024] = "", path[1400];
    cgroup_paths("cpu", v1, v2);
    for (int v = 0; v < 2; v++) { /* the group and every group above it */
        char *g = v ? v1 : v2;
        for (;;) {
            double q = NAN;
            if (v) {
                snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", g);
                int64_t quota = read_number(path, NULL);
                snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", g);
                int64_t period = read_number(path, NULL);
                if (quota > 0 && period > 0)
                    q = (double)quota / (double)period;
            } else {
                snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", g);
                FILE *f = fopen(path, "r");
                long long quota, period;
                if (f && fscanf(f, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0)
                    q = (double)quota / (double)period;
                if (f)
                    fclose(f);
            }
            if (q < cores)
                cores = q;
            char *slash = strrchr(g, '/');
            if (!slash || !*g)
                break;
            *slash = 0;
        }
    }
    return cores;
}

int64_t ss_mem_available(void)
{
    /* what the kernel could give without killing: free memory and swap */
    int64_t kb = read_number("/proc/meminfo", "MemAvailable:");
    int64_t swap = read_number("/proc/meminfo", "SwapFree:");
    int64_t avail = kb < 0 ? -1 : (kb + (swap > 0 ? swap : 0)) * 1024;
    /* this process's cgroup limit less what the group holds beyond its
     * file cache (reclaimed first): v2 (memory.max, "max" reads as none)
     * or v1's memory controller */
    char v2[1024] = "", v1[1024] = "", path[1300];
    cgroup_paths("memory", v1, v2);
    static const char *const files[2][5] = {
        {"/sys/fs/cgroup", "memory.max", "memory.current", "memory.stat", "file "},
        {"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
         "memory.stat", "total_cache "}};
    for (int v = 0; v < 2; v++) {
        snprintf(path, sizeof path, "%s%s/%s", files[v][0], v ? v1 : v2, files[v][1]);
        int64_t max = read_number(path, NULL);
        snprintf(path, sizeof path, "%s%s/%s", files[v][0], v ? v1 : v2, files[v][2]);
        int64_t cur = read_number(path, NULL);
        snprintf(path, sizeof path, "%s%s/%s", files[v][0], v ? v1 : v2, files[v][3]);
        int64_t cache = read_number(path, files[v][4]);
        if (cur > 0 && cache > 0)
            cur = cache < cur ? cur - cache : 0;
        if (max > 0 && max < (INT64_C(1) << 60) && cur >= 0 && (avail < 0 || max - cur < avail))
            avail = max > cur ? max - cur : 0;
    }
    return avail;
}

int ss_cpu_has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

struct timespec ss_deadline(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (!(seconds < 1e9)) /* a NaN or a wait past any run's length: a far one */
        seconds = 1e9;
    seconds = seconds > 0 ? seconds : 0;
    ts.tv_sec += (time_t)seconds;
    ts.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return ts;
}

double ss_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t ss_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ss_uniform(uint64_t *s)
{
    return (ss_splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
}

double ss_normal(uint64_t *s)
{
    double u = ss_uniform(s), v = ss_uniform(s);
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

void ss_log(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "shadowsync: %s\n", buf);
}

void ss_partition(size_t n, int parts, int p, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)p / (size_t)parts;
    *hi = n * (size_t)(p + 1) / (size_t)parts;
}

int ss_mkdir_p(const char *dir, struct ss_err *e)
{
    size_t n = strlen(dir);
    char *p = ss_xmalloc(n + 1);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) && errno != EEXIST) {
            int rc = ss_fail(e, SS_EIO, "%s: cannot create directory: %s", p, strerror(errno));
            free(p);
            return rc;
        }
        p[i] = c;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return ss_fail(e, SS_EIO, "%s: not a directory", dir);
    return 0;
}

int ss_dir_lock(const char *key, const char *dir, const char *name, struct ss_err *e)
{
    static struct held {
        dev_t dev;
        ino_t ino;
    } held[8]; /* the locks this process holds: taken again, they pass */
    static int n_held;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) /* no room for it (a read-only dir is refused elsewhere): no lock */
        return 0;
    struct stat st;
    int rc = 0;
    pthread_mutex_lock(&mu);
    if (fstat(fd, &st) == 0)
        for (int i = 0; i < n_held; i++)
            if (held[i].dev == st.st_dev && held[i].ino == st.st_ino) {
                close(fd);
                pthread_mutex_unlock(&mu);
                return 0;
            }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) { /* held until this process ends */
        if (n_held < 8)
            held[n_held++] = (struct held){st.st_dev, st.st_ino};
    } else if (errno == EWOULDBLOCK) {
        close(fd);
        rc = ss_fail(e, SS_EINVAL, "%s = %s is in use by another run (its lock, %s, is held): "
                     "give this run another %s", key, dir, p, key);
    } else { /* NFS without lockd, say: said, as a second run would not be refused */
        fprintf(stderr, "shadowsync: note: %s = %s cannot be locked (%s: %s): a second run on "
                "it at once would not be refused\n", key, dir, p, strerror(errno));
        close(fd);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* ---- a graceful stop on a signal (ss_halt_*) -------------------------- */
static int halt_sig; /* the first signal taken, or -1: a peer's stop (atomic: lock-free,
                      * so the handler may set it) */
static int halt_frozen = -2; /* ss_halt_freeze's value of halt_sig; -2: not frozen */
static sigset_t halt_set;    /* the signals the taker waits for */
static int halt_quiet;       /* no note here: another process of the job says it */

void ss_halt_quiet(void)
{
    __atomic_store_n(&halt_quiet, 1, __ATOMIC_SEQ_CST);
}

/* Says once that a signal after the training stops nothing (write(2):
 * async-signal-safe, the handler calls it too). */
static void late_note(int sig)
{
    static int said;
    static const char *const note[3] = {
        "# SIGINT after the training had ended: the run goes on to its end "
        "(a second one: at once), but for a wait on a pipe or a stalled read or write\n",
        "# SIGTERM after the training had ended: the run goes on to its end "
        "(a second one: at once), but for a wait on a pipe or a stalled read or write\n",
        "# SIGUSR1 after the training had ended: the run goes on to its end, but for a "
        "wait on a pipe or a stalled read or write\n"};
    int zero = 0;
    if (__atomic_load_n(&halt_frozen, __ATOMIC_SEQ_CST) != 0 ||
        __atomic_load_n(&halt_quiet, __ATOMIC_SEQ_CST) ||
        !__atomic_compare_exchange_n(&said, &zero, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return;
    const char *m = note[sig == SIGINT ? 0 : sig == SIGTERM ? 1 : 2];
    ssize_t w = write(2, m, strlen(m));
    (void)w;
}

/* Marks the stop; returns 1 unless it was a second SIGINT or SIGTERM,
 * which ends the process at once. */
static int halt_mark(int sig)
{
    int none = 0;
    if (__atomic_compare_exchange_n(&halt_sig, &none, sig, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST) || sig == SIGUSR1) {
        late_note(sig);
        return 1;
    }
    return 0;
}

/* A thread made before the signals were blocked (a library's) may still
 * take one. */
static void on_halt_signal(int sig)
{
    if (halt_mark(sig))
        return;
    signal(sig, SIG_DFL);
    raise(sig); /* delivered once the handler returns */
}

static const char *sig_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGUSR1";
}

static void *halt_taker(void *arg)
{
    (void)arg;
    for (;;) {
        int sig;
        if (sigwait(&halt_set, &sig) != 0 || halt_mark(sig))
            continue;
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        raise(sig);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL); /* the default action: the end */
    }
    return NULL;
}

/* sig marks the stop in whichever thread takes it: a thread made before
 * the signals were blocked (OpenBLAS's) may. */
static void halt_handler(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_halt_signal;
    sigaction(sig, &sa, NULL);
}

void ss_halt_block(void)
{
    halt_handler(SIGUSR1);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
}

void ss_halt_on_signals(int all)
{
    sigemptyset(&halt_set);
    sigaddset(&halt_set, SIGUSR1);
    halt_handler(SIGUSR1);
    if (all) {
        sigaddset(&halt_set, SIGINT);
        sigaddset(&halt_set, SIGTERM);
        halt_handler(SIGINT);
        halt_handler(SIGTERM);
    }
    pthread_sigmask(SIG_BLOCK, &halt_set, NULL); /* and in every thread made from here */
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, halt_taker, NULL) != 0)
        pthread_sigmask(SIG_UNBLOCK, &halt_set, NULL); /* the handler takes them here */
    pthread_attr_destroy(&at);
}

void ss_halt_freeze(void)
{
    __atomic_store_n(&halt_frozen, __atomic_load_n(&halt_sig, __ATOMIC_SEQ_CST), __ATOMIC_SEQ_CST);
}

int ss_halt_signal(void)
{
    int f = __atomic_load_n(&halt_frozen, __ATOMIC_RELAXED);
    return f != -2 ? f : __atomic_load_n(&halt_sig, __ATOMIC_RELAXED);
}

void ss_halt_request(void)
{
    int none = 0;
    __atomic_compare_exchange_n(&halt_sig, &none, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

const char *ss_halt_sig_name(int sig)
{
    return sig == 0 ? NULL : sig < 0 ? "another trainer's stop" : sig_name(sig);
}

const char *ss_halt_name(void)
{
    return ss_halt_sig_name(ss_halt_signal());
}

int ss_halt_raised(void)
{
    return __atomic_load_n(&halt_sig, __ATOMIC_RELAXED);
}

/* A rate as tc and tools/lab write it (100mbit, 1gbit, 2.5gbit, 64kbit,
 * bits a second) into bytes a second; "off" or empty: unshaped. */
int ss_parse_rate(const char *s, double *bytes_s)
{
    if (!s || !*s || !strcmp(s, "off")) {
        *bytes_s = INFINITY;
        return 0;
    }
    char *end;
    double v = strtod(s, &end);
    double unit = !strcmp(end, "bit") ? 1 : !strcmp(end, "kbit") ? 1e3 : !strcmp(end, "mbit") ? 1e6
                : !strcmp(end, "gbit") ? 1e9 : 0;
    if (end == s || !(v > 0) || unit == 0)
        return -1;
    *bytes_s = v * unit / 8;
    return 0;
}
