/*
 * test_adasum.c - Adasum's pairwise combine and its whole VHDD (collectives/adasum.h), with
 * threads standing in for ranks (1, 2, 4 and 8), against the direct recursive reference of
 * tests/mpi/adasum_ref.h.
 *
 * What is checked:
 *   - the combine on cases with known answers: orthogonal vectors add, equal vectors stay,
 *     a zero vector leaves the other one (exactly, every dtype);
 *   - the VHDD of several tensors fused (lengths 0, 1, 3, 7, 64, 1001: odd, not divisible by
 *     the rank count, a tensor that is zero on one rank and one that is zero everywhere):
 *     every rank ends with the same bits, and each element is within a stated tolerance of
 *     the reference (the VHDD sums each dot product from per-rank slices, the reference from
 *     index 0 up: the last bits of a coefficient may differ, then an element by an ulp or
 *     so, and later levels carry it on). float32: 1e-5 of the tensor's largest magnitude;
 *     float64: 1e-12; float16: 4e-3; bfloat16: 3e-2 (a few units in the last place). It also
 *     prints how many elements match bit for bit (all of them on these inputs, in practice);
 *   - sizes that are not powers of 2 are refused with HVD_ERR_UNSUPPORTED.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mpi/adasum_ref.h"
#include "base/dtype.h"
#include "base/half.h"
#include "check.h"
#include "collectives/adasum.h"

#define MAX_RANKS 8

/* ---- values of a dtype as doubles ---- */

static double round_to(hvd_dtype dt, double v) {
    switch (dt) {
    case HVD_FLOAT16: return hvdc__half_to_float(hvdc__float_to_half((float)v));
    case HVD_BFLOAT16: return hvdc__bf16_to_float(hvdc__float_to_bf16((float)v));
    case HVD_FLOAT32: return (float)v;
    default: return v;
    }
}

static double get(const void *buf, hvd_dtype dt, size_t i) {
    switch (dt) {
    case HVD_FLOAT16: return hvdc__half_to_float(((const uint16_t *)buf)[i]);
    case HVD_BFLOAT16: return hvdc__bf16_to_float(((const uint16_t *)buf)[i]);
    case HVD_FLOAT32: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
    }
}

static void set(void *buf, hvd_dtype dt, size_t i, double v) {
    switch (dt) {
    case HVD_FLOAT16: ((uint16_t *)buf)[i] = hvdc__float_to_half((float)v); break;
    case HVD_BFLOAT16: ((uint16_t *)buf)[i] = hvdc__float_to_bf16((float)v); break;
    case HVD_FLOAT32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
    }
}

static const hvd_dtype dtypes[] = {HVD_FLOAT32, HVD_FLOAT64, HVD_FLOAT16, HVD_BFLOAT16};

static double tolerance(hvd_dtype dt) {
    return dt == HVD_FLOAT32 ? 1e-5 : dt == HVD_FLOAT64 ? 1e-12 : dt == HVD_FLOAT16 ? 4e-3 : 3e-2;
}

/* ---- the combine on known cases ---- */

static void combine_pair(void *a, const void *b, size_t n, hvd_dtype dt) {
    double d[3];
    hvdc__adasum_dots(a, b, n, dt, d);
    hvdc__adasum_scaled_add(a, hvdc__adasum_coefficient(d[0], d[1]), b,
                            hvdc__adasum_coefficient(d[0], d[2]), n, dt);
}

static void test_combine_cases(void) {
    enum { N = 9 };
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
        hvd_dtype dt = dtypes[k];
        const char *name = hvdc__dtype_name(dt);
        double a[N], b[N];
        char x[N * 8], y[N * 8];
        /* orthogonal: a + b */
        for (int i = 0; i < N; i++) {
            a[i] = i % 2 ? 0 : i + 1;
            b[i] = i % 2 ? -(i + 2) : 0;
            set(x, dt, i, a[i]);
            set(y, dt, i, b[i]);
        }
        combine_pair(x, y, N, dt);
        for (int i = 0; i < N; i++)
            CHECK_TRUE(get(x, dt, i) == a[i] + b[i], "%s orthogonal [%d]: %g, want %g", name, i, get(x, dt, i), a[i] + b[i]);
        /* equal: a (each coefficient 1/2) */
        for (int i = 0; i < N; i++) set(x, dt, i, a[i] = i - 4), set(y, dt, i, a[i]);
        combine_pair(x, y, N, dt);
        for (int i = 0; i < N; i++)
            CHECK_TRUE(get(x, dt, i) == a[i], "%s equal [%d]: %g, want %g", name, i, get(x, dt, i), a[i]);
        /* a zero vector on either side leaves the other */
        for (int i = 0; i < N; i++) set(x, dt, i, a[i] = 3 - i), set(y, dt, i, 0);
        combine_pair(x, y, N, dt);
        for (int i = 0; i < N; i++)
            CHECK_TRUE(get(x, dt, i) == a[i], "%s a+0 [%d]: %g, want %g", name, i, get(x, dt, i), a[i]);
        for (int i = 0; i < N; i++) set(x, dt, i, 0), set(y, dt, i, a[i]);
        combine_pair(x, y, N, dt);
        for (int i = 0; i < N; i++)
            CHECK_TRUE(get(x, dt, i) == a[i], "%s 0+b [%d]: %g, want %g", name, i, get(x, dt, i), a[i]);
        /* a general pair against the reference's combine: a = (1,2,...), b = (2,-1,3,...) */
        size_t counts[1] = {N};
        for (int i = 0; i < N; i++) {
            set(x, dt, i, a[i] = i + 1);
            set(y, dt, i, b[i] = (i * 7 % 5) - 1.5);
        }
        combine_pair(x, y, N, dt);
        adasum_ref_combine(a, b, counts, 1, dt, round_to);
        for (int i = 0; i < N; i++)
            CHECK_TRUE(get(x, dt, i) == a[i], "%s pair [%d]: %.17g, reference %.17g", name, i, get(x, dt, i), a[i]);
    }
}

/* ---- ranks as threads ---- */

typedef struct post {
    const void *data;
    size_t bytes;
    int full;
} post;

typedef struct net {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    post posts[MAX_RANKS][MAX_RANKS]; /* [from][to] */
} net;

typedef struct rank_ctx {
    net *net;
    int rank, size;
    void *buf;
    const size_t *counts;
    size_t n;
    hvd_dtype dt;
    hvd_status st;
    hvdc_buffer scratch;
} rank_ctx;

/* Posts send for peer, copies the peer's post, and returns once the peer has copied ours. */
static hvd_status exchange(void *ctx, int peer, const void *send, size_t send_bytes, void *recv,
                           size_t recv_bytes) {
    rank_ctx *r = ctx;
    net *w = r->net;
    hvd_status st = HVD_OK;
    pthread_mutex_lock(&w->mu);
    w->posts[r->rank][peer] = (post){send, send_bytes, 1};
    pthread_cond_broadcast(&w->cv);
    while (!w->posts[peer][r->rank].full) pthread_cond_wait(&w->cv, &w->mu);
    post *in = &w->posts[peer][r->rank];
    if (in->bytes != recv_bytes) st = HVD_ERR_INTERNAL; /* the two sides disagree on lengths */
    else if (recv_bytes) memcpy(recv, in->data, recv_bytes);
    in->full = 0;
    pthread_cond_broadcast(&w->cv);
    while (w->posts[r->rank][peer].full) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    return st;
}

static void *rank_main(void *arg) {
    rank_ctx *r = arg;
    hvdc_adasum_link link = {r->rank, r->size, exchange, r, NULL};
    r->st = hvdc__adasum(&link, r->buf, r->counts, r->n, r->dt, &r->scratch);
    return NULL;
}

/* Runs the VHDD on size threads; bufs[r] holds rank r's input, then its result. */
static void run_ranks(int size, void **bufs, const size_t *counts, size_t n, hvd_dtype dt,
                      hvd_status *status) {
    net w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    rank_ctx ctx[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < size; r++) {
        ctx[r] = (rank_ctx){&w, r, size, bufs[r], counts, n, dt, HVD_OK, {0}};
        pthread_create(&th[r], NULL, rank_main, &ctx[r]);
    }
    for (int r = 0; r < size; r++) {
        pthread_join(th[r], NULL);
        status[r] = ctx[r].st;
        hvdc__buffer_free(&ctx[r].scratch);
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
}

/* Rank r's element i of tensor t: small integers, hashed so a misplaced slice shows; tensor 2
 * is zero on rank 1, tensor 3 zero everywhere. */
static double input(int r, size_t t, size_t i) {
    if ((t == 2 && r == 1) || t == 3) return 0;
    uint64_t h = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (t + 1) * 0xC2B2AE3D27D4EB4Full ^ (i + 1) * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (double)(int)(h % 17) - 8;
}

static void test_vhdd(int size, hvd_dtype dt) {
    static const size_t counts[] = {7, 1, 64, 13, 0, 1001, 3};
    size_t n = sizeof counts / sizeof counts[0], total = 0;
    for (size_t t = 0; t < n; t++) total += counts[t];
    size_t elem = hvd_dtype_size(dt);
    void *bufs[MAX_RANKS];
    double *inputs[MAX_RANKS];
    for (int r = 0; r < size; r++) {
        bufs[r] = malloc(total * elem);
        inputs[r] = malloc(total * sizeof(double));
        size_t at = 0;
        for (size_t t = 0; t < n; t++)
            for (size_t i = 0; i < counts[t]; i++, at++) {
                inputs[r][at] = round_to(dt, input(r, t, i));
                set(bufs[r], dt, at, inputs[r][at]);
            }
    }
    double *ref = malloc(total * sizeof *ref);
    adasum_ref(ref, inputs, 0, size, counts, n, total, dt, round_to);
    hvd_status status[MAX_RANKS];
    run_ranks(size, bufs, counts, n, dt, status);
    size_t bitwise = 0, bad = 0;
    for (int r = 0; r < size; r++) {
        CHECK_TRUE(status[r] == HVD_OK, "np %d %s: rank %d returned %d", size, hvdc__dtype_name(dt), r, status[r]);
        CHECK_TRUE(memcmp(bufs[r], bufs[0], total * elem) == 0, "np %d %s: rank %d's result differs from rank 0's", size, hvdc__dtype_name(dt), r);
    }
    size_t at = 0;
    for (size_t t = 0; t < n; t++) {
        double largest = 0;
        for (size_t i = at; i < at + counts[t]; i++) largest = fmax(largest, fabs(ref[i]));
        for (size_t i = at; i < at + counts[t]; i++) {
            double got = get(bufs[0], dt, i);
            bitwise += got == ref[i];
            if (fabs(got - ref[i]) > tolerance(dt) * largest && bad++ < 5)
                CHECK_TRUE(0, "np %d %s: tensor %zu [%zu] = %.17g, reference %.17g", size,
                           hvdc__dtype_name(dt), t, i - at, got, ref[i]);
        }
        at += counts[t];
    }
    CHECK_TRUE(bad == 0, "np %d %s: %zu elements outside the tolerance", size, hvdc__dtype_name(dt), bad);
    printf("VHDD np %d %-8s: %s, %zu of %zu elements bitwise equal to the reference\n", size,
           hvdc__dtype_name(dt), bad ? "FAIL" : "OK", bitwise, total);
    for (int r = 0; r < size; r++) free(bufs[r]), free(inputs[r]);
    free(ref);
}

static void test_refusals(void) {
    float x[4] = {1, 2, 3, 4};
    size_t counts[1] = {4};
    hvdc_buffer scratch = {0};
    for (int size = 3; size <= 7; size += 2) {
        hvdc_adasum_link link = {0, size, exchange, NULL, NULL};
        CHECK_TRUE(hvdc__adasum(&link, x, counts, 1, HVD_FLOAT32, &scratch) == HVD_ERR_UNSUPPORTED,
                   "size %d was not refused", size);
    }
    CHECK_TRUE(hvdc__adasum_is_power_of_2(1) && hvdc__adasum_is_power_of_2(8) &&
               !hvdc__adasum_is_power_of_2(0) && !hvdc__adasum_is_power_of_2(6), "is_power_of_2");
    hvdc__buffer_free(&scratch);
}

int main(void) {
    test_combine_cases();
    test_refusals();
    for (int size = 1; size <= MAX_RANKS; size *= 2)
        for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) test_vhdd(size, dtypes[k]);
    return check_verdict("test_adasum");
}
