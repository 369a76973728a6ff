/*
 * bench_common.h - the harness the benchmarks share: error checks, timing and statistics,
 * size parsing, dtype names and conversions, and the "# settings" header every table starts with.
 * Runs on the benchmark's main thread.
 *
 * defines: BENCH_CHECK_HVD, BENCH_CHECK_MPI, bench_now_us, bench_median, bench_percentile,
 *          bench_parse_bytes, bench_format_bytes, bench_dtype_from_name, bench_dtype_name,
 *          bench_op_from_name, bench_op_name, bench_mpi_type, bench_mpi_op,
 *          bench_set_value, bench_get_value, bench_print_settings, bench_max_over_ranks
 *
 * Errors. A benchmark cannot do anything useful after a failed call, and a rank that returns
 * early would leave the others waiting in a collective, so the checks print file:line, the
 * rank, the status and hvd_last_error(), then MPI_Abort the whole job with exit code 2
 * (exit code 1 is kept for "ran, but some results were wrong").
 */
#ifndef HVDC_BENCH_COMMON_H
#define HVDC_BENCH_COMMON_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#include "hvdc.h"

void bench_fail_hvd(const char *file, int line, const char *call, hvd_status st);
void bench_fail_mpi(const char *file, int line, const char *call, int err);

#define BENCH_CHECK_HVD(call)                                                                  \
    do {                                                                                       \
        hvd_status bench_st_ = (call);                                                         \
        if (bench_st_ != HVD_OK) bench_fail_hvd(__FILE__, __LINE__, #call, bench_st_);         \
    } while (0)

#define BENCH_CHECK_MPI(call)                                                                  \
    do {                                                                                       \
        int bench_err_ = (call);                                                               \
        if (bench_err_ != MPI_SUCCESS) bench_fail_mpi(__FILE__, __LINE__, #call, bench_err_);  \
    } while (0)

/* Microseconds on a monotonic clock. */
double bench_now_us(void);

/* Median / p-th percentile (0..100, nearest rank) of v[n]; v is reordered. 0 for n == 0. */
double bench_median(double *v, size_t n);
double bench_percentile(double *v, size_t n, double p);

/* In place, v[i] = max over ranks of v[i] (the slowest rank decides an iteration's time). */
void bench_max_over_ranks(double *v, size_t n, MPI_Comm comm);

/* Bytes with an optional binary suffix (1024, 64K, 256M, 1G). @return 1 if valid, else 0. */
int bench_parse_bytes(const char *text, size_t *out);
/* "64 MiB", "1 KiB", "100 B" into buf[n]; returns buf. */
const char *bench_format_bytes(size_t bytes, char *buf, size_t n);

/* float, half, bfloat16, double, int32, int64, int8, uint8 (and a few aliases). -1 if unknown. */
int bench_dtype_from_name(const char *name);
const char *bench_dtype_name(hvd_dtype dtype);
/* sum, avg, min, max, prod. -1 if unknown. */
int bench_op_from_name(const char *name);
const char *bench_op_name(hvd_reduce_op op);
/* MPI's type for dtype, MPI_DATATYPE_NULL for the half types (MPI has none). */
MPI_Datatype bench_mpi_type(hvd_dtype dtype);
/* MPI's op; HVD_AVERAGE maps to MPI_SUM (MPI has no average). */
MPI_Op bench_mpi_op(hvd_reduce_op op);

/* Element i of buf as a double / set from a double. Exact for the integer values the
 * benchmarks use (|v| <= 2048 for float16, <= 256 for bfloat16). */
void bench_set_value(void *buf, hvd_dtype dtype, size_t i, double v);
double bench_get_value(const void *buf, hvd_dtype dtype, size_t i);

/* Prints "# key: value" lines shared by all benchmarks (program, ranks, MPI library, libhvdc
 * version, host, date, HVD_* environment) to out. Call on rank 0 only. */
/* A benchmark's option parser: fills options. @return 0 to run, > 0 when it printed the help
 * (exit 0), < 0 for a bad option (exit 2). */
typedef int (*bench_parse_fn)(int argc, char **argv, void *options, int rank);

/* Starts MPI at MPI_THREAD_MULTIPLE (libhvdc's background thread calls MPI beside the
 * benchmark's own calls), reports rank and size, and parses the options.
 * @return 0 to go on; otherwise MPI is finalized and main returns bench_exit_status() of it
 * (2: this MPI lacks MPI_THREAD_MULTIPLE, or a bad option; 0 after --help). */
int bench_start(int *argc, char ***argv, const char *program, bench_parse_fn parse,
                void *options, int *rank, int *size);
/* What main returns for bench_start's non-zero result. */
static inline int bench_exit_status(int started) { return started < 0 ? 0 : started; }

/* One "flag value" pair of a benchmark's options. @return 1 if understood and valid, else 0. */
typedef int (*bench_option_fn)(void *options, const char *flag, const char *value);

/* Walks argv as "flag value" pairs through one(): -h/--help prints usage (on rank 0) and
 * returns 1; an unknown or invalid pair prints what was wrong and the usage (on rank 0) and
 * returns -1; else 0. */
int bench_parse_options(int argc, char **argv, int rank, const char *program,
                        void (*usage)(FILE *out), bench_option_fn one, void *options);

void bench_print_settings(FILE *out, const char *program, int size);

#endif
