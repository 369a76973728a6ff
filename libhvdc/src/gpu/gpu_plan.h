/*
 * gpu_plan.h - the host-side planning of the GPU path, in plain C with no CUDA: where fused
 * tensors sit in the device fusion buffer, how their copies are cut into batched kernel
 * launches, how a buffer splits into shards for hierarchical and reduce-scatter collectives,
 * which dtype/op pairs NCCL can reduce and which NCCL op a reduction becomes, which CUDA
 * device a rank uses, and the order of the work an all-reduce queues.
 *
 * The work order is written against hvdc_gpu_ops, a table of six small device actions, so the
 * same sequence drives the real backend (gpu/gpu.c: kernels, NCCL, one stream) and a fake in
 * tests/unit/test_gpu_plan.c that runs it on host memory.
 *
 *   flat all-reduce of n tensors: the small ones packed into the fusion buffer; a tensor alone,
 *   or one of HVDC_GPU_DIRECT_BYTES or more, reduced where it lies ("direct")
 *     wait_ready(event)                       device waits; the host never does
 *     copy_scale(batch) x ceil(k/128)         in: pack send_i * prescale -> fusion + offset_i;
 *                                                 a direct tensor send_i -> recv_i only to
 *                                                 scale it, when NCCL must reduce in place, or
 *                                                 with one rank
 *     group(begin)                            when more than one call follows
 *       allreduce(fusion, fusion, packed)     in place, if any tensor was packed
 *       allreduce(send_i|recv_i -> recv_i)    per direct tensor
 *     group(end)                              (no NCCL call at all with one rank)
 *     copy_scale(batch) x ceil(k/128)         out: unpack fusion + offset_i * postscale ->
 *                                                 recv_i; a direct recv_i scaled in place
 *   hierarchical (every tensor packed, shards padded): pack, reducescatter local / allreduce
 *   cross / allgather local in place, unpack
 *   an integer average never takes the hierarchical path (each level would truncate)
 *
 * Which NCCL op (hvdc__gpu_reduce_plan): NCCL 2.28.9's ncclAvg on a one-rank communicator
 * writes wrong values into the last 1-3 elements when it runs out of place (in place and ncclSum
 * are right). So libhvdc never hands NCCL an out-of-place average: a floating
 * average is a sum with the division folded into the scaling it already does (the unpack copy
 * of a fused buffer, at no extra cost: on the way out for float32/float64, on the way in for
 * float16/bfloat16, as the host path does), an integer average (ncclAvg's truncating division)
 * always runs in place, and with one rank NCCL is not called at all: the result is the input.
 *
 * defines: hvdc_gpu_segment, hvdc_gpu_batch, hvdc_gpu_tensor, hvdc_gpu_ops, hvdc_shard_plan,
 *          hvdc_gpu_reduce_plan, HVDC_GPU_BATCH_MAX, HVDC_GPU_ALIGN_BYTES, HVDC_GPU_DIRECT_BYTES,
 *          hvdc__gpu_fusion_layout, hvdc__gpu_batch_next, hvdc__shard_plan, hvdc__shard_valid,
 *          hvdc__gpu_reduce_supported, hvdc__gpu_reduce_plan, hvdc__gpu_choose_device,
 *          hvdc__gpu_allreduce_sequence, hvdc__gpu_adasum_layout
 * Pure; background thread (and tests). Also included by gpu/kernels.cu (C++), so it stays
 * C/C++-compatible.
 */
#ifndef HVDC_GPU_PLAN_H
#define HVDC_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each tensor packed into the device fusion buffer starts on this boundary, so the copy kernel
 * can move it in 16-byte words. */
#define HVDC_GPU_ALIGN_BYTES 16

/* A fused tensor this large is reduced where it lies, by an NCCL call of its own in the
 * response's group, rather than copied into the fusion buffer and back: the pack and unpack
 * are two passes over its bytes, more than one more call in an NCCL group costs
 * (docs/performance.md), and a tensor this size gains nothing from sharing a
 * call. Horovod packs every tensor of a fused response. */
#define HVDC_GPU_DIRECT_BYTES ((size_t)4 << 20)

/* Segments per copy-kernel launch. The batch travels as a by-value kernel argument, with the
 * block map (gpu_block_map.h) beside it; together they must stay under 4 KiB (the limit on
 * every CUDA version): 16 + 128 * 24 = 3088 bytes of batch + 129 * 4 = 516 of map = 3604. */
#define HVDC_GPU_BATCH_MAX 128

/* dst[0..count) = src[0..count) * factor, elements of the batch's dtype. */
typedef struct hvdc_gpu_segment {
    const void *src;
    void *dst;
    uint64_t count; /* elements */
} hvdc_gpu_segment;

typedef struct hvdc_gpu_batch {
    uint32_t n;       /* segments used */
    int32_t dtype;    /* hvd_dtype */
    double factor;    /* 1.0: plain copy; else floating dtypes only */
    hvdc_gpu_segment seg[HVDC_GPU_BATCH_MAX];
} hvdc_gpu_batch;

/* One tensor of a device all-reduce. send == recv reduces in place. */
typedef struct hvdc_gpu_tensor {
    const void *send;
    void *recv;
    size_t count; /* elements */
} hvdc_gpu_tensor;

/* Element offsets of n tensors packed in order, each aligned to HVDC_GPU_ALIGN_BYTES;
 * *total = elements the packed buffer spans (last tensor's end, not padded further).
 * @return HVD_OK, or HVD_ERR_INVALID_ARG if the total overflows size_t. */
hvd_status hvdc__gpu_fusion_layout(const size_t *counts, size_t n, size_t elem_size,
                                   size_t *offsets, size_t *total);

/* Fills batch with the next non-empty segments of segs[*pos .. n) (at most HVDC_GPU_BATCH_MAX),
 * skipping count-0 ones, and advances *pos past them. @return batch->n; 0 when none are left. */
uint32_t hvdc__gpu_batch_next(const hvdc_gpu_segment *segs, size_t n, size_t *pos,
                              hvd_dtype dtype, double factor, hvdc_gpu_batch *batch);

/* A buffer of count elements split into parts equal shards, as NCCL's reduce-scatter and
 * all-gather need: every shard has `shard` elements (a multiple of align_elems), the buffer is
 * padded to padded = parts * shard, and shard r starts at r * shard.
 *
 *   count = 10, parts = 4, align 1:  | 0 1 2 | 3 4 5 | 6 7 8 | 9 . . |   shard 3, padded 12
 */
typedef struct hvdc_shard_plan {
    size_t parts;
    size_t shard;  /* elements per shard, padding included */
    size_t padded; /* parts * shard */
} hvdc_shard_plan;

/* @return HVD_OK; HVD_ERR_INVALID_ARG for parts < 1, align_elems < 1, or overflow. */
hvd_status hvdc__shard_plan(size_t count, size_t parts, size_t align_elems, hvdc_shard_plan *plan);
/* Elements of real data (not padding) in shard r of a buffer of count elements. */
size_t hvdc__shard_valid(const hvdc_shard_plan *plan, size_t count, size_t r);

/* The device Adasum across nodes (runtime/execute_adasum_gpu.c): n tensors packed at offsets
 * (hvdc__gpu_fusion_layout's), the rest of the buffer zero, padded to local_size equal shards
 * (*shards); after the node's reduce-scatter rank local_rank holds shard local_rank. Its host
 * VHDD needs 2n entries, the same on every rank: entries[2i] = how much of tensor i lies in
 * this rank's shard, entries[2i+1] = how much of the zeros after it (gaps and padding; the
 * combine leaves zero vectors zero). The entries add up to shards->shard.
 *
 *   n = 2, local_size = 2:  | t0 t0 t0 . | t1 t1 . . |   shard 4: rank 0 {3, 1, 0, 0},
 *                                                                  rank 1 {0, 0, 2, 2}
 * @return HVD_OK; HVD_ERR_INVALID_ARG on overflow. */
hvd_status hvdc__gpu_adasum_layout(const size_t *counts, size_t n, size_t elem_size,
                                   size_t local_size, size_t local_rank, size_t *offsets,
                                   size_t *entries, hvdc_shard_plan *shards);

/* Can NCCL of version nccl_version (NCCL_VERSION_CODE, e.g. 22809 for 2.28.9) reduce dtype
 * with op? *native_avg = 1 if it has ncclAvg (which an integer average needs; a floating
 * average is always a sum and a scale). @return HVD_OK, or HVD_ERR_UNSUPPORTED with *why set. */
hvd_status hvdc__gpu_reduce_supported(hvd_dtype dtype, hvd_reduce_op op, int nccl_version,
                                      int *native_avg, const char **why);

/* How one reduction over `size` ranks is handed to NCCL (see the top of this file). */
typedef struct hvdc_gpu_reduce_plan {
    hvd_reduce_op op;  /* what NCCL runs: HVD_AVERAGE only for integer dtypes */
    int in_place_only; /* NCCL must reduce in place (op is HVD_AVERAGE) */
    int call_nccl;     /* 0 with one rank: the result is the scaled input */
    double prescale;   /* on the way in: the caller's, times 1/size for a float16/bfloat16 average */
    double postscale;  /* on the way out: the caller's, times 1/size for a float32/float64 average */
} hvdc_gpu_reduce_plan;

/* @return HVD_OK and *plan; else as hvdc__gpu_reduce_supported (why set, plan zeroed). */
hvd_status hvdc__gpu_reduce_plan(hvd_dtype dtype, hvd_reduce_op op, double prescale,
                                 double postscale, int size, int nccl_version,
                                 hvdc_gpu_reduce_plan *plan, const char **why);

/* The CUDA device a rank uses: requested (>= 0, the application's choice) or, for -1,
 * local_rank % visible. @return HVD_OK and *device; HVD_ERR_CUDA (message recorded) when no
 * device is visible or the requested one is not: "device 1 is not visible: this process sees
 * 1 CUDA device(s) ...". */
hvd_status hvdc__gpu_choose_device(int requested, int local_rank, int visible, int *device);

/* The device actions an all-reduce is made of. Each queues work and returns without waiting
 * for the device; each returns HVD_OK or an error with hvd_last_error() set. */
typedef struct hvdc_gpu_ops {
    void *self;
    /* Later work waits for event (a cudaEvent_t; NULL: for the work already queued on the
     * legacy default stream). */
    hvd_status (*wait_ready)(void *self, void *event);
    /* *buf = a device buffer of at least nbytes for the work queued next. */
    hvd_status (*fusion_buffer)(void *self, size_t nbytes, void **buf);
    /* One kernel launch running every segment of batch. */
    hvd_status (*copy_scale)(void *self, const hvdc_gpu_batch *batch);
    /* dst = op over all ranks of src (may be equal). op is HVD_AVERAGE only when
     * src == dst (never an out-of-place average, see the top of this file). */
    hvd_status (*allreduce)(void *self, const void *src, void *dst, size_t count,
                            hvd_dtype dtype, hvd_reduce_op op);
    /* Hierarchical pieces, in place on buf (padded to local_size * shard elements):
     * reduce-scatter inside the node leaves this rank's reduced shard at
     * buf + local_rank * shard; all-reduce of that shard across nodes; all-gather inside the
     * node. NULL when the backend has no hierarchical communicators. */
    hvd_status (*hierarchical)(void *self, void *buf, size_t shard, hvd_dtype dtype,
                               hvd_reduce_op op);
    /* begin (1) or end (0) a group of all-reduces launched together (ncclGroupStart/End);
     * NULL: the calls are queued one after the other. */
    hvd_status (*group)(void *self, int begin);
} hvdc_gpu_ops;

/* Queues a whole all-reduce of tensors[n] on ops in the order drawn at the top of this file,
 * reducing as plan says (from hvdc__gpu_reduce_plan). size: ranks; local_size: ranks in the
 * node, used when hierarchical is set and ops->hierarchical exists (the buffer is then padded
 * to shards); direct_bytes: the flat path reduces a tensor of at least that many bytes where
 * it lies (HVDC_GPU_DIRECT_BYTES; 0: every tensor; SIZE_MAX: only a tensor alone).
 * @return HVD_OK or the first failed action's status (nothing after it is queued, but an open
 * group is closed). */
hvd_status hvdc__gpu_allreduce_sequence(const hvdc_gpu_ops *ops, const hvdc_gpu_tensor *tensors,
                                        size_t n, hvd_dtype dtype,
                                        const hvdc_gpu_reduce_plan *plan, int size,
                                        int hierarchical, int local_size, size_t direct_bytes,
                                        void *ready_event);

#ifdef __cplusplus
}
#endif

#endif
