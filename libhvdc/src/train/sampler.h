/*
 * sampler.h - the DistributedSampler's fields, shared by sampler.c, checkpoint.c (which
 * saves and restores seed and epoch) and elastic.c (which also saves the position).
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
    size_t start;        // position in the epoch's list where the shards begin: 0 after
                         // set_epoch, P after set_position(P) (an elastic restart)
    size_t recorded;     // this rank's indices hvd_sampler_record counted since start
    size_t num_samples;  // per rank, of the N - start left: ceil((N-start)/R), or floor with
                         // drop_last (ceil(N/R) and floor(N/R) when start is 0)
    size_t *perm;        // (N) the current epoch's order of 0..N-1
};

#endif
