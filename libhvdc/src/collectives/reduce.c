/*
 * reduce.c - element-wise reduction kernels, one plain loop per dtype and op so the compiler
 * vectorises each (gcc -O3 adds runtime alias checks since dst may equal a). float16 and
 * bfloat16 go through float32 in blocks so the conversion loops vectorise too.
 * Runs on the background thread (and in unit tests).
 */
#include "collectives/reduce.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"
#include "base/half.h"

/* One loop per (type, op); the switch is outside the loops. */

static void reduce_u8(uint8_t *d, const uint8_t *a, const uint8_t *b, size_t n, hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = (uint8_t)(a[i] + b[i]); break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = (uint8_t)(a[i] * b[i]); break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

static void reduce_i8(int8_t *d, const int8_t *a, const int8_t *b, size_t n, hvd_reduce_op op) {
    /* wrap-around like the unsigned types: go through uint8_t to avoid signed overflow */
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = (int8_t)(uint8_t)((uint8_t)a[i] + (uint8_t)b[i]); break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = (int8_t)(uint8_t)((unsigned)a[i] * (unsigned)b[i]); break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

static void reduce_i16(int16_t *d, const int16_t *a, const int16_t *b, size_t n, hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = (int16_t)(uint16_t)((uint16_t)a[i] + (uint16_t)b[i]); break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = (int16_t)(uint16_t)((unsigned)(uint16_t)a[i] * (unsigned)(uint16_t)b[i]); break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

static void reduce_u16(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, hvd_reduce_op op) {
    /* promoted to int: the product of two uint16 can overflow int, so multiply as unsigned */
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = (uint16_t)(a[i] + b[i]); break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = (uint16_t)((unsigned)a[i] * (unsigned)b[i]); break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

/* bool as torch reduces it: sum and max are or, product and min are and; any non-zero byte is
 * true and results are 0 or 1 (average is refused at submission). */
static void reduce_bool(uint8_t *d, const uint8_t *a, const uint8_t *b, size_t n, hvd_reduce_op op) {
    if (op == HVD_MIN || op == HVD_PRODUCT) {
        for (size_t i = 0; i < n; i++) d[i] = (uint8_t)((a[i] != 0) & (b[i] != 0));
    } else {
        for (size_t i = 0; i < n; i++) d[i] = (uint8_t)((a[i] | b[i]) != 0);
    }
}

static void reduce_i32(int32_t *d, const int32_t *a, const int32_t *b, size_t n, hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)a[i] + (uint32_t)b[i]); break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = (int32_t)((uint32_t)a[i] * (uint32_t)b[i]); break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

static void reduce_i64(int64_t *d, const int64_t *a, const int64_t *b, size_t n, hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)a[i] + (uint64_t)b[i]); break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = (int64_t)((uint64_t)a[i] * (uint64_t)b[i]); break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

/* MIN/MAX of floats propagate NaN, as torch.minimum and NumPy do: a NaN on any rank makes the
 * result NaN (a before b: with NaNs on both sides, a's payload), so no rank can end with a
 * number where another ends with NaN. (a < b ? a : b alone returns b when either is NaN.) */
static void reduce_f32(float *d, const float *a, const float *b, size_t n, hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i]; break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] != a[i] || a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] != a[i] || a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i]; break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

static void reduce_f64(double *d, const double *a, const double *b, size_t n, hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: case HVD_AVERAGE: for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i]; break;
    case HVD_MIN: for (size_t i = 0; i < n; i++) d[i] = a[i] != a[i] || a[i] < b[i] ? a[i] : b[i]; break;
    case HVD_MAX: for (size_t i = 0; i < n; i++) d[i] = a[i] != a[i] || a[i] > b[i] ? a[i] : b[i]; break;
    case HVD_PRODUCT: for (size_t i = 0; i < n; i++) d[i] = a[i] * b[i]; break;
    case HVD_ADASUM: break; /* not element-wise: collectives/adasum.c */
    }
}

/* Half types: widen a block of each input to float32, combine, narrow back. */
enum { HALF_BLOCK = 256 };

static void widen(float *out, const uint16_t *in, size_t n, hvd_dtype dtype) {
    if (dtype == HVD_BFLOAT16) {
        for (size_t i = 0; i < n; i++) out[i] = hvdc__bf16_to_float(in[i]);
    } else {
        for (size_t i = 0; i < n; i++) out[i] = hvdc__half_to_float(in[i]);
    }
}

static void narrow(uint16_t *out, const float *in, size_t n, hvd_dtype dtype) {
    if (dtype == HVD_BFLOAT16) {
        for (size_t i = 0; i < n; i++) out[i] = hvdc__float_to_bf16(in[i]);
    } else {
        for (size_t i = 0; i < n; i++) out[i] = hvdc__float_to_half(in[i]);
    }
}

static void reduce_half(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n,
                        hvd_dtype dtype, hvd_reduce_op op) {
    float fa[HALF_BLOCK], fb[HALF_BLOCK];
    for (size_t start = 0; start < n; start += HALF_BLOCK) {
        size_t len = n - start < HALF_BLOCK ? n - start : HALF_BLOCK;
        widen(fa, a + start, len, dtype);
        widen(fb, b + start, len, dtype);
        reduce_f32(fa, fa, fb, len, op);
        narrow(d + start, fa, len, dtype);
    }
}

void hvdc__reduce(void *dst, const void *a, const void *b, size_t count, hvd_dtype dtype,
                  hvd_reduce_op op) {
    switch (dtype) {
    case HVD_UINT8: reduce_u8(dst, a, b, count, op); break;
    case HVD_INT8: reduce_i8(dst, a, b, count, op); break;
    case HVD_INT32: reduce_i32(dst, a, b, count, op); break;
    case HVD_INT64: reduce_i64(dst, a, b, count, op); break;
    case HVD_INT16: reduce_i16(dst, a, b, count, op); break;
    case HVD_UINT16: reduce_u16(dst, a, b, count, op); break;
    case HVD_BOOL: reduce_bool(dst, a, b, count, op); break;
    case HVD_FLOAT16: case HVD_BFLOAT16: reduce_half(dst, a, b, count, dtype, op); break;
    case HVD_FLOAT32: reduce_f32(dst, a, b, count, op); break;
    case HVD_FLOAT64: reduce_f64(dst, a, b, count, op); break;
    }
}

void hvdc__integer_range(hvd_dtype dtype, int64_t *lo, int64_t *hi) {
    switch (dtype) {
    case HVD_UINT8: *lo = 0; *hi = UINT8_MAX; return;
    case HVD_INT8: *lo = INT8_MIN; *hi = INT8_MAX; return;
    case HVD_INT16: *lo = INT16_MIN; *hi = INT16_MAX; return;
    case HVD_UINT16: *lo = 0; *hi = UINT16_MAX; return;
    case HVD_INT32: *lo = INT32_MIN; *hi = INT32_MAX; return;
    case HVD_BOOL: *lo = 0; *hi = 1; return;
    default: *lo = INT64_MIN; *hi = INT64_MAX; return;
    }
}

int64_t hvdc__scale_integer(int64_t v, double factor, int64_t lo, int64_t hi) {
    double x = trunc((double)v * factor);
    if (!(x == x)) return 0; /* NaN */
    /* compare in double: (double)INT64_MAX rounds up to 2^63, which no int64 reaches */
    if (x <= (double)lo) return lo;
    if (x >= (double)hi) return hi;
    return (int64_t)x;
}

#define SCALE_INTEGERS(T, buf, count, factor, lo, hi)                                       \
    do {                                                                                    \
        T *v_ = (buf);                                                                      \
        for (size_t i_ = 0; i_ < (count); i_++)                                             \
            v_[i_] = (T)hvdc__scale_integer((int64_t)v_[i_], (factor), (lo), (hi));         \
    } while (0)

void hvdc__scale(void *buf, size_t count, hvd_dtype dtype, double factor) {
    if (factor == 1.0) return;
    if (!hvdc__dtype_is_float(dtype)) {
        int64_t lo, hi;
        hvdc__integer_range(dtype, &lo, &hi);
        switch (dtype) {
        case HVD_UINT8: SCALE_INTEGERS(uint8_t, buf, count, factor, lo, hi); break;
        case HVD_INT8: SCALE_INTEGERS(int8_t, buf, count, factor, lo, hi); break;
        case HVD_INT16: SCALE_INTEGERS(int16_t, buf, count, factor, lo, hi); break;
        case HVD_UINT16: SCALE_INTEGERS(uint16_t, buf, count, factor, lo, hi); break;
        case HVD_INT32: SCALE_INTEGERS(int32_t, buf, count, factor, lo, hi); break;
        case HVD_INT64: SCALE_INTEGERS(int64_t, buf, count, factor, lo, hi); break;
        default: break; /* bool: scale factors are refused at submission */
        }
        return;
    }
    if (dtype == HVD_FLOAT32) {
        float *f = buf, s = (float)factor;
        for (size_t i = 0; i < count; i++) f[i] *= s;
    } else if (dtype == HVD_FLOAT64) {
        double *f = buf;
        for (size_t i = 0; i < count; i++) f[i] *= factor;
    } else if (dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16) {
        uint16_t *h = buf;
        float block[HALF_BLOCK], s = (float)factor;
        for (size_t start = 0; start < count; start += HALF_BLOCK) {
            size_t len = count - start < HALF_BLOCK ? count - start : HALF_BLOCK;
            widen(block, h + start, len, dtype);
            for (size_t i = 0; i < len; i++) block[i] *= s;
            narrow(h + start, block, len, dtype);
        }
    }
}

void hvdc__divide_integers(void *buf, size_t count, hvd_dtype dtype, int divisor) {
    if (divisor == 1) return;
    switch (dtype) {
    case HVD_UINT8: { uint8_t *v = buf; for (size_t i = 0; i < count; i++) v[i] = (uint8_t)(v[i] / divisor); break; }
    case HVD_INT8: { int8_t *v = buf; for (size_t i = 0; i < count; i++) v[i] = (int8_t)(v[i] / divisor); break; }
    case HVD_INT32: { int32_t *v = buf; for (size_t i = 0; i < count; i++) v[i] = v[i] / divisor; break; }
    case HVD_INT64: { int64_t *v = buf; for (size_t i = 0; i < count; i++) v[i] = v[i] / divisor; break; }
    case HVD_INT16: { int16_t *v = buf; for (size_t i = 0; i < count; i++) v[i] = (int16_t)(v[i] / divisor); break; }
    case HVD_UINT16: { uint16_t *v = buf; for (size_t i = 0; i < count; i++) v[i] = (uint16_t)(v[i] / divisor); break; }
    default: break; /* bool: average is refused at submission */
    }
}

void hvdc__fill_identity(void *buf, size_t count, hvd_dtype dtype, hvd_reduce_op op) {
    double value = op == HVD_PRODUCT ? 1.0 : op == HVD_MIN ? INFINITY : op == HVD_MAX ? -INFINITY : 0.0;
    size_t elem = hvd_dtype_size(dtype);
    if (count == 0) return;
    /* write one element, then replicate it */
    switch (dtype) {
    case HVD_UINT8: *(uint8_t *)buf = op == HVD_MIN ? UINT8_MAX : op == HVD_MAX ? 0 : (uint8_t)value; break;
    case HVD_INT8: *(int8_t *)buf = op == HVD_MIN ? INT8_MAX : op == HVD_MAX ? INT8_MIN : (int8_t)value; break;
    case HVD_INT32: *(int32_t *)buf = op == HVD_MIN ? INT32_MAX : op == HVD_MAX ? INT32_MIN : (int32_t)value; break;
    case HVD_INT64: *(int64_t *)buf = op == HVD_MIN ? INT64_MAX : op == HVD_MAX ? INT64_MIN : (int64_t)value; break;
    case HVD_INT16: *(int16_t *)buf = op == HVD_MIN ? INT16_MAX : op == HVD_MAX ? INT16_MIN : (int16_t)value; break;
    case HVD_UINT16: *(uint16_t *)buf = op == HVD_MIN ? UINT16_MAX : op == HVD_MAX ? 0 : (uint16_t)value; break;
    case HVD_BOOL: *(uint8_t *)buf = op == HVD_MIN || op == HVD_PRODUCT; break; /* and: 1, or: 0 */
    case HVD_FLOAT16: *(uint16_t *)buf = hvdc__float_to_half((float)value); break;
    case HVD_BFLOAT16: *(uint16_t *)buf = hvdc__float_to_bf16((float)value); break;
    case HVD_FLOAT32: *(float *)buf = (float)value; break;
    case HVD_FLOAT64: *(double *)buf = value; break;
    }
    for (size_t filled = 1; filled < count;) {
        size_t n = filled < count - filled ? filled : count - filled;
        memcpy((char *)buf + filled * elem, buf, n * elem);
        filled += n;
    }
}
