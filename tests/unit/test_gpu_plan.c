/*
 * Unit test: the GPU path's host-side planning (gpu_plan.h) on the CPU. The all-reduce's work
 * order runs against a fake hvdc_gpu_ops that executes every action on host memory and
 * simulates `size` ranks where rank r contributes (its input + r), so the exact result of
 * every reduction is known; the fake also counts launches and checks their bounds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "collectives/block.h"
#include "gpu/gpu_plan.h"

/* ---- the fake device ------------------------------------------------------------------- */

typedef struct fake {
    int size;              /* simulated ranks */
    int waits, copies, allreduces, hierarchicals, buffers;
    void *last_event;
    hvd_reduce_op last_op;
    size_t last_count;     /* elements of the last all-reduce */
    const void *last_src;
    void *last_dst;
    double *fusion;        /* host stand-in for the device fusion buffer (float64 storage) */
    size_t fusion_bytes;
    int fail_copy_at;      /* 1-based copy launch that fails; 0: none */
    int fail_allreduce_at; /* 1-based all-reduce that fails; 0: none */
    int max_batch_seen;
    int group_depth, groups, grouped_allreduces; /* groups: ends seen */
} fake;

static hvd_status f_wait(void *self, void *event) {
    fake *f = self;
    f->waits++;
    f->last_event = event;
    return HVD_OK;
}

static hvd_status f_buffer(void *self, size_t nbytes, void **buf) {
    fake *f = self;
    f->buffers++;
    if (nbytes > f->fusion_bytes) {
        free(f->fusion);
        f->fusion = calloc(1, nbytes);
        f->fusion_bytes = nbytes;
    }
    *buf = f->fusion;
    return HVD_OK;
}

static hvd_status f_copy(void *self, const hvdc_gpu_batch *b) {
    fake *f = self;
    f->copies++;
    if ((int)b->n > f->max_batch_seen) f->max_batch_seen = (int)b->n;
    if (f->fail_copy_at == f->copies) return HVD_ERR_CUDA;
    for (uint32_t s = 0; s < b->n; s++) {
        for (uint64_t i = 0; i < b->seg[s].count; i++) {
            if (b->dtype == HVD_FLOAT32)
                ((float *)b->seg[s].dst)[i] = (float)(((const float *)b->seg[s].src)[i] * b->factor);
            else if (b->dtype == HVD_FLOAT64)
                ((double *)b->seg[s].dst)[i] = ((const double *)b->seg[s].src)[i] * b->factor;
            else if (b->dtype == HVD_INT32)
                ((int32_t *)b->seg[s].dst)[i] = ((const int32_t *)b->seg[s].src)[i];
        }
    }
    return HVD_OK;
}

/* Rank r contributes x + r. */
static double reduce_ranks(double x, int size, hvd_reduce_op op) {
    double acc = op == HVD_PRODUCT ? 1.0 : op == HVD_MIN ? INFINITY : op == HVD_MAX ? -INFINITY : 0;
    for (int r = 0; r < size; r++) {
        double v = x + r;
        if (op == HVD_SUM || op == HVD_AVERAGE) acc += v;
        if (op == HVD_PRODUCT) acc *= v;
        if (op == HVD_MIN) acc = v < acc ? v : acc;
        if (op == HVD_MAX) acc = v > acc ? v : acc;
    }
    return op == HVD_AVERAGE ? acc / size : acc;
}

static void fake_reduce(fake *f, const void *src, void *dst, size_t count, hvd_dtype dtype,
                        hvd_reduce_op op) {
    for (size_t i = 0; i < count; i++) {
        if (dtype == HVD_FLOAT32)
            ((float *)dst)[i] = (float)reduce_ranks(((const float *)src)[i], f->size, op);
        else
            ((double *)dst)[i] = reduce_ranks(((const double *)src)[i], f->size, op);
    }
}

static hvd_status f_allreduce(void *self, const void *src, void *dst, size_t count,
                              hvd_dtype dtype, hvd_reduce_op op) {
    fake *f = self;
    f->allreduces++;
    if (f->group_depth > 0) f->grouped_allreduces++;
    if (f->fail_allreduce_at == f->allreduces) return HVD_ERR_NCCL;
    f->last_op = op;
    f->last_count = count;
    f->last_src = src;
    f->last_dst = dst;
    fake_reduce(f, src, dst, count, dtype, op);
    return HVD_OK;
}

/* All ranks' reduce-scatter + cross all-reduce + all-gather of a padded buffer together equal
 * one all-reduce of it; the fake checks the shard fits in the buffer it was given. */
static hvd_status f_hier(void *self, void *buf, size_t shard, hvd_dtype dtype, hvd_reduce_op op) {
    fake *f = self;
    f->hierarchicals++;
    f->last_count = shard;
    f->last_op = op;
    size_t elem = dtype == HVD_FLOAT32 ? 4 : 8;
    if (buf != f->fusion || 2 * shard * elem > f->fusion_bytes) return HVD_ERR_INTERNAL;
    fake_reduce(f, buf, buf, 2 * shard, dtype, op); /* local_size 2 in this test */
    return HVD_OK;
}

static hvd_status f_group(void *self, int begin) {
    fake *f = self;
    f->group_depth += begin ? 1 : -1;
    if (!begin) f->groups++;
    return HVD_OK;
}

static hvdc_gpu_ops fake_ops(fake *f, int hierarchical) {
    hvdc_gpu_ops ops = {f, f_wait, f_buffer, f_copy, f_allreduce, hierarchical ? f_hier : NULL,
                        f_group};
    return ops;
}

/* ---- all-reduce sequences --------------------------------------------------------------- */

/* Tensors of this many bytes or more are reduced where they lie (the backend's constant
 * unless a test sets it). */
static size_t direct_bytes = HVDC_GPU_DIRECT_BYTES;

/* The sequence as the backend runs it: the plan for NCCL 2.28.9, or for an NCCL without
 * ncclAvg (native = 0: 2.9.0). */
static hvd_status sequence(const hvdc_gpu_ops *ops, const hvdc_gpu_tensor *t, size_t n,
                           hvd_dtype dtype, hvd_reduce_op op, double pre, double post, int size,
                           int native, int hier, int local_size, void *event) {
    hvdc_gpu_reduce_plan plan;
    const char *why = "";
    hvd_status st = hvdc__gpu_reduce_plan(dtype, op, pre, post, size, native ? 22809 : 20900,
                                          &plan, &why);
    if (st != HVD_OK) return st;
    return hvdc__gpu_allreduce_sequence(ops, t, n, dtype, &plan, size, hier, local_size,
                                        direct_bytes, event);
}

/* Ranks the fake simulates in check_allreduce. */
static int fake_ranks = 4;

/* n float32 tensors of counts[i], out of place; runs the sequence; checks every value.
 * @return the fake's counts of what was queued. */
static fake check_allreduce(const char *what, const size_t *counts, size_t n, hvd_reduce_op op,
                            double pre, double post, int native, int hier, int expect_copies,
                            int in_place) {
    fake f = {0};
    f.size = fake_ranks;
    hvdc_gpu_ops ops = fake_ops(&f, hier);
    float **send = calloc(n, sizeof *send), **recv = calloc(n, sizeof *recv);
    hvdc_gpu_tensor *t = calloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++) {
        send[i] = malloc((counts[i] + 1) * sizeof(float));
        recv[i] = in_place ? send[i] : malloc((counts[i] + 1) * sizeof(float));
        for (size_t j = 0; j < counts[i]; j++) send[i][j] = (float)((i * 7 + j * 3) % 11) - 5.0f;
        if (!in_place) for (size_t j = 0; j < counts[i]; j++) recv[i][j] = -999.0f;
        t[i] = (hvdc_gpu_tensor){send[i], recv[i], counts[i]};
    }
    /* keep inputs to compute the reference after an in-place run */
    float **orig = calloc(n, sizeof *orig);
    for (size_t i = 0; i < n; i++) {
        orig[i] = malloc((counts[i] + 1) * sizeof(float));
        memcpy(orig[i], send[i], counts[i] * sizeof(float));
    }
    int event = 0;
    hvd_status st = sequence(&ops, t, n, HVD_FLOAT32, op, pre, post, f.size,
                                                 native, hier, 2, &event);
    CHECK_TRUE(st == HVD_OK, "%s: status %d", what, (int)st);
    CHECK_TRUE(f.waits == 1 && f.last_event == &event, "%s: one wait on the ready event", what);
    CHECK_TRUE(f.copies == expect_copies, "%s: %d copy launches, expected %d", what, f.copies,
               expect_copies);
    CHECK_TRUE(f.max_batch_seen <= HVDC_GPU_BATCH_MAX, "%s: batch of %d", what, f.max_batch_seen);
    if (hier)
        CHECK_TRUE(f.hierarchicals == 1 && f.allreduces == 0, "%s: hierarchical path", what);
    if (op == HVD_AVERAGE) /* a float32 average is a sum with the division on the way out */
        CHECK_TRUE(f.last_op == HVD_SUM, "%s: average as %d", what, (int)f.last_op);
    size_t wrong = 0;
    double maxdiff = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < counts[i]; j++) {
            double want = (float)(reduce_ranks((float)(orig[i][j] * pre), f.size, op) * post);
            double d = fabs(recv[i][j] - want);
            if (d > 1e-5 * (1 + fabs(want))) wrong++;
            if (d > maxdiff) maxdiff = d;
        }
    }
    CHECK_TRUE(wrong == 0, "%s: %zu wrong values, maxdiff %g", what, wrong, maxdiff);
    for (size_t i = 0; i < n; i++) {
        if (!in_place) free(recv[i]);
        free(send[i]);
        free(orig[i]);
    }
    free(send), free(recv), free(orig), free(t), free(f.fusion);
    f.fusion = NULL;
    return f;
}

static void test_sequences(void) {
    size_t three[3] = {10, 3, 5};
    /* fused: one pack launch, one unpack launch, one all-reduce over the aligned layout */
    check_allreduce("3 fused", three, 3, HVD_SUM, 1.0, 1.0, 1, 0, 2, 0);
    check_allreduce("3 fused in place", three, 3, HVD_SUM, 1.0, 1.0, 1, 0, 2, 1);
    check_allreduce("3 fused scaled", three, 3, HVD_SUM, 0.5, 4.0, 1, 0, 2, 0);
    check_allreduce("3 fused max", three, 3, HVD_MAX, 1.0, 1.0, 1, 0, 2, 0);
    check_allreduce("3 fused product", three, 3, HVD_PRODUCT, 1.0, 1.0, 1, 0, 2, 0);
    check_allreduce("3 fused avg native", three, 3, HVD_AVERAGE, 1.0, 1.0, 1, 0, 2, 0);
    check_allreduce("3 fused avg as sum+scale", three, 3, HVD_AVERAGE, 1.0, 1.0, 0, 0, 2, 0);

    /* 300 tensors: ceil(300/128) = 3 launches to pack and 3 to unpack */
    size_t many[300];
    for (int i = 0; i < 300; i++) many[i] = (size_t)(i % 7 + 1);
    check_allreduce("300 fused", many, 300, HVD_SUM, 1.0, 1.0, 1, 0, 6, 0);

    /* one tensor: reduced where it lies; copies only to scale */
    size_t one[1] = {1000};
    check_allreduce("1 in place", one, 1, HVD_SUM, 1.0, 1.0, 1, 0, 0, 1);
    check_allreduce("1 out of place", one, 1, HVD_SUM, 1.0, 1.0, 1, 0, 0, 0);
    check_allreduce("1 prescaled", one, 1, HVD_SUM, 2.0, 1.0, 1, 0, 1, 0);
    check_allreduce("1 pre+postscaled in place", one, 1, HVD_SUM, 2.0, 0.25, 1, 0, 2, 1);
    check_allreduce("1 avg as sum+scale", one, 1, HVD_AVERAGE, 1.0, 1.0, 0, 0, 1, 0);

    /* hierarchical: even one tensor goes through the padded fusion buffer */
    check_allreduce("hier 1", one, 1, HVD_SUM, 1.0, 1.0, 1, 1, 2, 0);
    size_t odd[3] = {7, 1, 13};
    check_allreduce("hier 3 avg", odd, 3, HVD_AVERAGE, 1.0, 1.0, 1, 1, 2, 0);
    /* an integer average runs flat, one in-place ncclAvg: through the two levels the average of
     * the nodes' averages would truncate twice (seen on the simulated device across two hosts) */
    {
        fake f = {0};
        f.size = 4;
        hvdc_gpu_ops ops = fake_ops(&f, 1);
        int64_t a[3] = {1, 2, 3};
        hvdc_gpu_tensor t = {a, a, 3};
        CHECK_TRUE(sequence(&ops, &t, 1, HVD_INT64, HVD_AVERAGE, 1, 1, 4, 1, 1, 2, NULL) == HVD_OK,
                   "integer average, hierarchical");
        CHECK_TRUE(f.hierarchicals == 0 && f.allreduces == 1 && f.last_op == HVD_AVERAGE &&
                   f.last_src == a && f.last_dst == a, "integer average: %d hierarchical, %d "
                   "flat (op %d)", f.hierarchicals, f.allreduces, (int)f.last_op);
        free(f.fusion);
    }

    /* the single-tensor path hands NCCL the user's own pointers */
    {
        fake f = {0};
        f.size = 2;
        hvdc_gpu_ops ops = fake_ops(&f, 0);
        float a[4] = {1, 2, 3, 4};
        hvdc_gpu_tensor t = {a, a, 4};
        CHECK_TRUE(sequence(&ops, &t, 1, HVD_FLOAT32, HVD_SUM, 1, 1, 2, 1, 0, 1,
                                                NULL) == HVD_OK, "in place");
        CHECK_TRUE(f.last_src == a && f.last_dst == a && f.last_count == 4 && f.buffers == 0,
                   "no fusion buffer for one tensor");
        CHECK_TRUE(f.waits == 1 && f.last_event == NULL, "NULL event passed through");
    }
    /* empty tensors: nothing is reduced, nothing fails */
    {
        fake f = {0};
        f.size = 2;
        hvdc_gpu_ops ops = fake_ops(&f, 0);
        hvdc_gpu_tensor t[2] = {{NULL, NULL, 0}, {NULL, NULL, 0}};
        CHECK_TRUE(sequence(&ops, t, 2, HVD_FLOAT32, HVD_SUM, 1, 1, 2, 1, 0, 1,
                                                NULL) == HVD_OK, "empty ok");
        CHECK_TRUE(f.allreduces == 0 && f.copies == 0, "nothing queued for empty tensors");
        CHECK_TRUE(sequence(&ops, t, 1, HVD_FLOAT32, HVD_SUM, 1, 1, 2, 1, 0, 1,
                                                NULL) == HVD_OK, "one empty ok");
        CHECK_TRUE(f.allreduces == 0, "no all-reduce for one empty tensor");
    }
    /* a failed launch stops the sequence: no collective after it */
    {
        fake f = {0};
        f.size = 2;
        f.fail_copy_at = 1;
        hvdc_gpu_ops ops = fake_ops(&f, 0);
        float a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
        hvdc_gpu_tensor t[2] = {{a, a, 3}, {b, b, 3}};
        CHECK_TRUE(sequence(&ops, t, 2, HVD_FLOAT32, HVD_SUM, 1, 1, 2, 1, 0, 1,
                                                NULL) == HVD_ERR_CUDA, "pack failure returned");
        CHECK_TRUE(f.allreduces == 0 && f.copies == 1, "nothing after the failed pack");
        free(f.fusion);
    }
    /* argument errors */
    {
        fake f = {0};
        hvdc_gpu_ops ops = fake_ops(&f, 0);
        hvdc_gpu_tensor t = {NULL, NULL, 0};
        CHECK_TRUE(sequence(&ops, &t, 0, HVD_FLOAT32, HVD_SUM, 1, 1, 2, 1, 0, 1,
                                                NULL) == HVD_ERR_INVALID_ARG, "n = 0");
        CHECK_TRUE(sequence(&ops, &t, 1, (hvd_dtype)42, HVD_SUM, 1, 1, 2, 1, 0,
                                                1, NULL) == HVD_ERR_INVALID_ARG, "bad dtype");
        CHECK_TRUE(f.waits == 0, "nothing queued on bad arguments");
    }
}

/* Tensors of direct_bytes or more are reduced where they lie, beside the packed ones: one NCCL
 * call each, in one group with the fusion buffer's; copies only to scale them or, with one
 * rank, to move send to recv; the packed ones as before. */
static void test_direct(void) {
    direct_bytes = 1000 * sizeof(float); /* counts of 1000 and more go direct */
    size_t mixed[5] = {10, 1000, 3, 2500, 5};
    fake f = check_allreduce("mixed", mixed, 5, HVD_SUM, 1.0, 1.0, 1, 0, 2, 0);
    CHECK_TRUE(f.allreduces == 3 && f.grouped_allreduces == 3 && f.groups == 1 &&
               f.group_depth == 0 && f.buffers == 1, "mixed: %d all-reduces (%d grouped), %d "
               "groups, depth %d, %d buffers", f.allreduces, f.grouped_allreduces, f.groups,
               f.group_depth, f.buffers);
    /* the last direct call takes the user's buffers as they are: out of place, no copy */
    CHECK_TRUE(f.last_count == 2500 && f.last_src != f.last_dst, "direct out of place");
    f = check_allreduce("mixed in place", mixed, 5, HVD_SUM, 1.0, 1.0, 1, 0, 2, 1);
    CHECK_TRUE(f.last_count == 2500 && f.last_src == f.last_dst, "direct in place");
    /* scaled: the direct tensors' copies share the pack's and the unpack's launches */
    check_allreduce("mixed scaled", mixed, 5, HVD_SUM, 0.5, 4.0, 1, 0, 2, 0);
    check_allreduce("mixed average", mixed, 5, HVD_AVERAGE, 1.0, 1.0, 1, 0, 2, 0);
    check_allreduce("mixed average in place", mixed, 5, HVD_AVERAGE, 1.0, 1.0, 1, 0, 2, 1);
    check_allreduce("mixed max", mixed, 5, HVD_MAX, 1.0, 1.0, 1, 0, 2, 0);
    /* every tensor direct: no fusion buffer, no copies unscaled */
    size_t big[2] = {1000, 1200};
    f = check_allreduce("all direct", big, 2, HVD_SUM, 1.0, 1.0, 1, 0, 0, 0);
    CHECK_TRUE(f.buffers == 0 && f.allreduces == 2 && f.groups == 1, "all direct: %d buffers, "
               "%d all-reduces, %d groups", f.buffers, f.allreduces, f.groups);
    f = check_allreduce("all direct averaged", big, 2, HVD_AVERAGE, 1.0, 1.0, 1, 0, 1, 0);
    direct_bytes = 0; /* every tensor where it lies, however small */
    f = check_allreduce("direct from 0 bytes", mixed, 5, HVD_SUM, 1.0, 1.0, 1, 0, 0, 0);
    CHECK_TRUE(f.buffers == 0 && f.allreduces == 5 && f.groups == 1, "direct from 0 bytes: %d "
               "buffers, %d all-reduces", f.buffers, f.allreduces);
    direct_bytes = 1000 * sizeof(float);
    /* one direct tensor among packed ones still groups its two calls; one rank calls nothing
     * and moves a direct tensor with one copy, shared with the pack's launch */
    size_t one_big[3] = {4, 1000, 6};
    f = check_allreduce("one direct", one_big, 3, HVD_SUM, 1.0, 1.0, 1, 0, 2, 0);
    CHECK_TRUE(f.allreduces == 2 && f.groups == 1, "one direct: %d all-reduces", f.allreduces);
    fake_ranks = 1;
    f = check_allreduce("one rank", mixed, 5, HVD_SUM, 1.0, 1.0, 1, 0, 2, 0);
    CHECK_TRUE(f.allreduces == 0 && f.groups == 0, "one rank: %d all-reduces", f.allreduces);
    f = check_allreduce("one rank in place", big, 2, HVD_AVERAGE, 1.0, 1.0, 1, 0, 0, 1);
    CHECK_TRUE(f.copies == 0 && f.buffers == 0, "one rank in place: nothing moves");
    fake_ranks = 4;
    /* the hierarchical path packs every tensor, however large */
    f = check_allreduce("hier mixed", mixed, 5, HVD_SUM, 1.0, 1.0, 1, 1, 2, 0);
    CHECK_TRUE(f.hierarchicals == 1 && f.allreduces == 0 && f.groups == 0, "hier mixed");

    /* a call failing inside the group: the group is closed, nothing after it queued */
    {
        fake g = {0};
        g.size = 2;
        g.fail_allreduce_at = 2;
        hvdc_gpu_ops ops = fake_ops(&g, 0);
        float a[1200] = {0}, b[4] = {0}, c[1500] = {0};
        hvdc_gpu_tensor t[3] = {{a, a, 1200}, {b, b, 4}, {c, c, 1500}};
        CHECK_TRUE(sequence(&ops, t, 3, HVD_FLOAT32, HVD_SUM, 1, 1, 2, 1, 0, 1, NULL) ==
                   HVD_ERR_NCCL, "a failed call in the group is returned");
        CHECK_TRUE(g.group_depth == 0 && g.groups == 1 && g.allreduces == 2 && g.copies == 1,
                   "the group closed after the failure (depth %d), the rest not queued (%d "
                   "all-reduces, %d copies)", g.group_depth, g.allreduces, g.copies);
        free(g.fusion);
    }
    /* without a group action the calls are queued one after the other */
    {
        fake g = {0};
        g.size = 2;
        hvdc_gpu_ops ops = fake_ops(&g, 0);
        ops.group = NULL;
        float a[1200] = {0}, b[4] = {0};
        hvdc_gpu_tensor t[2] = {{a, a, 1200}, {b, b, 4}};
        CHECK_TRUE(sequence(&ops, t, 2, HVD_FLOAT32, HVD_SUM, 1, 1, 2, 1, 0, 1, NULL) == HVD_OK &&
                   g.allreduces == 2 && g.grouped_allreduces == 0, "no group action");
        free(g.fusion);
    }
    direct_bytes = HVDC_GPU_DIRECT_BYTES;
}

/* ---- pure plans ------------------------------------------------------------------------- */

static void test_layout(void) {
    size_t offsets[4], total = 0;
    size_t c[4] = {10, 3, 5, 1};
    CHECK_TRUE(hvdc__gpu_fusion_layout(c, 4, 4, offsets, &total) == HVD_OK, "layout f32");
    CHECK_TRUE(offsets[0] == 0 && offsets[1] == 12 && offsets[2] == 16 && offsets[3] == 24 &&
               total == 25, "float32 offsets on 16 bytes: %zu %zu %zu %zu total %zu",
               offsets[0], offsets[1], offsets[2], offsets[3], total);
    CHECK_TRUE(hvdc__gpu_fusion_layout(c, 4, 2, offsets, &total) == HVD_OK, "layout f16");
    CHECK_TRUE(offsets[1] == 16 && offsets[2] == 24 && offsets[3] == 32 && total == 33,
               "float16 offsets on 8 elements");
    CHECK_TRUE(hvdc__gpu_fusion_layout(c, 4, 8, offsets, &total) == HVD_OK, "layout f64");
    CHECK_TRUE(offsets[1] == 10 && offsets[2] == 14 && offsets[3] == 20 && total == 21,
               "float64 offsets on 2 elements");
    for (int i = 0; i < 4; i++) CHECK_TRUE(offsets[i] * 8 % HVDC_GPU_ALIGN_BYTES == 0, "aligned");
    size_t huge[2] = {SIZE_MAX / 8, SIZE_MAX / 8};
    CHECK_TRUE(hvdc__gpu_fusion_layout(huge, 2, 8, offsets, &total) == HVD_ERR_INVALID_ARG,
               "overflow refused");
    CHECK_TRUE(sizeof(hvdc_gpu_batch) <= 4096 - 256, "batch fits the 4 KiB kernel argument "
               "limit: %zu bytes", sizeof(hvdc_gpu_batch));
}

static void test_batches(void) {
    hvdc_gpu_segment segs[300];
    for (int i = 0; i < 300; i++)
        segs[i] = (hvdc_gpu_segment){(void *)(uintptr_t)(i + 1), (void *)(uintptr_t)(i + 1),
                                     (uint64_t)(i % 3)}; /* every third is empty */
    hvdc_gpu_batch b;
    size_t pos = 0, seen = 0;
    int launches = 0;
    while (hvdc__gpu_batch_next(segs, 300, &pos, HVD_FLOAT16, 0.5, &b) > 0) {
        launches++;
        CHECK_TRUE(b.n <= HVDC_GPU_BATCH_MAX && b.dtype == HVD_FLOAT16 && b.factor == 0.5,
                   "batch fields");
        for (uint32_t s = 0; s < b.n; s++) CHECK_TRUE(b.seg[s].count > 0, "no empty segments");
        seen += b.n;
    }
    CHECK_TRUE(seen == 200 && launches == 2 && pos == 300, "200 non-empty in 2 launches: %zu, %d",
               seen, launches);
    pos = 0;
    CHECK_TRUE(hvdc__gpu_batch_next(segs, 0, &pos, HVD_FLOAT32, 1, &b) == 0, "no segments");
}

static void test_shards(void) {
    hvdc_shard_plan p;
    CHECK_TRUE(hvdc__shard_plan(10, 4, 1, &p) == HVD_OK, "plan");
    CHECK_TRUE(p.shard == 3 && p.padded == 12, "10 over 4: shard %zu padded %zu", p.shard, p.padded);
    size_t valid[4] = {3, 3, 3, 1}, sum = 0;
    for (size_t r = 0; r < 4; r++) {
        CHECK_TRUE(hvdc__shard_valid(&p, 10, r) == valid[r], "valid %zu", r);
        sum += hvdc__shard_valid(&p, 10, r);
    }
    CHECK_TRUE(sum == 10 && hvdc__shard_valid(&p, 10, 4) == 0, "shards cover the buffer");
    CHECK_TRUE(hvdc__shard_plan(10, 4, 4, &p) == HVD_OK && p.shard == 4 && p.padded == 16,
               "aligned shards");
    CHECK_TRUE(hvdc__shard_valid(&p, 10, 2) == 2 && hvdc__shard_valid(&p, 10, 3) == 0,
               "a shard may be all padding");
    CHECK_TRUE(hvdc__shard_plan(12, 4, 1, &p) == HVD_OK && p.shard == 3 && p.padded == 12,
               "even split has no padding");
    CHECK_TRUE(hvdc__shard_plan(0, 3, 1, &p) == HVD_OK && p.shard == 0 && p.padded == 0, "empty");
    CHECK_TRUE(hvdc__shard_plan(5, 0, 1, &p) == HVD_ERR_INVALID_ARG, "0 parts refused");
    CHECK_TRUE(hvdc__shard_plan(SIZE_MAX, 2, 4096, &p) == HVD_ERR_INVALID_ARG, "overflow refused");

    /* the public reduce-scatter's blocks: contiguous, cover count, sizes differ by at most 1 */
    for (size_t count = 0; count < 40; count++) {
        for (size_t parts = 1; parts <= 6; parts++) {
            size_t next = 0;
            for (size_t r = 0; r < parts; r++) {
                size_t off, n;
                hvdc__block_range(count, parts, r, &off, &n);
                CHECK_TRUE(off == next, "block %zu of %zu over %zu starts at %zu", r, count, parts, off);
                CHECK_TRUE(n == count / parts || n == count / parts + 1, "block size");
                next = off + n;
            }
            CHECK_TRUE(next == count, "blocks of %zu over %zu cover it", count, parts);
        }
    }
}

static void test_support(void) {
    int native = -1;
    const char *why = NULL;
    CHECK_TRUE(hvdc__gpu_reduce_supported(HVD_INT8, HVD_PRODUCT, 22809, &native, &why) == HVD_OK,
               "int8 product");
    CHECK_TRUE(native == 1, "ncclAvg in 2.28");
    for (int d = 0; d < HVD_DTYPE_COUNT; d++)
        for (int o = 0; o < HVD_ADASUM; o++) /* element-wise ops; Adasum: test_adasum */ {
            hvd_status want = d == HVD_INT16 || d == HVD_UINT16 ? HVD_ERR_UNSUPPORTED
                              : d == HVD_BOOL && o == HVD_AVERAGE ? HVD_ERR_INVALID_ARG
                                                                  : HVD_OK;
            CHECK_TRUE(hvdc__gpu_reduce_supported((hvd_dtype)d, (hvd_reduce_op)o, 22809, &native,
                                                  &why) == want, "dtype %d op %d", d, o);
        }
    CHECK_TRUE(hvdc__gpu_reduce_supported(HVD_INT16, HVD_SUM, 22809, &native, &why) ==
               HVD_ERR_UNSUPPORTED && strstr(why, "16-bit"), "int16 says why");
    CHECK_TRUE(hvdc__gpu_reduce_supported(HVD_BFLOAT16, HVD_SUM, 20900, &native, &why) ==
               HVD_ERR_UNSUPPORTED && strstr(why, "bfloat16"), "bf16 before 2.10");
    CHECK_TRUE(hvdc__gpu_reduce_supported(HVD_INT32, HVD_AVERAGE, 20900, &native, &why) ==
               HVD_ERR_UNSUPPORTED && native == 0, "int average before ncclAvg");
    CHECK_TRUE(hvdc__gpu_reduce_supported(HVD_FLOAT32, HVD_AVERAGE, 20900, &native, &why) ==
               HVD_OK && native == 0, "float average as sum+scale before ncclAvg");
    CHECK_TRUE(hvdc__gpu_reduce_supported((hvd_dtype)HVD_DTYPE_COUNT, HVD_SUM, 22809, &native, &why) ==
               HVD_ERR_INVALID_ARG, "bad dtype");
}

/* The device Adasum's layout: gaps and padding are entries of their own, every rank's entries
 * add up to its shard, and the shards tile the padded buffer. */
static void test_adasum_layout(void) {
    const size_t counts[2] = {3, 2};
    size_t offsets[2], e0[4], e1[4];
    hvdc_shard_plan sh;
    CHECK_TRUE(hvdc__gpu_adasum_layout(counts, 2, 4, 2, 0, offsets, e0, &sh) == HVD_OK &&
               hvdc__gpu_adasum_layout(counts, 2, 4, 2, 1, offsets, e1, &sh) == HVD_OK, "layout");
    CHECK_TRUE(offsets[0] == 0 && offsets[1] == 4 && sh.shard == 4 && sh.padded == 8,
               "offsets %zu %zu, shard %zu, padded %zu", offsets[0], offsets[1], sh.shard, sh.padded);
    CHECK_TRUE(e0[0] == 3 && e0[1] == 1 && e0[2] == 0 && e0[3] == 0, "rank 0: %zu %zu %zu %zu",
               e0[0], e0[1], e0[2], e0[3]);
    CHECK_TRUE(e1[0] == 0 && e1[1] == 0 && e1[2] == 2 && e1[3] == 2, "rank 1: %zu %zu %zu %zu",
               e1[0], e1[1], e1[2], e1[3]);
    /* uneven tensors over 3 ranks: each tensor's parts add up to it */
    const size_t many[4] = {1001, 1, 0, 64};
    size_t parts[4] = {0}, off[4], e[8];
    for (size_t r = 0; r < 3; r++) {
        CHECK_TRUE(hvdc__gpu_adasum_layout(many, 4, 2, 3, r, off, e, &sh) == HVD_OK, "layout r%zu", r);
        size_t sum = 0;
        for (size_t i = 0; i < 8; i++) sum += e[i];
        CHECK_TRUE(sum == sh.shard, "rank %zu: entries add up to %zu, shard %zu", r, sum, sh.shard);
        for (size_t i = 0; i < 4; i++) parts[i] += e[2 * i];
    }
    for (size_t i = 0; i < 4; i++)
        CHECK_TRUE(parts[i] == many[i], "tensor %zu: %zu of %zu elements", i, parts[i], many[i]);
}

int main(void) {
    test_direct();
    test_layout();
    test_adasum_layout();
    test_batches();
    test_shards();
    test_support();
    test_sequences();
    return check_verdict("test_gpu_plan");
}
