/*
 * whereabouts.c - this rank's whereabouts and the thread dump the binding registers (see
 * whereabouts.h). The dump is taken by raising the registered signal on the calling thread:
 * the handler (faulthandler's) runs there, before pthread_kill returns, writes every thread's
 * stack to the registered file, and the text is read back from its start.
 */
#include "runtime/whereabouts.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/status.h"

static pthread_mutex_t dump_mutex = PTHREAD_MUTEX_INITIALIZER;
static int dump_signal = -1, dump_fd = -1; /* under dump_mutex */

hvd_status hvd_set_thread_dump(int signum, int fd) {
    hvdc__clear_error();
    if ((signum < 0) != (fd < 0) || signum == 0 || signum >= NSIG || signum == SIGKILL ||
        signum == SIGSTOP)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_set_thread_dump: signal %d and file "
                          "descriptor %d: give a catchable signal (1..%d, not SIGKILL or "
                          "SIGSTOP) and an open file, or -1 and -1 for none", signum, fd,
                          NSIG - 1);
    pthread_mutex_lock(&dump_mutex);
    dump_signal = signum;
    dump_fd = fd;
    pthread_mutex_unlock(&dump_mutex);
    return HVD_OK;
}

/* Every thread's stack from the registered dump, indented, into out; "" when none. */
static size_t write_thread_dump(const char *indent, char *out, size_t len) {
    size_t used = 0;
    pthread_mutex_lock(&dump_mutex);
    if (dump_signal > 0 && ftruncate(dump_fd, 0) == 0 && lseek(dump_fd, 0, SEEK_SET) == 0) {
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, dump_signal);
        pthread_sigmask(SIG_UNBLOCK, &only, NULL); /* delivered here, before pthread_kill returns */
        pthread_kill(pthread_self(), dump_signal);
        char text[8192];
        ssize_t n = pread(dump_fd, text, sizeof text - 1, 0);
        text[n > 0 ? n : 0] = '\0';
        used = (size_t)snprintf(out, len, "%sthreads (Python stacks, most recent call first):",
                                indent);
        char *rest = NULL;
        for (char *line = strtok_r(text, "\n", &rest); line && used < len;
             line = strtok_r(NULL, "\n", &rest))
            used += (size_t)snprintf(out + used, len - used, "\n%s  %s", indent, line);
        if (n >= (ssize_t)sizeof text - 1 && used < len)
            used += (size_t)snprintf(out + used, len - used, "\n%s  ... (cut)", indent);
    }
    pthread_mutex_unlock(&dump_mutex);
    return used < len ? used : len - 1;
}

void hvdc__whereabouts_write(hvdc_runtime *rt, const char *indent, char *out, size_t len) {
    char name[HVD_MAX_NAME_LEN + 1];
    pthread_mutex_lock(&rt->queue_mutex);
    snprintf(name, sizeof name, "%s", rt->last_submitted);
    int64_t at = rt->last_submitted_ns;
    size_t in_flight = rt->in_flight.count;
    pthread_mutex_unlock(&rt->queue_mutex);
    size_t used;
    if (name[0])
        used = (size_t)snprintf(out, len, "%slast submitted '%s' %.1f s ago; %zu names in flight",
                                indent, name, (double)(hvdc__now_ns() - at) * 1e-9, in_flight);
    else
        used = (size_t)snprintf(out, len, "%ssubmitted nothing yet", indent);
    if (used + 2 >= len) return;
    out[used++] = '\n';
    out[used] = '\0';
    if (write_thread_dump(indent, out + used, len - used) == 0)
        snprintf(out + used, len - used, "%sthreads: not known (a C program, or the binding "
                 "registered no thread dump: hvd_set_thread_dump)", indent);
}
