/*
 * affinity.h - the CPUs processes may run on (sched_getaffinity).
 * hvd_init warns when a rank has only one: Open MPI binds each rank to one core by default at
 * np <= 2 (and with --bind-to core), and the background thread then shares that core with the
 * training loop, so communication no longer overlaps compute (docs/performance.md). And
 * background waits spin only where the node has a CPU for every rank (base/poll.h).
 * defines: hvdc__cpus_allowed, hvdc__node_cpus
 * Any thread (hvdc__node_cpus: the thread that calls hvd_init).
 */
#ifndef HVDC_AFFINITY_H
#define HVDC_AFFINITY_H

#include <mpi.h>

#include "hvdc.h"

/* @return the CPUs the calling process may run on, or 0 when the system cannot say. */
int hvdc__cpus_allowed(void);

/* *cpus = how many CPUs the ranks of comm on this node may run on together (the union of their
 * affinity masks; 0 when the system cannot say). Collective over comm.
 * @return HVD_OK or HVD_ERR_MPI. */
hvd_status hvdc__node_cpus(MPI_Comm comm, int *cpus);

#endif
