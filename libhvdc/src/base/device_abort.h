/*
 * device_abort.h - whether this process aborted GPU communicators, and why: an aborted
 * collective ends early with partial sums, and what a stream was already waiting for behind
 * it (hvd_wait_on_stream, the optimizer's update) reads them. The GPU backend notes an abort
 * before it makes one; what writes device results where they outlive the job
 * (hvd_checkpoint_save, hvd_elastic_commit) asks first. Process-wide: any runtime's backend
 * (a process set's too) may have made the results it reads.
 *
 * defines: hvdc__device_abort_note, hvdc__device_abort_reset, hvdc__device_results_trusted
 * Any thread.
 */
#ifndef HVDC_DEVICE_ABORT_H
#define HVDC_DEVICE_ABORT_H

#include "hvdc.h"

/* Before communicators are aborted: remembers the first why (later ones are its sequels). */
void hvdc__device_abort_note(const char *why);

/* hvd_init: a new start has no aborted communicators. */
void hvdc__device_abort_reset(void);

/* Whether device results may be kept, for fn about to write them where they outlive the job.
 * @return HVD_OK; HVD_ERR_NCCL naming fn and the abort's reason when communicators were
 *         aborted since hvd_init. */
hvd_status hvdc__device_results_trusted(const char *fn);

#endif
