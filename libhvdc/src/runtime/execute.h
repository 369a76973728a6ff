/*
 * execute.h - runs one negotiated response on host memory: a fused all-reduce (pack, ring,
 * unpack), broadcast, allgather, reducescatter, alltoall or barrier.
 * defines: hvdc_executor, hvdc__executor_init, hvdc__executor_configure, hvdc__executor_free,
 *          hvdc_outcome, hvdc__ran, hvdc__refused, hvdc__execute,
 *          hvdc__execute_gpu, hvdc__execute_gpu_allreduce_as,
 *          hvdc__execute_gpu_prepare, hvdc__execute_gpu_node_comm, hvdc__execute_adasum,
 *          hvdc__execute_adasum_gpu, hvdc__adasum_nodes_free
 * Background thread.
 */
#ifndef HVDC_EXECUTE_H
#define HVDC_EXECUTE_H

#include <mpi.h>
#include <stdatomic.h>

#include "base/buffer.h"
#include "base/liveness.h"
#include "base/topology.h"
#include "collectives/fusion.h"
#include "collectives/shm.h"
#include "gpu/gpu.h"
#include "negotiation/wire.h"
#include "runtime/config.h"
#include "runtime/op.h"
#include "runtime/timeline.h"
#include "runtime/watchdog.h"

/* What execution needs, and nothing else. */
typedef struct hvdc_executor {
    MPI_Comm comm; /* private to collectives: never mixed with negotiation or user traffic */
    const hvdc_topology *topo; /* the runtime's */
    hvdc_cpu_allreduce cpu_allreduce;
    int hierarchical;          /* two-level host all-reduce: HVD_HIERARCHICAL_ALLREDUCE, or
                                  HVD_CPU_ALLREDUCE=shm across nodes; same ranks on every node */
    int gpu_hierarchical;      /* two-level NCCL: HVD_HIERARCHICAL_ALLREDUCE alone (a CPU
                                  algorithm's setting does not change the device path) */
    MPI_Comm local_comm;       /* ranks on this node (hierarchical or shm only) */
    MPI_Comm cross_comm;       /* ranks with this local rank, one per node (hierarchical only) */
    hvdc_shm *shm;             /* the node's shared segment: NULL unless the all-reduce uses it */
    size_t pack_piece_bytes;   /* packed runs of small tensors are at most this big */
    size_t large_tensor_bytes; /* tensors at least this big are reduced where they lie */
    size_t small_bytes;        /* buffers up to this size take the one-step exchange (allreduce.h) */
    hvdc_buffer fusion;        /* packed pieces; also reducescatter's work area */
    hvdc_buffer scratch;       /* the all-reduces' receive space */
    hvdc_pack_plan plan;       /* the all-reduce's packing plan; kept, like tensor_list */
    hvdc_buffer tensor_list;   /* the all-reduce's tensors, then their counts */
    size_t fusion_agreed, scratch_agreed; /* bytes every rank is known to hold (the same
                                             number on every rank) */
    hvdc_timeline *timeline;   /* rank 0's (recording or not), NULL on other ranks */
    hvdc_liveness *liveness;   /* every wait checks it: a dead rank fails, never hangs */
    hvdc_watchdog *watchdog;   /* HVD_CPU_ALLREDUCE=mpi: checks it during MPI_Allreduce; once
                                  it fired, the ops are failed and may be freed (watchdog.h) */
    int die_in_mpi_allreduce;  /* tests (base/fault.h): SIGKILL this rank as it enters one */
    /* GPU backend, created by the first device response (every rank executes it together) */
    hvdc_gpu *gpu;
    atomic_int *rank_device;   /* the CUDA device of this rank's collectives, -1 until a
                                  backend exists: the global runtime's, shared with the process
                                  sets' executors (one device per rank, whichever chose it);
                                  read by submitting threads (api.c) */
    void (*gpu_wake)(void *ctx); /* the backend calls it (on a CUDA thread) when device work
                                    finishes: wakes the background thread (background.c) */
    void *gpu_wake_ctx;
    atomic_int *gpu_aborted;   /* the runtime's flag the backend sets before it aborts */
    size_t gpu_fusion_bytes;
    int64_t group;             /* the response being executed, for the timeline */
    struct hvdc_adasum_nodes *adasum_nodes; /* the device Adasum's view of the nodes, made by
                                               its first response (execute_adasum_gpu.c) */
} hvdc_executor;

/* An executor with nothing yet, for a runtime whose topology is topo (filled in later by
 * hvd_init) and whose rank's device is rank_device (both outlive it): every part NULL, so
 * hvdc__executor_free may follow at any step of hvd_init. */
void hvdc__executor_init(hvdc_executor *ex, const hvdc_topology *topo, atomic_int *rank_device);

/* The settings the executor reads from config: the CPU algorithm and the packing policy.
 * hvd_init's later steps add the parts (comm, local_comm/cross_comm, shm, liveness, watchdog,
 * timeline); the first device response adds the GPU backend. */
void hvdc__executor_configure(hvdc_executor *ex, const hvdc_config *config);

/* Frees everything the executor holds. Once its background thread has ended and no thread
 * waits on a device event (the backend owns them). */
void hvdc__executor_free(hvdc_executor *ex);

/* How executing a response ended, and whether the ranks are still in lockstep after it: the
 * runtime's most safety-critical decision, so it travels as the executor's return value. */
typedef struct hvdc_outcome {
    hvd_status status; /* HVD_OK, or the error every op of the response fails with
                          (hvd_last_error() says why) */
    int in_step;       /* 1: it succeeded, or every rank refused it alike before any data
                          moved, and the runtime goes on; 0: it failed midway (on some rank
                          alone), the ranks are out of step and the runtime must stop */
} hvdc_outcome;

/* st of work that moves data (or of a rank's own step): an error leaves the ranks out of step. */
static inline hvdc_outcome hvdc__ran(hvd_status st) { return (hvdc_outcome){st, st == HVD_OK}; }

/* st of a step every rank took together and agreed on before any data moved (an agreement,
 * a check of the same table): an error refuses the response on every rank alike. */
static inline hvdc_outcome hvdc__refused(hvd_status st) { return (hvdc_outcome){st, 1}; }

/* Executes response over ops (ops[i] is this rank's op for response->names[i]). Host memory
 * is done when it returns; device memory is queued, and *pending (else NULL) completes later.
 * @return the outcome; an error applies to all the ops. */
hvdc_outcome hvdc__execute(hvdc_executor *ex, const hvdc_wire_response *response, hvdc_op **ops,
                         size_t n_ops, hvdc_gpu_pending **pending);

/* The Adasum all-reduce of hvdc__execute (execute_adasum.c), host or device memory. */
hvdc_outcome hvdc__execute_adasum(hvdc_executor *ex, const hvdc_wire_response *response,
                                hvdc_op **ops, size_t n_ops, hvdc_gpu_pending **pending);

/* The device half of hvdc__execute (execute_gpu.c). */
hvdc_outcome hvdc__execute_gpu(hvdc_executor *ex, const hvdc_wire_response *response, hvdc_op **ops,
                             size_t n_ops, hvdc_gpu_pending **pending);

/* A device all-reduce of ops' tensors with op and scale factors in place of the requests' own
 * (execute_gpu.c): what a device Adasum on one node is (execute_adasum.c). */
hvdc_outcome hvdc__execute_gpu_allreduce_as(hvdc_executor *ex, hvdc_op **ops, size_t n_ops,
                                          hvd_reduce_op op, double prescale, double postscale,
                                          hvdc_gpu_pending **pending);

/* The backend (created on first use, every rank together) and the ready events of ops, as
 * hvdc__execute_gpu starts (execute_gpu.c); *ready is the event the next device work waits
 * for. */
hvdc_outcome hvdc__execute_gpu_prepare(hvdc_executor *ex, hvdc_op **ops, size_t n_ops,
                                      void **ready);

/* The backend's node NCCL communicator, made by the first response that needs it (collective;
 * execute_gpu.c). */
hvdc_outcome hvdc__execute_gpu_node_comm(hvdc_executor *ex);

/* The device Adasum across nodes (execute_adasum_gpu.c): Horovod's NCCL hierarchy, the node's
 * sum on the device, Adasum between nodes on the host. */
hvdc_outcome hvdc__execute_adasum_gpu(hvdc_executor *ex, const hvdc_wire_response *response,
                                    hvdc_op **ops, size_t n_ops, hvdc_gpu_pending **pending);

/* Frees ex->adasum_nodes (shutdown). NULL-safe. */
void hvdc__adasum_nodes_free(struct hvdc_adasum_nodes *nodes);

#endif
