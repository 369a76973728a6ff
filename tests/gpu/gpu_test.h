/*
 * gpu_test.h - what the device tests share (test_gpu_collectives.c, test_gpu_ranks.c,
 * test_gpu_optimizer.c), built against CUDA for a GPU and against tests/gpu/sim for the
 * simulated device: a start at which every rank decides together to run or to skip, the
 * matching end, device buffers, and a stream held for good (the rank-killed tests).
 * defines: GT_SKIP, gt_start, gt_finish, gt_alloc, gt_hold_stream
 * The test's main thread.
 */
#ifndef HVDC_GPU_TEST_H
#define HVDC_GPU_TEST_H

#include <stddef.h>

#include "mpitest.h"

#define GT_SKIP 77 /* the exit status meson reports as skipped */

/* MPI_Init_thread (MPI_THREAD_MULTIPLE); every rank's CUDA devices against the ranks on its
 * node (MPI's shared-memory split, so a skip needs no libhvdc), and min_size ranks at least;
 * then cudaSetDevice(local rank), hvd_init and mt_init(t). @return 0 to run (*local_rank set);
 * GT_SKIP after rank 0 printed "SKIPPED: <why>" (MPI finalized); 1 when hvd_init failed. */
int gt_start(int *argc, char ***argv, mt_ctx *t, int *local_rank, int min_size);

/* mt_combine, mt_exit_code, hvd_shutdown, MPI_Finalize. @return the exit status. */
int gt_finish(mt_ctx *t);

/* cudaMalloc of nbytes (1 for 0), or the process exits with a message (tests may). */
void *gt_alloc(size_t nbytes);

/* Queues on stream (a cudaStream_t) a host function that never returns: the stream runs
 * nothing after it until the process dies, so a ready event recorded there never fires and
 * this rank's part of a collective waiting on it never reaches the device. @return 0, or -1
 * when CUDA refused. */
int gt_hold_stream(void *stream);

#endif
