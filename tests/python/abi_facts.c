/*
 * abi_facts.c - prints what hvdc.h says about the types the Python bindings mirror by hand
 * (bindings/python/hvdc/common/library.py): every status, dtype and reduce op with its value,
 * the constants, and the size and field offsets of hvd_options, hvd_elastic_info and hvd_report,
 * as the compiler lays them out. check_abi.py compares library.py with these lines.
 * Output: one fact a line: "<kind> <name> <value> [<size>]".
 */
#include <stddef.h>
#include <stdio.h>

#include "hvdc.h"

#define FIELD(type, field)                                                                   \
    printf("field %s.%s %zu %zu\n", #type, #field, offsetof(type, field),                    \
           sizeof(((type *)0)->field))

int main(void) {
#define STATUS_(name, value, text) printf("status %s %d\n", #name, (int)name);
    HVD_STATUS_TABLE(STATUS_)
#undef STATUS_
    static const struct { const char *name; int value; } dtypes[] = {
        {"HVD_UINT8", HVD_UINT8}, {"HVD_INT8", HVD_INT8}, {"HVD_INT32", HVD_INT32},
        {"HVD_INT64", HVD_INT64}, {"HVD_FLOAT16", HVD_FLOAT16}, {"HVD_BFLOAT16", HVD_BFLOAT16},
        {"HVD_FLOAT32", HVD_FLOAT32}, {"HVD_FLOAT64", HVD_FLOAT64}, {"HVD_INT16", HVD_INT16},
        {"HVD_UINT16", HVD_UINT16}, {"HVD_BOOL", HVD_BOOL},
    };
    static const struct { const char *name; int value; } ops[] = {
        {"HVD_SUM", HVD_SUM}, {"HVD_AVERAGE", HVD_AVERAGE}, {"HVD_MIN", HVD_MIN},
        {"HVD_MAX", HVD_MAX}, {"HVD_PRODUCT", HVD_PRODUCT}, {"HVD_ADASUM", HVD_ADASUM},
    };
    _Static_assert(sizeof dtypes / sizeof dtypes[0] == HVD_DTYPE_COUNT, "a dtype is missing here");
    _Static_assert(sizeof ops / sizeof ops[0] == HVD_REDUCE_OP_COUNT, "an op is missing here");
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        printf("dtype %s %d\n", dtypes[i].name, dtypes[i].value);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        printf("op %s %d\n", ops[i].name, ops[i].value);
    printf("const HVD_DEVICE_CPU %d\n", HVD_DEVICE_CPU);
    printf("const HVD_PROCESS_SET_GLOBAL %d\n", HVD_PROCESS_SET_GLOBAL);
    printf("struct hvd_options %zu\n", sizeof(hvd_options));
    FIELD(hvd_options, struct_size);
    FIELD(hvd_options, prescale);
    FIELD(hvd_options, postscale);
    FIELD(hvd_options, device);
    FIELD(hvd_options, ready_event);
    FIELD(hvd_options, process_set);
    FIELD(hvd_options, shape);
    FIELD(hvd_options, ndim);
    printf("struct hvd_elastic_info %zu\n", sizeof(hvd_elastic_info));
    FIELD(hvd_elastic_info, restored);
    FIELD(hvd_elastic_info, sequence);
    FIELD(hvd_elastic_info, committed_size);
    FIELD(hvd_elastic_info, age_s);
    printf("struct hvd_report %zu\n", sizeof(hvd_report));
    FIELD(hvd_report, period_s);
    FIELD(hvd_report, steps_per_s);
    FIELD(hvd_report, rounds_per_s);
    FIELD(hvd_report, wait_ms);
    FIELD(hvd_report, last_rank);
    FIELD(hvd_report, last_host);
    FIELD(hvd_report, last_share);
    FIELD(hvd_report, last_lateness_ms);
    FIELD(hvd_report, bytes);
    FIELD(hvd_report, busbw_gbs);
    FIELD(hvd_report, tensors);
    FIELD(hvd_report, ops);
    return 0;
}
