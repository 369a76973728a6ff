/*
 * device_work.c - the background thread's device responses in flight (device_work.h): kept
 * once queued, completed when their done event fires, failed with the right cause when NCCL
 * reports an error or a rank dies, drained before the thread exits.
 * Background thread (hvdc__device_work_wake: a CUDA thread).
 */
#include "runtime/device_work.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "runtime/complete.h"

/* A device response queued on the backend: its pending record and its ops. */
typedef struct gpu_work {
    hvdc_gpu_pending *pending;
    hvdc_op **ops; /* (n) owned */
    size_t n;
} gpu_work;

void hvdc__device_work_wake(void *ctx) {
    hvdc_runtime *rt = ctx;
    pthread_mutex_lock(&rt->queue_mutex);
    atomic_store(&rt->device_done, 1);
    pthread_cond_signal(&rt->queue_cond);
    pthread_mutex_unlock(&rt->queue_mutex);
}

hvd_status hvdc__device_work_keep(round_state *s, hvdc_gpu_pending *pending, hvdc_op *const *ops,
                                  size_t n) {
    hvdc_op **kept = malloc((n ? n : 1) * sizeof *kept);
    if (!kept) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory tracking device work");
    memcpy(kept, ops, n * sizeof *kept);
    if (s->n_gpu_work == s->cap_gpu_work) {
        size_t cap = s->cap_gpu_work ? 2 * s->cap_gpu_work : 16;
        gpu_work *grown = realloc(s->gpu_work, cap * sizeof *grown);
        if (!grown) {
            free(kept);
            return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory tracking device work");
        }
        s->gpu_work = grown;
        s->cap_gpu_work = cap;
    }
    s->gpu_work[s->n_gpu_work++] = (gpu_work){pending, kept, n};
    s->n_on_device += n;
    hvdc__publish_on_device(s->rt, kept, n, hvdc__gpu_pending_event(pending));
    hvdc__gpu_pending_notify(pending); /* after the waiters have the event */
    return HVD_OK;
}

/* NCCL across nodes reports a peer's death as an asynchronous error of this rank's own
 * (ncclRemoteError: the connection closed), before the death notice comes from the dead rank's
 * node (liveness.h). So before an NCCL error is taken for this rank's own, a death has
 * DEATH_GRACE_S to show: every survivor then names the dead rank, not itself. */
#define DEATH_GRACE_S 0.5

/* Whether a death lies behind the device failure st (HVD_ERR_NCCL: waits up to DEATH_GRACE_S
 * for it). @return 1 with the death's message recorded. */
static int death_behind(round_state *s, hvd_status st) {
    double until = hvdc__now_seconds() + (st == HVD_ERR_NCCL ? DEATH_GRACE_S : 0);
    for (;;) {
        if (hvdc__liveness_check(s->rt->executor.liveness) != HVD_OK) return 1;
        if (hvdc__now_seconds() >= until) return 0;
        struct timespec pause = {0, (long)(HVDC_LIVENESS_PERIOD_S * 1e9 / 5)};
        nanosleep(&pause, NULL);
    }
}

hvd_status hvdc__device_work_finish(round_state *s, hvd_status stop, const char *why) {
    char own[HVDC_ERROR_MAX];
    hvd_status failed = HVD_OK;
    atomic_store(&s->rt->device_done, 0);
    s->device_polled = hvdc__now_seconds();
    for (size_t i = 0; i < s->n_gpu_work;) {
        gpu_work *w = &s->gpu_work[i];
        int done = 0;
        hvdc__clear_error();
        hvd_status st = hvdc__gpu_pending_poll(w->pending, &done);
        if (!done && st == HVD_OK) {
            i++;
            continue;
        }
        if (st != HVD_OK && stop == HVD_OK) {
            failed = stop = st;
            snprintf(own, sizeof own, "%s", hvd_last_error());
            if (death_behind(s, st)) {
                failed = stop = HVD_ERR_RANK_FAILED;
                snprintf(own, sizeof own, "%s", hvd_last_error());
            }
            why = own;
        }
        hvdc__complete_ops(s->rt, w->ops, w->n, st == HVD_OK ? HVD_OK : stop, why);
        hvdc__drop_device_hold(s->rt, w->ops, w->n); /* before the event goes back to the pool */
        s->n_in_flight -= w->n;
        s->n_on_device -= w->n;
        hvdc__gpu_pending_free(w->pending);
        free(w->ops);
        *w = s->gpu_work[--s->n_gpu_work];
    }
    return failed == HVD_OK ? HVD_OK : hvdc__fail(failed, "%s", own);
}

int hvdc__device_work_due(const round_state *s) {
    return s->n_gpu_work > 0 && (atomic_load(&s->rt->device_done) ||
                                 hvdc__now_seconds() - s->device_polled >= HVDC_DEVICE_POLL_S);
}

hvd_status hvdc__device_work_finish_due(round_state *s) {
    return hvdc__device_work_due(s) ? hvdc__device_work_finish(s, HVD_OK, NULL) : HVD_OK;
}

hvd_status hvdc__device_work_drain(round_state *s, hvd_status stop, const char *why) {
    hvdc_runtime *rt = s->rt;
    char dead[HVDC_ERROR_MAX];
    hvd_status found = HVD_OK; /* a death seen here while stop was HVD_OK */
    if (stop != HVD_OK && s->n_gpu_work > 0) hvdc__gpu_abort(rt->executor.gpu, why);
    for (;;) {
        hvd_status failed = hvdc__device_work_finish(s, stop, why);
        if (failed != HVD_OK) return failed;
        if (s->n_gpu_work == 0) return found == HVD_OK ? HVD_OK : hvdc__fail(found, "%s", dead);
        if (hvdc__liveness_check(rt->executor.liveness) != HVD_OK) {
            snprintf(dead, sizeof dead, "%s", hvd_last_error());
            if (stop == HVD_OK) found = HVD_ERR_RANK_FAILED;
            stop = HVD_ERR_RANK_FAILED;
            why = dead;
            hvdc__gpu_abort(rt->executor.gpu, why);
            continue;
        }
        struct timespec at = hvdc__deadline_in(HVDC_DEVICE_POLL_S);
        pthread_mutex_lock(&rt->queue_mutex);
        if (!atomic_load(&rt->device_done)) pthread_cond_timedwait(&rt->queue_cond, &rt->queue_mutex, &at);
        pthread_mutex_unlock(&rt->queue_mutex);
    }
}

