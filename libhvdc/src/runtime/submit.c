/*
 * submit.c - queueing a checked op for its process set's background thread (hvdc__submit), and
 * the handles: hvd_poll, hvd_wait and hvd_wait_on_stream (and hvdc__submit_wait, both at once
 * for libhvdc's own collectives). A handle carries its set's slot in its top byte, so a wait
 * finds the runtime whose table holds it (set_table.c keeps that runtime alive meanwhile).
 * Any user thread. Touches only the queue (queue_mutex) and the handles (completion_mutex).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "runtime/caller_path.h"
#include "runtime/complete.h"
#include "runtime/runtime.h"
#include "runtime/set_table.h"

static hvd_status queue_op(const char *fn, hvdc_runtime *rt, hvdc_op *op, hvd_handle *handle);


/* Gives op a handle and queues it on process_set's runtime; on failure frees op. */
hvd_status hvdc__submit(const char *fn, int process_set, hvdc_op *op, hvd_handle *handle) {
    hvdc_runtime *rt = NULL;
    int slot = 0;
    hvd_status st = hvdc__set_acquire(process_set, fn, &rt, &slot);
    if (st == HVD_OK && slot != 0 && op->desc.device >= 0)
        st = hvdc__fail(HVD_ERR_UNSUPPORTED, "%s '%s': device memory in a process set is not supported yet; use the global set or host memory", fn, op->desc.name);
    if (st != HVD_OK) {
        hvdc__set_release(slot);
        hvdc__op_free(op);
        return st;
    }
    st = queue_op(fn, rt, op, handle);
    if (st == HVD_OK) *handle |= (hvd_handle)slot << HVDC_HANDLE_SLOT_SHIFT;
    hvdc__set_release(slot);
    return st;
}

/* submit's body on the runtime the op goes to. */
static hvd_status queue_op(const char *fn, hvdc_runtime *rt, hvdc_op *op, hvd_handle *handle) {
    hvd_status st = HVD_OK;
    op->phase_at[HVDC_PHASE_QUEUED] = hvdc__now_ns();
    for (size_t i = 0; i < op->n_tensors; i++) /* outside the locks */
        op->tensors[i].name_hash = hvdc__name_hash(op->tensors[i].name);
    pthread_mutex_lock(&rt->completion_mutex);
    hvd_handle h = rt->fault_add_handle ? HVD_HANDLE_NULL : hvdc__handles_add(&rt->handles, op);
    hvdc__op_take_spare(&rt->handles); /* for this thread's next submission, under this lock */
    pthread_mutex_unlock(&rt->completion_mutex);
    if (h == HVD_HANDLE_NULL) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory for a handle", fn, op->desc.name);
        hvdc__op_free(op); /* after the message, which names it */
        return st;
    }
    pthread_mutex_lock(&rt->queue_mutex);
    size_t added = 0;
    if (rt->stopped) {
        st = hvdc__fail(rt->stop_status, "%s '%s': libhvdc's background thread has stopped and "
                        "runs nothing more (call hvd_shutdown), because: %s", fn, op->desc.name,
                        rt->stop_message);
    } else {
        for (; added < op->n_tensors; added++) {
            const hvdc_tensor *t = &op->tensors[added];
            int put = hvdc__caller_path_owns(rt, t->name)
                          ? -1
                          : hvdc__name_table_put_hashed(&rt->in_flight, t->name, t->name_hash, op);
            if (put == -1) {
                st = hvdc__fail(HVD_ERR_DUPLICATE_NAME, "%s: an operation named '%s' is already in flight on this rank; wait for it first or use another name", fn, op->tensors[added].name);
                break;
            }
            if (put != 0) {
                st = hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory", fn, op->desc.name);
                break;
            }
        }
    }
    int wake = 0; /* the queue was empty: the background thread may be asleep */
    if (st == HVD_OK) {
        wake = rt->queue_head == NULL;
        if (rt->queue_tail) rt->queue_tail->next = op;
        else rt->queue_head = op;
        rt->queue_tail = op;
        size_t name_len = strlen(op->desc.name); /* a name fits (hvdc_op_desc) */
        memcpy(rt->last_submitted, op->desc.name, name_len + 1);
        rt->last_submitted_ns = op->phase_at[HVDC_PHASE_QUEUED];
        atomic_fetch_add_explicit(&rt->queue_seq, 1, memory_order_relaxed); /* a spinning
                                       background thread takes it before the signal comes */
    } else {
        for (size_t i = 0; i < added; i++) hvdc__name_table_remove(&rt->in_flight, op->tensors[i].name);
    }
    hvdc__caller_path_track(rt);
    pthread_mutex_unlock(&rt->queue_mutex);
    /* after unlocking, so the woken thread does not block on the mutex at once (this call
     * holds its runtime: hvdc__submit acquired its set). Only onto an empty queue: the
     * background thread looks at the queue before every wait, so while it holds ops it is
     * either awake or already signalled, and a burst of submissions costs one wake-up, not one
     * system call each */
    if (wake) pthread_cond_signal(&rt->queue_cond);
    if (st != HVD_OK) {
        pthread_mutex_lock(&rt->completion_mutex);
        hvdc__handles_remove(&rt->handles, h);
        pthread_mutex_unlock(&rt->completion_mutex);
        hvdc__op_free(op);
        return st;
    }
    *handle = h;
    return HVD_OK;
}

/* The runtime a handle belongs to (its set's slot is in the top bits), acquired: release the
 * returned slot. NULL when that set is gone. */
static hvdc_runtime *handle_runtime(hvd_handle handle, int *slot) {
    hvdc_runtime *rt = NULL;
    *slot = (int)(handle >> HVDC_HANDLE_SLOT_SHIFT);
    if (hvdc__set_acquire_slot(*slot, &rt) != HVD_OK) return NULL;
    return rt;
}

#define HANDLE_IN_SET(h) ((h) & (((hvd_handle)1 << HVDC_HANDLE_SLOT_SHIFT) - 1))

static hvd_status poll_entered(hvd_handle handle, int *done) {
    if (!done) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_poll: done is NULL");
    int slot;
    hvdc_runtime *rt = handle_runtime(handle, &slot);
    hvdc_op *op = NULL;
    if (rt) {
        hvd_handle local = HANDLE_IN_SET(handle);
        pthread_mutex_lock(&rt->completion_mutex);
        op = hvdc__poll_op(rt, local); /* a device op: its done event looked at */
        if (op) *done = op->done;
        pthread_mutex_unlock(&rt->completion_mutex);
        hvdc__set_release(slot);
    }
    if (!op)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_poll: handle %#llx is not live (released by hvd_wait already, or never returned by libhvdc)", (unsigned long long)handle);
    return HVD_OK;
}

/* hvd_wait (stream_wait 0): until the op completes (a device op: on its done event, here).
 * hvd_wait_on_stream: until it completes or is queued on the device, then stream waits for it
 * there (and its names are free). Either releases the handle. */
static hvd_status wait_entered(const char *fn, hvd_handle *handle, int stream_wait,
                               void *stream) {
    if (!handle) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: handle pointer is NULL", fn);
    int slot;
    hvdc_runtime *rt = handle_runtime(*handle, &slot);
    hvdc_op *op = NULL;
    hvd_status st = HVD_OK, waited = HVD_OK;
    char *error = NULL;
    if (rt) {
        hvd_handle local = HANDLE_IN_SET(*handle);
        pthread_mutex_lock(&rt->completion_mutex);
        op = stream_wait ? hvdc__stream_wait_for_op(rt, local, stream, &waited)
                         : hvdc__wait_for_op(rt, local);
        if (op && waited == HVD_OK) {
            if (op->done && op->status == HVD_OK) /* it succeeded: its phases count (phases.h) */
                hvdc__phases_add(op->desc.device >= 0 ? &rt->device_phases : &rt->phases,
                                 op->phase_at, hvdc__now_ns());
            hvdc__handles_remove(&rt->handles, local);
            if (op->done) {
                st = op->status;
                error = op->error; /* taken: the op may outlive this call (complete.h) */
                op->error = NULL;
            }
            hvdc__release_op(rt, op);
        }
        pthread_mutex_unlock(&rt->completion_mutex);
        hvdc__set_release(slot);
    }
    if (!op)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: handle %#llx is not live (released by hvd_wait already, or never returned by libhvdc)", fn, (unsigned long long)*handle);
    if (waited != HVD_OK) /* the handle stays live */
        return hvdc__fail(waited, "%s: the stream cannot wait for the operation (is it a "
                          "cudaStream_t of the operation's device?): %s", fn, hvd_last_error());
    if (st != HVD_OK) hvdc__fail(st, "%s", error ? error : hvd_status_string(st));
    free(error);
    *handle = HVD_HANDLE_NULL;
    return st;
}

hvd_status hvd_wait_on_stream(hvd_handle *handle, void *stream) {
    HVDC_GATED("hvd_wait_on_stream", wait_entered("hvd_wait_on_stream", handle, 1, stream));
}

hvd_status hvd_poll(hvd_handle handle, int *done) {
    HVDC_GATED("hvd_poll", poll_entered(handle, done));
}

hvd_status hvdc__submit_wait(const char *fn, int process_set, hvdc_op *op) {
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status st = HVD_OK;
    /* every rank of the node submitted it next: run here, no hand-off (caller_path.h) */
    if (process_set == HVD_PROCESS_SET_GLOBAL && hvdc__caller_path_run(hvdc__runtime, op, &st))
        return st;
    st = hvdc__submit(fn, process_set, op, &h);
    return st == HVD_OK ? wait_entered(fn, &h, 0, NULL) : st;
}

hvd_status hvd_wait(hvd_handle *handle) {
    HVDC_GATED("hvd_wait", wait_entered("hvd_wait", handle, 0, NULL));
}
