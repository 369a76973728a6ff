/*
 * set_table.h - the table of the process sets this process knows, and which runtime an
 * operation of a set goes to. A set is named by its id in hvd_options; a handle carries its
 * set's slot in bits 56..63 (slot 0: the global runtime, never in the table).
 *
 * Lookups come from every submission and wait (api.c, submit.c); adding and removing sets
 * (process_sets.c) fill and empty slots through the calls at the end. The table sits below
 * both, so looking a set up never reaches the code that agrees on new sets.
 *
 * defines: HVDC_HANDLE_SLOT_SHIFT, hvdc__set_acquire[_slot], hvdc__set_release,
 *          hvdc__set_shape, hvdc__set_position, hvdc__set_list_rank,
 *          hvdc__set_table_{find,has_ranks,publish,close,clear,used}
 * Any thread (one lock, the table's; a runtime in use by a call is never freed under it).
 */
#ifndef HVDC_SET_TABLE_H
#define HVDC_SET_TABLE_H

#include <stddef.h>

#include "hvdc.h"

struct hvdc_runtime;

#define HVDC_HANDLE_SLOT_SHIFT 56
#define HVDC_SET_SLOTS 64 /* slot 0 is the global runtime; the handle has 8 bits for it */

/* Acquire gives the runtime an operation of set id goes to, failing (HVD_ERR_INVALID_ARG, with
 * a message naming fn) for an unknown set or one this rank is not in; every successful acquire
 * is paired with one release of *slot. acquire_slot: the runtime of a handle's slot, also while
 * its set is being removed (a wait still finds its failed op); HVD_ERR_INVALID_ARG if none. */
hvd_status hvdc__set_acquire(int id, const char *fn, struct hvdc_runtime **rt, int *slot);
hvd_status hvdc__set_acquire_slot(int slot, struct hvdc_runtime **rt);
void hvdc__set_release(int slot);
/* Set id's size and this rank's position in it (-1 outside); global rank g's position (-1
 * outside, or no such set). */
hvd_status hvdc__set_shape(int id, const char *fn, int *size, int *rank);
int hvdc__set_position(int id, int global_rank);

/* Appends rank r to the list "0, 2, 5" in buf (*count entries so far; buf is set on the
 * first), for messages that name ranks. */
void hvdc__set_list_rank(char *buf, size_t len, int *count, int r);

/* For adding and removing (process_sets.c, one change at a time). */
/* The slot of set id, and its runtime (NULL on a rank outside the set); -1 if none. */
int hvdc__set_table_find(int id, struct hvdc_runtime **rt);
/* The id of a set with exactly these ranks (sorted, n), or 0; *free_slot: a free slot, or -1. */
int hvdc__set_table_has_ranks(const int *sorted, int n, int *free_slot);
/* Fills free slot with set id (ranks: malloc'ed, sorted, owned by the table from now on). */
void hvdc__set_table_publish(int slot, int id, int *ranks, int n, int position,
                             struct hvdc_runtime *rt);
/* No new users of slot from now on; @return its runtime (NULL outside the set). */
struct hvdc_runtime *hvdc__set_table_close(int slot);
/* Waits until no call uses slot any more, then frees it (its id can no longer be acquired). */
void hvdc__set_table_clear(int slot);
/* The first slot >= from that holds a set, or -1. */
int hvdc__set_table_used(int from);

#endif
