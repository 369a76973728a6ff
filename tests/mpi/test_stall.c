/*
 * test_stall.c - the stall inspector: one rank (the last, or the one named) never submits
 * "withheld", which the others do. With HVD_STALL_SHUTDOWN_TIME=3 every rank's pending and
 * later operations must fail with HVD_ERR_STALLED within a few seconds, and the message must
 * name the tensor and the rank that never submitted it, instead of the job hanging, whichever
 * rank withholds: rank 0 (the coordinator) included, and with HVD_STALL_CHECK_TIME=0 (no
 * reports) as well.
 *   usage: test_stall idle|busy [WITHHOLDER [cached]]   (the withholding rank sleeps, or
 *          keeps submitting others; "cached": every rank first all-reduces "withheld" once
 *          together, so the others then announce it from the response cache, by slot)
 * The test starts MPI itself: after a stall hvd_shutdown leaves a MPI it started unfinalized (a
 * stalled rank may never finalize), which mpirun would count as a failure; here every rank,
 * the withholder too, reaches MPI_Finalize once the stop has reached it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "mpitest.h"

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "idle";
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    int rank = t.rank, size = t.size;
    int withholder = argc > 2 ? atoi(argv[2]) : size - 1;
    int reporter = withholder == 0 ? 1 : 0; /* a rank that checks the message */
    if (argc > 3 && strcmp(argv[3], "cached") == 0) {
        float once = 1;
        MT_EXPECT(&t, hvd_allreduce("withheld", &once, &once, 1, HVD_FLOAT32, HVD_SUM), HVD_OK);
    }
    double start = mt_now();
    mt_begin(&t, "stall (%s withholder %d%s) fails every rank with HVD_ERR_STALLED", mode, withholder,
             argc > 3 ? ", cached" : "");
    if (rank != withholder) {
        float x = 1;
        hvd_handle h;
        MT_CHECK(&t, hvd_allreduce_async("withheld", &x, &x, 1, HVD_FLOAT32, HVD_SUM, NULL, &h) == HVD_OK,
                 "submit: %s", hvd_last_error());
        hvd_status st = hvd_wait(&h);
        MT_CHECK(&t, st == HVD_ERR_STALLED, "got %s", hvd_status_string(st));
        char ranks[16];
        snprintf(ranks, sizeof ranks, "%d", withholder);
        if (rank == reporter)
            MT_CHECK(&t, strstr(hvd_last_error(), "withheld") && strstr(hvd_last_error(), ranks),
                     "message names the tensor and rank %s: %s", ranks, hvd_last_error());
    } else if (strcmp(mode, "busy") == 0) {
        /* keep the negotiation going with other tensors until the job is stopped */
        hvd_status st = HVD_OK;
        for (int i = 0; st == HVD_OK && mt_now() - start < 20; i++) {
            char name[32];
            int v = i;
            snprintf(name, sizeof name, "other.%d", i);
            st = hvd_allreduce(name, &v, &v, 1, HVD_INT32, HVD_SUM);
        }
        MT_CHECK(&t, st == HVD_ERR_STALLED, "withholder's own op got %s", hvd_status_string(st));
    } else {
        /* idle: nothing in flight while the others wait, longer than they may take to stop */
        struct timespec pause = {8, 0};
        nanosleep(&pause, NULL);
    }
    double waited = mt_now() - start;
    /* HVD_STALL_SHUTDOWN_TIME=3 plus inspection granularity; the idle withholder sleeps 8 s */
    if (rank != withholder) MT_CHECK(&t, waited < 6.5, "took %.1f s to stop", waited);
    /* after the stop every call fails fast with the same status */
    int v = 0;
    hvd_status later = hvd_allreduce("after", &v, &v, 1, HVD_INT32, HVD_SUM);
    MT_CHECK(&t, later == HVD_ERR_STALLED, "a later op got %s", hvd_status_string(later));
    MT_CHECK(&t, strstr(hvd_last_error(), "stopped") && strstr(hvd_last_error(), "HVD_STALL_SHUTDOWN_TIME"),
             "a later op's message says the runtime stopped and why: %s", hvd_last_error());
    hvd_status down = hvd_shutdown();
    MT_CHECK(&t, down == HVD_ERR_STALLED && strstr(hvd_last_error(), "stall"),
             "hvd_shutdown says the job stopped on a stall: %s: %s", hvd_status_string(down),
             hvd_last_error());
    mt_end(&t);
    MPI_Finalize();
    /* the job is stopped, so verdicts cannot be combined through libhvdc: each rank's own */
    return mt_exit_code(&t);
}
