/*
 * test_gpu_collectives.c - the collective checks of tests/mpi on CUDA device buffers: every
 * dtype and op of all-reduce (single, in and out of place, counts 1, 7, 4099 and 100003 that
 * are not multiples of 2, 4, 8 or 16: issue 17 found NCCL's out-of-place ncclAvg wrong in the
 * last elements; grouped = fused on the device, pre/postscaled; grouped with tensors of 4 MiB
 * and more, reduced where they lie beside the packed ones), then broadcast, allgather with
 * differing counts, reducescatter with uneven blocks, alltoall; and broadcast, allgather and
 * alltoall whose inputs are written on a non-blocking stream, ordered by their ready event; and
 * how device ops complete (test_completion): hvd_wait, hvd_poll and hvd_wait_on_stream return
 * only once the results can be read by work the device orders after them alone.
 * One rank per GPU; options.device = local rank. Inputs are mt_value's integer data, copied to
 * the device; results are copied back and compared with mt_reduce_ref computed on the host.
 *
 * Runs on a GPU (one per rank) and on the simulated device (tests/gpu/sim, any np). Usage:
 * test_gpu_collectives [--quick]   (--quick: no 100003-element case, 64K-element completion
 * checks 60 times instead of 1M 200 times; for the sanitizer builds)
 * Where it cannot run (no CUDA device, or fewer devices on a node than ranks there) every
 * rank prints "SKIPPED: ..." and exits 77, which meson counts as skipped.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../mpi/adasum_ref.h"
#include "gpu_test.h"
#include "hvdc.h"
#include "mpitest.h"

static mt_ctx T;
static int local_rank;
static int quick; /* --quick: smaller and fewer cases, for the sanitizer builds */

static double round_to(hvd_dtype dt, double v) { return dt == HVD_FLOAT32 ? (float)v : v; }

static void to_dev(void *d, const void *h, size_t n) { cudaMemcpy(d, h, n, cudaMemcpyHostToDevice); }
static void to_host(void *h, const void *d, size_t n) { cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost); }

/* NCCL has no 16-bit integers: those dtypes move on the device but do not reduce (hvdc.h). */
static int gpu_reduces(hvd_dtype dt) { return dt != HVD_INT16 && dt != HVD_UINT16; }

static void test_refused(hvd_dtype dt) {
    void *d = gt_alloc(64);
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    hvd_handle h;
    mt_begin(&T, "gpu.allreduce.%s refused", mt_dtype_name(dt));
    MT_EXPECT(&T, hvd_allreduce_async("gpu.refused", d, d, 4, dt, HVD_SUM, &o, &h),
              HVD_ERR_UNSUPPORTED);
    mt_end(&T);
    cudaFree(d);
}

/* The nodes as the test sees them: every rank's local rank and local size, gathered. */
typedef struct nodes_seen {
    int local_size, count;  /* this rank's node size; nodes (ranks with local rank 0) */
    int homogeneous, consecutive; /* every node the same size; node k = ranks k*ls .. */
} nodes_seen;

static nodes_seen see_nodes(void) {
    int mine[2] = {0, 0}, all[2 * MT_MAX_RANKS];
    hvd_local_rank(&mine[0]);
    hvd_local_size(&mine[1]);
    MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
    nodes_seen n = {mine[1], 0, 1, 1};
    for (int r = 0; r < T.size; r++) {
        n.count += all[2 * r] == 0;
        n.homogeneous &= all[2 * r + 1] == mine[1];
        n.consecutive &= all[2 * r] == r % mine[1];
    }
    return n;
}

/* The device Adasum across nodes (Horovod's NCCL hierarchy): Adasum over nodes of each node's
 * sum of prescale * x, times postscale / ranks per node. tensors[t] holds rank r's input. */
static void adasum_nodes_ref(double *out, const nodes_seen *n, const size_t *counts, size_t nt,
                             size_t total, double pre, double post) {
    double *node_in[MT_MAX_RANKS];
    for (int k = 0; k < n->count; k++) {
        node_in[k] = calloc(total, sizeof(double));
        for (int l = 0; l < n->local_size; l++) {
            size_t at = 0;
            for (size_t t = 0; t < nt; t++)
                for (size_t i = 0; i < counts[t]; i++, at++)
                    node_in[k][at] += pre * (double)mt_value(HVD_FLOAT32, HVD_AVERAGE,
                                                             k * n->local_size + l, i, 7 + t);
        }
        for (size_t i = 0; i < total; i++) node_in[k][i] = (float)node_in[k][i];
    }
    adasum_ref(out, node_in, 0, n->count, counts, nt, total, HVD_FLOAT32, round_to);
    for (size_t i = 0; i < total; i++) out[i] = (float)(out[i] * post / n->local_size);
    for (int k = 0; k < n->count; k++) free(node_in[k]);
}

/* HVD_ADASUM on device memory, as Horovod's NCCL Adasum: on one node the average (NCCL sums
 * inside the node, no nodes to combine, postscale / local_size); across a power of 2 of equal
 * nodes the Adasum of the nodes' averages (three tensors submitted together, so fused with
 * gaps between them, each within 1e-5 of its largest magnitude of adasum_ref, every rank the
 * same bits); otherwise refused on every rank with Horovod's words. */
static void test_adasum(void) {
    enum { NT = 3 };
    const size_t counts[NT] = {1001, 3, 64};
    size_t total = counts[0] + counts[1] + counts[2];
    nodes_seen n = see_nodes();
    int one_node = n.count == 1, runs = n.homogeneous && (n.count & (n.count - 1)) == 0;
    mt_begin(&T, "gpu.allreduce adasum: %d node(s) of %d rank(s)%s", n.count, n.local_size,
             one_node ? ", the average" : runs ? ", across nodes" : ", refused");
    MT_CHECK(&T, !runs || n.consecutive, "the test assumes node k holds ranks k*%d..", n.local_size);
    float *d[NT], *host = malloc(total * sizeof(float)), *got = malloc(total * sizeof(float));
    double *ref = malloc(total * sizeof(double));
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    o.prescale = 0.5;
    o.postscale = 2.0;
    hvd_handle h[NT];
    hvd_status st[NT];
    for (size_t t = 0; t < NT; t++) d[t] = gt_alloc(counts[t] * sizeof(float));
    if (runs && !one_node) { /* the last rank cannot number the nodes (HVDC_TEST_FAULTS): the
                                first Adasum fails on every rank, before any data moved */
        if (T.rank == T.size - 1) setenv("HVDC_TEST_FAULTS", "adasum_nodes", 1);
        hvd_handle hf;
        if (MT_EXPECT(&T, hvd_allreduce_async("gpu.adasum.nomem", d[0], d[0], counts[0],
                                              HVD_FLOAT32, HVD_ADASUM, &o, &hf), HVD_OK))
            MT_EXPECT(&T, hvd_wait(&hf), HVD_ERR_NO_MEMORY);
        if (T.rank == T.size - 1) unsetenv("HVDC_TEST_FAULTS");
    }
    size_t at = 0;
    for (size_t t = 0; t < NT; t++) {
        mt_fill(host + at, HVD_FLOAT32, HVD_AVERAGE, T.rank, 0, counts[t], 7 + t);
        to_dev(d[t], host + at, counts[t] * sizeof(float));
        char name[32];
        snprintf(name, sizeof name, "gpu.adasum.%zu", t);
        st[t] = hvd_allreduce_async(name, d[t], d[t], counts[t], HVD_FLOAT32, HVD_ADASUM, &o, &h[t]);
        at += counts[t];
    }
    for (size_t t = 0; t < NT; t++)
        if (MT_EXPECT(&T, st[t], HVD_OK)) st[t] = hvd_wait(&h[t]);
    if (one_node || runs) {
        at = 0;
        for (size_t t = 0; t < NT; t++) {
            if (MT_EXPECT(&T, st[t], HVD_OK)) to_host(got + at, d[t], counts[t] * sizeof(float));
            at += counts[t];
        }
        if (one_node) {
            at = 0;
            for (size_t t = 0; t < NT; t++) {
                float *want = malloc(counts[t] * sizeof(float));
                mt_reduce_ref(want, HVD_FLOAT32, HVD_AVERAGE, T.size, 0, counts[t], 7 + t, 0.5, 2.0);
                mt_compare(&T, got + at, want, HVD_FLOAT32, counts[t], 1, "gpu.adasum");
                free(want);
                at += counts[t];
            }
        } else {
            adasum_nodes_ref(ref, &n, counts, NT, total, 0.5, 2.0);
            size_t bad = 0;
            at = 0;
            for (size_t t = 0; t < NT; t++) {
                double largest = 0;
                for (size_t i = at; i < at + counts[t]; i++) largest = fmax(largest, fabs(ref[i]));
                for (size_t i = at; i < at + counts[t]; i++)
                    if (fabs(got[i] - ref[i]) > 1e-5 * largest && bad++ < 3)
                        mt_fail(&T, __FILE__, __LINE__, "gpu.adasum.%zu [%zu] = %.9g, reference %.9g",
                                t, i - at, got[i], ref[i]);
                at += counts[t];
            }
            MT_CHECK(&T, bad == 0, "%zu elements outside 1e-5 of the reference", bad);
            memcpy(host, got, total * sizeof(float));
            MPI_Bcast(host, (int)total, MPI_FLOAT, 0, MPI_COMM_WORLD);
            MT_CHECK(&T, memcmp(host, got, total * sizeof(float)) == 0,
                     "rank %d's result differs from rank 0's", T.rank);
        }
    } else {
        const char *words = n.homogeneous ? "non-power of 2 nodes" : "heterogeneous cluster";
        for (size_t t = 0; t < NT; t++)
            if (MT_EXPECT(&T, st[t], HVD_ERR_UNSUPPORTED)) {
                const char *e = hvd_last_error();
                MT_CHECK(&T, e && strstr(e, words), "message: %s", e ? e : "(null)");
            }
    }
    mt_end(&T);
    for (size_t t = 0; t < NT; t++) cudaFree(d[t]);
    free(host), free(got), free(ref);
}

/* The device Adasum across nodes near the float32 and float16 limits: the same vector on
 * every rank (each node's sum is local_size times it, exactly, and the nodes' Adasum of equal
 * vectors is that vector) comes back unchanged, bit for bit, as Horovod's double dot products
 * and norms make it. In the tensor's type they underflowed (float32 near 1e-38) or overflowed
 * (near 1e38), and a norm^2 under 1e-8 was taken for zero (float16 near 6e-5): the nodes'
 * vectors were summed, or NaN. Only where the device Adasum runs across nodes. */
static void test_adasum_extremes(void) {
    enum { COUNT = 1001 };
    static const struct { hvd_dtype dt; double scale; const char *what; } cases[] = {
        {HVD_FLOAT32, 0x1p-122, "float32 tiny"}, {HVD_FLOAT32, 0x1p+123, "float32 huge"},
        {HVD_FLOAT16, 0x1p-14, "float16 tiny"}, {HVD_FLOAT16, 0x1p-21, "float16 subnormal"},
        {HVD_FLOAT16, 0x1p+11, "float16 huge"}};
    nodes_seen n = see_nodes();
    if (n.count < 2 || !n.homogeneous || (n.count & (n.count - 1)) != 0) return;
    mt_begin(&T, "gpu.allreduce adasum across %d nodes near the float32 and float16 limits",
             n.count);
    void *host = malloc(COUNT * sizeof(float)), *got = malloc(COUNT * sizeof(float));
    void *d = gt_alloc(COUNT * sizeof(float));
    hvd_options o = HVD_OPTIONS_DEFAULT;
    o.device = local_rank;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hvd_dtype dt = cases[c].dt;
        size_t nbytes = COUNT * mt_dtype_size(dt);
        for (size_t i = 0; i < COUNT; i++) /* -8 .. 7 times the scale, the same on every rank */
            mt_set_f64(host, dt, i, (double)((int)(mt_hash(3, c, i) % 16) - 8) * cases[c].scale);
        to_dev(d, host, nbytes);
        char name[48];
        snprintf(name, sizeof name, "gpu.adasum.extreme.%zu", c);
        hvd_handle h;
        if (!MT_EXPECT(&T, hvd_allreduce_async(name, d, d, COUNT, dt, HVD_ADASUM, &o, &h),
                       HVD_OK) ||
            !MT_EXPECT(&T, hvd_wait(&h), HVD_OK))
            continue;
        to_host(got, d, nbytes);
        size_t bad = 0;
        for (size_t i = 0; i < COUNT; i++) {
            double g = mt_get_f64(got, dt, i), want = mt_get_f64(host, dt, i);
            if (g != want && bad++ < 3)
                mt_fail(&T, __FILE__, __LINE__, "%s [%zu] = %.9g, expected the input %.9g",
                        cases[c].what, i, g, want);
        }
        if (T.rank == 0 && bad == 0) printf("#   %s: every element unchanged\n", cases[c].what);
    }
    mt_end(&T);
    cudaFree(d);
    free(host), free(got);
}

/* A float16/bfloat16 average on the device: NCCL sums in the dtype's own precision (as
 * PyTorch DDP's fp16 all-reduce does), after libhvdc divided each input by the ranks. Each of
 * the n divided inputs and n - 1 partial sums is rounded once, so the error is bounded by the
 * inputs' magnitude, not the result's: |got - ref| <= n * ulp(max over ranks |x|), with
 * ulp(m) <= m * 2^-10 (float16) or m * 2^-7 (bfloat16). (The host path widens to float32.)
 * Checked where 1/n is not exact, i.e. at np 3; at np 1, 2 and 4 the comparison is exact-ish. */
static size_t compare_narrow_average(const void *got, const void *ref, hvd_dtype dt,
                                     size_t count, uint64_t seed, const char *what) {
    double unit = dt == HVD_FLOAT16 ? 0x1p-10 : 0x1p-7;
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        double most = 1.0;
        for (int r = 0; r < T.size; r++) {
            double x = fabs((double)mt_value(dt, HVD_AVERAGE, r, i, seed));
            if (x > most) most = x;
        }
        double g = mt_get_f64(got, dt, i), want = mt_get_f64(ref, dt, i);
        if (fabs(g - want) > (double)T.size * most * unit && bad++ < 3)
            mt_fail(&T, __FILE__, __LINE__, "%s: element %zu is %g, want %g within %g", what, i,
                    g, want, (double)T.size * most * unit);
    }
    MT_CHECK(&T, bad == 0, "%s: %zu of %zu elements out of the bound", what, bad, count);
    return bad;
}

static void test_allreduce_at(hvd_dtype dt, hvd_reduce_op op, size_t count, double pre,
                              double post, int in_place) {
    size_t es = mt_dtype_size(dt), nb = count * es;
    void *host = malloc(nb + 1), *ref = malloc(nb + 1), *got = malloc(nb + 1);
    void *send = gt_alloc(nb), *recv = in_place ? send : gt_alloc(nb);
    char name[128];
    snprintf(name, sizeof name, "gpu.ar.%s.%s.%zu.%g.%g%s", mt_dtype_name(dt), mt_op_name(op),
             count, pre, post, in_place ? ".inplace" : "");
    mt_begin(&T, "%s", name);
    mt_fill(host, dt, op, T.rank, 0, count, 1);
    to_dev(send, host, nb);
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    o.prescale = pre;
    o.postscale = post;
    hvd_handle h;
    if (MT_EXPECT(&T, hvd_allreduce_async(name, send, recv, count, dt, op, &o, &h), HVD_OK) &&
        MT_EXPECT(&T, hvd_wait(&h), HVD_OK)) {
        to_host(got, recv, nb);
        mt_reduce_ref(ref, dt, op, T.size, 0, count, 1, pre, post);
        int approx = (op == HVD_AVERAGE && mt_is_float(dt)) || pre != 1.0 || post != 1.0;
        if (op == HVD_AVERAGE && (dt == HVD_FLOAT16 || dt == HVD_BFLOAT16) && pre == 1.0 &&
            post == 1.0)
            compare_narrow_average(got, ref, dt, count, 1, name);
        else
            mt_compare(&T, got, ref, dt, count, approx, name);
    }
    mt_end(&T);
    if (!in_place) cudaFree(recv);
    cudaFree(send), free(host), free(ref), free(got);
}

/* n tensors in one grouped all-reduce: packed by the device kernel, one NCCL call. on_stream:
 * hvd_wait_on_stream, and the results read back on that stream only (hvdc.torch waits so). */
static void test_grouped(hvd_dtype dt, int n, int on_stream) {
    size_t es = mt_dtype_size(dt);
    const char *names[300];
    char namebuf[300][32];
    const void *sends[300];
    void *recvs[300];
    size_t counts[300];
    cudaStream_t side = NULL;
    if (on_stream) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    mt_begin(&T, "gpu.grouped.%s.%d%s", mt_dtype_name(dt), n, on_stream ? ".on_stream" : "");
    for (int i = 0; i < n; i++) {
        counts[i] = (size_t)(i * 37 % 101);
        snprintf(namebuf[i], sizeof namebuf[i], "gpu.g.%s.%d.%d", mt_dtype_name(dt), n, i);
        names[i] = namebuf[i];
        void *host = malloc(counts[i] * es + 1);
        mt_fill(host, dt, HVD_SUM, T.rank, 0, counts[i], (uint64_t)i + 100);
        void *s = gt_alloc(counts[i] * es);
        to_dev(s, host, counts[i] * es);
        free(host);
        sends[i] = s;
        recvs[i] = i % 2 ? s : gt_alloc(counts[i] * es); /* half in place */
    }
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    hvd_handle h;
    if (MT_EXPECT(&T, hvd_grouped_allreduce_async(n, names, sends, recvs, counts, dt, HVD_SUM, &o,
                                                  &h), HVD_OK) &&
        MT_EXPECT(&T, on_stream ? hvd_wait_on_stream(&h, side) : hvd_wait(&h), HVD_OK)) {
        for (int i = 0; i < n; i++) {
            void *got = malloc(counts[i] * es + 1), *ref = malloc(counts[i] * es + 1);
            if (on_stream) { /* side waits for nothing else: an early release reads stale data */
                cudaMemcpyAsync(got, recvs[i], counts[i] * es, cudaMemcpyDeviceToHost, side);
                cudaStreamSynchronize(side);
            } else {
                to_host(got, recvs[i], counts[i] * es);
            }
            mt_reduce_ref(ref, dt, HVD_SUM, T.size, 0, counts[i], (uint64_t)i + 100, 1.0, 1.0);
            mt_compare(&T, got, ref, dt, counts[i], 0, names[i]);
            free(got), free(ref);
        }
    }
    for (int i = 0; i < n; i++) {
        if (recvs[i] != sends[i]) cudaFree(recvs[i]);
        cudaFree((void *)sends[i]);
    }
    if (side) cudaStreamDestroy(side);
    mt_end(&T);
}

/* One grouped all-reduce with two tensors of 4 MiB and more (gpu_plan.h's HVDC_GPU_DIRECT_BYTES:
 * reduced where they lie, in an NCCL group with the fusion buffer's call) among two small ones
 * (packed), each pair one in place and one out of place, with the op's scaling: the values of
 * the fused path. */
static void test_grouped_direct(hvd_dtype dt, hvd_reduce_op op, double pre, double post) {
    enum { N = 4 };
    size_t es = mt_dtype_size(dt), big = ((size_t)4 << 20) / es;
    size_t counts[N] = {33, big + 5, 7, big + 1};
    const char *names[N];
    char namebuf[N][64];
    const void *sends[N];
    void *recvs[N];
    mt_begin(&T, "gpu.grouped_direct.%s.%s.%g.%g", mt_dtype_name(dt), mt_op_name(op), pre, post);
    for (int i = 0; i < N; i++) {
        snprintf(namebuf[i], sizeof namebuf[i], "gpu.gd.%s.%s.%g.%g.%d", mt_dtype_name(dt),
                 mt_op_name(op), pre, post, i);
        names[i] = namebuf[i];
        void *host = malloc(counts[i] * es);
        mt_fill(host, dt, op, T.rank, 0, counts[i], (uint64_t)i + 200);
        void *s = gt_alloc(counts[i] * es);
        to_dev(s, host, counts[i] * es);
        free(host);
        sends[i] = s;
        recvs[i] = i >= 2 ? s : gt_alloc(counts[i] * es); /* 0, 1 out of place; 2, 3 in place */
    }
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    o.prescale = pre;
    o.postscale = post;
    hvd_handle h;
    if (MT_EXPECT(&T, hvd_grouped_allreduce_async(N, names, sends, recvs, counts, dt, op, &o, &h),
                  HVD_OK) &&
        MT_EXPECT(&T, hvd_wait(&h), HVD_OK)) {
        int approx = (op == HVD_AVERAGE && mt_is_float(dt)) || pre != 1.0 || post != 1.0;
        for (int i = 0; i < N; i++) {
            void *got = malloc(counts[i] * es), *ref = malloc(counts[i] * es);
            to_host(got, recvs[i], counts[i] * es);
            mt_reduce_ref(ref, dt, op, T.size, 0, counts[i], (uint64_t)i + 200, pre, post);
            if (op == HVD_AVERAGE && (dt == HVD_FLOAT16 || dt == HVD_BFLOAT16))
                compare_narrow_average(got, ref, dt, counts[i], (uint64_t)i + 200, names[i]);
            else
                mt_compare(&T, got, ref, dt, counts[i], approx, names[i]);
            free(got), free(ref);
        }
    }
    for (int i = 0; i < N; i++) {
        if (recvs[i] != sends[i]) cudaFree(recvs[i]);
        cudaFree((void *)sends[i]);
    }
    mt_end(&T);
}

/* Broadcast, allgather and alltoall with options: the inputs are written on a non-blocking
 * stream (which the legacy default stream does not wait for) and handed over by a ready event
 * recorded there, so only that event orders the collective after the writes. */
static void test_ready_events(void) {
    const size_t n = quick ? 1 << 16 : 1 << 20; /* big enough that an unordered read would see zeros */
    size_t es = sizeof(int32_t), counts[MT_MAX_RANKS];
    int32_t *h = NULL, *got = malloc(n * es * 2);
    void *d = gt_alloc(n * es), *d2 = gt_alloc(n * es * (size_t)T.size);
    cudaStream_t s;
    cudaEvent_t ev;
    cudaMallocHost((void **)&h, n * es);
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    o.ready_event = ev;
    hvd_handle hd;

    mt_begin(&T, "gpu.ready.broadcast");
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(T.rank * 1000 + i % 977);
    cudaMemsetAsync(d, 0, n * es, s);
    cudaMemcpyAsync(d, h, n * es, cudaMemcpyHostToDevice, s);
    cudaEventRecord(ev, s);
    if (MT_EXPECT(&T, hvd_broadcast_async("gpu.ready.bc", d, n, HVD_INT32, 0, &o, &hd), HVD_OK) &&
        MT_EXPECT(&T, hvd_wait(&hd), HVD_OK)) {
        to_host(got, d, n * es);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += got[i] != (int32_t)(i % 977);
        MT_CHECK(&T, bad == 0, "broadcast after a ready event: %zu of %zu wrong", bad, n);
    }
    mt_end(&T);

    /* each section sends values of its own and clears its output first, so a collective that
     * read stale data or wrote nothing cannot pass on what the section before left behind */
    mt_begin(&T, "gpu.ready.allgather");
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(100000 + T.rank * 1000 + i % 977);
    cudaMemsetAsync(d2, 0xff, n * (size_t)T.size * es, s);
    cudaMemcpyAsync(d, h, n * es, cudaMemcpyHostToDevice, s);
    cudaEventRecord(ev, s);
    size_t total = 0;
    if (MT_EXPECT(&T, hvd_allgather_async("gpu.ready.ag", d, n, d2, n * (size_t)T.size, HVD_INT32,
                                          &total, NULL, &o, &hd), HVD_OK) &&
        MT_EXPECT(&T, hvd_wait(&hd), HVD_OK)) {
        size_t bad = 0;
        for (int r = 0; r < T.size; r++) {
            to_host(got, (char *)d2 + (size_t)r * n * es, n * es);
            for (size_t i = 0; i < n; i++) bad += got[i] != (int32_t)(100000 + r * 1000 + i % 977);
        }
        MT_CHECK(&T, bad == 0 && total == n * (size_t)T.size, "allgather after a ready event: %zu wrong", bad);
    }
    mt_end(&T);

    mt_begin(&T, "gpu.ready.alltoall");
    size_t block = n / (size_t)T.size;
    for (int r = 0; r < T.size; r++) counts[r] = block;
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(200000 + T.rank * 1000 + i % 977);
    cudaMemsetAsync(d2, 0xff, n * (size_t)T.size * es, s);
    cudaMemcpyAsync(d, h, n * es, cudaMemcpyHostToDevice, s);
    cudaEventRecord(ev, s);
    if (MT_EXPECT(&T, hvd_alltoall_async("gpu.ready.a2a", d, counts, d2, n * (size_t)T.size,
                                         HVD_INT32, &total, NULL, &o, &hd), HVD_OK) &&
        MT_EXPECT(&T, hvd_wait(&hd), HVD_OK)) {
        size_t bad = 0;
        to_host(got, d2, block * (size_t)T.size * es);
        for (int r = 0; r < T.size; r++) /* rank r's block for me: its elements [me*block, ...) */
            for (size_t i = 0; i < block; i++)
                bad += got[(size_t)r * block + i] !=
                       (int32_t)(200000 + r * 1000 + ((size_t)T.rank * block + i) % 977);
        MT_CHECK(&T, bad == 0, "alltoall after a ready event: %zu wrong", bad);
    }
    mt_end(&T);
    cudaStreamSynchronize(s);
    cudaEventDestroy(ev), cudaStreamDestroy(s), cudaFreeHost(h);
    cudaFree(d), cudaFree(d2), free(got);
}

/* Broadcast, allgather (count = rank + 3), reducescatter (uneven), alltoall on device memory.
 * These calls take no options: the library must recognise device pointers itself. */
static void test_movers(hvd_dtype dt) {
    size_t es = mt_dtype_size(dt), n = 1000 + 7;
    void *h = malloc(64 * 1024), *ref = malloc(64 * 1024);
    void *d = gt_alloc(64 * 1024), *d2 = gt_alloc(64 * 1024);

    mt_begin(&T, "gpu.broadcast.%s", mt_dtype_name(dt));
    mt_fill(h, dt, HVD_MAX, T.rank, 0, n, 7);
    to_dev(d, h, n * es);
    if (MT_EXPECT(&T, hvd_broadcast("gpu.bc", d, n, dt, T.size - 1), HVD_OK)) {
        to_host(h, d, n * es);
        mt_fill(ref, dt, HVD_MAX, T.size - 1, 0, n, 7);
        mt_compare(&T, h, ref, dt, n, 0, "broadcast");
    }
    mt_end(&T);

    mt_begin(&T, "gpu.allgather.%s", mt_dtype_name(dt));
    size_t mine = (size_t)T.rank + 3, total = 0, got_total = 0, rc[MT_MAX_RANKS];
    mt_fill(h, dt, HVD_MAX, T.rank, 0, mine, 8);
    to_dev(d, h, mine * es);
    if (MT_EXPECT(&T, hvd_allgather("gpu.ag", d, mine, d2, 4096, dt, &got_total, rc), HVD_OK)) {
        to_host(h, d2, got_total * es);
        for (int r = 0; r < T.size; r++) {
            mt_fill((char *)ref + total * es, dt, HVD_MAX, r, 0, (size_t)r + 3, 8);
            total += (size_t)r + 3;
        }
        MT_CHECK(&T, got_total == total, "allgather total %zu, expected %zu", got_total, total);
        mt_compare(&T, h, ref, dt, total, 0, "allgather");
    }
    mt_end(&T);

    if (!gpu_reduces(dt)) goto alltoall; /* main checks that they are refused */
    mt_begin(&T, "gpu.reducescatter.%s", mt_dtype_name(dt));
    size_t rs_count = 100 * (size_t)T.size + 3, got_n = 0;
    size_t base = rs_count / (size_t)T.size, extra = rs_count % (size_t)T.size;
    size_t off = (size_t)T.rank * base + ((size_t)T.rank < extra ? (size_t)T.rank : extra);
    size_t my_n = base + ((size_t)T.rank < extra);
    mt_fill(h, dt, HVD_SUM, T.rank, 0, rs_count, 9);
    to_dev(d, h, rs_count * es);
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    hvd_handle hd;
    if (MT_EXPECT(&T, hvd_reducescatter_async("gpu.rs", d, d2, rs_count, dt, HVD_SUM, &o, &got_n,
                                              &hd), HVD_OK) &&
        MT_EXPECT(&T, hvd_wait(&hd), HVD_OK)) {
        to_host(h, d2, my_n * es);
        mt_reduce_ref(ref, dt, HVD_SUM, T.size, off, my_n, 9, 1.0, 1.0);
        MT_CHECK(&T, got_n == my_n, "reducescatter kept %zu, expected %zu", got_n, my_n);
        mt_compare(&T, h, ref, dt, my_n, 0, "reducescatter");
    }
    mt_end(&T);

alltoall:
    mt_begin(&T, "gpu.alltoall.%s", mt_dtype_name(dt));
    size_t sc[MT_MAX_RANKS], rcv[MT_MAX_RANKS], sent = 0, expect = 0, got_a = 0;
    for (int p = 0; p < T.size; p++) { /* rank r sends r + p + 1 elements to p */
        sc[p] = (size_t)(T.rank + p + 1);
        mt_fill((char *)h + sent * es, dt, HVD_MAX, T.rank, 1000 * (size_t)p, sc[p], 10);
        sent += sc[p];
    }
    to_dev(d, h, sent * es);
    if (MT_EXPECT(&T, hvd_alltoall("gpu.a2a", d, sc, d2, 4096, dt, &got_a, rcv), HVD_OK)) {
        for (int s = 0; s < T.size; s++) {
            size_t k = (size_t)(s + T.rank + 1);
            mt_fill((char *)ref + expect * es, dt, HVD_MAX, s, 1000 * (size_t)T.rank, k, 10);
            expect += k;
        }
        to_host(h, d2, expect * es);
        MT_CHECK(&T, got_a == expect, "alltoall received %zu, expected %zu", got_a, expect);
        mt_compare(&T, h, ref, dt, expect, 0, "alltoall");
    }
    mt_end(&T);
    cudaFree(d), cudaFree(d2), free(h), free(ref);
}

/* Copies recv on a stream of its own, which waits for nothing: it sees the results only if
 * they were written when the wait returned (or, with after, once that stream waited). */
static int32_t read_back(const int32_t *recv, size_t i, cudaStream_t stream) {
    int32_t v = -1;
    cudaMemcpyAsync(&v, recv + i, sizeof v, cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    return v;
}

typedef struct waiter_arg {
    hvd_handle handle;
    hvd_status status;
} waiter_arg;

/* Submits the completion test's all-reduce under its one name, which the previous
 * iteration's wait must have freed. A name still in flight is a failure; the submission is
 * then retried (for up to 10 s) until the name frees, so that every rank still submits the
 * same sequence and the test ends instead of waiting for a rank that gave up. */
static hvd_status submit_reused(int it, const int32_t *send, int32_t *recv, size_t n,
                                const hvd_options *o, hvd_handle *h) {
    hvd_status st = hvd_allreduce_async("gpu.completion", send, recv, n, HVD_INT32, HVD_SUM, o, h);
    if (st != HVD_ERR_DUPLICATE_NAME) return st;
    mt_fail(&T, __FILE__, __LINE__, "iteration %d: the name is still in flight after the "
            "previous wait returned: %s", it, hvd_last_error());
    double until = mt_now() + 10.0;
    while (st == HVD_ERR_DUPLICATE_NAME && mt_now() < until) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
        st = hvd_allreduce_async("gpu.completion", send, recv, n, HVD_INT32, HVD_SUM, o, h);
    }
    return st;
}

static void *wait_in_thread(void *arg) {
    waiter_arg *w = arg;
    hvd_handle h = w->handle;
    w->status = hvd_wait(&h);
    return NULL;
}

/* Device ops complete on the waiting thread from their done event (runtime/complete.h): the
 * same name resubmitted at once (its name must be free when hvd_wait or hvd_wait_on_stream
 * returns), polling, two
 * threads waiting on one handle, and hvd_wait_on_stream. Inputs change every iteration, and
 * are read back on a stream that waits for nothing, so a wait that returned early fails. */
static void test_completion(void) {
    const size_t count = (size_t)1 << (quick ? 16 : 20); /* long enough that an early return shows */
    int32_t *send = gt_alloc(count * 4), *recv = gt_alloc(count * 4);
    int32_t *host = malloc(count * 4);
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    for (int mode = 0; mode < 3; mode++) { /* blocking, polled, waited on a stream */
        static const char *const modes[3] = {"wait", "poll", "on_stream"};
        mt_begin(&T, "gpu.completion.%s", modes[mode]);
        /* a wrong read-back goes on to the next iteration, so every rank submits the same
         * sequence; a failed submission or wait stops (it fails on every rank) */
        for (int it = 0; it < (quick ? 60 : 200); it++) {
            size_t n = it % 2 ? count : 1;
            for (size_t i = 0; i < n; i++) host[i] = (int32_t)(it + 1) * (T.rank + 1) + (int32_t)i;
            to_dev(send, host, n * 4);
            hvd_handle h;
            if (!MT_EXPECT(&T, submit_reused(it, send, recv, n, &o, &h), HVD_OK)) break;
            if (mode == 1) {
                int done = 0;
                while (!done && MT_EXPECT(&T, hvd_poll(h, &done), HVD_OK)) {}
            }
            hvd_status st = mode == 2 ? hvd_wait_on_stream(&h, side) : hvd_wait(&h);
            if (!MT_EXPECT(&T, st, HVD_OK)) break;
            if (h != HVD_HANDLE_NULL) mt_fail(&T, __FILE__, __LINE__, "the wait left the handle live");
            int64_t ranks = (int64_t)T.size * (T.size + 1) / 2;
            size_t i = n - 1;
            int64_t want = (int64_t)(it + 1) * ranks + (int64_t)T.size * (int64_t)i;
            int32_t got = read_back(recv, i, side);
            if (got != (int32_t)want)
                mt_fail(&T, __FILE__, __LINE__, "iteration %d: element %zu is %d, want %lld "
                        "(the wait returned before the result was written)", it, i, got,
                        (long long)want);
        }
        mt_end(&T);
    }
    mt_begin(&T, "gpu.completion.two_waiters");
    {
        hvd_handle h;
        to_dev(send, host, count * 4);
        if (MT_EXPECT(&T, hvd_allreduce_async("gpu.completion.two", send, recv, count, HVD_INT32,
                                              HVD_SUM, &o, &h), HVD_OK)) {
            waiter_arg a = {h, HVD_OK}, b = {h, HVD_OK};
            pthread_t ta, tb;
            pthread_create(&ta, NULL, wait_in_thread, &a);
            pthread_create(&tb, NULL, wait_in_thread, &b);
            pthread_join(ta, NULL);
            pthread_join(tb, NULL);
            /* one releases the handle; the other finds it released */
            int ok = (a.status == HVD_OK) + (b.status == HVD_OK);
            int gone = (a.status == HVD_ERR_INVALID_ARG) + (b.status == HVD_ERR_INVALID_ARG);
            if (ok != 1 || gone != 1)
                mt_fail(&T, __FILE__, __LINE__, "two waiters on one handle: %s and %s, want one "
                        "OK and one INVALID_ARG", hvd_status_string(a.status),
                        hvd_status_string(b.status));
        }
    }
    mt_end(&T);
    mt_begin(&T, "gpu.completion.on_stream_host");
    { /* a host op: hvd_wait_on_stream is hvd_wait */
        int32_t x = T.rank + 1, y = 0;
        hvd_handle h;
        if (MT_EXPECT(&T, hvd_allreduce_async("gpu.completion.host", &x, &y, 1, HVD_INT32,
                                              HVD_SUM, NULL, &h), HVD_OK) &&
            MT_EXPECT(&T, hvd_wait_on_stream(&h, side), HVD_OK) &&
            y != T.size * (T.size + 1) / 2)
            mt_fail(&T, __FILE__, __LINE__, "host op through hvd_wait_on_stream: %d", y);
    }
    mt_end(&T);
    cudaStreamDestroy(side);
    cudaFree(send), cudaFree(recv), free(host);
}

int main(int argc, char **argv) {
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int started = gt_start(&argc, &argv, &T, &local_rank, 1);
    if (started != 0) return started;
    for (int d = 0; d < HVD_DTYPE_COUNT; d++) {
        hvd_dtype dt = mt_all_dtypes[d];
        if (!gpu_reduces(dt)) {
            test_refused(dt);
            test_movers(dt);
            continue;
        }
        for (int o = 0; o < HVD_REDUCE_OP_COUNT; o++) {
            if (!mt_op_defined(dt, mt_all_ops[o])) continue;
            const size_t counts[4] = {1, 7, 4099, 100003};
            for (int c = 0; c < (quick ? 3 : 4); c++)
                for (int in_place = 0; in_place < 2; in_place++)
                    test_allreduce_at(dt, mt_all_ops[o], counts[c], 1.0, 1.0, in_place);
        }
        if (mt_is_float(dt)) {
            test_allreduce_at(dt, HVD_SUM, 4099, 0.5, 2.0, 0);
        } else if (dt != HVD_BOOL) { /* integers, scaled as Horovod scales them (truncated) */
            test_allreduce_at(dt, HVD_SUM, 4099, 0.5, 3.0, 0);
            test_allreduce_at(dt, HVD_AVERAGE, 4099, 0.5, 0.75, 0);
        }
        test_grouped(dt, 5, 0);
        test_movers(dt);
    }
    test_adasum();
    test_adasum_extremes();
    test_grouped(HVD_FLOAT32, 300, 0); /* 3 pack launches */
    test_grouped(HVD_FLOAT32, 300, 1);
    test_grouped_direct(HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0); /* the division on the way out */
    test_grouped_direct(HVD_INT32, HVD_AVERAGE, 1.0, 1.0);   /* ncclAvg, in place only */
    if (!quick) {
        test_grouped_direct(HVD_FLOAT32, HVD_SUM, 0.5, 2.0); /* scaled in and out */
        test_grouped_direct(HVD_FLOAT16, HVD_AVERAGE, 1.0, 1.0); /* divided on the way in */
        test_grouped_direct(HVD_FLOAT64, HVD_MAX, 1.0, 1.0);
    }
    test_ready_events();
    test_completion();
    return gt_finish(&T);
}
