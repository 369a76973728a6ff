/*
 * test_requests.c - requests that used to crash the runtime or return wrong numbers, each of
 * which must now either work or fail cleanly on every rank, leaving the runtime working:
 *   - an all-reduce whose working memory one rank cannot get (HVDC_TEST_FAULTS=working_memory
 *     on the last rank) and a reduce-scatter likewise: HVD_ERR_NO_MEMORY on every rank, then a
 *     normal all-reduce works (a count beyond what a process can address, which this test used
 *     to stand for that, is refused at submission now: test_huge_count.c);
 *   - overlapping buffers: refused with HVD_ERR_INVALID_ARG (allreduce and reducescatter at an
 *     offset, allgather and alltoall in place, a grouped output over another tensor's input),
 *     in place where allowed gives the right numbers; duplicate names in one group are named;
 *   - HVD_AVERAGE that overflows the element type (int8 100/127, uint8 200/255, int32 near
 *     INT32_MAX, float16 60000, bfloat16 3e38), small (fused) and large (chunked), and by
 *     reduce-scatter: the exact average, truncated or rounded;
 *   - MIN/MAX with a NaN on one rank: NaN on every rank;
 *   - hvd_metrics_reduce with weights on some ranks only, an invalid weight on one rank, or
 *     different ops: the same error on every rank, no hang;
 *   - options on broadcast, allgather and alltoall (which take a ready event since issue 15):
 *     explicit default options give the right numbers, scale factors are refused.
 * Run at np 1 and np >= 3. Main thread only.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

static void impossible_requests(mt_ctx *t) {
    mt_begin(t, "an all-reduce whose working memory one rank cannot get fails on every rank; the runtime goes on");
    size_t n = (size_t)1 << 20;
    float *x = calloc(n, sizeof *x);
    if (!x) {
        MT_CHECK(t, 0, "out of memory");
        mt_end(t);
        return;
    }
    /* read by the background thread after the submission (while it reserves the memory), so
     * setting it here does not race; alone, a rank may need no working memory: it may succeed */
    int last = t->size - 1;
    if (t->rank == last) setenv("HVDC_TEST_FAULTS", "working_memory", 1);
    hvd_status st = hvd_allreduce("requests.huge", x, x, n, HVD_FLOAT32, HVD_SUM);
    if (t->size > 1 || st != HVD_OK) {
        MT_CHECK(t, st == HVD_ERR_NO_MEMORY, "got %s: %s", hvd_status_string(st), hvd_last_error());
        MT_CHECK(t, strstr(hvd_last_error(), "requests.huge") != NULL, "message: %s", hvd_last_error());
    }
    st = hvd_reducescatter("requests.huge.rs", x, x, n, HVD_FLOAT32, HVD_SUM, NULL);
    if (t->size > 1 || st != HVD_OK) {
        MT_CHECK(t, st == HVD_ERR_NO_MEMORY, "got %s: %s", hvd_status_string(st), hvd_last_error());
        MT_CHECK(t, strstr(hvd_last_error(), "requests.huge.rs") != NULL, "message: %s", hvd_last_error());
    }
    if (t->rank == last) unsetenv("HVDC_TEST_FAULTS");
    free(x);
    float y[3] = {1, 2, 3};
    if (MT_EXPECT(t, hvd_allreduce("requests.after", y, y, 3, HVD_FLOAT32, HVD_SUM), HVD_OK))
        MT_CHECK(t, y[2] == 3.0f * (float)t->size, "after: %g", y[2]);
    mt_end(t);
}

static void overlapping_buffers(mt_ctx *t) {
    mt_begin(t, "overlapping buffers are refused where they would give wrong numbers");
    int32_t buf[64];
    for (int i = 0; i < 64; i++) buf[i] = i;
    MT_EXPECT(t, hvd_allreduce("overlap.ar", buf, buf + 1, 8, HVD_INT32, HVD_SUM), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "overlaps") != NULL, "message: %s", hvd_last_error());
    MT_EXPECT(t, hvd_allgather("overlap.ag", buf, 4, buf, 64, HVD_INT32, NULL, NULL), HVD_ERR_INVALID_ARG);
    size_t sendcounts[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    MT_EXPECT(t, hvd_alltoall("overlap.a2a", buf, sendcounts, buf, 16, HVD_INT32, NULL, NULL),
              HVD_ERR_INVALID_ARG);
    MT_EXPECT(t, hvd_reducescatter("overlap.rs", buf, buf + 3, 12, HVD_INT32, HVD_SUM, NULL),
              HVD_ERR_INVALID_ARG);
    const char *names[2] = {"overlap.g0", "overlap.g1"};
    const void *sends[2] = {buf, buf + 8};
    void *recvs[2] = {buf + 16, buf + 4}; /* g1's output overlaps g0's input */
    size_t counts[2] = {8, 8};
    MT_EXPECT(t, hvd_grouped_allreduce(2, names, sends, recvs, counts, HVD_INT32, HVD_SUM), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "overlap.g1") != NULL && strstr(hvd_last_error(), "overlap.g0") != NULL,
             "message names both tensors: %s", hvd_last_error());
    const char *same[2] = {"overlap.dup", "overlap.dup"};
    void *apart[2] = {buf + 32, buf + 48};
    MT_EXPECT(t, hvd_grouped_allreduce(2, same, sends, apart, counts, HVD_INT32, HVD_SUM), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "'overlap.dup' is given to two tensors") != NULL,
             "message: %s", hvd_last_error());
    /* allowed: exactly in place */
    for (int i = 0; i < 64; i++) buf[i] = i;
    if (MT_EXPECT(t, hvd_allreduce("overlap.inplace", buf, buf, 64, HVD_INT32, HVD_SUM), HVD_OK))
        MT_CHECK(t, buf[63] == 63 * t->size, "in place: %d", buf[63]);
    for (int i = 0; i < 64; i++) buf[i] = i;
    size_t got = 0;
    if (MT_EXPECT(t, hvd_reducescatter("overlap.rs.inplace", buf, buf, 64, HVD_INT32, HVD_SUM, &got), HVD_OK)) {
        size_t base = 64 / (size_t)t->size, extra = 64 % (size_t)t->size, r = (size_t)t->rank;
        size_t first = r * base + (r < extra ? r : extra);
        MT_CHECK(t, got > 0 && buf[0] == (int32_t)first * t->size, "in-place reducescatter: %d", buf[0]);
    }
    mt_end(t);
}

/* Rank r's value and the exact average over size ranks of: a (rank 0), b (others). */
static void average_overflow(mt_ctx *t) {
    mt_begin(t, "AVERAGE does not overflow the element type");
    int size = t->size, rank = t->rank;
    enum { SMALL = 5, LARGE = (1 << 20) + 3 };
    int8_t *i8 = malloc(LARGE), *i8_out = malloc(LARGE);
    for (size_t i = 0; i < LARGE; i++) i8[i] = rank == 0 ? 100 : 127;
    int want_i8 = (100 + 127 * (size - 1)) / size;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = pass ? LARGE : SMALL;
        if (MT_EXPECT(t, hvd_allreduce(pass ? "avg.i8.large" : "avg.i8.small", i8, i8_out, n, HVD_INT8, HVD_AVERAGE), HVD_OK)) {
            size_t wrong = 0;
            for (size_t i = 0; i < n; i++) wrong += i8_out[i] != want_i8;
            MT_CHECK(t, wrong == 0, "int8 %s: %zu wrong, [0] = %d, want %d", pass ? "large" : "small", wrong, i8_out[0], want_i8);
        }
    }
    free(i8);
    free(i8_out);
    uint8_t u8[SMALL];
    for (int i = 0; i < SMALL; i++) u8[i] = rank == 0 ? 200 : 255;
    if (MT_EXPECT(t, hvd_allreduce("avg.u8", u8, u8, SMALL, HVD_UINT8, HVD_AVERAGE), HVD_OK))
        MT_CHECK(t, u8[0] == (200 + 255 * (size - 1)) / size, "uint8 %d", u8[0]);
    int32_t i32[SMALL];
    for (int i = 0; i < SMALL; i++) i32[i] = INT32_MAX - (rank == 0 ? 0 : 2);
    int64_t sum32 = (int64_t)INT32_MAX * size - 2 * (size - 1);
    if (MT_EXPECT(t, hvd_allreduce("avg.i32", i32, i32, SMALL, HVD_INT32, HVD_AVERAGE), HVD_OK))
        MT_CHECK(t, i32[0] == (int32_t)(sum32 / size), "int32 %d, want %lld", i32[0], (long long)(sum32 / size));
    uint16_t f16[SMALL], b16[SMALL];
    for (int i = 0; i < SMALL; i++) {
        f16[i] = mt_f16_from_f32(60000.0f);
        b16[i] = mt_bf16_from_f32(3.0e38f);
    }
    if (MT_EXPECT(t, hvd_allreduce("avg.f16", f16, f16, SMALL, HVD_FLOAT16, HVD_AVERAGE), HVD_OK))
        MT_CHECK(t, mt_f32_from_f16(f16[0]) == 60000.0f, "float16 average of 60000s: %g", mt_f32_from_f16(f16[0]));
    if (MT_EXPECT(t, hvd_allreduce("avg.bf16", b16, b16, SMALL, HVD_BFLOAT16, HVD_AVERAGE), HVD_OK))
        MT_CHECK(t, mt_f32_from_bf16(b16[0]) == mt_f32_from_bf16(mt_bf16_from_f32(3.0e38f)),
                 "bfloat16 average of 3e38s: %g", mt_f32_from_bf16(b16[0]));
    int8_t rs_in[12], rs_out[12];
    for (int i = 0; i < 12; i++) rs_in[i] = rank == 0 ? 100 : 127;
    size_t got = 0;
    if (MT_EXPECT(t, hvd_reducescatter("avg.i8.rs", rs_in, rs_out, 12, HVD_INT8, HVD_AVERAGE, &got), HVD_OK))
        MT_CHECK(t, got == 0 || rs_out[0] == want_i8, "reducescatter int8: %d, want %d", rs_out[0], want_i8);
    mt_end(t);
}

static void nan_min_max(mt_ctx *t) {
    mt_begin(t, "MIN/MAX with a NaN on the last rank give NaN on every rank");
    for (int op = HVD_MIN; op <= HVD_MAX; op++) {
        float v[7];
        for (int i = 0; i < 7; i++) v[i] = t->rank == t->size - 1 ? NAN : (float)(i + t->rank);
        char name[32];
        snprintf(name, sizeof name, "nan.%d", op);
        if (MT_EXPECT(t, hvd_allreduce(name, v, v, 7, HVD_FLOAT32, (hvd_reduce_op)op), HVD_OK))
            for (int i = 0; i < 7; i++) MT_CHECK(t, isnan(v[i]), "op %d element %d: %g, want NaN", op, i, v[i]);
    }
    mt_end(t);
}

static void metrics_disagreements(mt_ctx *t) {
    mt_begin(t, "hvd_metrics_reduce: the same error on every rank, never a hang");
    double m[2] = {1, 2};
    if (t->size > 1) {
        MT_EXPECT(t, hvd_metrics_reduce("metrics.mixed", m, 2, HVD_AVERAGE, t->rank == 0 ? 5.0 : -1.0),
                  HVD_ERR_MISMATCH);
        MT_CHECK(t, strstr(hvd_last_error(), "passed a weight") != NULL, "message: %s", hvd_last_error());
        MT_EXPECT(t, hvd_metrics_reduce("metrics.ops", m, 2, t->rank == 0 ? HVD_SUM : HVD_AVERAGE, -1.0),
                  HVD_ERR_MISMATCH);
    }
    MT_EXPECT(t, hvd_metrics_reduce("metrics.nan", m, 2, HVD_AVERAGE, t->rank == t->size - 1 ? NAN : 1.0),
              HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "invalid weight") != NULL, "message: %s", hvd_last_error());
    double w[1] = {(double)t->rank};
    if (MT_EXPECT(t, hvd_metrics_reduce("metrics.ok", w, 1, HVD_AVERAGE, (double)(t->rank + 1)), HVD_OK)) {
        double num = 0, den = 0;
        for (int r = 0; r < t->size; r++) num += (double)r * (r + 1), den += r + 1;
        MT_CHECK(t, fabs(w[0] - num / den) < 1e-12, "weighted mean %g, want %g", w[0], num / den);
    }
    mt_end(t);
}

/* Broadcast, allgather and alltoall take options (device and ready event); they do not
 * reduce, so a scale factor is refused, on the caller's rank, before anything is announced. */
static void plain_options(mt_ctx *t) {
    mt_begin(t, "broadcast, allgather, alltoall with options");
    hvd_options o = HVD_OPTIONS_INIT;
    hvd_handle h = HVD_HANDLE_NULL;
    int32_t b[4] = {t->rank, t->rank + 1, t->rank + 2, t->rank + 3}, g[64], a[64], a2[64];
    if (MT_EXPECT(t, hvd_broadcast_async("opts.bc", b, 4, HVD_INT32, t->size - 1, &o, &h), HVD_OK) &&
        MT_EXPECT(t, hvd_wait(&h), HVD_OK))
        for (int i = 0; i < 4; i++) MT_CHECK(t, b[i] == t->size - 1 + i, "b[%d] = %d", i, b[i]);
    int32_t mine[2] = {10 * t->rank, 10 * t->rank + 1};
    if (MT_EXPECT(t, hvd_allgather_async("opts.ag", mine, 2, g, 64, HVD_INT32, NULL, NULL, &o, &h), HVD_OK) &&
        MT_EXPECT(t, hvd_wait(&h), HVD_OK))
        for (int i = 0; i < 2 * t->size; i++) MT_CHECK(t, g[i] == 10 * (i / 2) + i % 2, "g[%d] = %d", i, g[i]);
    size_t counts[32];
    for (int d = 0; d < t->size; d++) {
        counts[d] = 1;
        a[d] = 100 * t->rank + d; /* to rank d */
    }
    if (MT_EXPECT(t, hvd_alltoall_async("opts.a2a", a, counts, a2, 64, HVD_INT32, NULL, NULL, &o, &h), HVD_OK) &&
        MT_EXPECT(t, hvd_wait(&h), HVD_OK))
        for (int s = 0; s < t->size; s++) MT_CHECK(t, a2[s] == 100 * s + t->rank, "a2[%d] = %d", s, a2[s]);
    o.postscale = 2.0;
    MT_EXPECT(t, hvd_broadcast_async("opts.bc.scaled", b, 4, HVD_INT32, 0, &o, &h), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "reductions only") != NULL, "message: %s", hvd_last_error());
    o.postscale = 1.0, o.prescale = 0.5;
    MT_EXPECT(t, hvd_allgather_async("opts.ag.scaled", mine, 2, g, 64, HVD_INT32, NULL, NULL, &o, &h), HVD_ERR_INVALID_ARG);
    MT_EXPECT(t, hvd_alltoall_async("opts.a2a.scaled", a, counts, a2, 64, HVD_INT32, NULL, NULL, &o, &h), HVD_ERR_INVALID_ARG);
    mt_end(t);
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    impossible_requests(&t);
    overlapping_buffers(&t);
    average_overflow(&t);
    nan_min_max(&t);
    metrics_disagreements(&t);
    plain_options(&t);
    mt_combine(&t);
    hvd_shutdown();
    return mt_exit_code(&t);
}
