/*
 * widen.c - the conversions of widen.h: narrow types into their accumulation type and back.
 * Plain loops per type so they vectorise. Background thread (and unit tests).
 */
#include "collectives/widen.h"

#include <stdint.h>

#include "base/half.h"
#include "collectives/reduce.h"

hvd_dtype hvdc__accumulation_dtype(hvd_dtype dtype, hvd_reduce_op op) {
    if (op != HVD_AVERAGE) return dtype;
    switch (dtype) {
    case HVD_UINT8:
    case HVD_INT8:
    case HVD_INT16:
    case HVD_UINT16:
    case HVD_INT32: return HVD_INT64;
    case HVD_FLOAT16:
    case HVD_BFLOAT16: return HVD_FLOAT32;
    default: return dtype;
    }
}

void hvdc__widen(void *dst, hvd_dtype wide, const void *src, hvd_dtype dtype, size_t count,
                 double prescale, int divisor) {
    if (wide == HVD_INT64) {
        int64_t *d = dst;
        switch (dtype) {
        case HVD_UINT8: { const uint8_t *s = src; for (size_t i = 0; i < count; i++) d[i] = s[i]; break; }
        case HVD_INT8: { const int8_t *s = src; for (size_t i = 0; i < count; i++) d[i] = s[i]; break; }
        case HVD_INT16: { const int16_t *s = src; for (size_t i = 0; i < count; i++) d[i] = s[i]; break; }
        case HVD_UINT16: { const uint16_t *s = src; for (size_t i = 0; i < count; i++) d[i] = s[i]; break; }
        case HVD_INT32: { const int32_t *s = src; for (size_t i = 0; i < count; i++) d[i] = s[i]; break; }
        default: break;
        }
        if (prescale != 1.0) { /* scaled in the caller's type, as Horovod scales its input */
            int64_t lo, hi;
            hvdc__integer_range(dtype, &lo, &hi);
            for (size_t i = 0; i < count; i++) d[i] = hvdc__scale_integer(d[i], prescale, lo, hi);
        }
    } else if (wide == HVD_FLOAT32) {
        float *d = dst, scale = (float)(prescale / divisor);
        const uint16_t *s = src;
        if (dtype == HVD_BFLOAT16) {
            for (size_t i = 0; i < count; i++) d[i] = hvdc__bf16_to_float(s[i]) * scale;
        } else {
            for (size_t i = 0; i < count; i++) d[i] = hvdc__half_to_float(s[i]) * scale;
        }
    }
}

/* One integer average: the sum divided exactly, or (a postscale) Horovod's one float64 factor
 * postscale / size, truncated and clamped to [lo, hi]. */
static inline int64_t integer_average(int64_t sum, int divisor, int exact, double f, int64_t lo,
                                      int64_t hi) {
    return exact ? sum / divisor : hvdc__scale_integer(sum, f, lo, hi);
}

void hvdc__narrow_average(void *dst, hvd_dtype dtype, const void *src, hvd_dtype wide,
                          size_t count, int divisor, double postscale) {
    if (wide == HVD_INT64) {
        const int64_t *s = src;
        int exact = postscale == 1.0;
        double f = postscale / divisor;
        int64_t lo, hi;
        hvdc__integer_range(dtype, &lo, &hi);
#define NARROW(T) { T *d = dst; for (size_t i = 0; i < count; i++) d[i] = (T)integer_average(s[i], divisor, exact, f, lo, hi); break; }
        switch (dtype) {
        case HVD_UINT8: NARROW(uint8_t)
        case HVD_INT8: NARROW(int8_t)
        case HVD_INT16: NARROW(int16_t)
        case HVD_UINT16: NARROW(uint16_t)
        case HVD_INT32: NARROW(int32_t)
        default: break;
        }
#undef NARROW
    } else if (wide == HVD_FLOAT32) {
        const float *s = src;
        uint16_t *d = dst;
        float scale = (float)postscale; /* the division happened on the way in */
        if (dtype == HVD_BFLOAT16) {
            for (size_t i = 0; i < count; i++) d[i] = hvdc__float_to_bf16(s[i] * scale);
        } else {
            for (size_t i = 0; i < count; i++) d[i] = hvdc__float_to_half(s[i] * scale);
        }
    }
}
