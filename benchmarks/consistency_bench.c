/*
 * consistency_bench.c - what the replica check costs (hvd_check_consistency), and what the
 * optimizer step pays for HVD_CHECK_CONSISTENCY when it is off.
 *
 *   --mode check  every rank holds a model's tensors (float32 host buffers, --model) and calls
 *                 hvd_check_consistency over all of them, -n times: the time per check (the
 *                 slowest rank's), against the baseline of one read of the same bytes on each
 *                 rank (a sum of their 64-bit words), in the same run. Checked while timed:
 *                 equal replicas give 0 differences; then the last rank changes one float
 *                 and the check must count exactly 1 (#wrong otherwise).
 *   --mode step   an SGD hvd_optimizer over the model, -n timed hvd_optimizer_step calls (the
 *                 gradients' all-reduces and the update); its median step time. Uses only
 *                 calls every libhvdc version has, so the same binary times an older library
 *                 (LD_LIBRARY_PATH) as the baseline: with HVD_CHECK_CONSISTENCY unset, the step
 *                 must not move. Checked: parameters equal on every rank afterwards.
 *
 *   hvdcrun -np 2 build/benchmarks/consistency_bench --mode check --model resnet50
 * Runs on the main thread; exit status 1 when a result was wrong.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "tensor_sets.h"

typedef struct options {
    const char *mode, *model;
    int iters, warmup;
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: consistency_bench [options]   (run under hvdcrun or mpirun)\n"
            "  --mode check|step  hvd_check_consistency or hvd_optimizer_step (default check)\n"
            "  --model NAME       tensors of: " TENSOR_SET_NAMES " (default resnet50)\n"
            "  -n N               timed iterations (default 10)\n"
            "  -w N               untimed iterations first (default 2)\n");
}

static int parse_option(void *out, const char *flag, const char *value) {
    options *o = out;
    if (strcmp(flag, "--mode") == 0)
        return (o->mode = value, strcmp(value, "check") == 0 || strcmp(value, "step") == 0);
    if (strcmp(flag, "--model") == 0) return (o->model = value) != NULL;
    if (strcmp(flag, "-n") == 0) return (o->iters = atoi(value)) >= 1;
    if (strcmp(flag, "-w") == 0) return (o->warmup = atoi(value)) >= 0;
    return 0;
}

static int parse_options(int argc, char **argv, void *out, int rank) {
    options *o = out;
    *o = (options){.mode = "check", .model = "resnet50", .iters = 10, .warmup = 2};
    return bench_parse_options(argc, argv, rank, "consistency_bench", usage, parse_option, o);
}

/* The model's tensors in one allocation, integer-valued floats that depend on the index. */
static float *model_values(const tensor_set *set) {
    float *v = malloc(set->total * sizeof *v);
    if (v == NULL) bench_fail_hvd(__FILE__, __LINE__, "malloc", HVD_ERR_NO_MEMORY);
    for (size_t i = 0; i < set->total; i++) v[i] = (float)(i % 1021);
    return v;
}

/* The baseline: one read of nbytes (a sum of 64-bit words, kept so it is not optimized out). */
static uint64_t read_all(const void *data, size_t nbytes) {
    const uint64_t *w = data;
    uint64_t sum = 0;
    for (size_t i = 0; i < nbytes / 8; i++) sum += w[i];
    return sum;
}

static long run_check(const options *o, const tensor_set *set, int rank, int size) {
    float *v = model_values(set);
    hvd_named_buffer *b = calloc(set->n, sizeof *b);
    double *check_us = calloc((size_t)o->iters, sizeof *check_us);
    double *read_us = calloc((size_t)o->iters, sizeof *read_us);
    if (!b || !check_us || !read_us)
        bench_fail_hvd(__FILE__, __LINE__, "calloc", HVD_ERR_NO_MEMORY);
    for (size_t i = 0, at = 0; i < set->n; at += set->counts[i++])
        b[i] = (hvd_named_buffer){set->names[i], v + at, set->counts[i] * sizeof(float)};
    long wrong = 0;
    volatile uint64_t sink = 0;
    for (int it = -o->warmup; it < o->iters; it++) {
        int differ = -1;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now_us();
        BENCH_CHECK_HVD(hvd_check_consistency(b, (int)set->n, 0, NULL, &differ));
        double t1 = bench_now_us();
        sink += read_all(v, set->total * sizeof *v);
        double t2 = bench_now_us();
        wrong += differ != 0;
        if (it >= 0) check_us[it] = t1 - t0, read_us[it] = t2 - t1;
    }
    int differ = -1;
    if (rank == size - 1) v[set->total / 2] += 1.0f;
    BENCH_CHECK_HVD(hvd_check_consistency(b, (int)set->n, 0, NULL, &differ));
    wrong += differ != (size > 1 ? 1 : 0);
    bench_max_over_ranks(check_us, (size_t)o->iters, MPI_COMM_WORLD);
    bench_max_over_ranks(read_us, (size_t)o->iters, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        double check = bench_median(check_us, (size_t)o->iters);
        double read = bench_median(read_us, (size_t)o->iters);
        double mb = (double)(set->total * sizeof *v) / 1e6;
        printf("# check: hvd_check_consistency over every tensor; read: one pass summing the "
               "same bytes (baseline); times are the slowest rank's, median of %d\n", o->iters);
        printf("%10s %8s %10s %10s %10s %10s %10s %7s\n", "model", "tensors", "MB/rank",
               "check_ms", "read_ms", "check/read", "GB/s", "#wrong");
        printf("%10s %8zu %10.1f %10.2f %10.2f %10.2f %10.2f %7ld\n", set->model, set->n, mb,
               check / 1e3, read / 1e3, check / read, mb * 1e3 / check, wrong);
    }
    free(v);
    free(b);
    free(check_us);
    free(read_us);
    return wrong;
}

static long run_step(const options *o, const tensor_set *set, int rank) {
    float *data = model_values(set), *grad = model_values(set);
    hvd_param *p = calloc(set->n, sizeof *p);
    double *us = calloc((size_t)o->iters, sizeof *us);
    if (!p || !us) bench_fail_hvd(__FILE__, __LINE__, "calloc", HVD_ERR_NO_MEMORY);
    for (size_t i = 0, at = 0; i < set->n; at += set->counts[i++])
        p[i] = (hvd_param){set->names[i], data + at, grad + at, set->counts[i], HVD_FLOAT32,
                           HVD_DEVICE_CPU};
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    hvd_optimizer *opt = NULL;
    BENCH_CHECK_HVD(hvd_optimizer_create(p, (int)set->n, &cfg, &opt));
    for (int it = -o->warmup; it < o->iters; it++) {
        for (size_t i = 0; i < set->total; i++) grad[i] = (float)((i + (size_t)rank) % 7);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now_us();
        BENCH_CHECK_HVD(hvd_optimizer_step(opt, NULL));
        if (it >= 0) us[it] = bench_now_us() - t0;
    }
    /* the replicas end equal: rank 0's first, middle and last values everywhere */
    float probe[3] = {data[0], data[set->total / 2], data[set->total - 1]}, mine[3];
    memcpy(mine, probe, sizeof mine);
    MPI_Bcast(probe, 3, MPI_FLOAT, 0, MPI_COMM_WORLD);
    long wrong = memcmp(probe, mine, sizeof mine) != 0;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    bench_max_over_ranks(us, (size_t)o->iters, MPI_COMM_WORLD);
    if (rank == 0) {
        const char *env = getenv("HVD_CHECK_CONSISTENCY");
        printf("# step: hvd_optimizer_step (SGD), the slowest rank's, %d steps; "
               "HVD_CHECK_CONSISTENCY=%s\n", o->iters, env ? env : "(unset)");
        printf("%10s %8s %12s %12s %12s %7s\n", "model", "tensors", "median_us", "p10_us",
               "p90_us", "#wrong");
        double med = bench_median(us, (size_t)o->iters);
        printf("%10s %8zu %12.1f %12.1f %12.1f %7ld\n", set->model, set->n, med,
               bench_percentile(us, (size_t)o->iters, 10),
               bench_percentile(us, (size_t)o->iters, 90), wrong);
    }
    BENCH_CHECK_HVD(hvd_optimizer_destroy(opt));
    free(data);
    free(grad);
    free(p);
    free(us);
    return wrong;
}

int main(int argc, char **argv) {
    int rank = 0, size = 1;
    options o;
    int started = bench_start(&argc, &argv, "consistency_bench", parse_options, &o, &rank, &size);
    if (started != 0) return bench_exit_status(started);
    tensor_set set;
    if (tensor_set_make(&set, o.model) != 0) {
        if (rank == 0) fprintf(stderr, "consistency_bench: unknown model '%s'\n", o.model);
        MPI_Finalize();
        return 2;
    }
    BENCH_CHECK_HVD(hvd_init());
    if (rank == 0) bench_print_settings(stdout, "consistency_bench", size);
    long wrong = strcmp(o.mode, "check") == 0 ? run_check(&o, &set, rank, size)
                                               : run_step(&o, &set, rank);
    if (rank == 0) printf("# wrong results: %ld %s\n", wrong, wrong ? "FAIL" : "OK");
    BENCH_CHECK_HVD(hvd_shutdown());
    tensor_set_free(&set);
    MPI_Finalize();
    return wrong != 0;
}
