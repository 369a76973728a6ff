/*
 * execute.c - executes negotiated responses on host memory. Every rank runs the same responses
 * in the same order, so the collectives here always match up.
 *
 * All-reduce: the response's tensors are planned by fusion.c; packed pieces are copied into the
 * fusion buffer (applying the prescale on the way in), reduced by one host all-reduce
 * (allreduce.h; or MPI_Allreduce), and copied out (applying postscale and the average's
 * division on the way out). With the shared-memory all-reduce inside one node, pieces are at
 * most one step long and packed straight into this rank's slot of the segment instead, then
 * copied out of its result slot (shm.h): two copies fewer. Large tensors are reduced where
 * they lie. The host all-reduces combine every element in rank order, so which piece a tensor
 * lands in, at which offset, and which algorithm its piece's size selects never change its
 * bits. Background thread.
 */
#include "runtime/execute.h"
#include "runtime/alltoall_counts.h"
#include "runtime/working_memory.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/fault.h"
#include "base/status.h"
#include "collectives/allreduce.h"
#include "collectives/block.h"
#include "collectives/fusion.h"
#include "collectives/reduce.h"
#include "collectives/widen.h"

/* A widened tensor (widen.h) too big to pack goes through the fusion buffer in chunks this big. */
#define WIDE_CHUNK_BYTES ((size_t)4 << 20)

/* MPI can move at most INT_MAX of a datatype per call; larger buffers go in pieces. */
#define MPI_PIECE_BYTES ((size_t)1 << 30)
/* HVD_CPU_ALLREDUCE=mpi: below this, Open MPI's blocking MPI_Allreduce, faster than its
 * nonblocking one for small buffers; from it on the nonblocking one, polled between liveness
 * checks and faster for large buffers (docs/performance.md, "Where the code's constants come
 * from"). */
#define MPI_NONBLOCKING_BYTES ((size_t)32 << 20)

static MPI_Datatype mpi_native_type(hvd_dtype dtype) {
    switch (dtype) {
    case HVD_UINT8: return MPI_UINT8_T;
    case HVD_INT8: return MPI_INT8_T;
    case HVD_INT32: return MPI_INT32_T;
    case HVD_INT64: return MPI_INT64_T;
    case HVD_INT16: return MPI_INT16_T;
    case HVD_UINT16: return MPI_UINT16_T;
    case HVD_FLOAT32: return MPI_FLOAT;
    case HVD_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL; /* half types: MPI has none; bool: MPI_SUM is not or */
    }
}

static MPI_Op mpi_op(hvd_reduce_op op) {
    switch (op) {
    case HVD_MIN: return MPI_MIN;
    case HVD_MAX: return MPI_MAX;
    case HVD_PRODUCT: return MPI_PROD;
    default: return MPI_SUM;
    }
}

/* HVD_CPU_ALLREDUCE=mpi hands this reduction to MPI_Allreduce: only where MPI has the type, and
 * not floating MIN/MAX, whose NaN handling is MPI's (Open MPI's drops NaN, and a NaN on one rank
 * could then give ranks different answers); ours propagate NaN. */
static int uses_mpi(const hvdc_executor *ex, hvd_dtype dtype, hvd_reduce_op op) {
    if (ex->cpu_allreduce != HVDC_CPU_ALLREDUCE_MPI || mpi_native_type(dtype) == MPI_DATATYPE_NULL)
        return 0;
    return !(hvdc__dtype_is_float(dtype) && (op == HVD_MIN || op == HVD_MAX));
}

/* The scratch allreduce_buffer's algorithm needs for count elements. */
static size_t scratch_for(const hvdc_executor *ex, size_t count, hvd_dtype dtype, hvd_reduce_op op) {
    if (uses_mpi(ex, dtype, op)) return 0;
    if (ex->hierarchical)
        return hvdc__hierarchical_scratch_bytes(count, dtype, ex->topo->local_size, ex->topo->cross_size,
                                                ex->shm != NULL, ex->small_bytes);
    if (ex->shm) return 0;
    return hvdc__allreduce_scratch_bytes(count, dtype, ex->topo->size, ex->small_bytes);
}

/* dst = all-reduce of src over count elements, with the configured CPU algorithm. */
static hvd_status allreduce_buffer(hvdc_executor *ex, const void *src, void *dst, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op) {
    hvd_status st = HVD_OK;
    MPI_Datatype type = mpi_native_type(dtype);
    if (uses_mpi(ex, dtype, op)) {
        size_t elem = hvd_dtype_size(dtype), step = MPI_PIECE_BYTES / elem;
        for (size_t at = 0; at < count; at += step) {
            size_t n = count - at < step ? count - at : step;
            const void *in = src == dst ? MPI_IN_PLACE : (const char *)src + at * elem;
            void *out = (char *)dst + at * elem;
            if (n * elem >= MPI_NONBLOCKING_BYTES) { /* polled here, between liveness checks */
                MPI_Request request;
                CHECK_MPI(MPI_Iallreduce(in, out, (int)n, type, mpi_op(op), ex->comm, &request));
                CHECK(hvdc__wait_requests(1, &request, ex->liveness));
                continue;
            }
            /* a peer dying inside the blocking call is the watchdog's to notice (watchdog.h) */
            hvdc__watchdog_enter(ex->watchdog);
            if (ex->die_in_mpi_allreduce) raise(SIGKILL); /* tests: the peers wait inside */
            int rc = MPI_Allreduce(in, out, (int)n, type, mpi_op(op), ex->comm);
            if (hvdc__watchdog_leave(ex->watchdog))
                return hvdc__fail(HVD_ERR_RANK_FAILED, "%s", hvdc__watchdog_message(ex->watchdog));
            CHECK_MPI(rc);
        }
        return HVD_OK;
    }
    if (ex->hierarchical)
        return hvdc__hierarchical_allreduce(ex->local_comm, ex->cross_comm, ex->shm, src, dst,
                                            count, dtype, op, ex->small_bytes, &ex->scratch,
                                            ex->liveness);
    if (ex->shm) return hvdc__shm_allreduce(ex->shm, src, dst, count, dtype, op, ex->liveness);
    return hvdc__allreduce(ex->comm, src, dst, count, dtype, op, ex->small_bytes, &ex->scratch,
                           ex->liveness);
fail:
    return st;
}

/* Whether this response's packed pieces go through the shared-memory segment (shm.h's staged
 * all-reduce) rather than the fusion buffer: the same on every rank, like the algorithm. */
static int stages_in_shm(const hvdc_executor *ex, hvd_dtype acc, hvd_reduce_op op) {
    return ex->shm && !ex->hierarchical && !uses_mpi(ex, acc, op);
}

/* Applies what follows the reduction: the average's division and the postscale. */
static void finish_reduction(void *buf, size_t count, hvd_dtype dtype, hvd_reduce_op op,
                             double postscale, int size) {
    if (op == HVD_AVERAGE && postscale == 1.0 && !hvdc__dtype_is_float(dtype))
        hvdc__divide_integers(buf, count, dtype, size); /* exact, where 1/size would round */
    else /* floats, and Horovod's integer scaling: one float64 factor, truncated */
        hvdc__scale(buf, count, dtype, op == HVD_AVERAGE ? postscale / size : postscale);
}

static hvd_status allreduce_in_place(hvdc_executor *ex, const hvdc_tensor *t,
                                     const hvdc_wire_request *d) {
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    const void *src = t->send;
    if (d->prescale != 1.0) {
        /* scale a copy in recv: the caller's send buffer is never written */
        if (t->send != t->recv) memcpy(t->recv, t->send, t->count * hvd_dtype_size(dtype));
        hvdc__scale(t->recv, t->count, dtype, d->prescale);
        src = t->recv;
    }
    hvd_status st = allreduce_buffer(ex, src, t->recv, t->count, dtype, (hvd_reduce_op)d->op);
    if (st == HVD_OK) finish_reduction(t->recv, t->count, dtype, (hvd_reduce_op)d->op, d->postscale, ex->topo->size);
    return st;
}

/* A tensor in its accumulation type (widen.h), through the fusion buffer in chunks: HVD_AVERAGE
 * of narrow integers and half types, which cannot be reduced where they lie. */
static hvd_status allreduce_widened(hvdc_executor *ex, const hvdc_tensor *t,
                                    const hvdc_wire_request *d, hvd_dtype acc) {
    hvd_status st = HVD_OK;
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    size_t elem = hvd_dtype_size(dtype), acc_elem = hvd_dtype_size(acc);
    size_t chunk = WIDE_CHUNK_BYTES / acc_elem;
    for (size_t at = 0; at < t->count; at += chunk) {
        size_t n = t->count - at < chunk ? t->count - at : chunk;
        hvdc__widen(ex->fusion.data, acc, (const char *)t->send + at * elem, dtype, n, d->prescale,
                    ex->topo->size);
        CHECK(allreduce_buffer(ex, ex->fusion.data, ex->fusion.data, n, acc, (hvd_reduce_op)d->op));
        hvdc__narrow_average((char *)t->recv + at * elem, dtype, ex->fusion.data, acc, n,
                             ex->topo->size, d->postscale);
    }
fail:
    return st;
}

/* Working memory of an all-reduce planned as plan: the largest packed piece in the fusion
 * buffer (a widened in-place tensor goes through it in chunks) and the algorithm's scratch. */
static void allreduce_memory(const hvdc_executor *ex, const hvdc_pack_plan *plan,
                             const hvdc_tensor **tensors, hvd_dtype acc, hvd_reduce_op op,
                             int widened, int staged, size_t *fusion_bytes, size_t *scratch_bytes) {
    size_t acc_elem = hvd_dtype_size(acc);
    *fusion_bytes = *scratch_bytes = 0;
    for (size_t p = 0; p < plan->n_pieces; p++) {
        const hvdc_pack_piece *piece = &plan->pieces[p];
        size_t count = piece->in_place ? tensors[piece->first]->count : piece->count;
        if (piece->in_place && widened && count > WIDE_CHUNK_BYTES / acc_elem)
            count = WIDE_CHUNK_BYTES / acc_elem;
        int in_buffer = piece->in_place ? widened : !staged; /* widened chunks, unstaged pieces */
        size_t fusion = in_buffer ? count * acc_elem : 0;
        size_t scratch = scratch_for(ex, count, acc, op);
        if (fusion > *fusion_bytes) *fusion_bytes = fusion;
        if (scratch > *scratch_bytes) *scratch_bytes = scratch;
    }
}

/* The response's tensors in ex->tensor_list (kept from one response to the next), followed by
 * their counts (both 8-byte items), and their packing plan in ex->plan. */
static hvd_status plan_allreduce(hvdc_executor *ex, hvdc_op **ops, size_t n_ops, hvd_dtype acc,
                                 int staged, const hvdc_tensor ***tensors_out) {
    size_t n = 0;
    for (size_t i = 0; i < n_ops; i++) n += ops[i]->n_tensors;
    if (hvdc__buffer_reserve(&ex->tensor_list, (n ? n : 1) * (sizeof(hvdc_tensor *) + sizeof(size_t))) != HVD_OK)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning an all-reduce of %zu tensors", n);
    const hvdc_tensor **tensors = ex->tensor_list.data;
    size_t *counts = (size_t *)(tensors + (n ? n : 1));
    n = 0;
    for (size_t i = 0; i < n_ops; i++)
        for (size_t k = 0; k < ops[i]->n_tensors; k++) {
            tensors[n] = &ops[i]->tensors[k];
            counts[n++] = ops[i]->tensors[k].count;
        }
    size_t piece_bytes = ex->pack_piece_bytes;
    if (staged && piece_bytes > hvdc__shm_step(ex->shm)) piece_bytes = hvdc__shm_step(ex->shm);
    if (hvdc__pack_plan_make(counts, n, hvd_dtype_size(acc), piece_bytes, ex->large_tensor_bytes,
                             &ex->plan))
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning an all-reduce of %zu tensors", n);
    *tensors_out = tensors;
    return HVD_OK;
}

/* Copies piece's tensors into buf at their planned offsets, in the accumulation type and times
 * the prescale, with zeros in the padding between them. */
static void pack_piece(char *buf, const hvdc_pack_plan *plan, const hvdc_pack_piece *piece,
                       const hvdc_tensor **tensors, const hvdc_wire_request *d, hvd_dtype acc,
                       int size) {
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    size_t acc_elem = hvd_dtype_size(acc), end = 0;
    for (size_t i = piece->first; i < piece->first + piece->n; i++) {
        size_t at = plan->offsets[i];
        if (at > end) memset(buf + end * acc_elem, 0, (at - end) * acc_elem); /* padding */
        if (acc != dtype) {
            hvdc__widen(buf + at * acc_elem, acc, tensors[i]->send, dtype, tensors[i]->count,
                        d->prescale, size);
        } else {
            memcpy(buf + at * acc_elem, tensors[i]->send, tensors[i]->count * acc_elem);
            hvdc__scale(buf + at * acc_elem, tensors[i]->count, dtype, d->prescale);
        }
        end = at + tensors[i]->count;
    }
}

/* Copies each tensor of the reduced piece to its recv, finishing the reduction there (the
 * reduced piece may be shared: staged in the segment). */
static void unpack_piece(const char *reduced, const hvdc_pack_plan *plan,
                         const hvdc_pack_piece *piece, const hvdc_tensor **tensors,
                         const hvdc_wire_request *d, hvd_dtype acc, int size) {
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    size_t acc_elem = hvd_dtype_size(acc);
    for (size_t i = piece->first; i < piece->first + piece->n; i++) {
        const char *from = reduced + plan->offsets[i] * acc_elem;
        if (acc != dtype) {
            hvdc__narrow_average(tensors[i]->recv, dtype, from, acc, tensors[i]->count, size,
                                 d->postscale);
        } else {
            memcpy(tensors[i]->recv, from, tensors[i]->count * acc_elem);
            finish_reduction(tensors[i]->recv, tensors[i]->count, dtype, (hvd_reduce_op)d->op,
                             d->postscale, size);
        }
    }
}

/* The one-shot's unpacking (shm.h): each tensor of the piece folded from every rank's staged
 * piece straight into its recv, then finished there. */
static void fold_piece_out(hvdc_shm *shm, const hvdc_pack_plan *plan, const hvdc_pack_piece *piece,
                           const hvdc_tensor **tensors, const hvdc_wire_request *d, int size) {
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    size_t elem = hvd_dtype_size(dtype);
    for (size_t i = piece->first; i < piece->first + piece->n; i++) {
        hvdc__shm_oneshot_fold(shm, plan->offsets[i] * elem, tensors[i]->count, dtype,
                               (hvd_reduce_op)d->op, tensors[i]->recv);
        finish_reduction(tensors[i]->recv, tensors[i]->count, dtype, (hvd_reduce_op)d->op,
                         d->postscale, size);
    }
}

/* A staged piece the one-shot all-reduce takes: in the element type (the fold goes straight
 * to the tensors), and small enough. The same answer on every rank. */
static int takes_oneshot(const hvdc_executor *ex, const hvdc_pack_piece *piece, hvd_dtype acc,
                         const hvdc_wire_request *d) {
    return acc == (hvd_dtype)d->dtype &&
           piece->count * hvd_dtype_size(acc) <= hvdc__shm_oneshot_max(ex->shm);
}

/* One packed piece: packed into the fusion buffer (or, staged, into the segment: for the
 * one-shot or into this rank's slot), reduced, unpacked; the timeline gets each tensor's three
 * phases. */
static hvd_status reduce_piece(hvdc_executor *ex, const hvdc_pack_piece *piece,
                               const hvdc_tensor **tensors, const hvdc_wire_request *d,
                               hvd_dtype acc, int staged) {
    hvd_status st = HVD_OK;
    hvd_reduce_op op = (hvd_reduce_op)d->op;
    int oneshot = staged && takes_oneshot(ex, piece, acc, d);
    int64_t t0 = hvdc__timeline_now_us(ex->timeline);
    char *buf = oneshot ? hvdc__shm_oneshot_staging(ex->shm, piece->count * hvd_dtype_size(acc))
                : staged ? hvdc__shm_staging(ex->shm) : ex->fusion.data;
    pack_piece(buf, &ex->plan, piece, tensors, d, acc, ex->topo->size);
    int64_t t1 = hvdc__timeline_now_us(ex->timeline);
    const void *reduced = buf;
    if (oneshot)
        CHECK(hvdc__shm_oneshot_exchange(ex->shm, ex->liveness));
    else if (staged)
        CHECK(hvdc__shm_allreduce_staged(ex->shm, piece->count, acc, op, ex->liveness, &reduced));
    else
        CHECK(allreduce_buffer(ex, buf, buf, piece->count, acc, op));
    int64_t t2 = hvdc__timeline_now_us(ex->timeline);
    if (oneshot) fold_piece_out(ex->shm, &ex->plan, piece, tensors, d, ex->topo->size);
    else unpack_piece(reduced, &ex->plan, piece, tensors, d, acc, ex->topo->size);
    if (hvdc__timeline_recording(ex->timeline)) { /* else three calls a tensor for nothing */
        int64_t t3 = hvdc__timeline_now_us(ex->timeline);
        for (size_t i = piece->first; i < piece->first + piece->n; i++) {
            hvdc__timeline_span(ex->timeline, tensors[i]->name, "PACK", t0, t1, ex->group);
            hvdc__timeline_span(ex->timeline, tensors[i]->name, "ALLREDUCE", t1, t2, ex->group);
            hvdc__timeline_span(ex->timeline, tensors[i]->name, "UNPACK", t2, t3, ex->group);
        }
    }
fail:
    return st;
}

/* A tensor reduced where it lies (or, widened, in chunks through the fusion buffer). */
static hvd_status reduce_alone(hvdc_executor *ex, const hvdc_tensor *t, const hvdc_wire_request *d,
                               hvd_dtype acc) {
    int64_t t0 = hvdc__timeline_now_us(ex->timeline);
    hvd_status st = acc != d->dtype ? allreduce_widened(ex, t, d, acc) : allreduce_in_place(ex, t, d);
    if (st == HVD_OK)
        hvdc__timeline_span(ex->timeline, t->name, "ALLREDUCE", t0,
                            hvdc__timeline_now_us(ex->timeline), ex->group);
    return st;
}

/* HVD_AVERAGE divides by the number of ranks in the set (ex->topo->size), joined ones included:
 * they contribute neutral values (zeros to the sum) and still count, as in Horovod, where a joined
 * rank's zeros are averaged in; so the average of x at np 2 with one rank joined is x/2. Pieces
 * are laid out in the accumulation type (the element type, or a wider one for HVD_AVERAGE of
 * narrow types). */
static hvdc_outcome execute_allreduce(hvdc_executor *ex, hvdc_op **ops, size_t n_ops) {
    const hvdc_wire_request *d = &ops[0]->desc;
    hvd_reduce_op op = (hvd_reduce_op)d->op;
    hvd_dtype acc = hvdc__accumulation_dtype((hvd_dtype)d->dtype, op);
    int staged = stages_in_shm(ex, acc, op);
    const hvdc_tensor **tensors = NULL;
    hvd_status st = plan_allreduce(ex, ops, n_ops, acc, staged, &tensors);
    if (st != HVD_OK) return hvdc__ran(st);
    size_t fusion_bytes, scratch_bytes;
    allreduce_memory(ex, &ex->plan, tensors, acc, op, acc != d->dtype, staged, &fusion_bytes,
                     &scratch_bytes);
    hvdc_outcome reserved = hvdc__reserve_agreed(ex, "allreduce", tensors[0]->name, fusion_bytes,
                                                 scratch_bytes);
    if (reserved.status != HVD_OK) return reserved;
    for (size_t p = 0; p < ex->plan.n_pieces && st == HVD_OK; p++) {
        const hvdc_pack_piece *piece = &ex->plan.pieces[p];
        st = piece->in_place ? reduce_alone(ex, tensors[piece->first], d, acc)
                             : reduce_piece(ex, piece, tensors, d, acc, staged);
    }
    return hvdc__ran(st);
}

static hvd_status execute_broadcast(hvdc_executor *ex, hvdc_op *op) {
    hvd_status st = HVD_OK;
    const hvdc_tensor *t = &op->tensors[0];
    size_t nbytes = t->count * hvd_dtype_size((hvd_dtype)op->desc.dtype);
    for (size_t at = 0; at < nbytes; at += MPI_PIECE_BYTES) {
        size_t n = nbytes - at < MPI_PIECE_BYTES ? nbytes - at : MPI_PIECE_BYTES;
        MPI_Request request;
        CHECK_MPI(MPI_Ibcast((char *)t->recv + at, (int)n, MPI_BYTE, op->desc.root, ex->comm, &request));
        CHECK(hvdc__wait_requests(1, &request, ex->liveness));
    }
fail:
    return st;
}

/* The _alloc variants: op's output, allocated now that negotiation or the count exchange has
 * told its size (count elements), 64-byte aligned like torch's own tensors; NULL for 0. */
static hvd_status allocate_output(hvdc_op *op, size_t count) {
    size_t nbytes = count * hvd_dtype_size((hvd_dtype)op->desc.dtype);
    void *buf = NULL;
    if (nbytes > 0 && (hvdc__fault("alloc_output") || posix_memalign(&buf, 64, nbytes) != 0))
        return hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory for the %zu-byte result",
                          hvdc__kind_name(op->desc.kind), op->desc.name, nbytes);
    op->tensors[0].recv = buf;
    return HVD_OK;
}

/* Every allgather and alltoall passes here right before its data moves: the _alloc variants
 * allocate their output (count elements), and every rank learns whether every rank could, so a
 * result too big for one rank's memory fails on every rank alone instead of leaving the others
 * in the collective (reserve_agreed's rule). The agreement runs whether this rank allocates or
 * not, so ranks that mix the call with and without _alloc still run the same MPI calls. */
static hvdc_outcome allocate_agreed(hvdc_executor *ex, hvdc_op *op, size_t count) {
    hvd_status st = HVD_OK;
    char why[HVDC_ERROR_MAX] = "";
    hvd_status mine = op->alloc_out ? allocate_output(op, count) : HVD_OK;
    if (mine != HVD_OK) snprintf(why, sizeof why, "%s", hvd_last_error());
    int first_failed = mine == HVD_OK ? INT_MAX : ex->topo->rank;
    MPI_Request request;
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, ex->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
    if (first_failed == INT_MAX) return hvdc__ran(HVD_OK);
    return hvdc__refused(hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': rank %d could not allocate its "
                                    "result%s%s; no rank ran it, later operations are not "
                                    "affected", hvdc__kind_name(op->desc.kind), op->desc.name,
                                    first_failed, why[0] ? ": " : "", why));
fail:
    return hvdc__ran(st);
}

/* Hands an allocated output to the caller on success, frees it on failure. */
static void settle_output(hvdc_op *op, hvd_status st) {
    if (!op->alloc_out) return;
    if (st == HVD_OK) {
        *op->alloc_out = op->tensors[0].recv;
    } else {
        free(op->tensors[0].recv);
        op->tensors[0].recv = NULL;
    }
}

/* An MPI datatype of one element of dtype, so counts stay in elements. */
static hvd_status element_type(hvd_dtype dtype, MPI_Datatype *type) {
    hvd_status st = HVD_OK;
    CHECK_MPI(MPI_Type_contiguous((int)hvd_dtype_size(dtype), MPI_BYTE, type));
    CHECK_MPI(MPI_Type_commit(type));
fail:
    return st;
}

/* Functions below that agree before their data moves keep the outcome in out: an agreement's
 * refusal jumps to done: as it is, any other error to fail:, where it becomes hvdc__ran's. */

static hvdc_outcome execute_allgather(hvdc_executor *ex, hvdc_op *op, const hvdc_wire_response *r) {
    hvd_status st = HVD_OK;
    hvdc_outcome out;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int *counts = malloc((size_t)ex->topo->size * sizeof *counts);
    int *displs = malloc((size_t)ex->topo->size * sizeof *displs);
    if (!counts || !displs || r->n_rank_counts != (uint32_t)ex->topo->size) {
        st = hvdc__fail(counts && displs ? HVD_ERR_INTERNAL : HVD_ERR_NO_MEMORY,
                        "allgather '%s': could not set up the per-rank counts", op->desc.name);
        goto fail;
    }
    size_t total = 0; /* the coordinator checked total < 2^31 */
    for (int i = 0; i < ex->topo->size; i++) {
        counts[i] = (int)r->rank_counts[i];
        displs[i] = (int)total;
        total += r->rank_counts[i];
    }
    CHECK(element_type((hvd_dtype)op->desc.dtype, &type));
    out = allocate_agreed(ex, op, total);
    if (out.status != HVD_OK) goto done;
    const hvdc_tensor *t = &op->tensors[0];
    MPI_Request request;
    CHECK_MPI(MPI_Iallgatherv(t->send, (int)t->count, type, t->recv, counts, displs, type, ex->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
    if (op->recv_count_out) *op->recv_count_out = total;
    if (op->rank_counts_out)
        for (int i = 0; i < ex->topo->size; i++) op->rank_counts_out[i] = r->rank_counts[i];
fail:
    out = hvdc__ran(st);
done:
    settle_output(op, out.status);
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    free(counts);
    free(displs);
    return out;
}

/* The reduction of execute_reducescatter, once its working memory is agreed. */
static hvd_status reducescatter_data(hvdc_executor *ex, hvdc_op *op, hvd_dtype acc) {
    hvd_status st = HVD_OK;
    const hvdc_tensor *t = &op->tensors[0];
    hvd_dtype dtype = (hvd_dtype)op->desc.dtype;
    hvd_reduce_op rop = (hvd_reduce_op)op->desc.op;
    size_t elem = hvd_dtype_size(dtype), acc_elem = hvd_dtype_size(acc), start, len;
    const void *src = t->send;
    if (acc != dtype && t->count > 0) {
        hvdc__widen(ex->fusion.data, acc, t->send, dtype, t->count, op->desc.prescale, ex->topo->size);
        src = ex->fusion.data;
    } else if (op->desc.prescale != 1.0 && t->count > 0) {
        memcpy(ex->fusion.data, t->send, t->count * elem);
        hvdc__scale(ex->fusion.data, t->count, dtype, op->desc.prescale);
        src = ex->fusion.data;
    }
    CHECK(hvdc__direct_reduce_scatter(ex->comm, src, ex->fusion.data, t->count, acc, rop,
                                      &ex->scratch, ex->liveness));
    hvdc__block_range(t->count, ex->topo->size, ex->topo->rank, &start, &len);
    char *block = (char *)ex->fusion.data + start * acc_elem;
    if (acc != dtype) {
        hvdc__narrow_average(t->recv, dtype, block, acc, len, ex->topo->size, op->desc.postscale);
    } else {
        finish_reduction(block, len, dtype, rop, op->desc.postscale, ex->topo->size);
        if (len > 0) memcpy(t->recv, block, len * elem); /* an empty block may have NULL buffers */
    }
    if (op->recv_count_out) *op->recv_count_out = len;
fail:
    return st;
}

/* The reduction runs in the accumulation type (widen.h) in the fusion buffer: widened (or
 * prescaled) first when needed, so the caller's send buffer is never written. */
static hvdc_outcome execute_reducescatter(hvdc_executor *ex, hvdc_op *op) {
    hvd_dtype acc = hvdc__accumulation_dtype((hvd_dtype)op->desc.dtype, (hvd_reduce_op)op->desc.op);
    size_t count = op->tensors[0].count;
    hvdc_outcome reserved = hvdc__reserve_agreed(ex, "reducescatter", op->desc.name,
                                                 count * hvd_dtype_size(acc),
                                                 hvdc__direct_scratch_bytes(count, acc, ex->topo->size));
    if (reserved.status != HVD_OK) return reserved;
    return hvdc__ran(reducescatter_data(ex, op, acc));
}

static hvdc_outcome execute_alltoall(hvdc_executor *ex, hvdc_op *op, const hvdc_wire_response *r) {
    hvd_status st = HVD_OK;
    hvdc_outcome out;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    size_t n = (size_t)ex->topo->size;
    uint64_t *recv64 = malloc(n * sizeof *recv64);
    int *ints = malloc(4 * n * sizeof *ints); /* send counts, send displs, recv counts, recv displs */
    if (!recv64 || !ints) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "alltoall '%s': out of memory", op->desc.name);
        goto fail;
    }
    CHECK(hvdc__alltoall_recv_counts(ex, op, r, recv64));
    int *scounts = ints, *sdispls = ints + n, *rcounts = ints + 2 * n, *rdispls = ints + 3 * n;
    size_t sent = 0, received = 0; /* the coordinator checked both stay below 2^31 */
    for (size_t i = 0; i < n; i++) {
        scounts[i] = (int)op->desc.counts[i];
        sdispls[i] = (int)sent;
        sent += op->desc.counts[i];
        rcounts[i] = (int)recv64[i];
        rdispls[i] = (int)received;
        received += recv64[i];
    }
    CHECK(element_type((hvd_dtype)op->desc.dtype, &type));
    out = allocate_agreed(ex, op, received);
    if (out.status != HVD_OK) goto done;
    const hvdc_tensor *t = &op->tensors[0];
    MPI_Request request;
    CHECK_MPI(MPI_Ialltoallv(t->send, scounts, sdispls, type, t->recv, rcounts, rdispls, type, ex->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
    if (op->recv_count_out) *op->recv_count_out = received;
    if (op->rank_counts_out)
        for (size_t i = 0; i < n; i++) op->rank_counts_out[i] = recv64[i];
fail:
    out = hvdc__ran(st);
done:
    settle_output(op, out.status);
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    free(recv64);
    free(ints);
    return out;
}

hvdc_outcome hvdc__execute(hvdc_executor *ex, const hvdc_wire_response *response, hvdc_op **ops,
                           size_t n_ops, hvdc_gpu_pending **pending) {
    *pending = NULL;
    /* the op from this rank's own request: a response carries it only while ranks have
     * joined (wire.h); negotiation checked that every rank asked for the same */
    if (response->kind == HVDC_KIND_ALLREDUCE && n_ops > 0 && ops[0]->desc.op == HVD_ADASUM)
        return hvdc__execute_adasum(ex, response, ops, n_ops, pending);
    if (n_ops > 0 && ops[0]->desc.device >= 0) /* barrier and join are always host ops */
        return hvdc__execute_gpu(ex, response, ops, n_ops, pending);
    switch ((hvdc_kind)response->kind) {
    case HVDC_KIND_ALLREDUCE: return execute_allreduce(ex, ops, n_ops);
    case HVDC_KIND_BROADCAST: return hvdc__ran(execute_broadcast(ex, ops[0]));
    case HVDC_KIND_ALLGATHER: return execute_allgather(ex, ops[0], response);
    case HVDC_KIND_REDUCESCATTER: return execute_reducescatter(ex, ops[0]);
    case HVDC_KIND_ALLTOALL: return execute_alltoall(ex, ops[0], response);
    case HVDC_KIND_BARRIER: return hvdc__ran(HVD_OK); /* negotiation synchronized every rank */
    case HVDC_KIND_JOIN: /* every rank has joined: report which joined last */
        if (response->n_rank_counts == 1 && ops[0]->recv_count_out)
            *ops[0]->recv_count_out = (size_t)response->rank_counts[0];
        return hvdc__ran(HVD_OK);
    case HVDC_KIND_COUNT: break;
    }
    return hvdc__ran(hvdc__fail(HVD_ERR_INTERNAL, "response of unknown kind %d", response->kind));
}
