/*
 * test_gpu_kill_growing.c - a rank dies while its peers' background threads grow the device
 * fusion buffer behind a collective that waits for it. Without memory pools (cudaMallocAsync)
 * growing must first let the stream finish what it holds; a collective queued earlier in the
 * round holds it until every rank has taken part, which a dead rank never does. The survivors
 * must fail with HVD_ERR_RANK_FAILED naming it, not wait on their stream forever.
 *
 * Every rank: HVDC_SIM_POOLS=0 and HVD_FUSION_THRESHOLD=0 (set here: nothing fuses, and the
 * fusion buffer starts empty), a warm-up all-reduce of a group of two small tensors (the
 * buffer: 1 MiB), then the step: a lone all-reduce "a" and a group of two 1 MiB tensors (2 MiB
 * packed: the buffer grows). The victim (the last rank) holds its "a" off the device with a
 * ready event behind a stream it never lets run, waits --after-s seconds (its peers negotiate
 * both and are growing meanwhile) and kills itself with SIGKILL. The lines are
 * tests/mpi/kill_loop.h's, judged by tests/mpi/check_kill.py.
 * Usage: test_gpu_kill_growing [--after-s T]    (one CUDA device per rank; the simulated one)
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mpitest.h"

#define SMALL 1024u
#define LARGE (1u << 18) /* floats: 1 MiB */

/* The victim's ready event never fires: this host function holds its stream until death. */
static void hold_forever(void *arg) {
    (void)arg;
    for (;;) pause();
}

/* The victim's ready event for "a", behind hold_forever. */
static cudaEvent_t never_ready(void) {
    cudaStream_t held;
    cudaEvent_t ready;
    if (cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) != cudaSuccess ||
        cudaLaunchHostFunc(held, hold_forever, NULL) != cudaSuccess ||
        cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(ready, held) != cudaSuccess)
        return NULL;
    return ready;
}

/* A group of two tensors of count floats each, in place on dev (2 * count floats): its status. */
static hvd_status group(const char *prefix, float *dev, size_t count, const hvd_options *o,
                        hvd_handle *h) {
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s.1", prefix);
    snprintf(n2, sizeof n2, "%s.2", prefix);
    const char *names[2] = {n1, n2};
    const void *send[2] = {dev, dev + count};
    void *recv[2] = {dev, dev + count};
    size_t counts[2] = {count, count};
    return hvd_grouped_allreduce_async(2, names, send, recv, counts, HVD_FLOAT32, HVD_SUM, o, h);
}

static void report(int rank, hvd_status s, double after_s) {
    printf("KILLTEST rank=%d host=? failed step=1 status=\"%s\" after_s=%.2f message=\"%s\"\n",
           rank, hvd_status_string(s), after_s, hvd_last_error());
}

int main(int argc, char **argv) {
    setenv("HVDC_SIM_POOLS", "0", 1); /* growing then frees after waiting for the stream */
    setenv("HVD_FUSION_THRESHOLD", "0", 1);
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    int rank = 0, size = 1, local = 0;
    hvd_rank(&rank);
    hvd_size(&size);
    hvd_local_rank(&local);
    int victim = size - 1;
    double after_s = mt_arg_double(argc, argv, "--after-s", 1.0);
    float *dev = NULL;
    hvd_options o = HVD_OPTIONS_DEFAULT;
    o.device = local;
    if (cudaSetDevice(local) != cudaSuccess ||
        cudaMalloc((void **)&dev, (2 * LARGE + SMALL) * sizeof(float)) != cudaSuccess ||
        cudaMemset(dev, 0, (2 * LARGE + SMALL) * sizeof(float)) != cudaSuccess) {
        printf("[rank %d] no device memory for the test\nFAIL\n", rank);
        return 1;
    }
    if (rank == 0)
        printf("# %s: %d ranks; rank %d dies while the others grow the fusion buffer\n", argv[0],
               size, victim);
    hvd_handle warm;
    s = group("warm", dev, SMALL, &o, &warm);
    if (s == HVD_OK) s = hvd_wait(&warm);
    if (s != HVD_OK) {
        printf("[rank %d] the warm-up failed: %s: %s\nFAIL\n", rank, hvd_status_string(s),
               hvd_last_error());
        return 1;
    }
    fflush(stdout);

    hvd_options lone = o;
    if (rank == victim && !(lone.ready_event = never_ready())) {
        printf("[rank %d] no held stream for the test\nFAIL\n", rank);
        return 1;
    }
    double start = mt_now();
    hvd_handle a, g;
    hvd_status sa = hvd_allreduce_async("a", dev + 2 * LARGE, dev + 2 * LARGE, SMALL,
                                        HVD_FLOAT32, HVD_SUM, &lone, &a);
    hvd_status sg = group("g", dev, LARGE, &o, &g);
    if (rank == victim) {
        usleep((useconds_t)(after_s * 1e6));
        printf("KILLTEST rank=%d host=? victim step=1: SIGKILL while the others grow\n", rank);
        fflush(stdout);
        kill(getpid(), SIGKILL);
    }
    /* the first failure, as kill_loop.c reports it */
    if (sa == HVD_OK) sa = hvd_wait(&a);
    if (sa != HVD_OK) report(rank, sa, mt_now() - start - after_s);
    if (sg == HVD_OK) sg = hvd_wait(&g);
    if (sa == HVD_OK && sg != HVD_OK) report(rank, sg, mt_now() - start - after_s);
    s = sa != HVD_OK ? sa : sg;
    if (s == HVD_OK)
        printf("[rank %d] both all-reduces succeeded although rank %d never took part\nFAIL\n",
               rank, victim);
    fflush(stdout);
    hvd_status down = hvd_shutdown();
    printf("KILLTEST rank=%d host=? exit status=\"%s\"\n", rank, hvd_status_string(down));
    return s != HVD_OK ? 0 : 1;
}
