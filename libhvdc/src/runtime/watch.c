/*
 * watch.c - the host watch's thread: heartbeats around the ring, lost ranks declared, rank 0's
 * questions answered, rank 0's stall verdicts completed (see watch.h).
 * Its own thread, on its own communicator; start and stop on the hvd_init/hvd_shutdown thread.
 */
#include "runtime/watch.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/liveness.h"
#include "base/log.h"
#include "base/status.h"
#include "base/tags.h"
#include "base/tell.h"

#define TICK_S 0.1         /* how often the thread looks at its messages and the clock */
#define HEARTBEAT_S 1.0    /* between two heartbeats (less with a short HVD_HOST_TIMEOUT) */
#define VERDICT_WAIT_S 2.0 /* how long a stall verdict waits for the ranks' whereabouts */
enum { ANSWER_MAX = 12288, WHY_MAX = 512 };

/* Rank 0's stall verdict: the stall check's lines, and the answers as they come. */
typedef struct verdict {
    char *head;
    int n, n_answered;
    int *ranks;     /* (n) */
    char **lines;   /* (n) */
    char **answers; /* (n) NULL until that rank answered */
    double deadline;
} verdict;

struct hvdc_watch {
    MPI_Comm comm;
    MPI_Comm notices; /* where the waits look for failure notices (liveness.h), not owned */
    int rank, size, pred, succ;
    const hvdc_peers *peers;
    double timeout, beat_every, next_beat, last_heard;
    int pred_left; /* the predecessor said goodbye */
    hvdc_describe_fn describe;
    void *ctx;
    char *answer;  /* (ANSWER_MAX) this rank's whereabouts, being sent to rank 0 */
    MPI_Request answer_sent;
    verdict *active; /* the verdict waiting for answers (the thread's own) */

    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    int quit;         /* under mutex */
    verdict *handed;  /* under mutex: the next verdict, from the background thread */
};

static const char beat_byte = 1;

static void verdict_free(verdict *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        free(v->lines ? v->lines[i] : NULL);
        free(v->answers ? v->answers[i] : NULL);
    }
    free(v->head);
    free(v->ranks);
    free(v->lines);
    free(v->answers);
    free(v);
}

/* ---- heartbeats and lost ranks ---- */

static void beat(hvdc_watch *w, int tag) {
    MPI_Request request;
    if (MPI_Isend(&beat_byte, 1, MPI_BYTE, w->succ, tag, w->comm, &request) == MPI_SUCCESS)
        MPI_Request_free(&request); /* eager and tiny: never waited for, never reused */
}

/* What a process on this host is doing, from its /proc state: why it may not answer. */
static const char *process_state(int pid) {
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f) return "gone";
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')');
    char state = paren && paren[1] == ' ' ? paren[2] : '?';
    switch (state) {
    case 'T': return "stopped (SIGSTOP, or a debugger)";
    case 't': return "stopped by a debugger";
    case 'D': return "in uninterruptible sleep (waiting for I/O)";
    case 'Z': case 'X': return "exiting";
    default: return "running, but its libhvdc watch thread does not answer (starved of CPU?)";
    }
}

/* The predecessor has been silent for silence seconds: declare it lost, here and everywhere. */
static void declare_lost(hvdc_watch *w, double silence) {
    char why[WHY_MAX], host[200];
    int p = w->pred, pid = hvdc__peers_pid(w->peers, p);
    const char *where = hvdc__peers_host(w->peers, p);
    if (strcmp(where, hvdc__peers_host(w->peers, w->rank)) == 0)
        snprintf(why, sizeof why, "rank %d (host '%s', pid %d) stopped answering: no heartbeat "
                 "for %.1f s (HVD_HOST_TIMEOUT=%g); its process is %s", p, where, pid, silence,
                 w->timeout, process_state(pid));
    else
        snprintf(why, sizeof why, "%s is lost: rank %d sent no heartbeat for %.1f s "
                 "(HVD_HOST_TIMEOUT=%g): the host is down, frozen or cut off from the network, "
                 "or rank %d's process is stopped",
                 hvdc__peers_say_host(w->peers, p, host, sizeof host), p, silence, w->timeout, p);
    hvdc__liveness_declare(why);
    HVDC_LOG(HVDC_LOG_ERROR, "%s", why);
    /* to every watch, which declare it for every wait of their process; and to the waits
     * themselves, which take it at once where a neighbour of theirs exits on it first */
    hvdc__tell_others(w->comm, HVDC_TAG_LOST, why, strlen(why) + 1);
    hvdc__tell_others(w->notices, HVDC_TAG_FAILURE, why, strlen(why) + 1);
}

static void check_silence(hvdc_watch *w, double now) {
    if (w->timeout <= 0 || w->pred_left || hvdc__liveness_declared(NULL, 0)) return;
    /* a heartbeat that came just after a tick is read at the next: the bound stays timeout */
    double silence = now - w->last_heard;
    if (silence >= w->timeout - TICK_S) declare_lost(w, silence);
}

/* ---- rank 0's questions and the answers ---- */

/* Rank 0 asked where this rank is: the whereabouts go back without waiting (an answer still in
 * flight from an earlier question is left to finish: this one goes unanswered). */
static void answer(hvdc_watch *w, int asker) {
    int done = 1;
    if (w->answer_sent != MPI_REQUEST_NULL) MPI_Test(&w->answer_sent, &done, MPI_STATUS_IGNORE);
    if (!done) return;
    w->describe(w->ctx, "      ", w->answer, ANSWER_MAX);
    MPI_Isend(w->answer, (int)strlen(w->answer) + 1, MPI_BYTE, asker, HVDC_TAG_WHERE_TELL, w->comm,
              &w->answer_sent);
}

/* Rank 0: a rank's whereabouts, for the verdict that asked. */
static void take_answer(hvdc_watch *w, int from, const char *text) {
    verdict *v = w->active;
    for (int i = 0; v && i < v->n; i++) {
        if (v->ranks[i] != from || v->answers[i]) continue;
        v->answers[i] = strdup(text);
        v->n_answered++;
        return;
    }
}

/* Receives one message (its size: count bytes) and acts on it. */
static void take_message(hvdc_watch *w, const MPI_Status *status, int count, double now) {
    char small[WHY_MAX], *text = small;
    if (count > (int)sizeof small && !(text = malloc((size_t)count))) text = NULL;
    if (!text) { /* out of memory: the message is read and dropped */
        char drop;
        MPI_Recv(&drop, 0, MPI_BYTE, status->MPI_SOURCE, status->MPI_TAG, w->comm,
                 MPI_STATUS_IGNORE);
        return;
    }
    MPI_Recv(text, count, MPI_BYTE, status->MPI_SOURCE, status->MPI_TAG, w->comm,
             MPI_STATUS_IGNORE);
    if (count > 0) text[count - 1] = '\0';
    else text[0] = '\0';
    int from = status->MPI_SOURCE;
    switch (status->MPI_TAG) {
    case HVDC_TAG_HEARTBEAT:
        if (from == w->pred) w->last_heard = now;
        break;
    case HVDC_TAG_BYE:
        if (from == w->pred) w->pred_left = 1;
        break;
    case HVDC_TAG_LOST: {
        char why[WHY_MAX + 32];
        snprintf(why, sizeof why, "%.*s (reported by rank %d)", WHY_MAX - 1, text, from);
        hvdc__liveness_declare(why);
        break;
    }
    case HVDC_TAG_WHERE_ASK: answer(w, from); break;
    case HVDC_TAG_WHERE_TELL: take_answer(w, from, text); break;
    default: break;
    }
    if (text != small) free(text);
}

static void take_messages(hvdc_watch *w, double now) {
    for (;;) {
        int flag = 0, count = 0;
        MPI_Status status;
        if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w->comm, &flag, &status) != MPI_SUCCESS ||
            !flag)
            return;
        MPI_Get_count(&status, MPI_BYTE, &count);
        take_message(w, &status, count, now);
    }
}

/* ---- rank 0's stall verdicts ---- */

/* Starts a handed verdict: asks every rank in it; this rank answers itself. */
static void start_verdict(hvdc_watch *w, verdict *v, double now) {
    w->active = v;
    v->deadline = now + VERDICT_WAIT_S;
    for (int i = 0; i < v->n; i++) {
        if (v->ranks[i] == w->rank) {
            char *mine = malloc(ANSWER_MAX);
            if (mine) w->describe(w->ctx, "      ", mine, ANSWER_MAX);
            v->answers[i] = mine;
            v->n_answered++;
            continue;
        }
        MPI_Request request;
        if (MPI_Isend(&beat_byte, 1, MPI_BYTE, v->ranks[i], HVDC_TAG_WHERE_ASK, w->comm,
                      &request) == MPI_SUCCESS)
            MPI_Request_free(&request);
    }
}

/* Logs the active verdict once every rank answered or its time is up. */
static void finish_verdict(hvdc_watch *w, double now) {
    verdict *v = w->active;
    if (!v || (v->n_answered < v->n && now < v->deadline)) return;
    size_t len = strlen(v->head) + 1;
    for (int i = 0; i < v->n; i++)
        len += strlen(v->lines[i]) + (v->answers[i] ? strlen(v->answers[i]) : 80) + 8;
    char *text = malloc(len);
    if (text) {
        size_t used = (size_t)snprintf(text, len, "%s", v->head);
        for (int i = 0; i < v->n; i++)
            used += (size_t)snprintf(text + used, len - used, "\n  %s\n%s", v->lines[i],
                                     v->answers[i] ? v->answers[i]
                                                   : "      (no answer within 2 s: its host may "
                                                     "be lost, or its process stopped)");
        hvdc__log_block(HVDC_LOG_WARNING, text);
        free(text);
    }
    verdict_free(v);
    w->active = NULL;
}

/* ---- the thread ---- */

static void *watch_main(void *arg) {
    hvdc_watch *w = arg;
    pthread_mutex_lock(&w->mutex);
    while (!w->quit) {
        struct timespec at = hvdc__deadline_in(TICK_S);
        pthread_cond_timedwait(&w->wake, &w->mutex, &at);
        if (w->quit) break;
        verdict *handed = w->active ? NULL : w->handed;
        if (handed) w->handed = NULL;
        pthread_mutex_unlock(&w->mutex);
        double now = hvdc__now_seconds();
        if (w->timeout > 0 && now >= w->next_beat) {
            beat(w, HVDC_TAG_HEARTBEAT);
            w->next_beat = now + w->beat_every;
        }
        take_messages(w, now);
        check_silence(w, now);
        if (handed) start_verdict(w, handed, now);
        finish_verdict(w, now);
        pthread_mutex_lock(&w->mutex);
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

hvd_status hvdc__watch_start(MPI_Comm comm, const hvdc_peers *peers, double timeout_s,
                             hvdc_describe_fn describe, void *ctx, hvdc_watch **out) {
    hvd_status st = HVD_OK;
    hvdc_watch *w = calloc(1, sizeof *w);
    if (!w) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the host watch");
    w->comm = MPI_COMM_NULL;
    w->notices = comm;
    w->answer_sent = MPI_REQUEST_NULL;
    CHECK_MPI(MPI_Comm_dup(comm, &w->comm));
    CHECK_MPI(MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_rank(w->comm, &w->rank));
    CHECK_MPI(MPI_Comm_size(w->comm, &w->size));
    w->pred = (w->rank + w->size - 1) % w->size;
    w->succ = (w->rank + 1) % w->size;
    w->peers = peers;
    w->timeout = timeout_s;
    w->beat_every = timeout_s > 0 && timeout_s / 4 < HEARTBEAT_S ? timeout_s / 4 : HEARTBEAT_S;
    w->last_heard = w->next_beat = hvdc__now_seconds();
    w->describe = describe;
    w->ctx = ctx;
    if (!(w->answer = malloc(ANSWER_MAX))) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the host watch");
        goto fail;
    }
    pthread_mutex_init(&w->mutex, NULL);
    pthread_cond_init(&w->wake, NULL);
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        pthread_mutex_destroy(&w->mutex);
        pthread_cond_destroy(&w->wake);
        st = hvdc__fail(HVD_ERR_INTERNAL, "could not start the host watch thread");
        goto fail;
    }
    *out = w;
    return HVD_OK;
fail:
    if (w->comm != MPI_COMM_NULL) MPI_Comm_free(&w->comm);
    free(w->answer);
    free(w);
    return st;
}

void hvdc__watch_stop(hvdc_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mutex);
    w->quit = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mutex);
    pthread_join(w->thread, NULL);
    if (w->timeout > 0) beat(w, HVDC_TAG_BYE);
    if (w->answer_sent != MPI_REQUEST_NULL) MPI_Request_free(&w->answer_sent);
    verdict_free(w->active);
    verdict_free(w->handed);
    /* the communicator is never freed: a predecessor that stops later still sends heartbeats
     * meanwhile, and Open MPI 4.1 crashes in the next MPI_Comm_split or _dup (the next
     * hvd_init) when a message comes for a communicator id that was freed and is reused.
     * Kept, it holds those few bytes until the process ends. */
    pthread_mutex_destroy(&w->mutex);
    pthread_cond_destroy(&w->wake);
    free(w->answer);
    free(w);
}

void hvdc__watch_verdict(hvdc_watch *w, const char *head, const int *ranks,
                         const char *const *lines, int n) {
    if (!w || n <= 0) return;
    verdict *v = calloc(1, sizeof *v);
    if (!v) return;
    v->n = n;
    v->head = strdup(head);
    v->ranks = malloc((size_t)n * sizeof *v->ranks);
    v->lines = calloc((size_t)n, sizeof *v->lines);
    v->answers = calloc((size_t)n, sizeof *v->answers);
    int ok = v->head && v->ranks && v->lines && v->answers;
    for (int i = 0; ok && i < n; i++) {
        v->ranks[i] = ranks[i];
        ok = (v->lines[i] = strdup(lines[i])) != NULL;
    }
    pthread_mutex_lock(&w->mutex);
    if (ok && !w->handed) { /* taken once the active one, if any, is logged */
        w->handed = v;
        v = NULL;
        pthread_cond_signal(&w->wake);
    }
    pthread_mutex_unlock(&w->mutex);
    verdict_free(v); /* not taken: out of memory, or an earlier verdict still waits */
}
