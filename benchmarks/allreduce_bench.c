/*
 * allreduce_bench.c - all-reduce bandwidth of hvd_allreduce against raw MPI_Allreduce, in the
 * style of nccl-tests: one row per size and implementation with time, algbw, busbw and #wrong.
 *
 * What is timed. "hvd-shm", "hvd-ring" and "hvd-mpi" are end-to-end blocking hvd_allreduce
 * calls (submission, negotiation, fusion planning and the reduction) with libhvdc's CPU
 * all-reduce set by HVD_CPU_ALLREDUCE=shm, =ring or =mpi. The library reads that variable in hvd_init, so the
 * benchmark sets it and re-initializes libhvdc whenever it switches between the two; MPI itself
 * stays up (we initialize it, with MPI_THREAD_MULTIPLE). "mpi" is MPI_Allreduce on
 * MPI_COMM_WORLD from the main thread, the baseline. At each size, each hvd pass alternates
 * one hvd call and one MPI call per iteration, so both see the same machine; each reads input
 * buffers and writes an output buffer of its own, so neither inherits the other's cache state
 * (with one shared input, the second call read what the first had just brought into cache:
 * an H100's 50 MB L2 holds a 16 MiB input and its output); the ratio vs_mpi of an hvd row is
 * busbw(hvd) / busbw(MPI) over the MPI calls of that same pass. "memcpy" is
 * rank 0 alone copying the same bytes with memcpy (the others wait): what one core can move, the
 * physical ceiling an all-reduce on this machine is measured against; its busbw column is
 * that copy rate (bytes / time), not scaled by 2(n-1)/n. "mpi-thread" (host only, not by
 * default) is the same MPI_Allreduce called by a helper thread while the main thread sleeps
 * (handoff.h): the floor of libhvdc's shape, a background thread as the only caller of MPI;
 * hvd-mpi against it is what libhvdc adds to MPI beyond the hand-offs. Its pass alternates
 * with MPI calls like an hvd pass.
 *
 * One iteration: MPI_Barrier, then time one call; the iteration's time is the slowest rank's,
 * and a row reports the median over iterations. algbw = bytes / time; busbw = algbw * 2(n-1)/n,
 * the traffic each rank's link carries in a ring all-reduce, comparable across rank counts.
 *
 * Correctness (-c 1, the default): inputs are small integers that depend on rank and index,
 * chosen so every sum/min/max/prod is exact and in range for the dtype in any reduction order:
 *     x_r[i] = 1 + (j + 3r) mod p     (prod: 1 + (j + r) mod 2),   j = (i + parity) mod p
 * Two send buffers per side hold parity 0 and 1 and iterations alternate between them, so a
 * result left over from the previous call counts as wrong. Every result of every call (warm-up
 * included) is compared element by element with the exact reference; #wrong counts mismatched
 * elements over all iterations and ranks. The exit status is 1 if any were wrong, 2 on an error.
 *
 * --device gpu: the buffers are on this rank's CUDA device (its local rank), the hvd rows
 * ("hvd-gpu") run libhvdc's device path (options.device; the call returns once the device
 * work is done) and the baseline rows ("nccl") run ncclAllReduce on a communicator of the same
 * ranks, synchronized on its stream; vs_mpi is then against that baseline. Results are copied
 * back and checked as above. Without a usable GPU (or the GPU backend) it stops, saying why.
 * Main thread (libhvdc's background thread does the hvd work).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_device.h"
#include "handoff.h"
#include "runtime/phases.h" /* where an hvd call's time went: this binary links the internal library */

/* The hvd impls first (up to IMPL_MPI), each HVD_CPU_ALLREDUCE=<impl_setting>. */
enum { IMPL_HVD_SHM, IMPL_HVD_RING, IMPL_HVD_MPI, IMPL_MPI, IMPL_MEMCPY, IMPL_MPI_THREAD, IMPL_COUNT };
static const char *const impl_names[IMPL_COUNT] = {"hvd-shm", "hvd-ring", "hvd-mpi", "mpi", "memcpy",
                                                   "mpi-thread"};
static const char *const impl_setting[IMPL_MPI] = {"shm", "ring", "mpi"};
/* --device gpu: the same slots, named for what they run (one hvd row: the device path does
 * not use the CPU algorithm) */
static const char *const gpu_impl_names[IMPL_COUNT] = {"hvd-gpu", "hvd-gpu", "hvd-gpu", "nccl", "memcpy", "-"};
static int device = -1; /* --device gpu: this rank's CUDA device once opened, else -1 */
static bench_handoff *handoff; /* mpi-thread's helper, while that impl is timed */

typedef struct options {
    size_t min_bytes, max_bytes; /* -b, -e */
    size_t factor;               /* -f */
    int iters, warmup, check;    /* -n, -w, -c */
    hvd_dtype dtype;             /* -d */
    hvd_reduce_op op;            /* -o */
    int impl[IMPL_COUNT];        /* --impl: 1 if timed */
    const char *csv;             /* --csv, NULL for none */
    int gpu;                     /* --device gpu */
} options;

/* The reference for one size: x_r[i] and the exact reduction depend only on j in [0, period). */
typedef struct pattern {
    size_t period;
    double *expected; /* (period) exact result for j */
    double tolerance; /* 0: exact; avg on floating types: relative */
} pattern;

static void usage(FILE *out) {
    fprintf(out,
            "usage: allreduce_bench [options]   (run under mpirun)\n"
            "  -b BYTES   smallest message (default 1K; K, M, G suffixes)\n"
            "  -e BYTES   largest message (default 64M)\n"
            "  -f N       multiply the size by N each step (default 2)\n"
            "  -n N       timed iterations per size and implementation (default 20)\n"
            "  -w N       warm-up iterations (default 5)\n"
            "  -d TYPE    float, double, half, bfloat16, int32, int64, int8, uint8 (default float)\n"
            "  -o OP      sum, avg, min, max, prod (default sum)\n"
            "  -c 0|1     check every result exactly (default 1)\n"
            "  --impl L   comma-separated from hvd-shm, hvd-ring, hvd-mpi, mpi, memcpy (default\n"
            "             hvd-shm,hvd-ring,mpi,memcpy, or hvd-<HVD_CPU_ALLREDUCE>,mpi,memcpy when\n"
            "             that variable is set to shm, ring or mpi), mpi-thread (MPI_Allreduce\n"
            "             on a helper thread: the floor of a background thread's hand-offs)\n"
            "  --csv FILE also write the table as CSV\n"
            "  --device cpu|gpu  gpu: device buffers, libhvdc's NCCL path against raw NCCL\n"
            "  -h, --help this text\n"
            "Columns: size (B), count (elements), type, redop, impl, time (us, median), algbw and\n"
            "busbw (GB/s; busbw = algbw*2(n-1)/n), #wrong (mismatched elements), vs_mpi (hvd busbw\n"
            "/ MPI busbw, interleaved in the same pass). Exit status 1 if any result was wrong.\n");
}

static int parse_impls(const char *list, int impl[IMPL_COUNT]) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    memset(impl, 0, IMPL_COUNT * sizeof *impl);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < IMPL_COUNT; i++) {
            if (strcmp(tok, impl_names[i]) == 0) impl[i] = found = 1;
        }
        if (!found) return 0;
    }
    return 1;
}

/* One option (bench_parse_options walks argv). */
static int parse_option(void *out, const char *flag, const char *value) {
    options *o = out;
    int ok = 1;
    if (strcmp(flag, "-b") == 0) {
        ok = bench_parse_bytes(value, &o->min_bytes);
    } else if (strcmp(flag, "-e") == 0) {
        ok = bench_parse_bytes(value, &o->max_bytes);
    } else if (strcmp(flag, "-f") == 0) {
        o->factor = (size_t)atol(value);
        ok = o->factor >= 2;
    } else if (strcmp(flag, "-n") == 0) {
        o->iters = atoi(value);
        ok = o->iters >= 1;
    } else if (strcmp(flag, "-w") == 0) {
        o->warmup = atoi(value);
        ok = o->warmup >= 0;
    } else if (strcmp(flag, "-c") == 0) {
        o->check = atoi(value);
        ok = o->check == 0 || o->check == 1;
    } else if (strcmp(flag, "-d") == 0) {
        int d = bench_dtype_from_name(value);
        ok = d >= 0;
        o->dtype = (hvd_dtype)d;
    } else if (strcmp(flag, "-o") == 0) {
        int op = bench_op_from_name(value);
        ok = op >= 0;
        o->op = (hvd_reduce_op)op;
    } else if (strcmp(flag, "--impl") == 0) {
        ok = parse_impls(value, o->impl);
    } else if (strcmp(flag, "--csv") == 0) {
        o->csv = value;
    } else if (strcmp(flag, "--device") == 0) {
        ok = strcmp(value, "cpu") == 0 || strcmp(value, "gpu") == 0;
        o->gpu = strcmp(value, "gpu") == 0;
    } else {
        ok = 0;
    }
    return ok;
}

/* Defaults, then argv. @return 0 to run, 1 after --help, -1 on a bad option (message printed). */
static int parse_options(int argc, char **argv, void *out, int rank) {
    options *o = out;
    *o = (options){.min_bytes = 1024, .max_bytes = 64u << 20, .factor = 2, .iters = 20,
                   .warmup = 5, .check = 1, .dtype = HVD_FLOAT32, .op = HVD_SUM};
    const char *env = getenv("HVD_CPU_ALLREDUCE");
    int chosen = -1;
    for (int i = 0; env && i < IMPL_MPI; i++)
        if (strcmp(env, impl_setting[i]) == 0) chosen = i;
    if (chosen >= 0) o->impl[chosen] = 1;
    else o->impl[IMPL_HVD_SHM] = o->impl[IMPL_HVD_RING] = 1;
    o->impl[IMPL_MPI] = o->impl[IMPL_MEMCPY] = 1;
    int parsed = bench_parse_options(argc, argv, rank, "allreduce_bench", usage, parse_option, o);
    if (parsed != 0) return parsed;
    if (o->gpu) { /* one hvd row (the device path does not use the CPU algorithm), and NCCL */
        memset(o->impl, 0, sizeof o->impl);
        o->impl[IMPL_HVD_RING] = o->impl[IMPL_MPI] = 1;
    }
    if (o->impl[IMPL_MPI_THREAD] && bench_mpi_type(o->dtype) == MPI_DATATYPE_NULL) {
        if (rank == 0)
            fprintf(stderr, "allreduce_bench: mpi-thread needs a dtype MPI has (not half or bfloat16)\n");
        return -1;
    }
    if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) {
        if (rank == 0) fprintf(stderr, "allreduce_bench: need 0 < -b <= -e\n");
        return -1;
    }
    return 0;
}

/* Largest integer the dtype holds exactly (and without overflow). */
static double exact_limit(hvd_dtype dtype) {
    switch (dtype) {
    case HVD_UINT8: return 255;
    case HVD_INT8: return 127;
    case HVD_INT16: return 32767;
    case HVD_UINT16: return 65535;
    case HVD_BOOL: return 1; /* or/and, not sums: no pattern fits (refused below) */
    case HVD_BFLOAT16: return 256;
    case HVD_FLOAT16: return 2048;
    default: return 16777216; /* float32; wider types do not need more */
    }
}

static double input_value(const options *o, size_t period, int rank, size_t j) {
    if (o->op == HVD_PRODUCT) return 1.0 + (double)((j + (size_t)rank) % 2);
    return 1.0 + (double)((j + 3 * (size_t)rank) % period);
}

/* Returns 0, or -1 if the dtype cannot hold the exact result for this many ranks. */
static int pattern_make(pattern *p, const options *o, int size) {
    double limit = exact_limit(o->dtype);
    if (o->op == HVD_PRODUCT) {
        if (ldexp(1.0, size) > limit) return -1;
        p->period = 2;
    } else if (o->op == HVD_MIN || o->op == HVD_MAX) {
        p->period = limit < 1009 ? (size_t)limit : 1009;
    } else {
        double per = floor(limit / size);
        if (per < 2) return -1;
        p->period = per < 1009 ? (size_t)per : 1009;
    }
    int is_float = o->dtype == HVD_FLOAT16 || o->dtype == HVD_BFLOAT16 ||
                   o->dtype == HVD_FLOAT32 || o->dtype == HVD_FLOAT64;
    p->tolerance = o->op == HVD_AVERAGE && is_float ? (o->dtype == HVD_FLOAT16 ? 1e-3 : o->dtype == HVD_BFLOAT16 ? 1e-2 : 1e-6) : 0.0;
    p->expected = malloc(p->period * sizeof *p->expected);
    if (!p->expected) return -1;
    for (size_t j = 0; j < p->period; j++) {
        double acc = input_value(o, p->period, 0, j);
        for (int r = 1; r < size; r++) {
            double x = input_value(o, p->period, r, j);
            switch (o->op) {
            case HVD_MIN: acc = fmin(acc, x); break;
            case HVD_MAX: acc = fmax(acc, x); break;
            case HVD_PRODUCT: acc *= x; break;
            default: acc += x; break;
            }
        }
        p->expected[j] = acc;
    }
    return 0;
}

static void fill_input(void *buf, size_t count, const options *o, const pattern *p, int rank,
                       int parity) {
    size_t j = (size_t)parity % p->period;
    for (size_t i = 0; i < count; i++) {
        bench_set_value(buf, o->dtype, i, input_value(o, p->period, rank, j));
        if (++j == p->period) j = 0;
    }
}

/* Mismatched elements of buf against the reference; average = sum / size (MPI rows pass
 * HVD_SUM, since MPI has no average). */
static long long count_wrong(const void *buf, size_t count, hvd_dtype dtype, hvd_reduce_op op,
                             const pattern *p, int size, int parity) {
    long long wrong = 0;
    int is_int = dtype == HVD_UINT8 || dtype == HVD_INT8 || dtype == HVD_INT16 ||
                 dtype == HVD_UINT16 || dtype == HVD_INT32 || dtype == HVD_INT64;
    size_t j = (size_t)parity % p->period;
    for (size_t i = 0; i < count; i++) {
        double want = p->expected[j], got = bench_get_value(buf, dtype, i);
        if (op == HVD_AVERAGE) want = is_int ? trunc(want / size) : want / size;
        if (op == HVD_AVERAGE && p->tolerance > 0) wrong += !(fabs(got - want) <= p->tolerance * want);
        else wrong += got != want;
        if (++j == p->period) j = 0;
    }
    return wrong;
}

/* Makes libhvdc run with the given impl (re-initializing it if it runs another). */
static void hvd_use(int impl, int *current) {
    if (*current == impl) return;
    if (*current >= 0) BENCH_CHECK_HVD(hvd_shutdown());
    setenv("HVD_CPU_ALLREDUCE", impl_setting[impl], 1);
    BENCH_CHECK_HVD(hvd_init());
    *current = impl;
}

typedef struct row {
    double time_us;
    long long wrong;
    double mpi_time_us; /* hvd rows: MPI's median in the same pass, 0 if not measured */
    double phases[HVDC_N_PHASES]; /* hvd rows: this rank's mean us per call in each phase of
                                     the timed calls (runtime/phases.h) */
} row;

/* Each side of a pass writes its own output buffer: with Open MPI's default single-copy
 * transfers (CMA), the hvd call after an MPI_Allreduce into the same buffer took 2.5x longer to
 * write its result there (benchmarks/results/archive/allreduce_np2_own_outputs.txt), a cost no
 * training step pays: its gradients are last written by the step itself. */
enum { OUT_HVD, OUT_BASELINE };

typedef struct buffers {
    /* where the collectives run: host, or device with --device gpu; each side's own, indexed
     * OUT_HVD or OUT_BASELINE: send[side][parity], recv[side] */
    void *send[2][2], *recv[2];
    void *check;             /* --device gpu: a host copy of a recv to check; else unused */
} buffers;

/* One blocking hvd all-reduce; on the device with --device gpu. */
static void hvd_call(const char *name, const void *send, void *recv, size_t count,
                     const options *o) {
    if (device < 0) {
        BENCH_CHECK_HVD(hvd_allreduce(name, send, recv, count, o->dtype, o->op));
        return;
    }
    hvd_options opts = HVD_OPTIONS_INIT;
    opts.device = device;
    hvd_handle h = HVD_HANDLE_NULL;
    BENCH_CHECK_HVD(hvd_allreduce_async(name, send, recv, count, o->dtype, o->op, &opts, &h));
    BENCH_CHECK_HVD(hvd_wait(&h));
}

/* The result in recv[out] to check, on the host. */
static const void *result(const buffers *b, int out, size_t nbytes) {
    if (device < 0) return b->recv[out];
    if (bench_device_download(b->check, b->recv[out], nbytes) != 0) {
        fprintf(stderr, "allreduce_bench: copying a device result back failed\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return b->check;
}

/* Runs warm-up + timed iterations of one hvd impl or mpi-thread (or impl == IMPL_MPI alone) at
 * one size, interleaving MPI_Allreduce when with_mpi; appends MPI's times to mpi_all. */
static void run_pass(int impl, int with_mpi, size_t count, const options *o, const pattern *p,
                     buffers *b, int size, row *out, long long *mpi_wrong, double *mpi_all,
                     size_t *n_mpi_all) {
    int n = o->iters, total = o->warmup + o->iters;
    double *t_hvd = calloc((size_t)n, sizeof *t_hvd), *t_mpi = calloc((size_t)n, sizeof *t_mpi);
    if (!t_hvd || !t_mpi) {
        fprintf(stderr, "allreduce_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char name[64];
    snprintf(name, sizeof name, "allreduce_bench.%zu", count);
    MPI_Datatype type = bench_mpi_type(o->dtype);
    hvd_reduce_op mpi_op = o->op == HVD_AVERAGE ? HVD_SUM : o->op; /* what MPI_Allreduce runs */
    long long wrong[2] = {0, 0}; /* hvd (or mpi-thread), mpi */
    int do_hvd = impl != IMPL_MPI;
    int phased = do_hvd && impl != IMPL_MPI_THREAD; /* an hvd call: its phases are counted */
    double phases[HVDC_N_PHASES] = {0};
    uint64_t phase_ops = 0;
    with_mpi = with_mpi && (type != MPI_DATATYPE_NULL || device >= 0);
    for (int it = 0; it < total; it++) {
        int parity = it & 1, timed = it - o->warmup;
        /* --device gpu: results are checked in the warm-up iterations only: copying a result
         * back to the host between timed calls slowed the next call 2-4x on the H100 */
        int check = o->check && (device < 0 || timed < 0);
        if (phased && timed == 0) /* the phases count from here */
            BENCH_CHECK_HVD(hvdc__phase_breakdown(device >= 0, phases, &phase_ops));
        if (do_hvd) {
            BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = bench_now_us();
            if (impl == IMPL_MPI_THREAD)
                BENCH_CHECK_MPI(bench_handoff_allreduce(handoff, b->send[OUT_HVD][parity],
                                                        b->recv[OUT_HVD],
                                                        (int)count, type, bench_mpi_op(o->op)));
            else
                hvd_call(name, b->send[OUT_HVD][parity], b->recv[OUT_HVD], count, o);
            double t1 = bench_now_us();
            if (timed >= 0) t_hvd[timed] = t1 - t0;
            if (check)
                wrong[0] += count_wrong(result(b, OUT_HVD, count * hvd_dtype_size(o->dtype)), count,
                                        o->dtype, impl == IMPL_MPI_THREAD ? mpi_op : o->op, p,
                                        size, parity);
        }
        if (with_mpi) {
            BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = bench_now_us();
            if (device >= 0) {
                if (bench_nccl_allreduce(b->send[OUT_BASELINE][parity], b->recv[OUT_BASELINE],
                                         count, o->dtype, o->op) != 0) {
                    fprintf(stderr, "allreduce_bench: ncclAllReduce failed\n");
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
            } else {
                BENCH_CHECK_MPI(MPI_Allreduce(b->send[OUT_BASELINE][parity], b->recv[OUT_BASELINE],
                                              (int)count, type, bench_mpi_op(o->op),
                                              MPI_COMM_WORLD));
            }
            double t1 = bench_now_us();
            if (timed >= 0) t_mpi[timed] = t1 - t0;
            if (check)
                wrong[1] += count_wrong(result(b, OUT_BASELINE, count * hvd_dtype_size(o->dtype)), count,
                                        o->dtype, mpi_op, p, size, parity);
        }
    }
    if (phased && n > 0)
        BENCH_CHECK_HVD(hvdc__phase_breakdown(device >= 0, phases, &phase_ops));
    BENCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, wrong, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    if (do_hvd) bench_max_over_ranks(t_hvd, (size_t)n, MPI_COMM_WORLD);
    if (with_mpi) {
        bench_max_over_ranks(t_mpi, (size_t)n, MPI_COMM_WORLD);
        memcpy(mpi_all + *n_mpi_all, t_mpi, (size_t)n * sizeof *t_mpi);
        *n_mpi_all += (size_t)n;
    }
    *out = (row){do_hvd ? bench_median(t_hvd, (size_t)n) : 0.0, wrong[0],
                 with_mpi ? bench_median(t_mpi, (size_t)n) : 0.0, {0}};
    memcpy(out->phases, phases, sizeof phases);
    *mpi_wrong += wrong[1];
    free(t_hvd);
    free(t_mpi);
}

/* The median time of rank 0 alone copying count elements (the others wait at the barrier). */
static double time_memcpy(const options *o, buffers *b, size_t count, int rank) {
    int n = o->iters;
    double *t = calloc((size_t)n, sizeof *t), median = 0.0;
    if (!t) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int it = 0; it < o->warmup + n; it++) {
        BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (rank != 0) continue;
        double t0 = bench_now_us();
        memcpy(b->recv[OUT_BASELINE], b->send[OUT_BASELINE][it & 1],
               count * hvd_dtype_size(o->dtype));
        double t1 = bench_now_us();
        if (it >= o->warmup) t[it - o->warmup] = t1 - t0;
    }
    if (rank == 0) median = bench_median(t, (size_t)n);
    free(t);
    return median;
}

static void print_row(FILE *out, FILE *csv, size_t bytes, size_t count, const options *o,
                      int impl, double time_us, long long wrong, double mpi_time_us, int size) {
    double algbw = time_us > 0 ? (double)bytes / (time_us * 1e3) : 0.0; /* GB/s */
    double busbw = impl == IMPL_MEMCPY ? algbw : algbw * 2.0 * (size - 1) / size;
    char ratio[16] = "-";
    if (impl != IMPL_MPI && mpi_time_us > 0) snprintf(ratio, sizeof ratio, "%.2f", mpi_time_us / time_us);
    fprintf(out, "%12zu %12zu %8s %6s %9s %11.1f %8.3f %8.3f %7lld %7s\n", bytes, count,
            bench_dtype_name(o->dtype), bench_op_name(o->op),
            (device >= 0 ? gpu_impl_names : impl_names)[impl], time_us, algbw,
            busbw, wrong, ratio);
    fflush(out);
    if (csv)
        fprintf(csv, "%zu,%zu,%s,%s,%s,%d,%.3f,%.5f,%.5f,%lld,%s\n", bytes, count,
                bench_dtype_name(o->dtype), bench_op_name(o->op),
                (device >= 0 ? gpu_impl_names : impl_names)[impl], size, time_us,
                algbw, busbw, wrong, ratio[0] == '-' ? "" : ratio);
}

/* One hvd row's phases, kept for the section after the table. */
typedef struct phase_row {
    size_t bytes;
    int impl;
    double phases[HVDC_N_PHASES];
} phase_row;

/* Where the hvd rows' calls spent their time, by size: rank 0's mean us per call in each phase
 * (runtime/phases.h), so a fixed cost that holds a size's busbw down shows where it is. */
static void print_phases(const phase_row *rows, size_t n) {
    if (n == 0) return;
    printf("# where an hvd call's time went (rank 0, mean us per call over the timed calls):\n"
           "#   queued: submitted until the background thread takes it; negotiate: until rank "
           "0's answer;\n#   execute: %s; wake: until the caller runs again\n",
           device >= 0 ? "queueing it on the device (plan, kernels, NCCL, event); device: until "
                         "its finish was seen" : "the collective, until completed");
    for (size_t i = 0; i < n; i++) {
        double sum = 0.0;
        printf("# %12zu %9s", rows[i].bytes,
               (device >= 0 ? gpu_impl_names : impl_names)[rows[i].impl]);
        for (int p = 0; p < HVDC_N_PHASES; p++) {
            if (p == HVDC_PHASE_DEVICE && device < 0) continue; /* 0 for host calls */
            printf("  %s %.1f", hvdc__phase_name((hvdc_phase)p), rows[i].phases[p]);
            sum += rows[i].phases[p];
        }
        printf("  (sum %.1f)\n", sum);
    }
}

int main(int argc, char **argv) {
    int rank = 0, size = 1;
    options o;
    int started = bench_start(&argc, &argv, "allreduce_bench", parse_options, &o, &rank, &size);
    if (started != 0) return bench_exit_status(started);
    pattern p = {0};
    if (pattern_make(&p, &o, size) != 0) {
        if (rank == 0)
            fprintf(stderr, "allreduce_bench: %s %s over %d ranks cannot be checked exactly; use a "
                    "wider dtype (-d float) or fewer ranks\n", bench_op_name(o.op),
                    bench_dtype_name(o.dtype), size);
        MPI_Finalize();
        return 2;
    }
    size_t elem = hvd_dtype_size(o.dtype);
    buffers b = {{{NULL, NULL}, {NULL, NULL}}, {NULL, NULL}, NULL};
    enum { N_INPUTS = 4, CHECK_COPY = 4 }; /* all[]'s inputs; the host recv kept to check */
    void **all[6] = {&b.send[0][0], &b.send[0][1], &b.send[1][0], &b.send[1][1], &b.recv[0],
                     &b.recv[1]};
    for (int i = 0; i < 6; i++)
        if (!(*all[i] = malloc(o.max_bytes))) {
            fprintf(stderr, "allreduce_bench: out of memory for 6 x %zu bytes\n", o.max_bytes);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    size_t max_count = o.max_bytes / elem;
    for (int side = 0; side < 2; side++)
        for (int parity = 0; parity < 2; parity++)
            fill_input(b.send[side][parity], max_count, &o, &p, rank, parity);
    if (o.gpu) { /* the same inputs, on the device; one host buffer stays, to check results */
        if ((device = bench_device_open(MPI_COMM_WORLD, "allreduce_bench")) < 0) {
            MPI_Finalize();
            return 2;
        }
        for (int i = 0; i < 6; i++) {
            void *dev = bench_device_alloc(o.max_bytes);
            if (!dev || (i < N_INPUTS && bench_device_upload(dev, *all[i], o.max_bytes))) {
                fprintf(stderr, "allreduce_bench: out of device memory for 6 x %zu bytes\n",
                        o.max_bytes);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            if (i == CHECK_COPY) b.check = *all[i];
            else free(*all[i]);
            *all[i] = dev;
        }
    }

    FILE *csv = NULL;
    if (rank == 0 && o.csv) {
        csv = fopen(o.csv, "w");
        if (!csv) fprintf(stderr, "allreduce_bench: cannot write %s; continuing without CSV\n", o.csv);
        else fprintf(csv, "bytes,count,dtype,op,impl,ranks,time_us,algbw_gbs,busbw_gbs,wrong,vs_mpi\n");
    }
    int current = -1; /* the impl libhvdc runs with, -1 while not initialized */
    int first_hvd = -1;
    for (int i = IMPL_MPI - 1; i >= 0; i--)
        if (o.impl[i]) first_hvd = i;
    if (first_hvd >= 0) hvd_use(first_hvd, &current);
    if (o.impl[IMPL_MPI_THREAD] && device < 0 && !(handoff = bench_handoff_start(MPI_COMM_WORLD))) {
        fprintf(stderr, "allreduce_bench: cannot start the hand-off thread\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) {
        bench_print_settings(stdout, "allreduce_bench", size);
        printf("# impl:");
        for (int i = 0; i < IMPL_COUNT; i++)
            if (o.impl[i]) printf(" %s", impl_names[i]);
        printf("  dtype %s  op %s  iters %d  warmup %d  check %d  sizes %zu..%zu x%zu\n",
               bench_dtype_name(o.dtype), bench_op_name(o.op), o.iters, o.warmup, o.check,
               o.min_bytes, o.max_bytes, o.factor);
        printf("# time: median over iterations of the slowest rank's time for one blocking call "
               "(after MPI_Barrier); hvd and %s calls alternate\n", o.gpu ? "NCCL" : "MPI");
        if (o.gpu) printf("# --device gpu: CUDA device %d, device buffers; vs_mpi is against raw NCCL; results checked in the warm-up iterations\n", device);
        if (o.op == HVD_AVERAGE) printf("# mpi rows run MPI_SUM (MPI has no average)\n");
        if (bench_mpi_type(o.dtype) == MPI_DATATYPE_NULL)
            printf("# MPI has no %s type: no mpi rows; hvd-mpi falls back to the ring\n",
                   bench_dtype_name(o.dtype));
        printf("#\n# %10s %12s %8s %6s %9s %11s %8s %8s %7s %7s\n", "size", "count", "type",
               "redop", "impl", "time", "algbw", "busbw", "#wrong", "vs_mpi");
        printf("# %10s %12s %8s %6s %9s %11s %8s %8s %7s %7s\n", "(B)", "(elements)", "", "", "",
               "(us)", "(GB/s)", "(GB/s)", "", "busbw");
    }

    long long total_wrong = 0;
    double busbw_sum = 0.0;
    int busbw_rows = 0;
    double *mpi_all = malloc((size_t)o.iters * IMPL_COUNT * sizeof *mpi_all);
    phase_row *phase_rows = NULL;
    size_t n_phase_rows = 0, cap_phase_rows = 0;
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
        size_t count = bytes / elem;
        if (count == 0) continue;
        size_t n_mpi = 0;
        row rows[IMPL_COUNT] = {{0}};
        long long mpi_wrong = 0;
        int measured_mpi = 0;
        for (int impl = 0; impl < IMPL_MPI; impl++) {
            if (!o.impl[impl]) continue;
            hvd_use(impl, &current);
            run_pass(impl, o.impl[IMPL_MPI], count, &o, &p, &b, size, &rows[impl], &mpi_wrong,
                     mpi_all, &n_mpi);
            measured_mpi = 1;
        }
        if (handoff) {
            run_pass(IMPL_MPI_THREAD, o.impl[IMPL_MPI], count, &o, &p, &b, size,
                     &rows[IMPL_MPI_THREAD], &mpi_wrong, mpi_all, &n_mpi);
            measured_mpi = 1;
        }
        if (o.impl[IMPL_MPI] && !measured_mpi)
            run_pass(IMPL_MPI, 1, count, &o, &p, &b, size, &rows[IMPL_MPI], &mpi_wrong, mpi_all,
                     &n_mpi);
        double memcpy_us = o.impl[IMPL_MEMCPY] ? time_memcpy(&o, &b, count, rank) : 0.0;
        if (rank != 0) continue;
        size_t nbytes = count * elem;
        for (int impl = 0; impl < IMPL_MPI; impl++) {
            if (!o.impl[impl]) continue;
            print_row(stdout, csv, nbytes, count, &o, impl, rows[impl].time_us, rows[impl].wrong,
                      rows[impl].mpi_time_us, size);
            total_wrong += rows[impl].wrong;
            if (n_phase_rows == cap_phase_rows) {
                cap_phase_rows = cap_phase_rows ? 2 * cap_phase_rows : 32;
                phase_row *grown = realloc(phase_rows, cap_phase_rows * sizeof *grown);
                if (!grown) {
                    fprintf(stderr, "allreduce_bench: out of memory\n");
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
                phase_rows = grown;
            }
            phase_rows[n_phase_rows].bytes = nbytes;
            phase_rows[n_phase_rows].impl = impl;
            memcpy(phase_rows[n_phase_rows++].phases, rows[impl].phases, sizeof rows[impl].phases);
            busbw_sum += (double)nbytes / (rows[impl].time_us * 1e3) * 2.0 * (size - 1) / size;
            busbw_rows++;
        }
        if (handoff) {
            print_row(stdout, csv, nbytes, count, &o, IMPL_MPI_THREAD, rows[IMPL_MPI_THREAD].time_us,
                      rows[IMPL_MPI_THREAD].wrong, rows[IMPL_MPI_THREAD].mpi_time_us, size);
            total_wrong += rows[IMPL_MPI_THREAD].wrong;
        }
        if (o.impl[IMPL_MPI] && n_mpi > 0) {
            print_row(stdout, csv, nbytes, count, &o, IMPL_MPI, bench_median(mpi_all, n_mpi),
                      mpi_wrong, 0.0, size);
            total_wrong += mpi_wrong;
        }
        if (o.impl[IMPL_MEMCPY])
            print_row(stdout, csv, nbytes, count, &o, IMPL_MEMCPY, memcpy_us, 0, 0.0, size);
    }
    if (current >= 0) BENCH_CHECK_HVD(hvd_shutdown());
    bench_handoff_stop(handoff);
    BENCH_CHECK_MPI(MPI_Bcast(&total_wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        print_phases(phase_rows, n_phase_rows);
        printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        if (busbw_rows) printf("# Avg bus bandwidth (hvd rows) : %.3f GB/s\n#\n", busbw_sum / busbw_rows);
    }
    if (csv) fclose(csv);
    free(mpi_all);
    free(phase_rows);
    free(p.expected);
    for (int i = 0; i < 6; i++) {
        if (device >= 0) bench_device_free(*all[i]);
        else free(*all[i]);
    }
    if (device >= 0) {
        free(b.check);
        bench_device_close();
    }
    MPI_Finalize();
    return total_wrong ? 1 : 0;
}
