/*
 * gpu_setup.c - creating and tearing down the GPU backend (see gpu.h): the device, the stream,
 * the NCCL communicators and the fusion buffer, every step agreed by every rank before the
 * next one starts, and a teardown that never waits on the device without bound.
 *
 *   every rank: step k ──> agree (first failing rank, its status and message, over MPI) ──┐
 *      all OK: step k+1 <──────────────────────────────────────────────────────────────────┤
 *      else: every rank tears down what it built (aborting NCCL, not destroying it) and    │
 *            returns that rank's error: the ranks are still in step <────────────────────────┘
 *
 * Background thread (hvdc__gpu_probe, hvdc__gpu_device_count, hvdc__gpu_versions: any thread).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/fault.h"
#include "base/nodes.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_internal.h"

/* How long teardown lets the stream drain before it gives up on it (see gpu.h). */
#define DRAIN_SECONDS 5.0

void hvdc__gpu_versions(char *buf, size_t len) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    snprintf(buf, len, "CUDA %d.%d, NCCL %d.%d.%d (running NCCL %d.%d.%d)", CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, v / 10000,
             v / 100 % 100, v % 100);
}

int hvdc__gpu_nccl_version_built(void) {
    return NCCL_VERSION_CODE;
}

/* The real count, and CUDA's reason when it is 0. */
static int real_device_count(char *why, size_t len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        cudaGetLastError(); /* not sticky, but leave nothing behind for the next caller */
        if (why && len) snprintf(why, len, "%s", cudaGetErrorString(err));
        return 0;
    }
    if (n == 0 && why && len) snprintf(why, len, "cudaGetDeviceCount found 0 devices");
    return n;
}

int hvdc__gpu_device_count(void) { return hvdc__fault_device_count(real_device_count(NULL, 0)); }

hvd_status hvdc__gpu_probe(char *why, size_t len) {
    char reason[200] = "";
    int n = hvdc__fault_device_count(real_device_count(reason, sizeof reason));
    if (n > 0) {
        if (why && len) why[0] = '\0';
        return HVD_OK;
    }
    if (why && len)
        snprintf(why, len, "no CUDA device visible: %s",
                 reason[0] ? reason : "HVDC_TEST_GPU_COUNT=0");
    return HVD_ERR_CUDA;
}

int hvdc__gpu_device(const hvdc_gpu *gpu) { return gpu->device; }

/* Makes one NCCL communicator over mpi_comm (collective over it): its rank 0 makes the id. */
static hvd_status comm_init(const hvdc_gpu_config *cfg, MPI_Comm mpi_comm, ncclComm_t *out) {
    hvd_status st = HVD_OK;
    int me = 0, n = 0;
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    *out = NULL;
    CHECK_MPI(MPI_Comm_rank(mpi_comm, &me));
    CHECK_MPI(MPI_Comm_size(mpi_comm, &n));
    if (me == 0) msg.ok = ncclGetUniqueId(&msg.id) == ncclSuccess;
    MPI_Request request;
    CHECK_MPI(MPI_Ibcast(&msg, (int)sizeof msg, MPI_BYTE, 0, mpi_comm, &request));
    CHECK(hvdc__wait_requests(1, &request, cfg->liveness));
    if (!msg.ok) {
        st = hvdc__fail(HVD_ERR_NCCL, "ncclGetUniqueId failed on the first rank of a group "
                        "(seen at %s:%d on rank %d); check NCCL_DEBUG=WARN output there",
                        __FILE__, __LINE__, cfg->topo->rank);
        goto fail;
    }
    CHECK_NCCL(NULL, ncclCommInitRank(out, n, msg.id, me));
fail:
    return st;
}

/* Step 2, this rank alone: device, stream, event. */
static hvd_status setup_device(hvdc_gpu *gpu) {
    hvd_status st = HVD_OK;
    int sms = 0;
    CHECK_CUDA(cudaSetDevice(gpu->device));
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu->device));
    CHECK_CUDA(cudaDeviceGetAttribute(&gpu->pools, cudaDevAttrMemoryPoolsSupported, gpu->device));
    gpu->max_blocks = 4 * (sms > 0 ? sms : 1);
    CHECK_CUDA(cudaStreamCreateWithFlags(&gpu->stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&gpu->notify, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&gpu->legacy_mark, cudaEventDisableTiming));
fail:
    return st;
}

/* Step 4: the MPI groups of the node and cross-node communicators (the runtime agreed at
 * hvd_init that every node runs the same number of ranks). Each NCCL communicator is then its
 * own agreed step: a node whose id failed skips the cross-node one, whose other ranks would
 * otherwise wait for it there while it waits for them in the agreement. */
static hvd_status split_levels(const hvdc_gpu_config *cfg, MPI_Comm *local, MPI_Comm *cross) {
    hvd_status st = hvdc__split_node(cfg->comm, local);
    return st == HVD_OK ? hvdc__split_cross(cfg->comm, cfg->topo->local_rank, cross) : st;
}

static void free_levels(MPI_Comm *local, MPI_Comm *cross) {
    if (*local != MPI_COMM_NULL) MPI_Comm_free(local);
    if (*cross != MPI_COMM_NULL) MPI_Comm_free(cross);
}

/* Step 5: the fusion buffer up front (so the first steps do not allocate) and the waker. */
static hvd_status setup_buffers(hvdc_gpu *gpu, const hvdc_gpu_config *cfg) {
    hvd_status st = HVD_OK;
    gpu->waker = hvdc__gpu_waker_create(cfg->wake, cfg->wake_ctx);
    if (!gpu->waker) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the GPU waker");
    if (cfg->fusion_bytes > 0) {
        if (gpu->pools)
            CHECK_CUDA(cudaMallocAsync(&gpu->fusion, cfg->fusion_bytes, gpu->stream));
        else
            CHECK_CUDA(cudaMalloc(&gpu->fusion, cfg->fusion_bytes));
        gpu->fusion_bytes = cfg->fusion_bytes;
    }
fail:
    return st;
}

/* Does a check-then-agree step: CHECK(hvdc__gpu_agree(cfg, step(...), "name")) with goto fail. */
#define AGREED_STEP(name, call) CHECK(hvdc__gpu_agree(cfg, (hvdc__clear_error(), (call)), name))

hvd_status hvdc__gpu_create(const hvdc_gpu_config *cfg, hvdc_gpu **out) {
    hvd_status st = HVD_OK, mine = HVD_OK;
    MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
    *out = NULL;
    hvdc_gpu *gpu = calloc(1, sizeof *gpu);
    if (!gpu) {
        mine = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory creating the GPU backend");
    } else {
        gpu->topo = cfg->topo;
        gpu->aborted = cfg->aborted;
        gpu->liveness = cfg->liveness;
        gpu->device = -1;
        mine = hvdc__gpu_choose_device(cfg->device, cfg->topo->local_rank,
                                       hvdc__gpu_device_count(), &gpu->device);
    }
    CHECK(hvdc__gpu_agree(cfg, mine, "choosing the CUDA device"));
    AGREED_STEP("CUDA device, stream and events", setup_device(gpu));
    AGREED_STEP("NCCL communicator", comm_init(cfg, cfg->comm, &gpu->comm));
    /* only where two levels exist (gpu_plan.c uses them under the same condition): with every
     * rank on one node, or one rank per node, one of the two would duplicate gpu->comm */
    if (cfg->hierarchical && cfg->topo->local_size > 1 && cfg->topo->local_size < cfg->topo->size) {
        AGREED_STEP("node and cross-node groups", split_levels(cfg, &local, &cross));
        AGREED_STEP("node NCCL communicator", comm_init(cfg, local, &gpu->local_comm));
        AGREED_STEP("cross-node NCCL communicator", comm_init(cfg, cross, &gpu->cross_comm));
    }
    AGREED_STEP("fusion buffer", setup_buffers(gpu, cfg));
    free_levels(&local, &cross);
    *out = gpu;
    return HVD_OK;
fail:
    free_levels(&local, &cross);
    if (gpu) {
        gpu->broken = 1; /* other ranks may hold communicators this one never joined: abort */
        snprintf(gpu->broken_msg, sizeof gpu->broken_msg, "GPU setup failed");
    }
    {
        char message[HVDC_ERROR_MAX];
        snprintf(message, sizeof message, "%s", hvd_last_error());
        hvdc__gpu_destroy(gpu);
        hvdc__fail(st, "%s", message);
    }
    return st;
}

hvd_status hvdc__gpu_node_comm(hvdc_gpu *gpu, const hvdc_gpu_config *cfg) {
    hvd_status st = HVD_OK;
    MPI_Comm local = MPI_COMM_NULL;
    if (!gpu) return hvdc__fail(HVD_ERR_INVALID_ARG, "GPU backend called without a context");
    /* the same on every rank: hierarchical is agreed, local_size equal on every node */
    if (gpu->local_comm || cfg->topo->local_size < 2) return HVD_OK;
    AGREED_STEP("CUDA device", (cudaSetDevice(gpu->device) == cudaSuccess ? HVD_OK :
                                hvdc__fail(HVD_ERR_CUDA, "cudaSetDevice(%d) failed", gpu->device)));
    AGREED_STEP("node group", hvdc__split_node(cfg->comm, &local));
    AGREED_STEP("node NCCL communicator", comm_init(cfg, local, &gpu->local_comm));
fail:
    if (st != HVD_OK && gpu->local_comm) { /* another rank failed: every rank is without one */
        ncclCommAbort(gpu->local_comm);
        gpu->local_comm = NULL;
    }
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    return st;
}

/* Gives the stream up to DRAIN_SECONDS to finish what it holds. @return 1 when it did. */
static int drain(hvdc_gpu *gpu) {
    struct timespec pause = {0, 200000}; /* 0.2 ms */
    double until = hvdc__now_seconds() + DRAIN_SECONDS;
    for (;;) {
        cudaError_t err = cudaStreamQuery(gpu->stream);
        if (err != cudaErrorNotReady) return err == cudaSuccess;
        if (hvdc__now_seconds() > until) return 0;
        nanosleep(&pause, NULL); /* teardown only, bounded: never on the hot path */
    }
}

void hvdc__gpu_destroy(hvdc_gpu *gpu) {
    if (!gpu) return;
    int drained = 1;
    if (gpu->device >= 0 && cudaSetDevice(gpu->device) != cudaSuccess) cudaGetLastError();
    if (gpu->stream && !gpu->broken) drained = drain(gpu);
    if (!drained) hvdc__gpu_abort(gpu, "the GPU stream did not finish at shutdown");
    ncclComm_t comms[3] = {gpu->comm, gpu->local_comm, gpu->cross_comm};
    for (int i = 0; i < 3; i++) {
        if (!comms[i]) continue;
        if (gpu->broken)
            ncclCommAbort(comms[i]);
        else
            ncclCommDestroy(comms[i]); /* local; the stream is idle */
    }
    if (gpu->stream && gpu->broken) drained = drain(gpu); /* aborted kernels exit */
    if (drained) { /* else the work may still use it: left to the process's exit */
        if (gpu->fusion && gpu->pools)
            cudaFreeAsync(gpu->fusion, gpu->stream);
        else if (gpu->fusion)
            cudaFree(gpu->fusion);
        if (gpu->stream) drain(gpu);
        if (gpu->host_stage) cudaFreeHost(gpu->host_stage);
    }
    hvdc__gpu_events_free(gpu);
    if (gpu->legacy_mark) cudaEventDestroy(gpu->legacy_mark);
    if (gpu->stream) cudaStreamDestroy(gpu->stream); /* returns at once; released when idle */
    if (gpu->notify) cudaStreamDestroy(gpu->notify); /* its host functions hold the waker */
    hvdc__gpu_waker_close(gpu->waker);
    cudaGetLastError();
    free(gpu);
}
