/*
 * elastic.h - examples/train --elastic: what the example keeps in an hvd_elastic state and
 * when it commits (elastic.c). train.c calls these around its loop.
 * defines: train_elastic, train_elastic_start, train_elastic_epoch, train_elastic_step,
 *          train_elastic_epoch_end, train_elastic_free
 */
#ifndef TRAIN_ELASTIC_H
#define TRAIN_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

typedef struct train_elastic {
    hvd_elastic *es;
    hvd_optimizer *opt;
    hvd_sampler *sampler;
    long commit_every; // optimizer steps between commits
    int rank;
    struct {
        uint64_t epoch; // the epoch in progress (from 1)
        uint64_t batch; // global batches of it done
    } progress;         // registered as bytes "train.progress"
} train_elastic;

/* Registers opt, sampler and progress in a state on dir (NULL: HVD_ELASTIC_DIR), then restores
 * the last commit if there is one: *start_epoch is the epoch to continue (the sampler is then
 * at the committed position in it, dealt over this run's ranks). Prints what it restored on
 * rank 0. Collective. Exits the process on failure (an example may). */
void train_elastic_start(train_elastic *te, const char *dir, long commit_every, hvd_optimizer *opt,
                         hvd_sampler *sampler, int rank, int *start_epoch);

/* The global batches of the epoch in progress still to do: [*first, *last), where *first is
 * the committed (or 0 at an epoch's start) batch and the sampler's indices count from it
 * (the rest of the epoch dealt over this run's ranks). Local. */
void train_elastic_epoch(train_elastic *te, int local_batch, int *first, int *last);

/* After an optimizer step: the batch (local_batch examples on this rank) is recorded in the
 * sampler; every commit_every steps the state is committed. Returns 1 when hvdcrun asked the
 * job to stop at this commit (to restart it on more hosts). Collective. */
int train_elastic_step(train_elastic *te, size_t local_batch);

/* After an epoch's evaluation: the state moves to the next epoch, position 0, and is
 * committed. Returns 1 when hvdcrun asked the job to stop. Collective. */
int train_elastic_epoch_end(train_elastic *te, int next_epoch);

void train_elastic_free(train_elastic *te);

#endif
