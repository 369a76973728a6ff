/*
 * hvdc.h - the whole public API of libhvdc, a data-parallel training runtime.
 *
 * defines: hvd_init, hvd_init_comm, hvd_shutdown, hvd_is_initialized,
 *          hvd_rank, hvd_size, hvd_local_rank, hvd_local_size, hvd_cross_rank, hvd_cross_size,
 *          hvd_allreduce[_async], hvd_grouped_allreduce[_async], hvd_broadcast[_async],
 *          hvd_allgather[_async], hvd_allgather_alloc_async, hvd_reducescatter[_async],
 *          hvd_alltoall[_async], hvd_alltoall_alloc_async, hvd_free, hvd_barrier[_async],
 *          hvd_join, hvd_add_process_set, hvd_remove_process_set, hvd_process_set_rank,
 *          hvd_process_set_size, hvd_start_timeline, hvd_stop_timeline, hvd_set_thread_dump,
 *          hvd_report_get,
 *          hvd_poll, hvd_wait, hvd_wait_on_stream, hvd_status_string, hvd_last_error, hvd_dtype_size, hvd_gpu_built, hvd_nccl_built,
 *          hvd_version, hvd_build_info; and, through hvdc_train.h (which it includes), the
 *          training API
 *
 * How it works. Any user thread submits named tensors. A background thread, which runs every
 * negotiation and collective, agrees with the other ranks which names are ready everywhere, checks
 * that every rank asked for the same thing (dtype, count, op, root), fuses ready all-reduces into
 * one buffer and runs one all-reduce over it, then completes the handles. All ranks execute
 * the same operations in the same order, whatever order they submitted in.
 *
 * Threads. Every function may be called from any thread once hvd_init has returned HVD_OK, except
 * hvd_init/hvd_init_comm/hvd_shutdown, which one thread calls, once each. Blocking calls block only
 * the calling thread.
 *
 * Errors. Every function that can fail returns an hvd_status; results come back through
 * out-parameters. On failure hvd_last_error() returns a message for the calling thread that says
 * what was wrong and what was expected. The library never exits or aborts the process.
 *
 * Names. Each operation carries a name (1 to HVD_MAX_NAME_LEN bytes) that must be the same on
 * every rank: it is how ranks match their submissions. Two in-flight operations with the same name
 * on one rank are an error (HVD_ERR_DUPLICATE_NAME); a name is free again once its operation has
 * completed, at the latest when hvd_wait or hvd_wait_on_stream returns (the device may still be
 * running it then: the name can be submitted again at once).
 *
 * Memory. The caller owns every buffer and must keep it valid, and not touch it, until the
 * operation completes (the blocking call returns, or hvd_wait returns). count is always in
 * elements of the dtype, never in bytes. A buffer may be NULL only when its count is 0.
 */
#ifndef HVDC_H
#define HVDC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define HVD_API
#else
#define HVD_API __attribute__((visibility("default")))
#endif

/* The version, written here only: the build reads it from here, hvd_version() formats it. */
#define HVD_VERSION_MAJOR 0
#define HVD_VERSION_MINOR 1
#define HVD_VERSION_PATCH 0

/* Longest operation name, in bytes, without the terminating NUL. */
#define HVD_MAX_NAME_LEN 255

/* Status codes: X(enum name, value, short description). */
#define HVD_STATUS_TABLE(X)                                                                \
    X(HVD_OK, 0, "success")                                                                \
    X(HVD_ERR_INVALID_ARG, 1, "invalid argument")                                          \
    X(HVD_ERR_NOT_INITIALIZED, 2, "libhvdc is not initialized; call hvd_init() first")     \
    X(HVD_ERR_ALREADY_INITIALIZED, 3, "libhvdc is already initialized")                    \
    X(HVD_ERR_CONFIG, 4, "bad configuration in the environment")                           \
    X(HVD_ERR_MPI, 5, "MPI error")                                                         \
    X(HVD_ERR_MISMATCH, 6, "ranks disagree about an operation")                            \
    X(HVD_ERR_DUPLICATE_NAME, 7, "an operation with this name is already in flight")       \
    X(HVD_ERR_SHUTDOWN, 8, "libhvdc was shut down before the operation completed")         \
    X(HVD_ERR_NO_MEMORY, 9, "out of memory")                                               \
    X(HVD_ERR_UNSUPPORTED, 10, "not supported in this build or on this machine")           \
    X(HVD_ERR_CUDA, 11, "CUDA error")                                                      \
    X(HVD_ERR_NCCL, 12, "NCCL error")                                                      \
    X(HVD_ERR_INTERNAL, 13, "internal error in libhvdc")                                   \
    X(HVD_ERR_STALLED, 14, "the job stopped: ranks did not submit an operation in time")   \
    X(HVD_ERR_RANK_FAILED, 15, "the job stopped: a rank died or became unreachable")

typedef enum hvd_status {
#define HVD_STATUS_ENUM_(name, value, text) name = value,
    HVD_STATUS_TABLE(HVD_STATUS_ENUM_)
#undef HVD_STATUS_ENUM_
} hvd_status;

/* Element types. float16 is IEEE binary16, bfloat16 the top half of a float32; both are
 * reduced by converting each pair to float32, combining, and rounding back to nearest-even.
 * Integers wrap around on overflow. HVD_BOOL is one byte, 0 or 1 (any non-zero input byte
 * counts as 1, results are always 0 or 1), reduced as torch's collectives reduce bool:
 * HVD_SUM and HVD_MAX are logical or, HVD_PRODUCT and HVD_MIN logical and; HVD_AVERAGE of
 * bool is undefined and refused (HVD_ERR_INVALID_ARG). On a CUDA device (NCCL has no 16-bit
 * integers) int16 and uint16 move (broadcast, allgather, alltoall) but do not reduce
 * (HVD_ERR_UNSUPPORTED). */
typedef enum hvd_dtype {
    HVD_UINT8 = 0,
    HVD_INT8 = 1,
    HVD_INT32 = 2,
    HVD_INT64 = 3,
    HVD_FLOAT16 = 4,
    HVD_BFLOAT16 = 5,
    HVD_FLOAT32 = 6,
    HVD_FLOAT64 = 7,
    HVD_INT16 = 8,
    HVD_UINT16 = 9,
    HVD_BOOL = 10,
} hvd_dtype;
#define HVD_DTYPE_COUNT 11

/* Reductions. HVD_AVERAGE is the sum divided by the number of ranks, summed in a type wide
 * enough not to overflow: int8, uint8, int16, uint16 and int32 in int64 (the division then
 * truncates toward
 * zero; int64 sums in int64), float16 and bfloat16 in float32 (each value divided first, the
 * result rounded once to nearest-even). HVD_MIN and HVD_MAX on floating dtypes propagate NaN
 * (a NaN on any rank gives NaN, as torch.minimum/maximum do). Every rank gets the same bits.
 * bool: see hvd_dtype (no average).
 * HVD_ADASUM is Horovod's Adasum, not an element-wise op: ranks combine pairwise in a binary
 * tree, a' = (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b, with the dot product and norms taken
 * over each whole tensor (each tensor of a grouped or fused all-reduce on its own): vectors
 * that agree are averaged, orthogonal ones added. For all-reduce (and grouped all-reduce)
 * only, of float16, bfloat16, float32 or float64 (else HVD_ERR_INVALID_ARG), on the global
 * process set and, on host memory, a power-of-2 number of ranks (else HVD_ERR_UNSUPPORTED).
 * Device tensors run it as Horovod's NCCL Adasum does: on one node the average (summed inside
 * the node, divided by its ranks); across nodes each node's sum (NCCL inside the node) is
 * combined with Adasum between the nodes over MPI, then divided by the ranks per node; the nodes
 * must have equal rank counts and be a power of 2 in number (else HVD_ERR_UNSUPPORTED on every
 * rank, with Horovod's words). Prescale applies before the
 * combine, postscale after. A rank that has joined contributes zeros, which Adasum leaves
 * out. Each element is computed by one rank and copied to the others: every rank gets the
 * same bits. */
typedef enum hvd_reduce_op {
    HVD_SUM = 0,
    HVD_AVERAGE = 1,
    HVD_MIN = 2,
    HVD_MAX = 3,
    HVD_PRODUCT = 4,
    HVD_ADASUM = 5,
} hvd_reduce_op;
#define HVD_REDUCE_OP_COUNT 6

/* Where a tensor's memory lives. */
#define HVD_DEVICE_CPU (-1)

/* Options of the _async calls and hvd_allreduce_with_options; NULL means HVD_OPTIONS_INIT. Start
 * from HVD_OPTIONS_INIT, which sets struct_size, then change fields: a later libhvdc may add
 * fields at the end, and reads only as many as struct_size says the caller has (struct_size 0, as
 * an initializer that names fields leaves it, means this header's size). Fields this library does
 * not know must be zero, else HVD_ERR_UNSUPPORTED. Scale factors other than 1.0 apply to
 * reductions only (elsewhere HVD_ERR_INVALID_ARG), need a numeric dtype (not bool, else
 * HVD_ERR_INVALID_ARG) and must be finite. Integers are scaled as Horovod scales them: in float64,
 * truncated toward zero (clamped to the type's range); an integer HVD_AVERAGE with a postscale
 * applies postscale / size as one such factor (without one it divides exactly). A device other
 * than HVD_DEVICE_CPU needs the GPU backend (else HVD_ERR_UNSUPPORTED) and a visible CUDA device
 * (else HVD_ERR_CUDA, "no CUDA device visible: ..."). Device tensors are moved by NCCL on the
 * runtime's own stream; the handle completes when that work has finished.
 * process_set sends the operation to a process set (hvd_add_process_set): only its ranks take
 * part, and ranks, roots, counts and sizes are the set's (see "Process sets" below). */
typedef struct hvd_options {
    size_t struct_size; /* sizeof(hvd_options) as the caller was compiled: HVD_OPTIONS_INIT */
    double prescale;   /* inputs are multiplied by this before reducing */
    double postscale;  /* the result is multiplied by this after reducing */
    int device;        /* HVD_DEVICE_CPU, or a CUDA device ordinal (GPU builds only); device
                          pointers are also recognised without it */
    void *ready_event; /* device tensors: a cudaEvent_t recorded after the data was written;
                          the runtime's stream waits on it (no host sync). NULL: the work already
                          queued on the legacy default stream. It must stay valid (not
                          destroyed) until the handle completes; re-recording it after the call
                          returns is allowed only once the handle completed */
    int process_set;   /* HVD_PROCESS_SET_GLOBAL (every rank) or an id from hvd_add_process_set */
    const int64_t *shape; /* optional, one-tensor calls: the tensor's ndim dimensions, as the
                          caller describes it (not checked against the count). Every rank that
                          gives one must give the same (allgather, alltoall: beyond the first
                          dimension), else every rank fails with HVD_ERR_MISMATCH naming both
                          shapes, as Horovod compares shapes. NULL: only counts are compared.
                          Read during the call only. */
    int ndim;          /* dimensions in shape (0..64; 0 with a non-NULL shape: a scalar) */
} hvd_options;
#define HVD_PROCESS_SET_GLOBAL 0
#define HVD_OPTIONS_INIT                                                                     \
    {sizeof(hvd_options), 1.0, 1.0, HVD_DEVICE_CPU, NULL, HVD_PROCESS_SET_GLOBAL, NULL, 0}
#define HVD_OPTIONS_DEFAULT HVD_OPTIONS_INIT /* its first name, kept for existing programs */

/* An in-flight operation. 0 is never a valid handle. A handle is released by exactly one
 * successful hvd_wait; using it afterwards returns HVD_ERR_INVALID_ARG (it is never a crash).
 * Handles never waited for are reclaimed by hvd_shutdown. */
typedef uint64_t hvd_handle;
#define HVD_HANDLE_NULL ((hvd_handle)0)

/* ---- Lifetime --------------------------------------------------------------------------- */

/* Starts libhvdc on MPI_COMM_WORLD. Initializes MPI (asking for MPI_THREAD_MULTIPLE) unless the
 * application already did; in that case libhvdc uses the application's MPI and leaves finalizing
 * it to the application. Without a launcher the process runs as a single rank.
 * Reads these environment variables (the HVD_ name wins over Horovod's; docs/configuration.md
 * says what each does), then starts the background thread. Collective: every rank calls it.
 *   (settings: generated from libhvdc/src/runtime/config.c by tests/unit/test_settings_doc)
 *   HVD_FUSION_THRESHOLD (HOROVOD_FUSION_THRESHOLD)                default 16M host, 128M device
 *   HVD_CYCLE_TIME (HOROVOD_CYCLE_TIME)                            default 1
 *   HVD_CPU_ALLREDUCE (HOROVOD_CPU_ALLREDUCE)                      default auto
 *   HVD_LOG_LEVEL (HOROVOD_LOG_LEVEL)                              default warning
 *   HVD_HIERARCHICAL_ALLREDUCE (HOROVOD_HIERARCHICAL_ALLREDUCE)    default 0
 *   HVD_STALL_CHECK_TIME (HOROVOD_STALL_CHECK_TIME_SECONDS)        default 60
 *   HVD_STALL_SHUTDOWN_TIME (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)  default 0
 *   HVD_TIMELINE (HOROVOD_TIMELINE)                                default unset
 *   HVD_TIMELINE_MARK_CYCLES (HOROVOD_TIMELINE_MARK_CYCLES)        default 0
 *   HVD_CACHE_CAPACITY (HOROVOD_CACHE_CAPACITY)                    default 1024
 *   HVD_AUTOTUNE (HOROVOD_AUTOTUNE)                                default 0
 *   HVD_AUTOTUNE_LOG (HOROVOD_AUTOTUNE_LOG)                        default unset
 *   HVD_SHM_STEP                                                   default 1M
 *   HVD_CHECK_CONSISTENCY                                          default 0
 *   HVD_CALLER_THREAD                                              default 1
 *   HVD_SIGUSR1_DUMP                                               default 1
 *   HVD_HOST_TIMEOUT                                               default 30
 *   HVD_REPORT                                                     default 0
 *   HVD_STALL_CHECK_DISABLE (HOROVOD_STALL_CHECK_DISABLE)          default 0
 *   HVD_LOG_HIDE_TIME (HOROVOD_LOG_HIDE_TIME)                      default 1
 *   HVD_THREAD_AFFINITY (HOROVOD_THREAD_AFFINITY)                  default unset
 *   (end settings)
 * @return HVD_OK; HVD_ERR_CONFIG for a malformed environment value (the message names the
 *         variable, its value and what is accepted); HVD_ERR_MPI if MPI cannot be started, or
 *         runs with less than MPI_THREAD_MULTIPLE (an application that initialized MPI itself
 *         must ask for MPI_THREAD_MULTIPLE);
 *         HVD_ERR_ALREADY_INITIALIZED. Blocks until all ranks have called it. */
HVD_API hvd_status hvd_init(void);

#ifdef MPI_VERSION
/* Like hvd_init, on the given communicator (duplicated; the caller keeps ownership of comm).
 * MPI must already be initialized with MPI_THREAD_MULTIPLE. Declared only when <mpi.h> was
 * included before this header. */
HVD_API hvd_status hvd_init_comm(MPI_Comm comm);
#endif

/* Stops the background thread, completes every operation still in flight with HVD_ERR_SHUTDOWN,
 * frees everything, and finalizes MPI if hvd_init initialized it. Collective: when one rank
 * shuts down, the others' pending and later operations fail with HVD_ERR_SHUTDOWN.
 * @return HVD_OK; HVD_ERR_NOT_INITIALIZED; HVD_ERR_RANK_FAILED when a rank died earlier, or
 *         the error that stopped libhvdc on this rank alone (the others then failed with
 *         HVD_ERR_RANK_FAILED naming it): then everything is freed but MPI is not finalized (a
 *         rank that is gone never answers that), and the process should exit with a non-zero
 *         status. Blocks. */
HVD_API hvd_status hvd_shutdown(void);

/* @return 1 between a successful hvd_init and hvd_shutdown, else 0. Never blocks. */
HVD_API int hvd_is_initialized(void);

/* ---- Topology: each returns HVD_OK, HVD_ERR_NOT_INITIALIZED, or HVD_ERR_INVALID_ARG for a
 * NULL pointer; never blocks ---------------------------------------------------------------- */

HVD_API hvd_status hvd_rank(int *rank);             /* this process, 0 .. size-1 */
HVD_API hvd_status hvd_size(int *size);             /* number of processes */
HVD_API hvd_status hvd_local_rank(int *local_rank); /* rank among processes on this node */
HVD_API hvd_status hvd_local_size(int *local_size); /* processes on this node */
HVD_API hvd_status hvd_cross_rank(int *cross_rank); /* rank among processes with this local rank */
HVD_API hvd_status hvd_cross_size(int *cross_size); /* processes with this local rank (nodes) */

/* ---- Collectives -------------------------------------------------------------------------
 * Each comes blocking (returns the operation's status when it is complete) and _async (returns
 * HVD_OK once queued and stores a handle; the operation's own status comes from hvd_wait).
 * Argument errors found on this rank alone (NULL buffer, unknown dtype or op, bad name, root out
 * of range, a duplicate in-flight name, a count whose bytes - or a group's or alltoall's counts
 * together - exceed 2^56, more than any process can address) are returned at once as
 * HVD_ERR_INVALID_ARG and nothing is sent.
 * Errors that need every rank's view come from the operation: HVD_ERR_MISMATCH when ranks
 * disagree (the message names the tensor, what differed and on which ranks), HVD_ERR_SHUTDOWN,
 * HVD_ERR_NO_MEMORY when some rank cannot allocate the working memory (the operation fails on
 * every rank before any data moves; later operations are not affected).
 * Overlapping buffers: an output may overlap its input only where the call says so (in place);
 * any other overlap is refused with HVD_ERR_INVALID_ARG, never reduced into wrong numbers. */

/* Reduces count elements across ranks; every rank gets the result in recvbuf.
 * sendbuf == recvbuf reduces in place; buffers that overlap otherwise are refused.
 * Host memory: each element is combined in rank order,
 * ((rank 0 op rank 1) op rank 2) ..., so its bits are the same on every rank and do not depend
 * on fusion, timing or submission order (docs/reproducibility.md); with
 * HVD_HIERARCHICAL_ALLREDUCE=1, rank order inside each node, then node order. */
HVD_API hvd_status hvd_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                                 size_t count, hvd_dtype dtype, hvd_reduce_op op);
HVD_API hvd_status hvd_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                                       size_t count, hvd_dtype dtype, hvd_reduce_op op,
                                       const hvd_options *options, hvd_handle *handle);
/* hvd_allreduce with hvd_allreduce_async's options (scaling, process set, device, shape):
 * blocking, so that a host all-reduce of the global set may run on the calling thread, as
 * hvd_allreduce's may (docs/performance.md, "The caller's path"). options NULL: the defaults. */
HVD_API hvd_status hvd_allreduce_with_options(const char *name, const void *sendbuf,
                                              void *recvbuf, size_t count, hvd_dtype dtype,
                                              hvd_reduce_op op, const hvd_options *options);

/* Reduces n tensors as one unit: they are negotiated together, fused together and complete
 * together (one handle). All share dtype and op; names[i] must be distinct. Each tensor may be
 * in place (recvbufs[i] == sendbufs[i]); no output may overlap another tensor's buffers. */
HVD_API hvd_status hvd_grouped_allreduce(int n, const char *const names[],
                                         const void *const sendbufs[], void *const recvbufs[],
                                         const size_t counts[], hvd_dtype dtype,
                                         hvd_reduce_op op);
HVD_API hvd_status hvd_grouped_allreduce_async(int n, const char *const names[],
                                               const void *const sendbufs[],
                                               void *const recvbufs[], const size_t counts[],
                                               hvd_dtype dtype, hvd_reduce_op op,
                                               const hvd_options *options, hvd_handle *handle);

/* Copies root's count elements of buf into buf on every other rank. */
HVD_API hvd_status hvd_broadcast(const char *name, void *buf, size_t count, hvd_dtype dtype,
                                 int root);
HVD_API hvd_status hvd_broadcast_async(const char *name, void *buf, size_t count,
                                       hvd_dtype dtype, int root, const hvd_options *options,
                                       hvd_handle *handle);

/* Concatenates every rank's sendbuf in rank order into recvbuf. Counts may differ between
 * ranks (like the first dimension in Horovod). recv_capacity is recvbuf's size in elements;
 * if the total exceeds any rank's capacity, every rank fails with HVD_ERR_MISMATCH and nothing
 * moves. On completion *recv_count (if not NULL) holds the total and rank_counts (if not NULL,
 * size entries) each rank's count. recvbuf must not overlap sendbuf (never in place). */
HVD_API hvd_status hvd_allgather(const char *name, const void *sendbuf, size_t count,
                                 void *recvbuf, size_t recv_capacity, hvd_dtype dtype,
                                 size_t *recv_count, size_t *rank_counts);
HVD_API hvd_status hvd_allgather_async(const char *name, const void *sendbuf, size_t count,
                                       void *recvbuf, size_t recv_capacity, hvd_dtype dtype,
                                       size_t *recv_count, size_t *rank_counts,
                                       const hvd_options *options, hvd_handle *handle);

/* Allgather whose output libhvdc allocates, once negotiation has told every rank's count, so
 * the caller needs no bound on the total and no extra round to learn it (what a framework
 * binding needs to allocate a tensor of the gathered shape). On completion *recvbuf holds a
 * buffer of *recv_count elements, 64-byte aligned (NULL when the total is 0), which the caller
 * owns and releases with hvd_free; on failure it stays NULL. Host memory only: a device
 * sendbuf or options->device gives HVD_ERR_UNSUPPORTED. options may be NULL; its scale factors
 * must be 1. recv_count and rank_counts as for hvd_allgather. */
HVD_API hvd_status hvd_allgather_alloc_async(const char *name, const void *sendbuf, size_t count,
                                             hvd_dtype dtype, const hvd_options *options,
                                             void **recvbuf, size_t *recv_count,
                                             size_t *rank_counts, hvd_handle *handle);

/* Reduces count elements across ranks (in rank order, like hvd_allreduce, on host memory)
 * and leaves rank r with its block of the result:
 * block r starts at r*(count/size) + min(r, count%size) and holds count/size elements, plus one
 * if r < count%size. recvbuf must hold that many; *recv_count (if not NULL) gets it.
 * recvbuf == sendbuf is allowed (the block lands at the start of it); other overlaps are not. */
HVD_API hvd_status hvd_reducescatter(const char *name, const void *sendbuf, void *recvbuf,
                                     size_t count, hvd_dtype dtype, hvd_reduce_op op,
                                     size_t *recv_count);
HVD_API hvd_status hvd_reducescatter_async(const char *name, const void *sendbuf,
                                           void *recvbuf, size_t count, hvd_dtype dtype,
                                           hvd_reduce_op op, const hvd_options *options,
                                           size_t *recv_count, hvd_handle *handle);

/* Sends sendcounts[d] elements to each rank d (blocks laid out in rank order in sendbuf) and
 * receives every rank's block for this rank, in rank order, into recvbuf (recv_capacity
 * elements). On completion *recv_count (if not NULL) holds the total received and recvcounts
 * (if not NULL, size entries) the count from each rank. A capacity too small on any rank fails
 * every rank with HVD_ERR_MISMATCH before data moves. sendcounts must stay valid until completion.
 * recvbuf must not overlap sendbuf (never in place). */
HVD_API hvd_status hvd_alltoall(const char *name, const void *sendbuf, const size_t sendcounts[],
                                void *recvbuf, size_t recv_capacity, hvd_dtype dtype,
                                size_t *recv_count, size_t recvcounts[]);
HVD_API hvd_status hvd_alltoall_async(const char *name, const void *sendbuf,
                                      const size_t sendcounts[], void *recvbuf,
                                      size_t recv_capacity, hvd_dtype dtype, size_t *recv_count,
                                      size_t recvcounts[], const hvd_options *options,
                                      hvd_handle *handle);

/* Alltoall whose output libhvdc allocates once the ranks have exchanged their counts (see
 * hvd_allgather_alloc_async for the buffer's ownership and the options). */
HVD_API hvd_status hvd_alltoall_alloc_async(const char *name, const void *sendbuf,
                                            const size_t sendcounts[], hvd_dtype dtype,
                                            const hvd_options *options, void **recvbuf,
                                            size_t *recv_count, size_t recvcounts[],
                                            hvd_handle *handle);

/* Releases a buffer that an _alloc call handed over. NULL-safe. Never blocks. */
HVD_API void hvd_free(void *buf);

/* Returns once every rank has called hvd_barrier (the n-th call on each rank matches).
 * hvd_barrier_async: the same among options->process_set's ranks (other options unused). */
HVD_API hvd_status hvd_barrier(void);
HVD_API hvd_status hvd_barrier_async(const hvd_options *options, hvd_handle *handle);

/* For uneven data: a rank that has run out of batches calls hvd_join and blocks until every
 * rank has. Meanwhile the other ranks' all-reduces complete without it: it contributes neutral
 * values (0 to a sum, 1 to a product, +/-inf to min/max) and HVD_AVERAGE still divides by the
 * number of ranks (as Horovod: at np 2 with one rank joined, the average of x is x/2). Other collectives fail with HVD_ERR_MISMATCH while a rank has
 * joined. Ranks that have joined answer negotiation within HVD_CYCLE_TIME, so the others'
 * all-reduces may each take up to that long until everyone has joined.
 * @return HVD_OK with *last_joined_rank (if not NULL) the rank that joined last. Blocks. */
HVD_API hvd_status hvd_join(int *last_joined_rank);

/* ---- Handles ----------------------------------------------------------------------------- */

/* Sets *done to 1 if the operation has completed, else 0. Does not release the handle.
 * @return HVD_OK, HVD_ERR_INVALID_ARG for a handle that is not live. Never blocks. */
HVD_API hvd_status hvd_poll(hvd_handle handle, int *done);

/* Blocks until the operation completes, releases the handle and sets *handle to HVD_HANDLE_NULL.
 * @return the operation's status (with hvd_last_error() set on this thread on failure), or
 *         HVD_ERR_INVALID_ARG for a handle that is not live (released already, or never valid). */
HVD_API hvd_status hvd_wait(hvd_handle *handle);

/* For an operation on device memory: instead of the host waiting for the device, makes stream
 * (a cudaStream_t; NULL: the legacy default stream) wait on the device for the operation's
 * results, then releases the handle and sets *handle to HVD_HANDLE_NULL. Blocks only until
 * the operation has been negotiated and queued on the device; work queued on stream afterwards
 * sees the results (as Horovod's async completion and PyTorch's work.wait() on NCCL do), and
 * the operation's name is free when it returns, as after hvd_wait. A
 * failure on the device after that point (an NCCL error, a rank lost mid-collective) cannot be
 * returned here: it stops libhvdc on every rank, so every later operation fails, with its
 * reason (HVD_ERR_NCCL where NCCL failed, HVD_ERR_RANK_FAILED on the others). The results are then
 * partial sums, and the stream's later work reads them (as with PyTorch's work.wait());
 * hvd_checkpoint_save and hvd_elastic_commit refuse to write after such a failure (HVD_ERR_NCCL).
 * For host memory it is hvd_wait.
 * @return HVD_OK once the stream waits (or the operation's status, if it failed before it was
 *         queued); HVD_ERR_CUDA when the stream cannot wait (not a valid stream: the handle
 *         stays live, for hvd_wait); HVD_ERR_INVALID_ARG for a handle that is not live. */
HVD_API hvd_status hvd_wait_on_stream(hvd_handle *handle, void *stream);

/* ---- Process sets ----------------------------------------------------------------------------
 * A process set is a subset of the ranks whose collectives run among themselves: an operation
 * whose options name the set is negotiated, fused and executed by the set's own background
 * thread on the set's own communicators, so operations of different sets (the global set
 * included) never wait for each other. Inside a set, ranks are the global ranks' positions in
 * the set (0 .. set size - 1) for sizes, counts and messages, but a broadcast's root is a global
 * rank, which must belong to the set. A rank outside a set that submits to it gets
 * HVD_ERR_INVALID_ARG at once. Not for device tensors yet (untested: HVD_ERR_UNSUPPORTED),
 * no hierarchical all-reduce inside a set, no hvd_join (it is global). */

/* Makes the ranks (n of them, any order, no duplicates) a process set and stores its id (never
 * HVD_PROCESS_SET_GLOBAL; ids are not reused) in *process_set, on every rank. Collective over
 * every rank, members or not, which must make the same calls in the same order.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL, n < 1, a rank out of range or given twice, or a
 *         set with the same ranks already (the message names its id) — a list refused on one
 *         rank fails every rank, the others naming it; HVD_ERR_MISMATCH on every rank when
 *         ranks passed different sets (the message names them); HVD_ERR_MPI.
 *         Blocks until every rank has called it. */
HVD_API hvd_status hvd_add_process_set(const int *ranks, int n, int *process_set);

/* Removes a process set, on every rank: its thread stops and its communicators are freed.
 * Collective over every rank. Refused on every rank, with nothing removed, while any rank has
 * an operation of the set in flight (submitted and not yet completed): wait for them first.
 * Handles of the set's operations that completed but were never waited for are released.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for the global set, an unknown id, or work in flight
 *         (the message names the ranks that have it); HVD_ERR_MISMATCH on every rank when
 *         ranks passed different ids. Blocks until every rank has called it. */
HVD_API hvd_status hvd_remove_process_set(int process_set);

/* This rank's position in the set (-1 if it is not a member) and the set's number of ranks.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL or an unknown set. Never blocks. */
HVD_API hvd_status hvd_process_set_rank(int process_set, int *rank);
HVD_API hvd_status hvd_process_set_size(int process_set, int *size);

/* ---- Timeline ------------------------------------------------------------------------------ */

/* Starts writing a Chrome-trace timeline (what HVD_TIMELINE does from hvd_init) to path,
 * replacing the file: one row per tensor with its phases (queued, negotiating, waiting for
 * other ranks, executing); mark_cycles != 0 adds an instant event per negotiation round. Call
 * it on every rank, like Horovod's start_timeline: rank 0 writes the file, the other ranks only
 * check the arguments. The file is valid JSON at every moment.
 * @return HVD_OK; HVD_ERR_NOT_INITIALIZED; HVD_ERR_INVALID_ARG for a NULL or empty path, a file
 *         that cannot be written (the message names it and the system error), or a timeline
 *         already being written (the message names its file; stop it first). Never blocks on
 *         other ranks. */
HVD_API hvd_status hvd_start_timeline(const char *path, int mark_cycles);

/* Stops the timeline started by hvd_start_timeline or HVD_TIMELINE: when it returns, every
 * event so far is in the file, which is closed. Does nothing when no timeline is being
 * written. @return HVD_OK; HVD_ERR_NOT_INITIALIZED. Blocks only for the file's last write. */
HVD_API hvd_status hvd_stop_timeline(void);

/* ---- Diagnostics ----------------------------------------------------------------------------- */

/* Lets libhvdc show where this process's threads are, in rank 0's stall verdict and the SIGUSR1
 * dump: when asked, libhvdc raises signum on one of its own threads and reads back what the
 * handler wrote to fd, from the file's start (it empties the file first). The handler must be
 * async-signal-safe and must not need the application's locks, so that a process stuck
 * anywhere still answers: the Python binding registers faulthandler's, with
 * faulthandler.register(signum, file, all_threads=True). signum -1 and fd -1: none (a C
 * program's whereabouts are its last submission). May be called before hvd_init, from any
 * thread. @return HVD_OK; HVD_ERR_INVALID_ARG for a signal that cannot be caught, or only one
 * of the two -1. Never blocks. */
HVD_API hvd_status hvd_set_thread_dump(int signum, int fd);

/* The figures of HVD_REPORT's last period, as rank 0 printed them: what the job did, and which
 * rank the others waited for. Rank 0 measures them (it sees every rank's announcement arrive,
 * so no clocks are compared), so only rank 0 has them. */
typedef struct hvd_report {
    double period_s;         /* the period they cover; 0: none yet (HVD_REPORT unset, the first
                                period not over, or not rank 0) */
    double steps_per_s;      /* how often the period's first all-reduced name ran (libhvdc's
                                own, "hvdc.*" and "hvd.*", aside): one training step each,
                                when every step reduces the same names */
    double rounds_per_s;     /* negotiation rounds */
    double wait_ms;          /* median time from a tensor's first announcement (some rank ready)
                                to its last (every rank ready): the ranks' wait for each other */
    int last_rank;           /* the rank that arrived last most often; -1: none */
    char last_host[64];      /* its host */
    double last_share;       /* the share of tensors it was last for, 0..1 */
    double last_lateness_ms; /* its median lateness: after the rank before it, per tensor */
    uint64_t bytes;          /* bytes all-reduced by each rank */
    double busbw_gbs;        /* bus bandwidth of the host all-reduces, GB/s: their bytes *
                                2(n-1)/n / the time spent inside them (device ones: not timed) */
    uint64_t tensors, ops;   /* tensors executed, in ops operations (fused: one op) */
} hvd_report;

/* Copies the last period's figures into out (see hvd_report). @return HVD_OK (period_s 0 when
 * there are none); HVD_ERR_NOT_INITIALIZED; HVD_ERR_INVALID_ARG for a NULL out. Never blocks on
 * other ranks; any thread. */
HVD_API hvd_status hvd_report_get(hvd_report *out);

/* ---- Errors and misc ------------------------------------------------------------------------ */

/* The short description of a status; never NULL. Never blocks. */
HVD_API const char *hvd_status_string(hvd_status status);

/* The detailed message of the calling thread's most recent failed call ("" if none).
 * Valid until this thread's next libhvdc call. */
HVD_API const char *hvd_last_error(void);

/* Bytes per element of dtype, or 0 for an unknown dtype. */
HVD_API size_t hvd_dtype_size(hvd_dtype dtype);

/* 1 if this build has the GPU backend (CUDA kernels and NCCL), else 0. Never blocks; needs no
 * hvd_init. */
HVD_API int hvd_gpu_built(void);

/* The NCCL version this build was compiled against, as NCCL_VERSION_CODE (e.g. 22809 for
 * 2.28.9), or 0 without the GPU backend: what Horovod's nccl_built() returns, so that guards
 * like `nccl_built() >= 2700` read the same. Never blocks; needs no hvd_init. */
HVD_API int hvd_nccl_built(void);

/* "major.minor.patch". */
HVD_API const char *hvd_version(void);

/* What this build contains, one "key: value" line each: version, cpu_ring, shm_allreduce, mpi
 * (the MPI library's name and version), cuda and nccl ("yes, <version>" or "no: <why>"),
 * autotune, and environment (every HVD_/HOROVOD_ variable libhvdc reads, space-separated).
 * `hvdcrun --check-build` prints it. Never NULL; the text lives as long as the library.
 * Any thread, also before hvd_init; never blocks. */
HVD_API const char *hvd_build_info(void);

#ifdef __cplusplus
}
#endif

/* The training API (optimizer, sampler, metrics, checkpoints, elastic state), built on the
 * collectives above: its own header, included here so every program keeps one include. */
#include "hvdc_train.h"

#endif /* HVDC_H */
