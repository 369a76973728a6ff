/*
 * dump.c - the SIGUSR1 handler and its watcher thread (see dump.h). A signal handler may only
 * call async-signal-safe functions, so it writes one byte to a pipe; the watcher thread reads
 * it and asks the background thread for the dump. Hvd_init's thread installs and uninstalls.
 */
#include "dump.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "status.h"

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
