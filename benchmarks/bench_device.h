/*
 * bench_device.h - what a benchmark needs for --device gpu: this rank's CUDA device (its local
 * rank), device buffers, copies to and from them, and the raw NCCL all-reduce baselines on a
 * communicator of the same ranks (the rows libhvdc's device path is compared with). Built with
 * CUDA and NCCL (bench_device.c) where libhvdc has its GPU backend, else as a stub whose
 * bench_device_open refuses with why.
 * defines: bench_device_open, bench_device_close, bench_device_alloc, bench_device_free,
 *          bench_device_upload, bench_device_download, bench_device_memset,
 *          bench_nccl_allreduce, bench_nccl_allreduce_group
 * Main thread.
 */
#ifndef BENCH_DEVICE_H
#define BENCH_DEVICE_H

#include <mpi.h>
#include <stddef.h>

#include "hvdc.h"

/* Collective over comm: selects the device numbered as this rank's local rank (its rank among
 * the ranks of comm on this host) and makes the NCCL communicator. Every rank returns the same
 * verdict. @return the device (>= 0), or -1 after rank 0 of comm printed why to stderr
 * ("program: --device gpu: ..."); the benchmark then finalizes MPI and exits 2. */
int bench_device_open(MPI_Comm comm, const char *program);
void bench_device_close(void);

void *bench_device_alloc(size_t nbytes); /* NULL on failure */
void bench_device_free(void *p);
/* Blocking copies and fill: each returns once the device memory holds the data, so work on any
 * stream issued afterwards sees it. @return 0 on success. */
int bench_device_upload(void *dst, const void *src, size_t nbytes);
int bench_device_download(void *dst, const void *src, size_t nbytes);
int bench_device_memset(void *dst, int byte, size_t nbytes);

/* One blocking ncclAllReduce (average as a sum, as the MPI rows do) on the benchmark's own
 * stream, waited for with cudaStreamSynchronize. @return 0 on success. */
int bench_nccl_allreduce(const void *send, void *recv, size_t count, hvd_dtype dtype,
                         hvd_reduce_op op);

/* n all-reduces in one ncclGroupStart/End, then one cudaStreamSynchronize: the k-th reduces
 * counts[k] elements at element offset offsets[k] of send into the same offset of recv (a
 * framework that does not fuse, issuing one call per tensor). @return 0 on success. */
int bench_nccl_allreduce_group(const void *send, void *recv, const size_t *offsets,
                               const size_t *counts, size_t n, hvd_dtype dtype,
                               hvd_reduce_op op);

#endif
