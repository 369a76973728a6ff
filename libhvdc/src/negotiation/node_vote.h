/*
 * node_vote.h - the ranks of one node agree, through shared memory and without a message,
 * that the next operation of every one of them is the same cached all-reduce (its response
 * cache slot), so each caller can run it on its own thread (runtime/caller_path.h).
 *
 * One word in a segment shared by the node's ranks holds the vote in progress:
 *
 *   bits  0..15 votes   ranks that voted in this epoch     one CAS moves the word from
 *        16..31 left    voters that have read the verdict  state to state, so every rank
 *        32..33 state   open, go (all voted), abort        reads the same verdict:
 *        34..47 epoch   bumped by each new vote (ABA guard)
 *        48..63 slot    the cache slot voted on            open ──all voted──> go
 *                                                            └──timeout, mismatch──> abort
 *
 * The first rank to vote opens an epoch with its slot; the others add their bits; the vote
 * that completes the set turns the state to go. A voter that waits past its deadline, or sees
 * another rank unable to take part, turns it to abort, and so does a rank arriving with
 * another slot: then nobody runs it here and every voter falls back to the negotiation round.
 * An epoch is over once every voter has read its verdict (left == votes); only then may a new
 * one open, so a voter never misses its own verdict. Two more words hold, per rank, a busy bit
 * (it has operations with the background thread, which this path never overtakes) and a hold
 * bit (it keeps the path off: a timeline recording, HVD_REPORT, autotuning): a voter falls
 * back at once on another rank's hold bit, and after an eighth of its wait on a busy bit (a
 * rank whose last op is being completed clears it within microseconds).
 *
 * defines: hvdc_node_vote, HVDC_NODE_VOTE_MAX_RANKS, HVDC_NODE_VOTE_MAX_SLOT,
 *          hvdc__node_vote_create, _destroy, hvdc__node_vote, _set_busy, _set_hold
 * Create and destroy: the thread that calls hvd_init; the rest: any one thread of a rank at
 * a time for the vote (its caller's token), any thread for the busy and hold bits.
 */
#ifndef HVDC_NODE_VOTE_H
#define HVDC_NODE_VOTE_H

#include <mpi.h>
#include <stdint.h>

#include "hvdc.h"

#define HVDC_NODE_VOTE_MAX_RANKS 16   /* ranks of a node: one bit each in votes and left */
#define HVDC_NODE_VOTE_MAX_SLOT 65535 /* slots a vote can name: 16 bits */

typedef struct hvdc_node_vote hvdc_node_vote;

/* Collective over local (2 to HVDC_NODE_VOTE_MAX_RANKS ranks of one node). A failure is
 * returned on the rank that met it only: the caller agrees on the outcome. */
hvd_status hvdc__node_vote_create(MPI_Comm local, hvdc_node_vote **out);
void hvdc__node_vote_destroy(hvdc_node_vote *vote); /* NULL-safe, not collective */

/* Votes to run cache slot next and waits, at most wait_ns, for every rank of the node to vote
 * the same. spin: pause with the CPU's relax hint (a CPU for every rank), else yield it.
 * @return 1: every rank voted for slot and each runs it now; 0: nobody runs it this way. */
int hvdc__node_vote(hvdc_node_vote *vote, uint32_t slot, int64_t wait_ns, int spin);

/* This rank's busy and hold bits (above). */
void hvdc__node_vote_set_busy(hvdc_node_vote *vote, int busy);
void hvdc__node_vote_set_hold(hvdc_node_vote *vote, int hold);

#endif
