/*
 * test_sim_queries.c - how often a submission asks the CUDA driver where its buffers live,
 * counted on the simulated device (sim_pointer_queries). On a GPU each ask is a driver call
 * (cuPointerGetAttributes) for every tensor of every step, so the counts are part of a
 * submission's host cost (issue 34); an operation's whole life is counted, submission to wait.
 *   - a host all-reduce in place: one ask (its one buffer); out of place: two
 *   - a host reducescatter: one (the send buffer decides; the result goes to host memory)
 *   - a device all-reduce in place (options.device), once its allocation has been seen: none
 *     (gpu_pointer.c remembers device allocations); the first sighting asks twice (the
 *     pointer, then its allocation's range)
 * The results are checked too. Simulated device only (the counter is the simulator's); np 1.
 */
#include <stdio.h>

#include "gpu_test.h"
#include "hvdc.h"
#include "mpitest.h"
#include "sim.h"

static mt_ctx T;
static int local_rank;

static unsigned long long asked_before;

/* Counts from here. */
static void count_asks(void) { asked_before = sim_pointer_queries(); }

/* The asks since count_asks, against want. */
static void check_asks(const char *what, unsigned long long want) {
    unsigned long long asks = sim_pointer_queries() - asked_before;
    MT_CHECK(&T, asks == want, "%s asked the driver %llu times, want %llu", what, asks, want);
}

static void test_host(void) {
    float a[8], b[8];
    for (int i = 0; i < 8; i++) a[i] = (float)i;
    mt_begin(&T, "host all-reduce asks");
    count_asks();
    MT_EXPECT(&T, hvd_allreduce("q.host.inplace", a, a, 8, HVD_FLOAT32, HVD_SUM), HVD_OK);
    check_asks("an in-place host all-reduce", 1);
    count_asks();
    MT_EXPECT(&T, hvd_allreduce("q.host.out", a, b, 8, HVD_FLOAT32, HVD_SUM), HVD_OK);
    check_asks("an out-of-place host all-reduce", 2);
    for (int i = 0; i < 8; i++) MT_CHECK(&T, b[i] == (float)i, "b[%d] = %g, want %d", i, b[i], i);
    size_t got = 0;
    count_asks();
    MT_EXPECT(&T, hvd_reducescatter("q.host.rs", a, b, 8, HVD_FLOAT32, HVD_SUM, &got), HVD_OK);
    check_asks("a host reducescatter", 1);
    MT_CHECK(&T, got == 8, "reducescatter gave %zu elements, want 8", got);
    mt_end(&T);
}

static hvd_status device_allreduce(const char *name, float *d) {
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local_rank;
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status st = hvd_allreduce_async(name, d, d, 8, HVD_FLOAT32, HVD_SUM, &o, &h);
    return st == HVD_OK ? hvd_wait(&h) : st;
}

static void test_device(void) {
    float *d = gt_alloc(8 * sizeof(float));
    float host[8];
    for (int i = 0; i < 8; i++) host[i] = (float)(i + 1);
    cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice);
    mt_begin(&T, "device all-reduce asks");
    count_asks();
    MT_EXPECT(&T, device_allreduce("q.dev.first", d), HVD_OK);
    check_asks("a device all-reduce of a new allocation", 2);
    for (int step = 0; step < 3; step++) {
        char name[32];
        snprintf(name, sizeof name, "q.dev.%d", step);
        count_asks();
        MT_EXPECT(&T, device_allreduce(name, d), HVD_OK);
        check_asks("a device all-reduce of a remembered allocation", 0);
    }
    cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 8; i++)
        MT_CHECK(&T, host[i] == (float)(i + 1), "d[%d] = %g, want %d", i, host[i], i + 1);
    mt_end(&T);
    cudaFree(d);
}

int main(int argc, char **argv) {
    int skip = gt_start(&argc, &argv, &T, &local_rank, 1);
    if (skip) return skip;
    test_host();
    test_device();
    return gt_finish(&T);
}
