/*
 * conv_gpu.c - conv_gpu.h: a 3x3 convolution layer on cuDNN. Plain C against cuDNN's C API
 * and the CUDA runtime; every call checked. The caller's thread.
 *
 * The batch descriptors are set for the largest batch at creation (the algorithms are chosen
 * for it) and re-set only when a call brings another batch size (the last, partial batch of
 * an epoch); the workspace grows then if that size needs more (a stream sync: rare).
 * This is cuDNN's legacy convolution API: deprecated in cuDNN 9 in favour of the graph API,
 * still supported, and a tenth of the code for three fixed convolutions.
 */
#include "conv_gpu.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct gpu_conv {
    cudnnHandle_t handle;
    cudaStream_t stream;
    int C, H, W, OC, batch; /* batch: what the x and y descriptors describe now */
    cudnnTensorDescriptor_t x, y, bias;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    void *workspace;
    size_t workspace_bytes;
    char err[512];
};

#define DNN_OK(c, call)                                                                      \
    do {                                                                                     \
        cudnnStatus_t s_ = (call);                                                           \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                    \
            snprintf((c)->err, sizeof (c)->err, "%s failed at %s:%d: %s", #call, __FILE__,   \
                     __LINE__, cudnnGetErrorString(s_));                                     \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)
#define CUDA_OK(c, call)                                                                     \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            snprintf((c)->err, sizeof (c)->err, "%s failed at %s:%d: %s", #call, __FILE__,   \
                     __LINE__, cudaGetErrorString(e_));                                      \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)

void gpu_conv_version(char *buf, size_t len) {
    size_t v = cudnnGetVersion(); /* major*10000 + minor*100 + patch since cuDNN 9 */
    snprintf(buf, len, "cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
}

const char *gpu_conv_error(const gpu_conv *c) { return c->err; }

/* cuDNN's kernels load in vectors: a buffer on a smaller boundary ends in
 * CUDNN_STATUS_INTERNAL_ERROR (seen on the H100), so say what is wrong instead. */
static int check_aligned(gpu_conv *c, const char *what, const void *p) {
    if (p == NULL || (uintptr_t)p % 16 == 0) return 0;
    snprintf(c->err, sizeof c->err, "gpu_conv: %s (%p) is not 16-byte aligned; cuDNN needs "
             "aligned buffers (cudaMalloc's are)", what, p);
    return -1;
}

/* The x/y descriptors for batch B, and a workspace large enough for the three algorithms. */
static int set_batch(gpu_conv *c, int B) {
    if (B == c->batch) return 0;
    DNN_OK(c, cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, c->C, c->H, c->W));
    DNN_OK(c, cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, c->OC, c->H, c->W));
    c->batch = 0; /* described, but usable only once the workspace fits (below) */
    size_t need = 0, bytes = 0;
    DNN_OK(c, cudnnGetConvolutionForwardWorkspaceSize(c->handle, c->x, c->w, c->conv, c->y, c->fwd, &bytes));
    need = bytes > need ? bytes : need;
    DNN_OK(c, cudnnGetConvolutionBackwardDataWorkspaceSize(c->handle, c->w, c->y, c->conv, c->x, c->bwd_data, &bytes));
    need = bytes > need ? bytes : need;
    DNN_OK(c, cudnnGetConvolutionBackwardFilterWorkspaceSize(c->handle, c->x, c->y, c->conv, c->w, c->bwd_filter, &bytes));
    need = bytes > need ? bytes : need;
    if (need > c->workspace_bytes) {
        CUDA_OK(c, cudaStreamSynchronize(c->stream)); /* work queued on the old one */
        cudaFree(c->workspace);
        c->workspace = NULL;
        c->workspace_bytes = 0;
        CUDA_OK(c, cudaMalloc(&c->workspace, need));
        c->workspace_bytes = need;
    }
    c->batch = B;
    return 0;
}

/* The first of cuDNN's ranked choices that works, a deterministic one if any does. */
#define PICK(perf, n, out)                                                                   \
    do {                                                                                     \
        int chosen_ = -1;                                                                    \
        for (int i_ = 0; i_ < (n) && chosen_ < 0; i_++)                                      \
            if ((perf)[i_].status == CUDNN_STATUS_SUCCESS &&                                 \
                (perf)[i_].determinism == CUDNN_DETERMINISTIC)                               \
                chosen_ = i_;                                                                \
        for (int i_ = 0; i_ < (n) && chosen_ < 0; i_++)                                      \
            if ((perf)[i_].status == CUDNN_STATUS_SUCCESS) chosen_ = i_;                     \
        if (chosen_ < 0) {                                                                   \
            snprintf(c->err, sizeof c->err, "cuDNN offers no working " #out " algorithm for " \
                     "a %d -> %d channel 3x3 convolution on %dx%d", c->C, c->OC, c->H, c->W); \
            return -1;                                                                       \
        }                                                                                    \
        c->out = (perf)[chosen_].algo;                                                       \
    } while (0)

static int setup(gpu_conv *c, int max_batch) {
    DNN_OK(c, cudnnCreate(&c->handle));
    DNN_OK(c, cudnnSetStream(c->handle, c->stream));
    DNN_OK(c, cudnnCreateTensorDescriptor(&c->x));
    DNN_OK(c, cudnnCreateTensorDescriptor(&c->y));
    DNN_OK(c, cudnnCreateTensorDescriptor(&c->bias));
    DNN_OK(c, cudnnCreateFilterDescriptor(&c->w));
    DNN_OK(c, cudnnCreateConvolutionDescriptor(&c->conv));
    DNN_OK(c, cudnnSetTensor4dDescriptor(c->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, c->OC, 1, 1));
    DNN_OK(c, cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c->OC, c->C, 3, 3));
    DNN_OK(c, cudnnSetConvolution2dDescriptor(c->conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
    /* FMA only: TF32 tensor cores (allowed by the default on Ampere and later) would round
     * inputs to 10-bit mantissas, and the GPU and CPU layers would no longer agree */
    DNN_OK(c, cudnnSetConvolutionMathType(c->conv, CUDNN_FMA_MATH));
    c->batch = 0;
    DNN_OK(c, cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, max_batch, c->C, c->H, c->W));
    DNN_OK(c, cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, max_batch, c->OC, c->H, c->W));
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    DNN_OK(c, cudnnGetConvolutionForwardAlgorithm_v7(c->handle, c->x, c->w, c->conv, c->y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd));
    PICK(fwd, n, fwd);
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    DNN_OK(c, cudnnGetConvolutionBackwardDataAlgorithm_v7(c->handle, c->w, c->y, c->conv, c->x,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
    PICK(bd, n, bwd_data);
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DNN_OK(c, cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->handle, c->x, c->y, c->conv, c->w,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
    PICK(bf, n, bwd_filter);
    return set_batch(c, max_batch);
}

int gpu_conv_create(gpu_conv **out, void *stream, int max_batch, int C, int H, int W, int OC,
                    char *err, size_t len) {
    *out = NULL;
    if (max_batch < 1 || C < 1 || H < 1 || W < 1 || OC < 1) {
        snprintf(err, len, "gpu_conv_create: batch %d, %d -> %d channels, %dx%d: all must be >= 1",
                 max_batch, C, OC, H, W);
        return -1;
    }
    gpu_conv *c = calloc(1, sizeof *c);
    if (c == NULL) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    c->stream = (cudaStream_t)stream;
    c->C = C, c->H = H, c->W = W, c->OC = OC;
    if (setup(c, max_batch) != 0) {
        snprintf(err, len, "%s", c->err);
        gpu_conv_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void gpu_conv_free(gpu_conv *c) {
    if (c == NULL) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    cudaFree(c->workspace);
    if (c->conv) cudnnDestroyConvolutionDescriptor(c->conv);
    if (c->w) cudnnDestroyFilterDescriptor(c->w);
    if (c->bias) cudnnDestroyTensorDescriptor(c->bias);
    if (c->y) cudnnDestroyTensorDescriptor(c->y);
    if (c->x) cudnnDestroyTensorDescriptor(c->x);
    if (c->handle) cudnnDestroy(c->handle);
    free(c);
}

int gpu_conv_forward(gpu_conv *c, float *out, const float *inp, const float *weight,
                     const float *bias, int B) {
    const float one = 1.0f, zero = 0.0f;
    if (check_aligned(c, "out", out) || check_aligned(c, "inp", inp) ||
        check_aligned(c, "weight", weight) || check_aligned(c, "bias", bias) || set_batch(c, B) != 0)
        return -1;
    DNN_OK(c, cudnnConvolutionForward(c->handle, &one, c->x, inp, c->w, weight, c->conv, c->fwd,
                                      c->workspace, c->workspace_bytes, &zero, c->y, out));
    DNN_OK(c, cudnnAddTensor(c->handle, &one, c->bias, bias, &one, c->y, out));
    return 0;
}

int gpu_conv_backward(gpu_conv *c, float *dinp, float *dweight, float *dbias, const float *dout,
                      const float *inp, const float *weight, int B) {
    const float one = 1.0f, zero = 0.0f;
    if (check_aligned(c, "dinp", dinp) || check_aligned(c, "dweight", dweight) ||
        check_aligned(c, "dbias", dbias) || check_aligned(c, "dout", dout) ||
        check_aligned(c, "inp", inp) || check_aligned(c, "weight", weight) || set_batch(c, B) != 0)
        return -1;
    DNN_OK(c, cudnnConvolutionBackwardBias(c->handle, &one, c->y, dout, &zero, c->bias, dbias));
    DNN_OK(c, cudnnConvolutionBackwardFilter(c->handle, &one, c->x, inp, c->y, dout, c->conv,
                                             c->bwd_filter, c->workspace, c->workspace_bytes,
                                             &zero, c->w, dweight));
    if (dinp != NULL)
        DNN_OK(c, cudnnConvolutionBackwardData(c->handle, &one, c->w, weight, c->y, dout, c->conv,
                                               c->bwd_data, c->workspace, c->workspace_bytes,
                                               &zero, c->x, dinp));
    return 0;
}
