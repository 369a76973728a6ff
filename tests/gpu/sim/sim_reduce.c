/*
 * sim_reduce.c - the simulated NCCL's arithmetic (see sim.h): one rank's data folded into an
 * accumulator, element by element, as NCCL's reduction kernels compute it: integers wrap in
 * their own width, float32/float64 in their own precision, float16/bfloat16 through float32
 * and rounded back at every step; ncclAvg is the sum divided by the ranks afterwards
 * (truncating for integers).
 * The stream threads (sim_nccl.c).
 */
#include <stdint.h>

#include "base/half.h"
#include "sim.h"

size_t sim_dtype_size(ncclDataType_t dt) {
    switch (dt) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* Integers wrap as NCCL's do: the arithmetic runs in the unsigned type of the same width. */
#define FOLD_INT(T, U)                                                                       \
    do {                                                                                     \
        T *a = acc;                                                                          \
        const T *b = x;                                                                      \
        for (size_t i = 0; i < n; i++)                                                       \
            a[i] = op == ncclProd ? (T)((U)a[i] * (U)b[i])                                   \
                   : op == ncclMax ? (a[i] > b[i] ? a[i] : b[i])                             \
                   : op == ncclMin ? (a[i] < b[i] ? a[i] : b[i])                             \
                                   : (T)((U)a[i] + (U)b[i]);                                 \
    } while (0)

#define FOLD_FLOAT(T)                                                                        \
    do {                                                                                     \
        T *a = acc;                                                                          \
        const T *b = x;                                                                      \
        for (size_t i = 0; i < n; i++)                                                       \
            a[i] = op == ncclProd ? a[i] * b[i]                                              \
                   : op == ncclMax ? (a[i] > b[i] ? a[i] : b[i])                             \
                   : op == ncclMin ? (a[i] < b[i] ? a[i] : b[i])                             \
                                   : a[i] + b[i];                                            \
    } while (0)

static float apply(ncclRedOp_t op, float a, float b) {
    return op == ncclProd ? a * b : op == ncclMax ? (a > b ? a : b) : op == ncclMin ? (a < b ? a : b) : a + b;
}

void sim_fold(void *acc, const void *x, size_t n, ncclDataType_t dt, ncclRedOp_t op) {
    switch (dt) {
    case ncclInt8: FOLD_INT(int8_t, uint8_t); break;
    case ncclUint8: FOLD_INT(uint8_t, uint8_t); break;
    case ncclInt32: FOLD_INT(int32_t, uint32_t); break;
    case ncclUint32: FOLD_INT(uint32_t, uint32_t); break;
    case ncclInt64: FOLD_INT(int64_t, uint64_t); break;
    case ncclUint64: FOLD_INT(uint64_t, uint64_t); break;
    case ncclFloat32: FOLD_FLOAT(float); break;
    case ncclFloat64: FOLD_FLOAT(double); break;
    case ncclFloat16: {
        uint16_t *a = acc;
        const uint16_t *b = x;
        for (size_t i = 0; i < n; i++)
            a[i] = hvdc__float_to_half(apply(op, hvdc__half_to_float(a[i]), hvdc__half_to_float(b[i])));
        break;
    }
    case ncclBfloat16: {
        uint16_t *a = acc;
        const uint16_t *b = x;
        for (size_t i = 0; i < n; i++)
            a[i] = hvdc__float_to_bf16(apply(op, hvdc__bf16_to_float(a[i]), hvdc__bf16_to_float(b[i])));
        break;
    }
    default: break;
    }
}

#define DIVIDE(T)                                                                            \
    do {                                                                                     \
        T *a = acc;                                                                          \
        for (size_t i = 0; i < n; i++) a[i] = (T)(a[i] / (T)ranks);                          \
    } while (0)

void sim_divide(void *acc, size_t n, ncclDataType_t dt, int ranks) {
    switch (dt) {
    case ncclInt8: DIVIDE(int8_t); break;
    case ncclUint8: DIVIDE(uint8_t); break;
    case ncclInt32: DIVIDE(int32_t); break;
    case ncclUint32: DIVIDE(uint32_t); break;
    case ncclInt64: DIVIDE(int64_t); break;
    case ncclUint64: DIVIDE(uint64_t); break;
    case ncclFloat32: DIVIDE(float); break;
    case ncclFloat64: DIVIDE(double); break;
    case ncclFloat16: {
        uint16_t *a = acc;
        for (size_t i = 0; i < n; i++) a[i] = hvdc__float_to_half(hvdc__half_to_float(a[i]) / (float)ranks);
        break;
    }
    case ncclBfloat16: {
        uint16_t *a = acc;
        for (size_t i = 0; i < n; i++) a[i] = hvdc__float_to_bf16(hvdc__bf16_to_float(a[i]) / (float)ranks);
        break;
    }
    default: break;
    }
}
