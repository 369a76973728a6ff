/*
 * alltoall_counts.c - hvdc__alltoall_recv_counts (alltoall_counts.h).
 * Background thread.
 */
#include "runtime/alltoall_counts.h"

#include "base/status.h"

hvd_status hvdc__alltoall_recv_counts(hvdc_executor *ex, const hvdc_op *op,
                                      const hvdc_wire_response *r, uint64_t *recv) {
    hvd_status st = HVD_OK;
    size_t n = (size_t)ex->topo->size, me = (size_t)ex->topo->rank;
    if (r->n_rank_counts == n * n) {
        for (size_t s = 0; s < n; s++) recv[s] = r->rank_counts[s * n + me];
        return HVD_OK;
    }
    MPI_Request request;
    CHECK_MPI(MPI_Ialltoall(op->desc.counts, 1, MPI_UINT64_T, recv, 1, MPI_UINT64_T, ex->comm,
                            &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
fail:
    return st;
}
