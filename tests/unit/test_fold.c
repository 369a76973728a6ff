/* Unit test: hvdc__fold combines its inputs left to right, in the order given, bit for bit as
 * a chain of pairwise hvdc__reduce calls would (the reference), for every dtype and op, with
 * counts around its internal chunk size, for n = 1..5, and with dst being any one of the inputs
 * (an in-place all-reduce). Order-sensitive cases show the order is really the given one. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/half.h"
#include "collectives/fold.h"
#include "collectives/reduce.h"
#include "hvdc.h"

enum { MAX_IN = 5, MAX_COUNT = 9000 }; /* past two 8 KiB chunks of float32 */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Values of different magnitudes (and signs), so that sums depend on their order. */
static void fill(void *buf, size_t count, hvd_dtype t, uint64_t seed) {
    for (size_t i = 0; i < count; i++) {
        uint64_t h = mix(seed * 1000003u + i);
        double v = (double)(h % 1000) / 7.0 * ldexp(1.0, (int)(h >> 40) % 24 - 12);
        if (h >> 63) v = -v;
        switch (t) {
        case HVD_UINT8: ((uint8_t *)buf)[i] = (uint8_t)h; break;
        case HVD_INT8: ((int8_t *)buf)[i] = (int8_t)h; break;
        case HVD_INT32: ((int32_t *)buf)[i] = (int32_t)h; break;
        case HVD_INT64: ((int64_t *)buf)[i] = (int64_t)h; break;
        case HVD_FLOAT16: ((uint16_t *)buf)[i] = hvdc__float_to_half((float)(v / 64)); break;
        case HVD_BFLOAT16: ((uint16_t *)buf)[i] = hvdc__float_to_bf16((float)v); break;
        case HVD_FLOAT32: ((float *)buf)[i] = (float)v; break;
        case HVD_FLOAT64: ((double *)buf)[i] = v; break;
        case HVD_INT16: ((int16_t *)buf)[i] = (int16_t)h; break;
        case HVD_UINT16: ((uint16_t *)buf)[i] = (uint16_t)h; break;
        case HVD_BOOL: ((uint8_t *)buf)[i] = (uint8_t)(h % 5 != 0); break;
        }
    }
}

int main(void) {
    static const size_t counts[] = {1, 7, 2047, 2048, 2049, 4096, MAX_COUNT};
    unsigned char *in[MAX_IN], *dst = malloc(MAX_COUNT * 8), *ref = malloc(MAX_COUNT * 8);
    unsigned char *saved = malloc(MAX_COUNT * 8);
    for (int q = 0; q < MAX_IN; q++) in[q] = malloc(MAX_COUNT * 8);
    for (int t = 0; t < HVD_DTYPE_COUNT; t++) {
        size_t elem = hvd_dtype_size((hvd_dtype)t);
        for (int op = 0; op < HVD_ADASUM; op++) /* element-wise ops; Adasum: test_adasum */
            for (int n = 1; n <= MAX_IN; n++)
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                    size_t count = counts[c];
                    for (int q = 0; q < n; q++) fill(in[q], count, (hvd_dtype)t, (uint64_t)(q + 1));
                    /* the reference: ((in0 op in1) op in2) ..., one pair at a time */
                    memcpy(ref, in[0], count * elem);
                    for (int q = 1; q < n; q++) hvdc__reduce(ref, ref, in[q], count, (hvd_dtype)t, (hvd_reduce_op)op);
                    const void *ins[MAX_IN];
                    for (int q = 0; q < n; q++) ins[q] = in[q];
                    memset(dst, 0x5a, count * elem);
                    hvdc__fold(dst, ins, n, count, (hvd_dtype)t, (hvd_reduce_op)op);
                    CHECK_TRUE(memcmp(dst, ref, count * elem) == 0, "dtype %d op %d n %d count %zu",
                               t, op, n, count);
                    for (int q = 0; q < n; q++) { /* in place: dst is input q */
                        memcpy(saved, in[q], count * elem);
                        hvdc__fold(in[q], ins, n, count, (hvd_dtype)t, (hvd_reduce_op)op);
                        CHECK_TRUE(memcmp(in[q], ref, count * elem) == 0,
                                   "dtype %d op %d n %d count %zu: dst = input %d", t, op, n, count, q);
                        memcpy(in[q], saved, count * elem);
                    }
                }
    }
    /* the order is the given one: (1e8 + 1) - 1e8 = 0 in float32, (1e8 - 1e8) + 1 = 1 */
    float a = 1e8f, b = 1.0f, c = -1e8f, out;
    const void *abc[3] = {&a, &b, &c}, *acb[3] = {&a, &c, &b};
    hvdc__fold(&out, abc, 3, 1, HVD_FLOAT32, HVD_SUM);
    CHECK_TRUE(out == 0.0f, "(1e8 + 1) - 1e8 in float32 is 0, got %g", out);
    hvdc__fold(&out, acb, 3, 1, HVD_FLOAT32, HVD_SUM);
    CHECK_TRUE(out == 1.0f, "(1e8 - 1e8) + 1 is 1, got %g", out);
    /* half types round after every op: 2048 + 1 + 1 stays 2048 in float16, 2048 + 2 = 2050 */
    uint16_t h[3] = {hvdc__float_to_half(2048.0f), hvdc__float_to_half(1.0f), hvdc__float_to_half(1.0f)}, ho;
    const void *hs[3] = {&h[0], &h[1], &h[2]}, *hs2[3] = {&h[1], &h[2], &h[0]};
    hvdc__fold(&ho, hs, 3, 1, HVD_FLOAT16, HVD_SUM);
    CHECK_TRUE(hvdc__half_to_float(ho) == 2048.0f, "(2048 + 1) + 1 in float16: got %g", hvdc__half_to_float(ho));
    hvdc__fold(&ho, hs2, 3, 1, HVD_FLOAT16, HVD_SUM);
    CHECK_TRUE(hvdc__half_to_float(ho) == 2050.0f, "(1 + 1) + 2048 in float16: got %g", hvdc__half_to_float(ho));
    for (int q = 0; q < MAX_IN; q++) free(in[q]);
    free(dst);
    free(ref);
    free(saved);
    return check_verdict("fold in the given order");
}
