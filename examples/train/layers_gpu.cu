/*
 * layers_gpu.cu - layers_gpu.h: the models' layers on the device (the CNN's convolutions are
 * conv_gpu.c, cuDNN). Linear layers are three cublasSgemm calls on row-major data (cuBLAS is
 * column-major, so a row-major (r, c) matrix is read as its (c, r) transpose); ReLU, bias,
 * softmax-cross-entropy and 2x2 max pooling are grid-stride kernels with 64-bit indices.
 * Everything is queued on the context's non-blocking stream; no call waits for the device
 * except gpu_layers_free. Every CUDA and cuBLAS call is checked.
 * The caller's thread.
 */
#include "layers_gpu.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

struct gpu_layers {
    int device;
    int max_blocks; // 4 per SM; grid-stride loops cover the rest
    cudaStream_t stream;
    cublasHandle_t blas;
    char err[512];
};

namespace {

constexpr int kThreads = 256;

int fail(gpu_layers *g, const char *what, const char *why, const char *file, int line) {
    snprintf(g->err, sizeof g->err, "%s failed at %s:%d on device %d: %s", what, file, line,
             g->device, why);
    return -1;
}

#define CUDA_OK(g, call)                                                                     \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) return fail(g, #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define BLAS_OK(g, call)                                                                     \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return fail(g, #call, cublasGetStatusString(s_), __FILE__, __LINE__);            \
    } while (0)

int blocks(const gpu_layers *g, uint64_t n) {
    uint64_t want = (n + kThreads * 4 - 1) / (kThreads * 4);
    if (want < 1) want = 1;
    return want > static_cast<uint64_t>(g->max_blocks) ? g->max_blocks : static_cast<int>(want);
}

__device__ inline uint64_t first_index() {
    return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline uint64_t grid_stride() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

__global__ void bias_rows_kernel(float *out, const float *bias, uint64_t rows, uint64_t cols) {
    for (uint64_t i = first_index(); i < rows * cols; i += grid_stride()) out[i] = bias[i % cols];
}

/* dbias[o] = sum over b of dout[b][o], in b order like layers.c */
__global__ void column_sums_kernel(float *dbias, const float *dout, uint64_t rows,
                                   uint64_t cols) {
    for (uint64_t o = first_index(); o < cols; o += grid_stride()) {
        float s = 0.0f;
        for (uint64_t b = 0; b < rows; b++) s += dout[b * cols + o];
        dbias[o] = s;
    }
}

__global__ void relu_kernel(float *out, const float *inp, uint64_t n) {
    for (uint64_t i = first_index(); i < n; i += grid_stride()) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_backward_kernel(float *dinp, const float *dout, const float *out,
                                     uint64_t n) {
    for (uint64_t i = first_index(); i < n; i += grid_stride())
        dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* One thread per row, the arithmetic of layers.c's softmax_xent_forward. */
__global__ void softmax_xent_kernel(float *probs, double *loss_sum, unsigned long long *correct,
                                    const float *logits, const uint8_t *targets, uint64_t B,
                                    int V) {
    for (uint64_t b = first_index(); b < B; b += grid_stride()) {
        const float *z = logits + b * V;
        float *p = probs + b * V;
        float maxz = -FLT_MAX;
        int best = 0;
        for (int v = 0; v < V; v++) {
            maxz = z[v] > maxz ? z[v] : maxz;
            best = z[v] > z[best] ? v : best;
        }
        double sum = 0.0;
        for (int v = 0; v < V; v++) {
            p[v] = expf(z[v] - maxz);
            sum += p[v];
        }
        for (int v = 0; v < V; v++) p[v] = static_cast<float>(p[v] / sum);
        const int t = targets[b];
        atomicAdd(loss_sum, log(sum) - static_cast<double>(z[t] - maxz));
        if (best == t) atomicAdd(correct, 1ull);
    }
}

__global__ void softmax_xent_backward_kernel(float *dlogits, const float *probs,
                                             const uint8_t *targets, float scale, uint64_t B,
                                             int V) {
    for (uint64_t i = first_index(); i < B * V; i += grid_stride()) {
        const uint64_t b = i / V;
        const int v = static_cast<int>(i % V);
        float d = scale * probs[i];
        if (v == targets[b]) d -= scale;
        dlogits[i] = d;
    }
}

/* One thread per output: the window's largest input, the first of equals as layers.c picks. */
__global__ void maxpool2_kernel(float *out, int32_t *argmax, const float *inp, uint64_t BC,
                                int H, int W) {
    const int OH = H / 2, OW = W / 2;
    for (uint64_t o = first_index(); o < BC * OH * OW; o += grid_stride()) {
        const uint64_t bc = o / (static_cast<uint64_t>(OH) * OW);
        const int y = static_cast<int>(o / OW % OH), x = static_cast<int>(o % OW);
        const float *src = inp + bc * H * W;
        int best = (2 * y) * W + 2 * x;
        const int cand[3] = {best + 1, best + W, best + W + 1};
        for (int k = 0; k < 3; k++) best = src[cand[k]] > src[best] ? cand[k] : best;
        out[o] = src[best];
        argmax[o] = static_cast<int32_t>(bc * H * W + best);
    }
}

/* The windows do not overlap, so each input gets at most one output's gradient: no atomics. */
__global__ void maxpool2_backward_kernel(float *dinp, const float *dout, const int32_t *argmax,
                                         uint64_t n_out) {
    for (uint64_t o = first_index(); o < n_out; o += grid_stride()) dinp[argmax[o]] = dout[o];
}

} // namespace

extern "C" int gpu_layers_create(gpu_layers **out, int device, char *err, size_t len) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, len, "no CUDA device visible: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return -1;
    }
    if (device < 0 || device >= n) {
        snprintf(err, len, "device %d is not visible (this process sees %d; run one rank per "
                 "GPU, check CUDA_VISIBLE_DEVICES)", device, n);
        return -1;
    }
    gpu_layers *g = static_cast<gpu_layers *>(calloc(1, sizeof *g));
    if (g == NULL) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    g->device = device;
    int sms = 0, rc = 0;
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) !=
            cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(err, len, "CUDA setup on device %d failed: %s", device, cudaGetErrorString(e));
        rc = -1;
    } else if ((bs = cublasCreate(&g->blas)) != CUBLAS_STATUS_SUCCESS ||
               (bs = cublasSetStream(g->blas, g->stream)) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, len, "cuBLAS setup on device %d failed: %s", device,
                 cublasGetStatusString(bs));
        rc = -1;
    }
    if (rc != 0) {
        gpu_layers_free(g);
        return -1;
    }
    g->max_blocks = sms > 0 ? 4 * sms : 1;
    *out = g;
    return 0;
}

extern "C" void gpu_layers_free(gpu_layers *g) {
    if (g == NULL) return;
    cudaSetDevice(g->device);
    if (g->stream) cudaStreamSynchronize(g->stream);
    if (g->blas) cublasDestroy(g->blas);
    if (g->stream) cudaStreamDestroy(g->stream);
    free(g);
}

extern "C" void *gpu_layers_stream(const gpu_layers *g) { return g->stream; }
extern "C" const char *gpu_layers_error(const gpu_layers *g) { return g->err; }

extern "C" int gpu_linear_forward(gpu_layers *g, float *out, const float *inp,
                                  const float *weight, const float *bias, int B, int C, int OC) {
    const float one = 1.0f;
    bias_rows_kernel<<<blocks(g, (uint64_t)B * OC), kThreads, 0, g->stream>>>(out, bias, B, OC);
    CUDA_OK(g, cudaGetLastError());
    // out^T (OC, B) += weight (OC, C) @ inp^T (C, B), all read column-major
    BLAS_OK(g, cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, B, C, &one, weight, C, inp, C,
                           &one, out, OC));
    return 0;
}

extern "C" int gpu_linear_backward(gpu_layers *g, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   int B, int C, int OC) {
    const float one = 1.0f, zero = 0.0f;
    // dweight^T (C, OC) = inp^T (C, B) @ dout (B, OC)
    BLAS_OK(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, B, &one, inp, C, dout, OC,
                           &zero, dweight, C));
    column_sums_kernel<<<blocks(g, (uint64_t)OC), kThreads, 0, g->stream>>>(dbias, dout, B, OC);
    CUDA_OK(g, cudaGetLastError());
    // dinp^T (C, B) = weight^T (C, OC) @ dout^T (OC, B)
    if (dinp != NULL)
        BLAS_OK(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, C, B, OC, &one, weight, C, dout,
                               OC, &zero, dinp, C));
    return 0;
}

extern "C" int gpu_relu_forward(gpu_layers *g, float *out, const float *inp, size_t N) {
    relu_kernel<<<blocks(g, N), kThreads, 0, g->stream>>>(out, inp, N);
    CUDA_OK(g, cudaGetLastError());
    return 0;
}

extern "C" int gpu_relu_backward(gpu_layers *g, float *dinp, const float *dout, const float *out,
                                 size_t N) {
    relu_backward_kernel<<<blocks(g, N), kThreads, 0, g->stream>>>(dinp, dout, out, N);
    CUDA_OK(g, cudaGetLastError());
    return 0;
}

extern "C" int gpu_softmax_xent_forward(gpu_layers *g, float *probs, double *loss_sum,
                                        unsigned long long *correct, const float *logits,
                                        const uint8_t *targets, int B, int V) {
    if (V < 1 || V > 64) return fail(g, "gpu_softmax_xent_forward", "V must be 1..64", __FILE__, __LINE__);
    softmax_xent_kernel<<<blocks(g, (uint64_t)B), kThreads, 0, g->stream>>>(
        probs, loss_sum, correct, logits, targets, B, V);
    CUDA_OK(g, cudaGetLastError());
    return 0;
}

extern "C" int gpu_softmax_xent_backward(gpu_layers *g, float *dlogits, const float *probs,
                                         const uint8_t *targets, float scale, int B, int V) {
    softmax_xent_backward_kernel<<<blocks(g, (uint64_t)B * V), kThreads, 0, g->stream>>>(
        dlogits, probs, targets, scale, B, V);
    CUDA_OK(g, cudaGetLastError());
    return 0;
}

extern "C" int gpu_maxpool2_forward(gpu_layers *g, float *out, int32_t *argmax, const float *inp,
                                    int B, int C, int H, int W) {
    if (H % 2 || W % 2) return fail(g, "gpu_maxpool2_forward", "H and W must be even", __FILE__, __LINE__);
    const uint64_t n_out = static_cast<uint64_t>(B) * C * (H / 2) * (W / 2);
    maxpool2_kernel<<<blocks(g, n_out), kThreads, 0, g->stream>>>(out, argmax, inp,
                                                                   static_cast<uint64_t>(B) * C, H, W);
    CUDA_OK(g, cudaGetLastError());
    return 0;
}

extern "C" int gpu_maxpool2_backward(gpu_layers *g, float *dinp, const float *dout,
                                     const int32_t *argmax, int B, int C, int H, int W) {
    const uint64_t n_in = static_cast<uint64_t>(B) * C * H * W, n_out = n_in / 4;
    CUDA_OK(g, cudaMemsetAsync(dinp, 0, n_in * sizeof(float), g->stream));
    maxpool2_backward_kernel<<<blocks(g, n_out), kThreads, 0, g->stream>>>(dinp, dout, argmax, n_out);
    CUDA_OK(g, cudaGetLastError());
    return 0;
}
