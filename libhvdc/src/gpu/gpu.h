/*
 * gpu.h - the GPU backend as the executor sees it: collectives on CUDA device memory through
 * NCCL, queued on the backend's own stream and completed by an event. Plain C: streams and
 * events cross as void * (cudaStream_t / cudaEvent_t), the NCCL communicator stays inside.
 *
 *   executor (background thread)            device, in stream order
 *   ────────────────────────────            ──────────────────────────────────────────────
 *   hvdc__gpu_allreduce(..., ready, &p) ──> wait(ready) pack-kernel ncclAllReduce unpack
 *                                           record(p) host-function: config.wake(ctx)
 *   ... sleeps, or negotiates the next round ...           │
 *   hvdc__gpu_pending_poll(p, &done)    <── woken ─────────┘ cudaEventQuery(p),
 *   hvdc__gpu_pending_free(p)                                ncclCommGetAsyncError
 *
 * Nothing here waits for the device: the stream waits for the caller's ready event
 * (cudaStreamWaitEvent), and completion is an event the executor polls when the host function
 * queued after it has woken it (gpu_waker.h), or when it looks for asynchronous errors.
 *
 * Setup is agreed step by step (hvdc__gpu_create): a rank that cannot use its device fails
 * every rank's request together, and the runtime goes on with CPU work (and tries the GPU
 * again on the next device request). Device rule: config->device if >= 0 (the device of the
 * request that created the backend, the application's choice), else local_rank % (visible
 * devices). Every call here makes that device current on the calling thread first.
 *
 * Built two ways: gpu/gpu_setup.c, gpu.c, gpu_complete.c, gpu_pointer.c + gpu/kernels.cu
 * with CUDA and NCCL (HVDC_HAVE_CUDA=1), or gpu_stub.c, where every call returns
 * HVD_ERR_UNSUPPORTED with HVDC_GPU_STUB_MESSAGE (after the same agreed device choice).
 * gpu_plan.c, gpu_waker.c and gpu_agree.c are in both.
 *
 * defines: hvdc_gpu, hvdc_gpu_pending, hvdc_gpu_config, HVDC_GPU_PTR_HOST,
 *          HVDC_GPU_PTR_UNKNOWN, hvdc__gpu_probe, hvdc__gpu_device_count,
 *          hvdc__gpu_pointer_device, hvdc__gpu_versions,
 *          hvdc__gpu_nccl_version_built, hvdc__gpu_create, hvdc__gpu_agree,
 *          hvdc__gpu_device,
 *          hvdc__gpu_abort, hvdc__gpu_destroy, hvdc__gpu_allreduce, hvdc__gpu_stream_wait,
 *          hvdc__gpu_broadcast, hvdc__gpu_allgather, hvdc__gpu_reducescatter,
 *          hvdc__gpu_alltoall, hvdc__gpu_pending_poll, hvdc__gpu_pending_free,
 *          hvdc__gpu_pending_event, hvdc__gpu_event_finished, hvdc__gpu_stream_wait_on,
 *          hvdc__gpu_adasum_to_host, hvdc__gpu_adasum_from_host, hvdc__gpu_node_comm
 * Background thread only (it is the only NCCL/MPI caller), except hvdc__gpu_probe,
 * hvdc__gpu_device_count, hvdc__gpu_pointer_device, hvdc__gpu_versions and
 * hvdc__gpu_event_finished, hvdc__gpu_stream_wait_on (any thread).
 */
#ifndef HVDC_GPU_H
#define HVDC_GPU_H

#include <mpi.h>
#include <stdatomic.h>
#include <stddef.h>

#include "base/liveness.h"
#include "base/topology.h"
#include "gpu/gpu_plan.h"
#include "hvdc.h"

#define HVDC_GPU_STUB_MESSAGE                                                                \
    "libhvdc was built without the GPU backend (configure with -Dcuda=enabled where CUDA "   \
    "and NCCL are installed)"

typedef struct hvdc_gpu hvdc_gpu;                 /* device, stream, NCCL comms, fusion buffer */
typedef struct hvdc_gpu_pending hvdc_gpu_pending; /* one queued collective's completion event */

typedef struct hvdc_gpu_config {
    MPI_Comm comm;              /* the executor's communicator; used only inside create */
    hvdc_liveness *liveness;    /* create's waits on other ranks check it, and so do growing
                                   buffers' waits for the stream (NULL: plain waits); it must
                                   outlive the backend */
    const hvdc_topology *topo;  /* ranks in comm and in the node: the runtime's, which
                                   outlives the backend */
    int device;                 /* CUDA ordinal, or -1: local_rank % device count */
    int hierarchical;           /* 1: also make node and cross-node communicators; only what
                                   every rank agreed at hvd_init (the executor's gpu_hierarchical:
                                   the same local_size on every node) */
    size_t fusion_bytes;        /* initial fusion buffer size (it grows on demand) */
    void (*wake)(void *ctx);    /* called on a CUDA thread when queued work finishes (may be
                                   NULL); short, no CUDA calls */
    void *wake_ctx;
    atomic_int *aborted;        /* set to 1 before the communicators are aborted, for waiters
                                   on other threads (hvdc__gpu_event_finished); may be NULL */
} hvdc_gpu_config;

/* Is a CUDA device visible to this process? Cheap; never creates NCCL state.
 * @return HVD_OK; HVD_ERR_CUDA with why = "no CUDA device visible: <CUDA's reason>";
 *         HVD_ERR_UNSUPPORTED with why = HVDC_GPU_STUB_MESSAGE in a build without CUDA.
 *         why (len bytes, may be NULL) is always NUL-terminated. */
hvd_status hvdc__gpu_probe(char *why, size_t len);

/* CUDA devices visible to this process (0 when none, or without the backend), or the count
 * HVDC_TEST_GPU_COUNT pretends (base/fault.h). Never creates a CUDA context. */
int hvdc__gpu_device_count(void);

/* What hvdc__gpu_pointer_device says of memory that is not a device's. */
#define HVDC_GPU_PTR_HOST (-1)    /* ordinary (unregistered) host memory */
#define HVDC_GPU_PTR_UNKNOWN (-2) /* cannot tell (no CUDA driver), or pinned host memory */

/* The CUDA device holding ptr (>= 0), HVDC_GPU_PTR_HOST or HVDC_GPU_PTR_UNKNOWN. Asks the CUDA
 * driver (cuPointerGetAttribute), which creates no CUDA context, so host buffers cost no GPU
 * memory in a process that never uses one. Cheap enough per submission. Any thread. */
int hvdc__gpu_pointer_device(const void *ptr);

/* Writes e.g. "CUDA 13.0, NCCL 2.28.9 (running NCCL 2.28.9)" into buf (len bytes): the versions
 * built against and the NCCL loaded; the stub writes that it has none. */
void hvdc__gpu_versions(char *buf, size_t len);

/* NCCL_VERSION_CODE of the NCCL built against; 0 in the stub. Any thread. */
int hvdc__gpu_nccl_version_built(void);

/* Collective over config->comm (every rank calls it at the same point: when the first device
 * response is executed). Each step is agreed by every rank before the next starts, so a rank
 * that fails one fails every rank together instead of leaving the others waiting in NCCL.
 * Not covered: a rank that fails or hangs inside ncclCommInitRank itself (steps 3 and 4),
 * which NCCL's blocking init leaves the others waiting for; its death still ends the job
 * through the liveness checks of the next collective. The steps:
 *   1. choose the device (hvdc__gpu_choose_device; the visible count may be faked for tests)
 *   2. make it current, create the stream and events
 *   3. NCCL communicator of all ranks (rank 0's unique id over MPI)
 *   4. hierarchical with several ranks per node and several nodes: the node and cross-node
 *      groups, then the node communicator, then the cross-node one (three agreed steps)
 *   5. the fusion buffer and the waker
 * @return HVD_OK and *out. On failure *out = NULL on every rank, and every rank returns the
 *         first failing rank's status with "GPU setup (<step>) failed on rank R: <why>":
 *         the ranks stay in step and may go on. Only HVD_ERR_MPI and HVD_ERR_RANK_FAILED mean
 *         the agreement itself failed (the job cannot go on). Blocks until all ranks agreed. */
hvd_status hvdc__gpu_create(const hvdc_gpu_config *config, hvdc_gpu **out);

/* One agreed step of hvdc__gpu_create (collective over config->comm). mine: this rank's
 * outcome of the step, its message in hvd_last_error(). @return HVD_OK when every rank
 * succeeded; else, on every rank, the first failing rank's status with "GPU setup (<step>)
 * failed on rank R: <its message>"; HVD_ERR_MPI / HVD_ERR_RANK_FAILED when the agreement
 * itself failed. */
hvd_status hvdc__gpu_agree(const hvdc_gpu_config *config, hvd_status mine, const char *step);

/* The CUDA device the backend runs on. */
int hvdc__gpu_device(const hvdc_gpu *gpu);

/* On a fatal stop: aborts every NCCL communicator (ncclCommAbort: never waits for the device),
 * so queued work can no longer hang; every later call and poll fails with why. NULL-safe. */
void hvdc__gpu_abort(hvdc_gpu *gpu, const char *why);

/* Frees everything. Not collective (ncclCommDestroy is local), but call it on every rank at
 * shutdown, after every pending record was freed. Never waits on the device without bound:
 * the stream gets a few seconds to drain (it has, after a normal shutdown); if it does not,
 * the communicators are aborted and device memory is left to the process's exit rather than
 * hang. NULL-safe. */
void hvdc__gpu_destroy(hvdc_gpu *gpu);

/* Queues an all-reduce of tensors[n] (device pointers; send == recv is in place) as one unit:
 * the stream waits for ready_event (a cudaEvent_t recorded by the caller after the inputs were
 * written; NULL: the work already queued on the legacy default stream), packs the tensors into
 * the fusion buffer with one batched kernel launch per HVDC_GPU_BATCH_MAX tensors (times
 * prescale), runs one NCCL all-reduce as hvdc__gpu_reduce_plan says (never an out-of-place
 * ncclAvg; none with one rank), unpacks (times postscale), and records *out's event. A single
 * tensor is reduced where it lies. Returns before the device has done any of it.
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
 * the reduction of count elements. count % size == 0, no prescale and an op NCCL may run out
 * of place: one ncclReduceScatter straight from send; else send is packed into padded shards
 * in the fusion buffer first (reduced in place there). One rank: a copy. */
hvd_status hvdc__gpu_reducescatter(hvdc_gpu *gpu, const void *send, void *recv, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op, double prescale,
                                   double postscale, void *ready_event, hvdc_gpu_pending **out);

/* Queues an all-to-all: send_counts[d] elements to rank d (blocks in rank order in send) and
 * recv_counts[s] from rank s (in rank order into recv), as ncclSend/ncclRecv pairs in one
 * group. Both arrays have size entries. */
hvd_status hvdc__gpu_alltoall(hvdc_gpu *gpu, const void *send, const size_t *send_counts,
                              void *recv, const size_t *recv_counts, hvd_dtype dtype,
                              void *ready_event, hvdc_gpu_pending **out);

/* The device Adasum across nodes, as Horovod's (NCCL inside the node, the host between
 * nodes). runtime/execute_adasum_gpu.c runs the host part between the two halves:
 *
 *   to_host:   wait(ready)  zero the fusion buffer  pack tensors (times prescale) at offsets
 *              node reduce-scatter (sum)  copy this rank's shard to the pinned *host  record
 *   ... the caller waits for *out, runs the VHDD across nodes on *host ...
 *   from_host: copy *host to this rank's shard  node all-gather  unpack (times postscale)
 *              record
 *
 * offsets and shard come from hvdc__gpu_adasum_layout; the node's ranks must call both halves
 * with the same layout. With one rank per node there are no node collectives. The staging
 * buffer is the backend's (pinned, so the copies never block the host); from_host reads the
 * one to_host returned. hvdc__gpu_node_comm must have run first (collective). */
hvd_status hvdc__gpu_adasum_to_host(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                                    const size_t *offsets, size_t shard, hvd_dtype dtype,
                                    double prescale, void *ready_event, void **host,
                                    hvdc_gpu_pending **out);
hvd_status hvdc__gpu_adasum_from_host(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                                      const size_t *offsets, size_t shard, hvd_dtype dtype,
                                      double postscale, hvdc_gpu_pending **out);

/* The node's NCCL communicator, made on first use (the hierarchical all-reduce may have made it
 * at setup): two agreed steps, as in hvdc__gpu_create, collective over config->comm (config as
 * for create). Nothing to do with one rank per node. */
hvd_status hvdc__gpu_node_comm(hvdc_gpu *gpu, const hvdc_gpu_config *config);

/* Never blocks. *done = 1 once the collective and everything before it on the stream has
 * finished. @return HVD_OK; HVD_ERR_CUDA for a failed kernel or copy; HVD_ERR_NCCL when the
 * communicator reports an asynchronous error or was aborted (the communicators are then
 * aborted, and every later call fails with HVD_ERR_NCCL). *done is 1 whenever an error is
 * returned. */
hvd_status hvdc__gpu_pending_poll(hvdc_gpu_pending *pending, int *done);

/* Queues the wake-up of the background thread (gpu_waker.h) behind pending's work: called once
 * the waiters have its event, so the host function's queuing (CUDA calls) is not
 * between the collective and them. Never fails: should CUDA refuse, it wakes the thread at once
 * and the thread polls (as it does every DEVICE_POLL_S). NULL-safe. */
void hvdc__gpu_pending_notify(hvdc_gpu_pending *pending);

/* The pending record's completion event (a cudaEvent_t), for a thread that waits on the device
 * itself (hvdc__gpu_event_finished). Valid until the record is freed; the backend pools its
 * events, so after that it may mark later work. */
void *hvdc__gpu_pending_event(const hvdc_gpu_pending *pending);

/* Whether the work before event has finished with valid results, asked from any thread: block
 * waits with cudaEventSynchronize (the device's scheduling flags decide spinning or sleeping,
 * as for cudaStreamSynchronize), else it only looks (cudaEventQuery). @return 1 when the event
 * has fired and *aborted (NULL: never) is still 0; 0 when it has not (block 0), on a CUDA error,
 * or once the communicators were aborted (aborted kernels exit early; the background thread's
 * poll fails that work with why). Never fails the calling thread's hvd_last_error. */
int hvdc__gpu_event_finished(void *event, const atomic_int *aborted, int block);

/* Makes stream (a cudaStream_t; NULL: the legacy default stream) wait on the device for event,
 * from any thread; the host does not wait. @return HVD_OK; HVD_ERR_CUDA with CUDA's reason. */
hvd_status hvdc__gpu_stream_wait_on(void *stream, void *event);

/* Releases a pending record; its event goes back to the backend's pool. NULL-safe. Legal
 * before completion: the device work still runs; only the record is dropped. */
void hvdc__gpu_pending_free(hvdc_gpu_pending *pending);

#endif
