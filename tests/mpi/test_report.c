/*
 * test_report.c - HVD_REPORT names the slow rank: every rank runs steps of TENSORS all-reduces,
 * and one rank (argv[1], default the last) waits LATE_MS before each step's submissions, as a
 * rank with a slower data loader does. After enough periods rank 0's hvd_report_get must name
 * that rank and its host as the one that arrived last most often, with a lateness near LATE_MS,
 * and the step rate, bytes and fusion must match what the ranks did.
 * Run with HVD_REPORT=1 at np >= 3 (rank 0 or another as the slow one).
 *   usage: test_report [SLOW_RANK]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpitest.h"

#define TENSORS 20
#define COUNT 1024
#define LATE_MS 40
#define STEPS 75 /* 3 s of steps at LATE_MS: two full periods of HVD_REPORT=1 */

static void pause_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void step(mt_ctx *t, float (*grads)[COUNT], int late) {
    hvd_handle h[TENSORS];
    if (late) pause_ms(LATE_MS);
    for (int k = 0; k < TENSORS; k++) {
        char name[32];
        snprintf(name, sizeof name, "grad.%d", k);
        for (int i = 0; i < COUNT; i++) grads[k][i] = (float)(t->rank + k);
        MT_EXPECT(t, hvd_allreduce_async(name, grads[k], grads[k], COUNT, HVD_FLOAT32, HVD_SUM,
                                         NULL, &h[k]), HVD_OK);
    }
    for (int k = 0; k < TENSORS; k++) MT_EXPECT(t, hvd_wait(&h[k]), HVD_OK);
}

int main(int argc, char **argv) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    int slow = argc > 1 ? atoi(argv[1]) : t.size - 1;
    float (*grads)[COUNT] = malloc(sizeof(float[TENSORS][COUNT]));
    if (!grads) return 1;
    mt_begin(&t, "HVD_REPORT names rank %d, %d ms late in every step, as the last to arrive", slow,
             LATE_MS);
    for (int s = 0; s < STEPS; s++) step(&t, grads, t.rank == slow);
    hvd_report r;
    MT_EXPECT(&t, hvd_report_get(&r), HVD_OK);
    if (t.rank == 0) {
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        printf("report: period %.1f s, %.1f steps/s, last rank %d on '%s' (%.0f %%, %.1f ms), "
               "wait %.1f ms, %llu tensors in %llu ops, %.3g GB/s\n", r.period_s, r.steps_per_s,
               r.last_rank, r.last_host, 100 * r.last_share, r.last_lateness_ms, r.wait_ms,
               (unsigned long long)r.tensors, (unsigned long long)r.ops, r.busbw_gbs);
        MT_CHECK(&t, r.period_s >= 1.0, "a period of HVD_REPORT=1 was reported: %.2f s",
                 r.period_s);
        MT_CHECK(&t, r.last_rank == slow, "the last rank is %d, expected %d", r.last_rank, slow);
        MT_CHECK(&t, strcmp(r.last_host, host) == 0, "its host '%s', expected '%s'", r.last_host,
                 host);
        MT_CHECK(&t, r.last_share > 0.8, "it was last for %.0f %% of tensors", 100 * r.last_share);
        MT_CHECK(&t, r.last_lateness_ms > LATE_MS / 2 && r.last_lateness_ms < 3 * LATE_MS,
                 "its lateness %.1f ms, near %d", r.last_lateness_ms, LATE_MS);
        /* a step is at least LATE_MS: at most 25 steps a second */
        MT_CHECK(&t, r.steps_per_s > 5 && r.steps_per_s <= 1000.0 / LATE_MS + 1,
                 "%.1f steps/s", r.steps_per_s);
        MT_CHECK(&t, r.tensors > 0 && r.bytes == r.tensors * COUNT * sizeof(float),
                 "%llu bytes for %llu tensors of %d floats", (unsigned long long)r.bytes,
                 (unsigned long long)r.tensors, COUNT);
        MT_CHECK(&t, r.ops > 0 && r.ops <= r.tensors, "%llu ops", (unsigned long long)r.ops);
    } else {
        MT_CHECK(&t, r.period_s == 0 && r.last_rank == -1, "rank %d has no figures (only rank 0)",
                 t.rank);
    }
    mt_end(&t);
    mt_combine(&t);
    free(grads);
    hvd_shutdown();
    return mt_exit_code(&t);
}
