/*
 * Unit test: the copy kernel's blocks per segment (gpu/gpu_block_map.h) on the CPU. Every map
 * is checked against the rules the kernel relies on (each segment at least one block and at
 * most max_blocks, rising prefix sums, at most the budget in all), and the mixed batch that
 * starved the large tensor on the H100 against the blocks we expect it to get now. The kernel
 * itself (gpu/kernels.cu) runs only on a GPU: tests/gpu and benchmarks/pack_bench.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu/gpu_block_map.h"

#define PER_BLOCK ((uint64_t)HVDC_GPU_COPY_THREADS * 8) /* elements a block is meant for */

static hvdc_gpu_batch batch_of(const uint64_t *counts, uint32_t n) {
    hvdc_gpu_batch b;
    memset(&b, 0, sizeof b);
    b.n = n;
    b.dtype = HVD_FLOAT32;
    b.factor = 1.0;
    for (uint32_t s = 0; s < n; s++) b.seg[s].count = counts[s];
    return b;
}

static uint32_t blocks_of(const hvdc_gpu_block_map *m, uint32_t s) {
    return m->first[s + 1] - m->first[s];
}

/* Independent of the formula: what any map must satisfy. */
static void check_map(const hvdc_gpu_batch *b, int max_blocks, const hvdc_gpu_block_map *m,
                      const char *what) {
    uint64_t budget = 8 * (uint64_t)max_blocks;
    if (budget < b->n) budget = b->n;
    CHECK_TRUE(m->first[0] == 0, "%s: the grid starts at block 0", what);
    for (uint32_t s = 0; s < b->n; s++) {
        uint32_t k = blocks_of(m, s);
        CHECK_TRUE(m->first[s + 1] > m->first[s], "%s: segment %u has a block", what, s);
        CHECK_TRUE(k <= (uint32_t)max_blocks, "%s: segment %u has %u > max_blocks %d", what, s,
                   k, max_blocks);
        uint64_t useful = b->seg[s].count / PER_BLOCK + (b->seg[s].count % PER_BLOCK != 0);
        CHECK_TRUE(k <= (useful > 1 ? useful : 1), "%s: segment %u of %llu elements has %u "
                   "blocks it cannot use", what, s, (unsigned long long)b->seg[s].count, k);
    }
    CHECK_TRUE(m->first[b->n] <= budget, "%s: %u blocks in all, budget %llu", what,
               m->first[b->n], (unsigned long long)budget);
}

static void test_mixed_batch(void) {
    /* 1 x 32 MiB + 127 x 4 KiB of float32 on an H100 (132 SMs, max_blocks 528): the uniform
     * grid gave the large tensor 8 * 528 / 128 = 33 blocks and packed at 0.55x of memcpy. */
    uint64_t counts[128];
    counts[0] = (32u << 20) / 4;
    for (int s = 1; s < 128; s++) counts[s] = (4u << 10) / 4;
    hvdc_gpu_batch b = batch_of(counts, 128);
    hvdc_gpu_block_map m;
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 528, &m) == HVD_OK, "mixed batch");
    check_map(&b, 528, &m, "mixed");
    CHECK_TRUE(blocks_of(&m, 0) == 528, "the 32 MiB tensor gets max_blocks: %u", blocks_of(&m, 0));
    for (uint32_t s = 1; s < 128; s++)
        CHECK_TRUE(blocks_of(&m, s) == 1, "a 4 KiB tensor gets one block: %u", blocks_of(&m, s));
    CHECK_TRUE(m.first[128] == 528 + 127, "grid of %u blocks", m.first[128]);
    /* the large tensor last: same blocks, behind the small ones */
    counts[0] = counts[127];
    counts[127] = (32u << 20) / 4;
    b = batch_of(counts, 128);
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 528, &m) == HVD_OK, "mixed batch, large last");
    check_map(&b, 528, &m, "mixed, large last");
    CHECK_TRUE(m.first[127] == 127 && blocks_of(&m, 127) == 528, "large last: %u at %u",
               blocks_of(&m, 127), m.first[127]);
}

static void test_over_budget(void) {
    /* 128 tensors of 64 MiB want 528 blocks each: 8 * 528 = 4224 shared equally, 33 each */
    uint64_t counts[128];
    for (int s = 0; s < 128; s++) counts[s] = (64u << 20) / 4;
    hvdc_gpu_batch b = batch_of(counts, 128);
    hvdc_gpu_block_map m;
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 528, &m) == HVD_OK, "uniform large");
    check_map(&b, 528, &m, "uniform large");
    for (uint32_t s = 0; s < 128; s++)
        CHECK_TRUE(blocks_of(&m, s) == 33, "equal share: %u", blocks_of(&m, s));
    /* 10 large and 118 small over budget: the small keep one block each, the large share the
     * rest equally (4224 - 128 = 4096 over 10 x 527 wanted beyond one: 1 + 527 * 4096 / 5270) */
    for (int s = 0; s < 128; s++) counts[s] = s < 10 ? (64u << 20) / 4 : 100;
    b = batch_of(counts, 128);
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 528, &m) == HVD_OK, "large and small");
    check_map(&b, 528, &m, "large and small");
    for (uint32_t s = 0; s < 10; s++)
        CHECK_TRUE(blocks_of(&m, s) == 1 + 527 * 4096 / 5270, "large share: %u", blocks_of(&m, s));
    /* proportion: a tensor wanting twice the blocks beyond one gets about twice the share */
    for (int s = 0; s < 128; s++) counts[s] = (s % 2 ? 400 : 200) * PER_BLOCK + 1;
    b = batch_of(counts, 128);
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 528, &m) == HVD_OK, "two sizes");
    check_map(&b, 528, &m, "two sizes");
    uint32_t a = blocks_of(&m, 0), c = blocks_of(&m, 1);
    CHECK_TRUE(c - 1 >= 2 * (a - 1) - 1 && c - 1 <= 2 * (a - 1) + 1,
               "twice the want, about twice the share: %u and %u", a, c);
    /* fewer budget blocks than segments (max_blocks 1 to 15): one block each, no more */
    for (int mb = 1; mb < 16; mb++) {
        CHECK_TRUE(hvdc__gpu_split_blocks(&b, mb, &m) == HVD_OK, "max_blocks %d", mb);
        check_map(&b, mb, &m, "small max_blocks");
        CHECK_TRUE(m.first[128] == (8u * (uint32_t)mb > 128 ? 8u * (uint32_t)mb : 128),
                   "max_blocks %d: the whole budget is used: %u", mb, m.first[128]);
    }
}

/* Random batches (fixed seed): every map keeps the rules, every size of batch and max_blocks. */
static void test_random(void) {
    srand(7);
    uint64_t counts[HVDC_GPU_BATCH_MAX];
    hvdc_gpu_block_map m;
    for (int round = 0; round < 2000; round++) {
        uint32_t n = 1 + (uint32_t)(rand() % HVDC_GPU_BATCH_MAX);
        int max_blocks = 1 + rand() % 1200;
        for (uint32_t s = 0; s < n; s++) {
            int shape = rand() % 4; /* tiny, around one block, large, enormous */
            counts[s] = shape == 0   ? 1 + (uint64_t)(rand() % 100)
                        : shape == 1 ? PER_BLOCK - 1 + (uint64_t)(rand() % 3)
                        : shape == 2 ? (uint64_t)rand() * 64
                                     : UINT64_MAX - (uint64_t)(rand() % 3);
        }
        hvdc_gpu_batch b = batch_of(counts, n);
        CHECK_TRUE(hvdc__gpu_split_blocks(&b, max_blocks, &m) == HVD_OK, "round %d", round);
        check_map(&b, max_blocks, &m, "random");
        /* within the budget, nothing is cut: each gets what it wants */
        uint64_t wanted = 0;
        for (uint32_t s = 0; s < n; s++) {
            uint64_t w = counts[s] / PER_BLOCK + (counts[s] % PER_BLOCK != 0);
            wanted += w < 1 ? 1 : w > (uint64_t)max_blocks ? (uint64_t)max_blocks : w;
        }
        if (wanted <= 8 * (uint64_t)max_blocks)
            CHECK_TRUE(m.first[n] == wanted, "within budget: %u of %llu", m.first[n],
                       (unsigned long long)wanted);
    }
}

static void test_refused(void) {
    uint64_t counts[1] = {1000};
    hvdc_gpu_batch b = batch_of(counts, 1);
    hvdc_gpu_block_map m;
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 0, &m) == HVD_ERR_INVALID_ARG, "max_blocks 0");
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 1 << 28, &m) == HVD_ERR_INVALID_ARG, "max_blocks 2^28");
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, (1 << 28) - 1, &m) == HVD_OK &&
               m.first[1] == 1, "max_blocks 2^28 - 1");
    b.n = HVDC_GPU_BATCH_MAX + 1;
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 528, &m) == HVD_ERR_INVALID_ARG, "too many segments");
    CHECK_TRUE(m.first[0] == 0 && m.first[HVDC_GPU_BATCH_MAX] == 0, "refused map zeroed");
    b.n = 0;
    CHECK_TRUE(hvdc__gpu_split_blocks(&b, 528, &m) == HVD_OK && m.first[0] == 0,
               "empty batch: no blocks");
    /* the kernel's by-value arguments (static_assert in gpu/kernels.cu) */
    printf("kernel parameters: batch %zu + block map %zu = %zu bytes (CUDA's limit 4096)\n",
           sizeof(hvdc_gpu_batch), sizeof(hvdc_gpu_block_map),
           sizeof(hvdc_gpu_batch) + sizeof(hvdc_gpu_block_map));
    CHECK_TRUE(sizeof(hvdc_gpu_batch) + sizeof(hvdc_gpu_block_map) <= 4096,
               "batch and block map fit the 4 KiB kernel parameter limit");
}

int main(void) {
    test_mixed_batch();
    test_over_budget();
    test_random();
    test_refused();
    return check_verdict("test_gpu_block_map");
}
