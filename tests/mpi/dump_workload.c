/*
 * dump_workload.c - for check_dump.py: rank 0 submits "dump.withheld", which no other rank
 * submits, and waits for it; the others idle for a few seconds, then shut down, which fails
 * rank 0's operation with HVD_ERR_SHUTDOWN. Meanwhile the script sends SIGUSR1.
 */
#include <stdio.h>
#include <time.h>

#include "hvdc.h"

int main(void) {
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    int rank;
    hvd_rank(&rank);
    if (rank == 0) {
        float x = 1;
        hvd_handle h;
        hvd_allreduce_async("dump.withheld", &x, &x, 1, HVD_FLOAT32, HVD_SUM, NULL, &h);
        hvd_status st = hvd_wait(&h);
        printf("rank 0: dump.withheld ended with %s\n", hvd_status_string(st));
    } else {
        struct timespec left = {5, 0};
        while (nanosleep(&left, &left) != 0) { /* SIGUSR1 interrupts: sleep the rest */ }
    }
    hvd_shutdown();
    return 0;
}
