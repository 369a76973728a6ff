/*
 * allreduce.c - the host all-reduce as the executor calls it (allreduce.h): which algorithm for
 * which size, flat or two-level. Every algorithm here combines in rank order, so the choice by
 * size is free to follow speed alone: a tensor gets the same bits whichever runs.
 * Background thread.
 */
#include "collectives/allreduce.h"

#include "base/status.h"
#include "collectives/block.h"
#include "collectives/ring.h"

hvd_status hvdc__allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                           hvd_dtype dtype, hvd_reduce_op op, size_t small_bytes,
                           hvdc_buffer *scratch, hvdc_liveness *watch) {
    if (count * hvd_dtype_size(dtype) <= small_bytes)
        return hvdc__small_allreduce(comm, src, dst, count, dtype, op, scratch, watch);
    return hvdc__direct_allreduce(comm, src, dst, count, dtype, op, scratch, watch);
}

size_t hvdc__allreduce_scratch_bytes(size_t count, hvd_dtype dtype, int size, size_t small_bytes) {
    if (count * hvd_dtype_size(dtype) <= small_bytes) return hvdc__small_scratch_bytes(count, dtype, size);
    return hvdc__direct_scratch_bytes(count, dtype, size);
}

size_t hvdc__hierarchical_scratch_bytes(size_t count, hvd_dtype dtype, int local_size,
                                        int cross_size, int shm, size_t small_bytes) {
    size_t local, cross;
    if (!shm && count * hvd_dtype_size(dtype) <= small_bytes) {
        local = hvdc__small_scratch_bytes(count, dtype, local_size);
        cross = hvdc__small_scratch_bytes(count, dtype, cross_size);
    } else { /* the cross-node stage runs on one block; with shm the node stages need none */
        local = shm ? 0 : hvdc__direct_scratch_bytes(count, dtype, local_size);
        cross = hvdc__allreduce_scratch_bytes(count / (size_t)local_size + 1, dtype, cross_size,
                                              small_bytes);
    }
    return local > cross ? local : cross;
}

hvd_status hvdc__hierarchical_allreduce(MPI_Comm local, MPI_Comm cross, hvdc_shm *shm,
                                        const void *src, void *dst, size_t count,
                                        hvd_dtype dtype, hvd_reduce_op op, size_t small_bytes,
                                        hvdc_buffer *scratch, hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    int local_rank, local_size;
    CHECK_MPI(MPI_Comm_rank(local, &local_rank));
    CHECK_MPI(MPI_Comm_size(local, &local_size));
    size_t start, len, elem = hvd_dtype_size(dtype);
    if (!shm && count * elem <= small_bytes) { /* node sum on every local rank, then across nodes */
        CHECK(hvdc__small_allreduce(local, src, dst, count, dtype, op, scratch, watch));
        CHECK(hvdc__small_allreduce(cross, dst, dst, count, dtype, op, scratch, watch));
        return HVD_OK;
    }
    /* the three stages; inside the node through shared memory where there is a segment */
    if (shm) CHECK(hvdc__shm_reduce_scatter(shm, src, dst, count, dtype, op, watch));
    else CHECK(hvdc__direct_reduce_scatter(local, src, dst, count, dtype, op, scratch, watch));
    hvdc__block_range(count, (size_t)local_size, (size_t)local_rank, &start, &len);
    char *block = (char *)dst + start * elem;
    CHECK(hvdc__allreduce(cross, block, block, len, dtype, op, small_bytes, scratch, watch));
    if (shm) CHECK(hvdc__shm_allgather_blocks(shm, dst, count, dtype, watch));
    else CHECK(hvdc__ring_allgather_blocks(local, dst, count, dtype, watch));
fail:
    return st;
}
