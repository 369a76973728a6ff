/*
 * test_autotune.c - HVD_AUTOTUNE=1 on a training-like workload (run at np 3): every step's
 * all-reduces stay exact while rank 0 tries fusion thresholds, cycle times and, with every rank
 * on one host (the shared-memory all-reduce), its step (so every rank switches steps at the
 * same point, or the all-reduces would hang or go wrong), the search settles within the steps
 * autotune.h promises, and HVD_AUTOTUNE_LOG holds the header, one row per trial (every
 * documented threshold, cycle time and step) and a last row, chosen = 1, repeating one of the
 * trials. Steps go on after it settles, still exact. With HVD_SHM_STEP set, the step trials
 * start from it (so the setting reached the shared-memory all-reduce).
 *
 * Usage: test_autotune LOG.csv   (sets HVD_AUTOTUNE=1 and HVD_AUTOTUNE_LOG itself)
 * A step: every rank submits all tensors async in backward order, then waits for all, as a
 * DistributedOptimizer does. Values are integers, so every sum is exact in any order.
 * Main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

#define N_TENSORS 24
#define MAX_STEPS 120 /* autotune.h: warm-up 3 + 10 trials of 5 steps, and some slack */

static size_t count_of(int k) {
    if (k == 0) return (size_t)1 << 20;       /* 4 MiB */
    if (k % 3 == 0) return (size_t)1 << 18;   /* 1 MiB */
    return 1 + (size_t)(k * 977) % 5000;      /* small */
}

static float value(int rank, int k, size_t i, int step) {
    return (float)((rank + 1) * (int)(1 + (i + 7 * (size_t)k + 3 * (size_t)step) % 1000));
}

/* Every tensor's all-reduce, checked element by element. @return the wrong elements. */
static long run_step(mt_ctx *t, float **send, float **recv, int step) {
    hvd_handle handles[N_TENSORS];
    char names[N_TENSORS][32];
    for (int k = 0; k < N_TENSORS; k++)
        for (size_t i = 0; i < count_of(k); i++) send[k][i] = value(t->rank, k, i, step);
    for (int k = N_TENSORS - 1; k >= 0; k--) {
        snprintf(names[k], sizeof names[k], "layer%d.grad", k);
        if (!MT_EXPECT(t, hvd_allreduce_async(names[k], send[k], recv[k], count_of(k), HVD_FLOAT32,
                                              HVD_SUM, NULL, &handles[k]), HVD_OK))
            return 1;
    }
    long wrong = 0;
    for (int k = N_TENSORS - 1; k >= 0; k--) {
        if (!MT_EXPECT(t, hvd_wait(&handles[k]), HVD_OK)) return wrong + 1;
        for (size_t i = 0; i < count_of(k); i++) {
            float want = 0;
            for (int r = 0; r < t->size; r++) want += value(r, k, i, step);
            if (recv[k][i] != want && wrong++ < 3)
                MT_CHECK(t, 0, "step %d %s[%zu] = %g, want %g", step, names[k], i, recv[k][i], want);
        }
    }
    return wrong;
}

/* Rank 0: has the log got its chosen row yet? */
static int log_settled(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    int settled = 0;
    while (fgets(line, sizeof line, f)) settled |= strlen(line) > 2 && strcmp(line + strlen(line) - 3, ",1\n") == 0;
    fclose(f);
    return settled;
}

static int seen_threshold(const size_t *v, int n, size_t x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return 1;
    return 0;
}

/* HVD_SHM_STEP as the test's environment sets it (a number with an optional K suffix), else
 * the 1 MiB slot. */
static size_t configured_step(void) {
    const char *text = getenv("HVD_SHM_STEP");
    if (!text) return (size_t)1 << 20;
    char *end = NULL;
    size_t bytes = (size_t)strtoull(text, &end, 10);
    return *end == 'K' ? bytes << 10 : bytes;
}

/* shared: the job all-reduces through shared memory (every rank on one host, more than one),
 * so the tuner tries steps too. */
static void check_log(mt_ctx *t, const char *path, int shared) {
    FILE *f = fopen(path, "r");
    MT_CHECK(t, f != NULL, "cannot read %s", path);
    if (!f) return;
    char line[256];
    MT_CHECK(t, fgets(line, sizeof line, f) &&
                strcmp(line, "trial,threshold,cycle_ms,shm_step,bytes,seconds,score,chosen\n") == 0,
             "header: %s", line);
    size_t thresholds[32], steps[32];
    double cycles[32];
    int n = 0, chosen_rows = 0, chosen_trial = -1;
    size_t chosen_threshold = 0, chosen_step = 0;
    double chosen_cycle = 0;
    while (fgets(line, sizeof line, f)) {
        int trial = 0, chosen = -1;
        size_t threshold = 0, step = 0;
        unsigned long long bytes = 0;
        double cycle = 0, seconds = 0, score = 0;
        int got = sscanf(line, "%d,%zu,%lf,%zu,%llu,%lf,%lf,%d", &trial, &threshold, &cycle,
                         &step, &bytes, &seconds, &score, &chosen);
        MT_CHECK(t, got == 8 && bytes > 0 && seconds > 0 && score > 0, "row: %s", line);
        if (chosen == 1) {
            chosen_rows++;
            chosen_trial = trial;
            chosen_threshold = threshold;
            chosen_cycle = cycle;
            chosen_step = step;
            continue;
        }
        MT_CHECK(t, chosen == 0 && trial == n + 1 && chosen_rows == 0, "row %d: %s", n + 1, line);
        if (n < 32) {
            thresholds[n] = threshold;
            cycles[n] = cycle;
            steps[n] = step;
            n++;
        }
    }
    fclose(f);
    int want_n = shared ? 10 : 8;
    MT_CHECK(t, n == want_n, "%d trials logged, want %d", n, want_n);
    if (n > 0 && shared) { /* the configured step (the 1 MiB slot here), then its half and quarter */
        int seen = 0;
        for (int k = 0; k < n; k++)
            seen += steps[k] == steps[0] / 2 || steps[k] == steps[0] / 4;
        MT_CHECK(t, steps[0] == configured_step() && seen == 2, "steps: first %zu (want %zu), %d others",
                 steps[0], configured_step(), seen);
    }
    for (int k = 0; k < n && !shared; k++)
        MT_CHECK(t, steps[k] == 0, "trial %d: step %zu without shared memory", k + 1, steps[k]);
    static const size_t want_t[] = {1u << 20, 4u << 20, 16u << 20, 64u << 20, 128u << 20};
    for (int i = 0; i < 5; i++)
        MT_CHECK(t, seen_threshold(thresholds, n, want_t[i]), "threshold %zu never tried", want_t[i]);
    static const double want_c[] = {0.5, 1, 2, 5};
    for (int i = 0; i < 4; i++) {
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= cycles[k] == want_c[i];
        MT_CHECK(t, seen, "cycle time %g never tried", want_c[i]);
    }
    MT_CHECK(t, chosen_rows == 1 && chosen_trial >= 1 && chosen_trial <= n &&
                thresholds[chosen_trial - 1] == chosen_threshold &&
                cycles[chosen_trial - 1] == chosen_cycle && steps[chosen_trial - 1] == chosen_step,
             "%d chosen rows; trial %d", chosen_rows, chosen_trial);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_autotune LOG.csv\nFAIL\n");
        return 1;
    }
    remove(argv[1]);
    setenv("HVD_AUTOTUNE", "1", 1);
    setenv("HVD_AUTOTUNE_LOG", argv[1], 1);
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    float *send[N_TENSORS], *recv[N_TENSORS];
    for (int k = 0; k < N_TENSORS; k++) {
        send[k] = malloc(count_of(k) * sizeof(float));
        recv[k] = malloc(count_of(k) * sizeof(float));
        if (!send[k] || !recv[k]) {
            fprintf(stderr, "out of memory\nFAIL\n");
            return 1;
        }
    }

    mt_begin(&t, "exact results while autotuning, until it settles");
    int step = 0, settled = 0;
    long wrong = 0;
    for (; step < MAX_STEPS && !settled; step++) {
        wrong += run_step(&t, send, recv, step);
        int32_t flag = t.rank == 0 ? log_settled(argv[1]) : 0;
        if (!MT_EXPECT(&t, hvd_broadcast("autotune.settled", &flag, 1, HVD_INT32, 0), HVD_OK)) break;
        settled = flag;
    }
    MT_CHECK(&t, wrong == 0, "%ld wrong elements", wrong);
    MT_CHECK(&t, settled, "not settled after %d steps", step);
    if (t.rank == 0) printf("settled after %d steps\n", step);
    mt_end(&t);

    mt_begin(&t, "exact results after settling");
    wrong = 0;
    for (int s = 0; s < 5; s++) wrong += run_step(&t, send, recv, step + s);
    MT_CHECK(&t, wrong == 0, "%ld wrong elements", wrong);
    mt_end(&t);

    mt_begin(&t, "the log has every trial and the chosen one");
    int local_size = 0;
    MT_EXPECT(&t, hvd_local_size(&local_size), HVD_OK);
    if (t.rank == 0) check_log(&t, argv[1], t.size > 1 && local_size == t.size);
    mt_end(&t);

    for (int k = 0; k < N_TENSORS; k++) {
        free(send[k]);
        free(recv[k]);
    }
    mt_combine(&t);
    hvd_shutdown();
    return mt_exit_code(&t);
}
