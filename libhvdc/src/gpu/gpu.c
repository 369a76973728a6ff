/*
 * gpu.c - the GPU backend's collectives (see gpu.h): one device, one non-blocking stream, NCCL
 * communicators, a persistent stream-ordered fusion buffer, and work queued without host syncs.
 * Setting up and tearing down is gpu_setup.c; completion events and aborting, gpu_complete.c.
 *
 * Every collective is queued on gpu->stream in this order and returns at once:
 *   cudaStreamWaitEvent(ready) -> [pack kernel] -> NCCL (grouped) -> [unpack kernel] -> record(done)
 * The all-reduce's order and its NCCL op come from gpu_plan.c (hvdc__gpu_reduce_plan,
 * hvdc__gpu_allreduce_sequence), driven through the hvdc_gpu_ops table below. The fusion
 * buffer grows with cudaFreeAsync/cudaMallocAsync on the same stream, so work still queued on
 * the old buffer is never disturbed (without memory pools, after the stream has drained; that
 * wait, like every other of the background thread's, watches the other ranks).
 *
 * Background thread. Plain C against the CUDA runtime and NCCL C APIs; the kernel is in
 * kernels.cu.
 */
#include "gpu/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "collectives/block.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_internal.h"
#include "gpu/kernels.h"

/* Waits until the stream has run all it holds, before growing frees memory it may still use.
 * Never blindly: a collective queued earlier may wait for a rank that died, which inside a node
 * only this thread can notice (the liveness checks) and end (aborting the communicators). A
 * rank's death: the communicators aborted, HVD_ERR_RANK_FAILED naming it, nothing freed. */
static hvd_status wait_stream_idle(hvdc_gpu *gpu) {
    hvd_status st = HVD_OK;
    hvdc_poll poll = hvdc__poll_begin(hvdc__liveness_poll_policy(gpu->liveness));
    cudaError_t err;
    while ((err = cudaStreamQuery(gpu->stream)) == cudaErrorNotReady) {
        if ((st = hvdc__liveness_check(gpu->liveness)) != HVD_OK) {
            char why[HVDC_ERROR_MAX];
            snprintf(why, sizeof why, "%s", hvd_last_error());
            hvdc__gpu_abort(gpu, why);
            return hvdc__fail(st, "%s", why);
        }
        hvdc__poll_pause(&poll);
    }
    if (err != cudaSuccess) return hvdc__fail_cuda(err, "cudaStreamQuery", __FILE__, __LINE__);
    return HVD_OK;
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
            if (!gpu->pools) CHECK(wait_stream_idle(gpu)); /* rare: growth only */
            gpu->fusion = NULL;
            gpu->fusion_bytes = 0;
            if (gpu->pools)
                CHECK_CUDA(cudaFreeAsync(old, gpu->stream)); /* after the work queued on it */
            else
                CHECK_CUDA(cudaFree(old));
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
    if (batch->n == 1 && batch->factor == 1.0) { /* one plain copy: the copy engine's own path */
        const hvdc_gpu_segment *seg = &batch->seg[0];
        if (seg->src != seg->dst)
            CHECK_CUDA(cudaMemcpyAsync(seg->dst, seg->src, seg->count * hvd_dtype_size(batch->dtype),
                                       cudaMemcpyDeviceToDevice, gpu->stream));
        return HVD_OK;
    }
    CHECK_CUDA((cudaError_t)hvdc__gpu_launch_copy_scale(batch, gpu->max_blocks, gpu->stream));
fail:
    return st;
}

static hvd_status op_allreduce(void *self, const void *src, void *dst, size_t count,
                               hvd_dtype dtype, hvd_reduce_op op) {
    hvdc_gpu *gpu = self;
    hvd_status st = HVD_OK;
    if (op == HVD_AVERAGE && src != dst) /* gpu_plan.h: never an out-of-place ncclAvg */
        return hvdc__fail(HVD_ERR_INTERNAL, "out-of-place device average handed to NCCL");
    CHECK_NCCL(gpu->comm, ncclAllReduce(src, dst, count, hvdc__nccl_dtype(dtype),
                                        hvdc__nccl_op(op), gpu->comm, gpu->stream));
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
    ncclDataType_t dt = hvdc__nccl_dtype(dtype);
    char *mine = (char *)buf + (size_t)gpu->topo->local_rank * shard * hvd_dtype_size(dtype);
    CHECK_NCCL(gpu->local_comm, ncclReduceScatter(buf, mine, shard, dt, hvdc__nccl_op(op),
                                                  gpu->local_comm, gpu->stream));
    CHECK_NCCL(gpu->cross_comm, ncclAllReduce(mine, mine, shard, dt, hvdc__nccl_op(op),
                                              gpu->cross_comm, gpu->stream));
    CHECK_NCCL(gpu->local_comm, ncclAllGather(mine, buf, shard, dt, gpu->local_comm,
                                              gpu->stream));
fail:
    return st;
}

static hvd_status op_group(void *self, int begin) {
    hvdc_gpu *gpu = self;
    hvd_status st = HVD_OK;
    if (begin) CHECK_NCCL(gpu->comm, ncclGroupStart());
    else CHECK_NCCL(gpu->comm, ncclGroupEnd());
fail:
    return st;
}

static hvdc_gpu_ops ops_of(hvdc_gpu *gpu) {
    hvdc_gpu_ops ops = {gpu, op_wait_ready, op_fusion_buffer, op_copy_scale, op_allreduce,
                        gpu->local_comm && gpu->cross_comm ? op_hierarchical : NULL, op_group};
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
                          gpu->device, __FILE__, __LINE__, gpu->topo->rank, cudaGetErrorString(err));
    return HVD_OK;
}

/* enter() for a collective that reduces: also decides how NCCL reduces dtype with op. */
static hvd_status enter_reduction(hvdc_gpu *gpu, hvdc_gpu_pending **out, hvd_dtype dtype,
                                  hvd_reduce_op op, double prescale, double postscale,
                                  hvdc_gpu_reduce_plan *plan) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    const char *why = "";
    st = hvdc__gpu_reduce_plan(dtype, op, prescale, postscale, gpu->topo->size, hvdc__nccl_version(),
                               plan, &why);
    if (st != HVD_OK)
        return hvdc__fail(st, "device %s of %s: %s", hvdc__op_name((int)op),
                          hvdc__dtype_name((int)dtype), why);
    return HVD_OK;
}

hvd_status hvdc__gpu_allreduce(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                               hvd_dtype dtype, hvd_reduce_op op, double prescale,
                               double postscale, void *ready_event, hvdc_gpu_pending **out) {
    hvdc_gpu_reduce_plan plan;
    hvd_status st = enter_reduction(gpu, out, dtype, op, prescale, postscale, &plan);
    if (st != HVD_OK) return st;
    hvdc_gpu_ops ops = ops_of(gpu);
    st = hvdc__gpu_allreduce_sequence(&ops, tensors, n, dtype, &plan, gpu->topo->size,
                                      ops.hierarchical != NULL, gpu->topo->local_size,
                                      HVDC_GPU_DIRECT_BYTES, ready_event);
    return st == HVD_OK ? hvdc__gpu_record(gpu, out) : st;
}

hvd_status hvdc__gpu_broadcast(hvdc_gpu *gpu, void *buf, size_t count, hvd_dtype dtype, int root,
                               void *ready_event, hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    CHECK(op_wait_ready(gpu, ready_event));
    if (count > 0)
        CHECK_NCCL(gpu->comm, ncclBroadcast(buf, buf, count, hvdc__nccl_dtype(dtype), root, gpu->comm,
                                            gpu->stream));
    return hvdc__gpu_record(gpu, out);
fail:
    return st;
}

hvd_status hvdc__gpu_allgather(hvdc_gpu *gpu, const void *send, void *recv,
                               const size_t *rank_counts, hvd_dtype dtype, void *ready_event,
                               hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    ncclDataType_t dt = hvdc__nccl_dtype(dtype);
    size_t elem = hvd_dtype_size(dtype);
    int equal = 1;
    for (int r = 1; r < gpu->topo->size; r++) equal &= rank_counts[r] == rank_counts[0];
    CHECK(op_wait_ready(gpu, ready_event));
    if (equal) {
        if (rank_counts[0] > 0)
            CHECK_NCCL(gpu->comm, ncclAllGather(send, recv, rank_counts[0], dt, gpu->comm,
                                                gpu->stream));
    } else { /* one broadcast per rank into its place, as one grouped launch */
        size_t offset = 0;
        CHECK_NCCL(gpu->comm, ncclGroupStart());
        for (int r = 0; r < gpu->topo->size; r++) {
            char *dst = (char *)recv + offset * elem;
            const void *src = r == gpu->topo->rank ? send : dst;
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
    return hvdc__gpu_record(gpu, out);
fail:
    return st;
}

hvd_status hvdc__gpu_reducescatter(hvdc_gpu *gpu, const void *send, void *recv, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op, double prescale,
                                   double postscale, void *ready_event, hvdc_gpu_pending **out) {
    hvdc_gpu_reduce_plan plan;
    hvd_status st = enter_reduction(gpu, out, dtype, op, prescale, postscale, &plan);
    if (st != HVD_OK) return st;
    hvdc_gpu_segment *segs = NULL;
    size_t elem = hvd_dtype_size(dtype), size = (size_t)gpu->topo->size;
    size_t my_offset = 0, my_count = 0;
    double post = plan.postscale;
    hvdc__block_range(count, size, (size_t)gpu->topo->rank, &my_offset, &my_count);
    hvdc_gpu_batch batch;
    size_t pos = 0;
    CHECK(op_wait_ready(gpu, ready_event));
    if (count == 0) return hvdc__gpu_record(gpu, out);
    if (!plan.call_nccl) { /* one rank: its block is all of send, scaled */
        hvdc_gpu_segment all = {send, recv, count};
        if (hvdc__gpu_batch_next(&all, 1, &pos, dtype, plan.prescale, &batch) > 0 &&
            (send != recv || plan.prescale != 1.0))
            CHECK(op_copy_scale(gpu, &batch));
    } else if (count % size == 0 && plan.prescale == 1.0 && !plan.in_place_only) {
        /* even blocks: straight from send */
        CHECK_NCCL(gpu->comm, ncclReduceScatter(send, recv, count / size, hvdc__nccl_dtype(dtype),
                                                hvdc__nccl_op(plan.op), gpu->comm, gpu->stream));
    } else { /* pack the blocks into equal padded shards of the fusion buffer; reduce in place */
        hvdc_shard_plan shards;
        void *buf = NULL;
        CHECK(hvdc__shard_plan(count, size, 1, &shards));
        CHECK(op_fusion_buffer(gpu, shards.padded * elem, &buf));
        segs = calloc(size, sizeof *segs);
        if (!segs) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning a device reduce-scatter");
            goto fail;
        }
        for (size_t r = 0; r < size; r++) {
            size_t off = 0, n = 0;
            hvdc__block_range(count, size, r, &off, &n);
            segs[r] = (hvdc_gpu_segment){(const char *)send + off * elem,
                                         (char *)buf + r * shards.shard * elem, n};
        }
        while (hvdc__gpu_batch_next(segs, size, &pos, dtype, plan.prescale, &batch) > 0)
            CHECK(op_copy_scale(gpu, &batch));
        char *shard = (char *)buf + (size_t)gpu->topo->rank * shards.shard * elem;
        CHECK_NCCL(gpu->comm, ncclReduceScatter(buf, shard, shards.shard, hvdc__nccl_dtype(dtype),
                                                hvdc__nccl_op(plan.op), gpu->comm, gpu->stream));
        hvdc_gpu_segment mine = {shard, recv, my_count};
        pos = 0;
        if (hvdc__gpu_batch_next(&mine, 1, &pos, dtype, post, &batch) > 0)
            CHECK(op_copy_scale(gpu, &batch));
        post = 1.0; /* applied in the copy out */
    }
    if (post != 1.0) {
        hvdc_gpu_segment mine = {recv, recv, my_count};
        pos = 0;
        if (hvdc__gpu_batch_next(&mine, 1, &pos, dtype, post, &batch) > 0)
            CHECK(op_copy_scale(gpu, &batch));
    }
    free(segs);
    return hvdc__gpu_record(gpu, out);
fail:
    free(segs);
    return st;
}

hvd_status hvdc__gpu_alltoall(hvdc_gpu *gpu, const void *send, const size_t *send_counts,
                              void *recv, const size_t *recv_counts, hvd_dtype dtype,
                              void *ready_event, hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    ncclDataType_t dt = hvdc__nccl_dtype(dtype);
    size_t elem = hvd_dtype_size(dtype), soff = 0, roff = 0;
    CHECK(op_wait_ready(gpu, ready_event));
    CHECK_NCCL(gpu->comm, ncclGroupStart());
    for (int p = 0; p < gpu->topo->size; p++) {
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
    return hvdc__gpu_record(gpu, out);
fail:
    return st;
}

/* ---- the device Adasum across nodes (gpu.h) --------------------------------------------- */

/* The pinned staging buffer, at least nbytes. Growing waits for the stream: the last
 * from_host may still be reading the old one (rare: growth only). */
static hvd_status host_stage(hvdc_gpu *gpu, size_t nbytes) {
    hvd_status st = HVD_OK;
    if (nbytes <= gpu->host_stage_bytes) return HVD_OK;
    if (gpu->host_stage) {
        CHECK(wait_stream_idle(gpu));
        CHECK_CUDA(cudaFreeHost(gpu->host_stage));
        gpu->host_stage = NULL;
        gpu->host_stage_bytes = 0;
    }
    CHECK_CUDA(cudaMallocHost(&gpu->host_stage, nbytes));
    gpu->host_stage_bytes = nbytes;
fail:
    return st;
}

/* Copies tensors in or out of the fusion buffer at offsets, times factor. */
static hvd_status copy_at_offsets(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                                  const size_t *offsets, hvd_dtype dtype, double factor,
                                  int into_buffer) {
    hvd_status st = HVD_OK;
    size_t elem = hvd_dtype_size(dtype), pos = 0;
    char *base = gpu->fusion;
    hvdc_gpu_segment *segs = malloc((n ? n : 1) * sizeof *segs);
    if (!segs) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning a device Adasum");
    for (size_t i = 0; i < n; i++)
        segs[i] = into_buffer
                      ? (hvdc_gpu_segment){tensors[i].send, base + offsets[i] * elem, tensors[i].count}
                      : (hvdc_gpu_segment){base + offsets[i] * elem, tensors[i].recv, tensors[i].count};
    hvdc_gpu_batch batch;
    while (hvdc__gpu_batch_next(segs, n, &pos, dtype, factor, &batch) > 0) CHECK(op_copy_scale(gpu, &batch));
fail:
    free(segs);
    return st;
}

hvd_status hvdc__gpu_adasum_to_host(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                                    const size_t *offsets, size_t shard, hvd_dtype dtype,
                                    double prescale, void *ready_event, void **host,
                                    hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    size_t elem = hvd_dtype_size(dtype), bytes = shard * elem;
    void *buf = NULL;
    CHECK(op_wait_ready(gpu, ready_event));
    CHECK(op_fusion_buffer(gpu, (size_t)gpu->topo->local_size * bytes, &buf));
    CHECK(host_stage(gpu, bytes ? bytes : 1));
    CHECK_CUDA(cudaMemsetAsync(buf, 0, (size_t)gpu->topo->local_size * bytes, gpu->stream));
    CHECK(copy_at_offsets(gpu, tensors, n, offsets, dtype, prescale, 1));
    char *mine = (char *)buf + (size_t)gpu->topo->local_rank * bytes;
    if (gpu->topo->local_size > 1)
        CHECK_NCCL(gpu->local_comm, ncclReduceScatter(buf, mine, shard, hvdc__nccl_dtype(dtype),
                                                      ncclSum, gpu->local_comm, gpu->stream));
    if (bytes)
        CHECK_CUDA(cudaMemcpyAsync(gpu->host_stage, mine, bytes, cudaMemcpyDeviceToHost, gpu->stream));
    *host = gpu->host_stage;
    return hvdc__gpu_record(gpu, out);
fail:
    return st;
}

hvd_status hvdc__gpu_adasum_from_host(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                                      const size_t *offsets, size_t shard, hvd_dtype dtype,
                                      double postscale, hvdc_gpu_pending **out) {
    hvd_status st = enter(gpu, out);
    if (st != HVD_OK) return st;
    size_t bytes = shard * hvd_dtype_size(dtype);
    char *mine = (char *)gpu->fusion + (size_t)gpu->topo->local_rank * bytes;
    if (bytes)
        CHECK_CUDA(cudaMemcpyAsync(mine, gpu->host_stage, bytes, cudaMemcpyHostToDevice, gpu->stream));
    if (gpu->topo->local_size > 1)
        CHECK_NCCL(gpu->local_comm, ncclAllGather(mine, gpu->fusion, shard, hvdc__nccl_dtype(dtype),
                                                  gpu->local_comm, gpu->stream));
    CHECK(copy_at_offsets(gpu, tensors, n, offsets, dtype, postscale, 0));
    return hvdc__gpu_record(gpu, out);
fail:
    return st;
}
