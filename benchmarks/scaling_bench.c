/*
 * scaling_bench.c - a synthetic data-parallel training step: a "backward" pass whose layers cost
 * real compute (one OpenBLAS sgemm each), with every gradient handed to libhvdc the moment it
 * is final, so its all-reduce overlaps the layers still being differentiated. Reports step
 * time, throughput, scaling efficiency and how much communication the compute hid.
 *
 *   backward, last layer first:   gemm(t) ; write grad t ; grad_ready(t) -> all-reduce in flight
 *                                 gemm(t-1) ; ...                   (overlaps)
 *   step:                         hvd_optimizer_step: waits for every average, SGD update
 *   (--mode async: hvd_allreduce_async(HVD_AVERAGE) per layer, then hvd_wait on each; no update)
 *
 * Three kinds of step, all timed from an MPI_Barrier to the step's end, slowest rank, median:
 *   step          the above, on libhvdc over MPI_COMM_WORLD
 *   compute-only  the same step on libhvdc over MPI_COMM_SELF (np > 1 only): every rank still
 *                 computes at once and runs the np = 1 code path, but no byte crosses ranks.
 *                 It is this run's proxy for the np = 1 step (--baseline-ms gives a real one)
 *   comm-alone    the same all-reduces (hvd_allreduce_async AVERAGE of every gradient in
 *                 backward order, then wait all) with no compute, on MPI_COMM_WORLD
 * libhvdc runs over one communicator at a time, so rounds alternate a compute-only block
 * (hvd_init_comm(MPI_COMM_SELF)) and a world block (hvd_init) in which step and comm-alone
 * alternate; MPI stays up throughout (we initialize it with MPI_THREAD_MULTIPLE).
 *
 *   samples/s   = batch * np / step                  (batch is per rank)
 *   efficiency  = samples/s(np) / (np * samples/s(1)) = baseline / step
 *   hidden      = 1 - (step - compute_only) / comm_alone
 *
 * Compute: layer t gets --compute-ms * count_t / total of GEMM time, as one n_t x n_t x n_t
 * sgemm (n_t from a rate calibrated at start on all ranks at once; single-threaded OpenBLAS).
 * Writing the gradient (a streaming store per element) comes on top and is counted as compute.
 *
 * Correctness: rank r of R writes g = R*a + (2r - (R-1)) with a = (i mod 1021) + (7t + 5s) mod 1009
 * (step s, tensor t, element i): integers, so the sum R^2*a is exact in any order and the
 * average R*a is exact whatever the rounding of 1/R. Every element of every gradient is compared
 * after every step of every kind (untimed); any mismatch makes the exit status 1.
 * Main thread (libhvdc's background thread does the communication).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "tensor_sets.h"

#define PREFIX "scale"
#define PERIOD 1021 /* elements; prime */

typedef enum step_kind { KIND_STEP, KIND_COMPUTE, KIND_COMM, KIND_COUNT } step_kind;
static const char *const kind_names[KIND_COUNT] = {"step", "compute-only", "comm-alone"};

typedef struct options {
    const char *model;
    int async;         /* 0: DistributedOptimizer grad-ready hook; 1: hvd_allreduce_async */
    double compute_ms; /* GEMM time per step aimed at */
    int batch;         /* samples per rank per step */
    int steps, warmup, rounds;
    double baseline_ms; /* the np = 1 run's step; 0: use compute-only */
    double gflop;       /* GEMM work per step; 0: from compute_ms */
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: scaling_bench [options]   (run under mpirun, once with -np 1 and once with -np 2)\n"
            "  --model NAME       tensor set, one of %s (default resnet50)\n"
            "  --mode opt|async   opt: hvd_optimizer_grad_ready per layer + hvd_optimizer_step (SGD);\n"
            "                     async: hvd_allreduce_async(HVD_AVERAGE) per layer + wait all (default opt)\n"
            "  --compute-ms MS    GEMM time per step, spread over layers by size, calibrated on one\n"
            "                     rank alone at start (default 100)\n"
            "  --gflop G          GEMM work per step instead (no calibration); use the np = 1 run's\n"
            "                     value at np = 2 so both runs do the same work per rank\n"
            "  --batch N          samples per rank per step, for samples/s (default 32)\n"
            "  --steps N          timed steps of each kind (default 12)\n"
            "  --warmup N         untimed steps at the start of each block (default 1)\n"
            "  --rounds N         blocks of each kind, alternated (default 3)\n"
            "  --baseline-ms MS   step time of the -np 1 run: efficiency against it instead of\n"
            "                     against this run's compute-only step\n"
            "  -h, --help         this text\n"
            "Columns: step, compute-only and comm-alone medians (ms, slowest rank), samples/s\n"
            "(batch*np/step), efficiency (baseline/step), hidden (1-(step-compute)/comm), #wrong.\n",
            TENSOR_SET_NAMES);
}

/* @return 0 to run, 1 after --help, -1 on a bad option (message printed on rank 0). */
/* One option (bench_parse_options walks argv). */
static int parse_option(void *out, const char *flag, const char *value) {
    options *o = out;
    int ok = 1;
    if (strcmp(flag, "--model") == 0) {
        o->model = value;
    } else if (strcmp(flag, "--mode") == 0) {
        o->async = strcmp(value, "async") == 0;
        ok = o->async || strcmp(value, "opt") == 0;
    } else if (strcmp(flag, "--compute-ms") == 0) {
        o->compute_ms = atof(value);
        ok = o->compute_ms >= 0 && o->compute_ms < 1e6;
    } else if (strcmp(flag, "--batch") == 0) {
        ok = (o->batch = atoi(value)) >= 1;
    } else if (strcmp(flag, "--steps") == 0) {
        ok = (o->steps = atoi(value)) >= 1;
    } else if (strcmp(flag, "--warmup") == 0) {
        ok = (o->warmup = atoi(value)) >= 0;
    } else if (strcmp(flag, "--rounds") == 0) {
        ok = (o->rounds = atoi(value)) >= 1;
    } else if (strcmp(flag, "--gflop") == 0) {
        ok = (o->gflop = atof(value)) > 0 && o->gflop < 1e6;
    } else if (strcmp(flag, "--baseline-ms") == 0) {
        ok = (o->baseline_ms = atof(value)) > 0;
    } else {
        ok = 0;
    }
    return ok;
}

/* Defaults, then argv. @return 0 to run, 1 after --help, -1 on a bad option (message printed). */
static int parse_options(int argc, char **argv, void *out, int rank) {
    options *o = out;
    *o = (options){.model = "resnet50", .compute_ms = 100, .batch = 32, .steps = 12,
                   .warmup = 1, .rounds = 3};
    int parsed = bench_parse_options(argc, argv, rank, "scaling_bench", usage, parse_option, o);
    if (parsed != 0) return parsed;
    if (o->rounds > o->steps) o->rounds = o->steps;
    return 0;
}

/* ---- the model: parameters, gradients, per-layer GEMM sizes ----------------------------------- */

typedef struct model {
    tensor_set set;
    float *params;      /* (total) all parameters, tensor after tensor */
    float *grads;       /* (total) their gradients */
    size_t *offsets;    /* (n) element offset of each tensor */
    int *gemm_n;        /* (n) GEMM size of each layer's backward; 0: none */
    char (*comm_names)[TENSOR_NAME_LEN + 16]; /* (n) names for async / comm-alone all-reduces */
    float *a, *b, *c;   /* (max_n, max_n) GEMM scratch */
    int max_n;          /* capacity of the scratch, not the current largest n */
    hvd_handle *handles; /* (n) */
} model;

static int model_make(model *m, const char *name) {
    memset(m, 0, sizeof *m);
    if (tensor_set_make(&m->set, name) != 0) return -1;
    size_t n = m->set.n;
    m->offsets = malloc(n * sizeof *m->offsets);
    m->gemm_n = calloc(n, sizeof *m->gemm_n);
    m->comm_names = malloc(n * sizeof *m->comm_names);
    m->handles = calloc(n, sizeof *m->handles);
    m->params = calloc(m->set.total, sizeof(float));
    m->grads = calloc(m->set.total, sizeof(float));
    if (!m->offsets || !m->gemm_n || !m->comm_names || !m->handles || !m->params || !m->grads)
        return -1;
    for (size_t t = 0, off = 0; t < n; off += m->set.counts[t], t++) m->offsets[t] = off;
    return 0;
}

static void model_free(model *m) {
    tensor_set_free(&m->set);
    free(m->params);
    free(m->grads);
    free(m->offsets);
    free(m->gemm_n);
    free(m->comm_names);
    free(m->handles);
    free(m->a);
    free(m->b);
    free(m->c);
    memset(m, 0, sizeof *m);
}

/* Sizes each layer's GEMM for total_flops spread in proportion to tensor size. */
static int model_size_gemms(model *m, double total_flops) {
    int max_n = 0;
    for (size_t t = 0; t < m->set.n; t++) {
        double flops = total_flops * (double)m->set.counts[t] / (double)m->set.total;
        int n = (int)lround(cbrt(flops / 2.0));
        m->gemm_n[t] = n >= 2 ? n : 0;
        if (m->gemm_n[t] > max_n) max_n = m->gemm_n[t];
    }
    if (max_n > m->max_n) {
        size_t bytes = (size_t)max_n * (size_t)max_n * sizeof(float);
        free(m->a);
        free(m->b);
        free(m->c);
        m->a = malloc(bytes);
        m->b = malloc(bytes);
        m->c = malloc(bytes);
        if (!m->a || !m->b || !m->c) return -1;
        for (size_t i = 0; i < (size_t)max_n * (size_t)max_n; i++) {
            m->a[i] = (float)(i % 7) * 0.25f;
            m->b[i] = (float)(i % 5) * 0.5f;
        }
        m->max_n = max_n;
    }
    return 0;
}

static void layer_gemm(model *m, size_t t) {
    int n = m->gemm_n[t];
    if (n > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, m->a, n, m->b, n,
                    0.0f, m->c, n);
}

/* a(t, i, s) = (i mod PERIOD) + (7t + 5s) mod 1009; the gradient of rank r of R is R*a + 2r - (R-1).
 * PERIOD is prime, so a block moved by any power-of-two offset shows. Written and checked a
 * period at a time (memcpy / memcmp speed: the write is part of the timed compute). */
static void fill_period(float *row, size_t t, int s, int size, int offset) {
    float base = (float)size * (float)((7 * t + 5 * (size_t)s) % 1009) + (float)offset;
    for (int j = 0; j < PERIOD; j++) row[j] = base + (float)size * (float)j;
}

static void write_grad(model *m, size_t t, int s, int rank, int size) {
    float row[PERIOD], *g = m->grads + m->offsets[t];
    fill_period(row, t, s, size, 2 * rank - (size - 1));
    for (size_t i = 0, n = m->set.counts[t]; i < n; i += PERIOD)
        memcpy(g + i, row, (n - i < PERIOD ? n - i : PERIOD) * sizeof(float));
}

/* Elements of the gradients that are not the exact average R*a for step s. */
static long check_grads(const model *m, int s, int size) {
    long wrong = 0;
    float row[PERIOD];
    for (size_t t = 0; t < m->set.n; t++) {
        const float *g = m->grads + m->offsets[t];
        fill_period(row, t, s, size, 0);
        for (size_t i = 0, n = m->set.counts[t]; i < n; i += PERIOD) {
            size_t len = n - i < PERIOD ? n - i : PERIOD;
            if (memcmp(g + i, row, len * sizeof(float)) == 0) continue;
            for (size_t j = 0; j < len; j++) wrong += g[i + j] != row[j];
        }
    }
    return wrong;
}

/* ---- the three kinds of step -------------------------------------------------------------------- */

/* One step of kind on the current runtime (size ranks): its time in us (this rank's). */
static double run_step(model *m, hvd_optimizer *opt, step_kind kind, int async, int s, int rank,
                       int size, long *wrong) {
    size_t n = m->set.n;
    if (kind == KIND_COMM)
        for (size_t t = 0; t < n; t++) write_grad(m, t, s, rank, size); /* untimed */
    BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = bench_now_us();
    for (size_t t = n; t-- > 0;) {
        if (kind != KIND_COMM) {
            layer_gemm(m, t);
            write_grad(m, t, s, rank, size);
        }
        if (async || kind == KIND_COMM) {
            float *g = m->grads + m->offsets[t];
            BENCH_CHECK_HVD(hvd_allreduce_async(m->comm_names[t], g, g, m->set.counts[t],
                                                HVD_FLOAT32, HVD_AVERAGE, NULL, &m->handles[t]));
        } else {
            BENCH_CHECK_HVD(hvd_optimizer_grad_ready(opt, (int)t));
        }
    }
    if (async || kind == KIND_COMM) {
        for (size_t t = n; t-- > 0;) BENCH_CHECK_HVD(hvd_wait(&m->handles[t]));
    } else {
        int applied = 0;
        BENCH_CHECK_HVD(hvd_optimizer_step(opt, &applied));
        if (!applied) bench_fail_hvd(__FILE__, __LINE__, "hvd_optimizer_step applied nothing", HVD_ERR_INTERNAL);
    }
    double us = bench_now_us() - t0;
    *wrong += check_grads(m, s, size);
    return us;
}

static hvd_optimizer *optimizer_make(model *m) {
    hvd_param *params = calloc(m->set.n, sizeof *params);
    if (!params) bench_fail_hvd(__FILE__, __LINE__, "calloc", HVD_ERR_NO_MEMORY);
    for (size_t t = 0; t < m->set.n; t++)
        params[t] = (hvd_param){m->set.names[t], m->params + m->offsets[t],
                                m->grads + m->offsets[t], m->set.counts[t], HVD_FLOAT32,
                                HVD_DEVICE_CPU};
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    cfg.lr = 1e-6;
    cfg.name_prefix = PREFIX;
    hvd_optimizer *opt = NULL;
    BENCH_CHECK_HVD(hvd_optimizer_create(params, (int)m->set.n, &cfg, &opt));
    free(params);
    return opt;
}

/* One block: libhvdc up on comm (MPI_COMM_NULL: world), warm-up, then count steps of each kind
 * in kinds[] (alternating), times appended to times[kind] at *filled[kind]. */
static void run_block(model *m, const options *o, MPI_Comm comm, const step_kind *kinds,
                      int n_kinds, int count, int *step_no, double **times, int *filled,
                      long *wrong) {
    int rank = 0, size = 1;
    if (comm == MPI_COMM_NULL) BENCH_CHECK_HVD(hvd_init());
    else BENCH_CHECK_HVD(hvd_init_comm(comm));
    BENCH_CHECK_HVD(hvd_rank(&rank));
    BENCH_CHECK_HVD(hvd_size(&size));
    hvd_optimizer *opt = o->async ? NULL : optimizer_make(m);
    for (int i = 0; i < o->warmup + count; i++)
        for (int k = 0; k < n_kinds; k++) {
            double us = run_step(m, opt, kinds[k], o->async, (*step_no)++, rank, size, wrong);
            if (i >= o->warmup) times[kinds[k]][filled[kinds[k]]++] = us;
        }
    BENCH_CHECK_HVD(hvd_optimizer_destroy(opt));
    BENCH_CHECK_HVD(hvd_shutdown());
}

/* Sets the GEMM sizes: for o->gflop per step if given, else so that one backward's GEMMs take
 * about o->compute_ms on rank 0 running alone (the others wait), so that an np = 1 and an np = 2
 * run do the same work per rank. @return the GFLOP per step asked for, before each layer's n is
 * rounded (the same on every rank; --gflop with it gives the same sizes). */
static double calibrate(model *m, const options *o) {
    double flops = o->gflop > 0 ? o->gflop * 1e9 : o->compute_ms * 1e-3 * 20e9; /* guess 20 GFLOP/s */
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int iter = 0; iter < 4 && o->gflop <= 0 && o->compute_ms > 0 && rank == 0; iter++) {
        if (model_size_gemms(m, flops) != 0) bench_fail_hvd(__FILE__, __LINE__, "malloc", HVD_ERR_NO_MEMORY);
        double t0 = bench_now_us();
        for (size_t t = m->set.n; t-- > 0;) layer_gemm(m, t);
        double ms = (bench_now_us() - t0) * 1e-3;
        if (ms > 0) flops *= o->compute_ms / ms;
    }
    if (o->gflop <= 0 && o->compute_ms <= 0) flops = 0;
    /* Open MPI spins in a blocking wait and would take a core from rank 0's measurement: the
     * others test and sleep instead (a benchmark's one-off wait, not a pattern for the library) */
    MPI_Request req;
    BENCH_CHECK_MPI(MPI_Ibcast(&flops, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req));
    for (int done = 0;;) {
        BENCH_CHECK_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (model_size_gemms(m, flops) != 0) bench_fail_hvd(__FILE__, __LINE__, "malloc", HVD_ERR_NO_MEMORY);
    return flops * 1e-9;
}

/* ---- main --------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int rank = 0, size = 1;
    options o;
    int started = bench_start(&argc, &argv, "scaling_bench", parse_options, &o, &rank, &size);
    if (started != 0) return bench_exit_status(started);
    openblas_set_num_threads(1); /* the job's cores are for the ranks and libhvdc's threads */
    model m;
    if (model_make(&m, o.model) != 0) {
        if (rank == 0) fprintf(stderr, "scaling_bench: unknown model '%s' (known: %s) or out of memory\n", o.model, TENSOR_SET_NAMES);
        model_free(&m);
        MPI_Finalize();
        return 2;
    }
    for (size_t t = 0; t < m.set.n; t++)
        snprintf(m.comm_names[t], sizeof m.comm_names[t], PREFIX ".ar.%s", m.set.names[t]);
    double gflop = calibrate(&m, &o);
    int with_gemm = 0, largest = 0;
    double gflop_done = 0;
    for (size_t t = 0; t < m.set.n; t++) {
        with_gemm += m.gemm_n[t] > 0;
        if (m.gemm_n[t] > largest) largest = m.gemm_n[t];
        gflop_done += 2e-9 * pow(m.gemm_n[t], 3);
    }

    if (rank == 0) {
        bench_print_settings(stdout, "scaling_bench", size);
        printf("# model %s: %zu tensors, %zu floats (%.1f MB of gradients per step)\n", m.set.model,
               m.set.n, m.set.total, (double)m.set.total * 4e-6);
        printf("# mode %s  batch %d/rank  steps %d of each kind in %d rounds (+%d warm-up per block)\n",
               o.async ? "async (hvd_allreduce_async AVERAGE per layer, wait all; no update)"
                       : "opt (hvd_optimizer_grad_ready per layer, hvd_optimizer_step: SGD)",
               o.batch, o.steps, o.rounds, o.warmup);
        if (o.gflop > 0) printf("# compute: --gflop %.6f of sgemm per step", gflop);
        else printf("# compute: %.0f ms of sgemm per step asked, calibrated on rank 0 alone: --gflop %.6f", o.compute_ms, gflop);
        printf(" (%.4f after rounding sizes); %d of %zu layers have a GEMM (n x n x n), largest n = %d; "
               "%s, 1 thread\n", gflop_done, with_gemm, m.set.n, largest, openblas_get_config());
        printf("# times: median over steps of the slowest rank, from an MPI_Barrier to the step's end; "
               "compute-only = the same step on libhvdc over MPI_COMM_SELF%s\n",
               size > 1 ? "" : " (np = 1: the step itself)");
        printf("#\n");
        fflush(stdout);
    }

    /* rounds: [compute-only block on MPI_COMM_SELF,] world block alternating step / comm-alone */
    double *times[KIND_COUNT];
    int filled[KIND_COUNT] = {0}, step_no = 0;
    for (int k = 0; k < KIND_COUNT; k++)
        if (!(times[k] = calloc((size_t)o.steps + (size_t)o.rounds, sizeof(double))))
            bench_fail_hvd(__FILE__, __LINE__, "calloc", HVD_ERR_NO_MEMORY);
    long wrong = 0;
    for (int r = 0; r < o.rounds; r++) {
        int count = o.steps / o.rounds + (r < o.steps % o.rounds);
        const step_kind self_kinds[] = {KIND_COMPUTE}, world_kinds[] = {KIND_STEP, KIND_COMM};
        if (size > 1)
            run_block(&m, &o, MPI_COMM_SELF, self_kinds, 1, count, &step_no, times, filled, &wrong);
        run_block(&m, &o, MPI_COMM_NULL, world_kinds, 2, count, &step_no, times, filled, &wrong);
    }
    double med[KIND_COUNT], lo[KIND_COUNT], hi[KIND_COUNT];
    for (int k = 0; k < KIND_COUNT; k++) {
        bench_max_over_ranks(times[k], (size_t)filled[k], MPI_COMM_WORLD);
        med[k] = bench_median(times[k], (size_t)filled[k]) * 1e-3;
        lo[k] = bench_percentile(times[k], (size_t)filled[k], 0) * 1e-3;
        hi[k] = bench_percentile(times[k], (size_t)filled[k], 100) * 1e-3;
    }
    if (size == 1) med[KIND_COMPUTE] = med[KIND_STEP];
    BENCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));

    if (rank == 0) {
        double step = med[KIND_STEP], compute = med[KIND_COMPUTE], comm = med[KIND_COMM];
        double sps = o.batch * size / (step * 1e-3);
        double base = o.baseline_ms > 0 ? o.baseline_ms : compute;
        char eff[16] = "-", hidden[16] = "-", eff_c[16] = "-";
        if (size > 1 || o.baseline_ms > 0) snprintf(eff, sizeof eff, "%.3f", base / step);
        if (size > 1 && o.baseline_ms > 0) snprintf(eff_c, sizeof eff_c, "%.3f", compute / step);
        if (size > 1) snprintf(hidden, sizeof hidden, "%.3f", 1.0 - (step - compute) / comm);
        printf("# baseline for efficiency: %s\n",
               o.baseline_ms > 0 ? "--baseline-ms (the np = 1 run's step)"
               : size > 1        ? "this run's compute-only step (proxy for np = 1; pass --baseline-ms for a measured one)"
                                 : "none (np = 1 is the baseline)");
        printf("# %8s %5s %3s %5s %9s %9s %9s %10s %10s %6s %6s %7s\n", "model", "mode", "np",
               "batch", "step", "compute", "comm", "samples/s", "base_sps", "eff", "hidden", "#wrong");
        printf("# %8s %5s %3s %5s %9s %9s %9s %10s %10s %6s %6s %7s\n", "", "", "", "/rank", "(ms)",
               "(ms)", "(ms)", "(global)", "(np=1)", "", "", "");
        printf("  %8s %5s %3d %5d %9.2f %9.2f %9.2f %10.1f %10.1f %6s %6s %7ld\n", m.set.model,
               o.async ? "async" : "opt", size, o.batch, step, compute, comm, sps,
               o.batch / (base * 1e-3), eff, hidden, wrong);
        if (eff_c[0] != '-') printf("# efficiency against this run's compute-only step: %s\n", eff_c);
        for (int k = 0; k < KIND_COUNT; k++)
            if (filled[k])
                printf("# %-12s %2d steps: median %.2f ms, min %.2f, max %.2f\n", kind_names[k],
                       filled[k], med[k], lo[k], hi[k]);
        if (size == 1)
            printf("# next: the same with -np 2 and --gflop %.6f --baseline-ms %.2f\n", gflop, step);
        printf("# Out of bounds values : %ld %s\n", wrong, wrong ? "FAILED" : "OK");
    }
    for (int k = 0; k < KIND_COUNT; k++) free(times[k]);
    model_free(&m);
    MPI_Finalize();
    return wrong ? 1 : 0;
}
