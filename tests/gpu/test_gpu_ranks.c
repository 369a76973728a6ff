/*
 * test_gpu_ranks.c - device collectives where what matters is several ranks, each with its own
 * device: what a one-GPU machine can never run, and the simulated device (tests/gpu/sim) runs
 * at np 2-4 in every suite (a machine with a GPU per rank runs it too).
 *   fusion across ranks: 64 device all-reduces submitted at once, in an order of each rank's
 *       own, several waited on other threads; negotiation fuses them (one NCCL call for many),
 *       every result exact, and the same again (the response cache's path);
 *   mismatch: a count that differs on one rank, and host memory on one rank where the others
 *       pass device memory: HVD_ERR_MISMATCH on every rank, the message naming what differs
 *       and where; the next device all-reduce works;
 *   join: the last rank joins while the others all-reduce on the device, which a joined rank
 *       cannot stand in for: their request fails with HVD_ERR_MISMATCH naming hvd_join, nobody
 *       hangs, every hvd_join returns the same last rank (one of the others), and device
 *       work then goes on.
 * One device per rank (options.device = local rank); inputs are mt_value's integers, so every
 * reduction is exact in any order.
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "hvdc.h"
#include "mpitest.h"

#define N_FUSED 64
#define FUSED_MAX 777 /* elements of the largest tensor */

static mt_ctx T;
static int local_rank;

static hvd_options on_device(void) {
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    return o;
}

typedef struct waited {
    hvd_handle handle;
    hvd_status status;
} waited;

static void *wait_in_thread(void *arg) {
    waited *w = arg;
    w->status = hvd_wait(&w->handle);
    return NULL;
}

/* Tensor i has (i * 53) % FUSED_MAX + 1 int32 elements; rank r submits them starting at
 * (r * 17) % N_FUSED, so no two ranks submit in the same order. */
static void fusion_across_ranks(int round) {
    int32_t *dev[N_FUSED], *host = malloc(FUSED_MAX * 4), *ref = malloc(FUSED_MAX * 4);
    size_t counts[N_FUSED];
    hvd_handle handles[N_FUSED];
    char names[N_FUSED][48];
    mt_begin(&T, "gpu.fusion across ranks, round %d", round);
    for (int i = 0; i < N_FUSED; i++) {
        counts[i] = (size_t)(i * 53) % FUSED_MAX + 1;
        dev[i] = gt_alloc(counts[i] * 4);
        mt_fill(host, HVD_INT32, HVD_SUM, T.rank, 0, counts[i], (uint64_t)(1000 + i));
        cudaMemcpy(dev[i], host, counts[i] * 4, cudaMemcpyHostToDevice);
        snprintf(names[i], sizeof names[i], "gpu.fused.%d", i);
    }
    hvd_options o = on_device();
    int submitted = 0;
    for (int k = 0; k < N_FUSED; k++) {
        int i = (k + T.rank * 17) % N_FUSED;
        handles[i] = HVD_HANDLE_NULL;
        submitted += MT_EXPECT(&T, hvd_allreduce_async(names[i], dev[i], dev[i], counts[i],
                                                       HVD_INT32, HVD_SUM, &o, &handles[i]), HVD_OK);
    }
    /* a quarter waited for on threads of their own, the rest here, in reverse */
    pthread_t threads[N_FUSED / 4];
    waited w[N_FUSED / 4];
    for (int j = 0; j < N_FUSED / 4; j++) {
        w[j] = (waited){handles[4 * j], HVD_OK};
        pthread_create(&threads[j], NULL, wait_in_thread, &w[j]);
    }
    for (int i = N_FUSED - 1; i >= 0; i--)
        if (i % 4 != 0 && handles[i] != HVD_HANDLE_NULL) MT_EXPECT(&T, hvd_wait(&handles[i]), HVD_OK);
    for (int j = 0; j < N_FUSED / 4; j++) {
        pthread_join(threads[j], NULL);
        MT_CHECK(&T, w[j].status == HVD_OK, "tensor %d waited on a thread: %s", 4 * j,
                 hvd_status_string(w[j].status));
    }
    for (int i = 0; i < N_FUSED && submitted == N_FUSED; i++) {
        cudaMemcpy(host, dev[i], counts[i] * 4, cudaMemcpyDeviceToHost);
        mt_reduce_ref(ref, HVD_INT32, HVD_SUM, T.size, 0, counts[i], (uint64_t)(1000 + i), 1.0, 1.0);
        mt_compare(&T, host, ref, HVD_INT32, counts[i], 0, names[i]);
    }
    for (int i = 0; i < N_FUSED; i++) cudaFree(dev[i]);
    free(host), free(ref);
    mt_end(&T);
}

/* One device all-reduce of count int32 (from buf, device or host memory); its status. */
static hvd_status allreduce_on(const char *name, void *buf, size_t count) {
    hvd_options o = on_device();
    hvd_handle h;
    hvd_status st = hvd_allreduce_async(name, buf, buf, count, HVD_INT32, HVD_SUM, &o, &h);
    return st == HVD_OK ? hvd_wait(&h) : st;
}

/* The next device all-reduce after a refusal works. */
static void device_goes_on(const char *name) {
    int32_t *d = gt_alloc(16 * 4), host[16];
    for (int i = 0; i < 16; i++) host[i] = T.rank + i;
    cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice);
    if (MT_EXPECT(&T, allreduce_on(name, d, 16), HVD_OK)) {
        cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 16; i++)
            MT_CHECK(&T, host[i] == T.size * (T.size - 1) / 2 + T.size * i, "%s[%d] = %d", name,
                     i, host[i]);
    }
    cudaFree(d);
}

static void mismatch(void) {
    mt_begin(&T, "gpu.mismatch count");
    int32_t *d = gt_alloc(64 * 4);
    cudaMemset(d, 0, 64 * 4);
    size_t count = T.rank == T.size - 1 ? 63 : 64;
    hvd_status st = allreduce_on("gpu.mismatch.count", d, count);
    const char *msg = hvd_last_error();
    MT_CHECK(&T, st == HVD_ERR_MISMATCH, "status %s, want HVD_ERR_MISMATCH on every rank (%s)",
             hvd_status_string(st), msg);
    MT_CHECK(&T, strstr(msg, "count") && strstr(msg, "63") && strstr(msg, "64"),
             "the message names the counts: %s", msg);
    if (T.rank == 0) printf("count mismatch: %s\n", msg);
    device_goes_on("gpu.mismatch.after1");
    mt_end(&T);

    mt_begin(&T, "gpu.mismatch host memory on one rank");
    int32_t host[64] = {0};
    hvd_options o = on_device();
    hvd_handle h;
    /* the last rank passes host memory without options.device: libhvdc sees where it lives */
    if (T.rank == T.size - 1) st = hvd_allreduce_async("gpu.mismatch.where", host, host, 64,
                                                       HVD_INT32, HVD_SUM, NULL, &h);
    else st = hvd_allreduce_async("gpu.mismatch.where", d, d, 64, HVD_INT32, HVD_SUM, &o, &h);
    if (st == HVD_OK) st = hvd_wait(&h);
    msg = hvd_last_error();
    MT_CHECK(&T, st == HVD_ERR_MISMATCH, "status %s, want HVD_ERR_MISMATCH on every rank (%s)",
             hvd_status_string(st), msg);
    MT_CHECK(&T, strstr(msg, "GPU memory") && strstr(msg, "CPU memory"),
             "the message says where the tensors live: %s", msg);
    if (T.rank == 0) printf("memory mismatch: %s\n", msg);
    device_goes_on("gpu.mismatch.after2");
    mt_end(&T);
    cudaFree(d);
}

static void join(void) {
    mt_begin(&T, "gpu.join while others reduce on the device");
    int last = -1;
    hvd_status st;
    if (T.rank == T.size - 1) {
        st = hvd_join(&last);
    } else {
        int32_t *d = gt_alloc(32 * 4);
        cudaMemset(d, 0, 32 * 4);
        st = allreduce_on("gpu.join.dev", d, 32);
        const char *msg = hvd_last_error();
        MT_CHECK(&T, st == HVD_ERR_MISMATCH && strstr(msg, "hvd_join"),
                 "a device all-reduce beside a joined rank: %s, want HVD_ERR_MISMATCH naming "
                 "hvd_join (%s)", hvd_status_string(st), msg);
        if (T.rank == 0) printf("beside a joined rank: %s\n", msg);
        cudaFree(d);
        st = hvd_join(&last);
    }
    /* the last to join is one of the others (which, depends on timing), the same everywhere */
    int lo = last, hi = last;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MT_CHECK(&T, st == HVD_OK && lo == hi && last >= 0 && last < T.size - 1,
             "hvd_join: %s, last %d (%d..%d over ranks), want one of ranks 0..%d everywhere",
             hvd_status_string(st), last, lo, hi, T.size - 2);
    device_goes_on("gpu.join.after");
    mt_end(&T);
}

int main(int argc, char **argv) {
    int started = gt_start(&argc, &argv, &T, &local_rank, 2);
    if (started != 0) return started;
    fusion_across_ranks(1);
    fusion_across_ranks(2);
    mismatch();
    join();
    return gt_finish(&T);
}
