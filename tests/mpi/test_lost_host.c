/*
 * test_lost_host.c - the job a lost host leaves behind: every rank runs checked all-reduces of
 * 64K floats until one fails, then prints what it heard and exits as a training program does
 * (non-zero, after hvd_shutdown). tests/two_hosts.sh cuts node2's link, or stops every process
 * of node2 with SIGSTOP, while they run: node1's ranks must fail naming node2 and its ranks
 * within HVD_HOST_TIMEOUT (libhvdc's host watch), and hvdcrun must end the job.
 * Each rank prints, after its first good step (the fault waits for every rank's):
 *   LOSTTEST rank=R host=H running
 * and on failure:
 *   LOSTTEST rank=R host=H failed step=N after_s=T status="..." message="..."
 *   LOSTTEST rank=R host=H shutdown status="..."
 * T: seconds since the rank's last good step; H: $HVDC_NETNS, else the host name.
 * Usage: test_lost_host [--max-s M]   (no failure within M seconds, default 120: exit 2)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hvdc.h"

#define COUNT (1 << 16)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    double max_s = argc > 2 && strcmp(argv[1], "--max-s") == 0 ? atof(argv[2]) : 120;
    char host[64] = "";
    const char *netns = getenv("HVDC_NETNS");
    if (netns) snprintf(host, sizeof host, "%s", netns);
    else gethostname(host, sizeof host - 1);
    if (hvd_init() != HVD_OK) {
        printf("LOSTTEST hvd_init failed: %s\n", hvd_last_error());
        return 1;
    }
    int rank = 0, size = 1;
    hvd_rank(&rank);
    hvd_size(&size);
    float *buf = malloc(COUNT * sizeof *buf);
    double start = now(), last_good = start;
    hvd_status st = HVD_OK;
    long step = 0;
    for (; now() - start < max_s; step++) {
        for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1);
        st = hvd_allreduce("lost.step", buf, buf, COUNT, HVD_FLOAT32, HVD_SUM);
        if (st != HVD_OK) break;
        if (buf[0] != (float)(size * (size + 1) / 2)) {
            printf("LOSTTEST rank=%d host=%s wrong result %g at step %ld\n", rank, host, buf[0],
                   step);
            return 1;
        }
        last_good = now();
        if (step == 0) {
            printf("LOSTTEST rank=%d host=%s running\n", rank, host);
            fflush(stdout);
        }
    }
    if (st == HVD_OK) {
        printf("LOSTTEST rank=%d host=%s no failure after %.0f s (%ld steps)\n", rank, host, max_s,
               step);
        return 2;
    }
    printf("LOSTTEST rank=%d host=%s failed step=%ld after_s=%.2f status=\"%s\" message=\"%s\"\n",
           rank, host, step, now() - last_good, hvd_status_string(st), hvd_last_error());
    fflush(stdout);
    hvd_status down = hvd_shutdown();
    printf("LOSTTEST rank=%d host=%s shutdown status=\"%s\"\n", rank, host,
           hvd_status_string(down));
    fflush(stdout);
    free(buf);
    return 1;
}
