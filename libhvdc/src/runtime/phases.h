/*
 * phases.h - where a host op's time goes between hvd_allreduce's call and its return, so the
 * small-op latency can be taken apart (benchmarks/latency_bench prints it):
 *
 *   submitted ─QUEUED─> taken by the background thread ─NEGOTIATE─> answered by rank 0
 *             ─EXECUTE─> completed ─WAKE─> its waiter runs again
 *
 * Each op carries the four instants (monotonic ns); the waiter adds the four spans to its
 * runtime's totals when hvd_wait returns a host op that succeeded. A few clock reads and four
 * relaxed atomic adds per op.
 *
 * defines: hvdc_phase, hvdc_phase_totals, hvdc__phases_add, hvdc__phase_breakdown
 * Any thread.
 */
#ifndef HVDC_PHASES_H
#define HVDC_PHASES_H

#include <stdatomic.h>
#include <stdint.h>

#include "hvdc.h"

typedef enum hvdc_phase {
    HVDC_PHASE_QUEUED,    /* submission until the background thread takes it */
    HVDC_PHASE_NEGOTIATE, /* taken until rank 0's answer schedules it */
    HVDC_PHASE_EXECUTE,   /* answered until the collective completed it */
    HVDC_PHASE_WAKE,      /* completed until its waiter runs again */
    HVDC_N_PHASES
} hvdc_phase;

typedef struct hvdc_phase_totals {
    atomic_ullong ns[HVDC_N_PHASES];
    atomic_ullong ops;
} hvdc_phase_totals;

/* at: the op's submitted, taken, answered and completed instants (ns); woke_ns: now. */
void hvdc__phases_add(hvdc_phase_totals *totals, const int64_t at[HVDC_N_PHASES], int64_t woke_ns);

/* The global runtime's mean µs per op in each phase since the last call, and how many ops
 * (then starts again from zero). For benchmarks/latency_bench (it links the internal library).
 * @return HVD_OK or HVD_ERR_NOT_INITIALIZED. */
hvd_status hvdc__phase_breakdown(double mean_us[HVDC_N_PHASES], uint64_t *ops);

#endif
