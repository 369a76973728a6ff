/*
 * autotune.c - the search behind HVD_AUTOTUNE (autotune.h has the plan and its diagram): a
 * coordinate search, thresholds first, then cycle times, then the shared-memory step, each
 * setting scored over whole steps of the live workload. Pure: no MPI, no clock of its own, no allocation.
 * Background thread of rank 0 (and the unit tests).
 */
#include "runtime/autotune.h"

#include <string.h>

#define MIB ((size_t)1 << 20)
/* A setting other than the configured one must beat it by this much to be kept: one trial's
 * score varies by a few percent from run to run on a shared machine. */
#define MARGIN 0.03

static const size_t grid_thresholds[] = {1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 128 * MIB};
static const double grid_cycles[] = {0.5, 1.0, 2.0, 5.0};
static const size_t step_divisors[] = {2, 4}; /* of the configured step (the slot, the most) */
#define MIN_SHM_STEP ((size_t)64 * 1024)

void hvdc__autotune_init(hvdc_autotune *t, size_t threshold, double cycle_ms, size_t shm_step) {
    memset(t, 0, sizeof *t);
    t->warmup_steps = 3;
    t->discard_steps = 1;
    t->measure_steps = 4;
    t->max_trial_s = 10.0;
    t->thresholds[t->n_thresholds++] = threshold;
    for (size_t i = 0; i < sizeof grid_thresholds / sizeof grid_thresholds[0]; i++)
        if (grid_thresholds[i] != threshold) t->thresholds[t->n_thresholds++] = grid_thresholds[i];
    t->cycles[t->n_cycles++] = cycle_ms;
    for (size_t i = 0; i < sizeof grid_cycles / sizeof grid_cycles[0]; i++)
        if (grid_cycles[i] != cycle_ms) t->cycles[t->n_cycles++] = grid_cycles[i];
    if (shm_step > 0) {
        t->shm_steps[t->n_shm_steps++] = shm_step;
        for (size_t i = 0; i < sizeof step_divisors / sizeof step_divisors[0]; i++) {
            size_t step = shm_step / step_divisors[i] / 4096 * 4096; /* whole pages (shm.h) */
            if (step >= MIN_SHM_STEP) t->shm_steps[t->n_shm_steps++] = step;
        }
    }
    t->phase = HVDC_AUTOTUNE_WARMUP;
    t->threshold = threshold;
    t->cycle_ms = cycle_ms;
    t->shm_step = shm_step;
}

/* A new window from now; the anchor stays when the current response holds it (then the next
 * step starts here), else the next all-reduce becomes the anchor. */
static void start_window(hvdc_autotune *t, double now_s, int at_anchor) {
    if (!at_anchor) t->anchor[0] = '\0';
    t->steps = 0;
    t->trial_start_s = t->window_start_s = t->step_start_s = now_s;
    t->trial_bytes = t->window_bytes = 0;
}

/* The median of v[0..n) (n <= HVDC_AUTOTUNE_MAX_STEPS), by insertion sort of a copy. */
static double median(const double *v, int n) {
    double s[HVDC_AUTOTUNE_MAX_STEPS];
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && s[j - 1] > v[i]; j--) s[j] = s[j - 1];
        s[j] = v[i];
    }
    return n == 0 ? 0.0 : n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* The row among rows[0..n) with the best score; rows[base] (the configured value) unless
 * another beats it by more than MARGIN. */
static int best_row(const hvdc_autotune_trial *rows, int n, int base) {
    int best = base;
    for (int i = 0; i < n; i++)
        if (rows[i].score > rows[best].score) best = i;
    return rows[best].score > rows[base].score * (1.0 + MARGIN) ? best : base;
}

/* The chosen setting becomes the one in force, for good. */
static void settle(hvdc_autotune *t) {
    t->phase = HVDC_AUTOTUNE_SETTLED;
    t->threshold = t->chosen.threshold;
    t->cycle_ms = t->chosen.cycle_ms;
    t->shm_step = t->chosen.shm_step;
}

/* The end of phase 2 or 3: the best of the choice so far (which ran this phase's starting
 * value) and the phase's rows. */
static void choose_in_phase(hvdc_autotune *t) {
    hvdc_autotune_trial rows[HVDC_AUTOTUNE_MAX_CANDIDATES + 1];
    int n = 0;
    rows[n++] = t->chosen;
    for (int i = t->phase_first; i < t->n_results; i++) rows[n++] = t->results[i];
    t->chosen = rows[best_row(rows, n, 0)];
}

/* Phase 3 when there is a shared-memory step to try, else settle. */
static void try_shm_steps_or_settle(hvdc_autotune *t) {
    if (t->n_shm_steps < 2) {
        settle(t);
        return;
    }
    t->phase = HVDC_AUTOTUNE_SHM_STEPS;
    t->index = 1;
    t->phase_first = t->n_results;
    t->cycle_ms = t->chosen.cycle_ms; /* the threshold is already the chosen one (phase 1) */
    t->shm_step = t->shm_steps[1];
}

/* After a trial's row was recorded: the next setting, or settle. */
static void advance(hvdc_autotune *t) {
    if (t->phase == HVDC_AUTOTUNE_THRESHOLDS) {
        if (++t->index < t->n_thresholds) {
            t->threshold = t->thresholds[t->index];
            return;
        }
        /* phase 1 rows are results[0 .. n_thresholds); [0] is the configured threshold */
        t->chosen = t->results[best_row(t->results, t->n_thresholds, 0)];
        t->threshold = t->chosen.threshold;
        if (t->n_cycles > 1) {
            t->phase = HVDC_AUTOTUNE_CYCLES;
            t->index = 1;
            t->phase_first = t->n_results;
            t->cycle_ms = t->cycles[1];
            return;
        }
        try_shm_steps_or_settle(t);
    } else if (t->phase == HVDC_AUTOTUNE_CYCLES) {
        if (++t->index < t->n_cycles) {
            t->cycle_ms = t->cycles[t->index];
            return;
        }
        choose_in_phase(t);
        try_shm_steps_or_settle(t);
    } else if (t->phase == HVDC_AUTOTUNE_SHM_STEPS) {
        if (++t->index < t->n_shm_steps) {
            t->shm_step = t->shm_steps[t->index];
            return;
        }
        choose_in_phase(t);
        settle(t);
    }
}

int hvdc__autotune_observe(hvdc_autotune *t, const char (*names)[HVD_MAX_NAME_LEN + 1],
                           uint32_t n_names, uint64_t bytes, double now_s) {
    if (t->phase == HVDC_AUTOTUNE_SETTLED || n_names == 0) return 0;
    if (t->anchor[0] == '\0') { /* the window opens where the anchor ends */
        memcpy(t->anchor, names[0], sizeof t->anchor);
        start_window(t, now_s, 1);
        return 0;
    }
    int hit = 0;
    for (uint32_t i = 0; i < n_names && !hit; i++) hit = strcmp(names[i], t->anchor) == 0;
    t->trial_bytes += bytes;
    t->window_bytes += bytes;
    if (hit && t->phase != HVDC_AUTOTUNE_WARMUP) {
        int measured_step = ++t->steps - t->discard_steps - 1; /* < 0: a discarded step */
        if (measured_step >= 0 && measured_step < HVDC_AUTOTUNE_MAX_STEPS)
            t->step_s[measured_step] = now_s - t->step_start_s;
        t->step_start_s = now_s;
        if (t->steps == t->discard_steps) { /* the discarded steps end here */
            t->window_start_s = now_s;
            t->window_bytes = 0;
        }
    } else if (hit) {
        t->steps++;
    }
    int timed_out = now_s - t->trial_start_s >= t->max_trial_s;
    if (t->phase == HVDC_AUTOTUNE_WARMUP) {
        if ((hit && t->steps >= t->warmup_steps) || timed_out) {
            if (hit && t->steps > 0) t->step_bytes = t->trial_bytes / (uint64_t)t->steps;
            t->phase = HVDC_AUTOTUNE_THRESHOLDS;
            t->index = 0;
            start_window(t, now_s, hit);
        }
        return 0;
    }
    int measured = hit && t->steps >= t->discard_steps + t->measure_steps;
    if (!measured && !timed_out) return 0;
    hvdc_autotune_trial *row = &t->results[t->n_results];
    *row = (hvdc_autotune_trial){
        .trial = t->n_results + 1, .threshold = t->threshold, .cycle_ms = t->cycle_ms,
        .shm_step = t->shm_step,
        .bytes = !measured ? t->trial_bytes
                 : t->step_bytes ? t->step_bytes * (uint64_t)t->measure_steps : t->window_bytes,
        .seconds = now_s - (measured ? t->window_start_s : t->trial_start_s),
    };
    int n_steps = t->measure_steps < HVDC_AUTOTUNE_MAX_STEPS ? t->measure_steps : HVDC_AUTOTUNE_MAX_STEPS;
    double step = measured && t->step_bytes ? median(t->step_s, n_steps) : 0.0;
    if (step > 0) row->score = (double)t->step_bytes / step;
    else row->score = row->seconds > 0 ? (double)row->bytes / row->seconds : 0.0;
    t->n_results++;
    advance(t);
    start_window(t, now_s, hit);
    return 1;
}

int hvdc__autotune_write_header(FILE *f) {
    return fprintf(f, "trial,threshold,cycle_ms,shm_step,bytes,seconds,score,chosen\n") < 0 ||
                   fflush(f)
               ? -1 : 0;
}

int hvdc__autotune_write_row(FILE *f, const hvdc_autotune_trial *row, int chosen) {
    return fprintf(f, "%d,%zu,%g,%zu,%llu,%.6f,%.0f,%d\n", row->trial, row->threshold,
                   row->cycle_ms, row->shm_step, (unsigned long long)row->bytes, row->seconds,
                   row->score, chosen) < 0 ||
                   fflush(f)
               ? -1 : 0;
}
