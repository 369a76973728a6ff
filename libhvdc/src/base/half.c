/*
 * half.c - IEEE binary16 <-> float32 by bit manipulation (no F16C needed, so the portable build
 * runs anywhere). Layouts: binary16 = 1 sign, 5 exponent (bias 15), 10 mantissa bits;
 * binary32 = 1 sign, 8 exponent (bias 127), 23 mantissa bits. Any thread.
 */
#include "base/half.h"

float hvdc__half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return hvdc__bits_to_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        /* zero or subnormal: mantissa * 2^-24, exact in float32 */
        float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    return hvdc__bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t hvdc__float_to_half(float f) {
    uint32_t bits = hvdc__float_to_bits(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu)); /* NaN */
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (magnitude < 0x38800000u) {
        /* below the smallest normal half (2^-14): subnormal or zero. Adding 0.5 makes the FPU
         * round the value to a multiple of 2^-24 with ties to even, then the low bits are it. */
        float shifted = hvdc__bits_to_float(magnitude) + 0.5f;
        return (uint16_t)(sign | (uint16_t)(hvdc__float_to_bits(shifted) - 0x3f000000u));
    }
    /* normal: rebias the exponent, round the 13 dropped bits to nearest even */
    uint32_t rounding = 0xfffu + ((magnitude >> 13) & 1u);
    magnitude += rounding - (112u << 23);
    return (uint16_t)(sign | (magnitude >> 13));
}
