/*
 * alltoall_counts.h - an all-to-all's receive counts, for the host and the device executors.
 * defines: hvdc__alltoall_recv_counts
 * Background thread.
 */
#ifndef HVDC_ALLTOALL_COUNTS_H
#define HVDC_ALLTOALL_COUNTS_H

#include "runtime/execute.h"

/* recv (ex->topo->size entries) gets how many elements each rank sends this one: column rank of
 * the send-count matrix that rank 0 validated and put in the response, where the job is small
 * enough for it (wire.h, HVDC_ALLTOALL_MATRIX_RANKS); else the ranks exchange their counts now
 * (collective over ex->comm). */
hvd_status hvdc__alltoall_recv_counts(hvdc_executor *ex, const hvdc_op *op,
                                      const hvdc_wire_response *r, uint64_t *recv);

#endif
