/*
 * device_work.h - the background thread's device responses in flight. Device work needs no
 * rounds once queued: the GPU backend wakes the thread when it finishes (hvdc__device_work_wake,
 * on a CUDA thread) and the thread completes its ops at once, asleep or mid-round. A caller
 * blocked in hvd_wait does not wait for that: it waits on the work's done event itself
 * (complete.h).
 * defines: HVDC_DEVICE_POLL_S, hvdc__device_work_wake, hvdc__device_work_keep,
 *          hvdc__device_work_finish, hvdc__device_work_due, hvdc__device_work_finish_due,
 *          hvdc__device_work_drain
 * Background thread (hvdc__device_work_wake: a CUDA thread).
 */
#ifndef HVDC_DEVICE_WORK_H
#define HVDC_DEVICE_WORK_H

#include "runtime/round.h"

/* How often device work in flight is looked at without a wake-up: a failed peer never lets
 * the work finish, so asynchronous NCCL errors and dead ranks are looked for this often. */
#define HVDC_DEVICE_POLL_S 0.05

/* The GPU backend's wake-up (the executor's gpu_wake; ctx: the runtime). */
void hvdc__device_work_wake(void *ctx);

/* Keeps a device response's ops (copied: ops is the round's scratch) until its work finishes,
 * and publishes its done event to their waiters. @return HVD_OK or HVD_ERR_NO_MEMORY. */
hvd_status hvdc__device_work_keep(round_state *s, hvdc_gpu_pending *pending, hvdc_op *const *ops,
                                  size_t n);

/* Completes the device work that has finished (all of it, with an error, once the backend is
 * aborted). stop: the status the runtime stops with (HVD_OK: it does not); work that fails now
 * fails with stop and why, so a rank's death reads as one everywhere. Never blocks.
 * @return HVD_OK; or, when stop was HVD_OK, the error of the first work that failed (message
 * recorded), which the runtime must stop with and tell the others: an asynchronous NCCL error
 * aborted this rank's communicators, and its peers may wait inside that collective for it.
 * A failure that a rank's death caused is reported as the death. */
hvd_status hvdc__device_work_finish(round_state *s, hvd_status stop, const char *why);

/* Whether device work is in flight and due a look: the backend woke the thread, or
 * HVDC_DEVICE_POLL_S passed since the last look. */
int hvdc__device_work_due(const round_state *s);

/* hvdc__device_work_finish(s, HVD_OK, NULL) when it is due, else HVD_OK. */
hvd_status hvdc__device_work_finish_due(round_state *s);

/* Before the thread exits: completes every device work item. stop != HVD_OK (a fatal stop)
 * aborts the NCCL communicators first, so nothing waits on the device. Else the queued work
 * finishes, the thread sleeping until the backend wakes it and looking for dead ranks (which
 * abort too), so this never hangs. @return HVD_OK; or, with stop HVD_OK, what failed the work
 * (message recorded): after a death hvd_shutdown must not finalize MPI. */
hvd_status hvdc__device_work_drain(round_state *s, hvd_status stop, const char *why);

#endif
