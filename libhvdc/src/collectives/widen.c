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

void hvdc__narrow_average(void *dst, hvd_dtype dtype, const void *src, hvd_dtype wide,
                          size_t count, int divisor, double postscale) {
    if (wide == HVD_INT64 && postscale != 1.0) { /* Horovod: sum * (postscale / size), truncated */
        int64_t lo, hi;
        hvdc__integer_range(dtype, &lo, &hi);
        const int64_t *s = src;
        double f = postscale / divisor;
        switch (dtype) {
        case HVD_UINT8: { uint8_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (uint8_t)hvdc__scale_integer(s[i], f, lo, hi); break; }
        case HVD_INT8: { int8_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (int8_t)hvdc__scale_integer(s[i], f, lo, hi); break; }
        case HVD_INT16: { int16_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (int16_t)hvdc__scale_integer(s[i], f, lo, hi); break; }
        case HVD_UINT16: { uint16_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (uint16_t)hvdc__scale_integer(s[i], f, lo, hi); break; }
        case HVD_INT32: { int32_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (int32_t)hvdc__scale_integer(s[i], f, lo, hi); break; }
        default: break;
        }
    } else if (wide == HVD_INT64) {
        const int64_t *s = src;
        switch (dtype) {
        case HVD_UINT8: { uint8_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (uint8_t)(s[i] / divisor); break; }
        case HVD_INT8: { int8_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (int8_t)(s[i] / divisor); break; }
        case HVD_INT16: { int16_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (int16_t)(s[i] / divisor); break; }
        case HVD_UINT16: { uint16_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (uint16_t)(s[i] / divisor); break; }
        case HVD_INT32: { int32_t *d = dst; for (size_t i = 0; i < count; i++) d[i] = (int32_t)(s[i] / divisor); break; }
        default: break;
        }
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
