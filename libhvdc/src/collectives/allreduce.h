/*
 * allreduce.h - the host all-reduces, and the reduce-scatter they start with. Every one of them
 * combines each element in RANK ORDER:
 *
 *     result[i] = ((x0[i] op x1[i]) op x2[i]) ... op x{N-1}[i]        (x_r: rank r's input)
 *
 * so an element's bits depend only on the ranks' values: not on its offset in a fused buffer,
 * which tensors were fused with it, the fusion threshold, timing, the buffer's size or which
 * algorithm ran, and every rank ends with the same bits (one rank computes each element and
 * the others copy it, or every rank computes it alike), NaN payloads included. Two-level
 * (HVD_HIERARCHICAL_ALLREDUCE): rank order inside each node, then node order
 * (cross rank) across nodes, for every size: fixed for a given host layout. (Each cross
 * communicator orders its nodes by its members' world ranks; with by-slot or by-node placement
 * that is the same node order for every local rank. A rankfile that breaks this would make the
 * node order depend on the block, which nothing checks.)
 *
 * Direct reduce-scatter (buffers over small_bytes), N = 3, blocks B0 B1 B2 (block.h):
 *
 *   rank 0: [B0 B1 B2]   rank p receives block p of every peer at once and folds the N
 *   rank 1: [B0 B1 B2]   copies in rank order (fold.h): rank 1's B1 = (x0 op x1) op x2.
 *   rank 2: [B0 B1 B2]   Each block goes out in segments, a window of them in flight per peer
 *                        while the segment that has arrived from every peer is folded.
 *
 * then the ring all-gather (ring.h) passes the finished blocks around (no arithmetic). Each
 * rank sends and receives K(N-1)/N bytes in each phase, 2K(N-1)/N in all for a K-byte buffer:
 * the ring's traffic, in N-1 concurrent messages instead of N-1 steps of one. At N = 2 it is
 * exactly the ring's exchange.
 *
 * One-step exchange (buffers up to small_bytes): every rank sends its whole buffer to every
 * peer, receives theirs, and folds all N in rank order itself: one round of latency instead of
 * log2(N) (recursive doubling) or 2(N-1) (the ring), for K(N-1) bytes each way.
 *
 * Two-level (several ranks per node, the same number on every node):
 *
 *   node A: a0 a1      1. reduce-scatter inside each node (local rank order): local rank l
 *   node B: b0 b1         ends with block l summed over its node
 *                      2. all-reduce of block l across nodes (node order), among the ranks with
 *                         local rank l (a0-b0 and a1-b1 in parallel, each on 1/local_size)
 *                      3. ring all-gather inside each node
 *   (up to small_bytes: a one-step exchange inside the node, then one across nodes)
 *
 * Every wait checks `watch`, so a dead peer fails the collective (HVD_ERR_RANK_FAILED) instead
 * of hanging it. HVD_AVERAGE sums here; the caller divides.
 *
 * defines: hvdc__allreduce, hvdc__hierarchical_allreduce (allreduce.c),
 *          hvdc__direct_reduce_scatter, hvdc__direct_allreduce (direct.c),
 *          hvdc__small_allreduce (small.c), and the scratch each needs (*_scratch_bytes)
 * Background thread.
 */
#ifndef HVDC_ALLREDUCE_H
#define HVDC_ALLREDUCE_H

#include <mpi.h>
#include <stddef.h>

#include "base/buffer.h"
#include "base/liveness.h"
#include "collectives/shm.h"
#include "hvdc.h"

/* dst = every rank's src in rank order (src may equal dst): the one-step exchange up to
 * small_bytes, else the direct reduce-scatter and the ring all-gather. scratch: receive space. */
hvd_status hvdc__allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                           hvd_dtype dtype, hvd_reduce_op op, size_t small_bytes,
                           hvdc_buffer *scratch, hvdc_liveness *watch);

/* The two-level all-reduce: local = the ranks of this node, cross = the ranks with this local
 * rank, one per node. Needs the same number of ranks on every node (the caller checks). With
 * shm (the node's segment, shm.h; else NULL) the inside-node stages go through it. */
hvd_status hvdc__hierarchical_allreduce(MPI_Comm local, MPI_Comm cross, hvdc_shm *shm,
                                        const void *src, void *dst, size_t count,
                                        hvd_dtype dtype, hvd_reduce_op op, size_t small_bytes,
                                        hvdc_buffer *scratch, hvdc_liveness *watch);

/* Leaves block `rank` (block.h) of work holding every rank's block `rank` of src folded in
 * rank order; writes no other part of work. src may equal work. */
hvd_status hvdc__direct_reduce_scatter(MPI_Comm comm, const void *src, void *work, size_t count,
                                       hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                       hvdc_liveness *watch);

/* The direct reduce-scatter, then the ring all-gather of the blocks into dst. */
hvd_status hvdc__direct_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                  hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                  hvdc_liveness *watch);

/* The one-step exchange: needs count * dtype size <= INT_MAX (HVD_ERR_INTERNAL otherwise). */
hvd_status hvdc__small_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                 hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                 hvdc_liveness *watch);

/* The scratch bytes each function above reserves for count elements over size ranks, so a
 * caller can reserve it (and agree that every rank could) before any data moves. */
size_t hvdc__allreduce_scratch_bytes(size_t count, hvd_dtype dtype, int size, size_t small_bytes);
size_t hvdc__hierarchical_scratch_bytes(size_t count, hvd_dtype dtype, int local_size,
                                        int cross_size, int shm, size_t small_bytes);
size_t hvdc__direct_scratch_bytes(size_t count, hvd_dtype dtype, int size);
size_t hvdc__small_scratch_bytes(size_t count, hvd_dtype dtype, int size);

#endif
