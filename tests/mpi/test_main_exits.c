/*
 * test_main_exits.c - a rank whose main thread has ended with pthread_exit is alive: its
 * neighbours must not take it for dead. Such a main thread is a zombie in /proc while the
 * process goes on, the liveness watch looks at /proc (base/liveness.c), and naming the rank
 * dead would stop a healthy job.
 *
 * Every rank's main thread calls hvd_init, starts a worker and calls pthread_exit. The worker
 * waits until its main thread shows as a zombie (the premise; FAIL if it never does), then
 * all-reduces for at least --for-s seconds (default 0.5: ten liveness periods; a step every
 * 5 ms) and checks every sum, then combines the verdicts and exits the process.
 * Usage: test_main_exits [--for-s S]   (np >= 2, every rank on one node)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpitest.h"

#define COUNT 1024
#define STEP_PAUSE_S 0.005

static mt_ctx t;
static double for_s;

/* This process's main thread's state letter in /proc (R, S, Z...), or '?'. */
static char main_thread_state(void) {
    char stat[512];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return '?';
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')');
    return paren && paren[1] == ' ' ? paren[2] : '?';
}

static void *worker(void *arg) {
    (void)arg;
    double start = mt_now();
    while (main_thread_state() != 'Z' && mt_now() - start < 5.0) usleep(1000);
    mt_begin(&t, "all-reduces after the main thread's pthread_exit");
    MT_CHECK(&t, main_thread_state() == 'Z', "the main thread is not a zombie (state %c)",
             main_thread_state());
    static int32_t buf[COUNT], ref[COUNT];
    double began = mt_now();
    int steps = (int)(for_s / STEP_PAUSE_S); /* the same on every rank */
    for (int i = 0; i < steps; i++) {
        mt_fill(buf, HVD_INT32, HVD_SUM, t.rank, 0, COUNT, (uint64_t)i);
        if (!MT_EXPECT(&t, hvd_allreduce("step", buf, buf, COUNT, HVD_INT32, HVD_SUM),
                       HVD_OK))
            break; /* libhvdc stopped: on every rank */
        mt_reduce_ref(ref, HVD_INT32, HVD_SUM, t.size, 0, COUNT, (uint64_t)i, 1.0, 1.0);
        mt_compare(&t, buf, ref, HVD_INT32, COUNT, 0, "step");
        usleep((useconds_t)(STEP_PAUSE_S * 1e6));
    }
    if (t.rank == 0) printf("# %d all-reduces in %.2f s\n", steps, mt_now() - began);
    mt_end(&t);
    mt_combine(&t);
    int code = mt_exit_code(&t);
    hvd_shutdown();
    fflush(stdout);
    exit(code); /* the process ends here: its main thread is gone */
}

int main(int argc, char **argv) {
    for_s = mt_arg_double(argc, argv, "--for-s", 0.5);
    if (mt_start(&t) != 0) return 1;
    pthread_t w;
    if (pthread_create(&w, NULL, worker, NULL) != 0) {
        printf("[rank %d] no worker thread\nFAIL\n", t.rank);
        return 1;
    }
    pthread_exit(NULL);
}
