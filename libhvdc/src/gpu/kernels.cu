/*
 * kernels.cu - the batched copy-and-scale kernel behind device fusion (see kernels.h).
 *
 * One launch handles up to HVDC_GPU_BATCH_MAX segments passed by value (no table to upload,
 * nothing to free). The grid is blocks x segments: row y of blocks strides over segment y,
 *
 *   segment 0: |b0 b1 b2 .. bk|b0 b1 ..|      grid-stride over 16-byte words (or narrower
 *   segment 1: |b0 b1 ..|                     words when a pointer is less aligned), then the
 *   ...                                        tail bytes
 *
 * Sizes and indices are 64-bit throughout. Background thread (launches); device (runs).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/kernels.h"

namespace {

constexpr int kThreads = 256;

/* Four words in flight per thread (loads first, then stores): with one word per iteration
 * the H100 copied 64 MiB at about a third of cudaMemcpyAsync's rate. */
template <typename W>
__device__ void copy_words(const char *src, char *dst, uint64_t nbytes, uint64_t tid,
                           uint64_t stride) {
    const uint64_t words = nbytes / sizeof(W);
    const W *s = reinterpret_cast<const W *>(src);
    W *d = reinterpret_cast<W *>(dst);
    uint64_t i = tid;
    for (; i + 3 * stride < words; i += 4 * stride) {
        const W a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
        d[i] = a;
        d[i + stride] = b;
        d[i + 2 * stride] = c;
        d[i + 3 * stride] = e;
    }
    for (; i < words; i += stride) d[i] = s[i];
    for (uint64_t j = words * sizeof(W) + tid; j < nbytes; j += stride) dst[j] = src[j];
}

__device__ void copy_bytes(const void *src, void *dst, uint64_t nbytes, uint64_t tid,
                           uint64_t stride) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
    const char *s = static_cast<const char *>(src);
    char *d = static_cast<char *>(dst);
    if (a % 16 == 0)
        copy_words<uint4>(s, d, nbytes, tid, stride);
    else if (a % 8 == 0)
        copy_words<uint2>(s, d, nbytes, tid, stride);
    else if (a % 4 == 0)
        copy_words<uint32_t>(s, d, nbytes, tid, stride);
    else
        copy_words<uint8_t>(s, d, nbytes, tid, stride);
}

/* How each floating dtype is scaled: widen, multiply, round back. */
template <typename T> struct Scale;
template <> struct Scale<__half> {
    __device__ static __half apply(__half x, double f) {
        return __float2half_rn(__half2float(x) * static_cast<float>(f));
    }
};
template <> struct Scale<__nv_bfloat16> {
    __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, double f) {
        return __float2bfloat16_rn(__bfloat162float(x) * static_cast<float>(f));
    }
};
template <> struct Scale<float> {
    __device__ static float apply(float x, double f) { return x * static_cast<float>(f); }
};
template <> struct Scale<double> {
    __device__ static double apply(double x, double f) { return x * f; }
};

template <typename T>
__device__ void scale_elems(const void *src, void *dst, uint64_t count, double f, uint64_t tid,
                            uint64_t stride) {
    const T *s = static_cast<const T *>(src);
    T *d = static_cast<T *>(dst);
    for (uint64_t i = tid; i < count; i += stride) d[i] = Scale<T>::apply(s[i], f);
}

__device__ uint64_t elem_size(int32_t dtype) {
    switch (dtype) {
    case HVD_UINT8: case HVD_INT8: case HVD_BOOL: return 1;
    case HVD_FLOAT16: case HVD_BFLOAT16: case HVD_INT16: case HVD_UINT16: return 2;
    case HVD_INT32: case HVD_FLOAT32: return 4;
    default: return 8; /* HVD_INT64, HVD_FLOAT64 */
    }
}

/* blockIdx.y picks the segment, and gridDim.x blocks stride over it: every segment has blocks
 * of its own, so a batch of many small tensors runs them side by side. (Walking all segments in
 * every thread cost O(segments) per thread: 128 tensors of 4 KiB took 57 us on the H100.) */
__global__ void __launch_bounds__(kThreads) copy_scale_kernel(const hvdc_gpu_batch batch) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const hvdc_gpu_segment seg = batch.seg[blockIdx.y];
    const double f = batch.factor;
    if (f == 1.0) {
        if (seg.src != seg.dst) copy_bytes(seg.src, seg.dst, seg.count * elem_size(batch.dtype), tid, stride);
        return;
    }
    switch (batch.dtype) {
    case HVD_FLOAT16: scale_elems<__half>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_BFLOAT16: scale_elems<__nv_bfloat16>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_FLOAT32: scale_elems<float>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    default: scale_elems<double>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    }
}

} // namespace

extern "C" int hvdc__gpu_launch_copy_scale(const hvdc_gpu_batch *batch, int max_blocks,
                                           void *stream) {
    const int d = batch->dtype;
    if (batch->n == 0) return static_cast<int>(cudaSuccess);
    if (d < 0 || d >= HVD_DTYPE_COUNT || max_blocks < 1 || batch->n > HVDC_GPU_BATCH_MAX)
        return static_cast<int>(cudaErrorInvalidValue);
    const bool is_float = d == HVD_FLOAT16 || d == HVD_BFLOAT16 || d == HVD_FLOAT32 ||
                          d == HVD_FLOAT64;
    if (batch->factor != 1.0 && !is_float) return static_cast<int>(cudaErrorInvalidValue);
    /* blocks per segment: enough for the largest at ~8 elements a thread, at most max_blocks,
     * and at most 8 * max_blocks in all (a small segment's extra blocks exit at once) */
    uint64_t largest = 0;
    for (uint32_t s = 0; s < batch->n; s++)
        if (batch->seg[s].count > largest) largest = batch->seg[s].count;
    uint64_t want = (largest + kThreads * 8 - 1) / (kThreads * 8);
    uint64_t cap = 8 * static_cast<uint64_t>(max_blocks) / batch->n;
    if (cap > static_cast<uint64_t>(max_blocks)) cap = static_cast<uint64_t>(max_blocks);
    if (want > cap) want = cap;
    if (want < 1) want = 1;
    const dim3 grid(static_cast<unsigned>(want), batch->n);
    copy_scale_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(*batch);
    return static_cast<int>(cudaGetLastError());
}
