/*
 * complete.c - completing ops, from the background thread or from a device op's done event,
 * and freeing them after their last holder (see complete.h).
 * Any thread.
 */
#include "runtime/complete.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/poll.h"
#include "runtime/caller_path.h"


/* Takes the ops' names out of in_flight, each only where it still maps to its op (a completed
 * op's name may already be in use again by a later submission); once per op. only_marked_by:
 * NULL, or the ops whose device_done it is alone (completion_mutex held). */
static void forget_names_marked(hvdc_runtime *rt, hvdc_op *const *ops, size_t n,
                                const void *only_marked_by) {
    pthread_mutex_lock(&rt->queue_mutex);
    for (size_t i = 0; i < n; i++) {
        if (ops[i]->names_forgotten) continue;
        if (only_marked_by && ops[i]->device_done != only_marked_by) continue;
        for (size_t k = 0; k < ops[i]->n_tensors; k++)
            hvdc__name_table_remove_value_hashed(&rt->in_flight, ops[i]->tensors[k].name,
                                                 ops[i]->tensors[k].name_hash, ops[i]);
        ops[i]->names_forgotten = 1;
    }
    hvdc__caller_path_track(rt);
    pthread_mutex_unlock(&rt->queue_mutex);
}

static void forget_names(hvdc_runtime *rt, hvdc_op *const *ops, size_t n) {
    forget_names_marked(rt, ops, n, NULL);
}

/* With completion_mutex held, before completion_cond is broadcast: counts the change for a
 * waiter's hand-off spin (hvdc__spin_unlocked in hvdc__wait_completion). */
static void count_change(hvdc_runtime *rt) {
    atomic_fetch_add_explicit(&rt->completion_seq, 1, memory_order_relaxed);
}

void hvdc__complete_ops(hvdc_runtime *rt, hvdc_op **ops, size_t n, hvd_status status,
                        const char *message) {
    forget_names(rt, ops, n);
    int64_t now = hvdc__now_ns();
    pthread_mutex_lock(&rt->completion_mutex);
    for (size_t i = 0; i < n; i++) {
        if (ops[i]->done) continue; /* a waiter completed it from its done event */
        ops[i]->phase_at[HVDC_PHASE_WAKE] = now;
        if (!ops[i]->phase_at[HVDC_PHASE_DEVICE]) ops[i]->phase_at[HVDC_PHASE_DEVICE] = now; /* host */
        ops[i]->status = status;
        if (status != HVD_OK) ops[i]->error = strdup(message ? message : hvd_status_string(status));
        ops[i]->done = 1;
    }
    count_change(rt);
    pthread_mutex_unlock(&rt->completion_mutex);
    /* after unlocking: a waiter woken while the mutex is held would only block on it again
     * (the runtime outlives this call: its thread is joined, or its watchdog stopped, first) */
    pthread_cond_broadcast(&rt->completion_cond);
}

void hvdc__publish_on_device(hvdc_runtime *rt, hvdc_op **ops, size_t n, void *done_event) {
    int64_t now = hvdc__now_ns();
    pthread_mutex_lock(&rt->completion_mutex);
    for (size_t i = 0; i < n; i++) {
        ops[i]->phase_at[HVDC_PHASE_DEVICE] = now;
        ops[i]->on_device = 1;
        ops[i]->device_done = done_event;
        ops[i]->device_batch = ops;
        ops[i]->device_batch_n = n;
    }
    count_change(rt);
    pthread_cond_broadcast(&rt->completion_cond); /* waiters can wait on the device now */
    pthread_mutex_unlock(&rt->completion_mutex);
}

static int held(const hvdc_op *op) { return op->on_device || op->device_waiting; }

/* With completion_mutex held: holds op for a waiter that works on it with the mutex released
 * (its event, its names), then releases the mutex. */
static void hold_unlocked(hvdc_runtime *rt, hvdc_op *op) {
    op->device_waiting = 1;
    rt->device_waiters++;
    pthread_mutex_unlock(&rt->completion_mutex);
}

/* With completion_mutex held again: lets go of hold_unlocked's hold, announces the change (op
 * done, or runtime_free may go on), and frees op if it was released meanwhile. */
static void drop_waiter_hold(hvdc_runtime *rt, hvdc_op *op) {
    op->device_waiting = 0;
    rt->device_waiters--;
    count_change(rt);
    pthread_cond_broadcast(&rt->completion_cond);
    if (op->released && !held(op)) hvdc__op_recycle(&rt->handles, op);
}

void hvdc__drop_device_hold(hvdc_runtime *rt, hvdc_op **ops, size_t n) {
    pthread_mutex_lock(&rt->completion_mutex);
    for (size_t i = 0; i < n; i++) {
        ops[i]->on_device = 0;
        ops[i]->device_done = NULL; /* its event goes back to the pool */
        ops[i]->device_batch = NULL; /* the list is freed next */
        if (ops[i]->released && !held(ops[i])) hvdc__op_recycle(&rt->handles, ops[i]);
    }
    pthread_mutex_unlock(&rt->completion_mutex);
}

/* With completion_mutex held: op's device work has finished, seen at woke_ns (unless the
 * background thread completed op first). */
static void finish_ok(hvdc_op *op, int64_t woke_ns) {
    if (op->done) return;
    op->phase_at[HVDC_PHASE_WAKE] = woke_ns;
    op->status = HVD_OK;
    op->done = 1;
}

/* With completion_mutex held and op->device_done seen fired: completes every op of op's device
 * batch (set with device_done) that the event still marks (a waiter whose device wait failed
 * has let go of it: the background thread completes that one), so the waits for the others
 * find them done without asking the device: one CUDA call a fused response, one pass over it.
 * The background thread's own completion of the batch then finds them done. */
static void finish_batch_ok(hvdc_runtime *rt, hvdc_op *op, int64_t woke_ns) {
    const void *event = op->device_done;
    hvdc_op *const *batch = op->device_batch;
    size_t n = op->device_batch_n;
    /* completion_mutex, then queue_mutex: the only nesting */
    forget_names_marked(rt, batch, n, event);
    for (size_t i = 0; i < n; i++)
        if (batch[i]->device_done == event) finish_ok(batch[i], woke_ns);
}

int hvdc__complete_on_device(hvdc_runtime *rt, hvdc_op *op, int block) {
    if (!op->device_done || op->device_waiting) return 0;
    void *event = op->device_done;
    hold_unlocked(rt, op);
    /* the event may be pooled and re-recorded meanwhile: then it fires for later work on the
     * same stream, which also means op's work finished (a later wake-up, never a wrong one) */
    int finished = rt->device_event_finished(event, &rt->device_aborted, block);
    int64_t seen = hvdc__now_ns(); /* the device phase ends here (phases.h) */
    pthread_mutex_lock(&rt->completion_mutex);
    /* still op's event (the background thread has not let go of op, so the event is not back
     * in the pool, nor the batch freed): what fired is op's work. Else the background thread
     * has completed op already (it lets go only after that). */
    if (finished && op->device_done == event) finish_batch_ok(rt, op, seen);
    /* not finished: the background thread completes it (with the error, if one); a wait
     * that failed does not wait on this event again */
    if (!finished && block) op->device_done = NULL;
    drop_waiter_hold(rt, op);
    return 1;
}

hvdc_op *hvdc__stream_wait_for_op(hvdc_runtime *rt, hvd_handle local, void *stream,
                                  hvd_status *waited) {
    hvdc_op *op;
    *waited = HVD_OK;
    while ((op = hvdc__handles_find(&rt->handles, local)) != NULL && !op->done) {
        if (!op->device_done || op->device_waiting) { /* not queued yet, or being looked at */
            hvdc__wait_completion(rt);
            continue;
        }
        /* with the mutex held the background thread cannot return the event to its pool */
        *waited = rt->device_stream_wait(stream, op->device_done);
        if (*waited != HVD_OK) return op;
        /* the results are the stream's now: the name is free for this rank's next submission,
         * as after hvd_wait (the background's late completion leaves a reused name alone) */
        hold_unlocked(rt, op);
        forget_names(rt, &op, 1);
        pthread_mutex_lock(&rt->completion_mutex);
        drop_waiter_hold(rt, op);
        return hvdc__handles_find(&rt->handles, local); /* NULL if another thread released it */
    }
    return op;
}

void hvdc__release_op(hvdc_runtime *rt, hvdc_op *op) {
    op->released = 1;
    if (!held(op)) hvdc__op_recycle(&rt->handles, op);
}

void hvdc__wait_completion(hvdc_runtime *rt) {
    atomic_fetch_add_explicit(&rt->poll.app_waiting, 1, memory_order_relaxed);
    /* a CPU to spare (handoff_spin_ns > 0): the answer may come within the spin */
    if (!hvdc__spin_unlocked(&rt->completion_mutex, &rt->completion_seq, rt->poll.handoff_spin_ns))
        pthread_cond_wait(&rt->completion_cond, &rt->completion_mutex);
    atomic_fetch_sub_explicit(&rt->poll.app_waiting, 1, memory_order_relaxed);
}

hvdc_op *hvdc__wait_for_op(hvdc_runtime *rt, hvd_handle local) {
    hvdc_op *op;
    /* look the handle up again after every wake-up: another thread may have released it */
    while ((op = hvdc__handles_find(&rt->handles, local)) != NULL && !op->done)
        if (!hvdc__complete_on_device(rt, op, 1)) hvdc__wait_completion(rt);
    return op;
}

hvdc_op *hvdc__poll_op(hvdc_runtime *rt, hvd_handle local) {
    hvdc_op *op = hvdc__handles_find(&rt->handles, local);
    if (op && !op->done && hvdc__complete_on_device(rt, op, 0))
        op = hvdc__handles_find(&rt->handles, local);
    return op;
}

/* Allocates nothing: it runs when the runtime stops, out of memory included, and an op it
 * could not fail would leave its waiters (and hvd_shutdown) waiting forever. */
void hvdc__fail_everything(hvdc_runtime *rt, hvd_status status, const char *message) {
    pthread_mutex_lock(&rt->queue_mutex);
    rt->stopped = 1; /* no op enters in_flight from now on */
    rt->stop_status = status;
    snprintf(rt->stop_message, sizeof rt->stop_message, "%s", message);
    rt->queue_head = rt->queue_tail = NULL; /* queued ops are in in_flight too */
    hvdc_op *op;
    while ((op = hvdc__name_table_pop(&rt->in_flight)) != NULL) {
        for (size_t k = 0; k < op->n_tensors; k++) /* a grouped op sits there once a member */
            hvdc__name_table_remove_value(&rt->in_flight, op->tensors[k].name, op);
        pthread_mutex_unlock(&rt->queue_mutex); /* completion_mutex is never taken inside it */
        hvdc__complete_ops(rt, &op, 1, status, message);
        pthread_mutex_lock(&rt->queue_mutex);
    }
    hvdc__caller_path_track(rt);
    pthread_mutex_unlock(&rt->queue_mutex);
}

void hvdc__stop_reason(hvdc_runtime *rt, hvd_status *status, char *message, size_t len,
                       int *told) {
    pthread_mutex_lock(&rt->queue_mutex);
    *status = rt->stop_status;
    snprintf(message, len, "%s", rt->stop_message);
    *told = rt->told_stopped;
    pthread_mutex_unlock(&rt->queue_mutex);
}

void hvdc__note_told(hvdc_runtime *rt) {
    pthread_mutex_lock(&rt->queue_mutex);
    rt->told_stopped = 1;
    pthread_mutex_unlock(&rt->queue_mutex);
}
