/*
 * dump.c - the SIGUSR1 handler and its watcher thread (see dump.h). A signal handler may only
 * call async-signal-safe functions, so it writes one byte to a pipe; the watcher thread reads
 * it and asks the background thread for the dump, which prints it (hvdc__dump_state) between two
 * steps of its work. Hvd_init's thread installs and uninstalls; the background thread prints.
 */
#include "runtime/dump.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/dtype.h"
#include "base/status.h"
#include "runtime/round.h"
#include "runtime/whereabouts.h"

static int pipe_fds[2] = {-1, -1};
static pthread_t watcher;
static int installed = 0;
static struct sigaction previous;
static atomic_int *dump_requested;
static void (*wake_background)(void *ctx);
static void *wake_ctx;

static void on_sigusr1(int sig) {
    (void)sig;
    int saved = errno;
    char byte = 'd';
    if (write(pipe_fds[1], &byte, 1) < 0) { /* nothing safe to do */ }
    errno = saved;
}

static void *watch(void *arg) {
    (void)arg;
    char byte;
    while (read(pipe_fds[0], &byte, 1) == 1 && byte == 'd') {
        atomic_store(dump_requested, 1);
        wake_background(wake_ctx);
    }
    return NULL;
}

hvd_status hvdc__dump_install(atomic_int *requested, void (*wake)(void *ctx), void *ctx) {
    struct sigaction current;
    if (sigaction(SIGUSR1, NULL, &current) != 0 || current.sa_handler != SIG_DFL) return HVD_OK;
    if (pipe(pipe_fds) != 0) return HVD_OK; /* a debugging aid: never fail init for it */
    fcntl(pipe_fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(pipe_fds[1], F_SETFD, FD_CLOEXEC);
    dump_requested = requested;
    wake_background = wake;
    wake_ctx = ctx;
    if (pthread_create(&watcher, NULL, watch, NULL) != 0) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        pipe_fds[0] = pipe_fds[1] = -1;
        return HVD_OK;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigusr1;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, &previous);
    installed = 1;
    return HVD_OK;
}

void hvdc__dump_uninstall(void) {
    if (!installed) return;
    sigaction(SIGUSR1, &previous, NULL);
    char quit = 'q';
    if (write(pipe_fds[1], &quit, 1) == 1) pthread_join(watcher, NULL);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    pipe_fds[0] = pipe_fds[1] = -1;
    installed = 0;
}

/* ---- the dump itself: printed by the background thread, which owns the state ---- */

/* SIGUSR1: print what this rank has queued, what it waits for, and on rank 0 which names
 * wait for which ranks. */
static void print_op(char *line, size_t len, size_t *at, const hvdc_op *op) {
    if (*at + 80 < len)
        *at += (size_t)snprintf(line + *at, len - *at, " %s(%s %s x%llu)", op->desc.name,
                                hvdc__kind_name(op->desc.kind), hvdc__dtype_name(op->desc.dtype),
                                (unsigned long long)(op->desc.n_counts ? op->desc.counts[0] : 0));
}

typedef struct dump_scan {
    char queued[2048], announced[2048];
    size_t at_queued, at_announced, n_queued, n_announced;
    const hvdc_op *last; /* grouped ops appear once per member name */
} dump_scan;

static void dump_op(void *value, void *ctx) {
    dump_scan *d = ctx;
    const hvdc_op *op = value;
    if (op == d->last) return;
    d->last = op;
    if (op->announced) {
        d->n_announced++;
        print_op(d->announced, sizeof d->announced, &d->at_announced, op);
    } else {
        d->n_queued++;
        print_op(d->queued, sizeof d->queued, &d->at_queued, op);
    }
}

void hvdc__dump_state(round_state *s, const char *doing) {
    hvdc_runtime *rt = s->rt;
    dump_scan d = {.at_queued = 0};
    pthread_mutex_lock(&rt->queue_mutex);
    hvdc__name_table_each(&rt->in_flight, dump_op, &d);
    pthread_mutex_unlock(&rt->queue_mutex);
    fprintf(stderr, "[hvdc rank %d] state dump (SIGUSR1) while %s\n"
            "[hvdc rank %d]   %zu submitted, not yet announced:%s\n"
            "[hvdc rank %d]   %zu announced to rank 0, not yet executed:%s\n",
            rt->topo.rank, doing, rt->topo.rank, d.n_queued, d.queued, rt->topo.rank,
            d.n_announced, d.announced);
    if (s->exchange.negotiator) {
        char report[1200];
        double oldest = 0;
        size_t n = hvdc__negotiator_report_stalls(s->exchange.negotiator, hvdc__now_seconds(), 0, report,
                                                  sizeof report, &oldest);
        fprintf(stderr, "[hvdc rank 0]   coordinator: %zu names wait for other ranks%s%s\n", n,
                n ? ":\n" : "", report);
    }
    char indent[32], where[12288];
    snprintf(indent, sizeof indent, "[hvdc rank %d]   ", rt->topo.rank);
    hvdc__whereabouts_write(rt, indent, where, sizeof where);
    fprintf(stderr, "%s\n", where);
}

