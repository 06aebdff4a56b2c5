/* The data's blocking calls (a file's open and first bytes, read(2),
 * gzread) run on a thread of the reader's own while the caller waits in
 * steps of PIPE_POLL_MS. A read that never returns (a hung network file
 * system) then cannot hold the caller past a stop: once a signal has come
 * (ss_halt_raised) and the call has waited IO_GIVE_UP_S, the caller gives
 * it up and the reader hands out nothing more, as at its end. A call waited
 * on for PIPE_NOTE_S is named once. The given-up call keeps what it works
 * on (its thread, the reader's buffer and descriptor): io_close then says
 * so, and reader_close leaves the reader to it. */
#include "internal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#define IO_GIVE_UP_S 0.5 /* a call this old when a stop is seen is given up */

static void *io_main(void *arg)
{
    struct io *io = arg;
    sigset_t all; /* a signal for the process must not wait on a thread held in a read */
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

void io_init(struct io *io)
{
    memset(io, 0, sizeof *io);
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->go, NULL);
    pthread_cond_init(&io->done, NULL);
}

int io_call(struct io *io, int (*fn)(void *), void *arg, const char *file)
{
    if (io->stuck) /* (the reader stops at the first: no second) */
        return READ_STOPPED;
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
    pthread_cond_signal(&io->go);
    double t0 = ss_now();
    int said = 0;
    while (io->fn) {
        struct timespec ts = ss_deadline(PIPE_POLL_MS / 1000.0);
        if (pthread_cond_timedwait(&io->done, &io->mu, &ts) == 0 || !io->fn)
            continue;
        double waited = ss_now() - t0;
        if (ss_halt_raised() && waited >= IO_GIVE_UP_S) {
            io->stuck = 1;
            pthread_mutex_unlock(&io->mu);
            fprintf(stderr, "shadowsync: %s: stopped (%s) while a read of it had not returned "
                    "for %.1f s: it is left to its thread, and nothing more is read\n", file,
                    ss_halt_sig_name(ss_halt_raised()), waited);
            return READ_STOPPED;
        }
        if (!said && waited >= PIPE_NOTE_S) {
            said = 1;
            fprintf(stderr, "shadowsync: %s: a read has not returned for %.0f s (a slow or hung "
                    "file system?): waiting for it (SIGINT or SIGTERM stops the wait)\n", file,
                    PIPE_NOTE_S);
        }
    }
    int rc = io->rc;
    pthread_mutex_unlock(&io->mu);
    return rc;
}

int io_close(struct io *io)
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
