/*
 * timeline_workload.c - a workload for check_timeline.py: each step submits 20 small and 2
 * large all-reduces at once (so some fuse and pack, some run in place), for `steps` steps,
 * or forever when steps is 0 (the SIGTERM case). Exits non-zero on any wrong result.
 * With "names", it all-reduces tensors whose names hold every kind of byte a JSON writer can
 * get wrong: quotes, backslashes, control bytes, bytes that are not UTF-8, and valid UTF-8.
 *   usage: timeline_workload STEPS | timeline_workload names
 *          timeline_workload startstop FILE_A FILE_B
 * startstop: 4 steps whose tensors are named "s<step>.*"; hvd_start_timeline(FILE_A, marks)
 * before step 1, hvd_stop_timeline after it, hvd_start_timeline(FILE_B, no marks) before
 * step 3, and hvd_shutdown with FILE_B still open; plus the calls' error cases.
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

static int expect(hvd_status got, hvd_status want, const char *what) {
    if (got == want) return 0;
    fprintf(stderr, "%s: got %s, expected %s (%s)\n", what, hvd_status_string(got),
            hvd_status_string(want), hvd_last_error());
    return 1;
}

/* The run-time start/stop schedule (see the top); returns the number of failed checks. */
static int control_timeline(int step, int rank, const char *a, const char *b) {
    int bad = 0;
    if (step == 1) {
        bad += expect(hvd_start_timeline("", 0), HVD_ERR_INVALID_ARG, "start with an empty path");
        bad += expect(hvd_start_timeline(NULL, 0), HVD_ERR_INVALID_ARG, "start with NULL");
        hvd_status s = hvd_start_timeline("/nonexistent-dir/timeline.json", 0);
        bad += expect(s, rank == 0 ? HVD_ERR_INVALID_ARG : HVD_OK, "start in a missing directory");
        if (rank == 0 && !strstr(hvd_last_error(), "/nonexistent-dir/timeline.json")) {
            fprintf(stderr, "the message does not name the file: %s\n", hvd_last_error());
            bad++;
        }
        bad += expect(hvd_start_timeline(a, 1), HVD_OK, "start A");
        s = hvd_start_timeline(b, 0);
        bad += expect(s, rank == 0 ? HVD_ERR_INVALID_ARG : HVD_OK, "start while A is written");
    } else if (step == 2) {
        bad += expect(hvd_stop_timeline(), HVD_OK, "stop A");
        bad += expect(hvd_stop_timeline(), HVD_OK, "stop when stopped");
    } else if (step == 3) {
        bad += expect(hvd_start_timeline(b, 0), HVD_OK, "start B");
    }
    return bad;
}

int main(int argc, char **argv) {
    int startstop = argc > 3 && strcmp(argv[1], "startstop") == 0;
    long steps = startstop ? 4 : argc > 1 ? atol(argv[1]) : 3;
    if (hvd_start_timeline("x.json", 0) != HVD_ERR_NOT_INITIALIZED ||
        hvd_stop_timeline() != HVD_ERR_NOT_INITIALIZED) {
        fprintf(stderr, "timeline calls before hvd_init did not return HVD_ERR_NOT_INITIALIZED\n");
        return 1;
    }
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "names") == 0) return odd_names_run();
    int size, rank;
    hvd_size(&size);
    hvd_rank(&rank);
    static float small[SMALL][SMALL_COUNT], large[LARGE][LARGE_COUNT];
    int bad = 0;
    for (long step = 0; steps == 0 || step < steps; step++) {
        hvd_handle h[SMALL + LARGE];
        char name[64];
        if (startstop) bad += control_timeline((int)step, rank, argv[2], argv[3]);
        for (int i = 0; i < SMALL + LARGE; i++) {
            float *buf = i < SMALL ? small[i] : large[i - SMALL];
            size_t count = i < SMALL ? SMALL_COUNT : LARGE_COUNT;
            for (size_t k = 0; k < count; k++) buf[k] = (float)(k % 3);
            if (startstop)
                snprintf(name, sizeof name, "s%ld.%s.%d", step, i < SMALL ? "small" : "large", i);
            else
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
    if (bad) fprintf(stderr, "%d wrong results or failed checks\n", bad);
    return bad != 0;
}
