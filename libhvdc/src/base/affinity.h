/*
 * affinity.h - the CPUs processes may run on (sched_getaffinity).
 * hvd_init warns when a rank has only one: Open MPI binds each rank to one core by default at
 * np <= 2 (and with --bind-to core), and the background thread then shares that core with the
 * training loop, so communication no longer overlaps compute (docs/performance.md). And
 * background waits spin only where the node has a CPU for every rank (base/poll.h).
 * And HVD_THREAD_AFFINITY (Horovod's HOROVOD_THREAD_AFFINITY) pins the background thread.
 * defines: hvdc__cpus_allowed, hvdc__node_cpus, hvdc__pin_thread
 * Any thread (hvdc__node_cpus: the thread that calls hvd_init).
 */
#ifndef HVDC_AFFINITY_H
#define HVDC_AFFINITY_H

#include <mpi.h>
#include <pthread.h>
#include <stddef.h>

#include "hvdc.h"

/* @return the CPUs the calling process may run on, or 0 when the system cannot say. */
int hvdc__cpus_allowed(void);

/* *cpus = how many CPUs the ranks of comm on this node may run on together (the union of their
 * affinity masks; 0 when the system cannot say). Collective over comm.
 * @return HVD_OK or HVD_ERR_MPI. */
hvd_status hvdc__node_cpus(MPI_Comm comm, int *cpus);

/* Pins thread to the local_rank-th CPU of list, comma-separated CPU numbers, one per local rank
 * (Horovod's parse_and_set_affinity: each item read with atoi). @return 0, or -1 with why
 * (a list shorter than local_size, or a CPU the system refuses) written to why. */
int hvdc__pin_thread(pthread_t thread, const char *list, int local_size, int local_rank,
                     char *why, size_t why_len);

#endif
