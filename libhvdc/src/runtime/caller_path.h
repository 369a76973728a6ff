/*
 * caller_path.h - a blocking all-reduce that every rank of the node submitted next runs on its
 * caller's own thread: no hand-off to the background thread and back, no round with rank 0.
 *
 *   hvd_allreduce ─> take the executor token ─> the request's cache slot ─> this rank idle?
 *     ─> vote for the slot with every rank of the node (negotiation/node_vote.h)
 *     ─> all voted it: hvdc__execute, the background thread's own code; complete the op here
 *     ─> anything else, at any step: submitted as always (submit.c), nothing changed
 *
 * Covered: single-tensor host all-reduces (not Adasum) of the global set, by hvd_allreduce
 * or hvd_allreduce_with_options (the blocking calls), that hit the response cache, in a job
 * on one node of 2 to 16 ranks using the shared-memory all-reduce, while nothing of this rank
 * is queued or in flight.
 * HVD_CALLER_THREAD=0 turns it off.
 *
 * Why the ranks stay in step: whoever runs collectives on the executor (and so on the node's
 * segment and the collectives' communicator) holds the rank's executor token, the background
 * thread while it runs responses, a caller from its vote to its op's end. A caller votes only
 * while its rank has nothing queued or in flight, so every response that could touch the
 * executor meanwhile names an op submitted after the vote, on every rank, and runs after the
 * caller's op everywhere. The cache's slots are the same on every rank once each has
 * completed everything it submitted, so one slot is one request everywhere (cache.h).
 *
 * A collective that fails midway (a peer died: HVD_ERR_RANK_FAILED, found by the same
 * liveness checks as the background thread's waits) fails the op and stops the runtime, as
 * it stops when such a response fails: the background thread is woken to stop with it.
 *
 * defines: hvdc__caller_path_run (caller_path.c), hvdc__caller_path_start,
 *          hvdc__caller_path_free, hvdc__caller_path_track, hvdc__caller_path_owns,
 *          hvdc__caller_path_failure (caller_state.c)
 * Any user thread (start and free: the thread that calls hvd_init and hvd_shutdown).
 */
#ifndef HVDC_CALLER_PATH_H
#define HVDC_CALLER_PATH_H

#include "runtime/runtime.h"

/* hvd_init, collective over the global runtime's ranks: the node's vote where the path is
 * covered (above); where it cannot be had, the path stays off (rank 0 says why) and hvd_init
 * goes on. @return HVD_OK, or an MPI error of the agreement. */
hvd_status hvdc__caller_path_start(hvdc_runtime *rt);
void hvdc__caller_path_free(hvdc_runtime *rt); /* not collective */

/* Runs op here when every rank of the node agrees (above); it is then freed, and *status is
 * its outcome (the message recorded). @return 1 when it ran, 0 when op is untouched and must
 * be submitted. */
int hvdc__caller_path_run(hvdc_runtime *rt, hvdc_op *op, hvd_status *status);

/* With queue_mutex held, after rt->in_flight changed: publishes whether this rank has work
 * with its background thread, so the others' callers fall back at once. */
void hvdc__caller_path_track(hvdc_runtime *rt);

/* With queue_mutex held: whether a caller of this rank is running an op named name. */
int hvdc__caller_path_owns(const hvdc_runtime *rt, const char *name);

/* The background thread: HVD_OK, or the error a caller's op failed with midway (recorded as
 * this thread's message), on which the runtime stops. */
hvd_status hvdc__caller_path_failure(hvdc_runtime *rt);

#endif
