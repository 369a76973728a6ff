/*
 * local_check.h - one rank's refusal reaches every rank: a collective call checks its
 * arguments on each rank, then all ranks agree on the outcome before anything else is sent,
 * so a rank that refuses never leaves the others waiting in the call's first collective.
 *
 * defines: hvdc__agree_local_check
 * The caller's thread; collective (every rank calls it, with the same op_name).
 */
#ifndef HVDC_LOCAL_CHECK_H
#define HVDC_LOCAL_CHECK_H

#include "hvdc.h"

/* One all-reduce under op_name of whether local (this rank's check) failed.
 * @return HVD_OK when every rank's check passed; else on the ranks that failed their own
 *         status and message, on the others HVD_ERR_INVALID_ARG saying that another rank
 *         refused (fn: the public call); a failed all-reduce's status. */
hvd_status hvdc__agree_local_check(const char *fn, const char *op_name, hvd_status local);

#endif
