/*
 * working_memory.c - hvdc__reserve_agreed (working_memory.h).
 * Background thread.
 */
#include "runtime/working_memory.h"

#include <limits.h>
#include <stdio.h>

#include "base/fault.h"
#include "base/liveness.h"
#include "base/status.h"

/* Working memory is reserved before any data moves, and every rank learns whether every rank
 * got it: a request too big for one rank's memory then fails on every rank, alone, and the
 * runtime goes on (a rank failing mid-collective would leave the others waiting for it).
 * fusion_agreed/scratch_agreed grow identically on every rank, so the agreement (one small
 * all-reduce) runs on every rank or on none: only when a response needs more than before. */
hvdc_outcome hvdc__reserve_agreed(hvdc_executor *ex, const char *kind, const char *name,
                                  size_t fusion_bytes, size_t scratch_bytes) {
    hvd_status st = HVD_OK;
    if (fusion_bytes <= ex->fusion_agreed && scratch_bytes <= ex->scratch_agreed)
        return hvdc__ran(HVD_OK);
    char why[HVDC_ERROR_MAX] = "";
    /* the fault (tests): memory this rank cannot get, now that no request may claim more than
     * a process can address (base/dtype.h) and so none is too big for every machine */
    hvd_status mine = hvdc__fault("working_memory")
                          ? hvdc__fail(HVD_ERR_NO_MEMORY, "HVDC_TEST_FAULTS=working_memory")
                          : hvdc__buffer_reserve(&ex->fusion, fusion_bytes);
    if (mine == HVD_OK) mine = hvdc__buffer_reserve(&ex->scratch, scratch_bytes);
    if (mine != HVD_OK) snprintf(why, sizeof why, "%s", hvd_last_error());
    int first_failed = mine == HVD_OK ? INT_MAX : ex->topo->rank;
    MPI_Request request;
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, ex->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
    if (first_failed == INT_MAX) {
        if (fusion_bytes > ex->fusion_agreed) ex->fusion_agreed = fusion_bytes;
        if (scratch_bytes > ex->scratch_agreed) ex->scratch_agreed = scratch_bytes;
        return hvdc__ran(HVD_OK);
    }
    return hvdc__refused(hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': rank %d could not allocate its "
                                    "working memory (%zu + %zu bytes%s%s); no rank ran it, later "
                                    "operations are not affected", kind, name, first_failed,
                                    fusion_bytes, scratch_bytes, why[0] ? ": " : "", why));
fail:
    return hvdc__ran(st);
}
