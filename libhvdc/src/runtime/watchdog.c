/*
 * watchdog.c - liveness checks during the background thread's blocking MPI calls (watchdog.h).
 */
#include "runtime/watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"
#include "base/status.h"

struct hvdc_watchdog {
    pthread_mutex_t mutex;
    pthread_cond_t quit_cond;
    pthread_t thread;
    int quit;
    int in_call;       /* the background thread is between enter and leave */
    uint64_t calls;    /* enters so far: a call seen twice a period apart has lasted a period */
    int fired;         /* a rank died during a call: on_death ran */
    hvdc_liveness *liveness;
    void (*on_death)(void *ctx, const char *why);
    void *ctx;
    char message[HVDC_ERROR_MAX];
};

static void *watch(void *arg) {
    hvdc_watchdog *w = arg;
    uint64_t seen = 0; /* the call in progress at the last look, 0: none */
    pthread_mutex_lock(&w->mutex);
    while (!w->quit) {
        struct timespec at = hvdc__deadline_in(HVDC_LIVENESS_PERIOD_S);
        while (!w->quit && pthread_cond_timedwait(&w->quit_cond, &w->mutex, &at) != ETIMEDOUT) {}
        if (w->quit) break;
        if (!w->in_call || w->fired) {
            seen = 0;
            continue;
        }
        if (w->calls != seen) { /* a newer call: look again once it has lasted a period */
            seen = w->calls;
            continue;
        }
        if (hvdc__liveness_check(w->liveness) == HVD_OK) continue;
        snprintf(w->message, sizeof w->message, "%s", hvd_last_error());
        w->fired = 1;
        w->on_death(w->ctx, w->message); /* with the mutex held: leave waits for it */
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

hvd_status hvdc__watchdog_start(hvdc_liveness *liveness, void (*on_death)(void *ctx, const char *why),
                                void *ctx, hvdc_watchdog **out) {
    hvdc_watchdog *w = calloc(1, sizeof *w);
    if (!w) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the MPI call watchdog");
    w->liveness = liveness;
    w->on_death = on_death;
    w->ctx = ctx;
    pthread_mutex_init(&w->mutex, NULL);
    pthread_cond_init(&w->quit_cond, NULL);
    if (pthread_create(&w->thread, NULL, watch, w) != 0) {
        pthread_mutex_destroy(&w->mutex);
        pthread_cond_destroy(&w->quit_cond);
        free(w);
        return hvdc__fail(HVD_ERR_INTERNAL, "could not start the MPI call watchdog thread "
                          "(HVD_CPU_ALLREDUCE=mpi needs it)");
    }
    *out = w;
    return HVD_OK;
}

void hvdc__watchdog_stop(hvdc_watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mutex);
    w->quit = 1;
    pthread_cond_signal(&w->quit_cond);
    pthread_mutex_unlock(&w->mutex);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mutex);
    pthread_cond_destroy(&w->quit_cond);
    free(w);
}

void hvdc__watchdog_enter(hvdc_watchdog *w) {
    pthread_mutex_lock(&w->mutex);
    w->in_call = 1;
    w->calls++;
    pthread_mutex_unlock(&w->mutex);
}

int hvdc__watchdog_leave(hvdc_watchdog *w) {
    pthread_mutex_lock(&w->mutex);
    w->in_call = 0;
    int fired = w->fired;
    pthread_mutex_unlock(&w->mutex);
    return fired;
}

int hvdc__watchdog_fired(hvdc_watchdog *w) {
    if (!w) return 0;
    pthread_mutex_lock(&w->mutex);
    int fired = w->fired;
    pthread_mutex_unlock(&w->mutex);
    return fired;
}

const char *hvdc__watchdog_message(const hvdc_watchdog *w) { return w->message; }
