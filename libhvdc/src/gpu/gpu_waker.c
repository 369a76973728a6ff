/*
 * gpu_waker.c - the reference-counted waker of gpu_waker.h. A mutex makes "closed?" and the
 * wake call one step, so close never returns while a wake is running; the count frees the
 * waker with its last holder. Background thread and CUDA's host-function thread.
 */
#include "gpu/gpu_waker.h"

#include <pthread.h>
#include <stdlib.h>

struct hvdc_gpu_waker {
    pthread_mutex_t mutex;
    int refs;   /* creator + queued host functions */
    int closed; /* no more wake calls */
    void (*wake)(void *ctx);
    void *ctx;
};

hvdc_gpu_waker *hvdc__gpu_waker_create(void (*wake)(void *ctx), void *ctx) {
    hvdc_gpu_waker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->mutex, NULL);
    w->refs = 1;
    w->wake = wake;
    w->ctx = ctx;
    return w;
}

void hvdc__gpu_waker_hold(hvdc_gpu_waker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mutex);
    w->refs++;
    pthread_mutex_unlock(&w->mutex);
}

/* Drops one reference with the mutex held; unlocks, and frees at the last. */
static void release_locked(hvdc_gpu_waker *w) {
    int last = --w->refs == 0;
    pthread_mutex_unlock(&w->mutex);
    if (last) {
        pthread_mutex_destroy(&w->mutex);
        free(w);
    }
}

void hvdc__gpu_waker_fire(void *arg) {
    hvdc_gpu_waker *w = arg;
    if (!w) return;
    pthread_mutex_lock(&w->mutex);
    if (!w->closed && w->wake) w->wake(w->ctx);
    release_locked(w);
}

void hvdc__gpu_waker_close(hvdc_gpu_waker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mutex);
    w->closed = 1;
    release_locked(w);
}
