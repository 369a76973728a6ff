/*
 * op.h - one submitted operation as this rank sees it: the announcement it makes, the caller's
 * buffers, and its completion state; and the handle table that lets user threads refer to it.
 *
 * Lifetime: created by a user thread at submission; owned by the queue, then by the background
 * thread until it completes; freed (or recycled, below) by the one hvd_wait that releases its
 * handle (or by shutdown), or, for a device op still held after that, by its last holder
 * (complete.h).
 *
 * Ops of one tensor are recycled: the one that lets go of a handle's op gives its memory to the
 * handle table's spares (hvdc__op_recycle, under completion_mutex), and a submission, under the
 * same lock, moves one spare to its thread (hvdc__op_take_spare), where its next hvdc__op_create
 * finds it. A step's submissions then allocate nothing, and the background thread, which lets go
 * of most device ops, frees nothing into the user threads' malloc arenas.
 *
 * defines: hvdc_op, hvdc_tensor, hvdc_handles, hvdc__op_create, hvdc__op_free,
 *          hvdc__op_recycle, hvdc__op_take_spare, hvdc__handles_{init,free,add,find,remove}
 * Any thread; the handle table is locked by its owner (runtime.completion_mutex).
 */
#ifndef HVDC_OP_H
#define HVDC_OP_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"
#include "negotiation/wire.h"
#include "runtime/phases.h"

/* The name hvd_join announces; a second hvd_join while one is in flight is a duplicate. */
#define HVDC_JOIN_NAME "hvd.join"
/* hvd_barrier's names: the prefix and the barrier's count in its set ("hvd.barrier.3") */
#define HVDC_BARRIER_PREFIX "hvd.barrier."

typedef struct hvdc_tensor {
    const char *name;
    const void *send;
    void *recv;
    size_t count;
    uint64_t name_hash; /* hvdc__name_hash(name), taken once by hvdc__submit for the in-flight
                           table's put and remove */
} hvdc_tensor;

typedef struct hvdc_op {
    hvdc_wire_request desc;     /* what this rank announces */
    size_t n_tensors;
    hvdc_tensor *tensors;       /* (n_tensors); names point into member_names */
    char *member_names;         /* grouped allreduce: the names, NUL-separated */
    size_t *recv_count_out;     /* allgather/alltoall/reducescatter, may be NULL */
    size_t *rank_counts_out;    /* allgather/alltoall, (size) may be NULL */
    void **alloc_out;           /* allgather/alltoall _alloc: the output libhvdc allocates once
                                   negotiation knows its size goes here (tensors[0].recv too) */
    /* completion, written by the background thread under completion_mutex */
    int done;
    hvd_status status;
    char *error;                /* message when status != HVD_OK */
    int64_t announced_us;       /* timeline clock when the background thread announced it */
    int announced;              /* 1 once sent to rank 0 (background thread, under queue_mutex) */
    int names_forgotten;        /* 1 once its names are out of in_flight (complete.c, under
                                   queue_mutex): a device op's waiter and the background
                                   thread both complete it, and only the first looks them up */
    int64_t phase_at[HVDC_N_PHASES]; /* submitted, taken, answered, on the device, completed
                                        (ns; phases.h) */
    void *ready_event;          /* device tensors: cudaEvent_t the inputs are ready on, or NULL */
    /* device ops once queued on the device, and who holds the op (complete.h); under
     * completion_mutex */
    void *device_done;          /* cudaEvent_t its results are written by, or NULL */
    struct hvdc_op *const *device_batch; /* the ops device_done marks (this one among them),
                                            the background thread's list: valid while
                                            device_done is set */
    size_t device_batch_n;
    int on_device;              /* the background thread's device work holds it */
    int device_waiting;         /* a waiter is inside a wait on device_done */
    int released;               /* hvd_wait released its handle: the last holder frees it */
    struct hvdc_op *next;       /* queue link */
} hvdc_op;

/* An op for n tensors with zeroed fields, and room for a count each in desc.counts; NULL when
 * out of memory. One allocation, with its tensors and counts. */
hvdc_op *hvdc__op_create(size_t n_tensors);
/* Copies counts[n] into op->desc.counts (in the op's own room when n fits it) and sets n_counts.
 * @return 0, or -1 when out of memory (op unchanged). */
int hvdc__op_set_counts(hvdc_op *op, const size_t *counts, size_t n);
void hvdc__op_free(hvdc_op *op); /* NULL-safe */

/* Handles are (generation << 32 | slot + 1), generation in 24 bits (the top byte is the process
 * set's table slot, added by submit.c), so a released handle does not match again before 2^24
 * reuses of its slot. */
typedef struct hvdc_handle_slot {
    uint32_t generation;
    hvdc_op *op; /* NULL when free */
} hvdc_handle_slot;

/* The most spare ops a handle table keeps: a step's worth of a large model's tensors (~2 MiB). */
#define HVDC_MAX_SPARE_OPS 4096u

typedef struct hvdc_handles {
    hvdc_handle_slot *slots;
    uint32_t n_slots;
    uint32_t *free_list;
    uint32_t n_free;
    hvdc_op *spare_ops; /* recycled one-tensor ops, linked by next (hvdc__op_recycle) */
    uint32_t n_spare;
} hvdc_handles;

void hvdc__handles_init(hvdc_handles *handles);
/* Frees the table, every op still in it, and its spares. */
void hvdc__handles_free(hvdc_handles *handles);
/* @return a handle for op, or HVD_HANDLE_NULL when out of memory. */
hvd_handle hvdc__handles_add(hvdc_handles *handles, hvdc_op *op);
hvdc_op *hvdc__handles_find(const hvdc_handles *handles, hvd_handle handle);
void hvdc__handles_remove(hvdc_handles *handles, hvd_handle handle);

/* hvdc__op_free, but a one-tensor op's memory is kept among handles' spares (up to a bound).
 * Under the lock of handles (completion_mutex). NULL-safe. */
void hvdc__op_recycle(hvdc_handles *handles, hvdc_op *op);
/* Under the lock of handles: gives this thread a spare for its next hvdc__op_create of one
 * tensor, unless it has one or handles has none. */
void hvdc__op_take_spare(hvdc_handles *handles);

#endif
