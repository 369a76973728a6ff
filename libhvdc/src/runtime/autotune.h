/*
 * autotune.h - HVD_AUTOTUNE: rank 0 tries fusion thresholds, cycle times and the
 * shared-memory all-reduce's step on the live workload, scores each by bytes all-reduced per
 * second, settles on the best, and logs every trial (HVD_AUTOTUNE_LOG). Pure logic: it is told
 * what ran and when, and says which setting to use next; the background thread applies it (the
 * threshold to rank 0's negotiator, the cycle time and the step to every rank through the next
 * response list).
 *
 * Steps. A training step all-reduces the same names each time, so the tuner measures in
 * steps: the first name all-reduced under a setting is its anchor, and every time the anchor
 * runs again one step has passed. A window from one anchor to a later one holds whole steps,
 * and its bytes per second is the workload's speed under that setting whatever the step does
 * between its all-reduces (compute, data loading). The bytes of a step are measured once, in
 * the warm-up, and a window counts whole steps of them: counting the responses instead would
 * miscount the fused response that holds the anchor, whose other members vary from step to
 * step with the order tensors become ready (by up to a threshold's worth of bytes).
 *
 *   warm-up (3 steps, configured setting, discarded: buffers grow, the cache fills)
 *   for each setting tried:   anchor │ 1 step discarded │ 4 steps measured │ next setting
 *   phase 1: thresholds {configured, 1M, 4M, 16M, 64M, 128M} at the configured cycle time
 *   phase 2: cycle times {0.5, 1, 2, 5} ms (less the configured one, scored in phase 1) at
 *            the best threshold
 *   phase 3: with the shared-memory all-reduce (collectives/shm.h), its step {1/2, 1/4 of the
 *            configured one (the slot), at least 64 KiB} at the best threshold and cycle time
 *   settled: the best of each phase, kept only if it beats the phase's starting value by more
 *            than 3 %: a change must be worth more than the noise of one trial.
 * A setting's score is a step's bytes over its median measured step time: one step slowed by
 * something else on the machine (another job, a page fault storm) does not move it.
 * A trial whose anchor does not come back within 10 s (a workload that never repeats a name)
 * ends with the bytes per second of everything it saw, so the search always ends.
 *
 * defines: hvdc_autotune, hvdc_autotune_trial, hvdc__autotune_init, hvdc__autotune_observe,
 *          hvdc__autotune_write_header, hvdc__autotune_write_row
 * Background thread of rank 0 (and the unit tests).
 */
#ifndef HVDC_AUTOTUNE_H
#define HVDC_AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hvdc.h"

#define HVDC_AUTOTUNE_MAX_CANDIDATES 8
#define HVDC_AUTOTUNE_MAX_STEPS 16 /* measured steps per trial, at most */

/* One finished trial: a row of the log. */
typedef struct hvdc_autotune_trial {
    int trial;        /* 1, 2, ... in the order tried */
    size_t threshold; /* bytes */
    double cycle_ms;
    size_t shm_step;  /* bytes; 0: no shared-memory all-reduce */
    uint64_t bytes;   /* all-reduced in the measured window (whole steps: see above) */
    double seconds;   /* the measured window */
    double score;     /* bytes per second: a step's bytes / the median step time (or, for a
                         trial cut off by the time limit, bytes / seconds) */
} hvdc_autotune_trial;

typedef enum hvdc_autotune_phase {
    HVDC_AUTOTUNE_WARMUP,
    HVDC_AUTOTUNE_THRESHOLDS,
    HVDC_AUTOTUNE_CYCLES,
    HVDC_AUTOTUNE_SHM_STEPS,
    HVDC_AUTOTUNE_SETTLED,
} hvdc_autotune_phase;

typedef struct hvdc_autotune {
    /* the plan: set by init, the tests may shorten the step counts before the first observe */
    int warmup_steps, discard_steps, measure_steps;
    double max_trial_s;
    size_t thresholds[HVDC_AUTOTUNE_MAX_CANDIDATES]; /* (n_thresholds) [0] is the configured one */
    int n_thresholds;
    double cycles[HVDC_AUTOTUNE_MAX_CANDIDATES];     /* (n_cycles) [0] is the configured one */
    int n_cycles;
    size_t shm_steps[HVDC_AUTOTUNE_MAX_CANDIDATES];  /* (n_shm_steps) [0] is the configured one */
    int n_shm_steps;                                 /* 0 without a shared-memory all-reduce */
    /* where the search is */
    hvdc_autotune_phase phase;
    int index;                 /* candidate being tried in this phase */
    int phase_first;           /* results[phase_first ..] are this phase's rows (phases 2, 3) */
    size_t threshold;          /* the setting in force */
    double cycle_ms;
    size_t shm_step;
    hvdc_autotune_trial results[3 * HVDC_AUTOTUNE_MAX_CANDIDATES]; /* (n_results) */
    int n_results;
    hvdc_autotune_trial chosen; /* valid once phase is SETTLED */
    /* the current trial's window */
    char anchor[HVD_MAX_NAME_LEN + 1]; /* "" until the first all-reduce of the setting */
    int steps;                 /* anchor recurrences so far */
    uint64_t step_bytes;       /* bytes all-reduced per step, measured in the warm-up; 0:
                                  unknown (no repeats), then windows count what they saw */
    double trial_start_s, window_start_s, step_start_s;
    double step_s[HVDC_AUTOTUNE_MAX_STEPS]; /* (steps - discard_steps) measured step times */
    uint64_t trial_bytes, window_bytes;
} hvdc_autotune;

/* Starts a search from the configured setting (which is in force until the first change);
 * shm_step: the shared-memory all-reduce's step in force, or 0 where there is none (phase 3 is
 * then skipped). */
void hvdc__autotune_init(hvdc_autotune *t, size_t threshold, double cycle_ms, size_t shm_step);

/* Tells the tuner that an all-reduce of these names (one response, fused or not) moved bytes
 * and finished at now_s (seconds, any monotonic clock).
 * @return 1 when a trial ended: t->results[t->n_results - 1] is its row, and t->threshold,
 * t->cycle_ms and t->shm_step hold the setting to use from now on (when t->phase is
 * HVDC_AUTOTUNE_SETTLED, the final one, also in t->chosen); 0 otherwise. Once settled it
 * always returns 0. */
int hvdc__autotune_observe(hvdc_autotune *t, const char (*names)[HVD_MAX_NAME_LEN + 1],
                           uint32_t n_names, uint64_t bytes, double now_s);

/* The log: a CSV header, then one row per trial; the last row (chosen = 1) repeats the trial
 * the search settled on. @return 0, or -1 when the write failed. */
int hvdc__autotune_write_header(FILE *f);
int hvdc__autotune_write_row(FILE *f, const hvdc_autotune_trial *row, int chosen);

#endif
