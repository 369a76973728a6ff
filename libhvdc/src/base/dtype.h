/*
 * dtype.h - facts about element types and reduce ops, and validation of user-given values.
 * defines: HVDC_MAX_BUFFER_BYTES, hvdc__dtype_valid, hvdc__dtype_is_float, hvdc__dtype_name,
 *          hvdc__dtype_max_count, hvdc__op_valid, hvdc__op_name
 * Pure; any thread.
 */
#ifndef HVDC_DTYPE_H
#define HVDC_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

/* The most bytes one buffer of a request may span: 2^56. No 64-bit process can address more
 * (x86-64 gives user space 2^47 bytes, 2^56 with 5-level paging; arm64 at most 2^52), so a
 * larger count x size is a wrong count, not a big tensor, and refusing it at submission keeps
 * it from reaching a path that would read that far (the shared-memory all-reduce allocates
 * nothing, so no failed malloc stops it). Below 2^56, the sum of a few such sizes (a fused
 * buffer, an offset plus a length, an element count times 8) cannot overflow size_t or
 * ptrdiff_t. Where ptrdiff_t is narrower (32-bit), PTRDIFF_MAX: C defines the difference of
 * two pointers into one buffer only up to that. */
#if PTRDIFF_MAX > (INTMAX_C(1) << 56)
#define HVDC_MAX_BUFFER_BYTES ((size_t)1 << 56)
#else
#define HVDC_MAX_BUFFER_BYTES ((size_t)PTRDIFF_MAX)
#endif

int hvdc__dtype_valid(int dtype);
int hvdc__dtype_is_float(hvd_dtype dtype);
const char *hvdc__dtype_name(int dtype);
/* The most elements of dtype one buffer may hold (HVDC_MAX_BUFFER_BYTES / size); 0 for an
 * unknown dtype. count <= this: count x size neither overflows nor exceeds the bound. */
size_t hvdc__dtype_max_count(hvd_dtype dtype);
int hvdc__op_valid(int op);
const char *hvdc__op_name(int op);

#endif
