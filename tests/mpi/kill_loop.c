/*
 * kill_loop.c - the rank-killed tests' loop and report lines (see kill_loop.h).
 * The test's main thread.
 */
#include "kill_loop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mpitest.h"

int kill_loop(int argc, char **argv, const kill_test *k) {
    int rank = 0, size = 1;
    hvd_rank(&rank);
    hvd_size(&size);
    int victim = (int)mt_arg_double(argc, argv, "--victim", size - 1);
    double after_s = mt_arg_double(argc, argv, "--after-s", 2.0);
    double max_s = mt_arg_double(argc, argv, "--max-s", 120.0);
    char host[64] = "?";
    const char *ns = getenv("HVDC_NETNS");
    if (ns) snprintf(host, sizeof host, "%s", ns);
    else gethostname(host, sizeof host - 1);
    if (rank == 0)
        printf("# %s: %d ranks; rank %d kills itself after %.1f s of %s\n", argv[0], size,
               victim, after_s, k->what);
    fflush(stdout);
    if (hvd_barrier() != HVD_OK) {
        printf("[rank %d] barrier failed before the test: %s\nFAIL\n", rank, hvd_last_error());
        return 1;
    }
    double start = mt_now(), last_good = start;
    int reported = 0, wrong = 0;
    for (int step = 0;; step++) {
        double now = mt_now();
        char name[64];
        snprintf(name, sizeof name, "kill.step.%d", step);
        if (rank == victim && now - start >= after_s) {
            if (k->before_kill) k->before_kill(k->ctx, name);
            printf("KILLTEST rank=%d host=%s victim step=%d: SIGKILL%s\n", rank, host, step, k->how);
            fflush(stdout);
            kill(getpid(), SIGKILL);
        }
        if (now - start >= max_s) {
            printf("KILLTEST rank=%d host=%s no error after %.1f s (%d steps)\n", rank, host,
                   now - start, step);
            break;
        }
        hvd_status s = k->step(k->ctx, name, &wrong);
        if (s != HVD_OK) {
            printf("KILLTEST rank=%d host=%s failed step=%d status=\"%s\" after_s=%.2f "
                   "message=\"%s\"\n", rank, host, step, hvd_status_string(s),
                   mt_now() - last_good, hvd_last_error());
            reported = 1;
            break;
        }
        if (wrong) printf("[rank %d] step %d: wrong all-reduce result\n", rank, step);
        last_good = mt_now();
    }
    fflush(stdout);
    hvd_status s = hvd_shutdown();
    printf("KILLTEST rank=%d host=%s exit status=\"%s\" after_s=%.2f\n", rank, host,
           hvd_status_string(s), mt_now() - last_good);
    fflush(stdout);
    return reported && !wrong ? 0 : 1;
}
