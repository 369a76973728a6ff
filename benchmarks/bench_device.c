/*
 * bench_device.c - bench_device.h with CUDA and NCCL (the stub is bench_device_stub.c).
 * Main thread.
 */
#include "bench_device.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

static ncclComm_t comm_nccl;
static cudaStream_t stream;

/* bench_device_open's refusal: rank 0 says why. */
static int refuse(int rank, const char *program, const char *why) {
    if (rank == 0) fprintf(stderr, "%s: %s\n", program, why);
    return -1;
}

int bench_device_open(MPI_Comm comm, const char *program) {
    int n = 0, ok = 1, all_ok = 0, rank = 0, size = 1, local_rank = 0;
    char why[256] = "";
    const size_t len = sizeof why;
    MPI_Comm node;
    MPI_Comm_rank(comm, &rank);
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_free(&node);
    }
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0)
        snprintf(why, len, "--device gpu: no CUDA device visible (%s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    else if (local_rank >= n)
        snprintf(why, len, "--device gpu: local rank %d has no GPU (%d visible); start at most "
                 "one rank per GPU", local_rank, n);
    else if ((err = cudaSetDevice(local_rank)) != cudaSuccess ||
             (err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess)
        snprintf(why, len, "--device gpu: CUDA device %d: %s", local_rank, cudaGetErrorString(err));
    ok = why[0] == '\0';
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) {
        if (ok) snprintf(why, len, "--device gpu: another rank has no usable GPU");
        return refuse(rank, program, why);
    }
    ncclUniqueId id;
    MPI_Comm_size(comm, &size);
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm);
    ncclResult_t res = ncclCommInitRank(&comm_nccl, size, id, rank);
    ok = res == ncclSuccess;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) {
        snprintf(why, len, "--device gpu: ncclCommInitRank failed on some rank (here: %s)",
                 ncclGetErrorString(res));
        return refuse(rank, program, why);
    }
    return local_rank;
}

void bench_device_close(void) {
    if (comm_nccl) ncclCommDestroy(comm_nccl);
    if (stream) cudaStreamDestroy(stream);
    comm_nccl = NULL;
    stream = NULL;
}

void *bench_device_alloc(size_t nbytes) {
    void *p = NULL;
    return cudaMalloc(&p, nbytes ? nbytes : 1) == cudaSuccess ? p : NULL;
}

void bench_device_free(void *p) { cudaFree(p); }

/* A copy from pageable memory may return before its DMA ends, and cudaMemset is asynchronous:
 * the device synchronization makes them visible to the NCCL stream (non-blocking, so not
 * ordered after the legacy default stream) too. */
int bench_device_upload(void *dst, const void *src, size_t nbytes) {
    return cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice) == cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

int bench_device_download(void *dst, const void *src, size_t nbytes) {
    return cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

int bench_device_memset(void *dst, int byte, size_t nbytes) {
    return cudaMemset(dst, byte, nbytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess
               ? 0 : -1;
}

static ncclDataType_t nccl_type(hvd_dtype d) {
    switch (d) {
    case HVD_UINT8: return ncclUint8;
    case HVD_INT8: return ncclInt8;
    case HVD_INT32: return ncclInt32;
    case HVD_INT64: return ncclInt64;
    case HVD_FLOAT16: return ncclFloat16;
    case HVD_BFLOAT16: return ncclBfloat16;
    case HVD_FLOAT64: return ncclFloat64;
    case HVD_BOOL: return ncclUint8; /* 0/1 bytes: or is max, and is min (nccl_op) */
    default: return ncclFloat32;     /* HVD_FLOAT32 (16-bit integers are refused below) */
    }
}

static ncclRedOp_t nccl_op(hvd_reduce_op op, hvd_dtype dtype) {
    if (dtype == HVD_BOOL) return op == HVD_MIN || op == HVD_PRODUCT ? ncclMin : ncclMax;
    switch (op) {
    case HVD_MIN: return ncclMin;
    case HVD_MAX: return ncclMax;
    case HVD_PRODUCT: return ncclProd;
    default: return ncclSum; /* average as a sum, as the MPI rows */
    }
}

static int nccl_has_type(hvd_dtype dtype) {
    if (dtype != HVD_INT16 && dtype != HVD_UINT16) return 1;
    fprintf(stderr, "bench_device: NCCL has no 16-bit integer type for the baseline\n");
    return 0;
}

int bench_nccl_allreduce(const void *send, void *recv, size_t count, hvd_dtype dtype,
                         hvd_reduce_op op) {
    if (!nccl_has_type(dtype)) return -1;
    if (ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op, dtype), comm_nccl, stream) !=
        ncclSuccess)
        return -1;
    return cudaStreamSynchronize(stream) == cudaSuccess ? 0 : -1;
}

int bench_nccl_allreduce_group(const void *send, void *recv, const size_t *offsets,
                               const size_t *counts, size_t n, hvd_dtype dtype,
                               hvd_reduce_op op) {
    if (!nccl_has_type(dtype)) return -1;
    size_t elem = hvd_dtype_size(dtype);
    ncclDataType_t type = nccl_type(dtype);
    ncclRedOp_t nop = nccl_op(op, dtype);
    if (ncclGroupStart() != ncclSuccess) return -1;
    ncclResult_t res = ncclSuccess;
    for (size_t k = 0; k < n && res == ncclSuccess; k++)
        res = ncclAllReduce((const char *)send + offsets[k] * elem, (char *)recv + offsets[k] * elem,
                            counts[k], type, nop, comm_nccl, stream);
    ncclResult_t end = ncclGroupEnd(); /* also after a failed call: the group must be closed */
    if (res != ncclSuccess || end != ncclSuccess) return -1;
    return cudaStreamSynchronize(stream) == cudaSuccess ? 0 : -1;
}
