/*
 * affinity.c - hvdc__cpus_allowed and hvdc__node_cpus (see affinity.h). Linux's
 * sched_getaffinity; elsewhere 0.
 * Any thread (hvdc__node_cpus: the thread that calls hvd_init).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base/affinity.h"

#include "base/nodes.h"
#include "base/status.h"

#if defined(__linux__)
#include <sched.h>

int hvdc__cpus_allowed(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_COUNT(&set);
}

hvd_status hvdc__node_cpus(MPI_Comm comm, int *cpus) {
    hvd_status st = HVD_OK;
    MPI_Comm node = MPI_COMM_NULL;
    cpu_set_t set;
    CPU_ZERO(&set);
    int known = sched_getaffinity(0, sizeof set, &set) == 0, all_known = 0;
    *cpus = 0;
    CHECK(hvdc__split_node(comm, &node));
    CHECK_MPI(MPI_Allreduce(&known, &all_known, 1, MPI_INT, MPI_LAND, node));
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &set, (int)sizeof set, MPI_UNSIGNED_CHAR, MPI_BOR, node));
    if (all_known) *cpus = CPU_COUNT(&set);
fail:
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    return st;
}
#else
int hvdc__cpus_allowed(void) { return 0; }

hvd_status hvdc__node_cpus(MPI_Comm comm, int *cpus) {
    (void)comm;
    *cpus = 0;
    return HVD_OK;
}
#endif
