/*
 * phases.h - where an op's time goes between hvd_allreduce's call and its return, so the
 * small-op latency can be taken apart (benchmarks/latency_bench and fusion_bench print it):
 *
 *   submitted ─QUEUED─> taken by the background thread ─NEGOTIATE─> answered by rank 0
 *             ─EXECUTE─> queued on the device ─DEVICE─> completed ─WAKE─> its waiter runs again
 *
 * A host op has no device instant: its execute span runs until it completed, its device span
 * is 0. A device op's execute span is the host work of queueing it (plan, kernels, NCCL call,
 * event), its device span the device's work and the finish being seen (the done event, or the
 * background thread's look). Each op carries the five instants (monotonic ns); the waiter adds
 * the five spans to its runtime's totals, host and device ops apart, when hvd_wait returns an
 * op that succeeded. A few clock reads and six plain adds per op, under the completion_mutex
 * the waiter holds anyway (six atomic adds outside it cost ~20 ns an op).
 *
 * defines: hvdc_phase, hvdc_phase_totals, hvdc__phases_add, hvdc__phase_breakdown,
 *          hvdc__phase_name
 * Any thread; the totals are its runtime's, under its completion_mutex.
 */
#ifndef HVDC_PHASES_H
#define HVDC_PHASES_H

#include <stdint.h>

#include "hvdc.h"

typedef enum hvdc_phase {
    HVDC_PHASE_QUEUED,    /* submission until the background thread takes it */
    HVDC_PHASE_NEGOTIATE, /* taken until rank 0's answer schedules it */
    HVDC_PHASE_EXECUTE,   /* answered until the collective completed it (a device op: until
                             it is queued on the device) */
    HVDC_PHASE_DEVICE,    /* a device op: queued until completed; a host op: 0 */
    HVDC_PHASE_WAKE,      /* completed until its waiter runs again */
    HVDC_N_PHASES
} hvdc_phase;

typedef struct hvdc_phase_totals {
    uint64_t ns[HVDC_N_PHASES];
    uint64_t ops;
} hvdc_phase_totals;

/* "queued", "negotiate", "execute", "device", "wake": how the benchmarks print phase p. */
const char *hvdc__phase_name(hvdc_phase p);

/* at: the op's submitted, taken, answered, on-device and completed instants (ns; a host op's
 * on-device instant is its completion); woke_ns: now. Under the lock that guards totals. */
void hvdc__phases_add(hvdc_phase_totals *totals, const int64_t at[HVDC_N_PHASES], int64_t woke_ns);

/* The global runtime's mean µs per op in each phase since the last call, and how many ops
 * (then starts again from zero), of host ops (device 0) or device ops (device 1). For
 * benchmarks/latency_bench and fusion_bench (they link the internal library).
 * @return HVD_OK or HVD_ERR_NOT_INITIALIZED. */
hvd_status hvdc__phase_breakdown(int device, double mean_us[HVDC_N_PHASES], uint64_t *ops);

#endif
