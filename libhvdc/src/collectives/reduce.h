/*
 * reduce.h - the element-wise kernels: combine two buffers with a reduce op, scale a buffer.
 * defines: hvdc__reduce, hvdc__scale, hvdc__scale_integer, hvdc__integer_range,
 *          hvdc__divide_integers, hvdc__fill_identity
 * Pure; any thread. dst may equal a (accumulate in place); otherwise buffers must not overlap.
 */
#ifndef HVDC_REDUCE_H
#define HVDC_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

/* dst[i] = a[i] op b[i]. HVD_AVERAGE combines like HVD_SUM (the division happens once, at the
 * end). float16/bfloat16 combine in float32 and round back to nearest-even. Floating MIN and
 * MAX propagate NaN (NaN if either input is NaN; with two NaNs, a's). bool: sum and max are or,
 * product and min are and (hvdc.h). */
void hvdc__reduce(void *dst, const void *a, const void *b, size_t count, hvd_dtype dtype,
                  hvd_reduce_op op);

/* Fills buf with op's neutral element: 0 for sum/average, 1 for product, the largest value
 * (+inf for floats) for min, the smallest (-inf) for max; bool: 0 for or, 1 for and. */
void hvdc__fill_identity(void *buf, size_t count, hvd_dtype dtype, hvd_reduce_op op);

/* buf[i] *= factor. float16/bfloat16/float32 scale in float32, float64 in float64. Integers
 * scale as Horovod scales them: in float64, then truncated toward zero; a result beyond the
 * type's range is clamped to it (Horovod leaves that undefined). bool is left alone. */
void hvdc__scale(void *buf, size_t count, hvd_dtype dtype, double factor);

/* v * factor in float64, truncated toward zero and clamped to [lo, hi]: one integer element
 * scaled as hvdc__scale scales it (NaN, from 0 * inf, gives 0). */
int64_t hvdc__scale_integer(int64_t v, double factor, int64_t lo, int64_t hi);

/* The range of an integer dtype (bool: 0..1). */
void hvdc__integer_range(hvd_dtype dtype, int64_t *lo, int64_t *hi);

/* buf[i] /= divisor, truncating toward zero, for integer dtypes (averaging integers). */
void hvdc__divide_integers(void *buf, size_t count, hvd_dtype dtype, int divisor);

#endif
