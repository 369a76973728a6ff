/*
 * widen.h - HVD_AVERAGE summed in a wider type, so that partial sums cannot overflow the element
 * type: int8 100 and 127 average to 113 (not -28 after wrapping), float16 60000 and 60000 to
 * 60000 (not inf). Integers (8, 16 and 32 bits) sum in int64 and the sum is divided once, truncating toward zero.
 * float16/bfloat16 sum in float32, each value divided by the number of ranks as it is widened
 * (bfloat16 has float32's range, so only dividing first keeps the sum finite), then rounded
 * once to nearest-even. int64 has no wider type: it sums in int64, so N values whose sum
 * leaves int64's range wrap.
 *
 *   caller's tensor ──hvdc__widen──> wide buffer ──SUM over ranks──> ──hvdc__narrow_average──> recv
 *
 * defines: hvdc__accumulation_dtype, hvdc__widen, hvdc__narrow_average
 * Pure; any thread.
 */
#ifndef HVDC_WIDEN_H
#define HVDC_WIDEN_H

#include <stddef.h>

#include "hvdc.h"

/* The type op on dtype accumulates in: dtype itself unless op is HVD_AVERAGE of a narrow integer
 * or a half type. */
hvd_dtype hvdc__accumulation_dtype(hvd_dtype dtype, hvd_reduce_op op);

/* dst (count elements of wide) = src (count of dtype) * prescale, and for half types / divisor.
 * Integers are scaled in float64, truncated and clamped to dtype's range (hvdc__scale). */
void hvdc__widen(void *dst, hvd_dtype wide, const void *src, hvd_dtype dtype, size_t count,
                 double prescale, int divisor);

/* dst (count of dtype) = src (count of wide) * postscale, and for integers / divisor
 * (truncating toward zero: exactly when postscale is 1, else as one float64 factor
 * postscale / divisor, as Horovod); half types round to nearest-even. Pass the same divisor as to
 * hvdc__widen. */
void hvdc__narrow_average(void *dst, hvd_dtype dtype, const void *src, hvd_dtype wide,
                          size_t count, int divisor, double postscale);

#endif
