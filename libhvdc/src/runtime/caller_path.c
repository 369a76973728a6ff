/*
 * caller_path.c - a blocking all-reduce run on its caller's thread (caller_path.h); its state
 * that the rest of the runtime reads is caller_state.c's.
 * Any user thread.
 */
#include "runtime/caller_path.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "negotiation/cache.h"
#include "negotiation/node_vote.h"

/* How long a caller waits for the other ranks' votes before it submits its op as always.
 * Ranks that reach the same all-reduce together vote microseconds apart; a rank that is late
 * or never comes costs this much once (the op then waits in the round, where the stall check
 * names a rank that never comes, as before). A rank waiting here would wait for the late rank
 * in the round anyway. */
#define AGREE_WAIT_NS 200000

/* The ops the path covers (caller_path.h). */
static int covered_op(const hvdc_op *op) {
    const hvdc_wire_request *d = &op->desc;
    return d->kind == HVDC_KIND_ALLREDUCE && op->n_tensors == 1 && d->device < 0 &&
           d->op != HVD_ADASUM;
}

/* Whether this rank keeps the path off, told to the others by its hold bit: while rank 0
 * records a timeline, whose rows come from the background thread, and for good with rank 0's
 * HVD_REPORT or HVD_AUTOTUNE. Under executor_token. */
static int held_off(hvdc_runtime *rt) {
    int hold = rt->vote_hold_always || hvdc__timeline_recording(rt->executor.timeline);
    if (hold != rt->vote_hold) {
        rt->vote_hold = hold;
        hvdc__node_vote_set_hold(rt->vote, hold);
    }
    return hold;
}

/* Whether this rank has nothing queued or in flight (nor stopped); if so, op is this rank's
 * running op from now on (for duplicate names, and what it did last: whereabouts.h). */
static int claim_idle(hvdc_runtime *rt, const hvdc_op *op) {
    pthread_mutex_lock(&rt->queue_mutex);
    int idle = !rt->stopped && rt->in_flight.count == 0 &&
               atomic_load_explicit(&rt->caller_failed, memory_order_relaxed) == HVD_OK;
    if (idle) {
        rt->caller_name = op->desc.name;
        memcpy(rt->last_submitted, op->desc.name, strlen(op->desc.name) + 1);
        rt->last_submitted_ns = op->phase_at[HVDC_PHASE_QUEUED];
    }
    pthread_mutex_unlock(&rt->queue_mutex);
    return idle;
}

static void release_claim(hvdc_runtime *rt) {
    pthread_mutex_lock(&rt->queue_mutex);
    rt->caller_name = NULL;
    pthread_mutex_unlock(&rt->queue_mutex);
}

/* The ranks are out of step (a collective failed midway): the background thread stops the
 * runtime with this error, as it stops when one of its responses fails so. */
static void stop_runtime(hvdc_runtime *rt, hvd_status st) {
    snprintf(rt->caller_message, sizeof rt->caller_message, "%s", hvd_last_error());
    atomic_store_explicit(&rt->caller_failed, st, memory_order_release);
    pthread_mutex_lock(&rt->queue_mutex);
    pthread_cond_signal(&rt->queue_cond);
    pthread_mutex_unlock(&rt->queue_mutex);
}

/* Every rank voted for op's slot: the background thread's executor runs it, as one response
 * of one cached all-reduce (the fold order, and so the bits, are the round's). */
static hvd_status run_agreed(hvdc_runtime *rt, hvdc_op *op) {
    hvdc_wire_response r = {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_ALLREDUCE,
                            .n_names = 1};
    hvdc_gpu_pending *pending = NULL; /* host memory: none */
    op->phase_at[HVDC_PHASE_EXECUTE] = hvdc__now_ns();
    hvdc__clear_error();
    hvdc_outcome out = hvdc__execute(&rt->executor, &r, &op, 1, &pending);
    if (!out.in_step) stop_runtime(rt, out.status);
    return out.status;
}

/* The op ran: its phases count as a waiter's would (no queue, no round: the vote is its
 * negotiation), and its memory goes back to the spares. */
static void finish(hvdc_runtime *rt, hvdc_op *op, hvd_status st) {
    int64_t now = hvdc__now_ns();
    op->phase_at[HVDC_PHASE_DEVICE] = op->phase_at[HVDC_PHASE_WAKE] = now;
    pthread_mutex_lock(&rt->completion_mutex);
    if (st == HVD_OK) hvdc__phases_add(&rt->phases, op->phase_at, now);
    hvdc__op_recycle(&rt->handles, op);
    hvdc__op_take_spare(&rt->handles); /* for this thread's next op, as a submission does */
    pthread_mutex_unlock(&rt->completion_mutex);
}

int hvdc__caller_path_run(hvdc_runtime *rt, hvdc_op *op, hvd_status *status) {
    if (!rt->vote || !covered_op(op)) return 0;
    /* held: the background thread is running responses; it lets go once they completed (a
     * caller woken by its last op's completion comes here before that: not trying again
     * would send every following op through the round too) */
    pthread_mutex_lock(&rt->executor_token);
    int ran = 0;
    int64_t now = hvdc__now_ns();
    op->phase_at[HVDC_PHASE_QUEUED] = op->phase_at[HVDC_PHASE_NEGOTIATE] = now;
    int64_t slot = rt->token_cache ? hvdc__cache_peek(rt->token_cache, &op->desc) : -1;
    if (slot >= 0 && slot <= HVDC_NODE_VOTE_MAX_SLOT && !held_off(rt) && claim_idle(rt, op)) {
        /* this thread waits for the runtime now: the collective's waits may spin (poll.h) */
        atomic_fetch_add(&rt->poll.app_waiting, 1);
        if (hvdc__node_vote(rt->vote, (uint32_t)slot, AGREE_WAIT_NS, rt->poll.spin_ns > 0)) {
            if (rt->fault_caller_die) raise(SIGKILL); /* tests: the others go on without it */
            *status = run_agreed(rt, op);
            ran = 1;
        }
        atomic_fetch_sub(&rt->poll.app_waiting, 1);
        release_claim(rt);
    }
    pthread_mutex_unlock(&rt->executor_token);
    if (ran) finish(rt, op, *status);
    return ran;
}
