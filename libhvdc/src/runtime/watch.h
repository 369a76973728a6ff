/*
 * watch.h - the host watch: a thread of its own in every process, which neither the
 * application's threads nor the background thread can hold up, on a communicator of its own.
 *
 * 1. Heartbeats around a ring of the ranks: every HEARTBEAT_S each rank sends one to the next
 *    rank and watches the previous one. A rank whose predecessor has sent nothing for
 *    HVD_HOST_TIMEOUT seconds (its host down, frozen or cut off, or its process stopped)
 *    declares it lost (base/liveness.h: every wait of this process fails, naming the host and
 *    its ranks) and tells every rank, which declare it too. A rank busy computing still
 *    answers: the heartbeats come from this thread, not the application's. A rank that stops
 *    says goodbye to its successor first, so an early hvd_shutdown is no loss.
 *
 *        rank 0 ──> rank 1 ──> rank 2 ──> rank 3 ──┐     each watches the one before it
 *          ^───────────────────────────────────────┘
 *
 * 2. Rank 0's stall verdict: the stall check (exchange.h) hands the watch one line per rank that
 *    others wait for; the watch asks those ranks where they are (whereabouts.h), waits at most
 *    VERDICT_WAIT_S for their answers, and logs one verdict grouped by rank. Every rank's watch
 *    answers such questions, whatever its other threads are doing.
 *
 * defines: hvdc_watch, hvdc__watch_start, hvdc__watch_stop, hvdc__watch_verdict
 * Start and stop: the thread that calls hvd_init / hvd_shutdown; verdict: rank 0's background
 * thread; the rest runs on the watch's own thread.
 */
#ifndef HVDC_WATCH_H
#define HVDC_WATCH_H

#include <mpi.h>
#include <stddef.h>

#include "base/peers.h"
#include "hvdc.h"

typedef struct hvdc_watch hvdc_watch;

/* Writes this rank's whereabouts (several lines, each starting with indent) into out. */
typedef void (*hvdc_describe_fn)(void *ctx, const char *indent, char *out, size_t len);

/* Collective over comm (duplicates it; comm itself carries the failure notices that liveness
 * waits look for, base/liveness.h, and must outlive the watch). timeout_s: HVD_HOST_TIMEOUT (0:
 * no heartbeats; the watch still answers rank 0). peers and ctx must outlive the watch.
 * @return HVD_OK and *out, or HVD_ERR_MPI / HVD_ERR_NO_MEMORY / HVD_ERR_INTERNAL. */
hvd_status hvdc__watch_start(MPI_Comm comm, const hvdc_peers *peers, double timeout_s,
                             hvdc_describe_fn describe, void *ctx, hvdc_watch **out);

/* Says goodbye to the successor, stops the thread, frees (but for its communicator, kept until
 * the process ends: heartbeats may still come on it). NULL-safe. */
void hvdc__watch_stop(hvdc_watch *watch);

/* Rank 0: logs a stall verdict once the ranks asked have answered: head, then for each of the
 * n ranks its line and its whereabouts. Dropped while an earlier verdict still waits to be
 * taken. Copies everything; never blocks on the network. */
void hvdc__watch_verdict(hvdc_watch *watch, const char *head, const int *ranks,
                         const char *const *lines, int n);

#endif
