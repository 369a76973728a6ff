/*
 * test_gpu_kill.c - tests/mpi/test_kill.c on the device: one rank dies by SIGKILL while every
 * rank is all-reducing device memory, and the others must get a named error from libhvdc and
 * exit instead of waiting forever inside NCCL (which, on one node, never notices a dead peer
 * by itself: only aborting the communicator ends a collective whose peer is gone).
 *
 * Every rank runs blocking all-reduces of 256K floats on its device (checked), each a new name,
 * until one fails (tests/mpi/kill_loop.h: the options, the KILLTEST lines, the exit status, so
 * tests/mpi/check_kill.py judges it as it judges test_kill). The victim dies inside a
 * collective: at its last step it submits the all-reduce, waits until it is queued on its
 * device (every rank is then inside it, waiting for this rank's part, which the simulated
 * device's stream starts only after a delay), and then sends itself SIGKILL.
 * Usage: test_gpu_kill [--victim R] [--after-s T] [--max-s M]    (one CUDA device per rank)
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "kill_loop.h"
#include "mpitest.h"

#define COUNT (1u << 18)

typedef struct device_step {
    float *buf, *dev;
    int rank, size;
    hvd_options options;
} device_step;

/* This rank's input into its device buffer (which holds the last step's result). */
static void put_input(device_step *d) {
    for (size_t i = 0; i < COUNT; i++) d->buf[i] = (float)((d->rank + 1) * (int)(i % 7));
    cudaMemcpy(d->dev, d->buf, COUNT * sizeof(float), cudaMemcpyHostToDevice);
}

static hvd_status step(void *ctx, const char *name, int *wrong) {
    device_step *d = ctx;
    hvd_handle h;
    put_input(d);
    hvd_status s = hvd_allreduce_async(name, d->dev, d->dev, COUNT, HVD_FLOAT32, HVD_SUM,
                                       &d->options, &h);
    if (s == HVD_OK) s = hvd_wait(&h);
    if (s != HVD_OK) return s;
    cudaMemcpy(d->buf, d->dev, COUNT * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < COUNT && !*wrong; i++)
        *wrong = d->buf[i] != (float)((int)(i % 7) * d->size * (d->size + 1) / 2);
    return HVD_OK;
}

/* The victim's last step: its all-reduce negotiated and queued on every rank's device. Its
 * input is a real one: its stream may send it before the SIGKILL lands, and the others' step
 * then succeeds, with the right sum (the last result instead made it wrong, 1 run in ~100). */
static void enter_collective(void *ctx, const char *name) {
    device_step *d = ctx;
    hvd_handle h;
    put_input(d);
    if (hvd_allreduce_async(name, d->dev, d->dev, COUNT, HVD_FLOAT32, HVD_SUM, &d->options,
                            &h) == HVD_OK)
        hvd_wait_on_stream(&h, NULL);
}

int main(int argc, char **argv) {
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    int local = 0;
    device_step d = {malloc(COUNT * sizeof(float)), NULL, 0, 1, HVD_OPTIONS_INIT};
    hvd_rank(&d.rank);
    hvd_size(&d.size);
    hvd_local_rank(&local);
    d.options.device = local;
    if (!d.buf || cudaSetDevice(local) != cudaSuccess ||
        cudaMalloc((void **)&d.dev, COUNT * sizeof(float)) != cudaSuccess) {
        printf("[rank %d] no device memory for the test\nFAIL\n", d.rank);
        return 1;
    }
    kill_test k = {step, enter_collective, &d, "262144-float device all-reduces",
                   " inside the device all-reduce"};
    int code = kill_loop(argc, argv, &k);
    cudaFree(d.dev);
    free(d.buf);
    return code;
}
