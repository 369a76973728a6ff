/*
 * timeline_workload.c - a workload for check_timeline.py: each step submits 20 small and 2
 * large all-reduces at once (so some fuse and pack, some run in place), for `steps` steps,
 * or forever when steps is 0 (the SIGTERM case). Exits non-zero on any wrong result.
 *   usage: timeline_workload STEPS
 */
#include <stdio.h>
#include <stdlib.h>

#include "hvdc.h"

enum { SMALL = 20, LARGE = 2, SMALL_COUNT = 100, LARGE_COUNT = 1 << 19 };

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 3;
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    int size;
    hvd_size(&size);
    static float small[SMALL][SMALL_COUNT], large[LARGE][LARGE_COUNT];
    int bad = 0;
    for (long step = 0; steps == 0 || step < steps; step++) {
        hvd_handle h[SMALL + LARGE];
        char name[64];
        for (int i = 0; i < SMALL + LARGE; i++) {
            float *buf = i < SMALL ? small[i] : large[i - SMALL];
            size_t count = i < SMALL ? SMALL_COUNT : LARGE_COUNT;
            for (size_t k = 0; k < count; k++) buf[k] = (float)(k % 3);
            snprintf(name, sizeof name, "%s.%d", i < SMALL ? "small" : "large", i);
            if (hvd_allreduce_async(name, buf, buf, count, HVD_FLOAT32, HVD_SUM, NULL, &h[i]) != HVD_OK) {
                fprintf(stderr, "submit: %s\n", hvd_last_error());
                return 1;
            }
        }
        for (int i = 0; i < SMALL + LARGE; i++)
            if (hvd_wait(&h[i]) != HVD_OK) {
                fprintf(stderr, "wait: %s\n", hvd_last_error());
                return 1;
            }
        bad += small[3][2] != 2.0f * (float)size || large[1][4] != 1.0f * (float)size;
    }
    hvd_shutdown();
    if (bad) fprintf(stderr, "%d wrong results\n", bad);
    return bad != 0;
}
