/*
 * gpu_agree.c - one agreed step of the GPU backend's setup (hvdc__gpu_agree, gpu.h): every rank
 * learns whether every rank's step succeeded, and on failure every rank returns the first
 * failing rank's status and message, so they fail together and stay in step. Two small
 * collectives (an all-reduce of the first failing rank, a broadcast of its message), waited on
 * with the liveness check. In every build: the stub agrees its refusals the same way.
 * Background thread.
 */
#include <limits.h>
#include <stdio.h>

#include "base/status.h"
#include "gpu/gpu.h"

hvd_status hvdc__gpu_agree(const hvdc_gpu_config *cfg, hvd_status mine, const char *step) {
    hvd_status st = HVD_OK;
    char message[HVDC_ERROR_MAX] = "";
    int first = mine == HVD_OK ? INT_MAX : cfg->topo->rank, status = (int)mine;
    if (mine != HVD_OK) snprintf(message, sizeof message, "%s", hvd_last_error());
    MPI_Request request;
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, cfg->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, cfg->liveness));
    if (first == INT_MAX) return HVD_OK;
    MPI_Request requests[2];
    CHECK_MPI(MPI_Ibcast(&status, 1, MPI_INT, first, cfg->comm, &requests[0]));
    CHECK_MPI(MPI_Ibcast(message, (int)sizeof message, MPI_CHAR, first, cfg->comm, &requests[1]));
    CHECK(hvdc__wait_requests(2, requests, cfg->liveness));
    message[sizeof message - 1] = '\0';
    if (status == HVD_OK || status == HVD_ERR_MPI || status == HVD_ERR_RANK_FAILED)
        status = HVD_ERR_CUDA; /* the step failed, not the agreement: the ranks are in step */
    return hvdc__fail((hvd_status)status, "GPU setup (%s) failed on rank %d, so no rank runs "
                      "this device request (CPU work goes on; the next device request tries "
                      "again): %s", step, first, message);
fail:
    return st;
}

