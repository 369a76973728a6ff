/*
 * sampler.h - the DistributedSampler's fields, shared by sampler.c and checkpoint.c (which
 * saves and restores seed and epoch).
 * defines: struct hvd_sampler
 */
#ifndef HVDC_SAMPLER_H
#define HVDC_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

struct hvd_sampler {
    size_t dataset_size; // N
    int num_replicas;    // R
    int rank;
    int shuffle;
    int drop_last;
    uint64_t seed;
    uint64_t epoch;
    size_t num_samples;  // per rank: ceil(N/R), or floor(N/R) with drop_last
    size_t *perm;        // (N) the current epoch's order of 0..N-1
};

#endif
