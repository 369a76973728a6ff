/*
 * sampler.c - hvd_sampler, the DistributedSampler: which dataset indices each rank visits in
 * an epoch. Semantics of torch.utils.data.DistributedSampler (spelled out in hvdc.h):
 *
 *   N = 10, R = 3 ranks, drop_last = 0: num_samples = ceil(10/3) = 4, total = 12
 *     permutation for (seed, epoch):  7 2 9 0 5 3 8 1 6 4 | 7 2   <- padded from its start
 *     rank 0 takes positions 0,3,6,9:  7 0 8 4
 *     rank 1 takes positions 1,4,7,10: 2 5 1 7
 *     rank 2 takes positions 2,5,8,11: 9 3 6 2
 *   drop_last = 1: num_samples = floor(10/3) = 3, total = 9; position 9 (index 4) is dropped.
 *
 * The permutation is Fisher-Yates driven by SplitMix64 seeded from (seed, epoch) alone, so every
 * rank computes the same one without communicating.
 *
 * Resuming inside an epoch with another number of ranks (elastic training): the ranks have
 * together consumed the first P positions of the epoch's list (hvd_sampler_record counts them:
 * P = start + recorded * R). hvd_sampler_set_position(P) deals the rest out again over the
 * new R', from position P on, so no position is visited twice or skipped:
 *
 *   R = 4 consumed positions 0 .. 7 (two batches of 1 each), then a restart at R' = 3:
 *   list:        p0 p1 p2 p3 p4 p5 p6 p7 | p8 p9 p10 p11 p12 ...
 *   before:      r0 r1 r2 r3 r0 r1 r2 r3 |
 *   after P = 8:                           r0 r1 r2  r0  r1  ...  (position P + k*R' + r)
 *
 * With drop_last each rank then gets floor((N-P)/R') indices, else ceil((N-P)/R') with the
 * padding taken from the start of the list, as at P = 0.
 * Pure local computation; the caller's thread (one at a time per sampler).
 */
#include <stdlib.h>

#include "base/status.h"
#include "train/sampler.h"

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias (rejection on the top of the 64-bit range). */
static uint64_t below(uint64_t *state, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = splitmix64(state);
    while (x >= limit);
    return x % n;
}

static void fill(hvd_sampler *s) {
    size_t n = s->dataset_size;
    for (size_t i = 0; i < n; i++) s->perm[i] = i;
    if (!s->shuffle) return;
    uint64_t state = s->seed * 0x9E3779B97F4A7C15ull ^ (s->epoch + 0x632BE59BD9B4E019ull);
    splitmix64(&state);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)below(&state, (uint64_t)i + 1);
        size_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
}

/* Shards the positions start .. N-1 of the epoch's list over the ranks. */
static void deal(hvd_sampler *s, size_t start) {
    size_t left = s->dataset_size - start, R = (size_t)s->num_replicas;
    s->start = start;
    s->recorded = 0;
    s->num_samples = s->drop_last ? left / R : (left + R - 1) / R;
}

hvd_status hvd_sampler_create(size_t dataset_size, int num_replicas, int rank, int shuffle,
                              uint64_t seed, int drop_last, hvd_sampler **out) {
    const char *fn = "hvd_sampler_create";
    if (out == NULL) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (num_replicas <= 0 || rank < 0) {
        if (!hvd_is_initialized())
            return hvdc__fail(HVD_ERR_NOT_INITIALIZED, "%s: num_replicas <= 0 or rank < 0 asks "
                              "for hvd_size()/hvd_rank(), but libhvdc is not initialized; call "
                              "hvd_init() first or pass both", fn);
        if (num_replicas <= 0) hvd_size(&num_replicas);
        if (rank < 0) hvd_rank(&rank);
    }
    if (dataset_size == 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: the dataset is empty", fn);
    if (rank >= num_replicas)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: rank %d is not below num_replicas %d", fn,
                          rank, num_replicas);
    if (drop_last && dataset_size < (size_t)num_replicas)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: drop_last with %zu examples and %d replicas "
                          "leaves every rank nothing; use drop_last = 0 or fewer ranks", fn,
                          dataset_size, num_replicas);
    hvd_sampler *s = calloc(1, sizeof *s);
    size_t *perm = calloc(dataset_size, sizeof *perm);
    if (s == NULL || perm == NULL) {
        free(s);
        free(perm);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory for %zu indices", fn,
                          dataset_size);
    }
    *s = (hvd_sampler){.dataset_size = dataset_size, .num_replicas = num_replicas,
                       .rank = rank, .shuffle = shuffle != 0, .drop_last = drop_last != 0,
                       .seed = seed, .epoch = 0, .perm = perm};
    fill(s);
    deal(s, 0);
    *out = s;
    return HVD_OK;
}

hvd_status hvd_sampler_destroy(hvd_sampler *sampler) {
    if (sampler == NULL) return HVD_OK;
    free(sampler->perm);
    free(sampler);
    return HVD_OK;
}

hvd_status hvd_sampler_set_epoch(hvd_sampler *sampler, uint64_t epoch) {
    if (sampler == NULL) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_set_epoch: NULL");
    sampler->epoch = epoch;
    fill(sampler);
    deal(sampler, 0);
    return HVD_OK;
}

hvd_status hvd_sampler_set_position(hvd_sampler *sampler, size_t position) {
    if (sampler == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_set_position: NULL sampler");
    if (position > sampler->dataset_size)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_set_position: position %zu is past "
                          "the end of the epoch (%zu examples); expected 0 .. %zu", position,
                          sampler->dataset_size, sampler->dataset_size);
    deal(sampler, position);
    return HVD_OK;
}

hvd_status hvd_sampler_record(hvd_sampler *sampler, size_t n) {
    if (sampler == NULL) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_record: NULL");
    if (n > sampler->num_samples - sampler->recorded)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_record: %zu more indices recorded, "
                          "but only %zu of this rank's %zu are left this epoch", n,
                          sampler->num_samples - sampler->recorded, sampler->num_samples);
    sampler->recorded += n;
    return HVD_OK;
}

hvd_status hvd_sampler_position(const hvd_sampler *sampler, size_t *position) {
    if (sampler == NULL || position == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_position: NULL argument");
    // Positions past N are the padding (drop_last = 0): the epoch is then done.
    size_t done = sampler->start + sampler->recorded * (size_t)sampler->num_replicas;
    *position = done < sampler->dataset_size ? done : sampler->dataset_size;
    return HVD_OK;
}

hvd_status hvd_sampler_num_samples(const hvd_sampler *sampler, size_t *num_samples,
                                   uint64_t *epoch) {
    if (sampler == NULL || num_samples == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_num_samples: NULL argument");
    *num_samples = sampler->num_samples;
    if (epoch != NULL) *epoch = sampler->epoch;
    return HVD_OK;
}

hvd_status hvd_sampler_indices(const hvd_sampler *sampler, size_t first, size_t n,
                               size_t *out) {
    if (sampler == NULL || (out == NULL && n > 0))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_indices: NULL argument");
    if (first > sampler->num_samples || n > sampler->num_samples - first)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_sampler_indices: indices %zu .. %zu asked "
                          "for, but this rank has %zu this epoch", first, first + n,
                          sampler->num_samples);
    size_t N = sampler->dataset_size, R = (size_t)sampler->num_replicas;
    for (size_t k = 0; k < n; k++) {
        // position in the padded (or truncated) list; padding repeats the list from its start
        size_t pos = sampler->start + (first + k) * R + (size_t)sampler->rank;
        out[k] = sampler->perm[pos % N];
    }
    return HVD_OK;
}
