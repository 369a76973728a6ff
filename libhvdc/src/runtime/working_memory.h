/*
 * working_memory.h - the executors' working memory (the fusion buffer and the algorithms'
 * scratch), reserved before any data moves and agreed by every rank, so that a request too big
 * for one rank's memory fails on every rank alone and the runtime goes on. Its own file so that
 * each executor (execute.c, execute_adasum.c) uses it without calling into the other.
 * defines: hvdc__reserve_agreed
 * Background thread.
 */
#ifndef HVDC_WORKING_MEMORY_H
#define HVDC_WORKING_MEMORY_H

#include <stddef.h>

#include "runtime/execute.h"

/* Working memory for one response, reserved before any data moves, and agreed: a rank that
 * cannot get it refuses the response on every rank alike (hvdc__refused) and the runtime goes
 * on. fusion and scratch grow to at least these sizes. kind and name go into the message.
 * Collective over ex->comm when either grows beyond what was agreed before; an error of the
 * agreement itself leaves the ranks out of step (hvdc__ran). */
hvdc_outcome hvdc__reserve_agreed(hvdc_executor *ex, const char *kind, const char *name,
                                  size_t fusion_bytes, size_t scratch_bytes);

#endif
