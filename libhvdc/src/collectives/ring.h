/*
 * ring.h - the ring all-gather over MPI point-to-point, for host memory: the second half of
 * every host all-reduce (allreduce.h), after a reduce-scatter has left rank r owning block r.
 *
 *   rank 0 -> rank 1 -> rank 2 -> ... -> rank N-1 -> rank 0      (each sends to its right)
 *
 *   N = 3, blocks B0 B1 B2 (block.h); rank r starts with block r finished:
 *     step 0: 0 sends B0 to 1, 1 sends B1 to 2, 2 sends B2 to 0
 *     step 1: 0 sends B2 to 1, 1 sends B0 to 2, 2 sends B1 to 0     -> every rank has all
 *
 * N-1 steps; each rank sends and receives K(N-1)/N bytes for a K-byte buffer, whatever N. The
 * blocks are copied, never combined, so the all-gather adds no arithmetic and cannot change a
 * bit of the reduce-scatter's results. Each step's block is cut into segments with a bounded
 * window in flight each way. Every wait checks `watch`, so a dead neighbour fails the
 * collective (HVD_ERR_RANK_FAILED) instead of hanging it.
 *
 * defines: hvdc__ring_allgather_blocks
 * Background thread.
 */
#ifndef HVDC_RING_H
#define HVDC_RING_H

#include <mpi.h>
#include <stddef.h>

#include "base/buffer.h"
#include "base/liveness.h"
#include "collectives/block.h"
#include "hvdc.h"

/* Each rank r holds block r of buf; afterwards every rank holds all blocks. */
hvd_status hvdc__ring_allgather_blocks(MPI_Comm comm, void *buf, size_t count, hvd_dtype dtype,
                                       hvdc_liveness *watch);

#endif
