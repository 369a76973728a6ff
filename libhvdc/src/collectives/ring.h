/*
 * ring.h - ring all-reduce and ring reduce-scatter over MPI point-to-point, for host memory.
 *
 *   rank 0 -> rank 1 -> rank 2 -> ... -> rank N-1 -> rank 0      (each sends to its right)
 *
 * The buffer is cut into N blocks. Reduce-scatter: in N-1 steps each rank passes one block to
 * its right neighbour and adds the block coming from its left into its own copy; afterwards
 * each rank holds one block fully reduced. All-gather: N-1 more steps pass the finished blocks
 * around the ring. Each rank sends and receives 2K(N-1)/N bytes for a K-byte buffer, whatever
 * N, which is why the ring wins on large buffers.
 *
 * Each step's block is cut into segments; the receive of segment j+1.. is in flight while
 * segment j is reduced, so transfer and reduction overlap. Every wait checks `watch`, so a
 * dead neighbour fails the collective (HVD_ERR_RANK_FAILED) instead of hanging it.
 *
 * defines: hvdc__ring_allreduce, hvdc__ring_reduce_scatter, hvdc__ring_scratch_bytes,
 *          hvdc__ring_allgather_blocks, hvdc__hierarchical_allreduce (hierarchical.c),
 *          hvdc__doubling_allreduce (doubling.c)
 * Background thread (the only MPI caller).
 */
#ifndef HVDC_RING_H
#define HVDC_RING_H

#include <mpi.h>
#include <stddef.h>

#include "base/buffer.h"
#include "base/liveness.h"
#include "collectives/block.h"
#include "hvdc.h"


/* dst = reduction of every rank's src (src may equal dst). scratch holds receive segments.
 * HVD_AVERAGE sums here; the caller divides. */
hvd_status hvdc__ring_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                hvdc_liveness *watch);

/* The scratch the ring functions above reserve for count elements over size ranks, so a caller
 * can reserve it (and agree that every rank could) before any data moves. */
size_t hvdc__ring_scratch_bytes(size_t count, hvd_dtype dtype, int size);

/* Leaves block `rank` of work holding the reduction of every rank's block `rank` of src
 * (work must hold count elements; its other blocks end up holding partial sums). */
hvd_status hvdc__ring_reduce_scatter(MPI_Comm comm, const void *src, void *work, size_t count,
                                     hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                     hvdc_liveness *watch);

/* dst = reduction of every rank's src by recursive doubling (doubling.c): log2(N) exchanges of
 * the whole buffer, for small buffers where latency dominates. scratch holds one buffer. */
hvd_status hvdc__doubling_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                    hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                    hvdc_liveness *watch);

/* Each rank r holds block r of buf; afterwards every rank holds all blocks. */
hvd_status hvdc__ring_allgather_blocks(MPI_Comm comm, void *buf, size_t count, hvd_dtype dtype,
                                       hvdc_liveness *watch);

/* Two-level all-reduce for several ranks per node (HVD_HIERARCHICAL_ALLREDUCE):
 *
 *   node A: a0 a1      1. reduce-scatter inside each node (shared memory): local rank l
 *   node B: b0 b1         ends with block l summed over its node
 *                      2. ring all-reduce of block l across nodes, among the ranks with local
 *                         rank l (a0-b0 and a1-b1 in parallel, each on 1/local_size of the data)
 *                      3. all-gather inside each node
 *
 * Every local rank carries a share of the network traffic, instead of one leader per node.
 * Needs the same number of ranks on every node (the caller checks). */
hvd_status hvdc__hierarchical_allreduce(MPI_Comm local, MPI_Comm cross, const void *src,
                                        void *dst, size_t count, hvd_dtype dtype,
                                        hvd_reduce_op op, hvdc_buffer *scratch,
                                        hvdc_liveness *watch);

#endif
