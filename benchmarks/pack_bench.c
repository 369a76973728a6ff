/*
 * pack_bench - the device fusion buffer's pack kernel (gpu/kernels.cu) against the copies it
 * replaces, on one GPU, no MPI: for a few tensor mixes, one launch of the batched
 * copy-and-scale kernel (factor 1, and 0.5 as an average's scaling), one cudaMemcpyAsync per
 * tensor, and one cudaMemcpyAsync of the same total bytes (the copy bound). Rates are bytes
 * copied per second (each byte is read once and written once); median of 20 timed runs with
 * CUDA events, after 3 warm-up runs.
 * Usage: pack_bench            (built only with the GPU backend)
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/kernels.h"

#define RUNS 20
#define WARMUP 3

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            fprintf(stderr, "pack_bench: %s: %s\n", #call, cudaGetErrorString(err_));      \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)

static int by_value(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef enum { KERNEL, KERNEL_SCALED, MEMCPY_EACH, MEMCPY_TOTAL } method;
static const char *const method_names[] = {"kernel", "kernel x0.5", "memcpy each", "memcpy total"};

/* Median milliseconds of one pack of n tensors of seg_bytes each. */
static float time_pack(method m, char *src, char *dst, int n, size_t seg_bytes, int max_blocks,
                       cudaStream_t stream) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    float ms[RUNS];
    for (int run = 0; run < WARMUP + RUNS; run++) {
        CHECK(cudaEventRecord(start, stream));
        if (m == MEMCPY_TOTAL) {
            CHECK(cudaMemcpyAsync(dst, src, (size_t)n * seg_bytes, cudaMemcpyDeviceToDevice, stream));
        } else if (m == MEMCPY_EACH) {
            for (int i = 0; i < n; i++)
                CHECK(cudaMemcpyAsync(dst + (size_t)i * seg_bytes, src + (size_t)i * seg_bytes,
                                      seg_bytes, cudaMemcpyDeviceToDevice, stream));
        } else {
            for (int first = 0; first < n; first += HVDC_GPU_BATCH_MAX) {
                hvdc_gpu_batch batch = {0, HVD_FLOAT32, m == KERNEL_SCALED ? 0.5 : 1.0, {{0}}};
                for (int i = first; i < n && batch.n < HVDC_GPU_BATCH_MAX; i++)
                    batch.seg[batch.n++] = (hvdc_gpu_segment){src + (size_t)i * seg_bytes,
                                                              dst + (size_t)i * seg_bytes,
                                                              seg_bytes / sizeof(float)};
                CHECK((cudaError_t)hvdc__gpu_launch_copy_scale(&batch, max_blocks, stream));
            }
        }
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        if (run >= WARMUP) CHECK(cudaEventElapsedTime(&ms[run - WARMUP], start, stop));
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    qsort(ms, RUNS, sizeof ms[0], by_value);
    return ms[RUNS / 2];
}

int main(void) {
    static const struct { int n; size_t seg_bytes; } mixes[] = {
        {1, 64u << 20}, {16, 4u << 20}, {128, 512u << 10}, {128, 64u << 10}, {128, 4u << 10}};
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
    int max_blocks = 4 * sms; /* as gpu/gpu_setup.c */
    char *src, *dst;
    CHECK(cudaMalloc((void **)&src, 64u << 20));
    CHECK(cudaMalloc((void **)&dst, 64u << 20));
    CHECK(cudaMemset(src, 1, 64u << 20));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    printf("# pack_bench: %s, %d SMs, kernel grid at most %d blocks of 256 threads\n", prop.name,
           sms, max_blocks);
    printf("# rate = bytes copied / time (each byte read once, written once); median of %d\n", RUNS);
    printf("# %8s %12s %14s %10s %10s %12s\n", "tensors", "bytes each", "method", "time(us)",
           "GB/s", "vs total");
    for (size_t k = 0; k < sizeof mixes / sizeof mixes[0]; k++) {
        size_t total = (size_t)mixes[k].n * mixes[k].seg_bytes;
        float bound = time_pack(MEMCPY_TOTAL, src, dst, 1, total, max_blocks, stream);
        for (int m = KERNEL; m <= MEMCPY_TOTAL; m++) {
            float t = m == MEMCPY_TOTAL ? bound
                                        : time_pack((method)m, src, dst, mixes[k].n,
                                                    mixes[k].seg_bytes, max_blocks, stream);
            printf("  %8d %12zu %14s %10.1f %10.1f %12.2f\n", mixes[k].n, mixes[k].seg_bytes,
                   method_names[m], t * 1e3, total / (t * 1e-3) / 1e9, bound / t);
        }
    }
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
    return 0;
}
