/*
 * sim.h - the simulated device: a host stand-in for the CUDA runtime and NCCL calls that
 * libhvdc's GPU backend makes, so that the backend's own code (libhvdc/src/gpu/gpu*.c,
 * train/optim_gpu.c, and the runtime's device completion above them) runs, and is tested, on
 * machines without a GPU, at any number of ranks, under ASan and TSan.
 *
 *   device memory     a table (sim_memory.c) of ranges of the device's own address space
 *                     (sim_arena.c, apart from the host heap as under CUDA's unified
 *                     addressing): cudaMalloc'd bytes start as garbage, never zeros, and the
 *                     table answers which device holds a pointer
 *   a stream          a worker thread running its queue in order (sim_stream.c): copies,
 *                     memsets, kernels (sim_kernels.c: host functions with the kernels'
 *                     arithmetic), event records, host functions, waits on other streams'
 *                     events, stream-ordered frees, NCCL calls
 *   the legacy stream one per device; it and the blocking streams wait for each other, as in
 *                     CUDA; cudaMemcpy is a copy on it that the host waits for
 *   an event          the latest record of it: cudaEventQuery / cudaEventSynchronize answer for
 *                     that record, cudaStreamWaitEvent waits for the record current at the call
 *   NCCL              one MPI communicator per NCCL one (sim_nccl.c); a collective runs on the
 *                     stream's thread as nonblocking MPI messages and a reduction in rank order,
 *                     and waits, without end, until its peers join or the communicator is aborted
 *
 * Every item a stream runs first sleeps a random 0..HVDC_SIM_DELAY_US microseconds (default
 * 50), drawn from a generator seeded by HVDC_SIM_SEED (default: from the clock) and the rank,
 * so the interleavings change from run to run, and a failing run's seed (each process prints
 * it to stderr once) replays its delays. HVDC_SIM_DELAY_US=0 measures host code alone.
 * HVDC_SIM_DEVICES (default 8) devices are visible, HVDC_SIM_SMS (default 4) multiprocessors
 * each; HVDC_SIM_POOLS=0 says the device has no stream-ordered allocator (cudaMallocAsync).
 * HVDC_SIM_NCCL_ERROR=RANK:N makes the Nth NCCL launch of world rank RANK (a launch: one
 * collective, or one group's on a stream) fail as a broken connection does: it sends nothing,
 * ncclCommGetAsyncError reports ncclRemoteError, and it never ends until the communicator is
 * aborted; its peers wait for its part without end. HVDC_SIM_ABORT_LAG_MS (default 0) makes
 * an aborted collective linger that long before it stops, and ncclCommAbort wait for it.
 * HVDC_SIM_REMOTE_ERRORS=1 (default 0) is NCCL across nodes, whose proxy sees a dead peer's
 * connection close: a collective waiting for a peer whose process is gone (reaped) reports
 * ncclRemoteError on its communicators, and still waits until they are aborted.
 *
 * Not simulated: kernels other than libhvdc's own (no cuBLAS, cuDNN, the examples' layers),
 * device memory the host cannot touch, timing, several processes on one device, sticky errors.
 *
 * defines: sim_settings, sim_config, sim_error, sim_current_device, sim_stream_of,
 *          sim_enqueue, sim_enqueue_wait, sim_device_drain, sim_memory_find, sim_memory_range,
 *          sim_device_range, sim_pointer_queries, SIM_MEM_DEVICE, SIM_MEM_PINNED,
 *          sim_arena_alloc, sim_arena_free, sim_dtype_size, sim_fold, sim_divide,
 *          sim_mpi_buffer, sim_mpi_buffer_free, sim_mpi_fill, sim_mpi_drain, sim_unseen_begin,
 *          sim_unseen_end, sim_seen_write
 * Any thread.
 */
#ifndef HVDC_SIM_H
#define HVDC_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_runtime_api.h"
#include "nccl.h"

typedef struct sim_settings {
    uint64_t seed;         /* HVDC_SIM_SEED, or drawn from the clock */
    unsigned max_delay_us; /* HVDC_SIM_DELAY_US */
    int devices;           /* HVDC_SIM_DEVICES */
    int sms;               /* HVDC_SIM_SMS */
    int pools;             /* HVDC_SIM_POOLS */
    int rank;              /* the launcher's rank of this process (0 without one) */
    long nccl_error_at;    /* HVDC_SIM_NCCL_ERROR=RANK:N on this rank: its Nth NCCL launch
                              fails asynchronously (sim_nccl.c); 0: none */
    long abort_lag_ms;     /* HVDC_SIM_ABORT_LAG_MS: how long an aborted collective lingers */
    int remote_errors;     /* HVDC_SIM_REMOTE_ERRORS: a dead peer is an ncclRemoteError */
} sim_settings;

/* The settings, read from the environment once (and the seed printed once). */
const sim_settings *sim_config(void);

/* Records err as this thread's last error (cudaGetLastError) unless it is cudaSuccess or
 * cudaErrorNotReady, which CUDA does not record; returns err. */
cudaError_t sim_error(cudaError_t err);

/* This thread's current device (cudaSetDevice; 0 until set). */
int sim_current_device(void);

/* The stream a handle names: NULL, cudaStreamLegacy and cudaStreamPerThread mean the current
 * device's legacy stream. @return NULL for a destroyed or never created stream. */
struct CUstream_st *sim_stream_of(cudaStream_t stream);

/* The device a stream belongs to. */
int sim_stream_device(const struct CUstream_st *stream);

/* Queues run(args) on stream after everything queued there before (args_bytes of args are
 * copied and live until run returns). run is NULL for an item that only orders. */
cudaError_t sim_enqueue(cudaStream_t stream, void (*run)(void *args), const void *args,
                        size_t args_bytes);

/* sim_enqueue, then waits until the stream has run it (cudaMemcpy, cudaFree's sync). */
cudaError_t sim_enqueue_wait(cudaStream_t stream, void (*run)(void *args), const void *args,
                             size_t args_bytes);

/* Waits until every stream of device has run what it holds (cudaDeviceSynchronize). */
void sim_device_drain(int device);

#define SIM_MEM_DEVICE 1 /* cudaMalloc[Async] */
#define SIM_MEM_PINNED 2 /* cudaMallocHost */
/* Whether p lies in an allocation of the table: its kind (0: none) and device. */
int sim_memory_find(const void *p, int *device);

/* sim_memory_find, and the allocation's start and size (any may be NULL). */
int sim_memory_range(const void *p, int *device, const void **start, size_t *size);

/* Whether [p, p + nbytes) lies inside one device allocation. */
int sim_device_range(const void *p, size_t nbytes);

/* How many times the driver was asked about a pointer (cuPointerGetAttributes), so far: tests
 * count what a submission asks (each ask is a driver call on a GPU). */
unsigned long long sim_pointer_queries(void);

/* Device memory (sim_arena.c): size bytes from the device's own address space, never the
 * host heap's, NULL when it is used up; and back. */
void *sim_arena_alloc(size_t size);
void sim_arena_free(void *p, size_t size);

/* Bytes per element of an NCCL dtype (0: not one). */
size_t sim_dtype_size(ncclDataType_t dt);

/* acc[i] = op(acc[i], x[i]) for n elements (sim_reduce.c); ncclAvg sums, sim_divide divides. */
void sim_fold(void *acc, const void *x, size_t n, ncclDataType_t dt, ncclRedOp_t op);

/* acc[i] /= ranks: the end of ncclAvg. */
void sim_divide(void *acc, size_t n, ncclDataType_t dt, int ranks);

/* The only memory the simulator hands MPI (sim_unseen.c): any thread inside MPI may move its
 * bytes, ordered by atomics ThreadSanitizer cannot see, so TSan does not watch it. A buffer
 * (NULL when out of memory) and back; filled from, or drained into, the user's memory, which
 * TSan sees read or written. Without TSan: malloc, free, memcpy. */
void *sim_mpi_buffer(size_t bytes);
void sim_mpi_buffer_free(void *buffer);
void sim_mpi_fill(void *buffer, const void *from, size_t bytes);
void sim_mpi_drain(void *to, const void *buffer, size_t bytes);

/* TSan ignores this thread's accesses from begin to end: around a stream thread's MPI calls,
 * and work that reads those buffers in place (a reduction), after which it is told which of the
 * user's memory was written. */
void sim_unseen_begin(void);
void sim_unseen_end(void);
void sim_seen_write(void *p, size_t bytes);

#endif
