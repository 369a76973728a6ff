/*
 * negotiation_bench.c - what negotiation costs: time per round and bytes per round, against the
 * number of ranks, tensors per round and name length, with the response cache on and off.
 *
 * Each step submits `tensors` one-element float32 all-reduces at once (async), with names of
 * `name_len` bytes, and waits for all of them: the tensors are tiny, so the step is negotiation
 * and one fused all-reduce. The same names recur every step, as gradients do, so with the cache
 * on the steady state announces slots, not names. Rounds and bytes come from libhvdc's own
 * counters (hvdc__negotiation_stats: this binary links libhvdc's internal library for them).
 * Every result is checked (sum of rank + 1 over ranks); wrong results exit 1.
 *
 *   mpirun -np 4 build/benchmarks/negotiation_bench --tensors 1,10,100,1000 --name-len 16,128
 *
 * More ranks than cores is fine (say --oversubscribe and mpi_yield_when_idle): the ranks then
 * share cores and times grow with oversubscription, which the output says.
 * Runs on the main thread.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "runtime/runtime.h"

#define MAX_LIST 8

typedef struct options {
    int tensors[MAX_LIST], n_tensors;
    int name_len[MAX_LIST], n_name_len;
    int steps, warmup;
    const char *csv;
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: negotiation_bench [options]   (run under mpirun)\n"
            "  --tensors LIST   all-reduces per step, comma-separated (default 1,10,100,1000)\n"
            "  --name-len LIST  bytes per name (default 16,128)\n"
            "  --steps N        timed steps per setting (default 200)\n"
            "  --warmup N       untimed steps first (default 20)\n"
            "  --csv FILE       also write the rows as CSV (rank 0)\n"
            "Each setting runs with the response cache on (HVD_CACHE_CAPACITY=1024) and off (0).\n");
}

static int parse_ints(const char *text, int *out, int max, int lo, int hi) {
    int n = 0;
    for (const char *p = text; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi) return 0;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return n;
}

static int parse_option(void *out, const char *flag, const char *value) {
    options *o = out;
    if (strcmp(flag, "--tensors") == 0) return (o->n_tensors = parse_ints(value, o->tensors, MAX_LIST, 1, 100000)) > 0;
    if (strcmp(flag, "--name-len") == 0) return (o->n_name_len = parse_ints(value, o->name_len, MAX_LIST, 8, HVD_MAX_NAME_LEN)) > 0;
    if (strcmp(flag, "--steps") == 0) return (o->steps = atoi(value)) >= 1;
    if (strcmp(flag, "--warmup") == 0) return (o->warmup = atoi(value)) >= 0;
    if (strcmp(flag, "--csv") == 0) return (o->csv = value) != NULL;
    return 0;
}

static int parse_options(int argc, char **argv, void *out, int rank) {
    options *o = out;
    *o = (options){.tensors = {1, 10, 100, 1000}, .n_tensors = 4, .name_len = {16, 128},
                   .n_name_len = 2, .steps = 200, .warmup = 20};
    return bench_parse_options(argc, argv, rank, "negotiation_bench", usage, parse_option, o);
}

typedef struct result {
    double us_per_step, rounds_per_step, us_per_round;
    double r0_in, r0_out, worker_out; /* bytes per round */
    long wrong;
} result;

/* One setting: hvd_init with the cache on or off, steps, hvd_shutdown. */
static result run(const options *o, int tensors, int name_len, int cache, int rank, int size) {
    setenv("HVD_CACHE_CAPACITY", cache ? "1024" : "0", 1);
    BENCH_CHECK_HVD(hvd_init());
    char (*names)[HVD_MAX_NAME_LEN + 1] = calloc((size_t)tensors, sizeof *names);
    float *values = calloc((size_t)tensors, sizeof *values);
    hvd_handle *handles = calloc((size_t)tensors, sizeof *handles);
    double *times = calloc((size_t)o->steps, sizeof *times);
    if (!names || !values || !handles || !times) bench_fail_hvd(__FILE__, __LINE__, "calloc", HVD_ERR_NO_MEMORY);
    for (int i = 0; i < tensors; i++) {
        int k = snprintf(names[i], sizeof names[i], "grad.%d.", i);
        memset(names[i] + k, 'x', (size_t)(name_len > k ? name_len - k : 0));
        names[i][name_len > k ? name_len : k] = '\0';
    }
    result res = {0};
    uint64_t r0 = 0, s0 = 0, g0 = 0;
    for (int step = -o->warmup; step < o->steps; step++) {
        if (step == 0) BENCH_CHECK_HVD(hvdc__negotiation_stats(&r0, &s0, &g0));
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now_us();
        for (int i = 0; i < tensors; i++) {
            values[i] = (float)(rank + 1);
            BENCH_CHECK_HVD(hvd_allreduce_async(names[i], &values[i], &values[i], 1, HVD_FLOAT32,
                                                HVD_SUM, NULL, &handles[i]));
        }
        for (int i = 0; i < tensors; i++) BENCH_CHECK_HVD(hvd_wait(&handles[i]));
        if (step >= 0) times[step] = bench_now_us() - t0;
        for (int i = 0; i < tensors; i++) res.wrong += values[i] != (float)(size * (size + 1) / 2);
    }
    uint64_t r1, s1, g1;
    BENCH_CHECK_HVD(hvdc__negotiation_stats(&r1, &s1, &g1));
    bench_max_over_ranks(times, (size_t)o->steps, MPI_COMM_WORLD);
    res.us_per_step = bench_median(times, (size_t)o->steps);
    double rounds = (double)(r1 - r0), mine[3] = {rounds, (double)(s1 - s0), (double)(g1 - g0)};
    double all[3 * 64] = {0};
    MPI_Gather(mine, 3, MPI_DOUBLE, size <= 64 ? all : NULL, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    res.rounds_per_step = rounds / o->steps;
    res.us_per_round = res.us_per_step / (res.rounds_per_step > 0 ? res.rounds_per_step : 1);
    if (rank == 0 && rounds > 0) {
        res.r0_in = all[2] / rounds;
        res.r0_out = all[1] / rounds;
        for (int r = 1; r < size && r < 64; r++)
            if (all[3 * r + 1] / all[3 * r] > res.worker_out) res.worker_out = all[3 * r + 1] / all[3 * r];
    }
    MPI_Allreduce(MPI_IN_PLACE, &res.wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    BENCH_CHECK_HVD(hvd_shutdown());
    free(names);
    free(values);
    free(handles);
    free(times);
    return res;
}

int main(int argc, char **argv) {
    int rank = 0, size = 1;
    options o;
    int started = bench_start(&argc, &argv, "negotiation_bench", parse_options, &o, &rank, &size);
    if (started != 0) return bench_exit_status(started);
    FILE *csv = rank == 0 && o.csv ? fopen(o.csv, "w") : NULL;
    if (rank == 0) {
        bench_print_settings(stdout, "negotiation_bench", size);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        printf("# %d ranks on %ld cores%s; each step: N one-element all-reduces, async, then wait\n",
               size, cores, size > cores ? " (oversubscribed: ranks share cores, times include waiting for one)" : "");
        printf("# bytes per round: what rank 0 received and sent, and the most a worker sent\n#\n");
        printf("%6s %8s %8s %6s %10s %10s %10s %10s %10s %10s %7s\n", "ranks", "tensors", "name_len",
               "cache", "us/step", "rounds", "us/round", "r0_in/rnd", "r0_out/rnd", "w_out/rnd", "#wrong");
        if (csv) fprintf(csv, "ranks,tensors,name_len,cache,us_per_step,rounds_per_step,us_per_round,r0_in_bytes,r0_out_bytes,worker_out_bytes,wrong\n");
    }
    long wrong = 0;
    for (int t = 0; t < o.n_tensors; t++)
        for (int l = 0; l < o.n_name_len; l++)
            for (int cache = 1; cache >= 0; cache--) {
                result r = run(&o, o.tensors[t], o.name_len[l], cache, rank, size);
                wrong += r.wrong;
                if (rank != 0) continue;
                printf("%6d %8d %8d %6s %10.1f %10.2f %10.1f %10.0f %10.0f %10.0f %7ld\n", size,
                       o.tensors[t], o.name_len[l], cache ? "on" : "off", r.us_per_step,
                       r.rounds_per_step, r.us_per_round, r.r0_in, r.r0_out, r.worker_out, r.wrong);
                fflush(stdout);
                if (csv) fprintf(csv, "%d,%d,%d,%s,%.2f,%.3f,%.2f,%.0f,%.0f,%.0f,%ld\n", size, o.tensors[t],
                                 o.name_len[l], cache ? "on" : "off", r.us_per_step, r.rounds_per_step,
                                 r.us_per_round, r.r0_in, r.r0_out, r.worker_out, r.wrong);
            }
    if (rank == 0) printf("# wrong results: %ld %s\n", wrong, wrong ? "FAIL" : "OK");
    if (csv) fclose(csv);
    MPI_Finalize();
    return wrong != 0;
}
