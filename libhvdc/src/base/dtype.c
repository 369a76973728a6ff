/*
 * dtype.c - sizes and names of dtypes and reduce ops. The only place that maps a dtype to bytes
 * (count is elements everywhere else). Pure; any thread.
 */
#include "base/dtype.h"

static const struct {
    const char *name;
    size_t size;
    int is_float;
    size_t max_count; /* HVDC_MAX_BUFFER_BYTES / size, divided here, not on every submission */
} dtypes[HVD_DTYPE_COUNT] = {
#define DTYPE(name, size, is_float) {name, size, is_float, HVDC_MAX_BUFFER_BYTES / (size)}
    [HVD_UINT8] = DTYPE("uint8", 1, 0),     [HVD_INT8] = DTYPE("int8", 1, 0),
    [HVD_INT32] = DTYPE("int32", 4, 0),     [HVD_INT64] = DTYPE("int64", 8, 0),
    [HVD_FLOAT16] = DTYPE("float16", 2, 1), [HVD_BFLOAT16] = DTYPE("bfloat16", 2, 1),
    [HVD_FLOAT32] = DTYPE("float32", 4, 1), [HVD_FLOAT64] = DTYPE("float64", 8, 1),
    [HVD_INT16] = DTYPE("int16", 2, 0),     [HVD_UINT16] = DTYPE("uint16", 2, 0),
    [HVD_BOOL] = DTYPE("bool", 1, 0),
#undef DTYPE
};

static const char *const op_names[HVD_REDUCE_OP_COUNT] = {
    [HVD_SUM] = "sum", [HVD_AVERAGE] = "average", [HVD_MIN] = "min",
    [HVD_MAX] = "max", [HVD_PRODUCT] = "product", [HVD_ADASUM] = "adasum",
};

int hvdc__dtype_valid(int dtype) { return dtype >= 0 && dtype < HVD_DTYPE_COUNT; }

size_t hvd_dtype_size(hvd_dtype dtype) {
    return hvdc__dtype_valid((int)dtype) ? dtypes[dtype].size : 0;
}

size_t hvdc__dtype_max_count(hvd_dtype dtype) {
    return hvdc__dtype_valid((int)dtype) ? dtypes[dtype].max_count : 0;
}

int hvdc__dtype_is_float(hvd_dtype dtype) {
    return hvdc__dtype_valid((int)dtype) && dtypes[dtype].is_float;
}

const char *hvdc__dtype_name(int dtype) {
    return hvdc__dtype_valid(dtype) ? dtypes[dtype].name : "unknown-dtype";
}

int hvdc__op_valid(int op) { return op >= 0 && op < HVD_REDUCE_OP_COUNT; }

const char *hvdc__op_name(int op) { return hvdc__op_valid(op) ? op_names[op] : "unknown-op"; }
