/*
 * test_submit_fault.c - a submission that cannot get a handle (HVDC_TEST_FAULTS=add_handle, set
 * on every rank: the handle table cannot grow) fails with HVD_ERR_NO_MEMORY and a message naming
 * the operation, on its caller alone; nothing is queued, so no rank waits. The message used to
 * be made from the op after it was freed: under the sanitizer stage's ASan build that read is
 * an error. hvd_shutdown then returns HVD_OK.
 * Usage: test_submit_fault
 * Main thread only.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

int main(int argc, char **argv) {
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mt_ctx t;
    mt_init(&t, rank, size);
    setenv("HVDC_TEST_FAULTS", "add_handle", 1); /* read by hvd_init */
    if (hvd_init() != HVD_OK) {
        printf("hvd_init failed: %s\nFAIL\n", hvd_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    mt_begin(&t, "a submission without a handle fails alone, its message naming it");
    float x = 1.0f;
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status st = hvd_allreduce_async("submit.no_handle", &x, &x, 1, HVD_FLOAT32, HVD_SUM, NULL, &h);
    MT_CHECK(&t, st == HVD_ERR_NO_MEMORY, "got %s (%s), expected HVD_ERR_NO_MEMORY",
             hvd_status_string(st), hvd_last_error());
    MT_CHECK(&t, strstr(hvd_last_error(), "'submit.no_handle'") &&
                 strstr(hvd_last_error(), "out of memory for a handle"),
             "the message names the operation and why: %s", hvd_last_error());
    MT_CHECK(&t, h == HVD_HANDLE_NULL, "a handle was returned");
    if (rank == 0) printf("#   %s: %s\n", hvd_status_string(st), hvd_last_error());
    mt_end(&t);
    mt_begin(&t, "hvd_shutdown returns HVD_OK");
    MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
    mt_end(&t);
    int code = mt_exit_code(&t);
    MPI_Finalize();
    return code;
}
