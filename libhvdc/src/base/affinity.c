/*
 * affinity.c - hvdc__cpus_allowed (see affinity.h). Linux's sched_getaffinity; elsewhere 0.
 * Any thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base/affinity.h"

#if defined(__linux__)
#include <sched.h>

int hvdc__cpus_allowed(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_COUNT(&set);
}
#else
int hvdc__cpus_allowed(void) { return 0; }
#endif
