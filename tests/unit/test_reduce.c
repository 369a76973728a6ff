/* Unit test: reduction kernels for every dtype and op against a double-precision reference,
 * including in-place accumulation, odd lengths and the half types' float32 combining. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "base/half.h"
#include "hvdc.h"
#include "collectives/reduce.h"

static double get(const void *buf, size_t i, hvd_dtype t) {
    switch (t) {
    case HVD_UINT8: return ((const uint8_t *)buf)[i];
    case HVD_INT8: return ((const int8_t *)buf)[i];
    case HVD_INT32: return ((const int32_t *)buf)[i];
    case HVD_INT64: return (double)((const int64_t *)buf)[i];
    case HVD_FLOAT16: return hvdc__half_to_float(((const uint16_t *)buf)[i]);
    case HVD_BFLOAT16: return hvdc__bf16_to_float(((const uint16_t *)buf)[i]);
    case HVD_FLOAT32: return ((const float *)buf)[i];
    case HVD_FLOAT64: return ((const double *)buf)[i];
    case HVD_INT16: return ((const int16_t *)buf)[i];
    case HVD_UINT16: return ((const uint16_t *)buf)[i];
    case HVD_BOOL: return ((const uint8_t *)buf)[i];
    }
    return 0;
}

static void set(void *buf, size_t i, hvd_dtype t, double v) {
    switch (t) {
    case HVD_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case HVD_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case HVD_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case HVD_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case HVD_FLOAT16: ((uint16_t *)buf)[i] = hvdc__float_to_half((float)v); break;
    case HVD_BFLOAT16: ((uint16_t *)buf)[i] = hvdc__float_to_bf16((float)v); break;
    case HVD_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case HVD_FLOAT64: ((double *)buf)[i] = v; break;
    case HVD_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case HVD_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case HVD_BOOL: ((uint8_t *)buf)[i] = (uint8_t)(i % 7 == 3 ? 0 : v != 0 ? 1 + i % 2 * 4 : 0); break;
    }
}

int main(void) {
    enum { N = 1037 }; /* odd, longer than a half-type block */
    static unsigned char a[N * 8], b[N * 8], d[N * 8];
    for (int t = 0; t < HVD_DTYPE_COUNT; t++) {
        int is_signed = t != HVD_UINT8 && t != HVD_UINT16 && t != HVD_BOOL;
        for (int op = 0; op < HVD_ADASUM; op++) /* element-wise ops; Adasum: test_adasum */ {
            for (size_t i = 0; i < N; i++) {
                double x = (double)(i % 5) + 1, y = (double)(i % 3) + (is_signed ? -1 : 0);
                set(a, i, (hvd_dtype)t, x);
                set(b, i, (hvd_dtype)t, y);
            }
            for (int in_place = 0; in_place < 2; in_place++) {
                unsigned char *dst = in_place ? a : d;
                unsigned char saved[N * 8];
                memcpy(saved, a, sizeof saved);
                hvdc__reduce(dst, a, b, N, (hvd_dtype)t, (hvd_reduce_op)op);
                int bad = 0;
                for (size_t i = 0; i < N; i++) {
                    double x = get(saved, i, (hvd_dtype)t), y = get(b, i, (hvd_dtype)t), want;
                    if (t == HVD_BOOL) { /* or for sum and max, and for product and min */
                        int and = op == HVD_MIN || op == HVD_PRODUCT;
                        want = and ? (x != 0 && y != 0) : (x != 0 || y != 0);
                    } else switch (op) {
                    case HVD_MIN: want = fmin(x, y); break;
                    case HVD_MAX: want = fmax(x, y); break;
                    case HVD_PRODUCT: want = x * y; break;
                    default: want = x + y; break;
                    }
                    if (get(dst, i, (hvd_dtype)t) != want) bad++;
                }
                CHECK_TRUE(bad == 0, "dtype %d op %d in_place %d: %d wrong", t, op, in_place, bad);
                memcpy(a, saved, sizeof saved);
            }
        }
    }
    /* half sums combine in float32 and round once: 2048 + 1 is not representable in fp16 */
    uint16_t h1 = hvdc__float_to_half(2048.0f), h2 = hvdc__float_to_half(3.0f), out;
    hvdc__reduce(&out, &h1, &h2, 1, HVD_FLOAT16, HVD_SUM);
    CHECK_TRUE(hvdc__half_to_float(out) == 2052.0f, "2048+3 in fp16 rounds to even 2052, got %g",
               hvdc__half_to_float(out));
    float f[3] = {1, 2, 3};
    hvdc__scale(f, 3, HVD_FLOAT32, 0.5);
    CHECK_TRUE(f[0] == 0.5f && f[2] == 1.5f, "scale float32");
    /* integers scale as Horovod scales them: in double, truncated toward zero; beyond the
     * type's range clamped (Horovod leaves that undefined) */
    int8_t i8[5] = {7, -7, 100, -100, 1};
    hvdc__scale(i8, 5, HVD_INT8, 0.5);
    CHECK_TRUE(i8[0] == 3 && i8[1] == -3 && i8[2] == 50 && i8[3] == -50 && i8[4] == 0,
               "int8 * 0.5 truncates toward zero: %d %d %d %d %d", i8[0], i8[1], i8[2], i8[3], i8[4]);
    hvdc__scale(i8, 5, HVD_INT8, 3.0);
    CHECK_TRUE(i8[2] == 127 && i8[3] == -128, "int8 * 3 clamps: %d %d", i8[2], i8[3]);
    uint8_t u8[2] = {200, 3};
    hvdc__scale(u8, 2, HVD_UINT8, -1.0);
    CHECK_TRUE(u8[0] == 0 && u8[1] == 0, "uint8 * -1 clamps to 0: %d %d", u8[0], u8[1]);
    int64_t i64[3] = {INT64_MAX, INT64_MIN, 5};
    hvdc__scale(i64, 3, HVD_INT64, 2.0);
    CHECK_TRUE(i64[0] == INT64_MAX && i64[1] == INT64_MIN && i64[2] == 10, "int64 * 2 clamps");
    int32_t i32[1] = {3};
    hvdc__scale(i32, 1, HVD_INT32, 1.0 / 3.0);
    CHECK_TRUE(i32[0] == 1, "int32 3 * (1/3) = %d (the double product rounds to 1.0)", i32[0]);
    CHECK_TRUE(hvdc__scale_integer(5, NAN, -10, 10) == 0, "NaN scales to 0");
    uint8_t t5 = 5, f0 = 0, bo;
    hvdc__reduce(&bo, &t5, &t5, 1, HVD_BOOL, HVD_SUM);
    CHECK_TRUE(bo == 1, "bool or of two non-zero bytes is 1, not %d", bo);
    hvdc__fill_identity(&bo, 1, HVD_BOOL, HVD_PRODUCT);
    CHECK_TRUE(bo == 1, "bool and's identity is 1");
    hvdc__fill_identity(&bo, 1, HVD_BOOL, HVD_MAX);
    CHECK_TRUE(bo == 0, "bool or's identity is 0");
    hvdc__reduce(&bo, &t5, &f0, 1, HVD_BOOL, HVD_MIN);
    CHECK_TRUE(bo == 0, "bool and of 5 and 0 is 0");
    int16_t s16[2] = {INT16_MIN, -9}, one16[2] = {-1, 2};
    hvdc__reduce(s16, s16, one16, 2, HVD_INT16, HVD_SUM);
    CHECK_TRUE(s16[0] == INT16_MAX && s16[1] == -7, "int16 sums wrap around");
    uint16_t u16[2] = {60000, 7};
    hvdc__divide_integers(u16, 2, HVD_UINT16, 4);
    CHECK_TRUE(u16[0] == 15000 && u16[1] == 1, "uint16 average truncates");
    int32_t v[3] = {7, -7, 8};
    hvdc__divide_integers(v, 3, HVD_INT32, 2);
    CHECK_TRUE(v[0] == 3 && v[1] == -3 && v[2] == 4, "integer average truncates toward zero");
    /* floating MIN/MAX propagate NaN whichever side it is on, and keep a's payload when both
     * are NaN; every other input behaves as before (fmin/fmax would drop the NaN) */
    uint32_t bits_a = 0x7fc00001u, bits_b = 0x7fc00002u;
    float nan_a, nan_b, one = 1.0f, got;
    memcpy(&nan_a, &bits_a, 4);
    memcpy(&nan_b, &bits_b, 4);
    for (int op = HVD_MIN; op <= HVD_MAX; op++) {
        hvdc__reduce(&got, &one, &nan_b, 1, HVD_FLOAT32, (hvd_reduce_op)op);
        CHECK_TRUE(isnan(got), "op %d: 1 vs NaN gives NaN, got %g", op, got);
        hvdc__reduce(&got, &nan_a, &one, 1, HVD_FLOAT32, (hvd_reduce_op)op);
        CHECK_TRUE(isnan(got), "op %d: NaN vs 1 gives NaN, got %g", op, got);
        hvdc__reduce(&got, &nan_a, &nan_b, 1, HVD_FLOAT32, (hvd_reduce_op)op);
        uint32_t bits;
        memcpy(&bits, &got, 4);
        CHECK_TRUE(bits == bits_a, "op %d: two NaNs give the first one's bits, got 0x%08x", op, bits);
        double dn = NAN, d1 = 2.0, dg;
        hvdc__reduce(&dg, &d1, &dn, 1, HVD_FLOAT64, (hvd_reduce_op)op);
        CHECK_TRUE(isnan(dg), "float64 op %d: 2 vs NaN gives NaN", op);
        uint16_t hn = hvdc__float_to_half(NAN), h3 = hvdc__float_to_half(3.0f), hg;
        hvdc__reduce(&hg, &h3, &hn, 1, HVD_FLOAT16, (hvd_reduce_op)op);
        CHECK_TRUE(isnan(hvdc__half_to_float(hg)), "float16 op %d: 3 vs NaN gives NaN", op);
    }
    return check_verdict("reduction kernels");
}
