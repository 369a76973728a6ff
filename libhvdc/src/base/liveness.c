/*
 * liveness.c - pid watch of the node's ranks and the failure notice (see liveness.h).
 * Background thread, and a caller running its own op (creation: the hvd_init thread).
 */
#include "base/liveness.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/nodes.h"
#include "base/status.h"
#include "base/tags.h"
#include "base/tell.h"

enum { NOTICE_MAX = 512 };
/* how long a rank whose neighbour's process is gone looks for a notice first (costs that long
 * only once a neighbour is gone) */
#define NOTICE_BEHIND_EXIT_S (HVDC_LIVENESS_PERIOD_S / 5)
_Static_assert(NOTICE_MAX <= HVDC_TELL_MAX, "a notice must fit what hvdc__tell_others sends");

struct hvdc_liveness {
    MPI_Comm comm;
    int rank, size;
    int n_local;
    int *local_ranks; /* (n_local) ranks in comm on this node */
    int *local_pids;  /* (n_local) */
    double next_check;
    const hvdc_poll_policy *poll; /* how waits pause between polls */
    hvd_status failed;
    char message[NOTICE_MAX];
    pthread_mutex_t lock; /* the checks' state: a caller running its own op checks too */
};

/* The process-wide declaration (hvdc__liveness_declare): its text is written once, by the
 * declarer that won `declaring`, before `declared` publishes it. */
static atomic_int declaring, declared;
static char declared_why[NOTICE_MAX];

void hvdc__liveness_declare(const char *why) {
    if (atomic_exchange(&declaring, 1)) return;
    snprintf(declared_why, sizeof declared_why, "%s", why);
    atomic_store_explicit(&declared, 1, memory_order_release);
}

int hvdc__liveness_declared(char *why, size_t len) {
    if (!atomic_load_explicit(&declared, memory_order_acquire)) return 0;
    if (why && len) snprintf(why, len, "%s", declared_why);
    return 1;
}

void hvdc__liveness_forget_declared(void) {
    atomic_store(&declared, 0);
    atomic_store(&declaring, 0);
}

hvd_status hvdc__liveness_create(MPI_Comm comm, hvdc_liveness **out) {
    hvd_status st = HVD_OK;
    MPI_Comm node = MPI_COMM_NULL;
    hvdc_liveness *l = calloc(1, sizeof *l);
    if (!l) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the liveness watch");
    pthread_mutex_init(&l->lock, NULL);
    l->comm = comm;
    CHECK_MPI(MPI_Comm_rank(comm, &l->rank));
    CHECK_MPI(MPI_Comm_size(comm, &l->size));
    CHECK(hvdc__split_node(comm, &node));
    CHECK_MPI(MPI_Comm_size(node, &l->n_local));
    l->local_ranks = malloc((size_t)l->n_local * sizeof *l->local_ranks);
    l->local_pids = malloc((size_t)l->n_local * sizeof *l->local_pids);
    if (!l->local_ranks || !l->local_pids) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the liveness watch");
        goto fail;
    }
    int mine[2] = {l->rank, (int)getpid()}, *both = malloc(2 * (size_t)l->n_local * sizeof *both);
    if (!both) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the liveness watch");
        goto fail;
    }
    int err = MPI_Allgather(mine, 2, MPI_INT, both, 2, MPI_INT, node);
    for (int i = 0; i < l->n_local; i++) {
        l->local_ranks[i] = both[2 * i];
        l->local_pids[i] = both[2 * i + 1];
    }
    free(both);
    CHECK_MPI(err);
    l->next_check = hvdc__now_seconds() + HVDC_LIVENESS_PERIOD_S;
    MPI_Comm_free(&node);
    *out = l;
    return HVD_OK;
fail:
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    hvdc__liveness_destroy(l);
    return st;
}

void hvdc__liveness_destroy(hvdc_liveness *l) {
    if (!l) return;
    free(l->local_ranks);
    free(l->local_pids);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* Tells every other rank, eagerly and without waiting for them: they may be blocked anywhere. */
static void broadcast_notice(hvdc_liveness *l, const char *text) {
    hvdc__tell_others(l->comm, HVDC_TAG_FAILURE, text, strlen(text) + 1);
}

void hvdc__liveness_set_poll(hvdc_liveness *l, const hvdc_poll_policy *policy) { l->poll = policy; }

const hvdc_poll_policy *hvdc__liveness_poll_policy(const hvdc_liveness *l) { return l ? l->poll : NULL; }

/* Whether the task whose /proc stat file is path is exiting: the kernel's PF_EXITING flag
 * (include/linux/sched.h; proc(5)'s stat field 9), set as a task starts to exit and kept while
 * it is a zombie. @return 1, 0 (running), or -1 (no such file: the task is gone). */
static int task_exiting(const char *path) {
    char stat[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, stat, sizeof stat - 1); /* as often as kill(2): every period */
    close(fd);
    if (n <= 0) return -1;
    stat[n] = '\0';
    /* "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold spaces and
     * parentheses, so the fields are counted from the last ')' */
    const char *paren = strrchr(stat, ')');
    unsigned flags = 0;
    if (!paren || sscanf(paren + 1, " %*c %*d %*d %*d %*d %*d %u", &flags) != 1) return 0;
    return (flags & 0x4u) != 0; /* PF_EXITING */
}

/* Whether process pid has ended: gone (ESRCH), or every one of its threads exiting. A killed
 * rank stays visible to kill(2) until its launcher reaps it, which can be only once all its
 * threads have exited and its memory is torn down (seconds, under load); its threads show
 * exiting from the start.
 * Not the main thread alone: one that called pthread_exit is a zombie while the process lives
 * on. Without /proc, or if it cannot be read: kill(2) alone. */
static int process_ended(int pid) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    if (task_exiting(path) != 1) return 0; /* the main thread runs: the usual answer, one read */
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *tasks = opendir(path);
    if (!tasks) return 0;
    int ended = 1;
    for (struct dirent *t; ended && (t = readdir(tasks));) {
        if (t->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/stat", pid, t->d_name);
        ended = task_exiting(path) != 0;
    }
    closedir(tasks);
    return ended;
}

/* Takes a notice another rank sent, if one comes within seconds (0: probe once): it names the
 * rank that died or stopped. Probes pause as the waits' poll policy says (poll.h).
 * @return 1 (l failed, its message set) or 0. */
static int take_notice(hvdc_liveness *l, double seconds) {
    int flag = 0;
    MPI_Status status;
    double until = hvdc__now_seconds() + seconds;
    hvdc_poll poll = hvdc__poll_begin(l->poll);
    for (;;) {
        int err = MPI_Iprobe(MPI_ANY_SOURCE, HVDC_TAG_FAILURE, l->comm, &flag, &status);
        if (err == MPI_SUCCESS && flag) break;
        if (hvdc__now_seconds() >= until) return 0;
        hvdc__poll_pause(&poll);
    }
    char text[NOTICE_MAX] = "";
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (count > 0 && count <= NOTICE_MAX)
        MPI_Recv(text, count, MPI_BYTE, status.MPI_SOURCE, HVDC_TAG_FAILURE, l->comm,
                 MPI_STATUS_IGNORE);
    text[NOTICE_MAX - 1] = '\0';
    snprintf(l->message, sizeof l->message, "%s (reported by rank %d)", text, status.MPI_SOURCE);
    l->failed = HVD_ERR_RANK_FAILED;
    return 1;
}

static hvd_status check_locked(hvdc_liveness *l) {
    if (l->failed != HVD_OK) return hvdc__fail(l->failed, "%s", l->message);
    if (hvdc__liveness_declared(l->message, sizeof l->message)) {
        l->failed = HVD_ERR_RANK_FAILED;
        return hvdc__fail(l->failed, "%s", l->message);
    }
    double now = hvdc__now_seconds();
    if (now < l->next_check) return HVD_OK;
    l->next_check = now + HVDC_LIVENESS_PERIOD_S;
    /* a notice first: it names the rank that died, while the rank that sent it may since
     * have exited on its own */
    if (take_notice(l, 0)) return hvdc__fail(l->failed, "%s", l->message);
    for (int i = 0; i < l->n_local; i++) {
        if (l->local_ranks[i] == l->rank) continue;
        if (!process_ended(l->local_pids[i])) continue;
        /* a neighbour gone may have exited on its own after a notice this rank has not taken
         * yet (a survivor that fails and exits at once): that notice, sent before the exit,
         * names who really died; and one probe may miss a message that has just come (it
         * progresses MPI once), so look for a while before taking the neighbour for dead */
        if (take_notice(l, NOTICE_BEHIND_EXIT_S)) return hvdc__fail(l->failed, "%s", l->message);
        snprintf(l->message, sizeof l->message,
                 "rank %d (pid %d) died: its process on the same node as rank %d is gone "
                 "(killed, crashed or out of memory)", l->local_ranks[i], l->local_pids[i], l->rank);
        broadcast_notice(l, l->message);
        l->failed = HVD_ERR_RANK_FAILED;
        return hvdc__fail(l->failed, "%s", l->message);
    }
    return HVD_OK;
}

hvd_status hvdc__liveness_check(hvdc_liveness *l) {
    if (!l) return HVD_OK;
    pthread_mutex_lock(&l->lock);
    hvd_status st = check_locked(l);
    pthread_mutex_unlock(&l->lock);
    return st;
}

void hvdc__liveness_tell_stopped(hvdc_liveness *l, const char *why) {
    if (!l) return;
    char notice[NOTICE_MAX];
    snprintf(notice, sizeof notice, "rank %d's libhvdc stopped: %s", l->rank, why);
    broadcast_notice(l, notice);
}

hvd_status hvdc__wait_requests(int n, MPI_Request *requests, hvdc_liveness *l) {
    hvd_status st = HVD_OK;
    if (!l) {
        CHECK_MPI(MPI_Waitall(n, requests, MPI_STATUSES_IGNORE));
        return HVD_OK;
    }
    hvdc_poll poll = hvdc__poll_begin(l->poll);
    for (;;) {
        int done = 0;
        CHECK_MPI(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE));
        if (done) return HVD_OK;
        CHECK(hvdc__liveness_check(l));
        hvdc__poll_pause(&poll);
    }
fail:
    return st;
}
