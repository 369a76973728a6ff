/*
 * latency_bench.c - what a small all-reduce costs: the runtime's fixed overhead (submission,
 * negotiation round, completion) with no bandwidth to hide it, against MPI_Allreduce of the same
 * size in the same run.
 *
 *   single  one blocking 4-byte hvd_allreduce (one int32), vs one 4-byte MPI_Allreduce; and
 *           mpi-thread: the same MPI_Allreduce handed to a helper thread while the caller
 *           sleeps (handoff.h), the floor of libhvdc's shape on this machine: what hvd costs
 *           over it is libhvdc's own (negotiation, bookkeeping), the rest is the two hand-offs
 *   batch   --batch (100) concurrent 4-byte hvd_allreduce_async with distinct names, then wait
 *           all; vs the same number of blocking MPI_Allreduce calls in a loop, and vs as many
 *           MPI_Iallreduce followed by one MPI_Waitall
 *
 * Each measurement starts after an MPI_Barrier; an iteration's time is the slowest rank's; rows
 * give the median and 90th/99th percentiles over iterations, hvd and MPI iterations alternating.
 * Inputs are rank- and iteration-dependent int32 values, x_r = (r + 1) * (1 + (it + k) mod 97)
 * for the k-th tensor of a batch, and every result is checked against the exact sum; any
 * mismatch makes the exit status 1.
 *
 * --device gpu: each all-reduce has its own 4-byte buffer on this rank's CUDA device (its local
 * rank; buffers 256 bytes apart, as cudaMalloc aligns), the hvd calls run libhvdc's device path
 * (options.device; hvd_wait returns once the device work is done) and the baseline is raw NCCL
 * on a communicator of the same ranks:
 *   single  hvd-gpu (4-byte hvd_allreduce_async + hvd_wait) vs nccl (one ncclAllReduce +
 *           cudaStreamSynchronize)
 *   batch   hvd-gpu-async (--batch concurrent calls, then wait all) vs nccl-loop (as many
 *           blocking ncclAllReduce calls) and vs nccl-group (all of them inside one
 *           ncclGroupStart/End, then one synchronize)
 * Inputs are copied to the device and results back in the warm-up iterations only (at least
 * one), where every result is checked as above, the results cleared to -1 first; timed
 * iterations copy nothing between host and device (allreduce_bench saw such a copy slow the
 * next call 2-4x). Without a usable GPU (or the GPU backend) it stops with exit status 2,
 * saying why.
 * Main thread (libhvdc's background thread does the hvd work).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_device.h"
#include "handoff.h"
#include "runtime/phases.h" /* the phase breakdown: this binary links libhvdc's internal library */

#define SLOT 64 /* --device gpu: int32s from one tensor's device buffer to the next (256 B) */

typedef struct options {
    int iters, warmup, batch;
    const char *csv;
    int gpu; /* --device gpu */
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: latency_bench [options]   (run under mpirun)\n"
            "  -n N        timed iterations of each measurement (default 1000; batches: n/10)\n"
            "  -w N        warm-up iterations (default 100)\n"
            "  --batch N   concurrent all-reduces per batch (default 100)\n"
            "  --csv FILE  also write the table as CSV\n"
            "  --device cpu|gpu  gpu: device buffers, libhvdc's NCCL path against raw NCCL\n"
            "              (single: one ncclAllReduce; batch: a loop of them, and all in one\n"
            "              NCCL group); results checked in the warm-up iterations\n"
            "  -h, --help  this text\n"
            "Rows: test, impl, time per call or batch (us: median, p90, p99), per all-reduce (us),\n"
            "hvd's median over MPI's (over NCCL's with --device gpu: the cost multiple). Exit\n"
            "status 1 if any result was wrong, 2 on an error or without a usable GPU.\n");
}

/* One option (bench_parse_options walks argv). */
static int parse_option(void *out, const char *flag, const char *value) {
    options *o = out;
    int ok = 1;
    if (strcmp(flag, "-n") == 0) ok = (o->iters = atoi(value)) >= 1;
    else if (strcmp(flag, "-w") == 0) ok = (o->warmup = atoi(value)) >= 0;
    else if (strcmp(flag, "--batch") == 0) ok = (o->batch = atoi(value)) >= 1;
    else if (strcmp(flag, "--csv") == 0) o->csv = value;
    else if (strcmp(flag, "--device") == 0) {
        ok = strcmp(value, "cpu") == 0 || strcmp(value, "gpu") == 0;
        o->gpu = strcmp(value, "gpu") == 0;
    } else ok = 0;
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
    int32_t *send, *recv;          /* (batch) on the host: inputs, and results to check */
    int device;                    /* --device gpu: the CUDA device, else -1 */
    int32_t *dev_send, *dev_recv;  /* --device gpu: (batch * SLOT) on the device, tensor k at
                                      k * SLOT; else NULL */
    int32_t *stage;                /* --device gpu: (batch * SLOT) host copy of a device buffer */
    size_t *offsets, *counts;      /* --device gpu: (batch) k * SLOT and 1, for the NCCL group */
    hvd_handle *handles;           /* (batch) */
    MPI_Request *requests;         /* (batch) */
    char (*names)[32];             /* (batch) */
    bench_handoff *handoff;        /* mpi-thread's helper (not with --device gpu) */
    long wrong;
} bench;

/* The MPI_ kinds are the baselines: raw NCCL with --device gpu (gpu_kind_impl). */
enum { HVD_SINGLE, MPI_SINGLE, MPI_SINGLE_THREAD, HVD_BATCH, MPI_BATCH_LOOP, MPI_BATCH_IALLREDUCE,
       N_KINDS };
static const char *const kind_test[N_KINDS] = {"single", "single", "single", "batch", "batch", "batch"};
static const char *const kind_impl[N_KINDS] = {"hvd", "mpi", "mpi-thread", "hvd-async", "mpi-loop",
                                               "mpi-iallreduce"};
static const char *const gpu_kind_impl[N_KINDS] = {"hvd-gpu", "nccl", "-", "hvd-gpu-async", "nccl-loop",
                                                   "nccl-group"};

static int is_single(int kind) { return kind <= MPI_SINGLE_THREAD; }

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

static void device_failed(const char *what) {
    fprintf(stderr, "latency_bench: %s failed\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* --device gpu: the n inputs to their device buffers, the results there set to -1. */
static void to_device(bench *b, int n) {
    size_t nbytes = (size_t)n * SLOT * sizeof(int32_t);
    for (int k = 0; k < n; k++) b->stage[(size_t)k * SLOT] = b->send[k];
    if (bench_device_upload(b->dev_send, b->stage, nbytes) != 0 ||
        bench_device_memset(b->dev_recv, 0xff, nbytes) != 0)
        device_failed("copying inputs to the device");
}

/* --device gpu: the n results back into recv. */
static void from_device(bench *b, int n) {
    if (bench_device_download(b->stage, b->dev_recv, (size_t)n * SLOT * sizeof(int32_t)) != 0)
        device_failed("copying results back");
    for (int k = 0; k < n; k++) b->recv[k] = b->stage[(size_t)k * SLOT];
}

/* Tensor k's buffers: on the host, or its device slot with --device gpu. */
static int32_t *send_at(const bench *b, int k) { return b->dev_send ? b->dev_send + (size_t)k * SLOT : &b->send[k]; }
static int32_t *recv_at(const bench *b, int k) { return b->dev_recv ? b->dev_recv + (size_t)k * SLOT : &b->recv[k]; }

static void nccl_call(int rc) {
    if (rc != 0) device_failed("ncclAllReduce");
}

/* One timed iteration of kind; returns this rank's microseconds. Results are checked when
 * checked is set (copied back first with --device gpu). */
static double run_once(bench *b, int kind, int it, int checked) {
    int n = is_single(kind) ? 1 : b->batch;
    int gpu = b->device >= 0;
    hvd_options opts = HVD_OPTIONS_INIT;
    opts.device = b->device;
    fill(b, n, it);
    if (gpu && checked) to_device(b, n);
    BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = bench_now_us();
    switch (kind) {
    case HVD_SINGLE:
        if (gpu) { /* the device path is the async call's (options.device) */
            BENCH_CHECK_HVD(hvd_allreduce_async("latency.single", send_at(b, 0), recv_at(b, 0), 1,
                                                HVD_INT32, HVD_SUM, &opts, &b->handles[0]));
            BENCH_CHECK_HVD(hvd_wait(&b->handles[0]));
        } else {
            BENCH_CHECK_HVD(hvd_allreduce("latency.single", b->send, b->recv, 1, HVD_INT32, HVD_SUM));
        }
        break;
    case MPI_SINGLE:
        if (gpu) nccl_call(bench_nccl_allreduce(send_at(b, 0), recv_at(b, 0), 1, HVD_INT32, HVD_SUM));
        else BENCH_CHECK_MPI(MPI_Allreduce(b->send, b->recv, 1, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD));
        break;
    case MPI_SINGLE_THREAD:
        BENCH_CHECK_MPI(bench_handoff_allreduce(b->handoff, b->send, b->recv, 1, MPI_INT32_T, MPI_SUM));
        break;
    case HVD_BATCH:
        for (int k = 0; k < n; k++)
            BENCH_CHECK_HVD(hvd_allreduce_async(b->names[k], send_at(b, k), recv_at(b, k), 1,
                                                HVD_INT32, HVD_SUM, gpu ? &opts : NULL,
                                                &b->handles[k]));
        for (int k = 0; k < n; k++) BENCH_CHECK_HVD(hvd_wait(&b->handles[k]));
        break;
    case MPI_BATCH_LOOP:
        for (int k = 0; k < n; k++) {
            if (gpu) nccl_call(bench_nccl_allreduce(send_at(b, k), recv_at(b, k), 1, HVD_INT32, HVD_SUM));
            else BENCH_CHECK_MPI(MPI_Allreduce(&b->send[k], &b->recv[k], 1, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD));
        }
        break;
    case MPI_BATCH_IALLREDUCE:
        if (gpu) {
            nccl_call(bench_nccl_allreduce_group(b->dev_send, b->dev_recv, b->offsets, b->counts,
                                                 (size_t)n, HVD_INT32, HVD_SUM));
            break;
        }
        for (int k = 0; k < n; k++)
            BENCH_CHECK_MPI(MPI_Iallreduce(&b->send[k], &b->recv[k], 1, MPI_INT32_T, MPI_SUM,
                                           MPI_COMM_WORLD, &b->requests[k]));
        BENCH_CHECK_MPI(MPI_Waitall(n, b->requests, MPI_STATUSES_IGNORE));
        break;
    }
    double t = bench_now_us() - t0;
    if (checked) {
        if (gpu) from_device(b, n);
        check(b, n, it);
    }
    return t;
}

/* Where the hvd rows' time went (runtime/phases.h), rank 0's mean µs per op and the largest
 * mean of any rank, for the single and the batch test. */
static void print_phases(double rank0[2][HVDC_N_PHASES], double max[2][HVDC_N_PHASES],
                         const uint64_t ops[2], int gpu) {
    printf("# where an hvd op's time goes (mean us per op; rank 0 / the largest of any rank):\n"
           "#   queued: submitted until the background thread takes it; negotiate: until rank 0's\n"
           "#   answer; execute: %s; wake: until the waiter runs\n",
           gpu ? "queueing it on the device (plan, kernels, NCCL, event); device: until its "
                 "finish was seen" : "the collective, until completed");
    for (int t = 0; t < 2; t++) {
        double sum = 0;
        printf("# %6s", t == 0 ? "single" : "batch");
        for (int p = 0; p < HVDC_N_PHASES; p++) {
            if (p == HVDC_PHASE_DEVICE && !gpu) continue; /* 0 for host ops */
            printf("  %s %.2f / %.2f", hvdc__phase_name((hvdc_phase)p), rank0[t][p], max[t][p]);
            sum += rank0[t][p];
        }
        printf("  (rank 0 sum %.2f, over %llu ops)\n", sum, (unsigned long long)ops[t]);
    }
}

/* --device gpu: opens this rank's device and makes the device buffers. @return 0, or -1 after
 * rank 0 printed why (every rank returns the same). */
static int device_setup(bench *b) {
    if ((b->device = bench_device_open(MPI_COMM_WORLD, "latency_bench")) < 0) return -1;
    size_t slots = (size_t)b->batch * SLOT;
    b->dev_send = bench_device_alloc(slots * sizeof(int32_t));
    b->dev_recv = bench_device_alloc(slots * sizeof(int32_t));
    b->stage = calloc(slots, sizeof *b->stage);
    b->offsets = calloc((size_t)b->batch, sizeof *b->offsets);
    b->counts = calloc((size_t)b->batch, sizeof *b->counts);
    if (!b->dev_send || !b->dev_recv || !b->stage || !b->offsets || !b->counts)
        device_failed("allocating the device buffers");
    for (int k = 0; k < b->batch; k++) {
        b->offsets[k] = (size_t)k * SLOT;
        b->counts[k] = 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int rank = 0, size = 1;
    options o;
    int started = bench_start(&argc, &argv, "latency_bench", parse_options, &o, &rank, &size);
    if (started != 0) return bench_exit_status(started);
    bench b = {.rank = rank, .size = size, .batch = o.batch, .device = -1};
    if (o.gpu && device_setup(&b) != 0) {
        MPI_Finalize();
        return 2;
    }
    BENCH_CHECK_HVD(hvd_init());
    if (!o.gpu && !(b.handoff = bench_handoff_start(MPI_COMM_WORLD))) {
        fprintf(stderr, "latency_bench: cannot start the hand-off thread\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    b.send = calloc((size_t)o.batch, sizeof *b.send);
    b.recv = calloc((size_t)o.batch, sizeof *b.recv);
    b.handles = calloc((size_t)o.batch, sizeof *b.handles);
    b.requests = calloc((size_t)o.batch, sizeof *b.requests);
    b.names = calloc((size_t)o.batch, sizeof *b.names);
    int batch_iters = o.iters / 10 > 0 ? o.iters / 10 : 1;
    /* warm-up iterations; on the device only they are checked, so there is at least one */
    int warmup = o.warmup, batch_warmup = o.warmup / 10;
    if (o.gpu) {
        warmup = warmup > 0 ? warmup : 1;
        batch_warmup = batch_warmup > 0 ? batch_warmup : 1;
    }
    double *times[N_KINDS];
    for (int k = 0; k < N_KINDS; k++) times[k] = calloc((size_t)o.iters, sizeof *times[k]);
    if (!b.send || !b.recv || !b.handles || !b.requests || !b.names || !times[N_KINDS - 1]) {
        fprintf(stderr, "latency_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int k = 0; k < o.batch; k++) snprintf(b.names[k], sizeof b.names[k], "latency.batch.%d", k);

    /* single: hvd and MPI alternate; then batch: the three batch kinds alternate. The phase
     * breakdown counts the timed hvd iterations of each. */
    double phases[2][HVDC_N_PHASES];
    uint64_t phase_ops[2]; /* rank 0's ops counted: the timed hvd iterations' */
    for (int it = 0; it < warmup + o.iters; it++)
        for (int kind = HVD_SINGLE; kind <= MPI_SINGLE; kind++) {
            if (it == warmup && kind == HVD_SINGLE) BENCH_CHECK_HVD(hvdc__phase_breakdown(o.gpu, phases[0], &phase_ops[0]));
            double t = run_once(&b, kind, it, !o.gpu || it < warmup);
            if (it >= warmup) times[kind][it - warmup] = t;
        }
    BENCH_CHECK_HVD(hvdc__phase_breakdown(o.gpu, phases[0], &phase_ops[0]));
    /* mpi-thread in a block of its own: alternating with hvd iterations slowed it 1.7x here
     * (9.0 -> 15.7 us; the helper and libhvdc's threads then land on each other's CPUs) */
    for (int it = 0; b.handoff && it < warmup + o.iters; it++) {
        double t = run_once(&b, MPI_SINGLE_THREAD, it, 1);
        if (it >= warmup) times[MPI_SINGLE_THREAD][it - warmup] = t;
    }
    for (int it = 0; it < batch_warmup + batch_iters; it++)
        for (int kind = HVD_BATCH; kind <= MPI_BATCH_IALLREDUCE; kind++) {
            if (it == batch_warmup && kind == HVD_BATCH) BENCH_CHECK_HVD(hvdc__phase_breakdown(o.gpu, phases[1], &phase_ops[1]));
            double t = run_once(&b, kind, it, !o.gpu || it < batch_warmup);
            if (it >= batch_warmup) times[kind][it - batch_warmup] = t;
        }
    BENCH_CHECK_HVD(hvdc__phase_breakdown(o.gpu, phases[1], &phase_ops[1]));
    double phases_max[2][HVDC_N_PHASES];
    BENCH_CHECK_MPI(MPI_Reduce(phases, phases_max, 2 * HVDC_N_PHASES, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    BENCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &b.wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));

    FILE *csv = NULL;
    if (rank == 0) {
        bench_print_settings(stdout, "latency_bench", size);
        printf("# single: %d iterations (+%d warm-up); batch: %d iterations (+%d warm-up) of %d "
               "concurrent 4-byte all-reduces\n# time: slowest rank, after MPI_Barrier; "
               "hvd and %s iterations alternate%s\n", o.iters, warmup, batch_iters,
               batch_warmup, o.batch, o.gpu ? "NCCL" : "MPI",
               b.handoff ? " (mpi-thread: after the single ones, alone)" : "");
        if (o.gpu)
            printf("# --device gpu: CUDA device %d, one 4-byte device buffer per all-reduce; "
                   "vs_mpi is against raw NCCL (ncclAllReduce + stream sync; nccl-group: the "
                   "batch in one NCCL group, one sync); results checked in the warm-up "
                   "iterations\n", b.device);
        printf("#\n");
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
        size_t n = (size_t)(is_single(kind) ? o.iters : batch_iters);
        bench_max_over_ranks(times[kind], n, MPI_COMM_WORLD);
        median[kind] = bench_median(times[kind], n);
        p90[kind] = bench_percentile(times[kind], n, 90);
        p99[kind] = bench_percentile(times[kind], n, 99);
    }
    for (int kind = 0; rank == 0 && kind < N_KINDS; kind++) {
        if (kind == MPI_SINGLE_THREAD && !b.handoff) continue;
        int calls = is_single(kind) ? 1 : o.batch;
        /* hvd rows and mpi-thread: the median over MPI's blocking one (how many times slower) */
        int base = kind == HVD_SINGLE || kind == MPI_SINGLE_THREAD ? MPI_SINGLE
                   : kind == HVD_BATCH ? MPI_BATCH_LOOP : -1;
        char ratio[16] = "-";
        if (base >= 0) snprintf(ratio, sizeof ratio, "%.2f", median[kind] / median[base]);
        const char *impl = (o.gpu ? gpu_kind_impl : kind_impl)[kind];
        printf("  %6s %14s %6d %10.2f %10.2f %10.2f %10.3f %8s\n", kind_test[kind], impl, calls,
               median[kind], p90[kind], p99[kind], median[kind] / calls, ratio);
        if (csv)
            fprintf(csv, "%s,%s,%d,%d,%.3f,%.3f,%.3f,%.4f,%s\n", kind_test[kind], impl,
                    size, calls, median[kind], p90[kind], p99[kind], median[kind] / calls,
                    base >= 0 ? ratio : "");
    }
    if (rank == 0 && b.handoff)
        printf("# hvd single over mpi-thread (libhvdc's own cost over the hand-offs its shape "
               "needs): %.2f us, %.2fx\n", median[HVD_SINGLE] - median[MPI_SINGLE_THREAD],
               median[HVD_SINGLE] / median[MPI_SINGLE_THREAD]);
    if (rank == 0) print_phases(phases, phases_max, phase_ops, o.gpu);
    if (rank == 0) printf("# Out of bounds values : %ld %s\n", b.wrong, b.wrong ? "FAILED" : "OK");
    if (csv) fclose(csv);
    BENCH_CHECK_HVD(hvd_shutdown());
    bench_handoff_stop(b.handoff);
    for (int k = 0; k < N_KINDS; k++) free(times[k]);
    free(b.send);
    free(b.recv);
    free(b.handles);
    free(b.requests);
    free(b.names);
    if (b.device >= 0) {
        bench_device_free(b.dev_send);
        bench_device_free(b.dev_recv);
        free(b.stage);
        free(b.offsets);
        free(b.counts);
        bench_device_close();
    }
    MPI_Finalize();
    return b.wrong ? 1 : 0;
}
