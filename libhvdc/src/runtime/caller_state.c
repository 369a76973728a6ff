/*
 * caller_state.c - what the rest of the runtime knows of the caller's path (caller_path.h): the
 * node's vote, made at hvd_init where the job's shape is covered; this rank's busy bit; the op
 * a caller runs; a caller's failure, which stops the background thread.
 * start and free: the thread that calls hvd_init and hvd_shutdown; the rest: any thread.
 */
#include "runtime/caller_path.h"

#include <string.h>

#include "base/fault.h"
#include "base/log.h"
#include "base/status.h"
#include "negotiation/node_vote.h"
#include "runtime/agree.h"

/* The job's shape the path covers (caller_path.h): the same answer on every rank. */
static int covered_runtime(const hvdc_runtime *rt) {
    const hvdc_executor *ex = &rt->executor;
    return rt->config.caller_thread && rt->config.cache_capacity > 0 && ex->shm &&
           !ex->hierarchical && rt->topo.size == rt->topo.local_size && rt->topo.size >= 2 &&
           rt->topo.size <= HVDC_NODE_VOTE_MAX_RANKS;
}

hvd_status hvdc__caller_path_start(hvdc_runtime *rt) {
    if (!covered_runtime(rt)) return HVD_OK;
    hvd_status st = hvdc__agree(rt->control_comm,
                                hvdc__node_vote_create(rt->executor.local_comm, &rt->vote));
    if (st != HVD_OK) {
        if (rt->topo.rank == 0)
            HVDC_LOG(HVDC_LOG_WARNING, "all-reduces stay on the background thread (no node "
                     "vote: %s)", hvd_last_error());
        hvdc__node_vote_destroy(rt->vote);
        rt->vote = NULL;
        hvdc__clear_error();
        return HVD_OK;
    }
    /* rank 0's report and autotuning count what the background thread runs */
    rt->vote_hold_always = rt->topo.rank == 0 && (rt->config.report_s > 0 || rt->config.autotune);
    rt->vote_hold = rt->vote_hold_always;
    if (rt->vote_hold) hvdc__node_vote_set_hold(rt->vote, 1);
    rt->fault_caller_die = hvdc__fault("die_in_caller_path"); /* read once, off the hot path */
    return HVD_OK;
}

void hvdc__caller_path_free(hvdc_runtime *rt) {
    hvdc__node_vote_destroy(rt->vote);
    rt->vote = NULL;
}

void hvdc__caller_path_track(hvdc_runtime *rt) {
    if (!rt->vote) return;
    int busy = rt->in_flight.count > 0;
    if (busy == rt->vote_busy) return;
    rt->vote_busy = busy;
    hvdc__node_vote_set_busy(rt->vote, busy);
}

int hvdc__caller_path_owns(const hvdc_runtime *rt, const char *name) {
    return rt->caller_name && strcmp(rt->caller_name, name) == 0;
}

hvd_status hvdc__caller_path_failure(hvdc_runtime *rt) {
    hvd_status st = atomic_load_explicit(&rt->caller_failed, memory_order_acquire);
    return st == HVD_OK ? HVD_OK : hvdc__fail(st, "%s", rt->caller_message);
}

