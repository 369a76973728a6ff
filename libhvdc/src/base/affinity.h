/*
 * affinity.h - how many CPUs this process may run on (sched_getaffinity). hvd_init warns when
 * a rank has only one: Open MPI binds each rank to one core by default at np <= 2 (and with
 * --bind-to core), and the background thread then shares that core with the training loop, so
 * communication no longer overlaps compute (issue 17: 0.03 of it hidden at np 8, against 0.98
 * with --bind-to none).
 * defines: hvdc__cpus_allowed
 * Any thread.
 */
#ifndef HVDC_AFFINITY_H
#define HVDC_AFFINITY_H

/* @return the CPUs the calling process may run on, or 0 when the system cannot say. */
int hvdc__cpus_allowed(void);

#endif
