/*
 * test_gpu_kill_held.c - a rank dies while its peers hold a device all-reduce it never joins,
 * and their background threads are where no device wait of theirs can see the death. The
 * survivors must fail with HVD_ERR_RANK_FAILED naming it, not wait forever. Two places:
 *
 *   (default) growing: without memory pools (cudaMallocAsync) the fusion buffer grows only
 *     after the stream has run what it holds, which includes the held all-reduce. Every rank
 *     sets HVDC_SIM_POOLS=0 and HVD_FUSION_THRESHOLD=0 (nothing fuses, the buffer starts
 *     empty), all-reduces a warm-up group of two small tensors (the buffer: 1 MiB), then a lone
 *     "a" and a group of two 1 MiB tensors (2 MiB packed: the buffer grows). The victim waits
 *     --after-s seconds (its peers are growing meanwhile) and kills itself with SIGKILL.
 *   --in-mpi-allreduce: the background thread is inside a blocking MPI_Allreduce of host
 *     memory (HVD_CPU_ALLREDUCE=mpi), where only the watchdog notices the death (its callers
 *     must still get their answer: the device all-reduce's waiter sits in a CUDA wait that only
 *     aborting the communicators ends). Every rank all-reduces a warm-up device tensor, then a
 *     lone device "a" and a host "c"; the victim runs with HVDC_TEST_FAULTS=die_in_mpi_allreduce
 *     and dies as it enters MPI_Allreduce for "c".
 *   --in-shutdown: the others call hvd_shutdown with "a" in flight, whose drain waits for the
 *     device work queued; the victim waits --after-s seconds and kills itself with SIGKILL.
 *     hvd_shutdown must return HVD_ERR_RANK_FAILED naming it (it returned HVD_OK, and went on
 *     to finalize MPI, which waits for every rank).
 *   --adasum-growing: the device Adasum across nodes (two nodes of two ranks: run at np 4 with
 *     HVDC_TEST_NODE_SIZE=2) stages each rank's shard in pinned host memory, which grows only
 *     after the stream has run what it holds. Every rank runs a warm-up Adasum of a small group
 *     (the staging buffer: its shard), then a lone "a" and an Adasum of a 1 MiB group (its
 *     shard outgrows the buffer); the victim waits --after-s seconds and kills itself.
 *
 * In all four the victim (the last rank) holds its "a" off the device with a ready event behind a
 * stream it never lets run. The lines are tests/mpi/kill_loop.h's, judged by
 * tests/mpi/check_kill.py.
 * Usage: test_gpu_kill_held [--in-mpi-allreduce | --in-shutdown | --adasum-growing] [--after-s T]
 *        (one simulated device per rank)
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test.h"

#define SMALL 1024u
#define LARGE (1u << 18) /* floats: 1 MiB */

/* The victim's ready event for "a", behind hold_forever. */
static cudaEvent_t never_ready(void) {
    cudaStream_t held;
    cudaEvent_t ready;
    if (cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) != cudaSuccess ||
        gt_hold_stream(held) != 0 ||
        cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(ready, held) != cudaSuccess)
        return NULL;
    return ready;
}

/* A group of two tensors of count floats each, in place on dev (2 * count floats): its status. */
static hvd_status group(const char *prefix, float *dev, size_t count, hvd_reduce_op op,
                        const hvd_options *o, hvd_handle *h) {
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s.1", prefix);
    snprintf(n2, sizeof n2, "%s.2", prefix);
    const char *names[2] = {n1, n2};
    const void *send[2] = {dev, dev + count};
    void *recv[2] = {dev, dev + count};
    size_t counts[2] = {count, count};
    return hvd_grouped_allreduce_async(2, names, send, recv, counts, HVD_FLOAT32, op, o, h);
}

static void report(int rank, hvd_status s, double after_s) {
    printf("KILLTEST rank=%d host=? failed step=1 status=\"%s\" after_s=%.2f message=\"%s\"\n",
           rank, hvd_status_string(s), after_s, hvd_last_error());
}

int main(int argc, char **argv) {
    int in_mpi = 0, in_shutdown = 0, adasum = 0;
    for (int i = 1; i < argc; i++) {
        in_mpi |= strcmp(argv[i], "--in-mpi-allreduce") == 0;
        in_shutdown |= strcmp(argv[i], "--in-shutdown") == 0;
        adasum |= strcmp(argv[i], "--adasum-growing") == 0;
    }
    if (in_mpi) {
        setenv("HVD_CPU_ALLREDUCE", "mpi", 1);
    } else if (!in_shutdown && !adasum) {
        setenv("HVDC_SIM_POOLS", "0", 1); /* growing then frees after waiting for the stream */
        setenv("HVD_FUSION_THRESHOLD", "0", 1);
    }
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
    float *dev = NULL, host[4] = {1, 2, 3, 4};
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local;
    if (cudaSetDevice(local) != cudaSuccess ||
        cudaMalloc((void **)&dev, (2 * LARGE + SMALL) * sizeof(float)) != cudaSuccess ||
        cudaMemset(dev, 0, (2 * LARGE + SMALL) * sizeof(float)) != cudaSuccess) {
        printf("[rank %d] no device memory for the test\nFAIL\n", rank);
        return 1;
    }
    const char *others = in_mpi        ? "are inside MPI_Allreduce"
                         : in_shutdown ? "shut down"
                         : adasum      ? "grow the device Adasum's staging buffer"
                                       : "grow";
    if (rank == 0)
        printf("# %s: %d ranks; rank %d dies while the others %s\n", argv[0], size, victim, others);
    hvd_reduce_op grouped_op = adasum ? HVD_ADASUM : HVD_SUM;
    hvd_handle warm;
    s = in_mpi ? hvd_allreduce_async("warm", dev, dev, SMALL, HVD_FLOAT32, HVD_SUM, &o, &warm)
               : group("warm", dev, SMALL, grouped_op, &o, &warm);
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
    hvd_handle a, b;
    hvd_status sa = hvd_allreduce_async("a", dev + 2 * LARGE, dev + 2 * LARGE, SMALL,
                                        HVD_FLOAT32, HVD_SUM, &lone, &a);
    if (in_shutdown && rank != victim) {
        /* "a" left to hvd_shutdown's drain, which the death must end */
        hvd_status down = sa == HVD_OK ? hvd_shutdown() : sa;
        report(rank, down, mt_now() - (start + after_s));
        if (down == HVD_OK)
            printf("[rank %d] hvd_shutdown returned HVD_OK although rank %d died with \"a\" in "
                   "flight\nFAIL\n", rank, victim);
        fflush(stdout);
        return down != HVD_OK ? 0 : 1;
    }
    hvd_status sb = in_mpi ? hvd_allreduce_async("c", host, host, 4, HVD_FLOAT32, HVD_SUM, NULL, &b)
                    : in_shutdown ? HVD_OK : group("g", dev, LARGE, grouped_op, &o, &b);
    if (rank == victim) {
        if (in_mpi) { /* HVDC_TEST_FAULTS=die_in_mpi_allreduce kills it inside this wait */
            if (sb == HVD_OK) sb = hvd_wait(&b);
            printf("[rank %d] \"c\" ended (%s) without the fault's SIGKILL: run it with "
                   "HVDC_TEST_FAULTS=die_in_mpi_allreduce\nFAIL\n", rank, hvd_status_string(sb));
        } else {
            usleep((useconds_t)(after_s * 1e6));
        }
        printf("KILLTEST rank=%d host=? victim step=1: SIGKILL while the others %s\n", rank,
               others);
        fflush(stdout);
        kill(getpid(), SIGKILL);
    }
    /* the first failure, as kill_loop.c reports it; "a" first: its wait is the one at stake */
    double died_at = start + (in_mpi ? 0 : after_s);
    if (sa == HVD_OK) sa = hvd_wait(&a);
    if (sa != HVD_OK) report(rank, sa, mt_now() - died_at);
    if (sb == HVD_OK) sb = hvd_wait(&b);
    if (sa == HVD_OK && sb != HVD_OK) report(rank, sb, mt_now() - died_at);
    s = sa != HVD_OK ? sa : sb;
    if (s == HVD_OK)
        printf("[rank %d] both all-reduces succeeded although rank %d never took part\nFAIL\n",
               rank, victim);
    fflush(stdout);
    hvd_status down = hvd_shutdown();
    printf("KILLTEST rank=%d host=? exit status=\"%s\"\n", rank, hvd_status_string(down));
    fflush(stdout);
    /* the background thread left inside MPI_Allreduce keeps its runtime and the device work
     * it holds ("a") for good (watchdog.h), which LeakSanitizer would report at exit: end as
     * hvd_shutdown's message asks, without the exit-time checks */
    if (in_mpi) _exit(s != HVD_OK ? 0 : 1);
    return s != HVD_OK ? 0 : 1;
}
