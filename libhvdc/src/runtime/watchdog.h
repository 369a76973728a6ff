/*
 * watchdog.h - noticing a dead rank while the background thread is inside a blocking MPI call.
 *
 * HVD_CPU_ALLREDUCE=mpi runs MPI_Allreduce itself below some size (execute.c says why): Open
 * MPI's nonblocking MPI_Iallreduce, which the background thread could poll between liveness
 * checks, is slower there. But a blocking call never returns once a peer dies (Open MPI 4.1 under
 * --enable-recovery waits forever). So while such a call runs, a watchdog thread makes the
 * liveness checks (liveness.h) the background thread cannot, every HVDC_LIVENESS_PERIOD_S of
 * the same call. On a death it runs on_death (which aborts the GPU backend's communicators and
 * fails every op of the runtime with HVD_ERR_RANK_FAILED, so no caller waits forever, on the
 * host or in a device wait) before the background thread can leave the call;
 * hvdc__watchdog_leave then returns 1 and the background thread must touch no op again: their
 * waiters may have freed them. It may also never leave: hvd_shutdown then does not wait for it
 * (init.c).
 *
 *   background: enter ── MPI_Allreduce ──────────────────────────── leave: fired? 
 *   watchdog:          ... every period: same call still in? liveness check ─ death: on_death
 *
 * Enter and leave take an uncontended mutex and wake nobody: the watchdog sleeps in periods.
 *
 * defines: hvdc_watchdog, hvdc__watchdog_start, _stop, _enter, _leave, _fired, _message
 * Start/stop: the thread that starts and frees the runtime; enter/leave: the background thread;
 * fired: any thread.
 */
#ifndef HVDC_WATCHDOG_H
#define HVDC_WATCHDOG_H

#include "base/liveness.h"

typedef struct hvdc_watchdog hvdc_watchdog;

/* Starts the watchdog thread over liveness (which, during a call, only it touches).
 * @return HVD_OK and *out, or HVD_ERR_NO_MEMORY / HVD_ERR_INTERNAL (no thread). */
hvd_status hvdc__watchdog_start(hvdc_liveness *liveness, void (*on_death)(void *ctx, const char *why),
                                void *ctx, hvdc_watchdog **out);

/* Stops and joins the watchdog thread, frees it. NULL-safe. Not while a call is inside. */
void hvdc__watchdog_stop(hvdc_watchdog *watchdog);

/* Brackets one blocking call of the background thread. leave @return 0, or 1 when a rank died
 * during the call and on_death has run: the call's results and the ops are no longer this
 * thread's (hvdc__watchdog_message says why). */
void hvdc__watchdog_enter(hvdc_watchdog *watchdog);
int hvdc__watchdog_leave(hvdc_watchdog *watchdog);
/* Whether on_death has run (then for good: the background thread left, or never leaves, the
 * call it fired in, and stops). NULL-safe: 0. */
int hvdc__watchdog_fired(hvdc_watchdog *watchdog);
const char *hvdc__watchdog_message(const hvdc_watchdog *watchdog);

#endif
