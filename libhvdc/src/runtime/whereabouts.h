/*
 * whereabouts.h - what this rank is doing, for a person looking at a stuck job: what it last
 * submitted and how long ago, what it has in flight, and where its threads are. The threads come
 * from a dump the binding registers (hvd_set_thread_dump: Python's faulthandler, which reads
 * every Python thread's stack without the GIL, so a rank stuck in C code still answers); a C
 * program has none, and its last submission says where it stopped.
 * Written for rank 0's stall verdict (asked through the host watch, watch.h) and the SIGUSR1
 * dump (dump.h).
 * defines: hvdc__whereabouts_write
 * Any thread (the thread dump is taken under a lock of its own).
 */
#ifndef HVDC_WHEREABOUTS_H
#define HVDC_WHEREABOUTS_H

#include <stddef.h>

#include "runtime/runtime.h"

/* Writes this rank's whereabouts into out (at most len bytes, NUL-terminated), several lines
 * each starting with indent. */
void hvdc__whereabouts_write(hvdc_runtime *rt, const char *indent, char *out, size_t len);

#endif
