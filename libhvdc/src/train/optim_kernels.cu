/*
 * optim_kernels.cu - the inner optimizers' update rules on the device (see optim_kernels.h):
 * SGD (momentum, Nesterov, weight decay), Adam/AdamW, and the gradient accumulation of
 * backward_passes_per_step. The per-element formulas are update_rules.h's, the same functions
 * update.c runs on the host; built with --fmad=false (meson.build) so no a*b + c is fused and
 * the device rounds like the host.
 *
 * Each kernel is one grid-stride loop over 64-bit indices: any count runs with a bounded grid.
 * Launches return the launch error; nothing here synchronizes. Optimizer's thread (launches);
 * device (runs).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "hvdc.h"
#include "train/optim_kernels.h"
#include "train/update_rules.h"

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
sgd_kernel(T *data, const T *grad, double *buf, uint64_t count, double lr, double momentum,
           int nesterov, double weight_decay) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        double p = hvdc__sgd_rule(static_cast<double>(data[i]), static_cast<double>(grad[i]),
                                  buf != nullptr ? &buf[i] : nullptr, lr, momentum, nesterov,
                                  weight_decay);
        data[i] = static_cast<T>(p);
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
adam_kernel(T *data, const T *grad, double *m, double *v, uint64_t count, double lr,
            double beta1, double beta2, double eps, double weight_decay, int decoupled,
            double c1, double c2) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        double p = hvdc__adam_rule(static_cast<double>(data[i]), static_cast<double>(grad[i]),
                                   &m[i], &v[i], lr, beta1, beta2, eps, weight_decay, decoupled,
                                   c1, c2);
        data[i] = static_cast<T>(p);
    }
}

/* The host's accumulate()/submit() arithmetic, in T (float32 stays float32, as in optimizer.c). */
template <typename T>
__global__ void __launch_bounds__(kThreads)
accumulate_kernel(T *accum, T *grad, uint64_t count, int finish, int passes) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        if (finish) {
            grad[i] = (accum[i] + grad[i]) / static_cast<T>(passes);
            accum[i] = static_cast<T>(0);
        } else {
            accum[i] += grad[i];
        }
    }
}

/* ~4 elements per thread, at least 1 block, at most max_blocks (a few per SM). */
int blocks_for(uint64_t count, int max_blocks) {
    uint64_t want = (count + kThreads * 4 - 1) / (kThreads * 4);
    if (want < 1) want = 1;
    if (max_blocks < 1) max_blocks = 1;
    return want > static_cast<uint64_t>(max_blocks) ? max_blocks : static_cast<int>(want);
}

} // namespace

extern "C" int hvdc__launch_sgd(void *stream, int dtype, void *data, const void *grad,
                                double *buf, uint64_t count, double lr, double momentum,
                                int nesterov, double weight_decay, int max_blocks) {
    if (count == 0) return static_cast<int>(cudaSuccess);
    const int blocks = blocks_for(count, max_blocks);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (dtype == HVD_FLOAT32)
        sgd_kernel<float><<<blocks, kThreads, 0, s>>>(static_cast<float *>(data),
                                                      static_cast<const float *>(grad), buf,
                                                      count, lr, momentum, nesterov, weight_decay);
    else if (dtype == HVD_FLOAT64)
        sgd_kernel<double><<<blocks, kThreads, 0, s>>>(static_cast<double *>(data),
                                                       static_cast<const double *>(grad), buf,
                                                       count, lr, momentum, nesterov,
                                                       weight_decay);
    else
        return static_cast<int>(cudaErrorInvalidValue);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int hvdc__launch_adam(void *stream, int dtype, void *data, const void *grad,
                                 double *m, double *v, uint64_t count, double lr, double beta1,
                                 double beta2, double eps, double weight_decay, int decoupled,
                                 double c1, double c2, int max_blocks) {
    if (count == 0) return static_cast<int>(cudaSuccess);
    const int blocks = blocks_for(count, max_blocks);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (dtype == HVD_FLOAT32)
        adam_kernel<float><<<blocks, kThreads, 0, s>>>(static_cast<float *>(data),
                                                       static_cast<const float *>(grad), m, v,
                                                       count, lr, beta1, beta2, eps,
                                                       weight_decay, decoupled, c1, c2);
    else if (dtype == HVD_FLOAT64)
        adam_kernel<double><<<blocks, kThreads, 0, s>>>(static_cast<double *>(data),
                                                        static_cast<const double *>(grad), m, v,
                                                        count, lr, beta1, beta2, eps,
                                                        weight_decay, decoupled, c1, c2);
    else
        return static_cast<int>(cudaErrorInvalidValue);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int hvdc__launch_accumulate(void *stream, int dtype, void *accum, void *grad,
                                       uint64_t count, int finish, int passes, int max_blocks) {
    if (count == 0) return static_cast<int>(cudaSuccess);
    if (passes < 1) return static_cast<int>(cudaErrorInvalidValue);
    const int blocks = blocks_for(count, max_blocks);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (dtype == HVD_FLOAT32)
        accumulate_kernel<float><<<blocks, kThreads, 0, s>>>(
            static_cast<float *>(accum), static_cast<float *>(grad), count, finish, passes);
    else if (dtype == HVD_FLOAT64)
        accumulate_kernel<double><<<blocks, kThreads, 0, s>>>(
            static_cast<double *>(accum), static_cast<double *>(grad), count, finish, passes);
    else
        return static_cast<int>(cudaErrorInvalidValue);
    return static_cast<int>(cudaGetLastError());
}
