/*
 * kernels.h - the GPU backend's one kernel, as a plain-C launcher (gpu/kernels.cu): the batched
 * copy-and-scale that packs tensors into the fusion buffer and unpacks them.
 * defines: hvdc__gpu_launch_copy_scale
 * Background thread.
 */
#ifndef HVDC_GPU_KERNELS_H
#define HVDC_GPU_KERNELS_H

#include "gpu/gpu_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Queues one launch on stream (a cudaStream_t) that runs every segment of batch:
 * dst = src * factor (factor 1: a byte copy; else floating dtypes only, computed in float32 for
 * float16/bfloat16/float32 and float64 for float64, rounded to nearest-even). Segments must
 * not overlap unless src == dst. Each segment gets blocks of 256 threads for its own length,
 * at most max_blocks, and the launch at most 8 * max_blocks in all, or one block per segment
 * where that is more (gpu/gpu_block_map.h).
 * @return 0 (cudaSuccess) or the cudaError_t of the launch (cudaErrorInvalidValue for a scale
 *         on an integer dtype, an unknown dtype, more than HVDC_GPU_BATCH_MAX segments, or
 *         max_blocks outside [1, 2^28)). */
int hvdc__gpu_launch_copy_scale(const hvdc_gpu_batch *batch, int max_blocks, void *stream);

#ifdef __cplusplus
}
#endif

#endif
