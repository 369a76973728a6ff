/*
 * test_adasum.c - HVD_ADASUM through the public API, against the direct recursive reference
 * (adasum_ref.h) computed on every rank from every rank's deterministic inputs.
 *
 * Power-of-2 sizes (np 2, 4):
 *   - float32, float64, float16, bfloat16: one hvd_grouped_allreduce of seven tensors (lengths
 *     1, 3, 7, 64, 1001, 13 and 5: odd, not divisible by the size; one zero on rank 1, one zero
 *     everywhere), so each tensor needs its own dot products inside one fused buffer; the same
 *     tensors as separate async all-reduces (fused by negotiation, or not: the result must not
 *     change); one in place with prescale 0.5 and postscale 2 (exact powers of 2, so the
 *     reference is the unscaled one);
 *   - every rank must hold the same bits, and each element must be within a tolerance of the
 *     reference: libhvdc sums each dot product from per-rank slices, the reference from index
 *     0 up, so a coefficient may differ in its last bits (float32: 1e-5 of the tensor's largest
 *     magnitude, float64: 1e-12, float16: 4e-3, bfloat16: 3e-2; how many elements match bit for
 *     bit is printed);
 *   - mixed ops (rank 0 HVD_ADASUM, the others HVD_SUM): HVD_ERR_MISMATCH on every rank, naming
 *     both ops; then a working all-reduce;
 *   - the last rank joined (hvd_join): the others' Adasum treats it as a zero vector;
 *   - values near the limits of float32 and float16, where dot products and norms must be
 *     taken in double as Horovod's ComputeDotAndNormSqrds takes them (products in float32
 *     underflow below ~1e-19 and overflow above ~1e19; a norm^2 under 1e-8 was taken for zero,
 *     so tiny gradients were summed, not averaged): the same vector on every rank comes back
 *     unchanged, bit for bit (Adasum of equal vectors is that vector); and the float32 inputs
 *     scaled by 2^-110 or 2^120 (exactly; their squares, 2^-220 and 2^240, are far outside
 *     float32) come back as the unscaled result scaled alike, bit for bit (Adasum is
 *     scale-invariant, and power-of-2 scaling rounds nothing while the results stay normal:
 *     at 2^-122 the few results that cancel to below 2^-126 lose bits as subnormals).
 * Every size:
 *   - refusals that depend only on size, dtype, kind and process set, returned at once on every
 *     rank: int32 (HVD_ERR_INVALID_ARG), reducescatter (HVD_ERR_INVALID_ARG), a process set
 *     (HVD_ERR_UNSUPPORTED), and at np 3 any Adasum (HVD_ERR_UNSUPPORTED, Horovod's words);
 *     then a working HVD_SUM all-reduce.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adasum_ref.h"
#include "mpitest.h"

enum { N_TENSORS = 7 };
static const size_t counts[N_TENSORS] = {1, 3, 7, 64, 1001, 13, 5};

static double round_to(hvd_dtype dt, double v) {
    switch (dt) {
    case HVD_FLOAT16: return mt_f32_from_f16(mt_f16_from_f32((float)v));
    case HVD_BFLOAT16: return mt_f32_from_bf16(mt_bf16_from_f32((float)v));
    case HVD_FLOAT32: return (float)v;
    default: return v;
    }
}

/* Rank r's element i of tensor t: small integers; tensor 1 is zero on rank 1 and tensor 5
 * zero everywhere. */
static double input(int r, size_t t, size_t i) {
    if ((t == 1 && r == 1) || t == 5) return 0;
    return (double)(int64_t)(mt_hash((uint64_t)r, t, i) % 17) - 8;
}

static double tolerance(hvd_dtype dt) {
    return dt == HVD_FLOAT32 ? 1e-5 : dt == HVD_FLOAT64 ? 1e-12 : dt == HVD_FLOAT16 ? 4e-3 : 3e-2;
}

/* The reference for every tensor, back to back. */
static double *reference(int size, hvd_dtype dt, size_t total) {
    double *inputs[MT_MAX_RANKS];
    for (int r = 0; r < size; r++) {
        inputs[r] = malloc(total * sizeof(double));
        size_t at = 0;
        for (size_t t = 0; t < N_TENSORS; t++)
            for (size_t i = 0; i < counts[t]; i++) inputs[r][at++] = round_to(dt, input(r, t, i));
    }
    double *ref = malloc(total * sizeof *ref);
    adasum_ref(ref, inputs, 0, size, counts, N_TENSORS, total, dt, round_to);
    for (int r = 0; r < size; r++) free(inputs[r]);
    return ref;
}

/* Checks results[t] against the reference; every rank's bits against rank 0's (a broadcast). */
static void check_results(mt_ctx *t, void *const *results, hvd_dtype dt, const double *ref,
                          const char *what) {
    size_t elem = mt_dtype_size(dt), at = 0, bitwise = 0, total = 0, bad = 0;
    for (size_t k = 0; k < N_TENSORS; k++) {
        double largest = 0;
        for (size_t i = 0; i < counts[k]; i++) largest = fmax(largest, fabs(ref[at + i]));
        for (size_t i = 0; i < counts[k]; i++) {
            double got = mt_get_f64(results[k], dt, i), want = ref[at + i];
            bitwise += got == want;
            if (!(fabs(got - want) <= tolerance(dt) * largest) && bad++ < 4)
                mt_fail(t, __FILE__, __LINE__, "%s tensor %zu [%zu] = %.17g, reference %.17g",
                        what, k, i, got, want);
        }
        /* the same bits on every rank: compare with rank 0's copy */
        void *root = malloc(counts[k] * elem);
        memcpy(root, results[k], counts[k] * elem);
        char name[64];
        snprintf(name, sizeof name, "adasum.bits.%s.%zu", what, k);
        if (MT_EXPECT(t, hvd_broadcast(name, root, counts[k], dt, 0), HVD_OK))
            MT_CHECK(t, memcmp(root, results[k], counts[k] * elem) == 0,
                     "%s tensor %zu: this rank's bits differ from rank 0's", what, k);
        free(root);
        at += counts[k];
        total += counts[k];
    }
    if (t->rank == 0)
        printf("#   %s: %zu of %zu elements bitwise equal to the reference\n", what, bitwise, total);
}

static void fill(void **bufs, int rank, hvd_dtype dt) {
    for (size_t k = 0; k < N_TENSORS; k++)
        for (size_t i = 0; i < counts[k]; i++) mt_set_f64(bufs[k], dt, i, input(rank, k, i));
}

static void test_dtype(mt_ctx *t, hvd_dtype dt) {
    size_t total = 0, elem = mt_dtype_size(dt);
    for (size_t k = 0; k < N_TENSORS; k++) total += counts[k];
    double *ref = reference(t->size, dt, total);
    void *send[N_TENSORS], *recv[N_TENSORS];
    const char *names[N_TENSORS];
    char name_room[N_TENSORS][48];
    for (size_t k = 0; k < N_TENSORS; k++) {
        send[k] = malloc(counts[k] * elem);
        recv[k] = malloc(counts[k] * elem);
        snprintf(name_room[k], sizeof name_room[k], "adasum.grouped.%s.%zu", mt_dtype_name(dt), k);
        names[k] = name_room[k];
    }
    char what[64];

    mt_begin(t, "adasum %s: grouped all-reduce of %d tensors", mt_dtype_name(dt), N_TENSORS);
    fill(send, t->rank, dt);
    if (MT_EXPECT(t, hvd_grouped_allreduce(N_TENSORS, names, (const void *const *)send, recv, counts,
                                           dt, HVD_ADASUM), HVD_OK)) {
        snprintf(what, sizeof what, "grouped %s", mt_dtype_name(dt));
        check_results(t, recv, dt, ref, what);
    }
    mt_end(t);

    mt_begin(t, "adasum %s: separate async all-reduces", mt_dtype_name(dt));
    hvd_handle h[N_TENSORS];
    for (size_t k = 0; k < N_TENSORS; k++) {
        snprintf(name_room[k], sizeof name_room[k], "adasum.async.%s.%zu", mt_dtype_name(dt), k);
        MT_EXPECT(t, hvd_allreduce_async(names[k], send[k], recv[k], counts[k], dt, HVD_ADASUM, NULL, &h[k]), HVD_OK);
    }
    int ok = 1;
    for (size_t k = 0; k < N_TENSORS; k++) ok &= MT_EXPECT(t, hvd_wait(&h[k]), HVD_OK);
    if (ok) {
        snprintf(what, sizeof what, "async %s", mt_dtype_name(dt));
        check_results(t, recv, dt, ref, what);
    }
    mt_end(t);

    mt_begin(t, "adasum %s: in place, prescale 0.5, postscale 2", mt_dtype_name(dt));
    hvd_options o = HVD_OPTIONS_INIT;
    o.prescale = 0.5;
    o.postscale = 2.0;
    fill(recv, t->rank, dt);
    for (size_t k = 0; k < N_TENSORS; k++) {
        snprintf(name_room[k], sizeof name_room[k], "adasum.scaled.%s.%zu", mt_dtype_name(dt), k);
        MT_EXPECT(t, hvd_allreduce_async(names[k], recv[k], recv[k], counts[k], dt, HVD_ADASUM, &o, &h[k]), HVD_OK);
    }
    ok = 1;
    for (size_t k = 0; k < N_TENSORS; k++) ok &= MT_EXPECT(t, hvd_wait(&h[k]), HVD_OK);
    if (ok) {
        snprintf(what, sizeof what, "scaled %s", mt_dtype_name(dt));
        check_results(t, recv, dt, ref, what);
    }
    mt_end(t);

    for (size_t k = 0; k < N_TENSORS; k++) free(send[k]), free(recv[k]);
    free(ref);
}

/* The last rank joins; the others' Adasum goes on without it: it contributes zeros, which
 * the combine leaves out (combine(a, 0) = a), so the reference has zeros for it. */
static void test_join(mt_ctx *t) {
    enum { COUNT = 37 };
    mt_begin(t, "adasum while rank %d has joined", t->size - 1);
    int last = -1;
    if (t->rank == t->size - 1) {
        MT_EXPECT(t, hvd_join(&last), HVD_OK);
    } else {
        float x[COUNT];
        double *inputs[MT_MAX_RANKS], ref[COUNT];
        size_t count[1] = {COUNT};
        for (int r = 0; r < t->size; r++) {
            inputs[r] = malloc(COUNT * sizeof(double));
            for (size_t i = 0; i < COUNT; i++) inputs[r][i] = r == t->size - 1 ? 0 : input(r, 4, i);
        }
        for (size_t i = 0; i < COUNT; i++) x[i] = (float)inputs[t->rank][i];
        adasum_ref(ref, inputs, 0, t->size, count, 1, COUNT, HVD_FLOAT32, round_to);
        if (MT_EXPECT(t, hvd_allreduce("adasum.joined", x, x, COUNT, HVD_FLOAT32, HVD_ADASUM), HVD_OK))
            for (size_t i = 0; i < COUNT; i++)
                MT_CHECK(t, fabs(x[i] - ref[i]) <= 1e-5 * 16, "[%zu] = %.9g, reference %.9g", i, x[i], ref[i]);
        for (int r = 0; r < t->size; r++) free(inputs[r]);
        MT_EXPECT(t, hvd_join(&last), HVD_OK);
    }
    mt_end(t);
}

/* One grouped Adasum of the N_TENSORS tensors in bufs (in place); 1 if it succeeded. */
static int adasum_in_place(mt_ctx *t, void **bufs, hvd_dtype dt, const char *tag) {
    const char *names[N_TENSORS];
    char room[N_TENSORS][64];
    for (size_t k = 0; k < N_TENSORS; k++) {
        snprintf(room[k], sizeof room[k], "adasum.%s.%s.%zu", tag, mt_dtype_name(dt), k);
        names[k] = room[k];
    }
    return MT_EXPECT(t, hvd_grouped_allreduce(N_TENSORS, names, (const void *const *)bufs, bufs,
                                              counts, dt, HVD_ADASUM), HVD_OK);
}

/* Every rank sends rank 0's inputs times scale: the result must be exactly that vector. */
static void check_collinear(mt_ctx *t, hvd_dtype dt, double scale, const char *tag) {
    void *bufs[N_TENSORS];
    for (size_t k = 0; k < N_TENSORS; k++) {
        bufs[k] = malloc(counts[k] * mt_dtype_size(dt));
        for (size_t i = 0; i < counts[k]; i++) mt_set_f64(bufs[k], dt, i, input(0, k, i) * scale);
    }
    if (adasum_in_place(t, bufs, dt, tag)) {
        size_t bad = 0;
        for (size_t k = 0; k < N_TENSORS; k++)
            for (size_t i = 0; i < counts[k]; i++) {
                double got = mt_get_f64(bufs[k], dt, i);
                double want = round_to(dt, input(0, k, i) * scale);
                if (got != want && bad++ < 4)
                    mt_fail(t, __FILE__, __LINE__, "%s %s: tensor %zu [%zu] = %.9g, expected the "
                            "input %.9g (%.3g times it)", mt_dtype_name(dt), tag, k, i, got, want,
                            got / want);
            }
        if (t->rank == 0 && bad == 0)
            printf("#   %s %s (scale %g): every element unchanged\n", mt_dtype_name(dt), tag,
                   scale);
    }
    for (size_t k = 0; k < N_TENSORS; k++) free(bufs[k]);
}

/* float32 inputs times 2^power against the unscaled result times 2^power, bit for bit. */
static void check_scaled_f32(mt_ctx *t, const float *const *plain, int power, const char *tag) {
    float *bufs[N_TENSORS];
    for (size_t k = 0; k < N_TENSORS; k++) {
        bufs[k] = malloc(counts[k] * sizeof(float));
        for (size_t i = 0; i < counts[k]; i++)
            bufs[k][i] = ldexpf((float)input(t->rank, k, i), power);
    }
    if (adasum_in_place(t, (void **)bufs, HVD_FLOAT32, tag)) {
        size_t bad = 0;
        for (size_t k = 0; k < N_TENSORS; k++)
            for (size_t i = 0; i < counts[k]; i++) {
                float want = ldexpf(plain[k][i], power);
                if (bufs[k][i] != want && bad++ < 4)
                    mt_fail(t, __FILE__, __LINE__, "float32 x 2^%d: tensor %zu [%zu] = %.9g, "
                            "expected %.9g (2^%d times the unscaled result)", power, k, i,
                            bufs[k][i], want, power);
            }
        if (t->rank == 0 && bad == 0)
            printf("#   float32 x 2^%d: every element is the unscaled result x 2^%d\n", power,
                   power);
    }
    for (size_t k = 0; k < N_TENSORS; k++) free(bufs[k]);
}

static void test_extremes(mt_ctx *t) {
    mt_begin(t, "adasum near the float32 and float16 limits");
    check_collinear(t, HVD_FLOAT32, 0x1p-122, "tiny");   /* ~1.9e-37 .. 1.5e-36; FLT_MIN 1.2e-38 */
    check_collinear(t, HVD_FLOAT32, 0x1p+124, "huge");   /* up to 1.7e38; FLT_MAX 3.4e38 */
    check_collinear(t, HVD_FLOAT16, 0x1p-14, "tiny");    /* 6.1e-5 .. 4.9e-4: the smallest normal */
    check_collinear(t, HVD_FLOAT16, 0x1p-20, "subnormal"); /* 9.5e-7 .. 7.6e-6 */
    check_collinear(t, HVD_FLOAT16, 0x1p+12, "huge");    /* up to 32768; max 65504 */
    float *plain[N_TENSORS];
    for (size_t k = 0; k < N_TENSORS; k++) {
        plain[k] = malloc(counts[k] * sizeof(float));
        for (size_t i = 0; i < counts[k]; i++) plain[k][i] = (float)input(t->rank, k, i);
    }
    if (adasum_in_place(t, (void **)plain, HVD_FLOAT32, "unscaled")) {
        check_scaled_f32(t, (const float *const *)plain, -110, "scaled.tiny");
        check_scaled_f32(t, (const float *const *)plain, 120, "scaled.huge");
    }
    for (size_t k = 0; k < N_TENSORS; k++) free(plain[k]);
    mt_end(t);
}

static void expect_refusal(mt_ctx *t, hvd_status got, hvd_status want, const char *words) {
    if (!MT_EXPECT(t, got, want)) return;
    const char *e = hvd_last_error();
    MT_CHECK(t, e && strstr(e, words), "message \"%s\" does not say \"%s\"", e ? e : "(null)", words);
    if (t->rank == 0) printf("#   refused: %s\n", e ? e : "(null)");
}

static void test_refusals(mt_ctx *t) {
    float f[4] = {1, 2, 3, 4};
    int32_t i32[4] = {1, 2, 3, 4};
    mt_begin(t, "adasum refusals (np %d), then a working sum", t->size);
    int pow2 = (t->size & (t->size - 1)) == 0;
    if (!pow2)
        expect_refusal(t, hvd_allreduce("adasum.np3", f, f, 4, HVD_FLOAT32, HVD_ADASUM),
                       HVD_ERR_UNSUPPORTED, "Running Adasum with non-power of 2 ranks is not supported yet.");
    expect_refusal(t, hvd_allreduce("adasum.int", i32, i32, 4, HVD_INT32, HVD_ADASUM),
                   HVD_ERR_INVALID_ARG, "floating dtype");
    float block[4];
    size_t got = 0;
    expect_refusal(t, hvd_reducescatter("adasum.rs", f, block, (size_t)t->size, HVD_FLOAT32, HVD_ADASUM, &got),
                   HVD_ERR_INVALID_ARG, "hvd_allreduce and hvd_grouped_allreduce only");
    int ranks[1] = {0}, set = -1; /* at np 1 that would be the global set's ranks */
    if (t->size > 1 && MT_EXPECT(t, hvd_add_process_set(ranks, 1, &set), HVD_OK)) {
        hvd_options o = HVD_OPTIONS_INIT;
        o.process_set = set;
        hvd_handle h = HVD_HANDLE_NULL;
        expect_refusal(t, hvd_allreduce_async("adasum.set", f, f, 4, HVD_FLOAT32, HVD_ADASUM, &o, &h),
                       HVD_ERR_UNSUPPORTED, "Adasum does not support non-global process sets yet.");
        MT_EXPECT(t, hvd_remove_process_set(set), HVD_OK);
    }
    mt_check_recovers(t, "adasum.after.refusals");
    mt_end(t);
}

static void test_mixed_ops(mt_ctx *t) {
    mt_begin(t, "mixed ops: rank 0 HVD_ADASUM, the others HVD_SUM");
    float f[6] = {1, 2, 3, 4, 5, 6}, sentinel[6];
    memcpy(sentinel, f, sizeof f);
    hvd_reduce_op op = t->rank == 0 ? HVD_ADASUM : HVD_SUM;
    hvd_status st = hvd_allreduce("adasum.mixed", f, f, 6, HVD_FLOAT32, op);
    if (MT_EXPECT(t, st, HVD_ERR_MISMATCH)) {
        const char *e = hvd_last_error();
        MT_CHECK(t, e && strstr(e, "adasum.mixed") && strstr(e, "adasum") && strstr(e, "sum"),
                 "message \"%s\" does not name the tensor and both ops", e ? e : "(null)");
        if (t->rank == 0) printf("#   message on rank 0: %s\n", e ? e : "(null)");
    }
    MT_CHECK(t, memcmp(f, sentinel, sizeof f) == 0, "the buffer was written although the operation failed");
    mt_check_recovers(t, "adasum.after.mixed");
    mt_end(t);
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    if (t.rank == 0) printf("# test_adasum: %d ranks, libhvdc %s\n", t.size, hvd_version());
    int pow2 = (t.size & (t.size - 1)) == 0;
    test_refusals(&t);
    if (pow2) {
        static const hvd_dtype dts[] = {HVD_FLOAT32, HVD_FLOAT64, HVD_FLOAT16, HVD_BFLOAT16};
        for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) test_dtype(&t, dts[k]);
        test_extremes(&t);
        if (t.size > 1) test_mixed_ops(&t);
        if (t.size > 1) test_join(&t);
    }
    mt_combine(&t);
    hvd_shutdown();
    return mt_exit_code(&t);
}
