/*
 * agree.h - hvd_init's agreement steps. A start that fails on one rank must fail on every rank,
 * or the others wait forever for it in their first collective; and settings that change what a
 * rank sends must be the same everywhere, or ranks run different algorithms against each other
 * (environment variables reach other hosts only when the launcher passes them: hvdcrun passes
 * every HVD_* variable, mpirun only those named with -x).
 *
 *   every rank: try a step ──> hvdc__agree ──> all OK: go on
 *                                          └─> else: every rank fails with the first failing
 *                                              rank's status and message
 *
 * defines: hvdc__agree, hvdc__agree_settings
 * Collective over comm; the thread that calls hvd_init.
 */
#ifndef HVDC_AGREE_H
#define HVDC_AGREE_H

#include <mpi.h>

#include "hvdc.h"
#include "runtime/config.h"

/* mine: this rank's outcome of the step (its message in hvd_last_error()). @return HVD_OK if
 * every rank succeeded; else, on every rank, the first failing rank's status, with the message
 * "rank R: <its message>"; HVD_ERR_MPI if the agreement itself failed. */
hvd_status hvdc__agree(MPI_Comm comm, hvd_status mine);

/* Every setting marked must_agree has the same value on every rank. @return HVD_OK, or on
 * every rank HVD_ERR_CONFIG naming the first setting that differs and which ranks have which
 * value; HVD_ERR_MPI; HVD_ERR_NO_MEMORY. */
hvd_status hvdc__agree_settings(MPI_Comm comm, const hvdc_config *config);

#endif
