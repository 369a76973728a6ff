/*
 * gpu_plan.c - host-side planning of the GPU path: fusion layout, copy batches, shards, NCCL's
 * dtype/op support and op choice, the device choice, and the order of an all-reduce's device
 * work (see gpu_plan.h).
 * Pure C, compiled in every build (with or without CUDA); background thread and tests.
 */
#include "gpu/gpu_plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"

hvd_status hvdc__gpu_fusion_layout(const size_t *counts, size_t n, size_t elem_size,
                                   size_t *offsets, size_t *total) {
    size_t align = elem_size >= HVDC_GPU_ALIGN_BYTES ? 1 : HVDC_GPU_ALIGN_BYTES / elem_size;
    size_t end = 0;
    for (size_t i = 0; i < n; i++) {
        size_t start = (end + align - 1) / align * align;
        if (start < end || start > SIZE_MAX / elem_size ||
            counts[i] > SIZE_MAX / elem_size - start)
            return hvdc__fail(HVD_ERR_INVALID_ARG, "fused device all-reduce is too large");
        offsets[i] = start;
        end = start + counts[i];
    }
    *total = end;
    return HVD_OK;
}

uint32_t hvdc__gpu_batch_next(const hvdc_gpu_segment *segs, size_t n, size_t *pos,
                              hvd_dtype dtype, double factor, hvdc_gpu_batch *batch) {
    batch->n = 0;
    batch->dtype = (int32_t)dtype;
    batch->factor = factor;
    while (*pos < n && batch->n < HVDC_GPU_BATCH_MAX) {
        const hvdc_gpu_segment *s = &segs[(*pos)++];
        if (s->count > 0) batch->seg[batch->n++] = *s;
    }
    return batch->n;
}

hvd_status hvdc__shard_plan(size_t count, size_t parts, size_t align_elems, hvdc_shard_plan *plan) {
    memset(plan, 0, sizeof *plan);
    if (parts < 1 || align_elems < 1)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "shard plan needs parts >= 1 and align >= 1");
    size_t shard = count / parts + (count % parts != 0);
    shard = (shard + align_elems - 1) / align_elems * align_elems;
    if (shard != 0 && parts > SIZE_MAX / shard)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "shard plan of %zu elements overflows", count);
    plan->parts = parts;
    plan->shard = shard;
    plan->padded = parts * shard;
    return HVD_OK;
}

size_t hvdc__shard_valid(const hvdc_shard_plan *plan, size_t count, size_t r) {
    size_t start = r * plan->shard;
    if (r >= plan->parts || start >= count) return 0;
    return count - start < plan->shard ? count - start : plan->shard;
}

/* Elements of [lo, hi) inside [from, to). */
static size_t overlap(size_t lo, size_t hi, size_t from, size_t to) {
    size_t a = lo > from ? lo : from, b = hi < to ? hi : to;
    return b > a ? b - a : 0;
}

hvd_status hvdc__gpu_adasum_layout(const size_t *counts, size_t n, size_t elem_size,
                                   size_t local_size, size_t local_rank, size_t *offsets,
                                   size_t *entries, hvdc_shard_plan *shards) {
    size_t total = 0, align = HVDC_GPU_ALIGN_BYTES / elem_size > 0 ? HVDC_GPU_ALIGN_BYTES / elem_size : 1;
    hvd_status st = hvdc__gpu_fusion_layout(counts, n, elem_size, offsets, &total);
    if (st == HVD_OK) st = hvdc__shard_plan(total, local_size, align, shards);
    if (st != HVD_OK) return st;
    size_t from = local_rank * shards->shard, to = from + shards->shard;
    for (size_t i = 0; i < n; i++) {
        size_t end = offsets[i] + counts[i], next = i + 1 < n ? offsets[i + 1] : shards->padded;
        entries[2 * i] = overlap(offsets[i], end, from, to);
        entries[2 * i + 1] = overlap(end, next, from, to);
    }
    return HVD_OK;
}

hvd_status hvdc__gpu_reduce_supported(hvd_dtype dtype, hvd_reduce_op op, int nccl_version,
                                      int *native_avg, const char **why) {
    /* ncclAvg and ncclBfloat16 arrived in NCCL 2.10 (version code 21000); NCCL has no 16-bit
     * integers; bool reduces as uint8 max (or) and min (and); every other dtype/op pair of
     * ours (min/max/prod on int8 and uint8 included) is in every NCCL 2.x. */
    *native_avg = nccl_version >= 21000;
    *why = "";
    if (!hvdc__dtype_valid((int)dtype) || !hvdc__op_valid((int)op)) {
        *why = "unknown dtype or reduce op";
        return HVD_ERR_INVALID_ARG;
    }
    if (dtype == HVD_INT16 || dtype == HVD_UINT16) {
        *why = "NCCL has no 16-bit integer type (reduce int32, or move these to host memory)";
        return HVD_ERR_UNSUPPORTED;
    }
    if (dtype == HVD_BOOL && op == HVD_AVERAGE) {
        *why = "the average of bool is undefined";
        return HVD_ERR_INVALID_ARG;
    }
    if (dtype == HVD_BFLOAT16 && nccl_version < 21000) {
        *why = "bfloat16 needs NCCL 2.10 or newer";
        return HVD_ERR_UNSUPPORTED;
    }
    if (op == HVD_AVERAGE && !*native_avg && !hvdc__dtype_is_float(dtype)) {
        *why = "average of an integer dtype on the GPU needs NCCL 2.10 or newer (ncclAvg)";
        return HVD_ERR_UNSUPPORTED;
    }
    return HVD_OK;
}

hvd_status hvdc__gpu_reduce_plan(hvd_dtype dtype, hvd_reduce_op op, double prescale,
                                 double postscale, int size, int nccl_version,
                                 hvdc_gpu_reduce_plan *plan, const char **why) {
    int native_avg = 0;
    memset(plan, 0, sizeof *plan);
    hvd_status st = hvdc__gpu_reduce_supported(dtype, op, nccl_version, &native_avg, why);
    if (st != HVD_OK) return st;
    if (size < 1) {
        *why = "a reduction over fewer than one rank";
        return HVD_ERR_INVALID_ARG;
    }
    *plan = (hvdc_gpu_reduce_plan){op, 0, size > 1, prescale, postscale};
    if (dtype == HVD_BOOL) /* hvdc.h: sum and max are or, product and min are and (uint8 0/1) */
        plan->op = op == HVD_MIN || op == HVD_PRODUCT ? HVD_MIN : HVD_MAX;
    if (op == HVD_AVERAGE && hvdc__dtype_is_float(dtype)) {
        plan->op = HVD_SUM;
        if (dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16)
            plan->prescale /= (double)size; /* each value divided first: the sum stays in range */
        else
            plan->postscale /= (double)size;
    } else if (op == HVD_AVERAGE && postscale != 1.0) {
        /* an integer average with a postscale: Horovod's one float64 factor postscale / size
         * on the sum, truncated (the copy kernel's integer scaling) */
        plan->op = HVD_SUM;
        plan->postscale /= (double)size;
    }
    plan->in_place_only = plan->op == HVD_AVERAGE;
    return HVD_OK;
}

hvd_status hvdc__gpu_choose_device(int requested, int local_rank, int visible, int *device) {
    *device = -1;
    if (visible < 1)
        return hvdc__fail(HVD_ERR_CUDA, "no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)",
                          getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES")
                                                         : "unset");
    int chosen = requested >= 0 ? requested : (local_rank < 0 ? 0 : local_rank) % visible;
    if (chosen >= visible)
        return hvdc__fail(HVD_ERR_CUDA, "device %d is not visible: this process sees %d CUDA "
                          "device(s). Start at most one rank per GPU on each node (the local "
                          "rank picks the device), or check CUDA_VISIBLE_DEVICES", chosen,
                          visible);
    *device = chosen;
    return HVD_OK;
}

/* Queues one pack or unpack: segs[n] through as many batched launches as it takes. */
static hvd_status copy_all(const hvdc_gpu_ops *ops, const hvdc_gpu_segment *segs, size_t n,
                           hvd_dtype dtype, double factor) {
    hvdc_gpu_batch batch;
    size_t pos = 0;
    while (hvdc__gpu_batch_next(segs, n, &pos, dtype, factor, &batch) > 0) {
        hvd_status st = ops->copy_scale(ops->self, &batch);
        if (st != HVD_OK) return st;
    }
    return HVD_OK;
}

static hvd_status copy_one(const hvdc_gpu_ops *ops, const void *src, void *dst, size_t count,
                           hvd_dtype dtype, double factor) {
    hvdc_gpu_segment seg = {src, dst, (uint64_t)count};
    return copy_all(ops, &seg, 1, dtype, factor);
}

/* The pack (send_i -> fusion + offset_i) or unpack (fusion + offset_i -> recv_i) copies of a
 * fused all-reduce, each batch filled straight from the tensors: the same launches as
 * hvdc__gpu_batch_next over a segment list, without building the list first. */
static hvd_status copy_fused(const hvdc_gpu_ops *ops, const hvdc_gpu_tensor *tensors,
                             const size_t *offsets, size_t n, char *fusion, size_t elem,
                             int pack, hvd_dtype dtype, double factor) {
    hvdc_gpu_batch batch;
    batch.n = 0;
    batch.dtype = (int32_t)dtype;
    batch.factor = factor;
    for (size_t i = 0; i < n; i++) {
        const hvdc_gpu_tensor *t = &tensors[i];
        if (t->count == 0) continue;
        char *at = fusion + offsets[i] * elem;
        batch.seg[batch.n++] = pack ? (hvdc_gpu_segment){t->send, at, (uint64_t)t->count}
                                    : (hvdc_gpu_segment){at, t->recv, (uint64_t)t->count};
        if (batch.n == HVDC_GPU_BATCH_MAX) {
            hvd_status st = ops->copy_scale(ops->self, &batch);
            if (st != HVD_OK) return st;
            batch.n = 0;
        }
    }
    return batch.n > 0 ? ops->copy_scale(ops->self, &batch) : HVD_OK;
}

hvd_status hvdc__gpu_allreduce_sequence(const hvdc_gpu_ops *ops, const hvdc_gpu_tensor *tensors,
                                        size_t n, hvd_dtype dtype,
                                        const hvdc_gpu_reduce_plan *plan, int size,
                                        int hierarchical, int local_size, void *ready_event) {
    hvd_status st = HVD_OK;
    size_t *counts = NULL, *offsets = NULL;
    size_t elem = hvd_dtype_size(dtype);
    if (n == 0 || elem == 0 || size < 1)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "device all-reduce of %zu tensors, dtype %d",
                          n, (int)dtype);
    double pre = plan->prescale, post = plan->postscale;
    /* an integer average (ncclAvg, truncating) runs flat: level by level it would be the
     * average of the nodes' averages, truncated twice ((1+2)/2 and (3+2)/2 give 1 and 2, whose
     * average is 1, where (1+2+3+2)/4 is 2) */
    int hier = plan->call_nccl && hierarchical && ops->hierarchical && local_size > 1 &&
               local_size < size && plan->op != HVD_AVERAGE;
    CHECK(ops->wait_ready(ops->self, ready_event));

    if (n == 1 && !hier) { /* one flat tensor: reduced where it lies */
        const hvdc_gpu_tensor *t = &tensors[0];
        if (t->count == 0) return HVD_OK;
        const void *src = t->send;
        /* into recv first when scaling, when NCCL must work in place, or with one rank (the
         * result is the input) */
        if (pre != 1.0 || (t->send != t->recv && (plan->in_place_only || !plan->call_nccl))) {
            CHECK(copy_one(ops, t->send, t->recv, t->count, dtype, pre));
            src = t->recv;
        }
        if (plan->call_nccl) CHECK(ops->allreduce(ops->self, src, t->recv, t->count, dtype, plan->op));
        if (post != 1.0) CHECK(copy_one(ops, t->recv, t->recv, t->count, dtype, post));
        return HVD_OK;
    }

    counts = malloc(n * sizeof *counts);
    offsets = malloc(n * sizeof *offsets);
    if (!counts || !offsets) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning a device all-reduce");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) counts[i] = tensors[i].count;
    size_t total = 0;
    CHECK(hvdc__gpu_fusion_layout(counts, n, elem, offsets, &total));
    if (total == 0) goto fail; /* every tensor empty: nothing to move (st is HVD_OK) */
    hvdc_shard_plan shards = {1, total, total};
    if (hier) CHECK(hvdc__shard_plan(total, (size_t)local_size, HVDC_GPU_ALIGN_BYTES / elem > 0 ?
                                     HVDC_GPU_ALIGN_BYTES / elem : 1, &shards));
    void *buf = NULL;
    CHECK(ops->fusion_buffer(ops->self, shards.padded * elem, &buf));
    CHECK(copy_fused(ops, tensors, offsets, n, buf, elem, 1, dtype, pre));
    if (hier)
        CHECK(ops->hierarchical(ops->self, buf, shards.shard, dtype, plan->op));
    else if (plan->call_nccl)
        CHECK(ops->allreduce(ops->self, buf, buf, total, dtype, plan->op));
    CHECK(copy_fused(ops, tensors, offsets, n, buf, elem, 0, dtype, post));
fail:
    free(counts);
    free(offsets);
    return st;
}
