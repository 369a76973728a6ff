/*
 * kernels.cu - the batched copy-and-scale kernel behind device fusion (see kernels.h).
 *
 * One launch handles up to HVDC_GPU_BATCH_MAX segments passed by value (no table to upload,
 * nothing to free), with a block map beside them (gpu/gpu_block_map.h): each segment gets
 * blocks for its own length, and the 1-D grid is all of them one after another. Block b finds
 * its segment s by binary search (first[s] <= b < first[s + 1]) and strides over it with that
 * segment's blocks alone,
 *
 *   grid:      |b0 b1 b2 .. bk|b0|b0|b0 b1|..     first = {0, k+1, k+2, k+3, k+5, ..}
 *               segment 0      1  2  3
 *   segment s: grid-stride over 16-byte words (or narrower words when a pointer is less
 *              aligned), then the tail bytes; when scaling, over 16-byte words of values
 *              where both pointers are 16-byte aligned (else value by value), then the tail
 *              values (a second kernel, so the plain copy keeps its registers)
 *
 * Sizes and indices are 64-bit throughout. Background thread (launches); device (runs).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/gpu_block_map.h"
#include "gpu/kernels.h"

namespace {

constexpr int kThreads = HVDC_GPU_COPY_THREADS;

/* Both arguments travel by value in the kernel's parameter space, which holds 4 KiB on every
 * CUDA version: 3088 bytes of batch + 516 of block map = 3604. */
static_assert(sizeof(hvdc_gpu_batch) + sizeof(hvdc_gpu_block_map) <= 4096,
              "the copy kernel's by-value arguments pass CUDA's 4 KiB parameter limit");

/* d[i] = fn(s[i]) for words [0, words), grid-strided, four words in flight per thread (loads
 * first, then stores): one word per iteration leaves the memory system idle between a load
 * and its store (docs/performance.md has the rates). */
template <typename W, typename Fn>
__device__ void map_words(const W *s, W *d, uint64_t words, uint64_t tid, uint64_t stride,
                          Fn fn) {
    uint64_t i = tid;
    for (; i + 3 * stride < words; i += 4 * stride) {
        const W a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
        d[i] = fn(a);
        d[i + stride] = fn(b);
        d[i + 2 * stride] = fn(c);
        d[i + 3 * stride] = fn(e);
    }
    for (; i < words; i += stride) d[i] = fn(s[i]);
}

template <typename W>
__device__ void copy_words(const char *src, char *dst, uint64_t nbytes, uint64_t tid,
                           uint64_t stride) {
    const uint64_t words = nbytes / sizeof(W);
    map_words(reinterpret_cast<const W *>(src), reinterpret_cast<W *>(dst), words, tid, stride,
              [](W w) { return w; });
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

/* Integers as Horovod scales them: in double, truncated toward zero; a result beyond the
 * type's range is clamped to it [Lo, Hi] (as collectives/reduce.c's hvdc__scale_integer). */
template <typename T, long long Lo, long long Hi>
__device__ void scale_ints(const void *src, void *dst, uint64_t count, double f, uint64_t tid,
                           uint64_t stride) {
    const T *s = static_cast<const T *>(src);
    T *d = static_cast<T *>(dst);
    for (uint64_t i = tid; i < count; i += stride) {
        const double v = trunc(static_cast<double>(s[i]) * f);
        d[i] = v != v ? T(0)
             : v <= static_cast<double>(Lo) ? T(Lo)
             : v >= static_cast<double>(Hi) ? T(Hi)
             : static_cast<T>(v);
    }
}

/* One 16-byte word of T values, each scaled as Scale<T> scales it alone. */
template <typename T>
__device__ uint4 scale_word(uint4 w, double f) {
    constexpr int kPerWord = sizeof(uint4) / sizeof(T);
    T v[kPerWord];
    memcpy(v, &w, sizeof w);
#pragma unroll
    for (int k = 0; k < kPerWord; k++) v[k] = Scale<T>::apply(v[k], f);
    memcpy(&w, v, sizeof w);
    return w;
}

/* Floating values times f: as 16-byte words (map_words) where both pointers are 16-byte
 * aligned (an average's unpack), else value by value; the same arithmetic per value either
 * way. */
template <typename T>
__device__ void scale_elems(const void *src, void *dst, uint64_t count, double f, uint64_t tid,
                            uint64_t stride) {
    const T *s = static_cast<const T *>(src);
    T *d = static_cast<T *>(dst);
    uint64_t done = 0; /* values scaled as words */
    if ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % sizeof(uint4) == 0) {
        const uint64_t words = count / (sizeof(uint4) / sizeof(T));
        map_words(static_cast<const uint4 *>(src), static_cast<uint4 *>(dst), words, tid, stride,
                  [f](uint4 w) { return scale_word<T>(w, f); });
        done = words * (sizeof(uint4) / sizeof(T));
    }
    for (uint64_t i = done + tid; i < count; i += stride) d[i] = Scale<T>::apply(s[i], f);
}

__device__ uint64_t elem_size(int32_t dtype) {
    switch (dtype) {
    case HVD_UINT8: case HVD_INT8: case HVD_BOOL: return 1;
    case HVD_FLOAT16: case HVD_BFLOAT16: case HVD_INT16: case HVD_UINT16: return 2;
    case HVD_INT32: case HVD_FLOAT32: return 4;
    default: return 8; /* HVD_INT64, HVD_FLOAT64 */
    }
}

/* The segment block b runs: the last s with first[s] <= b (every segment has a block, so
 * first[0..n] rises strictly). At most 7 steps for 128 segments, on parameters that every
 * thread of the block reads alike. */
__device__ uint32_t segment_of(const hvdc_gpu_block_map &map, uint32_t n, uint32_t b) {
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) / 2;
        if (map.first[mid] <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Each block strides over its own segment with that segment's blocks (map, see the top of
 * this file), so a large tensor gets many blocks and a small one few, side by side in one
 * launch, and no thread walks every segment. */
template <bool kScaled>
__global__ void __launch_bounds__(kThreads) copy_scale_kernel(const hvdc_gpu_batch batch,
                                                               const hvdc_gpu_block_map map) {
    const uint32_t s = segment_of(map, batch.n, blockIdx.x);
    const uint32_t first = map.first[s], blocks = map.first[s + 1] - first;
    const uint64_t stride = static_cast<uint64_t>(blocks) * blockDim.x;
    const uint64_t tid = static_cast<uint64_t>(blockIdx.x - first) * blockDim.x + threadIdx.x;
    const hvdc_gpu_segment seg = batch.seg[s];
    const double f = batch.factor;
    if (!kScaled) {
        if (seg.src != seg.dst) copy_bytes(seg.src, seg.dst, seg.count * elem_size(batch.dtype), tid, stride);
        return;
    }
    switch (batch.dtype) {
    case HVD_FLOAT16: scale_elems<__half>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_BFLOAT16: scale_elems<__nv_bfloat16>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_FLOAT32: scale_elems<float>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_FLOAT64: scale_elems<double>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_UINT8: scale_ints<uint8_t, 0, 255>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_INT8: scale_ints<int8_t, -128, 127>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_INT16: scale_ints<int16_t, -32768, 32767>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_UINT16: scale_ints<uint16_t, 0, 65535>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_INT32: scale_ints<int32_t, INT32_MIN, INT32_MAX>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    case HVD_INT64: scale_ints<int64_t, INT64_MIN, INT64_MAX>(seg.src, seg.dst, seg.count, f, tid, stride); break;
    default: break; /* bool: the launch refuses a factor */
    }
}

} // namespace

extern "C" int hvdc__gpu_launch_copy_scale(const hvdc_gpu_batch *batch, int max_blocks,
                                           void *stream) {
    const int d = batch->dtype;
    if (batch->n == 0) return static_cast<int>(cudaSuccess);
    if (d < 0 || d >= HVD_DTYPE_COUNT) return static_cast<int>(cudaErrorInvalidValue);
    if (batch->factor != 1.0 && d == HVD_BOOL) return static_cast<int>(cudaErrorInvalidValue);
    /* Blocks per segment from its own length (gpu_block_map.h; it also refuses n and
     * max_blocks out of range): a large tensor among small ones gets the blocks it can use. */
    hvdc_gpu_block_map map;
    if (hvdc__gpu_split_blocks(batch, max_blocks, &map) != HVD_OK)
        return static_cast<int>(cudaErrorInvalidValue);
    /* two kernels: one holding both paths needs more registers than either, which would cut
     * the plain copy's occupancy too */
    if (batch->factor == 1.0)
        copy_scale_kernel<false><<<map.first[batch->n], kThreads, 0,
                                   static_cast<cudaStream_t>(stream)>>>(*batch, map);
    else
        copy_scale_kernel<true><<<map.first[batch->n], kThreads, 0,
                                  static_cast<cudaStream_t>(stream)>>>(*batch, map);
    return static_cast<int>(cudaGetLastError());
}
