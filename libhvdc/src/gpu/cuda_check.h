/*
 * cuda_check.h - CHECK_CUDA: translates a CUDA runtime error into HVD_ERR_CUDA with the call,
 * file:line, the runtime's rank and CUDA's text, and jumps to the function's fail: label (house
 * rule 3). For the files built against the CUDA runtime only: gpu/gpu.c, train/optim_gpu.c.
 * defines: CHECK_CUDA, hvdc__fail_cuda
 * Any thread.
 */
#ifndef HVDC_CUDA_CHECK_H
#define HVDC_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "base/log.h"
#include "base/status.h"

static inline hvd_status hvdc__fail_cuda(cudaError_t err, const char *what, const char *file,
                                         int line) {
    return hvdc__fail(HVD_ERR_CUDA, "%s failed at %s:%d on rank %d: %s (%s)", what, file, line,
                      hvdc__log_rank(), cudaGetErrorString(err), cudaGetErrorName(err));
}

/* Inside a function with `hvd_status st;` and a `fail:` label. */
#define CHECK_CUDA(call)                                                                     \
    do {                                                                                     \
        cudaError_t cuda_err_ = (call);                                                      \
        if (cuda_err_ != cudaSuccess) {                                                      \
            st = hvdc__fail_cuda(cuda_err_, #call, __FILE__, __LINE__);                      \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

#endif
