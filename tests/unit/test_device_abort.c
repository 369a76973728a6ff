/* Unit test: base/device_abort.c, what a save asks before it writes device results. Until an
 * abort is noted saves may write; after one they are refused, naming the save and the first
 * abort's reason (a second abort is its sequel); hvd_init's reset lets them write again. */
#include <string.h>

#include "base/device_abort.h"
#include "check.h"

int main(void) {
    CHECK_TRUE(hvdc__device_results_trusted("save") == HVD_OK, "no abort yet: a save may write");
    hvdc__device_abort_note("rank 2 died");
    hvdc__device_abort_note("the GPU stream did not finish at shutdown");
    hvd_status st = hvdc__device_results_trusted("hvd_checkpoint_save");
    CHECK_TRUE(st == HVD_ERR_NCCL, "after an abort a save is refused (status %d)", (int)st);
    CHECK_TRUE(strstr(hvd_last_error(), "hvd_checkpoint_save: nothing written") != NULL,
               "names the save and says nothing was written: %s", hvd_last_error());
    CHECK_TRUE(strstr(hvd_last_error(), "rank 2 died") != NULL &&
                   strstr(hvd_last_error(), "shutdown") == NULL,
               "gives the first abort's reason: %s", hvd_last_error());
    CHECK_TRUE(hvdc__device_results_trusted("again") == HVD_ERR_NCCL, "refused until a reset");
    hvdc__device_abort_reset();
    CHECK_TRUE(hvdc__device_results_trusted("save") == HVD_OK, "a new start may write again");
    hvdc__device_abort_note(NULL);
    CHECK_TRUE(hvdc__device_results_trusted("save") == HVD_ERR_NCCL &&
                   strstr(hvd_last_error(), "no reason given") != NULL,
               "an abort without a reason still refuses: %s", hvd_last_error());
    return check_verdict("device abort");
}
