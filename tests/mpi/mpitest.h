/*
 * mpitest.h - shared helpers for the multi-rank tests (the test_*.c files here), written
 * only against the public API in hvdc.h. Runs on whatever thread calls it; mt_fail is thread-safe.
 *
 * defines: mt_ctx, mt_init, mt_start, mt_begin, mt_end, mt_fail, mt_combine, mt_exit_code,
 *          MT_CHECK, MT_EXPECT,
 *          mt_f16_from_f32, mt_f32_from_f16, mt_bf16_from_f32, mt_f32_from_bf16,
 *          mt_dtype_size, mt_dtype_name, mt_op_name, mt_is_float, mt_op_defined, mt_defined_op,
 *          mt_get_i64, mt_set_i64, mt_get_f64, mt_set_f64, mt_set_value, mt_get_value,
 *          mt_hash, mt_value, mt_fill, mt_reduce_ref, mt_compare, mt_now, mt_arg_double
 *
 * Test data. mt_value(dtype, op, rank, i, salt) gives an integer that, for up to MT_MAX_RANKS
 * ranks, keeps every sum, average, min, max or product exact and in range for the dtype, in any
 * reduction order (see mt_value for the ranges). It hashes rank and index together so a
 * misplaced segment or a swapped rank shows up. Every rank can compute every rank's input, so
 * references are computed locally (mt_reduce_ref) and compared with mt_compare.
 *
 * Verdicts. A check group prints one line: "<group>: OK" on rank 0, "[rank r] <group>: FAIL"
 * on any rank that saw a failure. mt_combine sums the failure counts over ranks (with an
 * hvd_allreduce, as the last operation of a test), and mt_exit_code prints PASS or FAIL and
 * returns the process exit status. A rank's own failures always make its own exit status 1,
 * whatever the combine says, so a broken library cannot hide a failure.
 */
#ifndef HVDC_MPITEST_H
#define HVDC_MPITEST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

/* Largest world the test data ranges are designed for. */
#define MT_MAX_RANKS 8

typedef struct mt_ctx {
    int rank;               /* hvd_rank(), or 0 before init */
    int size;               /* hvd_size(), or 1 before init */
    atomic_int failures;    /* this rank's failed checks, all groups */
    atomic_int group_fails; /* failed checks in the current group */
    int remote_failures;    /* sum over all ranks from the last mt_combine, -1 if it failed */
    char group[200];        /* name of the current check group */
} mt_ctx;

void mt_init(mt_ctx *t, int rank, int size);
/* hvd_init, then mt_init with this rank and size. On failure prints the status and message
 * and "FAIL", and returns 1 (the test's exit status); else 0. */
int mt_start(mt_ctx *t);
/* Starts a check group named like printf. */
void mt_begin(mt_ctx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ends the group, prints its verdict line; returns 1 if it passed on this rank. */
int mt_end(mt_ctx *t);
/* Records a failed check and prints it (only the first few of a group are printed). */
void mt_fail(mt_ctx *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Sums failure counts over ranks with hvd_allreduce (needs an initialized library). */
void mt_combine(mt_ctx *t);
/* Prints "PASS" or "FAIL ..." and returns the process exit status (0 or 1). */
int mt_exit_code(mt_ctx *t);

#define MT_CHECK(t, cond, ...)                                                                 \
    do {                                                                                       \
        if (!(cond)) mt_fail((t), __FILE__, __LINE__, __VA_ARGS__);                            \
    } while (0)

/* Checks that a libhvdc call returned the expected status; prints hvd_last_error() if not.
 * Evaluates to 1 when it matched. */
#define MT_EXPECT(t, expr, expected)                                                           \
    mt_expect_((t), (expr), (expected), #expr, __FILE__, __LINE__)
int mt_expect_(mt_ctx *t, hvd_status got, hvd_status expected, const char *what,
               const char *file, int line);

/* ---- float16 / bfloat16 reference conversions (round to nearest, ties to even) ---------- */
uint16_t mt_f16_from_f32(float f);
float mt_f32_from_f16(uint16_t h);
uint16_t mt_bf16_from_f32(float f);
float mt_f32_from_bf16(uint16_t b);

/* ---- dtypes ------------------------------------------------------------------------------ */
extern const hvd_dtype mt_all_dtypes[HVD_DTYPE_COUNT];
extern const hvd_reduce_op mt_all_ops[HVD_REDUCE_OP_COUNT];
size_t mt_dtype_size(hvd_dtype dt); /* our own table, independent of hvd_dtype_size */
const char *mt_dtype_name(hvd_dtype dt);
const char *mt_op_name(hvd_reduce_op op);
int mt_is_float(hvd_dtype dt);
/* 0 for the pairs libhvdc refuses (average of bool), and for HVD_ADASUM, which is not
 * element-wise (test_adasum.c has its own reference); mt_defined_op gives HVD_SUM for them. */
int mt_op_defined(hvd_dtype dt, hvd_reduce_op op);
hvd_reduce_op mt_defined_op(hvd_dtype dt, hvd_reduce_op op);

/* Element i of buf as/from an integer (integer dtypes) or a double (any dtype). mt_set_f64
 * rounds to the dtype (nearest-even for float16/bfloat16/float32). */
int64_t mt_get_i64(const void *buf, hvd_dtype dt, size_t i);
void mt_set_i64(void *buf, hvd_dtype dt, size_t i, int64_t v);
double mt_get_f64(const void *buf, hvd_dtype dt, size_t i);
void mt_set_f64(void *buf, hvd_dtype dt, size_t i, double v);
/* Stores an integer test value in whatever the dtype is. */
void mt_set_value(void *buf, hvd_dtype dt, size_t i, int64_t v);

/* After a refusal or a mismatch, a correct all-reduce named name must work: an int32 sum of
 * (rank + 1) * (i + 1) over 5 elements, checked on every rank. */
void mt_check_recovers(mt_ctx *t, const char *name);

/* ---- deterministic test data ------------------------------------------------------------- */
uint64_t mt_hash(uint64_t a, uint64_t b, uint64_t c);
/* The input of `rank` at index i for a reduction op on dtype (salt tells tensors apart).
 * For data that is only moved (broadcast, gathers), pass HVD_MAX: the widest range. */
int64_t mt_value(hvd_dtype dt, hvd_reduce_op op, int rank, size_t i, uint64_t salt);
/* buf[i] = mt_value(dt, op, rank, first + i, salt) for i in [0, n). */
void mt_fill(void *buf, hvd_dtype dt, hvd_reduce_op op, int rank, size_t first, size_t n,
             uint64_t salt);
/* ref[i] = op over ranks r of (prescale * mt_value(dt, op, r, first + i, salt)), then AVERAGE
 * divides by size (truncating for integers) and postscale multiplies, rounded to dtype. */
void mt_reduce_ref(void *ref, hvd_dtype dt, hvd_reduce_op op, int size, size_t first,
                   size_t n, uint64_t salt, double prescale, double postscale);
/* Compares n elements of got with ref: exactly, or for floating AVERAGE (and non-integer
 * scales) within a few units in the last place. Reports the first mismatches and the count.
 * Returns the number of mismatches. */
size_t mt_compare(mt_ctx *t, const void *got, const void *ref, hvd_dtype dt, size_t n,
                  int approximate, const char *what);

/* Seconds from a monotonic clock. */
double mt_now(void);

/* The number after `flag` in argv ("--after-s 1.5"), or dflt when flag is not there. */
double mt_arg_double(int argc, char **argv, const char *flag, double dflt);

#endif /* HVDC_MPITEST_H */
