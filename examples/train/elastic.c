/*
 * elastic.c - examples/train --elastic (see elastic.h). The state: the optimizer (parameters,
 * momentum, step count), the sampler (epoch, position) and the bytes "train.progress" (epoch,
 * batches of it done). A commit every --commit-every steps and at every epoch's end; a failure
 * loses at most the steps since the last one. Under hvdcrun's elastic mode, after a restart
 * with another number of ranks, the epoch goes on at the committed position: the global batch
 * stays --batch, split over the new ranks.
 * The main thread.
 */
#include "elastic.h"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        hvd_status st_ = (call);                                                             \
        if (st_ != HVD_OK) {                                                                 \
            fprintf(stderr, "train: %s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,  \
                    hvd_status_string(st_), hvd_last_error());                               \
            exit(EXIT_FAILURE);                                                              \
        }                                                                                    \
    } while (0)

void train_elastic_start(train_elastic *te, const char *dir, long commit_every, hvd_optimizer *opt,
                         hvd_sampler *sampler, int rank, int *start_epoch) {
    *te = (train_elastic){.opt = opt, .sampler = sampler, .commit_every = commit_every,
                          .rank = rank, .progress = {.epoch = 1, .batch = 0}};
    CHECK(hvd_sampler_set_epoch(sampler, 1));
    CHECK(hvd_elastic_create(dir, &te->es));
    CHECK(hvd_elastic_add_optimizer(te->es, opt));
    CHECK(hvd_elastic_add_sampler(te->es, sampler));
    CHECK(hvd_elastic_add_bytes(te->es, "train.progress", &te->progress, sizeof te->progress));
    hvd_elastic_info info;
    CHECK(hvd_elastic_restore(te->es, &info));
    *start_epoch = (int)te->progress.epoch;
    uint64_t steps = 0;
    size_t position = 0;
    CHECK(hvd_optimizer_steps(opt, &steps));
    CHECK(hvd_sampler_position(sampler, &position));
    int size = 1;
    CHECK(hvd_size(&size));
    if (rank == 0 && info.restored) {
        printf("# elastic: restored commit %llu (written %.1f s ago by %d ranks; now %d): "
               "epoch %llu, batch %llu, position %zu, step %llu\n",
               (unsigned long long)info.sequence, info.age_s, info.committed_size, size,
               (unsigned long long)te->progress.epoch, (unsigned long long)te->progress.batch,
               position, (unsigned long long)steps);
    } else if (rank == 0) {
        printf("# elastic: no commit yet, starting at epoch 1; committing every %ld steps\n",
               commit_every);
    }
    fflush(stdout);
}

void train_elastic_epoch(train_elastic *te, int local_batch, int *first, int *last) {
    size_t left = 0; // this rank's indices from the sampler's position to the epoch's end
    CHECK(hvd_sampler_num_samples(te->sampler, &left, NULL));
    *first = (int)te->progress.batch;
    *last = *first + (int)(left / (size_t)local_batch);
}

static int commit(train_elastic *te, const char *why) {
    int stop = 0;
    CHECK(hvd_elastic_commit(te->es, &stop));
    if (stop && te->rank == 0) {
        uint64_t steps = 0;
        hvd_optimizer_steps(te->opt, &steps);
        printf("# elastic: stopping at commit (%s, step %llu) as hvdcrun asked, to restart on "
               "more hosts\n", why, (unsigned long long)steps);
        fflush(stdout);
    }
    return stop;
}

int train_elastic_step(train_elastic *te, size_t local_batch) {
    CHECK(hvd_sampler_record(te->sampler, local_batch));
    te->progress.batch++;
    uint64_t steps = 0;
    CHECK(hvd_optimizer_steps(te->opt, &steps));
    if (te->commit_every <= 0 || steps % (uint64_t)te->commit_every != 0) return 0;
    return commit(te, "every --commit-every steps");
}

int train_elastic_epoch_end(train_elastic *te, int next_epoch) {
    te->progress.epoch = (uint64_t)next_epoch;
    te->progress.batch = 0;
    CHECK(hvd_sampler_set_epoch(te->sampler, (uint64_t)next_epoch));
    return commit(te, "end of an epoch");
}

void train_elastic_free(train_elastic *te) {
    hvd_elastic_destroy(te->es);
    te->es = NULL;
}
