/*
 * latency_bench.c - what a small all-reduce costs: the runtime's fixed overhead (submission,
 * negotiation round, completion) with no bandwidth to hide it, against MPI_Allreduce of the same
 * size in the same run.
 *
 *   single  one blocking 4-byte hvd_allreduce (one int32), vs one 4-byte MPI_Allreduce
 *   batch   --batch (100) concurrent 4-byte hvd_allreduce_async with distinct names, then wait
 *           all; vs the same number of blocking MPI_Allreduce calls in a loop, and vs as many
 *           MPI_Iallreduce followed by one MPI_Waitall
 *
 * Each measurement starts after an MPI_Barrier; an iteration's time is the slowest rank's; rows
 * give the median and 90th/99th percentiles over iterations, hvd and MPI iterations alternating.
 * Inputs are rank- and iteration-dependent int32 values, x_r = (r + 1) * (1 + (it + k) mod 97)
 * for the k-th tensor of a batch, and every result is checked against the exact sum; any
 * mismatch makes the exit status 1.
 * Main thread (libhvdc's background thread does the hvd work).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

typedef struct options {
    int iters, warmup, batch;
    const char *csv;
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: latency_bench [options]   (run under mpirun)\n"
            "  -n N        timed iterations of each measurement (default 1000; batches: n/10)\n"
            "  -w N        warm-up iterations (default 100)\n"
            "  --batch N   concurrent all-reduces per batch (default 100)\n"
            "  --csv FILE  also write the table as CSV\n"
            "  -h, --help  this text\n"
            "Rows: test, impl, time per call or batch (us: median, p90, p99), per all-reduce (us),\n"
            "hvd's median over MPI's (the cost multiple), #wrong. Exit status 1 if any result\n"
            "was wrong.\n");
}

/* One option (bench_parse_options walks argv). */
static int parse_option(void *out, const char *flag, const char *value) {
    options *o = out;
    int ok = 1;
    if (strcmp(flag, "-n") == 0) ok = (o->iters = atoi(value)) >= 1;
    else if (strcmp(flag, "-w") == 0) ok = (o->warmup = atoi(value)) >= 0;
    else if (strcmp(flag, "--batch") == 0) ok = (o->batch = atoi(value)) >= 1;
    else if (strcmp(flag, "--csv") == 0) o->csv = value;
    else ok = 0;
    return ok;
}

/* Defaults, then argv. @return 0 to run, 1 after --help, -1 on a bad option (message printed). */
static int parse_options(int argc, char **argv, void *out, int rank) {
    options *o = out;
    *o = (options){.iters = 1000, .warmup = 100, .batch = 100};
    return bench_parse_options(argc, argv, rank, "latency_bench", usage, parse_option, o);
}

typedef struct bench {
    int rank, size, batch;
    int32_t *send, *recv;          /* (batch) */
    hvd_handle *handles;           /* (batch) */
    MPI_Request *requests;         /* (batch) */
    char (*names)[32];             /* (batch) */
    long wrong;
} bench;

enum { HVD_SINGLE, MPI_SINGLE, HVD_BATCH, MPI_BATCH_LOOP, MPI_BATCH_IALLREDUCE, N_KINDS };
static const char *const kind_test[N_KINDS] = {"single", "single", "batch", "batch", "batch"};
static const char *const kind_impl[N_KINDS] = {"hvd", "mpi", "hvd-async", "mpi-loop", "mpi-iallreduce"};

static void fill(bench *b, int n, int it) {
    for (int k = 0; k < n; k++) {
        b->send[k] = (b->rank + 1) * (1 + (it + k) % 97);
        b->recv[k] = -1;
    }
}

static void check(bench *b, int n, int it) {
    for (int k = 0; k < n; k++) {
        int32_t want = (int32_t)(b->size * (b->size + 1) / 2 * (1 + (it + k) % 97));
        b->wrong += b->recv[k] != want;
    }
}

/* One timed iteration of kind; returns this rank's microseconds. */
static double run_once(bench *b, int kind, int it) {
    int n = kind == HVD_SINGLE || kind == MPI_SINGLE ? 1 : b->batch;
    fill(b, n, it);
    BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = bench_now_us();
    switch (kind) {
    case HVD_SINGLE:
        BENCH_CHECK_HVD(hvd_allreduce("latency.single", b->send, b->recv, 1, HVD_INT32, HVD_SUM));
        break;
    case MPI_SINGLE:
        BENCH_CHECK_MPI(MPI_Allreduce(b->send, b->recv, 1, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD));
        break;
    case HVD_BATCH:
        for (int k = 0; k < n; k++)
            BENCH_CHECK_HVD(hvd_allreduce_async(b->names[k], &b->send[k], &b->recv[k], 1, HVD_INT32,
                                                HVD_SUM, NULL, &b->handles[k]));
        for (int k = 0; k < n; k++) BENCH_CHECK_HVD(hvd_wait(&b->handles[k]));
        break;
    case MPI_BATCH_LOOP:
        for (int k = 0; k < n; k++)
            BENCH_CHECK_MPI(MPI_Allreduce(&b->send[k], &b->recv[k], 1, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD));
        break;
    case MPI_BATCH_IALLREDUCE:
        for (int k = 0; k < n; k++)
            BENCH_CHECK_MPI(MPI_Iallreduce(&b->send[k], &b->recv[k], 1, MPI_INT32_T, MPI_SUM,
                                           MPI_COMM_WORLD, &b->requests[k]));
        BENCH_CHECK_MPI(MPI_Waitall(n, b->requests, MPI_STATUSES_IGNORE));
        break;
    }
    double t = bench_now_us() - t0;
    check(b, n, it);
    return t;
}

int main(int argc, char **argv) {
    int rank = 0, size = 1;
    options o;
    int started = bench_start(&argc, &argv, "latency_bench", parse_options, &o, &rank, &size);
    if (started != 0) return bench_exit_status(started);
    BENCH_CHECK_HVD(hvd_init());
    bench b = {.rank = rank, .size = size, .batch = o.batch};
    b.send = calloc((size_t)o.batch, sizeof *b.send);
    b.recv = calloc((size_t)o.batch, sizeof *b.recv);
    b.handles = calloc((size_t)o.batch, sizeof *b.handles);
    b.requests = calloc((size_t)o.batch, sizeof *b.requests);
    b.names = calloc((size_t)o.batch, sizeof *b.names);
    int batch_iters = o.iters / 10 > 0 ? o.iters / 10 : 1;
    double *times[N_KINDS];
    for (int k = 0; k < N_KINDS; k++) times[k] = calloc((size_t)o.iters, sizeof *times[k]);
    if (!b.send || !b.recv || !b.handles || !b.requests || !b.names || !times[N_KINDS - 1]) {
        fprintf(stderr, "latency_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int k = 0; k < o.batch; k++) snprintf(b.names[k], sizeof b.names[k], "latency.batch.%d", k);

    /* single: hvd and MPI alternate; then batch: the three batch kinds alternate */
    for (int it = 0; it < o.warmup + o.iters; it++)
        for (int kind = HVD_SINGLE; kind <= MPI_SINGLE; kind++) {
            double t = run_once(&b, kind, it);
            if (it >= o.warmup) times[kind][it - o.warmup] = t;
        }
    for (int it = 0; it < o.warmup / 10 + batch_iters; it++)
        for (int kind = HVD_BATCH; kind <= MPI_BATCH_IALLREDUCE; kind++) {
            double t = run_once(&b, kind, it);
            if (it >= o.warmup / 10) times[kind][it - o.warmup / 10] = t;
        }
    BENCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &b.wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));

    FILE *csv = NULL;
    if (rank == 0) {
        bench_print_settings(stdout, "latency_bench", size);
        printf("# single: %d iterations (+%d warm-up); batch: %d iterations (+%d warm-up) of %d "
               "concurrent 4-byte all-reduces\n# time: slowest rank, after MPI_Barrier; "
               "hvd and MPI iterations alternate\n#\n", o.iters, o.warmup, batch_iters,
               o.warmup / 10, o.batch);
        printf("# %6s %14s %6s %10s %10s %10s %10s %8s\n", "test", "impl", "calls", "median",
               "p90", "p99", "per_call", "vs_mpi");
        printf("# %6s %14s %6s %10s %10s %10s %10s %8s\n", "", "", "", "(us)", "(us)", "(us)",
               "(us)", "time");
        if (o.csv && !(csv = fopen(o.csv, "w")))
            fprintf(stderr, "latency_bench: cannot write %s; continuing without CSV\n", o.csv);
        if (csv) fprintf(csv, "test,impl,ranks,calls,median_us,p90_us,p99_us,per_call_us,vs_mpi\n");
    }
    double median[N_KINDS], p90[N_KINDS], p99[N_KINDS];
    for (int kind = 0; kind < N_KINDS; kind++) {
        size_t n = (size_t)(kind <= MPI_SINGLE ? o.iters : batch_iters);
        bench_max_over_ranks(times[kind], n, MPI_COMM_WORLD);
        median[kind] = bench_median(times[kind], n);
        p90[kind] = bench_percentile(times[kind], n, 90);
        p99[kind] = bench_percentile(times[kind], n, 99);
    }
    for (int kind = 0; rank == 0 && kind < N_KINDS; kind++) {
        int calls = kind <= MPI_SINGLE ? 1 : o.batch;
        /* hvd rows: hvd's median over MPI's blocking one (how many times slower) */
        int base = kind == HVD_SINGLE ? MPI_SINGLE : kind == HVD_BATCH ? MPI_BATCH_LOOP : -1;
        char ratio[16] = "-";
        if (base >= 0) snprintf(ratio, sizeof ratio, "%.2f", median[kind] / median[base]);
        printf("  %6s %14s %6d %10.2f %10.2f %10.2f %10.3f %8s\n", kind_test[kind],
               kind_impl[kind], calls, median[kind], p90[kind], p99[kind], median[kind] / calls,
               ratio);
        if (csv)
            fprintf(csv, "%s,%s,%d,%d,%.3f,%.3f,%.3f,%.4f,%s\n", kind_test[kind], kind_impl[kind],
                    size, calls, median[kind], p90[kind], p99[kind], median[kind] / calls,
                    base >= 0 ? ratio : "");
    }
    if (rank == 0) printf("# Out of bounds values : %ld %s\n", b.wrong, b.wrong ? "FAILED" : "OK");
    if (csv) fclose(csv);
    BENCH_CHECK_HVD(hvd_shutdown());
    for (int k = 0; k < N_KINDS; k++) free(times[k]);
    free(b.send);
    free(b.recv);
    free(b.handles);
    free(b.requests);
    free(b.names);
    MPI_Finalize();
    return b.wrong ? 1 : 0;
}
