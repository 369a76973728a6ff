/*
 * sim_kernels.c - libhvdc's CUDA kernels on the simulated device (see sim.h): the launchers of
 * gpu/kernels.h (the fusion buffer's batched copy-and-scale) and train/optim_kernels.h (the
 * optimizer's update rules and gradient accumulation), with the same checks and return codes
 * as the .cu files, queueing a host function that does each kernel's arithmetic on its stream.
 *
 * The arithmetic is the kernels' own: scaling widens float16/bfloat16 to float32 (float64
 * stays float64) and rounds back to nearest-even; the update rules are update_rules.h's, which
 * the kernels and update.c share. What the simulator checks is everything around them: the
 * order on the stream, the pointers, the counts, the block split's limits.
 * The launching thread (validates and queues); the stream's thread (runs).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/half.h"
#include "cuda_runtime_api.h"
#include "gpu/gpu_block_map.h"
#include "gpu/kernels.h"
#include "hvdc.h"
#include "sim.h"
#include "train/optim_kernels.h"
#include "train/update_rules.h"

/* A launch's result as the .cu launchers return it: cudaGetLastError() after the launch. */
static int launched(cudaError_t err) {
    if (err != cudaSuccess) (void)cudaGetLastError();
    return (int)err;
}

/* ---- the fusion buffer's copy-and-scale (gpu/kernels.cu) ---------------------------------- */

/* An integer as kernels.cu's scale_ints scales it: in double, truncated, clamped to [lo, hi]. */
static int64_t scale_int(int64_t x, double f, double lo, double hi) {
    double v = trunc((double)x * f);
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return hi >= 0x1p63 ? INT64_MAX : (int64_t)hi; /* (double)INT64_MAX is 2^63 */
    return (int64_t)v;
}

static void scale_segment(const hvdc_gpu_segment *seg, hvd_dtype dtype, double f) {
    for (uint64_t i = 0; i < seg->count; i++) {
        switch (dtype) {
        case HVD_UINT8: ((uint8_t *)seg->dst)[i] = (uint8_t)scale_int(((const uint8_t *)seg->src)[i], f, 0, 255); break;
        case HVD_INT8: ((int8_t *)seg->dst)[i] = (int8_t)scale_int(((const int8_t *)seg->src)[i], f, -128, 127); break;
        case HVD_INT16: ((int16_t *)seg->dst)[i] = (int16_t)scale_int(((const int16_t *)seg->src)[i], f, -32768, 32767); break;
        case HVD_UINT16: ((uint16_t *)seg->dst)[i] = (uint16_t)scale_int(((const uint16_t *)seg->src)[i], f, 0, 65535); break;
        case HVD_INT32: ((int32_t *)seg->dst)[i] = (int32_t)scale_int(((const int32_t *)seg->src)[i], f, INT32_MIN, INT32_MAX); break;
        case HVD_INT64: ((int64_t *)seg->dst)[i] = scale_int(((const int64_t *)seg->src)[i], f, (double)INT64_MIN, (double)INT64_MAX); break;
        case HVD_BOOL: break;
        case HVD_FLOAT16: {
            const uint16_t *s = seg->src;
            uint16_t *d = seg->dst;
            d[i] = hvdc__float_to_half(hvdc__half_to_float(s[i]) * (float)f);
            break;
        }
        case HVD_BFLOAT16: {
            const uint16_t *s = seg->src;
            uint16_t *d = seg->dst;
            d[i] = hvdc__float_to_bf16(hvdc__bf16_to_float(s[i]) * (float)f);
            break;
        }
        case HVD_FLOAT32: ((float *)seg->dst)[i] = ((const float *)seg->src)[i] * (float)f; break;
        case HVD_FLOAT64: ((double *)seg->dst)[i] = ((const double *)seg->src)[i] * f; break;
        }
    }
}

static void run_copy_scale(void *args) {
    const hvdc_gpu_batch *b = args;
    size_t elem = hvd_dtype_size((hvd_dtype)b->dtype);
    for (uint32_t s = 0; s < b->n; s++) {
        const hvdc_gpu_segment *seg = &b->seg[s];
        if (b->factor != 1.0)
            scale_segment(seg, (hvd_dtype)b->dtype, b->factor);
        else if (seg->src != seg->dst) /* overlapping segments are a bug: memcpy lets ASan say so */
            memcpy(seg->dst, seg->src, seg->count * elem);
    }
}

int hvdc__gpu_launch_copy_scale(const hvdc_gpu_batch *batch, int max_blocks, void *stream) {
    const int d = batch->dtype;
    if (batch->n == 0) return (int)cudaSuccess;
    if (d < 0 || d >= HVD_DTYPE_COUNT) return launched(cudaErrorInvalidValue);
    if (batch->factor != 1.0 && d == HVD_BOOL) return launched(cudaErrorInvalidValue);
    hvdc_gpu_block_map map; /* the .cu launch's limits on segments and blocks */
    if (hvdc__gpu_split_blocks(batch, max_blocks, &map) != HVD_OK)
        return launched(cudaErrorInvalidValue);
    /* stricter than a GPU, which faults later: every segment must be device memory */
    size_t elem = hvd_dtype_size((hvd_dtype)d);
    for (uint32_t s = 0; s < batch->n; s++)
        if (!sim_device_range(batch->seg[s].src, batch->seg[s].count * elem) ||
            !sim_device_range(batch->seg[s].dst, batch->seg[s].count * elem))
            return launched(cudaErrorInvalidValue);
    return launched(sim_enqueue((cudaStream_t)stream, run_copy_scale, batch, sizeof *batch));
}

/* ---- the optimizer's kernels (train/optim_kernels.cu) ------------------------------------- */

typedef struct update_args {
    int kind; /* which rule */
    int dtype;
    void *data, *grad;
    double *buf, *m, *v; /* SGD momentum; Adam moments */
    uint64_t count;
    double lr, momentum, beta1, beta2, eps, weight_decay, c1, c2;
    int nesterov, decoupled, finish, passes;
} update_args;

enum { RULE_SGD, RULE_ADAM, RULE_ACCUMULATE };

static double load(const update_args *a, const void *p, uint64_t i) {
    return a->dtype == HVD_FLOAT32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void store(const update_args *a, void *p, uint64_t i, double x) {
    if (a->dtype == HVD_FLOAT32) ((float *)p)[i] = (float)x;
    else ((double *)p)[i] = x;
}

/* accumulate_kernel: the arithmetic stays in the parameter's dtype, as on the host */
static void accumulate(const update_args *a) {
    if (a->dtype == HVD_FLOAT32) {
        float *acc = a->data, *g = a->grad;
        for (uint64_t i = 0; i < a->count; i++) {
            if (a->finish) g[i] = (acc[i] + g[i]) / (float)a->passes, acc[i] = 0.0f;
            else acc[i] += g[i];
        }
    } else {
        double *acc = a->data, *g = a->grad;
        for (uint64_t i = 0; i < a->count; i++) {
            if (a->finish) g[i] = (acc[i] + g[i]) / (double)a->passes, acc[i] = 0.0;
            else acc[i] += g[i];
        }
    }
}

static void run_update(void *args) {
    const update_args *a = args;
    if (a->kind == RULE_ACCUMULATE) {
        accumulate(a);
        return;
    }
    for (uint64_t i = 0; i < a->count; i++) {
        double p = load(a, a->data, i), g = load(a, a->grad, i);
        if (a->kind == RULE_SGD)
            p = hvdc__sgd_rule(p, g, a->buf ? &a->buf[i] : NULL, a->lr, a->momentum,
                               a->nesterov, a->weight_decay);
        else
            p = hvdc__adam_rule(p, g, &a->m[i], &a->v[i], a->lr, a->beta1, a->beta2, a->eps,
                                a->weight_decay, a->decoupled, a->c1, a->c2);
        store(a, a->data, i, p);
    }
}

static int launch_update(void *stream, const update_args *a) {
    if (a->count == 0) return (int)cudaSuccess;
    if (a->dtype != HVD_FLOAT32 && a->dtype != HVD_FLOAT64) return launched(cudaErrorInvalidValue);
    /* stricter than a GPU, which faults later: every array must be device memory */
    size_t elem = a->dtype == HVD_FLOAT32 ? 4 : 8, state = a->count * sizeof(double);
    if (!sim_device_range(a->data, a->count * elem) || !sim_device_range(a->grad, a->count * elem) ||
        (a->buf && !sim_device_range(a->buf, state)) || (a->m && !sim_device_range(a->m, state)) ||
        (a->v && !sim_device_range(a->v, state)))
        return launched(cudaErrorInvalidValue);
    return launched(sim_enqueue((cudaStream_t)stream, run_update, a, sizeof *a));
}

int hvdc__launch_sgd(void *stream, int dtype, void *data, const void *grad, double *buf,
                     uint64_t count, double lr, double momentum, int nesterov,
                     double weight_decay, int max_blocks) {
    (void)max_blocks;
    update_args a = {.kind = RULE_SGD, .dtype = dtype, .data = data, .grad = (void *)grad,
                     .buf = buf, .count = count, .lr = lr, .momentum = momentum,
                     .nesterov = nesterov, .weight_decay = weight_decay};
    return launch_update(stream, &a);
}

int hvdc__launch_adam(void *stream, int dtype, void *data, const void *grad, double *m,
                      double *v, uint64_t count, double lr, double beta1, double beta2,
                      double eps, double weight_decay, int decoupled, double c1, double c2,
                      int max_blocks) {
    (void)max_blocks;
    update_args a = {.kind = RULE_ADAM, .dtype = dtype, .data = data, .grad = (void *)grad,
                     .m = m, .v = v, .count = count, .lr = lr, .beta1 = beta1, .beta2 = beta2,
                     .eps = eps, .weight_decay = weight_decay, .decoupled = decoupled, .c1 = c1,
                     .c2 = c2};
    return launch_update(stream, &a);
}

int hvdc__launch_accumulate(void *stream, int dtype, void *accum, void *grad, uint64_t count,
                            int finish, int passes, int max_blocks) {
    (void)max_blocks;
    if (count == 0) return (int)cudaSuccess;
    if (passes < 1) return launched(cudaErrorInvalidValue);
    update_args a = {.kind = RULE_ACCUMULATE, .dtype = dtype, .data = accum, .grad = grad,
                     .count = count, .finish = finish, .passes = passes};
    return launch_update(stream, &a);
}
