/*
 * gpu.c - the GPU backend (see gpu.h): one device, one non-blocking stream, NCCL communicators,
 * a persistent stream-ordered fusion buffer, and collectives queued without host syncs.
 *
 * Every collective is queued on gpu->stream in this order and returns at once:
 *   cudaStreamWaitEvent(ready)  ->  [pack kernel]  ->  NCCL  ->  [unpack kernel]  ->  record(done)
 * The all-reduce's order comes from hvdc__gpu_allreduce_sequence (gpu_plan.c), driven through
 * the hvdc_gpu_ops table below. The fusion buffer grows with cudaFreeAsync/cudaMallocAsync on
 * the same stream, so work still queued on the old buffer is never disturbed.
 *
 * Background thread only (plus hvdc__gpu_probe/versions: any thread). Plain C against the CUDA
 * runtime and NCCL C APIs; the kernel is in kernels.cu.
 */
#include "gpu/gpu.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/nodes.h"
#include "base/status.h"
#include "collectives/block.h"
#include "gpu/cuda_check.h"
#include "gpu/kernels.h"

#if NCCL_VERSION_CODE < 21300
#error "libhvdc's GPU backend needs NCCL 2.13 or newer (ncclAvg, ncclBfloat16, ncclGetLastError)"
#endif

struct hvdc_gpu {
    int device, rank, size, local_rank, local_size;
    int max_blocks;          /* copy kernel grid limit: 4 blocks per SM */
    int pools;               /* cudaMallocAsync is available */
    cudaStream_t stream;     /* non-blocking: never implicitly ordered with the app's streams */
    cudaEvent_t legacy_mark; /* recorded on the legacy default stream when no ready event */
    ncclComm_t comm;         /* all ranks */
    ncclComm_t local_comm;   /* hierarchical: the node (rank = local_rank); else NULL */
    ncclComm_t cross_comm;   /* hierarchical: same local rank across nodes; else NULL */
    void *fusion;            /* device, fusion_bytes */
    size_t fusion_bytes;
    int broken;              /* an asynchronous NCCL error aborted the communicators */
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
                            __FILE__, __LINE__, hvdc__log_rank(), ncclGetErrorString(nccl_err_),         \
                            ncclGetLastError(comm));                                         \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

void hvdc__gpu_versions(char *buf, size_t len) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    snprintf(buf, len, "CUDA %d.%d, NCCL %d.%d.%d (running NCCL %d.%d.%d)", CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, v / 10000,
             v / 100 % 100, v % 100);
}

hvd_status hvdc__gpu_probe(char *why, size_t len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaSuccess && n > 0) {
        if (why && len) why[0] = '\0';
        return HVD_OK;
    }
    if (why && len)
        snprintf(why, len, "no CUDA device visible: %s",
                 err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found 0 devices");
    return HVD_ERR_CUDA;
}

int hvdc__gpu_pointer_device(const void *ptr) {
    if (!ptr) return -1;
    struct cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error of a failed query */
        return -1;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged
               ? attributes.device : -1;
}

static ncclDataType_t nccl_dtype(hvd_dtype dtype) {
    switch (dtype) {
    case HVD_UINT8: return ncclUint8;
    case HVD_INT8: return ncclInt8;
    case HVD_INT32: return ncclInt32;
    case HVD_INT64: return ncclInt64;
    case HVD_FLOAT16: return ncclFloat16;
    case HVD_BFLOAT16: return ncclBfloat16;
    case HVD_FLOAT32: return ncclFloat32;
    case HVD_FLOAT64: return ncclFloat64;
    case HVD_BOOL: return ncclUint8; /* 0 or 1: or is max, and is min (nccl_op) */
    /* NCCL has no 16-bit integer type. These only move (hvdc__gpu_reduce_supported refuses
     * to reduce them), and NCCL moves float16 bit for bit, so a 2-byte type does. */
    case HVD_INT16: case HVD_UINT16: return ncclFloat16;
    }
    return ncclFloat32; /* unreachable: dtypes are validated before they get here */
}

static ncclRedOp_t nccl_op(hvd_reduce_op op, hvd_dtype dtype) {
    if (dtype == HVD_BOOL) /* hvdc.h: sum and max are or, product and min are and */
        return op == HVD_MIN || op == HVD_PRODUCT ? ncclMin : ncclMax;
    switch (op) {
    case HVD_SUM: return ncclSum;
    case HVD_AVERAGE: return ncclAvg;
    case HVD_MIN: return ncclMin;
    case HVD_MAX: return ncclMax;
    case HVD_PRODUCT: return ncclProd;
    }
    return ncclSum;
}

/* Runtime NCCL version, but never more than the header we compiled against. */
static int nccl_version(void) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess || v > NCCL_VERSION_CODE) v = NCCL_VERSION_CODE;
    return v;
}

/* Makes one NCCL communicator over mpi_comm (collective over it): its rank 0 makes the id. */
static hvd_status comm_init(MPI_Comm mpi_comm, int rank, ncclComm_t *out) {
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
    CHECK_MPI(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, mpi_comm));
    if (!msg.ok) {
        st = hvdc__fail(HVD_ERR_NCCL, "ncclGetUniqueId failed on the first rank of a group "
                        "(seen at %s:%d on rank %d); check NCCL_DEBUG=WARN output there",
                        __FILE__, __LINE__, rank);
        goto fail;
    }
    CHECK_NCCL(NULL, ncclCommInitRank(out, n, msg.id, me));
fail:
    return st;
}

/* Every rank learns whether every rank got this far; names up to 8 that did not. */
static hvd_status all_ok(MPI_Comm comm, int size, int ok, const char *what) {
    hvd_status st = HVD_OK;
    int *flags = calloc((size_t)size, sizeof *flags);
    if (!flags) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory in GPU backend setup");
    CHECK_MPI(MPI_Allgather(&ok, 1, MPI_INT, flags, 1, MPI_INT, comm));
    char list[128] = "";
    int bad = 0;
    for (int r = 0; r < size; r++) {
        if (flags[r]) continue;
        if (bad++ < 8) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%d", used ? ", " : "", r);
        }
    }
    if (bad && ok) /* this rank was fine: say who was not */
        st = hvdc__fail(HVD_ERR_CUDA, "%s failed on rank(s) %s%s, so no rank uses the GPU",
                        what, list, bad > 8 ? ", ..." : "");
    else if (bad)
        st = HVD_ERR_CUDA; /* this rank's own message is already set */
fail:
    free(flags);
    return st;
}

/* This rank alone: device, stream, event. */
static hvd_status setup_device(hvdc_gpu *gpu, const hvdc_gpu_config *cfg) {
    hvd_status st = HVD_OK;
    int rank = cfg->rank, count = 0, sms = 0;
    char why[256];
    if ((st = hvdc__gpu_probe(why, sizeof why)) != HVD_OK)
        return hvdc__fail(st, "%s (rank %d)", why, rank);
    CHECK_CUDA(cudaGetDeviceCount(&count));
    gpu->device = cfg->device >= 0 ? cfg->device : cfg->local_rank % count;
    if (gpu->device >= count)
        return hvdc__fail(HVD_ERR_CUDA, "rank %d asked for CUDA device %d but %d are visible "
                          "(check CUDA_VISIBLE_DEVICES)", rank, gpu->device, count);
    CHECK_CUDA(cudaSetDevice(gpu->device));
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu->device));
    CHECK_CUDA(cudaDeviceGetAttribute(&gpu->pools, cudaDevAttrMemoryPoolsSupported, gpu->device));
    gpu->max_blocks = 4 * (sms > 0 ? sms : 1);
    CHECK_CUDA(cudaStreamCreateWithFlags(&gpu->stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&gpu->legacy_mark, cudaEventDisableTiming));
fail:
    return st;
}

/* Node and cross-node communicators, only when every node has the same number of ranks. */
static hvd_status setup_hierarchical(hvdc_gpu *gpu, const hvdc_gpu_config *cfg) {
    hvd_status st = HVD_OK;
    MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
    int minmax[2] = {-cfg->local_size, cfg->local_size}, agreed[2] = {0, 0};
    CHECK_MPI(MPI_Allreduce(minmax, agreed, 2, MPI_INT, MPI_MAX, cfg->comm));
    if (-agreed[0] != agreed[1]) goto fail; /* uneven nodes: stay flat (st is HVD_OK) */
    CHECK(hvdc__split_node(cfg->comm, &local));
    CHECK(hvdc__split_cross(cfg->comm, cfg->local_rank, &cross));
    CHECK(comm_init(local, cfg->rank, &gpu->local_comm));
    CHECK(comm_init(cross, cfg->rank, &gpu->cross_comm));
fail:
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    if (cross != MPI_COMM_NULL) MPI_Comm_free(&cross);
    return st;
}

hvd_status hvdc__gpu_create(const hvdc_gpu_config *cfg, hvdc_gpu **out) {
    hvd_status st = HVD_OK, mine = HVD_OK;
    int rank = cfg->rank;
    *out = NULL;
    hvdc_gpu *gpu = calloc(1, sizeof *gpu);
    if (!gpu) {
        mine = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory creating the GPU backend");
    } else {
        gpu->rank = cfg->rank;
        gpu->size = cfg->size;
        gpu->local_rank = cfg->local_rank;
        gpu->local_size = cfg->local_size;
        mine = setup_device(gpu, cfg);
    }
    /* all ranks agree before the first NCCL call, so a rank without a GPU hangs nobody */
    CHECK(all_ok(cfg->comm, cfg->size, mine == HVD_OK, "CUDA setup"));
    CHECK(comm_init(cfg->comm, rank, &gpu->comm));
    if (cfg->hierarchical && cfg->local_size > 1 && cfg->local_size < cfg->size)
        CHECK(setup_hierarchical(gpu, cfg));
    if (cfg->fusion_bytes > 0) { /* up front, so the first steps do not allocate */
        if (gpu->pools)
            CHECK_CUDA(cudaMallocAsync(&gpu->fusion, cfg->fusion_bytes, gpu->stream));
        else
            CHECK_CUDA(cudaMalloc(&gpu->fusion, cfg->fusion_bytes));
        gpu->fusion_bytes = cfg->fusion_bytes;
    }
    *out = gpu;
    return HVD_OK;
fail:
    hvdc__gpu_destroy(gpu);
    return st;
}

void hvdc__gpu_destroy(hvdc_gpu *gpu) {
    if (!gpu) return;
    if (gpu->stream) {
        cudaSetDevice(gpu->device);
        if (!gpu->broken) cudaStreamSynchronize(gpu->stream); /* shutdown, not the hot path */
    }
    ncclComm_t comms[3] = {gpu->comm, gpu->local_comm, gpu->cross_comm};
    for (int i = 0; i < 3; i++) {
        if (!comms[i]) continue;
        if (gpu->broken)
            ncclCommAbort(comms[i]);
        else
            ncclCommDestroy(comms[i]);
    }
    if (gpu->fusion) {
        if (gpu->pools)
            cudaFreeAsync(gpu->fusion, gpu->stream);
        else
            cudaFree(gpu->fusion);
    }
    if (gpu->stream) cudaStreamSynchronize(gpu->stream);
    if (gpu->legacy_mark) cudaEventDestroy(gpu->legacy_mark);
    if (gpu->stream) cudaStreamDestroy(gpu->stream);
    free(gpu);
}

/* ---- the device actions of hvdc_gpu_ops ------------------------------------------------- */

static hvd_status op_wait_ready(void *self, void *event) {
    hvdc_gpu *gpu = self;
    hvd_status st = HVD_OK;
    cudaEvent_t ev = (cudaEvent_t)event;
    if (!ev) { /* order after everything already queued on the legacy default stream */
        CHECK_CUDA(cudaEventRecord(gpu->legacy_mark, cudaStreamLegacy));
        ev = gpu->legacy_mark;
    }
    CHECK_CUDA(cudaStreamWaitEvent(gpu->stream, ev, 0));
fail:
    return st;
}

hvd_status hvdc__gpu_stream_wait(hvdc_gpu *gpu, void *event) {
    hvd_status st = HVD_OK;
    CHECK_CUDA(cudaSetDevice(gpu->device));
    return op_wait_ready(gpu, event);
fail:
    return st;
}

static hvd_status op_fusion_buffer(void *self, size_t nbytes, void **buf) {
    hvdc_gpu *gpu = self;
    hvd_status st = HVD_OK;
    if (nbytes > gpu->fusion_bytes) {
        size_t grown = gpu->fusion_bytes * 2 > nbytes ? gpu->fusion_bytes * 2 : nbytes;
        grown = (grown + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1); /* whole MiB */
        if (gpu->fusion) {
            void *old = gpu->fusion;
            gpu->fusion = NULL;
            gpu->fusion_bytes = 0;
            if (gpu->pools) {
                CHECK_CUDA(cudaFreeAsync(old, gpu->stream)); /* after the work queued on it */
            } else {
                CHECK_CUDA(cudaStreamSynchronize(gpu->stream)); /* rare: growth only */
                CHECK_CUDA(cudaFree(old));
            }
        }
        if (gpu->pools)
            CHECK_CUDA(cudaMallocAsync(&gpu->fusion, grown, gpu->stream));
        else
            CHECK_CUDA(cudaMalloc(&gpu->fusion, grown));
        gpu->fusion_bytes = grown;
    }
    *buf = gpu->fusion;
fail:
    return st;
}

static hvd_status op_copy_scale(void *self, const hvdc_gpu_batch *batch) {
    hvdc_gpu *gpu = self;
    hvd_status st = HVD_OK;
    CHECK_CUDA((cudaError_t)hvdc__gpu_launch_copy_scale(batch, gpu->max_blocks, gpu->stream));
fail:
    return st;
}

static hvd_status op_allreduce(void *self, const void *src, void *dst, size_t count,
                               hvd_dtype dtype, hvd_reduce_op op) {
    hvdc_gpu *gpu = self;
    hvd_status st = HVD_OK;
    CHECK_NCCL(gpu->comm, ncclAllReduce(src, dst, count, nccl_dtype(dtype), nccl_op(op, dtype),
                                        gpu->comm, gpu->stream));
fail:
    return st;
}

/* In place on buf (local_size * shard elements), one collective after the other on the
 * stream (not grouped: each needs the previous one's result):
 *   node:   reduce-scatter  buf -> buf + local_rank*shard   (this rank's shard, node-reduced)
 *   across: all-reduce of that shard among ranks with this local rank
 *   node:   all-gather of the shards back into buf */
static hvd_status op_hierarchical(void *self, void *buf, size_t shard, hvd_dtype dtype,
                                  hvd_reduce_op op) {
    hvdc_gpu *gpu = self;
    hvd_status st = HVD_OK;
    ncclDataType_t dt = nccl_dtype(dtype);
    char *mine = (char *)buf + (size_t)gpu->local_rank * shard * hvd_dtype_size(dtype);
    CHECK_NCCL(gpu->local_comm, ncclReduceScatter(buf, mine, shard, dt, nccl_op(op, dtype),
                                                  gpu->local_comm, gpu->stream));
    CHECK_NCCL(gpu->cross_comm, ncclAllReduce(mine, mine, shard, dt, nccl_op(op, dtype),
                                              gpu->cross_comm, gpu->stream));
    CHECK_NCCL(gpu->local_comm, ncclAllGather(mine, buf, shard, dt, gpu->local_comm,
                                              gpu->stream));
fail:
    return st;
}

static hvdc_gpu_ops ops_of(hvdc_gpu *gpu) {
    hvdc_gpu_ops ops = {gpu, op_wait_ready, op_fusion_buffer, op_copy_scale, op_allreduce,
                        gpu->local_comm && gpu->cross_comm ? op_hierarchical : NULL};
    return ops;
}

/* ---- collectives ---------------------------------------------------------------------- */

/* Common entry: device current, communicator healthy. */
static hvd_status enter(hvdc_gpu *gpu, hvdc_gpu_pending **out) {
    if (out) *out = NULL;
    if (!gpu || !out) return hvdc__fail(HVD_ERR_INVALID_ARG, "GPU backend called without a context");
    if (gpu->broken) return hvdc__fail(HVD_ERR_NCCL, "%s", gpu->broken_msg);
    cudaError_t err = cudaSetDevice(gpu->device);
    if (err != cudaSuccess)
        return hvdc__fail(HVD_ERR_CUDA, "cudaSetDevice(%d) failed at %s:%d on rank %d: %s",
                          gpu->device, __FILE__, __LINE__, gpu->rank, cudaGetErrorString(err));
    return HVD_OK;
}

/* Common exit: an event after the queued work. */
static hvd_status record(hvdc_gpu *gpu, hvdc_gpu_pending **out) {
    hvd_status st = HVD_OK;
    hvdc_gpu_pending *p = calloc(1, sizeof *p);
    if (!p) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory recording a GPU collective");
    p->gpu = gpu;
    CHECK_CUDA(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventRecord(p->done, gpu->stream));
    *out = p;
    return HVD_OK;
fail:
    hvdc__gpu_pending_free(p);
    return st;
}

static hvd_status check_reduction(hvd_dtype dtype, hvd_reduce_op op, int *native_avg) {
    const char *why = "";
    hvd_status st = hvdc__gpu_reduce_supported(dtype, op, nccl_version(), native_avg, &why);
    if (st != HVD_OK)
        return hvdc__fail(st, "device %s of %s: %s", hvdc__op_name((int)op),
                          hvdc__dtype_name((int)dtype), why);
    return HVD_OK;
}

/* enter() for a collective that reduces: also checks NCCL can reduce dtype with op. */
static hvd_status enter_reduction(hvdc_gpu *gpu, hvdc_gpu_pending **out, hvd_dtype dtype,
                                  hvd_reduce_op op, int *native_avg) {
    hvd_status st = enter(gpu, out);
    return st == HVD_OK ? check_reduction(dtype, op, native_avg) : st;
}

hvd_status hvdc__gpu_allreduce(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                               hvd_dtype dtype, hvd_reduce_op op, double prescale,
                               double postscale, void *ready_event, hvdc_gpu_pending **out) {
    int native_avg = 0;
    hvd_status st = enter_reduction(gpu, out, dtype, op, &native_avg);
    if (st != HVD_OK) return st;
    hvdc_gpu_ops ops = ops_of(gpu);
    st = hvdc__gpu_allreduce_sequence(&ops, tensors, n, dtype, op, prescale, postscale,
                                      gpu->size, native_avg, ops.hierarchical != NULL,
                                      gpu->local_size, ready_event);
    return st == HVD_OK ? record(gpu, out) : st;
}

hvd_status hvdc__gpu_broadcast(hvdc_gpu *gpu, void *buf, size_t count, hvd_dtype dtype, int root,
                               void *ready_event, hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    CHECK(op_wait_ready(gpu, ready_event));
    if (count > 0)
        CHECK_NCCL(gpu->comm, ncclBroadcast(buf, buf, count, nccl_dtype(dtype), root, gpu->comm,
                                            gpu->stream));
    return record(gpu, out);
fail:
    return st;
}

hvd_status hvdc__gpu_allgather(hvdc_gpu *gpu, const void *send, void *recv,
                               const size_t *rank_counts, hvd_dtype dtype, void *ready_event,
                               hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    ncclDataType_t dt = nccl_dtype(dtype);
    size_t elem = hvd_dtype_size(dtype);
    int equal = 1;
    for (int r = 1; r < gpu->size; r++) equal &= rank_counts[r] == rank_counts[0];
    CHECK(op_wait_ready(gpu, ready_event));
    if (equal) {
        if (rank_counts[0] > 0)
            CHECK_NCCL(gpu->comm, ncclAllGather(send, recv, rank_counts[0], dt, gpu->comm,
                                                gpu->stream));
    } else { /* one broadcast per rank into its place, as one grouped launch */
        size_t offset = 0;
        CHECK_NCCL(gpu->comm, ncclGroupStart());
        for (int r = 0; r < gpu->size; r++) {
            char *dst = (char *)recv + offset * elem;
            const void *src = r == gpu->rank ? send : dst;
            if (rank_counts[r] > 0) {
                ncclResult_t res = ncclBroadcast(src, dst, rank_counts[r], dt, r, gpu->comm,
                                                 gpu->stream);
                if (res != ncclSuccess) {
                    ncclGroupEnd(); /* close the group before reporting */
                    CHECK_NCCL(gpu->comm, res);
                }
            }
            offset += rank_counts[r];
        }
        CHECK_NCCL(gpu->comm, ncclGroupEnd());
    }
    return record(gpu, out);
fail:
    return st;
}

hvd_status hvdc__gpu_reducescatter(hvdc_gpu *gpu, const void *send, void *recv, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op, double prescale,
                                   double postscale, void *ready_event, hvdc_gpu_pending **out) {
    int native_avg = 0;
    hvd_status st = enter_reduction(gpu, out, dtype, op, &native_avg);
    if (st != HVD_OK) return st;
    hvdc_gpu_segment *segs = NULL;
    size_t elem = hvd_dtype_size(dtype), size = (size_t)gpu->size;
    size_t my_offset = 0, my_count = 0;
    hvdc__block_range(count, size, (size_t)gpu->rank, &my_offset, &my_count);
    if (op == HVD_AVERAGE && !native_avg) {
        op = HVD_SUM;
        postscale /= (double)size;
    }
    hvdc_gpu_batch batch;
    size_t pos = 0;
    CHECK(op_wait_ready(gpu, ready_event));
    if (count == 0) return record(gpu, out);
    if (count % size == 0 && prescale == 1.0) { /* even blocks: straight from send */
        CHECK_NCCL(gpu->comm, ncclReduceScatter(send, recv, count / size, nccl_dtype(dtype),
                                                nccl_op(op, dtype), gpu->comm, gpu->stream));
    } else { /* pack the uneven blocks into equal padded shards of the fusion buffer */
        hvdc_shard_plan plan;
        void *buf = NULL;
        CHECK(hvdc__shard_plan(count, size, 1, &plan));
        CHECK(op_fusion_buffer(gpu, plan.padded * elem, &buf));
        segs = calloc(size, sizeof *segs);
        if (!segs) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning a device reduce-scatter");
            goto fail;
        }
        for (size_t r = 0; r < size; r++) {
            size_t off = 0, n = 0;
            hvdc__block_range(count, size, r, &off, &n);
            segs[r] = (hvdc_gpu_segment){(const char *)send + off * elem,
                                         (char *)buf + r * plan.shard * elem, n};
        }
        while (hvdc__gpu_batch_next(segs, size, &pos, dtype, prescale, &batch) > 0)
            CHECK(op_copy_scale(gpu, &batch));
        char *shard = (char *)buf + (size_t)gpu->rank * plan.shard * elem;
        CHECK_NCCL(gpu->comm, ncclReduceScatter(buf, shard, plan.shard, nccl_dtype(dtype),
                                                nccl_op(op, dtype), gpu->comm, gpu->stream));
        hvdc_gpu_segment mine = {shard, recv, my_count};
        pos = 0;
        if (hvdc__gpu_batch_next(&mine, 1, &pos, dtype, postscale, &batch) > 0)
            CHECK(op_copy_scale(gpu, &batch));
        postscale = 1.0; /* applied in the copy out */
    }
    if (postscale != 1.0) {
        hvdc_gpu_segment mine = {recv, recv, my_count};
        pos = 0;
        if (hvdc__gpu_batch_next(&mine, 1, &pos, dtype, postscale, &batch) > 0)
            CHECK(op_copy_scale(gpu, &batch));
    }
    free(segs);
    return record(gpu, out);
fail:
    free(segs);
    return st;
}

hvd_status hvdc__gpu_alltoall(hvdc_gpu *gpu, const void *send, const size_t *send_counts,
                              void *recv, const size_t *recv_counts, hvd_dtype dtype,
                              void *ready_event, hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    ncclDataType_t dt = nccl_dtype(dtype);
    size_t elem = hvd_dtype_size(dtype), soff = 0, roff = 0;
    CHECK(op_wait_ready(gpu, ready_event));
    CHECK_NCCL(gpu->comm, ncclGroupStart());
    for (int p = 0; p < gpu->size; p++) {
        ncclResult_t res = ncclSuccess;
        if (send_counts[p] > 0)
            res = ncclSend((const char *)send + soff * elem, send_counts[p], dt, p, gpu->comm,
                           gpu->stream);
        if (res == ncclSuccess && recv_counts[p] > 0)
            res = ncclRecv((char *)recv + roff * elem, recv_counts[p], dt, p, gpu->comm,
                           gpu->stream);
        if (res != ncclSuccess) {
            ncclGroupEnd();
            CHECK_NCCL(gpu->comm, res);
        }
        soff += send_counts[p];
        roff += recv_counts[p];
    }
    CHECK_NCCL(gpu->comm, ncclGroupEnd());
    return record(gpu, out);
fail:
    return st;
}

/* ---- completion -------------------------------------------------------------------------- */

/* After an asynchronous NCCL error: abort the communicators so nothing waits on them. */
static hvd_status mark_broken(hvdc_gpu *gpu, ncclComm_t comm, ncclResult_t err) {
    if (!gpu->broken) {
        snprintf(gpu->broken_msg, sizeof gpu->broken_msg,
                 "NCCL reported an asynchronous error on rank %d: %s (%s); the GPU "
                 "communicator was aborted", gpu->rank, ncclGetErrorString(err),
                 ncclGetLastError(comm));
        gpu->broken = 1;
        ncclComm_t comms[3] = {gpu->comm, gpu->local_comm, gpu->cross_comm};
        for (int i = 0; i < 3; i++)
            if (comms[i]) ncclCommAbort(comms[i]);
        gpu->comm = gpu->local_comm = gpu->cross_comm = NULL;
    }
    return hvdc__fail(HVD_ERR_NCCL, "%s", gpu->broken_msg);
}

hvd_status hvdc__gpu_pending_poll(hvdc_gpu_pending *p, int *done) {
    *done = 1;
    if (!p) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvdc__gpu_pending_poll(NULL)");
    hvdc_gpu *gpu = p->gpu;
    if (gpu->broken) return hvdc__fail(HVD_ERR_NCCL, "%s", gpu->broken_msg);
    cudaError_t err = cudaEventQuery(p->done);
    if (err == cudaSuccess) return HVD_OK;
    if (err != cudaErrorNotReady)
        return hvdc__fail(HVD_ERR_CUDA, "a GPU collective failed on rank %d (cudaEventQuery at "
                          "%s:%d): %s (%s)", gpu->rank, __FILE__, __LINE__,
                          cudaGetErrorString(err), cudaGetErrorName(err));
    ncclComm_t comms[3] = {gpu->comm, gpu->local_comm, gpu->cross_comm};
    for (int i = 0; i < 3; i++) {
        ncclResult_t async = ncclSuccess;
        if (!comms[i]) continue;
        ncclResult_t res = ncclCommGetAsyncError(comms[i], &async);
        if (res != ncclSuccess) return mark_broken(gpu, comms[i], res);
        if (async != ncclSuccess && async != ncclInProgress) return mark_broken(gpu, comms[i], async);
    }
    *done = 0;
    return HVD_OK;
}

hvd_status hvdc__gpu_pending_wait(hvdc_gpu_pending *p) {
    if (!p) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvdc__gpu_pending_wait(NULL)");
    cudaError_t err = cudaEventSynchronize(p->done);
    if (err != cudaSuccess)
        return hvdc__fail(HVD_ERR_CUDA, "a GPU collective failed on rank %d (cudaEventSynchronize "
                          "at %s:%d): %s (%s)", p->gpu->rank, __FILE__, __LINE__,
                          cudaGetErrorString(err), cudaGetErrorName(err));
    int done = 0;
    return hvdc__gpu_pending_poll(p, &done);
}

void hvdc__gpu_pending_free(hvdc_gpu_pending *p) {
    if (!p) return;
    if (p->done) cudaEventDestroy(p->done); /* legal before completion: freed when it fires */
    free(p);
}
