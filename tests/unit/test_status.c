/* Unit test: the detail messages of base/status.c name the runtime's rank, as the user knows it
 * (under hvd_init_comm that is the rank in the user's communicator, not in MPI_COMM_WORLD), and
 * a message may quote the one before it. */
#include <mpi.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "check.h"

int main(void) {
    hvd_status st = hvdc__fail_mpi(MPI_ERR_COMM, "MPI_Comm_dup(comm, &out)", "init.c", 7);
    CHECK_TRUE(st == HVD_ERR_MPI, "status is HVD_ERR_MPI");
    CHECK_TRUE(strstr(hvd_last_error(), "MPI_Comm_dup(comm, &out) failed at init.c:7") != NULL,
               "names the call and file:line: %s", hvd_last_error());
    CHECK_TRUE(strstr(hvd_last_error(), "a rank not yet known") != NULL,
               "before the runtime knows its rank, says so: %s", hvd_last_error());
    hvdc__log_init(HVDC_LOG_ERROR, 5); /* what hvd_init does once it knows the rank */
    hvdc__fail_mpi(MPI_ERR_COMM, "MPI_Isend(...)", "ring.c", 9);
    CHECK_TRUE(strstr(hvd_last_error(), "on rank 5:") != NULL, "the runtime's rank: %s",
               hvd_last_error());
    hvdc__fail(HVD_ERR_CONFIG, "x=%d", 3);
    CHECK_TRUE(strcmp(hvd_last_error(), "x=3") == 0, "hvdc__fail formats: %s", hvd_last_error());
    /* a message that quotes the one before it (hvd_last_error() as an argument) */
    hvdc__fail(HVD_ERR_CUDA, "cudaStreamWaitEvent failed at gpu.c:12: invalid resource handle");
    hvdc__fail(HVD_ERR_CUDA, "%s: the stream cannot wait: %s", "hvd_wait_on_stream",
               hvd_last_error());
    CHECK_TRUE(strcmp(hvd_last_error(), "hvd_wait_on_stream: the stream cannot wait: "
                      "cudaStreamWaitEvent failed at gpu.c:12: invalid resource handle") == 0,
               "quotes the previous message whole: %s", hvd_last_error());
    hvdc__clear_error();
    CHECK_TRUE(hvd_last_error()[0] == '\0', "cleared");
    return check_verdict("status messages");
}
