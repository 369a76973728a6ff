/*
 * gpu_internal.h - what the files of the GPU backend share (built with CUDA and NCCL only):
 * the backend's state, NCCL's error check, the dtype/op translations, and the calls between
 * gpu_setup.c (creating and tearing down), gpu.c (the collectives) and gpu_complete.c
 * (completion events, their pool, the wake-up, aborting).
 * defines: struct hvdc_gpu, struct hvdc_gpu_pending, CHECK_NCCL, hvdc__nccl_dtype,
 *          hvdc__nccl_op, hvdc__nccl_version, hvdc__gpu_record, hvdc__gpu_events_free
 * Background thread.
 */
#ifndef HVDC_GPU_INTERNAL_H
#define HVDC_GPU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdatomic.h>

#include "base/log.h"
#include "base/status.h"
#include "gpu/gpu.h"
#include "gpu/gpu_waker.h"

#if NCCL_VERSION_CODE < 21300
#error "libhvdc's GPU backend needs NCCL 2.13 or newer (ncclAvg, ncclBfloat16, ncclGetLastError)"
#endif

struct hvdc_gpu {
    int device;
    const hvdc_topology *topo; /* the runtime's (gpu.h's config) */
    int max_blocks;          /* copy kernel: most blocks per segment, 4 per SM */
    int pools;               /* cudaMallocAsync is available */
    cudaStream_t stream;     /* non-blocking: never implicitly ordered with the app's streams */
    cudaStream_t notify;     /* the wake-ups' host functions, off stream (gpu_complete.c) */
    cudaEvent_t legacy_mark; /* recorded on the legacy default stream when no ready event */
    ncclComm_t comm;         /* all ranks */
    ncclComm_t local_comm;   /* hierarchical: the node (rank = local_rank); else NULL */
    ncclComm_t cross_comm;   /* hierarchical: same local rank across nodes; else NULL */
    void *fusion;            /* device, fusion_bytes */
    size_t fusion_bytes;
    void *host_stage;        /* pinned host memory, host_stage_bytes: the device Adasum's */
    size_t host_stage_bytes;
    hvdc_gpu_waker *waker;   /* wakes the background thread when queued work finishes */
    cudaEvent_t *spare;      /* completion events ready for reuse: (n_spare), capacity cap_spare */
    size_t n_spare, cap_spare;
    int broken;              /* the communicators were aborted (asynchronous error, fatal stop) */
    atomic_int *aborted;     /* the runtime's copy of broken, for waiters on other threads */
    hvdc_liveness *liveness; /* the executor's: waits for the stream watch the other ranks */
    char broken_msg[256];
};

struct hvdc_gpu_pending {
    hvdc_gpu *gpu;
    cudaEvent_t done;
};

/* CHECK_CUDA is in gpu/cuda_check.h. NCCL's errors likewise: record file:line and rank, jump to
 * the function's fail:; needs `hvd_status st` in scope. */
#define CHECK_NCCL(comm, call)                                                               \
    do {                                                                                     \
        ncclResult_t nccl_err_ = (call);                                                     \
        if (nccl_err_ != ncclSuccess) {                                                      \
            st = hvdc__fail(HVD_ERR_NCCL, "%s failed at %s:%d on rank %d: %s (%s)", #call,   \
                            __FILE__, __LINE__, hvdc__log_rank(),                            \
                            ncclGetErrorString(nccl_err_), ncclGetLastError(comm));          \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

static inline ncclDataType_t hvdc__nccl_dtype(hvd_dtype dtype) {
    switch (dtype) {
    case HVD_UINT8: return ncclUint8;
    case HVD_INT8: return ncclInt8;
    case HVD_INT32: return ncclInt32;
    case HVD_INT64: return ncclInt64;
    case HVD_FLOAT16: return ncclFloat16;
    case HVD_BFLOAT16: return ncclBfloat16;
    case HVD_FLOAT32: return ncclFloat32;
    case HVD_FLOAT64: return ncclFloat64;
    case HVD_BOOL: return ncclUint8; /* 0 or 1: or is max, and is min (hvdc__gpu_reduce_plan) */
    /* NCCL has no 16-bit integer type. These only move (hvdc__gpu_reduce_supported refuses
     * to reduce them), and NCCL moves float16 bit for bit, so a 2-byte type does. */
    case HVD_INT16: case HVD_UINT16: return ncclFloat16;
    }
    return ncclFloat32; /* unreachable: dtypes are validated before they get here */
}

static inline ncclRedOp_t hvdc__nccl_op(hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: return ncclSum;
    case HVD_AVERAGE: return ncclAvg;
    case HVD_MIN: return ncclMin;
    case HVD_MAX: return ncclMax;
    case HVD_PRODUCT: return ncclProd;
    case HVD_ADASUM: break; /* never reaches NCCL as an op (runtime/execute_adasum.c) */
    }
    return ncclSum;
}

/* Runtime NCCL version, but never more than the header we compiled against. */
static inline int hvdc__nccl_version(void) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess || v > NCCL_VERSION_CODE) v = NCCL_VERSION_CODE;
    return v;
}

/* Records a completion event (from the pool) after the work queued so far (gpu_complete.c);
 * hvdc__gpu_pending_notify queues the background thread's wake-up behind it. */
hvd_status hvdc__gpu_record(hvdc_gpu *gpu, hvdc_gpu_pending **out);

/* Destroys the pooled events (teardown; gpu_complete.c). */
void hvdc__gpu_events_free(hvdc_gpu *gpu);

#endif
