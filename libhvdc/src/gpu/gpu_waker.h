/*
 * gpu_waker.h - how finished device work wakes the background thread without anyone polling.
 *
 * After each collective the backend queues a host function on its stream
 * (cudaLaunchHostFunc); CUDA runs it on a thread of its own once everything before it on the
 * stream has finished, and it calls the runtime's wake function (which sets a flag and signals
 * the background thread's condition variable). The waker is what that host function holds: it
 * may run after the backend, or the whole runtime, is gone (device work outlives an aborted
 * communicator), so the waker is reference counted and closed, never freed under a queued
 * host function:
 *
 *   create (1 ref) ──hold (+1 per queued host function)──> fire (calls wake unless closed, -1)
 *          └──────── close (no more wakes, -1) ──> freed when the last reference goes
 *
 * Plain C and pthreads; compiled in every build (tests/unit/test_gpu_waker.c drives it by hand).
 * defines: hvdc_gpu_waker, hvdc__gpu_waker_create, hvdc__gpu_waker_hold,
 *          hvdc__gpu_waker_fire, hvdc__gpu_waker_close
 * create/close: the background thread; hold: the background thread; fire: any thread (CUDA's).
 */
#ifndef HVDC_GPU_WAKER_H
#define HVDC_GPU_WAKER_H

typedef struct hvdc_gpu_waker hvdc_gpu_waker;

/* wake(ctx) runs on the firing thread, must be short and must not call CUDA. wake may be NULL
 * (fires do nothing). @return the waker, or NULL when out of memory. */
hvdc_gpu_waker *hvdc__gpu_waker_create(void (*wake)(void *ctx), void *ctx);

/* One more reference, for a host function about to be queued. NULL-safe. */
void hvdc__gpu_waker_hold(hvdc_gpu_waker *waker);

/* The host function's body (void (*)(void *), as cudaLaunchHostFunc wants it): calls wake
 * unless the waker was closed, then drops the reference the host function held. */
void hvdc__gpu_waker_fire(void *waker);

/* No wake calls after this returns (one in progress has finished); drops the creator's
 * reference. NULL-safe. */
void hvdc__gpu_waker_close(hvdc_gpu_waker *waker);

#endif
