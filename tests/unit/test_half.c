/* Unit test: float16/bfloat16 conversions against exhaustive and independent references. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "base/half.h"

/* Reference binary16 -> double from the definition (sign, exponent, mantissa). */
static double half_reference(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return sign ? -v : v;
}

int main(void) {
    /* every half value widens exactly */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hvdc__half_to_float((uint16_t)h);
        double ref = half_reference((uint16_t)h);
        if (isnan(ref) ? !isnan(f) : (double)f != ref || !!signbit(f) != !!signbit(ref)) bad++;
        /* and narrows back to itself (NaNs stay NaN) */
        uint16_t back = hvdc__float_to_half(f);
        if (isnan(ref) ? ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0) : back != h) bad++;
    }
    CHECK_TRUE(bad == 0, "%d half values did not round-trip", bad);

    /* rounding to nearest, ties to even, between neighbours 1 and 1+2^-10 */
    CHECK_TRUE(hvdc__float_to_half(1.0f + 0x1p-11f) == 0x3c00, "tie rounds to even (down)");
    CHECK_TRUE(hvdc__float_to_half(1.0f + 3 * 0x1p-11f) == 0x3c02, "tie rounds to even (up)");
    CHECK_TRUE(hvdc__float_to_half(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01, "above tie rounds up");
    CHECK_TRUE(hvdc__float_to_half(65504.0f) == 0x7bff, "max half");
    CHECK_TRUE(hvdc__float_to_half(65519.0f) == 0x7bff, "below overflow threshold rounds to max");
    CHECK_TRUE(hvdc__float_to_half(65520.0f) == 0x7c00, "overflow becomes inf");
    CHECK_TRUE(hvdc__float_to_half(-INFINITY) == 0xfc00, "-inf");
    CHECK_TRUE(hvdc__float_to_half(0x1p-24f) == 0x0001, "smallest subnormal");
    CHECK_TRUE(hvdc__float_to_half(0x1p-25f) == 0x0000, "half of smallest subnormal ties to zero");
    CHECK_TRUE(hvdc__float_to_half(0x1.8p-25f) == 0x0001, "above the tie rounds up");
    CHECK_TRUE(hvdc__float_to_half(-0.0f) == 0x8000, "negative zero");
    CHECK_TRUE(isnan(hvdc__half_to_float(hvdc__float_to_half(NAN))), "NaN stays NaN");

    /* bfloat16: exhaustive round trip, then rounding */
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hvdc__bf16_to_float((uint16_t)h);
        uint16_t back = hvdc__float_to_bf16(f);
        if (isnan(f) ? !isnan(hvdc__bf16_to_float(back)) : back != h) bad++;
    }
    CHECK_TRUE(bad == 0, "%d bfloat16 values did not round-trip", bad);
    CHECK_TRUE(hvdc__float_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie to even (down)");
    CHECK_TRUE(hvdc__float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "bf16 tie to even (up)");
    CHECK_TRUE(hvdc__float_to_bf16(3.0e38f * 10.0f) == 0x7f80, "bf16 inf");
    CHECK_TRUE(isnan(hvdc__bf16_to_float(hvdc__float_to_bf16(NAN))), "bf16 NaN stays NaN");
    return check_verdict("half conversions");
}
