/*
 * half.h - float16 (IEEE binary16) and bfloat16 conversions to and from float32.
 * defines: hvdc__half_to_float, hvdc__float_to_half, hvdc__bf16_to_float, hvdc__float_to_bf16
 * Narrowing rounds to nearest, ties to even; NaN stays NaN (quiet), overflow becomes infinity.
 * Pure functions; any thread.
 */
#ifndef HVDC_HALF_H
#define HVDC_HALF_H

#include <stdint.h>
#include <string.h>

static inline float hvdc__bits_to_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t hvdc__float_to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static inline float hvdc__bf16_to_float(uint16_t h) { return hvdc__bits_to_float((uint32_t)h << 16); }

static inline uint16_t hvdc__float_to_bf16(float f) {
    uint32_t bits = hvdc__float_to_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u); /* NaN */
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u); /* ties to even */
    return (uint16_t)((bits + rounding) >> 16);
}

float hvdc__half_to_float(uint16_t h);
uint16_t hvdc__float_to_half(float f);

#endif
