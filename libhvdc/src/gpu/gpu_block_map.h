/*
 * gpu_block_map.h - how the copy kernel's blocks (gpu/kernels.cu) are shared among the segments
 * of one batch: each segment gets blocks for its own length, not the largest one's.
 *
 *   want_s   = ceil(count_s / (256 threads * 8 elements)), clamped to [1, max_blocks]
 *   budget   = 8 * max_blocks (but at least n: every segment gets one block)
 *   blocks_s = want_s when the wants fit the budget; else 1 + (want_s - 1) * (budget - n) /
 *              (sum of wants - n), rounded down: each keeps one block, and the rest of the
 *              budget is shared in proportion to what each wanted beyond it
 *
 *   1 x 32 MiB + 127 x 4 KiB float32, max_blocks 528 (132 SMs):
 *     blocks  |528|1|1|1| .. |1|            655 blocks, within the budget of 4224
 *     first   0   528 529 530 .. 654 655    (prefix sums: the 1-D grid has first[n] blocks)
 *
 * The map travels to the kernel by value beside the batch; block b runs segment s where
 * first[s] <= b < first[s + 1]. Plain C, compiled in every build (tests/unit/test_gpu_block_map.c
 * checks it on the CPU); also included by gpu/kernels.cu (C++).
 * defines: HVDC_GPU_COPY_THREADS, hvdc_gpu_block_map, hvdc__gpu_split_blocks
 * Pure; background thread (and tests).
 */
#ifndef HVDC_GPU_BLOCK_MAP_H
#define HVDC_GPU_BLOCK_MAP_H

#include <stdint.h>

#include "gpu/gpu_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the copy kernel. */
#define HVDC_GPU_COPY_THREADS 256

typedef struct hvdc_gpu_block_map {
    /* segment s runs blocks [first[s], first[s + 1]); first[n] = blocks in the grid */
    uint32_t first[HVDC_GPU_BATCH_MAX + 1];
} hvdc_gpu_block_map;

/* Fills map for the batch's n segments (the formula at the top of this file). max_blocks: the
 * most blocks one segment may have (4 per SM, gpu/gpu_setup.c).
 * @return HVD_OK; HVD_ERR_INVALID_ARG (map zeroed) for batch->n > HVDC_GPU_BATCH_MAX or
 *         max_blocks outside [1, 2^28) (beyond it the grid would pass CUDA's 2^31 - 1 blocks). */
hvd_status hvdc__gpu_split_blocks(const hvdc_gpu_batch *batch, int max_blocks,
                                  hvdc_gpu_block_map *map);

#ifdef __cplusplus
}
#endif

#endif
