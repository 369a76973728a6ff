/*
 * hierarchical.c - the two-level CPU all-reduce (see ring.h for the picture): reduce-scatter
 * inside the node, ring all-reduce of this rank's block across nodes, all-gather inside the
 * node. Built from the ring's phases, so each level is the same tested code.
 * Background thread.
 */
#include "base/status.h"
#include "collectives/ring.h"

hvd_status hvdc__hierarchical_allreduce(MPI_Comm local, MPI_Comm cross, const void *src,
                                        void *dst, size_t count, hvd_dtype dtype,
                                        hvd_reduce_op op, hvdc_buffer *scratch,
                                        hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    int local_rank, local_size;
    CHECK_MPI(MPI_Comm_rank(local, &local_rank));
    CHECK_MPI(MPI_Comm_size(local, &local_size));
    size_t start, len, elem = hvd_dtype_size(dtype);
    CHECK(hvdc__ring_reduce_scatter(local, src, dst, count, dtype, op, scratch, watch));
    hvdc__block_range(count, local_size, local_rank, &start, &len);
    char *block = (char *)dst + start * elem;
    CHECK(hvdc__ring_allreduce(cross, block, block, len, dtype, op, scratch, watch));
    CHECK(hvdc__ring_allgather_blocks(local, dst, count, dtype, watch));
fail:
    return st;
}
