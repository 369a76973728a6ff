/*
 * test_kill.c - one rank dies by SIGKILL while every rank is busy all-reducing; the others
 * must notice, get a named error from libhvdc, and exit instead of hanging.
 *
 * Every rank runs steps of a 1M-float all-reduce (checked) until one fails. After --after-s
 * seconds of steps the victim rank (--victim, default the last rank: on node2 under
 * `-H node1:2,node2:2`) sends itself SIGKILL, which it cannot catch: to its peers this is a
 * crashed host process, the same as an external `kill -9` or the OOM killer.
 *
 * Each survivor prints, for tests/two_hosts.sh to parse:
 *   KILLTEST rank=R host=H failed step=N status="TEXT" after_s=T message="..."
 *       when an operation returns an error (T: seconds since its last good step)
 *   KILLTEST rank=R host=H exit status="TEXT" after_s=T
 *       just before it exits, after hvd_shutdown (T: seconds since its last good step)
 * and exits 0 once it has reported an error; a survivor whose steps never fail within
 * --max-s seconds prints "KILLTEST rank=R ... no error" and exits 1. The time bound itself is
 * the caller's: tests/two_hosts.sh runs mpirun under `timeout` and checks that node1's ranks
 * printed their exit lines (see --kill there). A rank killed by the launcher prints nothing,
 * which the stage reports as "no named error".
 *
 * Usage: test_kill [--victim R] [--after-s T] [--max-s M]
 * Runs on the main thread only.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpitest.h"

#define COUNT (1u << 20) /* floats per step: 4 MiB, a few ms across two hosts */

static double arg_double(int argc, char **argv, const char *flag, double dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0) return atof(argv[i + 1]);
    return dflt;
}

int main(int argc, char **argv) {
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    int rank = 0, size = 1;
    hvd_rank(&rank);
    hvd_size(&size);
    int victim = (int)arg_double(argc, argv, "--victim", size - 1);
    double after_s = arg_double(argc, argv, "--after-s", 2.0);
    double max_s = arg_double(argc, argv, "--max-s", 120.0);
    char host[64] = "?";
    const char *ns = getenv("HVDC_NETNS");
    if (ns) snprintf(host, sizeof host, "%s", ns);
    else gethostname(host, sizeof host - 1);

    float *buf = malloc(COUNT * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "test_kill: out of memory\n");
        return 1;
    }
    if (rank == 0)
        printf("# test_kill: %d ranks; rank %d kills itself after %.1f s of %u-float "
               "all-reduces\n", size, victim, after_s, COUNT);
    fflush(stdout);
    if (hvd_barrier() != HVD_OK) {
        printf("[rank %d] barrier failed before the test: %s\nFAIL\n", rank, hvd_last_error());
        return 1;
    }

    double start = mt_now(), last_good = start;
    int step = 0, reported = 0, wrong = 0;
    for (;; step++) {
        double now = mt_now();
        if (rank == victim && now - start >= after_s) {
            printf("KILLTEST rank=%d host=%s victim step=%d: SIGKILL\n", rank, host, step);
            fflush(stdout);
            kill(getpid(), SIGKILL);
        }
        if (now - start >= max_s) {
            printf("KILLTEST rank=%d host=%s no error after %.1f s (%d steps)\n", rank, host,
                   now - start, step);
            break;
        }
        char name[64];
        snprintf(name, sizeof name, "kill.step.%d", step);
        for (size_t i = 0; i < COUNT; i++) buf[i] = (float)((rank + 1) * (int)(i % 7));
        s = hvd_allreduce(name, buf, buf, COUNT, HVD_FLOAT32, HVD_SUM);
        if (s != HVD_OK) {
            printf("KILLTEST rank=%d host=%s failed step=%d status=\"%s\" after_s=%.2f "
                   "message=\"%s\"\n", rank, host, step, hvd_status_string(s),
                   mt_now() - last_good, hvd_last_error());
            reported = 1;
            break;
        }
        /* sum over ranks of (r+1)*(i%7) = (i%7) * size*(size+1)/2, exact in float */
        for (size_t i = 0; i < COUNT && !wrong; i++)
            wrong = buf[i] != (float)((int)(i % 7) * size * (size + 1) / 2);
        if (wrong) printf("[rank %d] step %d: wrong all-reduce result\n", rank, step);
        last_good = mt_now();
    }
    fflush(stdout);
    free(buf);
    s = hvd_shutdown();
    printf("KILLTEST rank=%d host=%s exit status=\"%s\" after_s=%.2f\n", rank, host,
           hvd_status_string(s), mt_now() - last_good);
    fflush(stdout);
    return reported && !wrong ? 0 : 1;
}
