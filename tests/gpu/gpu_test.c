/*
 * gpu_test.c - the device tests' start, end, buffers and held streams (see gpu_test.h).
 * The test's main thread.
 */
#include "gpu_test.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int gt_start(int *argc, char ***argv, mt_ctx *t, int *local_rank, int min_size) {
    int provided = 0, rank = 0, size = 1, devices = 0, local_size = 1;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);

    /* every rank decides together: skip if some rank cannot run */
    cudaError_t err = cudaGetDeviceCount(&devices);
    char why[256] = "";
    if (err != cudaSuccess)
        snprintf(why, sizeof why, "no CUDA device visible (%s)", cudaGetErrorString(err));
    else if (devices == 0)
        snprintf(why, sizeof why, "no CUDA device visible (cudaGetDeviceCount found 0)");
    else if (devices < local_size)
        snprintf(why, sizeof why, "%d ranks on a node with %d CUDA devices; NCCL needs one GPU "
                 "per rank", local_size, devices);
    else if (size < min_size)
        snprintf(why, sizeof why, "needs %d ranks or more, each with a device of its own", min_size);
    int ok = why[0] == '\0', all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (rank == 0) printf("SKIPPED: %s\n", why[0] ? why : "a rank has no usable CUDA device");
        MPI_Finalize();
        return GT_SKIP;
    }
    cudaSetDevice(*local_rank);
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init failed: %s\n", hvd_last_error());
        return 1;
    }
    mt_init(t, rank, size);
    return 0;
}

int gt_finish(mt_ctx *t) {
    mt_combine(t);
    int code = mt_exit_code(t);
    hvd_shutdown();
    MPI_Finalize();
    return code;
}

void *gt_alloc(size_t nbytes) {
    void *p = NULL;
    if (cudaMalloc(&p, nbytes ? nbytes : 1) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", nbytes);
        exit(1);
    }
    return p;
}

static void hold_forever(void *arg) {
    (void)arg;
    for (;;) pause();
}

int gt_hold_stream(void *stream) {
    return cudaLaunchHostFunc((cudaStream_t)stream, hold_forever, NULL) == cudaSuccess ? 0 : -1;
}
