/*
 * hvdc.h - the whole public API of libhvdc, a data-parallel training runtime.
 *
 * defines: hvd_init, hvd_init_comm, hvd_shutdown, hvd_is_initialized,
 *          hvd_rank, hvd_size, hvd_local_rank, hvd_local_size, hvd_cross_rank, hvd_cross_size,
 *          hvd_allreduce[_async], hvd_grouped_allreduce[_async], hvd_broadcast[_async],
 *          hvd_allgather[_async], hvd_reducescatter[_async], hvd_alltoall[_async], hvd_barrier,
 *          hvd_poll, hvd_wait, hvd_status_string, hvd_last_error, hvd_dtype_size, hvd_version
 *
 * How it works. Any user thread submits named tensors. A background thread, the only one that
 * talks to the network, negotiates with the other ranks which names are ready everywhere, checks
 * that every rank asked for the same thing (dtype, count, op, root), fuses ready all-reduces into
 * one buffer and runs one ring all-reduce over it, then completes the handles. All ranks execute
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
 * on one rank are an error (HVD_ERR_DUPLICATE_NAME).
 *
 * Memory. The caller owns every buffer and must keep it valid, and not touch it, until the
 * operation completes (the blocking call returns, or hvd_wait returns). count is always in
 * elements of the dtype, never in bytes.
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
    X(HVD_ERR_INTERNAL, 13, "internal error in libhvdc")

typedef enum hvd_status {
#define HVD_STATUS_ENUM_(name, value, text) name = value,
    HVD_STATUS_TABLE(HVD_STATUS_ENUM_)
#undef HVD_STATUS_ENUM_
} hvd_status;

/* Element types. float16 is IEEE binary16, bfloat16 the top half of a float32; both are
 * reduced by converting each pair to float32, combining, and rounding back to nearest-even. */
typedef enum hvd_dtype {
    HVD_UINT8 = 0,
    HVD_INT8 = 1,
    HVD_INT32 = 2,
    HVD_INT64 = 3,
    HVD_FLOAT16 = 4,
    HVD_BFLOAT16 = 5,
    HVD_FLOAT32 = 6,
    HVD_FLOAT64 = 7,
} hvd_dtype;
#define HVD_DTYPE_COUNT 8

/* Reductions. HVD_AVERAGE is the sum divided by the number of ranks; on integer dtypes the
 * division truncates toward zero. */
typedef enum hvd_reduce_op {
    HVD_SUM = 0,
    HVD_AVERAGE = 1,
    HVD_MIN = 2,
    HVD_MAX = 3,
    HVD_PRODUCT = 4,
} hvd_reduce_op;
#define HVD_REDUCE_OP_COUNT 5

/* Where a tensor's memory lives. */
#define HVD_DEVICE_CPU (-1)

/* Options for the _async calls that take them; NULL means HVD_OPTIONS_DEFAULT. */
typedef struct hvd_options {
    double prescale;  /* inputs are multiplied by this before reducing; floating dtypes only */
    double postscale; /* the result is multiplied by this after reducing; floating dtypes only */
    int device;       /* HVD_DEVICE_CPU, or a CUDA device ordinal (GPU builds only) */
} hvd_options;
#define HVD_OPTIONS_DEFAULT {1.0, 1.0, HVD_DEVICE_CPU}

/* An in-flight operation. 0 is never a valid handle. A handle is released by exactly one
 * successful hvd_wait; using it afterwards returns HVD_ERR_INVALID_ARG (it is never a crash).
 * Handles never waited for are reclaimed by hvd_shutdown. */
typedef uint64_t hvd_handle;
#define HVD_HANDLE_NULL ((hvd_handle)0)

/* ---- Lifetime --------------------------------------------------------------------------- */

/* Starts libhvdc on MPI_COMM_WORLD. Initializes MPI (asking for MPI_THREAD_MULTIPLE) unless the
 * application already did; in that case libhvdc uses the application's MPI and leaves finalizing
 * it to the application. Without a launcher the process runs as a single rank.
 * Reads the environment (HVD_FUSION_THRESHOLD, HVD_CYCLE_TIME, HVD_CPU_ALLREDUCE, HVD_LOG_LEVEL
 * and their HOROVOD_ aliases) and starts the background thread. Collective: every rank calls it.
 * @return HVD_OK; HVD_ERR_CONFIG for a malformed environment value (the message names the
 *         variable, its value and what is accepted); HVD_ERR_MPI if MPI cannot be started or
 *         grants less than MPI_THREAD_MULTIPLE when it is already running with a lower level;
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
 * @return HVD_OK, or HVD_ERR_NOT_INITIALIZED. Blocks. */
HVD_API hvd_status hvd_shutdown(void);

/* @return 1 between a successful hvd_init and hvd_shutdown, else 0. Never blocks. */
HVD_API int hvd_is_initialized(void);

/* ---- Topology: each returns HVD_ERR_NOT_INITIALIZED or HVD_OK; never blocks -------------- */

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
 * of range, a duplicate in-flight name) are returned at once and nothing is sent.
 * Errors that need every rank's view come from the operation: HVD_ERR_MISMATCH when ranks
 * disagree (the message names the tensor, what differed and on which ranks), HVD_ERR_SHUTDOWN. */

/* Reduces count elements across ranks; every rank gets the result in recvbuf.
 * sendbuf == recvbuf reduces in place. */
HVD_API hvd_status hvd_allreduce(const char *name, const void *sendbuf, void *recvbuf,
                                 size_t count, hvd_dtype dtype, hvd_reduce_op op);
HVD_API hvd_status hvd_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                                       size_t count, hvd_dtype dtype, hvd_reduce_op op,
                                       const hvd_options *options, hvd_handle *handle);

/* Reduces n tensors as one unit: they are negotiated together, fused together and complete
 * together (one handle). All share dtype and op; names[i] must be distinct. */
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
                                       hvd_dtype dtype, int root, hvd_handle *handle);

/* Concatenates every rank's sendbuf in rank order into recvbuf. Counts may differ between
 * ranks (like the first dimension in Horovod). recv_capacity is recvbuf's size in elements;
 * if the total exceeds any rank's capacity, every rank fails with HVD_ERR_MISMATCH and nothing
 * moves. On completion *recv_count (if not NULL) holds the total and rank_counts (if not NULL,
 * size entries) each rank's count. */
HVD_API hvd_status hvd_allgather(const char *name, const void *sendbuf, size_t count,
                                 void *recvbuf, size_t recv_capacity, hvd_dtype dtype,
                                 size_t *recv_count, size_t *rank_counts);
HVD_API hvd_status hvd_allgather_async(const char *name, const void *sendbuf, size_t count,
                                       void *recvbuf, size_t recv_capacity, hvd_dtype dtype,
                                       size_t *recv_count, size_t *rank_counts,
                                       hvd_handle *handle);

/* Reduces count elements across ranks and leaves rank r with its block of the result:
 * block r starts at r*(count/size) + min(r, count%size) and holds count/size elements, plus one
 * if r < count%size. recvbuf must hold that many; *recv_count (if not NULL) gets it. */
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
 * every rank with HVD_ERR_MISMATCH before data moves. sendcounts must stay valid until completion. */
HVD_API hvd_status hvd_alltoall(const char *name, const void *sendbuf, const size_t sendcounts[],
                                void *recvbuf, size_t recv_capacity, hvd_dtype dtype,
                                size_t *recv_count, size_t recvcounts[]);
HVD_API hvd_status hvd_alltoall_async(const char *name, const void *sendbuf,
                                      const size_t sendcounts[], void *recvbuf,
                                      size_t recv_capacity, hvd_dtype dtype, size_t *recv_count,
                                      size_t recvcounts[], hvd_handle *handle);

/* Returns once every rank has called hvd_barrier (the n-th call on each rank matches). */
HVD_API hvd_status hvd_barrier(void);

/* ---- Handles ----------------------------------------------------------------------------- */

/* Sets *done to 1 if the operation has completed, else 0. Does not release the handle.
 * @return HVD_OK, HVD_ERR_INVALID_ARG for a handle that is not live. Never blocks. */
HVD_API hvd_status hvd_poll(hvd_handle handle, int *done);

/* Blocks until the operation completes, releases the handle and sets *handle to HVD_HANDLE_NULL.
 * @return the operation's status (with hvd_last_error() set on this thread on failure), or
 *         HVD_ERR_INVALID_ARG for a handle that is not live (released already, or never valid). */
HVD_API hvd_status hvd_wait(hvd_handle *handle);

/* ---- Errors and misc ------------------------------------------------------------------------ */

/* The short description of a status; never NULL. Never blocks. */
HVD_API const char *hvd_status_string(hvd_status status);

/* The detailed message of the calling thread's most recent failed call ("" if none).
 * Valid until this thread's next libhvdc call. */
HVD_API const char *hvd_last_error(void);

/* Bytes per element of dtype, or 0 for an unknown dtype. */
HVD_API size_t hvd_dtype_size(hvd_dtype dtype);

/* "major.minor.patch". */
HVD_API const char *hvd_version(void);

#ifdef __cplusplus
}
#endif

#endif /* HVDC_H */
