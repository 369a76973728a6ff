/*
 * test_shm_rotation.c - the node's shared-memory all-reduce (collectives/shm.h) on its own,
 * without the runtime: a random sequence, the same on every rank, of one-shot all-reduces
 * (bytes inline in the flag line, and in a slot), staged and step-wise all-reduces, and
 * reduce-scatter + all-gather, with random pauses on random ranks between a call's arrival and
 * its reads. A rank that runs ahead and writes a set, a flag line or a slot that another rank
 * still reads makes that rank's bits wrong. Each result is checked bit for bit against a sum
 * folded here, in rank order, from every rank's input (values of random magnitudes, so the
 * order shows). Run at np 3 and 4, where the order shows, and at np 2, where each rank writes
 * its part's results back into the other's slot (shm.c), so a race shows there too.
 * Usage: test_shm_rotation [iterations]. Main thread only.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/shm.h"

enum { STEP = 16 * 1024, MAX_COUNT = 3 * STEP / 4 + 7 };

typedef enum kind { ONESHOT, STAGED, STEPWISE, SCATTER_GATHER, N_KINDS } kind;
static const char *const KIND_NAMES[] = {"one-shot", "staged", "step-wise", "scatter-gather"};

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Rank q's element i of iteration it: an integer times a random power of two. */
static float input(int q, int it, size_t i) {
    uint64_t h = mix(((uint64_t)it << 40) ^ ((uint64_t)q << 32) ^ i);
    return ldexpf((float)((int)(h % 2001) - 1000), (int)((h >> 20) % 40) - 20);
}

/* Sleeps up to 200 us on about one call in four of this rank. */
static void maybe_pause(uint64_t *rng) {
    *rng = mix(*rng + 1);
    if (*rng % 4 == 0) nanosleep(&(struct timespec){0, (long)(*rng % 200000)}, NULL);
}

/* One call of kind k on count elements: src holds this rank's input, dst gets the result. */
static hvd_status run(hvdc_shm *shm, kind k, float *src, float *dst, size_t count,
                      uint64_t *rng) {
    hvd_status st = HVD_OK;
    const void *result = NULL;
    switch (k) {
    case ONESHOT:
        memcpy(hvdc__shm_oneshot_staging(shm, count * sizeof *src), src, count * sizeof *src);
        st = hvdc__shm_oneshot_exchange(shm, NULL);
        maybe_pause(rng); /* the others may run ahead into the next call meanwhile */
        if (st == HVD_OK) hvdc__shm_oneshot_fold(shm, 0, count, HVD_FLOAT32, HVD_SUM, dst);
        return st;
    case STAGED:
        memcpy(hvdc__shm_staging(shm), src, count * sizeof *src);
        st = hvdc__shm_allreduce_staged(shm, count, HVD_FLOAT32, HVD_SUM, NULL, &result);
        maybe_pause(rng);
        if (st == HVD_OK) memcpy(dst, result, count * sizeof *dst);
        return st;
    case STEPWISE: return hvdc__shm_allreduce(shm, src, dst, count, HVD_FLOAT32, HVD_SUM, NULL);
    default:
        st = hvdc__shm_reduce_scatter(shm, src, dst, count, HVD_FLOAT32, HVD_SUM, NULL);
        maybe_pause(rng);
        return st == HVD_OK ? hvdc__shm_allgather_blocks(shm, dst, count, HVD_FLOAT32, NULL) : st;
    }
}

/* The iteration's kind and count, the same on every rank. */
static kind pick(int it, size_t oneshot_max, size_t *count) {
    uint64_t h = mix(0x5eedULL + (uint64_t)it);
    kind k = (kind)(h % N_KINDS);
    size_t most = k == ONESHOT ? oneshot_max / sizeof(float) : k == STAGED ? STEP / sizeof(float)
                                                                            : MAX_COUNT;
    *count = h >> 8 & 1 ? 1 + (h >> 16) % 12 : 1 + (h >> 16) % most; /* inline-sized often */
    return k;
}

/* Wrong elements of dst against the rank-order sum of every rank's input. */
static size_t wrong_elements(const float *dst, size_t count, int it, int size) {
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
        float sum = input(0, it, i);
        for (int q = 1; q < size; q++) sum += input(q, it, i);
        if (memcmp(&sum, &dst[i], sizeof sum) != 0) wrong++;
    }
    return wrong;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, iterations = argc > 1 ? atoi(argv[1]) : 3000;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    hvdc_shm *shm = NULL;
    long failures = hvdc__shm_create(MPI_COMM_WORLD, &shm) != HVD_OK;
    float *src = malloc(MAX_COUNT * sizeof *src), *dst = malloc(MAX_COUNT * sizeof *dst);
    uint64_t rng = mix(1000u + (uint64_t)rank);
    if (shm) hvdc__shm_set_step(shm, STEP); /* several steps from a few thousand elements */
    for (int it = 0; shm && it < iterations; it++) { /* every rank makes every call */
        size_t count;
        kind k = pick(it, hvdc__shm_oneshot_max(shm), &count);
        for (size_t i = 0; i < count; i++) src[i] = input(rank, it, i);
        maybe_pause(&rng);
        hvd_status st = run(shm, k, src, dst, count, &rng);
        size_t wrong = st == HVD_OK ? wrong_elements(dst, count, it, size) : count;
        if (wrong && failures++ < 5) {
            printf("[rank %d] iteration %d, %s of %zu floats: %s, %zu wrong elements\n", rank, it,
                   KIND_NAMES[k], count, hvd_status_string(st), wrong);
        } else if (wrong) {
            failures++;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: %d iterations at np %d, %ld failures\n", failures ? "FAIL" : "PASS",
                          iterations, size, failures);
    hvdc__shm_destroy(shm);
    free(src);
    free(dst);
    MPI_Finalize();
    return failures != 0;
}
