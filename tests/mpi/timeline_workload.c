/*
 * timeline_workload.c - a workload for check_timeline.py: each step submits 20 small and 2
 * large all-reduces at once (so some fuse and pack, some run in place), for `steps` steps,
 * or forever when steps is 0 (the SIGTERM case). Exits non-zero on any wrong result.
 * With "names", it all-reduces tensors whose names hold every kind of byte a JSON writer can
 * get wrong: quotes, backslashes, control bytes, bytes that are not UTF-8, and valid UTF-8.
 *   usage: timeline_workload STEPS | timeline_workload names
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvdc.h"

enum { SMALL = 20, LARGE = 2, SMALL_COUNT = 100, LARGE_COUNT = 1 << 19 };

/* Names check_timeline.py knows too (keep the two lists equal). */
static const char *const odd_names[] = {
    "quote\"in.name", "back\\slash", "tab\tand\nnewline\x01", "latin1 \xe9t\xe9",
    "stray \x80\xff bytes", "utf8 gr\xc3\xbc\xc3\x9f" "e \xe2\x82\xac", "truncated \xe2\x82",
};

static int odd_names_run(void) {
    int bad = 0;
    for (size_t i = 0; i < sizeof odd_names / sizeof odd_names[0]; i++) {
        float x = 1;
        if (hvd_allreduce(odd_names[i], &x, &x, 1, HVD_FLOAT32, HVD_SUM) != HVD_OK) {
            fprintf(stderr, "allreduce '%s': %s\n", odd_names[i], hvd_last_error());
            bad++;
        }
    }
    hvd_shutdown();
    return bad != 0;
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 3;
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "names") == 0) return odd_names_run();
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
