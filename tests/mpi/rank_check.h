/*
 * rank_check.h - the assertion of the multi-rank tests that link libhvdc's internals (and so
 * not mpitest.c, which is written on the public library alone): CHECK_T prints a failed
 * condition with the rank and file:line and counts it; rank_check_total sums the counts over
 * every rank, so that every rank's exit code is the job's verdict.
 * defines: rank_check_failures, CHECK_T (needs an int `rank` in scope), rank_check_total
 * Not thread-safe: CHECK_T from one thread at a time.
 */
#ifndef HVDC_TEST_RANK_CHECK_H
#define HVDC_TEST_RANK_CHECK_H

#include <mpi.h>
#include <stdio.h>

static int rank_check_failures = 0;

#define CHECK_T(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            rank_check_failures++;                                                           \
            printf("[rank %d] FAILED %s:%d: ", rank, __FILE__, __LINE__);                   \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
        }                                                                                    \
    } while (0)

/* The failed checks of every rank of comm, summed. Collective over comm. */
static inline int rank_check_total(MPI_Comm comm) {
    int total = 0;
    MPI_Allreduce(&rank_check_failures, &total, 1, MPI_INT, MPI_SUM, comm);
    return total;
}

#endif
