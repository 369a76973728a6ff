/*
 * pack_bench - the device fusion buffer's pack kernel (gpu/kernels.cu) against the copies it
 * replaces, on one GPU, no MPI: for a few tensor mixes (uniform ones, one large tensor among
 * many small ones, a lone 4-byte tensor, and 1 000 of 32 KiB), the batched copy-and-scale
 * kernel as the backend batches it (hvdc__gpu_batch_next; factor 1, and 0.5 as an average's
 * scaling), one cudaMemcpyAsync per tensor, and one cudaMemcpyAsync of the same total bytes
 * (the copy bound). Rates are bytes copied per second (each byte is read once and written
 * once); median of 20 timed runs with CUDA events, after 3 warm-up runs. The kernel's results
 * are checked (exit 1 if wrong).
 * (One unscaled tensor alone goes through cudaMemcpyAsync in the backend, not this kernel.)
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

/* "4B", or whole KiB as "32K" (buf holds 24). */
static const char *size_text(size_t bytes, char *buf) {
    if (bytes < 1024) snprintf(buf, 24, "%zuB", bytes);
    else snprintf(buf, 24, "%zuK", bytes >> 10);
    return buf;
}

/* One mix of tensors packed back to back: n_big of big bytes, then n_small of small bytes. */
typedef struct mix { int n_big; size_t big; int n_small; size_t small; } mix;

static size_t mix_segments(const mix *x, char *src, char *dst, hvdc_gpu_segment *segs) {
    size_t n = 0, at = 0;
    for (int i = 0; i < x->n_big + x->n_small; i++) {
        size_t bytes = i < x->n_big ? x->big : x->small;
        segs[n++] = (hvdc_gpu_segment){src + at, dst + at, bytes / sizeof(float)};
        at += bytes;
    }
    return n;
}

/* Median milliseconds of one pack of the n segments (the backend's batching,
 * hvdc__gpu_batch_next, for the kernel rows). */
static float time_pack(method m, const hvdc_gpu_segment *segs, size_t n, size_t total,
                       int max_blocks, cudaStream_t stream) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    float ms[RUNS];
    for (int run = 0; run < WARMUP + RUNS; run++) {
        CHECK(cudaEventRecord(start, stream));
        if (m == MEMCPY_TOTAL) {
            CHECK(cudaMemcpyAsync((void *)segs[0].dst, segs[0].src, total, cudaMemcpyDeviceToDevice, stream));
        } else if (m == MEMCPY_EACH) {
            for (size_t i = 0; i < n; i++)
                CHECK(cudaMemcpyAsync((void *)segs[i].dst, segs[i].src, segs[i].count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
        } else {
            hvdc_gpu_batch batch;
            size_t pos = 0;
            while (hvdc__gpu_batch_next(segs, n, &pos, HVD_FLOAT32, m == KERNEL_SCALED ? 0.5 : 1.0, &batch) > 0)
                CHECK((cudaError_t)hvdc__gpu_launch_copy_scale(&batch, max_blocks, stream));
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

/* Elements of dst that are not src * factor (exact: halving a float is exact here). */
static size_t count_wrong(const float *src_host, const char *dst, size_t count, float factor,
                          float *got) {
    CHECK(cudaMemcpy(got, dst, count * sizeof(float), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) wrong += got[i] != src_host[i] * factor;
    return wrong;
}

int main(void) {
    /* uniform mixes, one large tensor among many small ones (as fused gradients are), one
     * 4-byte tensor (a lone op's copy: the launch is all of it) and 1 000 of 32 KiB
     * (fusion_bench's tiny set: eight launches of HVDC_GPU_BATCH_MAX) */
    static const mix mixes[] = {{1, 64u << 20, 0, 0},          {16, 4u << 20, 0, 0},
                                {128, 512u << 10, 0, 0},        {128, 64u << 10, 0, 0},
                                {128, 4u << 10, 0, 0},          {1, 32u << 20, 127, 4u << 10},
                                {1, 4, 0, 0},                   {1000, 32u << 10, 0, 0}};
    const size_t n_mixes = sizeof mixes / sizeof mixes[0];
    size_t max_segments = 0; /* the segment list holds the largest mix */
    for (size_t k = 0; k < n_mixes; k++)
        if ((size_t)(mixes[k].n_big + mixes[k].n_small) > max_segments)
            max_segments = (size_t)(mixes[k].n_big + mixes[k].n_small);
    const size_t max_bytes = 64u << 20;
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
    float *host = malloc(max_bytes), *got = malloc(max_bytes);
    hvdc_gpu_segment *segs = malloc(max_segments * sizeof *segs);
    if (!host || !got || !segs) return 2;
    for (size_t i = 0; i < max_bytes / sizeof(float); i++) host[i] = (float)(i % 1000) - 500.0f;
    CHECK(cudaMalloc((void **)&src, max_bytes));
    CHECK(cudaMalloc((void **)&dst, max_bytes));
    CHECK(cudaMemcpy(src, host, max_bytes, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    printf("# pack_bench: %s, %d SMs, kernel grid at most %d blocks of 256 threads per tensor\n",
           prop.name, sms, max_blocks);
    printf("# rate = bytes copied / time (each byte read once, written once); median of %d;"
           " kernel results checked\n", RUNS);
    printf("# %16s %14s %10s %10s %12s %7s\n", "tensors", "method", "time(us)", "GB/s",
           "vs total", "#wrong");
    size_t wrong_all = 0;
    for (size_t k = 0; k < n_mixes; k++) {
        const mix *x = &mixes[k];
        size_t total = (size_t)x->n_big * x->big + (size_t)x->n_small * x->small;
        size_t n = mix_segments(x, src, dst, segs);
        char label[80], big[24], small[24];
        if (x->n_small)
            snprintf(label, sizeof label, "%dx%s+%dx%s", x->n_big, size_text(x->big, big),
                     x->n_small, size_text(x->small, small));
        else
            snprintf(label, sizeof label, "%dx%s", x->n_big, size_text(x->big, big));
        float bound = time_pack(MEMCPY_TOTAL, segs, n, total, max_blocks, stream);
        for (int m = KERNEL; m <= MEMCPY_TOTAL; m++) {
            int checked = m == KERNEL || m == KERNEL_SCALED;
            /* NaN first (on the pack stream): the copy bound just left src itself in dst, the
             * unscaled kernel's result, so a kernel that wrote nothing would pass */
            if (checked) CHECK(cudaMemsetAsync(dst, 0xff, total, stream));
            float t = m == MEMCPY_TOTAL ? bound : time_pack((method)m, segs, n, total, max_blocks, stream);
            size_t wrong = 0;
            if (checked)
                wrong = count_wrong(host, dst, total / sizeof(float), m == KERNEL ? 1.0f : 0.5f, got);
            wrong_all += wrong;
            printf("  %16s %14s %10.1f %10.1f %12.2f %7zu\n", label, method_names[m], t * 1e3,
                   total / (t * 1e-3) / 1e9, bound / t, wrong);
        }
    }
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
    free(host), free(got), free(segs);
    printf("# wrong results: %zu %s\n", wrong_all, wrong_all ? "FAIL" : "OK");
    return wrong_all ? 1 : 0;
}
