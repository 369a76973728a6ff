/*
 * test_optim_gpu.c - the optimizer's device kernels (gpu_optim.h) against the host rules
 * (update.c): SGD (plain, momentum, Nesterov, weight decay), Adam and AdamW, and the gradient
 * accumulation, float32 and float64, several steps on a few thousand elements of
 * index-dependent data. Both sides evaluate update_rules.h's formulas and the kernels are built
 * with --fmad=false, so the results must be bitwise equal; the test prints the max difference.
 * Also: the calls give the caller's thread its current device back (with two GPUs or more the
 * thread sits on the last one while they run on device 0). Single process, no MPI traffic. Without a visible CUDA device it prints SKIPPED and exits 77.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/optim_gpu.h"
#include "train/optimizer.h"

#define N 5003 /* not a multiple of the block size */

static int failures = 0;

#define CUDA_MUST(call)                                                                      \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
                    cudaGetErrorString(e_));                                                 \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define HVD_MUST(call)                                                                       \
    do {                                                                                     \
        hvd_status s_ = (call);                                                              \
        if (s_ != HVD_OK) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, hvd_last_error()); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static double value(int i, int step, int which) { /* varied, sign-changing, exact in float */
    return (double)((i * 37 + step * 11 + which * 5) % 97 - 48) / 64.0;
}

/* One configuration: `steps` updates on host and device from the same data; compares. */
static void run(const char *label, hvd_dtype dtype, hvd_optimizer_kind kind, double momentum,
                int nesterov, double wd, int passes) {
    size_t es = dtype == HVD_FLOAT32 ? 4 : 8;
    int slots = hvdc__opt_state_slots(kind, momentum);
    unsigned char *hp = malloc(N * es), *hg = malloc(N * es), *ha = calloc(N, es);
    unsigned char *back = malloc(N * es);
    double *hs = calloc((size_t)N * 2, sizeof(double)), *hs_back = malloc((size_t)N * 2 * 8);
    void *dp, *dg, *da, *ds;
    HVD_MUST(hvdc__gpu_optim_alloc(0, N * es, &dp));
    HVD_MUST(hvdc__gpu_optim_alloc(0, N * es, &dg));
    HVD_MUST(hvdc__gpu_optim_alloc(0, N * es, &da));
    HVD_MUST(hvdc__gpu_optim_alloc(0, (size_t)N * 2 * sizeof(double), &ds));
    for (int i = 0; i < N; i++) {
        if (dtype == HVD_FLOAT32) ((float *)hp)[i] = (float)value(i, 0, 1);
        else ((double *)hp)[i] = value(i, 0, 1);
    }
    CUDA_MUST(cudaMemcpy(dp, hp, N * es, cudaMemcpyHostToDevice));
    for (int t = 1; t <= 4; t++) {
        for (int pass = 0; pass < passes; pass++) {
            for (int i = 0; i < N; i++) {
                if (dtype == HVD_FLOAT32) ((float *)hg)[i] = (float)value(i, t * 3 + pass, 2);
                else ((double *)hg)[i] = value(i, t * 3 + pass, 2);
            }
            CUDA_MUST(cudaMemcpy(dg, hg, N * es, cudaMemcpyHostToDevice));
            int finish = pass == passes - 1;
            if (passes > 1) {
                HVD_MUST(hvdc__gpu_accumulate(0, NULL, da, dg, N, dtype, finish, passes));
                for (int i = 0; i < N; i++) { /* optimizer.c's host arithmetic */
                    if (dtype == HVD_FLOAT32) {
                        float *a = (float *)ha, *g = (float *)hg;
                        if (finish) g[i] = (a[i] + g[i]) / (float)passes, a[i] = 0.0f;
                        else a[i] += g[i];
                    } else {
                        double *a = (double *)ha, *g = (double *)hg;
                        if (finish) g[i] = (a[i] + g[i]) / passes, a[i] = 0.0;
                        else a[i] += g[i];
                    }
                }
            }
        }
        if (kind == HVD_OPT_SGD) {
            hvdc__sgd_update(hp, hg, slots ? hs : NULL, N, dtype, 0.05, momentum, nesterov, wd);
            HVD_MUST(hvdc__gpu_sgd_step(0, NULL, dp, dg, slots ? ds : NULL, N, dtype, 0.05,
                                        momentum, nesterov, wd));
        } else {
            int dec = kind == HVD_OPT_ADAMW;
            hvdc__adam_update(hp, hg, hs, hs + N, N, dtype, 0.01, 0.9, 0.999, 1e-8, wd, dec,
                              (uint64_t)t);
            HVD_MUST(hvdc__gpu_adam_step(0, NULL, dp, dg, ds, (double *)ds + N, N, dtype, 0.01,
                                         0.9, 0.999, 1e-8, wd, dec, (uint64_t)t));
        }
    }
    CUDA_MUST(cudaMemcpy(back, dp, N * es, cudaMemcpyDeviceToHost)); /* legacy stream: ordered */
    CUDA_MUST(cudaMemcpy(hs_back, ds, (size_t)N * 2 * 8, cudaMemcpyDeviceToHost));
    double maxdiff = 0.0;
    for (int i = 0; i < N; i++) {
        double a = dtype == HVD_FLOAT32 ? ((float *)hp)[i] : ((double *)hp)[i];
        double b = dtype == HVD_FLOAT32 ? ((float *)back)[i] : ((double *)back)[i];
        maxdiff = fmax(maxdiff, fabs(a - b));
    }
    for (int i = 0; i < N * slots; i++) maxdiff = fmax(maxdiff, fabs(hs[i] - hs_back[i]));
    int ok = memcmp(hp, back, N * es) == 0 && memcmp(hs, hs_back, (size_t)N * slots * 8) == 0;
    printf("%-28s %s  %s, maxdiff = %g\n", label, dtype == HVD_FLOAT32 ? "f32" : "f64",
           ok ? "TENSOR OK" : "MISMATCH", maxdiff);
    failures += !ok;
    hvdc__gpu_optim_free(0, dp), hvdc__gpu_optim_free(0, dg);
    hvdc__gpu_optim_free(0, da), hvdc__gpu_optim_free(0, ds);
    free(hp), free(hg), free(ha), free(back), free(hs), free(hs_back);
}

/* The optimizer's CUDA calls run on device 0 and leave the thread on the device it was on. */
static void keeps_current_device(void) {
    int n = 0, now = -1;
    CUDA_MUST(cudaGetDeviceCount(&n));
    CUDA_MUST(cudaSetDevice(n - 1));
    void *mem = NULL, *ev = NULL;
    HVD_MUST(hvdc__gpu_optim_alloc(0, 64, &mem));
    HVD_MUST(hvdc__gpu_optim_event_create(0, &ev));
    HVD_MUST(hvdc__gpu_optim_event_record(0, ev, NULL));
    HVD_MUST(hvdc__gpu_accumulate(0, NULL, mem, mem, 8, HVD_FLOAT32, 0, 1));
    hvdc__gpu_optim_event_destroy(0, ev);
    hvdc__gpu_optim_free(0, mem);
    CUDA_MUST(cudaGetDevice(&now));
    if (now != n - 1) failures++;
    printf("current device kept (%d of %d GPUs): %s\n", n - 1, n, now == n - 1 ? "OK" : "FAIL");
    CUDA_MUST(cudaSetDevice(0));
}

int main(void) {
    if (hvdc__gpu_optim_check("test_optim_gpu", 0) != HVD_OK) {
        printf("SKIPPED: %s\n", hvd_last_error());
        return 77;
    }
    keeps_current_device();
    hvd_dtype dtypes[2] = {HVD_FLOAT32, HVD_FLOAT64};
    for (int k = 0; k < 2; k++) {
        hvd_dtype d = dtypes[k];
        run("sgd", d, HVD_OPT_SGD, 0.0, 0, 0.0, 1);
        run("sgd momentum + wd", d, HVD_OPT_SGD, 0.9, 0, 1e-3, 1);
        run("sgd nesterov", d, HVD_OPT_SGD, 0.9, 1, 0.0, 1);
        run("sgd momentum, 3 passes", d, HVD_OPT_SGD, 0.9, 0, 0.0, 3);
        run("adam + L2", d, HVD_OPT_ADAM, 0.0, 0, 1e-2, 1);
        run("adamw", d, HVD_OPT_ADAMW, 0.0, 0, 1e-2, 2);
    }
    printf("test_optim_gpu: %s\n", failures ? "FAIL" : "OK");
    return failures ? 1 : 0;
}
