/* Unit test: the autotuning search (runtime/autotune.c) on a simulated workload whose step time
 * is a known function of the setting: it tries every candidate in the documented order, scores
 * each by exactly the simulated bytes per second (whole steps, whatever the fusion does to the
 * responses around the anchor), settles on the best, keeps the configured setting when nothing
 * beats it by more than the margin, tries the shared-memory step only where there is one,
 * ends on a workload that never repeats a name, and writes the log as documented. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/autotune.h"

#define MIB ((size_t)1 << 20)
#define N_TENSORS 10
#define TENSOR_BYTES MIB

typedef char name_t[HVD_MAX_NAME_LEN + 1];

/* Step time in seconds: a minimum at best_threshold, best_cycle and best_step (when set), each
 * candidate away from it 10 % slower (of the configured step time when flat is set: then
 * nothing is worth a change). */
typedef struct workload {
    size_t best_threshold;
    double best_cycle;
    size_t best_step; /* the shared-memory step; 0: it does not matter */
    double flat; /* > 0: every setting's step time is this factor of the configured one's */
    int unique_names;
} workload;

static double step_seconds(const workload *w, size_t threshold, double cycle, size_t step) {
    if (w->flat > 0)
        return threshold == 16 * MIB && cycle == 1.0 && (step == 0 || step == MIB) ? 0.1 : 0.1 / w->flat;
    double s = 0.1;
    if (threshold != w->best_threshold) s *= 1.10;
    if (cycle != w->best_cycle) s *= 1.10;
    if (w->best_step && step != w->best_step) s *= 1.10;
    return s;
}

/* Runs steps until the tuner settles or max_steps pass. Responses fuse as many tensors as the
 * threshold allows (at least one), like rank 0's negotiator. @return the steps run. */
static int run(hvdc_autotune *t, const workload *w, int max_steps, double *now) {
    static int serial = 0;
    int step = 0;
    for (; step < max_steps && t->phase != HVDC_AUTOTUNE_SETTLED; step++) {
        double d = step_seconds(w, t->threshold, t->cycle_ms, t->shm_step);
        double start = *now;
        for (size_t first = 0; first < N_TENSORS;) {
            size_t per = t->threshold / TENSOR_BYTES ? t->threshold / TENSOR_BYTES : 1;
            size_t n = N_TENSORS - first < per ? N_TENSORS - first : per;
            name_t names[N_TENSORS];
            for (size_t k = 0; k < n; k++) {
                if (w->unique_names) snprintf(names[k], sizeof names[k], "u%d", serial++);
                else snprintf(names[k], sizeof names[k], "grad.%zu", N_TENSORS - 1 - (first + k));
            }
            first += n;
            *now = start + d * (double)first / N_TENSORS;
            hvdc__autotune_observe(t, (const name_t *)names, (uint32_t)n, n * TENSOR_BYTES, *now);
        }
    }
    return step;
}

static void test_search(void) {
    hvdc_autotune t;
    hvdc__autotune_init(&t, 16 * MIB, 1.0, MIB);
    workload w = {.best_threshold = 64 * MIB, .best_cycle = 2.0, .best_step = MIB / 4};
    double now = 100.0;
    int steps = run(&t, &w, 1000, &now);
    CHECK_TRUE(t.phase == HVDC_AUTOTUNE_SETTLED, "settled after %d steps", steps);
    /* warm-up 3, then 10 trials of 1 + 4 steps; the first step also makes the anchor */
    CHECK_TRUE(steps <= 3 + 10 * 5 + 1, "settled after %d steps", steps);
    CHECK_TRUE(t.n_results == 10, "%d trials", t.n_results);
    static const size_t want_t[10] = {16 * MIB, 1 * MIB, 4 * MIB, 64 * MIB, 128 * MIB,
                                      64 * MIB, 64 * MIB, 64 * MIB, 64 * MIB, 64 * MIB};
    static const double want_c[10] = {1, 1, 1, 1, 1, 0.5, 2, 5, 2, 2};
    static const size_t want_s[10] = {MIB, MIB, MIB, MIB, MIB, MIB, MIB, MIB, MIB / 2, MIB / 4};
    for (int i = 0; i < t.n_results && i < 10; i++) {
        const hvdc_autotune_trial *r = &t.results[i];
        CHECK_TRUE(r->trial == i + 1 && r->threshold == want_t[i] && r->cycle_ms == want_c[i] &&
                   r->shm_step == want_s[i], "trial %d: %zu bytes, %g ms, step %zu", r->trial,
                   r->threshold, r->cycle_ms, r->shm_step);
        double want = N_TENSORS * TENSOR_BYTES / step_seconds(&w, r->threshold, r->cycle_ms, r->shm_step);
        CHECK_TRUE(r->bytes == 4 * N_TENSORS * TENSOR_BYTES, "trial %d measured %llu bytes",
                   r->trial, (unsigned long long)r->bytes);
        CHECK_TRUE(r->score > want * 0.999999 && r->score < want * 1.000001,
                   "trial %d scored %g, want %g", r->trial, r->score, want);
    }
    CHECK_TRUE(t.threshold == 64 * MIB && t.cycle_ms == 2.0 && t.shm_step == MIB / 4,
               "settled on %zu bytes, %g ms, step %zu", t.threshold, t.cycle_ms, t.shm_step);
    CHECK_TRUE(t.chosen.trial == 10 && t.chosen.threshold == 64 * MIB && t.chosen.cycle_ms == 2.0 &&
               t.chosen.shm_step == MIB / 4, "chosen trial %d", t.chosen.trial);
    /* without a shared-memory all-reduce there is no third phase */
    hvdc__autotune_init(&t, 16 * MIB, 1.0, 0);
    now = 100.0;
    run(&t, &w, 1000, &now);
    CHECK_TRUE(t.phase == HVDC_AUTOTUNE_SETTLED && t.n_results == 8 && t.shm_step == 0 &&
               t.chosen.trial == 7, "no step phase: %d trials, chosen %d", t.n_results, t.chosen.trial);
    /* settled: nothing changes any more */
    name_t one = "grad.0";
    CHECK_TRUE(hvdc__autotune_observe(&t, (const name_t *)&one, 1, MIB, now + 100) == 0 &&
               t.threshold == 64 * MIB, "no change once settled");
}

static void test_margin_keeps_configured(void) {
    hvdc_autotune t;
    hvdc__autotune_init(&t, 16 * MIB, 1.0, MIB);
    workload w = {.flat = 1.02}; /* every other setting 2 % faster: within the margin */
    double now = 0;
    run(&t, &w, 1000, &now);
    CHECK_TRUE(t.phase == HVDC_AUTOTUNE_SETTLED && t.threshold == 16 * MIB && t.cycle_ms == 1.0 &&
               t.shm_step == MIB, "kept the configured setting: %zu bytes, %g ms, step %zu",
               t.threshold, t.cycle_ms, t.shm_step);
    CHECK_TRUE(t.chosen.trial == 1 && t.n_results == 10, "chosen trial %d of %d", t.chosen.trial,
               t.n_results);
    hvdc__autotune_init(&t, 16 * MIB, 1.0, 0);
    w.flat = 1.10; /* 10 % faster: worth it */
    now = 0;
    run(&t, &w, 1000, &now);
    CHECK_TRUE(t.threshold != 16 * MIB, "left the configured threshold: %zu", t.threshold);
}

static void test_configured_off_grid(void) {
    hvdc_autotune t;
    hvdc__autotune_init(&t, 3 * MIB, 0.7, 0);
    CHECK_TRUE(t.n_thresholds == 6 && t.thresholds[0] == 3 * MIB, "%d thresholds, first %zu",
               t.n_thresholds, t.thresholds[0]);
    CHECK_TRUE(t.n_cycles == 5 && t.cycles[0] == 0.7, "%d cycles, first %g", t.n_cycles, t.cycles[0]);
    CHECK_TRUE(t.n_shm_steps == 0, "no shared memory, no steps: %d", t.n_shm_steps);
    hvdc__autotune_init(&t, 0, 1.0, 0); /* fusion off is where it starts, and is tried */
    CHECK_TRUE(t.n_thresholds == 6 && t.thresholds[0] == 0 && t.threshold == 0, "start at 0");
    /* a slot of 341 pages (16 MiB over 12 ranks): halves and quarters in whole pages */
    hvdc__autotune_init(&t, 16 * MIB, 1.0, 341 * 4096);
    CHECK_TRUE(t.n_shm_steps == 3 && t.shm_steps[0] == 341 * 4096 && t.shm_steps[1] == 170 * 4096 &&
               t.shm_steps[2] == 85 * 4096, "%d steps: %zu %zu %zu", t.n_shm_steps, t.shm_steps[0],
               t.shm_steps[1], t.shm_steps[2]);
    hvdc__autotune_init(&t, 16 * MIB, 1.0, 128 * 1024); /* a quarter would be under 64 KiB */
    CHECK_TRUE(t.n_shm_steps == 2 && t.shm_steps[1] == 64 * 1024, "%d steps", t.n_shm_steps);
}

static void test_never_repeating(void) {
    hvdc_autotune t;
    hvdc__autotune_init(&t, 16 * MIB, 1.0, 0);
    workload w = {.best_threshold = 16 * MIB, .best_cycle = 1.0, .unique_names = 1};
    double now = 0;
    int steps = run(&t, &w, 100000, &now);
    CHECK_TRUE(t.phase == HVDC_AUTOTUNE_SETTLED, "a workload without repeats settles (%d steps)", steps);
    CHECK_TRUE(now < 11.0 * 9 + 1, "within the trial time limits: %g s", now);
    for (int i = 0; i < t.n_results; i++)
        CHECK_TRUE(t.results[i].score > 0 && t.results[i].seconds >= t.max_trial_s,
                   "trial %d: %g s, score %g", i + 1, t.results[i].seconds, t.results[i].score);
}

/* One anchor-only response per step, each step taking seconds[i]. */
static void steps_of(hvdc_autotune *t, const double *seconds, int n, double *now) {
    name_t a = "a";
    for (int i = 0; i < n; i++) {
        *now += seconds[i];
        hvdc__autotune_observe(t, (const name_t *)&a, 1, 100, *now);
    }
}

static void test_outlier_step(void) {
    hvdc_autotune t;
    hvdc__autotune_init(&t, 16 * MIB, 1.0, 0);
    double now = 0;
    static const double warm[] = {0, 1, 1, 1};          /* the anchor, then 3 warm-up steps */
    static const double trial[] = {1, 1, 1, 3, 1};      /* 1 discarded, 4 measured, one slow */
    steps_of(&t, warm, 4, &now);
    CHECK_TRUE(t.phase == HVDC_AUTOTUNE_THRESHOLDS && t.step_bytes == 100, "warm-up: %d, %llu bytes/step",
               (int)t.phase, (unsigned long long)t.step_bytes);
    steps_of(&t, trial, 5, &now);
    CHECK_TRUE(t.n_results == 1, "%d trials", t.n_results);
    CHECK_TRUE(t.results[0].score == 100.0 && t.results[0].bytes == 400 &&
               t.results[0].seconds == 6.0, "one slow step: score %g, %llu bytes in %g s",
               t.results[0].score, (unsigned long long)t.results[0].bytes, t.results[0].seconds);
}

static void test_log(void) {
    FILE *f = tmpfile();
    CHECK_TRUE(f != NULL, "tmpfile");
    if (!f) return;
    hvdc_autotune_trial row = {.trial = 3, .threshold = 4 * MIB, .cycle_ms = 0.5,
                               .shm_step = 512 * 1024, .bytes = 1000000, .seconds = 0.25,
                               .score = 4e6};
    CHECK_TRUE(hvdc__autotune_write_header(f) == 0 && hvdc__autotune_write_row(f, &row, 0) == 0 &&
               hvdc__autotune_write_row(f, &row, 1) == 0, "writes");
    rewind(f);
    char text[512] = "";
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    const char *want = "trial,threshold,cycle_ms,shm_step,bytes,seconds,score,chosen\n"
                       "3,4194304,0.5,524288,1000000,0.250000,4000000,0\n"
                       "3,4194304,0.5,524288,1000000,0.250000,4000000,1\n";
    CHECK_TRUE(strcmp(text, want) == 0, "log:\n%s", text);
    fclose(f);
}

int main(void) {
    test_search();
    test_margin_keeps_configured();
    test_configured_off_grid();
    test_never_repeating();
    test_outlier_step();
    test_log();
    return check_verdict("test_autotune");
}
