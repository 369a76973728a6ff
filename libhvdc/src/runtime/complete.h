/*
 * complete.h - how an op completes, and who frees it.
 *
 * The background thread completes every op (hvdc__complete_ops). A device op is queued on the
 * device before it completes; from then on a thread waiting for it may complete it itself
 * from the op's done event (hvdc__complete_on_device), skipping the wake-ups through the
 * background thread. Whoever comes first completes it; the other's completion is a no-op.
 *
 * An op is then held by up to three parties, and the last to let go frees it (under
 * completion_mutex): its handle (until hvd_wait releases it: op->released), the background
 * thread's device work (op->on_device), and waiters inside a device wait (op->device_waiting).
 *
 *   background: queued on device ─ hvdc__publish_on_device ─> waiters use op->device_done
 *   background: work finished ──── hvdc__complete_ops, hvdc__drop_device_hold
 *   hvd_wait:   device_done set ── hvdc__complete_on_device ─> done (or falls back to waiting)
 *   hvd_wait_on_stream: device_done set ── stream waits on it, the names are freed ─> released
 *
 * defines: hvdc__complete_ops, hvdc__publish_on_device, hvdc__drop_device_hold,
 *          hvdc__complete_on_device, hvdc__wait_completion, hvdc__wait_for_op,
 *          hvdc__stream_wait_for_op, hvdc__poll_op,
 *          hvdc__release_op, hvdc__fail_everything, hvdc__stop_reason, hvdc__note_told
 * Any thread; each function takes the runtime's locks it needs (both at once only where a
 * waiter frees names: queue_mutex inside completion_mutex).
 */
#ifndef HVDC_COMPLETE_H
#define HVDC_COMPLETE_H

#include "runtime/runtime.h"

/* Completes ops with status and message (unless completed already) and wakes waiters. */
void hvdc__complete_ops(hvdc_runtime *rt, hvdc_op **ops, size_t n, hvd_status status,
                        const char *message);

/* Background thread, once ops are queued on the device: done_event (cudaEvent_t) fires when
 * their results are written. The ops stay held by the background thread until
 * hvdc__drop_device_hold. */
void hvdc__publish_on_device(hvdc_runtime *rt, hvdc_op **ops, size_t n, void *done_event);

/* Background thread, after completing device work: lets go of ops; frees those released. */
void hvdc__drop_device_hold(hvdc_runtime *rt, hvdc_op **ops, size_t n);

/* With completion_mutex held, op not done: if op is queued on the device and no other thread
 * is waiting on its event, waits on it (block) or looks (not block) with the mutex released,
 * and completes op when its work has finished, with the ops fused with it (whose waits then
 * find them done). @return 1 when it looked at the device (op may
 * now be done; look it up again), 0 when the caller must wait for the background thread. */
int hvdc__complete_on_device(hvdc_runtime *rt, hvdc_op *op, int block);

/* With completion_mutex held: waits for the next change announced on completion_cond (or a
 * spurious wake-up): first spinning for rt->poll.handoff_spin_ns with the mutex released, where
 * a CPU is spare, then one pthread_cond_wait if nothing changed. Counted in
 * rt->poll.app_waiting meanwhile (the background thread's waits spin only while someone waits
 * here: base/poll.h). */
void hvdc__wait_completion(hvdc_runtime *rt);

/* With completion_mutex held: blocks until the op of handle local (its index in rt->handles)
 * is done, waiting on its done event where it can. @return the op, done; NULL when the handle
 * is not live (or was released meanwhile). hvd_wait. */
hvdc_op *hvdc__wait_for_op(hvdc_runtime *rt, hvd_handle local);

/* With completion_mutex held: waits until the op of handle local is done or queued on the
 * device; a queued device op is then waited for by stream, on the device
 * (rt->device_stream_wait), and its names are taken out of in_flight before this returns, so
 * they are free for the next submission. @return the op, done or not (the caller releases its
 * handle); NULL when the handle is not live (or was released meanwhile). *waited: the stream
 * wait's status (the op is returned, its handle to stay live, when it failed).
 * hvd_wait_on_stream. */
hvdc_op *hvdc__stream_wait_for_op(hvdc_runtime *rt, hvd_handle local, void *stream,
                                  hvd_status *waited);

/* With completion_mutex held: the op of handle local, completed first if its done event has
 * fired; NULL when the handle is not live. Never blocks on the device. hvd_poll. */
hvdc_op *hvdc__poll_op(hvdc_runtime *rt, hvd_handle local);

/* With completion_mutex held, op done and its handle removed: recycles op, or leaves that to the
 * last holder. */
void hvdc__release_op(hvdc_runtime *rt, hvdc_op *op);

/* Fails every op not yet completed (queued or announced) with status and message, and marks
 * the runtime stopped so later submissions fail with them. The background thread when it
 * stops; the watchdog when a rank dies inside a blocking MPI call (watchdog.h). */
void hvdc__fail_everything(hvdc_runtime *rt, hvd_status status, const char *message);

/* Why the runtime stopped (hvdc__fail_everything's status and message), and whether it told
 * every rank (hvdc__note_told), read under queue_mutex: a background thread left behind in MPI
 * may still be stopping while hvd_shutdown reads them. */
void hvdc__stop_reason(hvdc_runtime *rt, hvd_status *status, char *message, size_t len,
                       int *told);

/* The background thread stopped on an error of its own and told every rank so. */
void hvdc__note_told(hvdc_runtime *rt);

#endif
