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

/* Copies cut into batched launches as they are added: one launch per HVDC_GPU_BATCH_MAX
 * segments, all with one factor. */
typedef struct batcher {
    const hvdc_gpu_ops *ops;
    hvdc_gpu_batch batch;
} batcher;

static void batcher_begin(batcher *b, const hvdc_gpu_ops *ops, hvd_dtype dtype, double factor) {
    b->ops = ops;
    b->batch.n = 0;
    b->batch.dtype = (int32_t)dtype;
    b->batch.factor = factor;
}

static hvd_status batcher_flush(batcher *b) {
    if (b->batch.n == 0) return HVD_OK;
    hvd_status st = b->ops->copy_scale(b->ops->self, &b->batch);
    b->batch.n = 0;
    return st;
}

static hvd_status batcher_add(batcher *b, const void *src, void *dst, size_t count) {
    b->batch.seg[b->batch.n++] = (hvdc_gpu_segment){src, dst, (uint64_t)count};
    return b->batch.n == HVDC_GPU_BATCH_MAX ? batcher_flush(b) : HVD_OK;
}

/* Whether a tensor that is reduced where it lies (not through the fusion buffer) is first
 * copied into its receive buffer: to scale it, when NCCL must work in place, or with one rank
 * (the result is the input, and NCCL is not called). */
static int copied_in(const hvdc_gpu_tensor *t, const hvdc_gpu_reduce_plan *plan) {
    return plan->prescale != 1.0 ||
           (t->send != t->recv && (plan->in_place_only || !plan->call_nccl));
}

/* The hierarchical all-reduce: every tensor through the fusion buffer, padded to local_size
 * shards, reduced inside the node, across nodes, and gathered back. */
static hvd_status hierarchical_sequence(const hvdc_gpu_ops *ops, const hvdc_gpu_tensor *tensors,
                                        size_t n, hvd_dtype dtype,
                                        const hvdc_gpu_reduce_plan *plan, int local_size,
                                        size_t *counts, size_t *offsets) {
    hvd_status st = HVD_OK;
    size_t elem = hvd_dtype_size(dtype), total = 0;
    batcher b;
    for (size_t i = 0; i < n; i++) counts[i] = tensors[i].count;
    CHECK(hvdc__gpu_fusion_layout(counts, n, elem, offsets, &total));
    if (total == 0) return HVD_OK; /* every tensor empty: nothing to move */
    hvdc_shard_plan shards;
    CHECK(hvdc__shard_plan(total, (size_t)local_size, HVDC_GPU_ALIGN_BYTES / elem > 0 ?
                           HVDC_GPU_ALIGN_BYTES / elem : 1, &shards));
    void *buf = NULL;
    CHECK(ops->fusion_buffer(ops->self, shards.padded * elem, &buf));
    batcher_begin(&b, ops, dtype, plan->prescale);
    for (size_t i = 0; i < n; i++) {
        const hvdc_gpu_tensor *t = &tensors[i];
        char *at = (char *)buf + offsets[i] * elem;
        if (t->count > 0) CHECK(batcher_add(&b, t->send, at, t->count));
    }
    CHECK(batcher_flush(&b));
    CHECK(ops->hierarchical(ops->self, buf, shards.shard, dtype, plan->op));
    batcher_begin(&b, ops, dtype, plan->postscale);
    for (size_t i = 0; i < n; i++) {
        const hvdc_gpu_tensor *t = &tensors[i];
        char *at = (char *)buf + offsets[i] * elem;
        if (t->count > 0) CHECK(batcher_add(&b, at, t->recv, t->count));
    }
    CHECK(batcher_flush(&b));
fail:
    return st;
}

/* The NCCL calls of a flat all-reduce: the fusion buffer's (if any tensor is packed) and one
 * per tensor reduced where it lies, in one NCCL group when more than one (a group is closed
 * even when a call in it failed). */
static hvd_status flat_calls(const hvdc_gpu_ops *ops, const hvdc_gpu_tensor *tensors, size_t n,
                             const unsigned char *direct, void *buf, size_t packed, hvd_dtype dtype,
                             const hvdc_gpu_reduce_plan *plan) {
    size_t calls = packed > 0;
    for (size_t i = 0; i < n; i++) calls += direct[i] && tensors[i].count > 0;
    int grouped = calls > 1 && ops->group;
    hvd_status st = grouped ? ops->group(ops->self, 1) : HVD_OK;
    if (st != HVD_OK) return st;
    if (packed > 0) st = ops->allreduce(ops->self, buf, buf, packed, dtype, plan->op);
    for (size_t i = 0; st == HVD_OK && i < n; i++) {
        const hvdc_gpu_tensor *t = &tensors[i];
        if (!direct[i] || t->count == 0) continue;
        st = ops->allreduce(ops->self, copied_in(t, plan) ? t->recv : t->send, t->recv, t->count,
                            dtype, plan->op);
    }
    if (grouped) {
        hvd_status closed = ops->group(ops->self, 0);
        if (st == HVD_OK) st = closed;
    }
    return st;
}

hvd_status hvdc__gpu_allreduce_sequence(const hvdc_gpu_ops *ops, const hvdc_gpu_tensor *tensors,
                                        size_t n, hvd_dtype dtype,
                                        const hvdc_gpu_reduce_plan *plan, int size,
                                        int hierarchical, int local_size, size_t direct_bytes,
                                        void *ready_event) {
    hvd_status st = HVD_OK;
    size_t *counts = NULL; /* one allocation: counts[n], offsets[n], direct[n] */
    size_t elem = hvd_dtype_size(dtype);
    if (n == 0 || elem == 0 || size < 1)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "device all-reduce of %zu tensors, dtype %d",
                          n, (int)dtype);
    /* an integer average (ncclAvg, truncating) runs flat: level by level it would be the
     * average of the nodes' averages, truncated twice ((1+2)/2 and (3+2)/2 give 1 and 2, whose
     * average is 1, where (1+2+3+2)/4 is 2) */
    int hier = plan->call_nccl && hierarchical && ops->hierarchical && local_size > 1 &&
               local_size < size && plan->op != HVD_AVERAGE;
    CHECK(ops->wait_ready(ops->self, ready_event));
    counts = malloc(n * (2 * sizeof *counts + 1));
    if (!counts) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning a device all-reduce");
        goto fail;
    }
    size_t *offsets = counts + n;
    unsigned char *direct = (unsigned char *)(offsets + n);
    if (hier) {
        st = hierarchical_sequence(ops, tensors, n, dtype, plan, local_size, counts, offsets);
        goto fail; /* done either way */
    }

    /* flat: a tensor alone, or one of direct_bytes or more, is reduced where it lies (packing
     * it would cost two passes over its bytes to save an NCCL call that large a tensor does
     * not notice); the others go through the fusion buffer (zero counts in its layout take no
     * room) */
    for (size_t i = 0; i < n; i++) {
        /* count * elem >= direct_bytes, without the product */
        direct[i] = n == 1 || direct_bytes == 0 || tensors[i].count > (direct_bytes - 1) / elem;
        counts[i] = direct[i] ? 0 : tensors[i].count;
    }
    size_t packed = 0;
    CHECK(hvdc__gpu_fusion_layout(counts, n, elem, offsets, &packed));
    void *buf = NULL;
    if (packed > 0) CHECK(ops->fusion_buffer(ops->self, packed * elem, &buf));
    batcher b;
    batcher_begin(&b, ops, dtype, plan->prescale); /* in: pack, and direct tensors' copies */
    for (size_t i = 0; i < n; i++) {
        const hvdc_gpu_tensor *t = &tensors[i];
        if (t->count == 0) continue;
        if (!direct[i]) CHECK(batcher_add(&b, t->send, (char *)buf + offsets[i] * elem, t->count));
        else if (copied_in(t, plan)) CHECK(batcher_add(&b, t->send, t->recv, t->count));
    }
    CHECK(batcher_flush(&b));
    if (plan->call_nccl) CHECK(flat_calls(ops, tensors, n, direct, buf, packed, dtype, plan));
    batcher_begin(&b, ops, dtype, plan->postscale); /* out: unpack, and direct tensors' scaling */
    for (size_t i = 0; i < n; i++) {
        const hvdc_gpu_tensor *t = &tensors[i];
        if (t->count == 0) continue;
        if (!direct[i]) CHECK(batcher_add(&b, (char *)buf + offsets[i] * elem, t->recv, t->count));
        else if (plan->postscale != 1.0) CHECK(batcher_add(&b, t->recv, t->recv, t->count));
    }
    CHECK(batcher_flush(&b));
fail:
    free(counts);
    return st;
}
