/*
 * fold.h - combines n buffers in one fixed order: dst = ((in[0] op in[1]) op in[2]) ... op in[n-1].
 *
 * Floating-point addition is not associative, so a sum's bits depend on the order of its terms.
 * Every host all-reduce (allreduce.h) hands this function the ranks' contributions in rank
 * order, so an element's result depends only on the ranks' values, never on where the element
 * sits in a fused buffer, which algorithm ran, or which rank computed it. With a NaN on both
 * sides of an op the result's payload also depends on the order; fixed order, fixed bits.
 *
 * defines: hvdc__fold
 * Pure; any thread (the background thread, and unit tests).
 */
#ifndef HVDC_FOLD_H
#define HVDC_FOLD_H

#include <stddef.h>

#include "hvdc.h"

/* dst[i] = ((in[0][i] op in[1][i]) op in[2][i]) ... op in[n-1][i], one hvdc__reduce per pair
 * (so float16/bfloat16 round to their type after each op, like every other path). n >= 1.
 * dst may be one of the in[] buffers (in place); otherwise no two buffers overlap.
 * HVD_AVERAGE combines like HVD_SUM. */
void hvdc__fold(void *dst, const void *const *in, int n, size_t count, hvd_dtype dtype,
                hvd_reduce_op op);

#endif
