/*
 * gpu_block_map.c - the copy kernel's blocks per segment of a batch, as prefix sums (see
 * gpu_block_map.h). Pure C, compiled in every build (with or without CUDA); background thread
 * and tests.
 */
#include "gpu/gpu_block_map.h"

#include <string.h>

#include "base/status.h"

/* ~8 elements a thread before a segment asks for another block (as the uniform grid had). */
#define ELEMS_PER_THREAD 8
/* 8 * max_blocks must stay below CUDA's 2^31 - 1 blocks in a 1-D grid; it also keeps
 * (want - 1) * (budget - n) in split_blocks below 2^59. */
#define MAX_BLOCKS_LIMIT (1 << 28)

hvd_status hvdc__gpu_split_blocks(const hvdc_gpu_batch *batch, int max_blocks,
                                  hvdc_gpu_block_map *map) {
    memset(map, 0, sizeof *map);
    if (batch->n > HVDC_GPU_BATCH_MAX || max_blocks < 1 || max_blocks >= MAX_BLOCKS_LIMIT)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "copy kernel batch of %u segments with "
                          "max_blocks %d (want at most %d segments, max_blocks in [1, 2^28))",
                          batch->n, max_blocks, HVDC_GPU_BATCH_MAX);
    const uint64_t n = batch->n;
    const uint64_t per_block = (uint64_t)HVDC_GPU_COPY_THREADS * ELEMS_PER_THREAD;
    uint64_t want[HVDC_GPU_BATCH_MAX];
    uint64_t wanted = 0;
    for (uint64_t s = 0; s < n; s++) {
        const uint64_t count = batch->seg[s].count;
        uint64_t w = count / per_block + (count % per_block != 0); /* no overflow near 2^64 */
        if (w < 1) w = 1;
        if (w > (uint64_t)max_blocks) w = (uint64_t)max_blocks;
        want[s] = w;
        wanted += w;
    }
    /* Over budget: everyone keeps one block and shares the rest in proportion to what it
     * wanted beyond that; rounding down keeps the sum within the budget. */
    uint64_t budget = 8 * (uint64_t)max_blocks;
    if (budget < n) budget = n;
    uint32_t at = 0;
    for (uint64_t s = 0; s < n; s++) {
        uint64_t blocks = want[s];
        if (wanted > budget) blocks = 1 + (want[s] - 1) * (budget - n) / (wanted - n);
        map->first[s] = at;
        at += (uint32_t)blocks;
    }
    map->first[n] = at;
    return HVD_OK;
}
