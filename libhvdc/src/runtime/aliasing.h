/*
 * aliasing.h - which overlaps of a call's buffers are allowed, checked at submission. A
 * collective whose output overlaps its input at an offset would read data it has already
 * overwritten: libhvdc refuses it (HVD_ERR_INVALID_ARG) rather than return wrong numbers.
 *
 *   allreduce, reducescatter   recvbuf == sendbuf (in place), or no overlap at all
 *   grouped allreduce          each tensor as allreduce; no output may overlap any other
 *                              tensor's input or output
 *   allgather, alltoall        no overlap at all (the output holds every rank's data)
 *
 * Also: names within one grouped call must differ.
 * defines: hvdc__check_overlap, hvdc__check_group
 * Any thread (pure).
 */
#ifndef HVDC_ALIASING_H
#define HVDC_ALIASING_H

#include <stddef.h>

#include "hvdc.h"

/* send (send_bytes) and recv (recv_bytes) of one call: equal starts are allowed only when
 * in_place_ok; any other overlap fails. @return HVD_OK or HVD_ERR_INVALID_ARG naming fn and
 * name. */
hvd_status hvdc__check_overlap(const char *fn, const char *name, const void *send,
                               size_t send_bytes, const void *recv, size_t recv_bytes,
                               int in_place_ok);

/* A grouped call's n tensors (elem bytes per element): distinct names, and each output
 * overlapping nothing but its own input, when they are equal. @return HVD_OK,
 * HVD_ERR_INVALID_ARG naming the two tensors, or HVD_ERR_NO_MEMORY. */
hvd_status hvdc__check_group(const char *fn, int n, const char *const names[],
                             const void *const sends[], void *const recvs[],
                             const size_t counts[], size_t elem);

#endif
