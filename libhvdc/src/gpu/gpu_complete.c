/*
 * gpu_complete.c - how a queued collective completes (see gpu.h): an event from a pool after
 * its work, a host function behind it that wakes the background thread (gpu_waker.h; queued
 * once the waiters have the event, so its CUDA calls are off a lone op's path), polls that
 * never block, and aborting the
 * communicators when NCCL reports an asynchronous error or the runtime stops.
 *
 *   stream: ... NCCL ... unpack | record(event) | next collective ...
 *   notify stream:         wait(event) | host function ──> waker ──> wake(ctx)
 *   background thread, woken:   cudaEventQuery(event) == done ──> complete the handles,
 *                               event back to the pool
 *
 * A caller waiting in hvd_wait may instead wait on the event itself (hvdc__gpu_event_finished,
 * on its own thread): that skips two thread wake-ups (host function -> background thread ->
 * waiter) per blocking call.
 *
 * Events are reused because creating one per collective costs a driver call each time; a
 * pooled event is re-recorded only after its record was freed, so it never marks two things.
 * Background thread (the host function runs on a CUDA thread and touches only the waker;
 * hvdc__gpu_event_finished and hvdc__gpu_stream_wait_on run on the caller's).
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/device_abort.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_internal.h"

/* An event from the pool, or a new one. */
static hvd_status take_event(hvdc_gpu *gpu, cudaEvent_t *out) {
    hvd_status st = HVD_OK;
    if (gpu->n_spare > 0) {
        *out = gpu->spare[--gpu->n_spare];
        return HVD_OK;
    }
    CHECK_CUDA(cudaEventCreateWithFlags(out, cudaEventDisableTiming));
fail:
    return st;
}

/* Back to the pool (or destroyed when the pool cannot grow). */
static void put_event(hvdc_gpu *gpu, cudaEvent_t event) {
    if (gpu->n_spare == gpu->cap_spare) {
        size_t cap = gpu->cap_spare ? 2 * gpu->cap_spare : 16;
        cudaEvent_t *grown = realloc(gpu->spare, cap * sizeof *grown);
        if (!grown) {
            cudaEventDestroy(event); /* legal before it fired: released when it does */
            return;
        }
        gpu->spare = grown;
        gpu->cap_spare = cap;
    }
    gpu->spare[gpu->n_spare++] = event;
}

void hvdc__gpu_events_free(hvdc_gpu *gpu) {
    for (size_t i = 0; i < gpu->n_spare; i++) cudaEventDestroy(gpu->spare[i]);
    free(gpu->spare);
    gpu->spare = NULL;
    gpu->n_spare = gpu->cap_spare = 0;
}

hvd_status hvdc__gpu_record(hvdc_gpu *gpu, hvdc_gpu_pending **out) {
    hvd_status st = HVD_OK;
    hvdc_gpu_pending *p = calloc(1, sizeof *p);
    if (!p) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory recording a GPU collective");
    p->gpu = gpu;
    CHECK(take_event(gpu, &p->done));
    CHECK_CUDA(cudaEventRecord(p->done, gpu->stream));
    *out = p;
    return HVD_OK;
fail:
    hvdc__gpu_pending_free(p);
    return st;
}

void hvdc__gpu_pending_notify(hvdc_gpu_pending *p) {
    hvdc_gpu *gpu = p ? p->gpu : NULL;
    if (!gpu || !gpu->waker) return;
    /* on the side stream: the stream would hold the next collective until the host function
     * returned, a CUDA thread's wake-up later */
    hvdc__gpu_waker_hold(gpu->waker);
    if (cudaStreamWaitEvent(gpu->notify, p->done, 0) != cudaSuccess ||
        cudaLaunchHostFunc(gpu->notify, hvdc__gpu_waker_fire, gpu->waker) != cudaSuccess) {
        (void)cudaGetLastError();
        /* drops the hold; the background thread then polls the event (gpu.h) */
        hvdc__gpu_waker_fire(gpu->waker);
    }
}

/* Aborts every communicator once and remembers why; later calls fail with that message. */
static void mark_broken(hvdc_gpu *gpu, const char *why) {
    if (gpu->broken) return;
    snprintf(gpu->broken_msg, sizeof gpu->broken_msg, "%s", why);
    gpu->broken = 1;
    /* before the abort: a waiter whose event fires because its kernels were aborted sees it,
     * and so does a save of what a stream computed from them (base/device_abort.h) */
    hvdc__device_abort_note(why);
    if (gpu->aborted) atomic_store(gpu->aborted, 1);
    ncclComm_t comms[3] = {gpu->comm, gpu->local_comm, gpu->cross_comm};
    for (int i = 0; i < 3; i++)
        if (comms[i]) ncclCommAbort(comms[i]);
    gpu->comm = gpu->local_comm = gpu->cross_comm = NULL;
}

void hvdc__gpu_abort(hvdc_gpu *gpu, const char *why) {
    if (!gpu) return;
    char message[256];
    snprintf(message, sizeof message, "the GPU communicators were aborted on rank %d: %s",
             gpu->topo->rank, why);
    mark_broken(gpu, message);
}

/* After an asynchronous NCCL error. */
static hvd_status async_error(hvdc_gpu *gpu, ncclComm_t comm, ncclResult_t err) {
    char message[256];
    const char *detail = ncclGetLastError(comm); /* often empty */
    int has_detail = detail && *detail;
    snprintf(message, sizeof message, "NCCL reported an asynchronous error on rank %d: %s%s%s%s; "
             "the GPU communicator was aborted", gpu->topo->rank, ncclGetErrorString(err),
             has_detail ? " (" : "", has_detail ? detail : "", has_detail ? ")" : "");
    mark_broken(gpu, message);
    return hvdc__fail(HVD_ERR_NCCL, "%s", gpu->broken_msg);
}

hvd_status hvdc__gpu_pending_poll(hvdc_gpu_pending *p, int *done) {
    *done = 1;
    if (!p) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvdc__gpu_pending_poll(NULL)");
    hvdc_gpu *gpu = p->gpu;
    if (gpu->broken) return hvdc__fail(HVD_ERR_NCCL, "%s", gpu->broken_msg);
    cudaError_t err = cudaEventQuery(p->done);
    if (err == cudaSuccess) return HVD_OK;
    if (err != cudaErrorNotReady)
        return hvdc__fail(HVD_ERR_CUDA, "a GPU collective failed on rank %d (cudaEventQuery at "
                          "%s:%d): %s (%s)", gpu->topo->rank, __FILE__, __LINE__,
                          cudaGetErrorString(err), cudaGetErrorName(err));
    ncclComm_t comms[3] = {gpu->comm, gpu->local_comm, gpu->cross_comm};
    for (int i = 0; i < 3; i++) {
        ncclResult_t async = ncclSuccess;
        if (!comms[i]) continue;
        ncclResult_t res = ncclCommGetAsyncError(comms[i], &async);
        if (res != ncclSuccess) return async_error(gpu, comms[i], res);
        if (async != ncclSuccess && async != ncclInProgress)
            return async_error(gpu, comms[i], async);
    }
    *done = 0;
    return HVD_OK;
}

void *hvdc__gpu_pending_event(const hvdc_gpu_pending *p) { return p ? (void *)p->done : NULL; }

int hvdc__gpu_event_finished(void *event, const atomic_int *aborted, int block) {
    if (!event) return 0;
    cudaError_t err = block ? cudaEventSynchronize((cudaEvent_t)event)
                            : cudaEventQuery((cudaEvent_t)event);
    if (err != cudaSuccess) {
        if (err != cudaErrorNotReady) (void)cudaGetLastError(); /* the background thread reports it */
        return 0;
    }
    return !aborted || !atomic_load(aborted);
}

hvd_status hvdc__gpu_stream_wait_on(void *stream, void *event) {
    hvd_status st = HVD_OK;
    CHECK_CUDA(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
fail:
    return st;
}

void hvdc__gpu_pending_free(hvdc_gpu_pending *p) {
    if (!p) return;
    if (p->done) put_event(p->gpu, p->done);
    free(p);
}
