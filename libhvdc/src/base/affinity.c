/*
 * affinity.c - hvdc__cpus_allowed, hvdc__node_cpus and hvdc__pin_thread (see affinity.h).
 * Linux's sched_getaffinity and pthread_setaffinity_np; elsewhere 0 and a refusal.
 * Any thread (hvdc__node_cpus: the thread that calls hvd_init).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base/affinity.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/nodes.h"
#include "base/status.h"

/* The index-th comma-separated item of list, read as atoi reads it; -1 if the list is shorter. */
static int nth_cpu(const char *list, int index) {
    const char *p = list;
    for (int i = 0; i < index; i++) {
        p = strchr(p, ',');
        if (!p) return -1;
        p++;
    }
    return *p && *p != ',' ? atoi(p) : -1;
}

#if defined(__linux__)
#include <sched.h>

int hvdc__pin_thread(pthread_t thread, const char *list, int local_size, int local_rank,
                     char *why, size_t why_len) {
    if (nth_cpu(list, local_size - 1) < 0) {
        snprintf(why, why_len, "HVD_THREAD_AFFINITY='%.64s' names fewer CPUs than the %d ranks "
                 "of this node; the background thread is not pinned", list, local_size);
        return -1;
    }
    int cpu = nth_cpu(list, local_rank);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
    int err = cpu >= 0 && cpu < CPU_SETSIZE ? pthread_setaffinity_np(thread, sizeof set, &set) : EINVAL;
    if (err != 0) {
        snprintf(why, why_len, "HVD_THREAD_AFFINITY: the background thread of local rank %d "
                 "cannot run on CPU %d (%s); it is not pinned", local_rank, cpu, strerror(err));
        return -1;
    }
    return 0;
}

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
int hvdc__pin_thread(pthread_t thread, const char *list, int local_size, int local_rank,
                     char *why, size_t why_len) {
    (void)thread, (void)list, (void)local_size, (void)local_rank;
    snprintf(why, why_len, "HVD_THREAD_AFFINITY: this system cannot pin a thread");
    return -1;
}

int hvdc__cpus_allowed(void) { return 0; }

hvd_status hvdc__node_cpus(MPI_Comm comm, int *cpus) {
    (void)comm;
    *cpus = 0;
    return HVD_OK;
}
#endif
