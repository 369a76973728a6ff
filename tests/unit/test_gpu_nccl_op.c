/*
 * Unit test: which NCCL reduction a device all-reduce becomes (gpu_plan.h's
 * hvdc__gpu_reduce_plan and hvdc__gpu_allreduce_sequence), on a fake device that behaves like
 * NCCL 2.28.9, bug included (issue 17): an out-of-place ncclAvg on a one-rank communicator
 * leaves the last 1-3 elements wrong.
 *
 * Each simulated rank is a thread running the real sequence against its own fake device; the
 * fake all-reduce is a rendezvous of the threads (every rank's source read before any rank's
 * destination is written, as NCCL does), so in place and out of place behave as on a GPU.
 * For every dtype and op, one tensor and three fused, in place and out of place, counts that
 * are not multiples of 2, 4, 8 or 16, 1 to 4 ranks, with and without scaling, the results are
 * compared with an independent reference computed here from every rank's inputs, and:
 *   - NCCL never sees an out-of-place average (nor a floating-point one at all);
 *   - with one rank NCCL is not called: the result is the input.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "check.h"
#include "gpu/gpu_plan.h"

#define MAX_RANKS 4

/* ---- element access ------------------------------------------------------------------- */

static size_t esize(hvd_dtype d) {
    return hvd_dtype_size(d);
}
static int is_float(hvd_dtype d) { return d >= HVD_FLOAT16 && d <= HVD_FLOAT64; }

static double get(const void *b, hvd_dtype d, size_t i) {
    switch (d) {
    case HVD_UINT8: return ((const uint8_t *)b)[i];
    case HVD_INT8: return ((const int8_t *)b)[i];
    case HVD_INT32: return ((const int32_t *)b)[i];
    case HVD_INT64: return (double)((const int64_t *)b)[i];
    case HVD_FLOAT16: return hvdc__half_to_float(((const uint16_t *)b)[i]);
    case HVD_BFLOAT16: return hvdc__bf16_to_float(((const uint16_t *)b)[i]);
    case HVD_FLOAT32: return ((const float *)b)[i];
    case HVD_FLOAT64: return ((const double *)b)[i];
    case HVD_INT16: return ((const int16_t *)b)[i];
    case HVD_UINT16: return ((const uint16_t *)b)[i];
    case HVD_BOOL: return ((const uint8_t *)b)[i];
    }
    return 0;
}

/* Rounds v to d (integers: v is already integral and in range). */
static void set(void *b, hvd_dtype d, size_t i, double v) {
    switch (d) {
    case HVD_UINT8: ((uint8_t *)b)[i] = (uint8_t)(int64_t)v; break;
    case HVD_INT8: ((int8_t *)b)[i] = (int8_t)(int64_t)v; break;
    case HVD_INT32: ((int32_t *)b)[i] = (int32_t)(int64_t)v; break;
    case HVD_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
    case HVD_FLOAT16: ((uint16_t *)b)[i] = hvdc__float_to_half((float)v); break;
    case HVD_BFLOAT16: ((uint16_t *)b)[i] = hvdc__float_to_bf16((float)v); break;
    case HVD_FLOAT32: ((float *)b)[i] = (float)v; break;
    case HVD_FLOAT64: ((double *)b)[i] = v; break;
    case HVD_INT16: ((int16_t *)b)[i] = (int16_t)(int64_t)v; break;
    case HVD_UINT16: ((uint16_t *)b)[i] = (uint16_t)(int64_t)v; break;
    case HVD_BOOL: ((uint8_t *)b)[i] = (uint8_t)(v != 0); break;
    }
}

/* Rank r's input i: integers that keep every sum and product exact in every dtype. */
static double input(hvd_dtype d, hvd_reduce_op op, int r, size_t tensor, size_t i) {
    size_t k = i * 31 + (size_t)r * 17 + tensor * 5;
    if (d == HVD_BOOL) return (double)(k % 5 != 0); /* mostly true: and and or both vary */
    if (op == HVD_PRODUCT) return (double)(1 + k % 3);
    if (d == HVD_UINT8) return (double)(k % 41);
    return (double)(k % 41) - 20.0;
}

/* ---- the fake device: one per simulated rank, NCCL as a rendezvous of them --------------- */

typedef struct world {
    int size;
    pthread_barrier_t barrier;
    const void *src[MAX_RANKS];
    atomic_int nccl_calls, avg_out_of_place, avg_float, bad_scale;
} world;

typedef struct device {
    world *w;
    int rank;
    void *fusion;
    size_t fusion_bytes;
} device;

static hvd_status f_wait(void *self, void *event) {
    (void)self, (void)event;
    return HVD_OK;
}

static hvd_status f_buffer(void *self, size_t nbytes, void **buf) {
    device *d = self;
    if (nbytes > d->fusion_bytes) {
        free(d->fusion);
        d->fusion = calloc(1, nbytes);
        d->fusion_bytes = nbytes;
    }
    *buf = d->fusion;
    return HVD_OK;
}

/* As kernels.cu: a byte copy at factor 1, else scale in float (double for float64). */
static hvd_status f_copy(void *self, const hvdc_gpu_batch *b) {
    device *dev = self;
    hvd_dtype d = (hvd_dtype)b->dtype;
    if (b->factor != 1.0 && !is_float(d)) {
        atomic_fetch_add(&dev->w->bad_scale, 1);
        return HVD_ERR_INVALID_ARG;
    }
    for (uint32_t s = 0; s < b->n; s++) {
        const hvdc_gpu_segment *g = &b->seg[s];
        if (b->factor == 1.0) {
            memmove(g->dst, g->src, g->count * esize(d));
            continue;
        }
        for (uint64_t i = 0; i < g->count; i++) {
            double x = get(g->src, d, i);
            set(g->dst, d, i, d == HVD_FLOAT64 ? x * b->factor : (double)((float)x * (float)b->factor));
        }
    }
    return HVD_OK;
}

static hvd_status f_allreduce(void *self, const void *src, void *dst, size_t count,
                              hvd_dtype d, hvd_reduce_op op) {
    device *dev = self;
    world *w = dev->w;
    if (dev->rank == 0) atomic_fetch_add(&w->nccl_calls, 1);
    if (op == HVD_AVERAGE && src != dst) atomic_fetch_add(&w->avg_out_of_place, 1);
    if (op == HVD_AVERAGE && is_float(d)) atomic_fetch_add(&w->avg_float, 1);
    w->src[dev->rank] = src;
    pthread_barrier_wait(&w->barrier);
    double *tmp = malloc((count ? count : 1) * sizeof *tmp);
    for (size_t i = 0; i < count; i++) {
        double acc = get(w->src[0], d, i);
        for (int r = 1; r < w->size; r++) {
            double v = get(w->src[r], d, i);
            switch (op) {
            case HVD_SUM: case HVD_AVERAGE: acc += v; break;
            case HVD_PRODUCT: acc *= v; break;
            case HVD_MIN: acc = v < acc ? v : acc; break;
            case HVD_MAX: acc = v > acc ? v : acc; break;
            case HVD_ADASUM: break; /* not element-wise */
            }
        }
        if (op == HVD_AVERAGE) acc = trunc(acc / w->size); /* ncclAvg on integers */
        tmp[i] = acc;
    }
    pthread_barrier_wait(&w->barrier); /* every source read before any destination written */
    for (size_t i = 0; i < count; i++) set(dst, d, i, tmp[i]);
    if (w->size == 1 && op == HVD_AVERAGE && src != dst) /* NCCL 2.28.9, issue 17 */
        for (size_t i = count > 3 ? count - 3 : 0; i < count; i++) set(dst, d, i, get(dst, d, i) + 1);
    free(tmp);
    return HVD_OK;
}

/* ---- one case --------------------------------------------------------------------------- */

typedef struct rank_job {
    device dev;
    hvd_dtype dtype;
    hvd_reduce_op op;
    double pre, post;
    size_t n;
    size_t direct_bytes; /* a tensor this large is reduced where it lies (gpu_plan.h) */
    hvdc_gpu_tensor t[3];
    hvd_status st;
} rank_job;

static void *run_rank(void *arg) {
    rank_job *j = arg;
    hvdc_gpu_ops ops = {&j->dev, f_wait, f_buffer, f_copy, f_allreduce, NULL, NULL}; /* no groups */
    hvdc_gpu_reduce_plan plan;
    const char *why = "";
    j->st = hvdc__gpu_reduce_plan(j->dtype, j->op, j->pre, j->post, j->dev.w->size, 22809, &plan,
                                  &why);
    if (j->st == HVD_OK)
        j->st = hvdc__gpu_allreduce_sequence(&ops, j->t, j->n, j->dtype, &plan, j->dev.w->size,
                                             0, 1, j->direct_bytes, NULL);
    return NULL;
}

/* What every rank must hold: our documented semantics, from every rank's inputs. */
static double reference(hvd_dtype d, hvd_reduce_op op, int size, size_t tensor, size_t i,
                        double pre, double post) {
    if (d == HVD_BOOL) { /* hvdc.h: sum and max are or, product and min are and */
        int and_op = op == HVD_MIN || op == HVD_PRODUCT, acc = and_op;
        for (int r = 0; r < size; r++) {
            int v = input(d, op, r, tensor, i) != 0;
            acc = and_op ? acc && v : acc || v;
        }
        return acc;
    }
    double acc = op == HVD_PRODUCT ? 1 : op == HVD_MIN ? INFINITY : op == HVD_MAX ? -INFINITY : 0;
    for (int r = 0; r < size; r++) {
        double v = input(d, op, r, tensor, i) * pre;
        switch (op) {
        case HVD_SUM: case HVD_AVERAGE: acc += v; break;
        case HVD_PRODUCT: acc *= v; break;
        case HVD_MIN: acc = v < acc ? v : acc; break;
        case HVD_MAX: acc = v > acc ? v : acc; break;
        case HVD_ADASUM: break; /* not element-wise */
        }
    }
    if (op == HVD_AVERAGE) acc = is_float(d) ? acc / size : trunc(acc / size);
    return acc * post;
}

static int cases, wrong_cases;

static void run_case(hvd_dtype d, hvd_reduce_op op, int size, size_t n, size_t direct_bytes,
                     size_t count, int in_place, double pre, double post) {
    world w = {.size = size};
    pthread_barrier_init(&w.barrier, NULL, (unsigned)size);
    rank_job jobs[MAX_RANKS];
    pthread_t threads[MAX_RANKS];
    size_t counts[3] = {count, count / 2 + 1, 3};
    for (int r = 0; r < size; r++) {
        rank_job *j = &jobs[r];
        *j = (rank_job){.dev = {&w, r, NULL, 0}, .dtype = d, .op = op, .pre = pre, .post = post,
                        .n = n, .direct_bytes = direct_bytes};
        for (size_t k = 0; k < n; k++) {
            void *send = malloc(counts[k] * esize(d)), *recv = in_place ? send : malloc(counts[k] * esize(d));
            for (size_t i = 0; i < counts[k]; i++) set(send, d, i, input(d, op, r, k, i));
            if (!in_place) memset(recv, 0xA5, counts[k] * esize(d));
            j->t[k] = (hvdc_gpu_tensor){send, recv, counts[k]};
        }
    }
    for (int r = 0; r < size; r++) pthread_create(&threads[r], NULL, run_rank, &jobs[r]);
    for (int r = 0; r < size; r++) pthread_join(threads[r], NULL);

    size_t wrong = 0;
    double maxdiff = 0;
    /* half types: the average's division happens before NCCL's sum, each value rounded */
    double tol = d == HVD_FLOAT16 || d == HVD_BFLOAT16 ? 2e-2 : d == HVD_FLOAT32 ? 1e-6 : 1e-12;
    for (int r = 0; r < size; r++) {
        CHECK_TRUE(jobs[r].st == HVD_OK, "status %d", (int)jobs[r].st);
        for (size_t k = 0; k < n; k++)
            for (size_t i = 0; i < counts[k]; i++) {
                double got = get(jobs[r].t[k].recv, d, i);
                double want = reference(d, op, size, k, i, pre, post);
                double diff = fabs(got - want);
                maxdiff = diff > maxdiff ? diff : maxdiff;
                if (diff > (is_float(d) ? tol * (1 + fabs(want)) : 0)) wrong++;
            }
    }
    cases++;
    if (wrong) wrong_cases++;
    CHECK_TRUE(wrong == 0, "dtype %d op %d size %d n %zu (direct from %zu B) count %zu %s pre %g "
               "post %g: %zu wrong, maxdiff %g", (int)d, (int)op, size, n, direct_bytes, count,
               in_place ? "in place" : "out of place", pre, post, wrong, maxdiff);
    CHECK_TRUE(atomic_load(&w.avg_out_of_place) == 0, "NCCL got an out-of-place average "
               "(dtype %d size %d n %zu)", (int)d, size, n);
    CHECK_TRUE(atomic_load(&w.avg_float) == 0, "NCCL got a floating-point average (dtype %d)",
               (int)d);
    CHECK_TRUE(size > 1 || atomic_load(&w.nccl_calls) == 0, "NCCL called with one rank "
               "(dtype %d op %d n %zu)", (int)d, (int)op, n);
    CHECK_TRUE(atomic_load(&w.bad_scale) == 0, "a scale on an integer dtype");
    for (int r = 0; r < size; r++) {
        for (size_t k = 0; k < n; k++) {
            if (jobs[r].t[k].recv != jobs[r].t[k].send) free(jobs[r].t[k].recv);
            free((void *)jobs[r].t[k].send);
        }
        free(jobs[r].dev.fusion);
    }
    pthread_barrier_destroy(&w.barrier);
}

/* The plan alone: what NCCL is asked to do, for each dtype and op. */
static void test_plans(void) {
    hvdc_gpu_reduce_plan p;
    const char *why = "";
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_FLOAT32, HVD_AVERAGE, 1, 2, 4, 22809, &p, &why) == HVD_OK &&
               p.op == HVD_SUM && p.prescale == 1 && p.postscale == 0.5 && p.call_nccl &&
               !p.in_place_only, "float32 average: a sum, divided on the way out");
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_FLOAT16, HVD_AVERAGE, 1, 1, 4, 22809, &p, &why) == HVD_OK &&
               p.op == HVD_SUM && p.prescale == 0.25 && p.postscale == 1,
               "float16 average: divided on the way in, as the host path does");
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_INT32, HVD_AVERAGE, 1, 1, 4, 22809, &p, &why) == HVD_OK &&
               p.op == HVD_AVERAGE && p.in_place_only, "int32 average: ncclAvg, in place only");
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_INT32, HVD_AVERAGE, 1, 1, 1, 22809, &p, &why) == HVD_OK &&
               !p.call_nccl, "one rank: no NCCL call");
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_INT8, HVD_AVERAGE, 1, 1, 2, 20900, &p, &why) ==
               HVD_ERR_UNSUPPORTED, "integer average needs ncclAvg");
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_FLOAT64, HVD_MAX, 1, 1, 0, 22809, &p, &why) ==
               HVD_ERR_INVALID_ARG, "zero ranks refused");
}

/* Which device a rank uses (the runtime's refusal of a device it lacks starts here). */
static void test_device_choice(void) {
    int dev = 7;
    CHECK_TRUE(hvdc__gpu_choose_device(-1, 3, 2, &dev) == HVD_OK && dev == 1, "local rank 3 of 2");
    CHECK_TRUE(hvdc__gpu_choose_device(0, 3, 2, &dev) == HVD_OK && dev == 0, "asked for 0");
    CHECK_TRUE(hvdc__gpu_choose_device(1, 1, 1, &dev) == HVD_ERR_CUDA && dev == -1 &&
               strstr(hvd_last_error(), "device 1 is not visible") &&
               strstr(hvd_last_error(), "1 CUDA device"), "device 1 of 1: %s", hvd_last_error());
    CHECK_TRUE(hvdc__gpu_choose_device(-1, 0, 0, &dev) == HVD_ERR_CUDA &&
               strstr(hvd_last_error(), "no CUDA device visible"), "none visible");
}

int main(void) {
    test_plans();
    test_device_choice();
    /* NCCL has no 16-bit integers, and bool has no average: refused by the plan */
    hvdc_gpu_reduce_plan refused;
    const char *why = "";
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_INT16, HVD_SUM, 1.0, 1.0, 2, 22800, &refused, &why) ==
               HVD_ERR_UNSUPPORTED && strstr(why, "16-bit"), "int16 refused: %s", why);
    CHECK_TRUE(hvdc__gpu_reduce_plan(HVD_BOOL, HVD_AVERAGE, 1.0, 1.0, 2, 22800, &refused, &why) ==
               HVD_ERR_INVALID_ARG, "bool average refused: %s", why);
    const size_t counts[] = {1, 3, 7, 17, 1031};
    for (int d = 0; d < HVD_DTYPE_COUNT; d++)
        for (int op = 0; op < HVD_ADASUM; op++) /* element-wise ops; Adasum: test_adasum */
            for (int size = 1;
                 size <= MAX_RANKS && d != HVD_INT16 && d != HVD_UINT16 &&
                 !(d == HVD_BOOL && op == HVD_AVERAGE); size++)
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                    for (int in_place = 0; in_place <= 1; in_place++)
                        /* one tensor; three packed; three with those of 64 bytes or more
                         * reduced where they lie, beside the packed ones */
                        for (int shape = 0; shape < 3; shape++) {
                            size_t n = shape == 0 ? 1 : 3;
                            size_t direct = shape == 2 ? 64 : HVDC_GPU_DIRECT_BYTES;
                            run_case((hvd_dtype)d, (hvd_reduce_op)op, size, n, direct, counts[c],
                                     in_place, 1.0, 1.0);
                            if (is_float((hvd_dtype)d) && op != HVD_PRODUCT)
                                run_case((hvd_dtype)d, (hvd_reduce_op)op, size, n, direct,
                                         counts[c], in_place, 0.5, 2.0);
                        }
    printf("%d cases, %d with wrong values\n", cases, wrong_cases);
    return check_verdict("test_gpu_nccl_op");
}
