/*
 * mpitest.c - shared helpers for the multi-rank tests: verdict lines, float16/bfloat16
 * reference conversions, deterministic test data and locally computed references.
 * See mpitest.h for the contract. Any thread may call these; only mt_fail and the check
 * macros are meant to be called from several threads at once.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include "mpitest.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Print at most this many failure messages per group (all are counted). */
#define MT_PRINT_LIMIT 10

/* ---- verdicts ------------------------------------------------------------------------------ */

void mt_init(mt_ctx *t, int rank, int size) {
    t->rank = rank;
    t->size = size;
    atomic_init(&t->failures, 0);
    atomic_init(&t->group_fails, 0);
    t->remote_failures = 0;
    snprintf(t->group, sizeof t->group, "(no group)");
}

int mt_start(mt_ctx *t) {
    mt_init(t, 0, 1);
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    int rank = 0, size = 1;
    hvd_rank(&rank);
    hvd_size(&size);
    mt_init(t, rank, size);
    return 0;
}

void mt_begin(mt_ctx *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->group, sizeof t->group, fmt, ap);
    va_end(ap);
    atomic_store(&t->group_fails, 0);
}

int mt_end(mt_ctx *t) {
    int fails = atomic_load(&t->group_fails);
    if (fails == 0) {
        if (t->rank == 0) printf("%s: OK\n", t->group);
    } else {
        printf("[rank %d] %s: FAIL (%d failed checks)\n", t->rank, t->group, fails);
    }
    fflush(stdout);
    return fails == 0;
}

void mt_fail(mt_ctx *t, const char *file, int line, const char *fmt, ...) {
    int n = atomic_fetch_add(&t->group_fails, 1);
    atomic_fetch_add(&t->failures, 1);
    if (n >= MT_PRINT_LIMIT) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("[rank %d] %s: %s:%d: %s\n", t->rank, t->group, file, line, msg);
    if (n + 1 == MT_PRINT_LIMIT) printf("[rank %d] %s: (further failures not printed)\n",
                                        t->rank, t->group);
    fflush(stdout);
}

int mt_expect_(mt_ctx *t, hvd_status got, hvd_status expected, const char *what,
               const char *file, int line) {
    if (got == expected) return 1;
    mt_fail(t, file, line, "%s returned %d (%s), expected %d (%s); hvd_last_error: \"%s\"", what,
            (int)got, hvd_status_string(got), (int)expected, hvd_status_string(expected),
            hvd_last_error());
    return 0;
}

void mt_combine(mt_ctx *t) {
    static int round = 0;
    char name[64];
    snprintf(name, sizeof name, "mpitest.verdict.%d", round++);
    int32_t mine = atomic_load(&t->failures);
    int32_t all = -1;
    hvd_status s = hvd_allreduce(name, &mine, &all, 1, HVD_INT32, HVD_SUM);
    if (s != HVD_OK) {
        printf("[rank %d] combining verdicts failed: %s: %s\n", t->rank, hvd_status_string(s),
               hvd_last_error());
        atomic_fetch_add(&t->failures, 1);
        t->remote_failures = -1;
        return;
    }
    t->remote_failures = all - mine;
}

int mt_exit_code(mt_ctx *t) {
    int mine = atomic_load(&t->failures);
    if (mine > 0) {
        printf("[rank %d] FAIL (%d failed checks on this rank)\n", t->rank, mine);
        fflush(stdout);
        return 1;
    }
    if (t->remote_failures > 0) {
        if (t->rank == 0) printf("FAIL (%d failed checks on other ranks)\n", t->remote_failures);
        fflush(stdout);
        return 1;
    }
    if (t->rank == 0) printf("PASS\n");
    fflush(stdout);
    return 0;
}

double mt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mt_arg_double(int argc, char **argv, const char *flag, double dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0) return atof(argv[i + 1]);
    return dflt;
}

/* ---- float16 / bfloat16 --------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
uint16_t mt_f16_from_f32(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0)); /* inf / nan */
    int e = (int)exp - 127 + 15;                                           /* f16 exponent */
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);                      /* overflow */
    uint32_t full;  /* significand with the implicit bit: 24 bits */
    int shift;      /* how many low bits to drop */
    if (e <= 0) {   /* subnormal (or zero) in f16 */
        if (e < -10) return sign; /* below half the smallest subnormal: rounds to zero */
        full = man | 0x800000u;
        shift = 14 - e; /* 13 for the normal case, plus 1 - e */
        e = 0;
    } else {
        full = man | 0x800000u;
        shift = 13;
    }
    uint32_t kept = full >> shift;
    uint32_t rest = full & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1u))) kept++;
    /* kept holds the implicit bit for normals; adding the exponent field carries correctly
     * from mantissa overflow into the exponent (and from subnormal into the smallest normal). */
    uint32_t h;
    if (e == 0) h = kept;                                 /* subnormal: no implicit bit */
    else h = ((uint32_t)e << 10) + (kept - 0x400u);       /* drop implicit bit, add exponent */
    if (h >= 0x7c00u) h = 0x7c00u;                        /* rounded up to infinity */
    return (uint16_t)(sign | h);
}

float mt_f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

/* bfloat16: the top 16 bits of a float32, rounded to nearest-even. */
uint16_t mt_bf16_from_f32(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return (uint16_t)((u >> 16) | 0x40);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (uint16_t)(u >> 16);
}

float mt_f32_from_bf16(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

/* ---- dtypes ------------------------------------------------------------------------------- */

const hvd_dtype mt_all_dtypes[HVD_DTYPE_COUNT] = {HVD_UINT8,   HVD_INT8,    HVD_INT32,
                                                  HVD_INT64,   HVD_FLOAT16, HVD_BFLOAT16,
                                                  HVD_FLOAT32, HVD_FLOAT64, HVD_INT16,
                                                  HVD_UINT16,  HVD_BOOL};
const hvd_reduce_op mt_all_ops[HVD_REDUCE_OP_COUNT] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX,
                                                       HVD_PRODUCT, HVD_ADASUM};

size_t mt_dtype_size(hvd_dtype dt) {
    switch (dt) {
    case HVD_UINT8: case HVD_INT8: case HVD_BOOL: return 1;
    case HVD_FLOAT16: case HVD_BFLOAT16: case HVD_INT16: case HVD_UINT16: return 2;
    case HVD_INT32: case HVD_FLOAT32: return 4;
    case HVD_INT64: case HVD_FLOAT64: return 8;
    }
    return 0;
}

const char *mt_dtype_name(hvd_dtype dt) {
    switch (dt) {
    case HVD_UINT8: return "uint8";
    case HVD_INT8: return "int8";
    case HVD_INT32: return "int32";
    case HVD_INT64: return "int64";
    case HVD_FLOAT16: return "float16";
    case HVD_BFLOAT16: return "bfloat16";
    case HVD_FLOAT32: return "float32";
    case HVD_FLOAT64: return "float64";
    case HVD_INT16: return "int16";
    case HVD_UINT16: return "uint16";
    case HVD_BOOL: return "bool";
    }
    return "?";
}

const char *mt_op_name(hvd_reduce_op op) {
    switch (op) {
    case HVD_SUM: return "sum";
    case HVD_AVERAGE: return "average";
    case HVD_MIN: return "min";
    case HVD_MAX: return "max";
    case HVD_PRODUCT: return "product";
    case HVD_ADASUM: return "adasum";
    }
    return "?";
}

int mt_op_defined(hvd_dtype dt, hvd_reduce_op op) {
    return !(dt == HVD_BOOL && op == HVD_AVERAGE) && op != HVD_ADASUM; /* Adasum: test_adasum */
}

hvd_reduce_op mt_defined_op(hvd_dtype dt, hvd_reduce_op op) {
    return mt_op_defined(dt, op) ? op : HVD_SUM;
}

int mt_is_float(hvd_dtype dt) {
    return dt == HVD_FLOAT16 || dt == HVD_BFLOAT16 || dt == HVD_FLOAT32 || dt == HVD_FLOAT64;
}

int64_t mt_get_i64(const void *buf, hvd_dtype dt, size_t i) {
    switch (dt) {
    case HVD_UINT8: return ((const uint8_t *)buf)[i];
    case HVD_INT8: return ((const int8_t *)buf)[i];
    case HVD_INT32: return ((const int32_t *)buf)[i];
    case HVD_INT64: return ((const int64_t *)buf)[i];
    case HVD_INT16: return ((const int16_t *)buf)[i];
    case HVD_UINT16: return ((const uint16_t *)buf)[i];
    case HVD_BOOL: return ((const uint8_t *)buf)[i];
    default: return (int64_t)mt_get_f64(buf, dt, i);
    }
}

void mt_set_i64(void *buf, hvd_dtype dt, size_t i, int64_t v) {
    switch (dt) {
    case HVD_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case HVD_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case HVD_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case HVD_INT64: ((int64_t *)buf)[i] = v; break;
    case HVD_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case HVD_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case HVD_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    default: mt_set_f64(buf, dt, i, (double)v); break;
    }
}

double mt_get_f64(const void *buf, hvd_dtype dt, size_t i) {
    switch (dt) {
    case HVD_FLOAT16: return mt_f32_from_f16(((const uint16_t *)buf)[i]);
    case HVD_BFLOAT16: return mt_f32_from_bf16(((const uint16_t *)buf)[i]);
    case HVD_FLOAT32: return ((const float *)buf)[i];
    case HVD_FLOAT64: return ((const double *)buf)[i];
    default: return (double)mt_get_i64(buf, dt, i);
    }
}

void mt_set_f64(void *buf, hvd_dtype dt, size_t i, double v) {
    switch (dt) {
    case HVD_FLOAT16: ((uint16_t *)buf)[i] = mt_f16_from_f32((float)v); break;
    case HVD_BFLOAT16: ((uint16_t *)buf)[i] = mt_bf16_from_f32((float)v); break;
    case HVD_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case HVD_FLOAT64: ((double *)buf)[i] = v; break;
    default: mt_set_i64(buf, dt, i, (int64_t)v); break;
    }
}

void mt_set_value(void *buf, hvd_dtype dt, size_t i, int64_t v) {
    if (mt_is_float(dt)) mt_set_f64(buf, dt, i, (double)v);
    else mt_set_i64(buf, dt, i, v);
}

/* ---- test data ------------------------------------------------------------------------------ */

uint64_t mt_hash(uint64_t a, uint64_t b, uint64_t c) {
    /* splitmix64 finalizer over a simple mix of the three words */
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
                 (c + 0x1234567ull) * 0x94d049bb133111ebull;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Uniform-ish integer in [lo, hi] from h. */
static int64_t in_range(uint64_t h, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(h % span);
}

/*
 * Ranges, chosen for up to MT_MAX_RANKS = 8 ranks:
 *   sum/average: |sum| stays below the type's limit and below the float's exact-integer
 *     limit (float16 2048, bfloat16 256, float32 2^24, float64 2^53), also after the tests'
 *     prescale 0.5 / postscale 4 (sum * 2);
 *   min/max and data that only moves: the type's whole (exact) range;
 *   product: values from {-3..3} on wide types and int16 (3^8 = 6561), {0..3} on uint16,
 *     {-2,-1,1,2} on 16-bit floats (2^8 = 256), {-1,1,2} on int8 and {1,2} on uint8 with 2
 *     only on ranks < 6 (2^6 = 64);
 *   bool: 0 or 1 each with probability 1/2, for product (and) 1 with probability 7/8, so
 *     every op's result holds both values.
 */
int64_t mt_value(hvd_dtype dt, hvd_reduce_op op, int rank, size_t i, uint64_t salt) {
    uint64_t h = mt_hash((uint64_t)rank, (uint64_t)i, salt);
    switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE:
        switch (dt) {
        case HVD_UINT8: return in_range(h, 0, 31);
        case HVD_INT8: return in_range(h, -15, 15);
        case HVD_FLOAT16: return in_range(h, -255, 255);
        case HVD_BFLOAT16: return in_range(h, -31, 31);
        case HVD_INT32: return in_range(h, -(1 << 27), 1 << 27);
        case HVD_INT64: return in_range(h, -(INT64_C(1) << 59), INT64_C(1) << 59);
        case HVD_FLOAT32: return in_range(h, -(1 << 20), 1 << 20);
        case HVD_FLOAT64: return in_range(h, -(INT64_C(1) << 49), INT64_C(1) << 49);
        case HVD_INT16: return in_range(h, -4000, 4000);
        case HVD_UINT16: return in_range(h, 0, 8000);
        case HVD_BOOL: return (int64_t)((h >> 7) & 1);
        }
        break;
    case HVD_PRODUCT: {
        int two_ok = rank < 6;
        switch (dt) {
        case HVD_BOOL: return (h >> 7) % 8 != 0; /* mostly true, so and is not always false */
        case HVD_UINT16: return (h >> 8) % 64 == 0 ? 0 : 1 + (int64_t)(h % 3);
        case HVD_UINT8: return (two_ok && (h & 1)) ? 2 : 1;
        case HVD_INT8: {
            int64_t v = in_range(h, 0, 2);
            return v == 0 ? -1 : (v == 2 && !two_ok) ? 1 : v;
        }
        case HVD_FLOAT16:
        case HVD_BFLOAT16: {
            static const int64_t vals[4] = {-2, -1, 1, 2};
            return vals[h & 3];
        }
        default: {
            if ((h >> 8) % 64 == 0) return 0;
            static const int64_t vals[6] = {-3, -2, -1, 1, 2, 3};
            return vals[h % 6];
        }
        }
    }
    case HVD_MIN:
    case HVD_MAX:
    default:
        switch (dt) {
        case HVD_UINT8: return in_range(h, 0, 255);
        case HVD_INT8: return in_range(h, -128, 127);
        case HVD_FLOAT16: return in_range(h, -2048, 2048);
        case HVD_BFLOAT16: return in_range(h, -256, 256);
        case HVD_INT32: return (int32_t)(uint32_t)h;
        case HVD_INT64: return (int64_t)h;
        case HVD_INT16: return in_range(h, INT16_MIN, INT16_MAX);
        case HVD_UINT16: return in_range(h, 0, UINT16_MAX);
        case HVD_BOOL: return (int64_t)((h >> 7) & 1);
        case HVD_FLOAT32: return in_range(h, -(1 << 24), 1 << 24);
        case HVD_FLOAT64: return in_range(h, -(INT64_C(1) << 53), INT64_C(1) << 53);
        }
        break;
    }
    return 0;
}

void mt_fill(void *buf, hvd_dtype dt, hvd_reduce_op op, int rank, size_t first, size_t n,
             uint64_t salt) {
    for (size_t i = 0; i < n; i++) mt_set_value(buf, dt, i, mt_value(dt, op, rank, first + i, salt));
}

/* v * f as libhvdc scales integers: in double, truncated toward zero, clamped to dt's range
 * (the test values stay far inside it). */
static int64_t int_scaled(hvd_dtype dt, int64_t v, double f) {
    if (f == 1.0) return v;
    double x = trunc((double)v * f), lo, hi;
    switch (dt) {
    case HVD_UINT8: lo = 0, hi = 255; break;
    case HVD_INT8: lo = -128, hi = 127; break;
    case HVD_INT16: lo = -32768, hi = 32767; break;
    case HVD_UINT16: lo = 0, hi = 65535; break;
    case HVD_INT32: lo = -2147483648.0, hi = 2147483647.0; break;
    default: return (int64_t)x;
    }
    return (int64_t)(x < lo ? lo : x > hi ? hi : x);
}

void mt_check_recovers(mt_ctx *t, const char *name) {
    int32_t buf[5];
    for (int i = 0; i < 5; i++) buf[i] = (t->rank + 1) * (i + 1);
    if (!MT_EXPECT(t, hvd_allreduce(name, buf, buf, 5, HVD_INT32, HVD_SUM), HVD_OK)) return;
    int32_t ranks_sum = t->size * (t->size + 1) / 2;
    for (int i = 0; i < 5; i++)
        MT_CHECK(t, buf[i] == ranks_sum * (i + 1), "%s: element %d is %d, expected %d", name, i,
                 buf[i], ranks_sum * (i + 1));
}

void mt_reduce_ref(void *ref, hvd_dtype dt, hvd_reduce_op op, int size, size_t first,
                   size_t n, uint64_t salt, double prescale, double postscale) {
    for (size_t i = 0; i < n; i++) {
        if (!mt_is_float(dt)) {
            /* Horovod's integer scaling: each input * prescale and the result * postscale (for
             * an average: * postscale / size, one factor) in double, truncated */
            int64_t acc = int_scaled(dt, mt_value(dt, op, 0, first + i, salt), prescale);
            for (int r = 1; r < size; r++) {
                int64_t v = int_scaled(dt, mt_value(dt, op, r, first + i, salt), prescale);
                switch (op) {
                case HVD_SUM: case HVD_AVERAGE: acc = dt == HVD_BOOL ? (acc | v) : acc + v; break;
                case HVD_MIN: acc = v < acc ? v : acc; break;
                case HVD_MAX: acc = v > acc ? v : acc; break;
                case HVD_PRODUCT: acc *= v; break; /* on bool's 0 and 1: and */
                case HVD_ADASUM: break; /* not element-wise: test_adasum has its reference */
                }
            }
            if (op == HVD_AVERAGE && postscale == 1.0) acc /= size; /* C division truncates toward zero */
            else if (op == HVD_AVERAGE) acc = int_scaled(dt, acc, postscale / size);
            else acc = int_scaled(dt, acc, postscale);
            mt_set_i64(ref, dt, i, acc);
        } else {
            double acc = prescale * (double)mt_value(dt, op, 0, first + i, salt);
            for (int r = 1; r < size; r++) {
                double v = prescale * (double)mt_value(dt, op, r, first + i, salt);
                switch (op) {
                case HVD_SUM: case HVD_AVERAGE: acc += v; break;
                case HVD_MIN: acc = v < acc ? v : acc; break;
                case HVD_MAX: acc = v > acc ? v : acc; break;
                case HVD_PRODUCT: acc *= v; break;
                case HVD_ADASUM: break;
                }
            }
            if (op == HVD_AVERAGE) acc /= size;
            acc *= postscale;
            mt_set_f64(ref, dt, i, acc);
        }
    }
}

/* Tolerance for approximate comparisons: a few units in the last place of max(|ref|, 1). */
static double tolerance(hvd_dtype dt, double ref) {
    double mag = fabs(ref) > 1.0 ? fabs(ref) : 1.0;
    switch (dt) {
    case HVD_FLOAT16: return 4.0 * mag * 0x1p-10;
    case HVD_BFLOAT16: return 4.0 * mag * 0x1p-7;
    case HVD_FLOAT32: return 4.0 * mag * 0x1p-23;
    case HVD_FLOAT64: return 4.0 * mag * 0x1p-52;
    default: return 0.0;
    }
}

size_t mt_compare(mt_ctx *t, const void *got, const void *ref, hvd_dtype dt, size_t n,
                  int approximate, const char *what) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int ok;
        if (!mt_is_float(dt)) {
            ok = mt_get_i64(got, dt, i) == mt_get_i64(ref, dt, i);
        } else {
            double g = mt_get_f64(got, dt, i), r = mt_get_f64(ref, dt, i);
            ok = approximate ? fabs(g - r) <= tolerance(dt, r) : g == r;
        }
        if (ok) continue;
        if (bad < 3) {
            if (mt_is_float(dt))
                mt_fail(t, __FILE__, __LINE__, "%s: element %zu of %zu: got %.17g, expected %.17g",
                        what, i, n, mt_get_f64(got, dt, i), mt_get_f64(ref, dt, i));
            else
                mt_fail(t, __FILE__, __LINE__,
                        "%s: element %zu of %zu: got %" PRId64 ", expected %" PRId64, what, i, n,
                        mt_get_i64(got, dt, i), mt_get_i64(ref, dt, i));
        }
        bad++;
    }
    if (bad > 3)
        mt_fail(t, __FILE__, __LINE__, "%s: %zu of %zu elements wrong in all", what, bad, n);
    return bad;
}
