/*
 * Unit test: hvd_sampler against an independent re-implementation of PyTorch's
 * DistributedSampler.__iter__ (pad by repeating the list's start, or truncate; then take every
 * R-th position from the rank), for many (N, R, shuffle, drop_last). No MPI traffic: every
 * sampler gets num_replicas and rank explicitly.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hvdc.h"

/* PyTorch's algorithm over a given epoch order perm (N): rank r's list into out. */
static size_t torch_reference(const size_t *perm, size_t N, size_t R, size_t r, int drop_last,
                              size_t *out) {
    size_t num = drop_last ? N / R : (N + R - 1) / R, total = num * R, n = 0;
    size_t *list = malloc(total * sizeof *list);
    for (size_t i = 0; i < total; i++) list[i] = i < N ? perm[i] : list[i - N]; // pad / repeat
    for (size_t i = r; i < total; i += R) out[n++] = list[i];
    free(list);
    return n;
}

/* The epoch's order of 0..N-1: one replica takes everything, in order. */
static void epoch_order(size_t N, int shuffle, uint64_t seed, uint64_t epoch, size_t *perm) {
    hvd_sampler *s = NULL;
    hvd_sampler_create(N, 1, 0, shuffle, seed, 0, &s);
    hvd_sampler_set_epoch(s, epoch);
    hvd_sampler_indices(s, 0, N, perm);
    hvd_sampler_destroy(s);
}

static void check_case(size_t N, int R, int shuffle, int drop_last, uint64_t epoch) {
    size_t *perm = malloc(N * sizeof *perm), *seen = calloc(N, sizeof *seen);
    size_t *got = malloc((N + (size_t)R) * sizeof *got), *want = malloc((N + (size_t)R) * sizeof *want);
    epoch_order(N, shuffle, 42, epoch, perm);
    for (size_t i = 0; i < N; i++) seen[perm[i]]++;
    int is_perm = 1;
    for (size_t i = 0; i < N; i++) is_perm &= seen[i] == 1 && (shuffle || perm[i] == i);
    CHECK_TRUE(is_perm, "N=%zu shuffle=%d: the epoch order is not a permutation (or not 0..N-1)",
               N, shuffle);
    memset(seen, 0, N * sizeof *seen);
    size_t total = 0;
    for (int r = 0; r < R; r++) {
        hvd_sampler *s = NULL;
        hvd_status st = hvd_sampler_create(N, R, r, shuffle, 42, drop_last, &s);
        if (drop_last && N < (size_t)R) {
            CHECK_TRUE(st == HVD_ERR_INVALID_ARG && s == NULL, "N=%zu < R=%d with drop_last "
                       "must be refused", N, R);
            continue;
        }
        CHECK_TRUE(st == HVD_OK, "create N=%zu R=%d r=%d: %s", N, R, r, hvd_last_error());
        hvd_sampler_set_epoch(s, epoch);
        size_t num = 0;
        uint64_t e = 99;
        hvd_sampler_num_samples(s, &num, &e);
        size_t n = torch_reference(perm, N, (size_t)R, (size_t)r, drop_last, want);
        CHECK_TRUE(num == n && e == epoch, "N=%zu R=%d drop_last=%d: num_samples %zu, want %zu",
                   N, R, drop_last, num, n);
        // read it back in uneven pieces, like batches of 3
        for (size_t first = 0; first < num; first += 3) {
            size_t k = num - first < 3 ? num - first : 3;
            CHECK_TRUE(hvd_sampler_indices(s, first, k, got + first) == HVD_OK, "indices");
        }
        CHECK_TRUE(memcmp(got, want, num * sizeof *got) == 0, "N=%zu R=%d r=%d shuffle=%d "
                   "drop_last=%d epoch=%llu: differs from PyTorch's DistributedSampler", N, R, r,
                   shuffle, drop_last, (unsigned long long)epoch);
        for (size_t i = 0; i < num; i++) seen[got[i]]++;
        total += num;
        CHECK_TRUE(hvd_sampler_indices(s, num, 1, got) == HVD_ERR_INVALID_ARG,
                   "reading past the shard must fail");
        hvd_sampler_destroy(s);
    }
    if (!(drop_last && N < (size_t)R)) {
        // drop_last: disjoint shards (no index twice); else: every index at least once and
        // only the padding repeated
        size_t dup = 0, missing = 0;
        for (size_t i = 0; i < N; i++) {
            dup += seen[i] > 1 ? seen[i] - 1 : 0;
            missing += seen[i] == 0;
        }
        if (drop_last) CHECK_TRUE(dup == 0 && total == N / R * R, "N=%zu R=%d: shards overlap", N, R);
        else CHECK_TRUE(missing == 0 && dup == total - N, "N=%zu R=%d: shards miss %zu indices",
                        N, R, missing);
    }
    free(perm);
    free(seen);
    free(got);
    free(want);
}

/* An elastic restart inside an epoch: R ranks consume k_batches batches of b each and record
 * them, then R2 ranks resume at the recorded position. Together they must visit the epoch's
 * list front to back: with drop_last each position at most once and, apart from the tail
 * floor drops, every one; without it every index at least once and only padding twice. */
static void check_resume(size_t N, int R, int R2, size_t b, size_t k_batches, int shuffle,
                         int drop_last) {
    size_t *perm = malloc(N * sizeof *perm), *seen = calloc(N, sizeof *seen);
    size_t *got = malloc((N + 8) * sizeof *got);
    epoch_order(N, shuffle, 5, 2, perm);
    size_t position = 0, visited = 0;
    for (int r = 0; r < R; r++) { // before the restart
        hvd_sampler *s = NULL;
        hvd_sampler_create(N, R, r, shuffle, 5, drop_last, &s);
        hvd_sampler_set_epoch(s, 2);
        size_t num = 0, p = 0;
        hvd_sampler_num_samples(s, &num, NULL);
        size_t k = k_batches * b <= num ? k_batches * b : num / b * b;
        CHECK_TRUE(hvd_sampler_indices(s, 0, k, got) == HVD_OK, "indices before");
        CHECK_TRUE(hvd_sampler_record(s, k) == HVD_OK, "record %zu", k);
        for (size_t i = 0; i < k; i++) seen[got[i]]++;
        visited += k;
        hvd_sampler_position(s, &p);
        if (r == 0) position = p;
        CHECK_TRUE(p == position, "N=%zu R=%d: ranks disagree on the position (%zu vs %zu)", N,
                   R, p, position);
        CHECK_TRUE(hvd_sampler_record(s, num - k + 1) == HVD_ERR_INVALID_ARG,
                   "recording more than the epoch holds must fail");
        hvd_sampler_destroy(s);
    }
    CHECK_TRUE(position == (visited < N ? visited : N), "N=%zu R=%d: position %zu after %zu "
               "visits", N, R, position, visited);
    size_t after = 0;
    for (int r = 0; r < R2; r++) { // after the restart, with R2 ranks
        hvd_sampler *s = NULL;
        hvd_sampler_create(N, R2, r, shuffle, 5, drop_last, &s);
        hvd_sampler_set_epoch(s, 2);
        CHECK_TRUE(hvd_sampler_set_position(s, position) == HVD_OK, "set_position");
        size_t num = 0, p = 0;
        hvd_sampler_num_samples(s, &num, NULL);
        size_t left = N - position;
        size_t want = drop_last ? left / (size_t)R2 : (left + (size_t)R2 - 1) / (size_t)R2;
        CHECK_TRUE(num == want, "N=%zu R2=%d at %zu: num_samples %zu, want %zu", N, R2, position,
                   num, want);
        CHECK_TRUE(hvd_sampler_indices(s, 0, num, got) == HVD_OK, "indices after");
        for (size_t i = 0; i < num; i++) {
            size_t pos = position + i * (size_t)R2 + (size_t)r; // independent of sampler.c
            CHECK_TRUE(got[i] == perm[pos % N], "N=%zu R2=%d r=%d: index %zu is %zu, want list "
                       "position %zu = %zu", N, R2, r, i, got[i], pos, perm[pos % N]);
            seen[got[i]]++;
        }
        hvd_sampler_record(s, num);
        hvd_sampler_position(s, &p);
        CHECK_TRUE(!drop_last || p == position + num * (size_t)R2, "position after the epoch");
        after += num;
        hvd_sampler_destroy(s);
    }
    size_t dup = 0, missing = 0, total = visited + after;
    for (size_t i = 0; i < N; i++) {
        dup += seen[i] > 1 ? seen[i] - 1 : 0;
        missing += seen[i] == 0;
    }
    if (drop_last) {
        CHECK_TRUE(dup == 0, "N=%zu R=%d->%d at %zu: %zu indices visited twice", N, R, R2,
                   position, dup);
        CHECK_TRUE(missing == N - total && missing < (size_t)R2, "N=%zu R=%d->%d at %zu: %zu "
                   "indices never visited (only the last < R' may be dropped)", N, R, R2,
                   position, missing);
    } else {
        CHECK_TRUE(missing == 0 && dup == total - N && dup < (size_t)(R > R2 ? R : R2),
                   "N=%zu R=%d->%d at %zu: %zu missing, %zu repeated", N, R, R2, position,
                   missing, dup);
    }
    free(perm);
    free(seen);
    free(got);
}

int main(void) {
    const size_t sizes[] = {1, 2, 3, 5, 7, 10, 11, 16, 17, 100, 1001};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int R = 1; R <= 5; R++)
            for (int shuffle = 0; shuffle <= 1; shuffle++)
                for (int drop = 0; drop <= 1; drop++) check_case(sizes[i], R, shuffle, drop, 3);
    check_case(60000, 4, 1, 1, 1);
    // Elastic restarts inside an epoch: every pair of rank counts, several stopping points.
    const size_t rs_sizes[] = {7, 12, 100, 1001};
    for (size_t i = 0; i < sizeof rs_sizes / sizeof rs_sizes[0]; i++)
        for (int R = 1; R <= 4; R++)
            for (int R2 = 1; R2 <= 4; R2++)
                for (size_t k = 0; k <= 5; k += 1)
                    for (int drop = 0; drop <= 1; drop++)
                        if (!(drop && rs_sizes[i] < (size_t)(R > R2 ? R : R2)))
                            check_resume(rs_sizes[i], R, R2, 3, k, 1, drop);
    check_resume(60000, 4, 2, 32, 100, 1, 1); // examples/train at np 4 -> 2, batch 128
    check_resume(60000, 2, 4, 64, 100, 1, 1);
    {
        hvd_sampler *s = NULL;
        hvd_sampler_create(10, 2, 0, 1, 1, 1, &s);
        CHECK_TRUE(hvd_sampler_set_position(s, 11) == HVD_ERR_INVALID_ARG, "position past N");
        CHECK_TRUE(hvd_sampler_set_position(s, 10) == HVD_OK, "position N: the epoch is done");
        size_t num = 9;
        hvd_sampler_num_samples(s, &num, NULL);
        CHECK_TRUE(num == 0, "nothing left at position N");
        hvd_sampler_set_position(s, 4);
        hvd_sampler_set_epoch(s, 3);
        hvd_sampler_num_samples(s, &num, NULL);
        CHECK_TRUE(num == 5, "set_epoch starts the epoch over (num %zu)", num);
        CHECK_TRUE(hvd_sampler_position(NULL, &num) == HVD_ERR_INVALID_ARG, "position(NULL)");
        CHECK_TRUE(hvd_sampler_record(NULL, 1) == HVD_ERR_INVALID_ARG, "record(NULL)");
        hvd_sampler_destroy(s);
    }

    // Determinism: the order depends on (seed, epoch) only; epochs and seeds differ.
    size_t a[1000], b[1000];
    epoch_order(1000, 1, 7, 5, a);
    epoch_order(1000, 1, 7, 5, b);
    CHECK_TRUE(memcmp(a, b, sizeof a) == 0, "same seed and epoch must give the same order");
    epoch_order(1000, 1, 7, 6, b);
    CHECK_TRUE(memcmp(a, b, sizeof a) != 0, "another epoch must give another order");
    epoch_order(1000, 1, 8, 5, b);
    CHECK_TRUE(memcmp(a, b, sizeof a) != 0, "another seed must give another order");
    // Going back to an epoch reproduces it (what a resumed run relies on).
    hvd_sampler *s = NULL;
    hvd_sampler_create(1000, 1, 0, 1, 7, 0, &s);
    hvd_sampler_set_epoch(s, 9);
    hvd_sampler_set_epoch(s, 5);
    hvd_sampler_indices(s, 0, 1000, b);
    CHECK_TRUE(memcmp(a, b, sizeof a) == 0, "set_epoch(5) after set_epoch(9) must reproduce 5");
    hvd_sampler_destroy(s);
    // Pinned order (seed 1, epoch 1, N 10): a change here breaks resuming old checkpoints.
    const size_t golden[10] = {7, 0, 5, 8, 9, 4, 3, 6, 2, 1};
    epoch_order(10, 1, 1, 1, a);
    CHECK_TRUE(memcmp(a, golden, sizeof golden) == 0, "the generator changed: got %zu %zu %zu ...",
               a[0], a[1], a[2]);

    // Argument errors.
    CHECK_TRUE(hvd_sampler_create(0, 2, 0, 1, 1, 0, &s) == HVD_ERR_INVALID_ARG, "empty dataset");
    CHECK_TRUE(hvd_sampler_create(10, 2, 2, 1, 1, 0, &s) == HVD_ERR_INVALID_ARG, "rank >= R");
    CHECK_TRUE(hvd_sampler_create(10, 0, 0, 1, 1, 0, &s) == HVD_ERR_NOT_INITIALIZED,
               "R = 0 asks hvd_size() before hvd_init");
    CHECK_TRUE(hvd_sampler_create(10, 2, 0, 1, 1, 0, NULL) == HVD_ERR_INVALID_ARG, "out NULL");
    CHECK_TRUE(hvd_sampler_destroy(NULL) == HVD_OK, "destroy(NULL)");
    CHECK_TRUE(hvd_sampler_set_epoch(NULL, 1) == HVD_ERR_INVALID_ARG, "set_epoch(NULL)");
    return check_verdict("test_sampler");
}
