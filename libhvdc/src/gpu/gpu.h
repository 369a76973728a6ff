/*
 * gpu.h - the GPU backend as the executor sees it: collectives on CUDA device memory through
 * NCCL, queued on the backend's own stream and completed by polling an event. Plain C: streams
 * and events cross as void * (cudaStream_t / cudaEvent_t), the NCCL communicator stays inside.
 *
 *   executor (background thread)            device, in stream order
 *   ────────────────────────────            ──────────────────────────────────────────────
 *   hvdc__gpu_allreduce(..., ready, &p) ──> wait(ready) pack-kernel ncclAllReduce unpack record(p)
 *   ... negotiates the next round ...
 *   hvdc__gpu_pending_poll(p, &done)    <── cudaEventQuery(p), ncclCommGetAsyncError
 *   hvdc__gpu_pending_free(p)
 *
 * Nothing here waits for the device on the hot path: the stream waits for the caller's ready
 * event (cudaStreamWaitEvent), and completion is an event the executor polls between rounds.
 *
 * Device rule: hvdc__gpu_create uses config->device if it is >= 0 (the device of the first
 * device request, which the application chose), else local_rank % (visible devices). Every
 * call here makes that device current on the calling thread first.
 *
 * Built two ways: gpu/gpu.c + gpu/kernels.cu with CUDA and NCCL (HVDC_HAVE_CUDA=1), or
 * gpu_stub.c, where every call returns HVD_ERR_UNSUPPORTED with HVDC_GPU_STUB_MESSAGE.
 *
 * defines: hvdc_gpu, hvdc_gpu_pending, hvdc_gpu_config, hvdc__gpu_probe, hvdc__gpu_create,
 *          hvdc__gpu_destroy, hvdc__gpu_allreduce, hvdc__gpu_broadcast, hvdc__gpu_allgather,
 *          hvdc__gpu_reducescatter, hvdc__gpu_alltoall, hvdc__gpu_pending_poll,
 *          hvdc__gpu_pending_wait, hvdc__gpu_pending_free, hvdc__gpu_versions,
 *          hvdc__gpu_pointer_device
 * Background thread only (it is the only NCCL/MPI caller), except hvdc__gpu_probe and
 * hvdc__gpu_versions (any thread).
 */
#ifndef HVDC_GPU_H
#define HVDC_GPU_H

#include <mpi.h>
#include <stddef.h>

#include "gpu/gpu_plan.h"
#include "hvdc.h"

#define HVDC_GPU_STUB_MESSAGE                                                                \
    "libhvdc was built without the GPU backend (configure with -Dcuda=enabled where CUDA "   \
    "and NCCL are installed)"

typedef struct hvdc_gpu hvdc_gpu;                 /* device, stream, NCCL comms, fusion buffer */
typedef struct hvdc_gpu_pending hvdc_gpu_pending; /* one queued collective's completion event */

typedef struct hvdc_gpu_config {
    MPI_Comm comm;              /* the executor's communicator; used only inside create */
    int rank, size;             /* in comm */
    int local_rank, local_size; /* in the node */
    int cross_rank, cross_size; /* among ranks with this local rank */
    int device;                 /* CUDA ordinal, or -1: local_rank % device count */
    int hierarchical;           /* 1: also make node and cross-node communicators (needs the
                                   same local_size on every node, else it stays flat) */
    size_t fusion_bytes;        /* initial fusion buffer size (it grows on demand) */
} hvdc_gpu_config;

/* Is a CUDA device visible to this process? Cheap; never creates NCCL state.
 * @return HVD_OK; HVD_ERR_CUDA with why = "no CUDA device visible: <CUDA's reason>";
 *         HVD_ERR_UNSUPPORTED with why = HVDC_GPU_STUB_MESSAGE in a build without CUDA.
 *         why (len bytes, may be NULL) is always NUL-terminated. */
hvd_status hvdc__gpu_probe(char *why, size_t len);

/* The CUDA device holding ptr, or -1 for host memory (and always -1 without the backend or a
 * GPU). Cheap enough to call per submission. Any thread. */
int hvdc__gpu_pointer_device(const void *ptr);

/* Writes e.g. "CUDA 13.0, NCCL 2.28.9 (running NCCL 2.28.9)" into buf (len bytes): the versions
 * built against and the NCCL loaded; the stub writes that it has none. */
void hvdc__gpu_versions(char *buf, size_t len);

/* Collective over config->comm (every rank calls it, e.g. when the first device response is
 * executed): picks and sets the device, creates a non-blocking stream, then rank 0 makes the
 * NCCL unique id, MPI broadcasts it and each rank joins with ncclCommInitRank. Before any NCCL
 * call all ranks agree (one MPI_Allreduce) that every rank has a device, so a rank without one
 * fails every rank instead of hanging them.
 * @return HVD_OK and *out; HVD_ERR_CUDA/HVD_ERR_NCCL/HVD_ERR_MPI with file:line; on any rank's
 *         failure every rank gets an error and *out = NULL. Blocks until all ranks joined. */
hvd_status hvdc__gpu_create(const hvdc_gpu_config *config, hvdc_gpu **out);

/* Waits for the backend's stream to drain, then frees everything. NULL-safe. Not collective
 * (ncclCommDestroy is local), but call it on every rank at shutdown. */
void hvdc__gpu_destroy(hvdc_gpu *gpu);

/* Queues an all-reduce of tensors[n] (device pointers; send == recv is in place) as one unit:
 * the stream waits for ready_event (a cudaEvent_t recorded by the caller after the inputs were
 * written; NULL: the work already queued on the legacy default stream), packs the tensors into
 * the fusion buffer with one batched kernel launch per 128 tensors (times prescale), runs one
 * ncclAllReduce (ncclAvg for HVD_AVERAGE), unpacks (times postscale), and records *out's event.
 * A single tensor is reduced where it lies. Returns before the device has done any of it.
 * @return HVD_OK and *out; HVD_ERR_UNSUPPORTED for a dtype/op NCCL lacks; HVD_ERR_CUDA,
 *         HVD_ERR_NCCL (file:line, NCCL's message). On error nothing is pending (*out = NULL)
 *         but earlier pieces may have been queued. */
hvd_status hvdc__gpu_allreduce(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                               hvd_dtype dtype, hvd_reduce_op op, double prescale,
                               double postscale, void *ready_event, hvdc_gpu_pending **out);

/* Makes the backend's stream wait for event (cudaEvent_t; NULL: the legacy default stream's
 * queued work) before what is queued next; device-side, never a host sync. For fused
 * responses whose tensors became ready on different events. */
hvd_status hvdc__gpu_stream_wait(hvdc_gpu *gpu, void *event);

/* Queues root's count elements of buf to every rank's buf (in place). */
hvd_status hvdc__gpu_broadcast(hvdc_gpu *gpu, void *buf, size_t count, hvd_dtype dtype, int root,
                               void *ready_event, hvdc_gpu_pending **out);

/* Queues the concatenation of every rank's send (rank_counts[r] elements from rank r) into
 * recv in rank order. Equal counts use ncclAllGather; differing ones one ncclBroadcast per
 * rank inside one ncclGroupStart/End. rank_counts has size entries (from negotiation). */
hvd_status hvdc__gpu_allgather(hvdc_gpu *gpu, const void *send, void *recv,
                               const size_t *rank_counts, hvd_dtype dtype, void *ready_event,
                               hvdc_gpu_pending **out);

/* Queues the public reduce-scatter (hvdc.h's uneven blocks): recv gets this rank's block of
 * the reduction of count elements. count % size == 0 and no prescale: one ncclReduceScatter
 * straight from send; else send is packed into padded shards in the fusion buffer first. */
hvd_status hvdc__gpu_reducescatter(hvdc_gpu *gpu, const void *send, void *recv, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op, double prescale,
                                   double postscale, void *ready_event, hvdc_gpu_pending **out);

/* Queues an all-to-all: send_counts[d] elements to rank d (blocks in rank order in send) and
 * recv_counts[s] from rank s (in rank order into recv), as ncclSend/ncclRecv pairs in one
 * group. Both arrays have size entries. */
hvd_status hvdc__gpu_alltoall(hvdc_gpu *gpu, const void *send, const size_t *send_counts,
                              void *recv, const size_t *recv_counts, hvd_dtype dtype,
                              void *ready_event, hvdc_gpu_pending **out);

/* Never blocks. *done = 1 once the collective and everything before it on the stream has
 * finished. @return HVD_OK; HVD_ERR_CUDA for a failed kernel or copy; HVD_ERR_NCCL when the
 * communicator reports an asynchronous error (the communicator is then aborted, and every
 * later call fails with HVD_ERR_NCCL). *done is 1 whenever an error is returned. */
hvd_status hvdc__gpu_pending_poll(hvdc_gpu_pending *pending, int *done);

/* Blocks this thread (cudaEventSynchronize) until the collective finished. For tests and
 * shutdown, not for the executor's loop. @return as hvdc__gpu_pending_poll. */
hvd_status hvdc__gpu_pending_wait(hvdc_gpu_pending *pending);

/* Releases a pending record and its event. NULL-safe. Legal before completion: the
 * device work still runs; only the record is dropped. */
void hvdc__gpu_pending_free(hvdc_gpu_pending *pending);

#endif
