/*
 * execute.c - executes negotiated responses on host memory. Every rank runs the same responses
 * in the same order, so the collectives here always match up.
 *
 * All-reduce: the response's tensors are planned by fusion.c; packed pieces are copied into the
 * fusion buffer (applying the prescale on the way in), reduced by one ring (or MPI_Allreduce),
 * and copied out (applying postscale and the average's division on the way out). Large tensors
 * are reduced where they lie. Background thread.
 */
#include "runtime/execute.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"
#include "collectives/fusion.h"
#include "collectives/reduce.h"
#include "collectives/ring.h"

/* MPI can move at most INT_MAX of a datatype per call; larger buffers go in pieces. */
#define MPI_PIECE_BYTES ((size_t)1 << 30)

static MPI_Datatype mpi_native_type(hvd_dtype dtype) {
    switch (dtype) {
    case HVD_UINT8: return MPI_UINT8_T;
    case HVD_INT8: return MPI_INT8_T;
    case HVD_INT32: return MPI_INT32_T;
    case HVD_INT64: return MPI_INT64_T;
    case HVD_FLOAT32: return MPI_FLOAT;
    case HVD_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL; /* half types: MPI has none */
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

/* dst = all-reduce of src over count elements, with the configured CPU algorithm. */
static hvd_status allreduce_buffer(hvdc_executor *ex, const void *src, void *dst, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op) {
    hvd_status st = HVD_OK;
    MPI_Datatype type = mpi_native_type(dtype);
    if (ex->cpu_allreduce == HVDC_CPU_ALLREDUCE_MPI && type != MPI_DATATYPE_NULL) {
        size_t elem = hvd_dtype_size(dtype), step = MPI_PIECE_BYTES / elem;
        for (size_t at = 0; at < count; at += step) {
            size_t n = count - at < step ? count - at : step;
            const void *in = src == dst ? MPI_IN_PLACE : (const char *)src + at * elem;
            MPI_Request request;
            CHECK_MPI(MPI_Iallreduce(in, (char *)dst + at * elem, (int)n, type, mpi_op(op), ex->comm, &request));
            CHECK(hvdc__wait_requests(1, &request, ex->liveness));
        }
        return HVD_OK;
    }
    if (count * hvd_dtype_size(dtype) <= ex->small_bytes)
        return hvdc__doubling_allreduce(ex->comm, src, dst, count, dtype, op, &ex->scratch, ex->liveness);
    if (ex->hierarchical)
        return hvdc__hierarchical_allreduce(ex->local_comm, ex->cross_comm, src, dst, count, dtype,
                                            op, &ex->scratch, ex->liveness);
    return hvdc__ring_allreduce(ex->comm, src, dst, count, dtype, op, &ex->scratch, ex->liveness);
fail:
    return st;
}

/* Applies what follows the reduction: the average's division and the postscale. */
static void finish_reduction(void *buf, size_t count, hvd_dtype dtype, hvd_reduce_op op,
                             double postscale, int size) {
    if (hvdc__dtype_is_float(dtype)) {
        hvdc__scale(buf, count, dtype, op == HVD_AVERAGE ? postscale / size : postscale);
    } else if (op == HVD_AVERAGE) {
        hvdc__divide_integers(buf, count, dtype, size);
    }
}

static hvd_status allreduce_in_place(hvdc_executor *ex, const hvdc_tensor *t,
                                     const hvdc_wire_request *d, int contributors) {
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    const void *src = t->send;
    if (d->prescale != 1.0) {
        /* scale a copy in recv: the caller's send buffer is never written */
        if (t->send != t->recv) memcpy(t->recv, t->send, t->count * hvd_dtype_size(dtype));
        hvdc__scale(t->recv, t->count, dtype, d->prescale);
        src = t->recv;
    }
    hvd_status st = allreduce_buffer(ex, src, t->recv, t->count, dtype, (hvd_reduce_op)d->op);
    if (st == HVD_OK) finish_reduction(t->recv, t->count, dtype, (hvd_reduce_op)d->op, d->postscale, contributors);
    return st;
}

/* contributors: ranks whose values are in the sum (the average's divisor); ranks that have
 * joined contribute neutral values and are not counted. */
static hvd_status execute_allreduce(hvdc_executor *ex, hvdc_op **ops, size_t n_ops, int contributors) {
    hvd_status st = HVD_OK;
    const hvdc_wire_request *d = &ops[0]->desc;
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    size_t elem = hvd_dtype_size(dtype), n = 0;
    for (size_t i = 0; i < n_ops; i++) n += ops[i]->n_tensors;
    hvdc_pack_plan plan = {0};
    const hvdc_tensor **tensors = malloc((n ? n : 1) * sizeof *tensors);
    size_t *counts = malloc((n ? n : 1) * sizeof *counts);
    if (!tensors || !counts) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning an all-reduce of %zu tensors", n);
        goto fail;
    }
    n = 0;
    for (size_t i = 0; i < n_ops; i++)
        for (size_t k = 0; k < ops[i]->n_tensors; k++) {
            tensors[n] = &ops[i]->tensors[k];
            counts[n++] = ops[i]->tensors[k].count;
        }
    if (hvdc__pack_plan_make(counts, n, elem, ex->pack_piece_bytes, ex->large_tensor_bytes, &plan)) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning an all-reduce of %zu tensors", n);
        goto fail;
    }
    for (size_t p = 0; p < plan.n_pieces; p++) {
        const hvdc_pack_piece *piece = &plan.pieces[p];
        int64_t t0 = hvdc__timeline_now_us(ex->timeline);
        if (piece->in_place) {
            CHECK(allreduce_in_place(ex, tensors[piece->first], d, contributors));
            hvdc__timeline_span(ex->timeline, tensors[piece->first]->name, "ALLREDUCE", t0,
                                hvdc__timeline_now_us(ex->timeline), ex->group);
            continue;
        }
        CHECK(hvdc__buffer_reserve(&ex->fusion, piece->count * elem));
        char *buf = ex->fusion.data;
        size_t end = 0;
        for (size_t i = piece->first; i < piece->first + piece->n; i++) {
            size_t at = plan.offsets[i];
            if (at > end) memset(buf + end * elem, 0, (at - end) * elem); /* padding */
            memcpy(buf + at * elem, tensors[i]->send, tensors[i]->count * elem);
            hvdc__scale(buf + at * elem, tensors[i]->count, dtype, d->prescale);
            end = at + tensors[i]->count;
        }
        int64_t t1 = hvdc__timeline_now_us(ex->timeline);
        CHECK(allreduce_buffer(ex, buf, buf, piece->count, dtype, (hvd_reduce_op)d->op));
        int64_t t2 = hvdc__timeline_now_us(ex->timeline);
        for (size_t i = piece->first; i < piece->first + piece->n; i++) {
            char *from = buf + plan.offsets[i] * elem;
            finish_reduction(from, tensors[i]->count, dtype, (hvd_reduce_op)d->op, d->postscale, contributors);
            memcpy(tensors[i]->recv, from, tensors[i]->count * elem);
        }
        if (ex->timeline) {
            int64_t t3 = hvdc__timeline_now_us(ex->timeline);
            for (size_t i = piece->first; i < piece->first + piece->n; i++) {
                hvdc__timeline_span(ex->timeline, tensors[i]->name, "PACK", t0, t1, ex->group);
                hvdc__timeline_span(ex->timeline, tensors[i]->name, "ALLREDUCE", t1, t2, ex->group);
                hvdc__timeline_span(ex->timeline, tensors[i]->name, "UNPACK", t2, t3, ex->group);
            }
        }
    }
fail:
    hvdc__pack_plan_free(&plan);
    free(tensors);
    free(counts);
    return st;
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

/* An MPI datatype of one element of dtype, so counts stay in elements. */
static hvd_status element_type(hvd_dtype dtype, MPI_Datatype *type) {
    hvd_status st = HVD_OK;
    CHECK_MPI(MPI_Type_contiguous((int)hvd_dtype_size(dtype), MPI_BYTE, type));
    CHECK_MPI(MPI_Type_commit(type));
fail:
    return st;
}

static hvd_status execute_allgather(hvdc_executor *ex, hvdc_op *op, const hvdc_wire_response *r) {
    hvd_status st = HVD_OK;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int *counts = malloc((size_t)ex->size * sizeof *counts);
    int *displs = malloc((size_t)ex->size * sizeof *displs);
    if (!counts || !displs || r->n_rank_counts != (uint32_t)ex->size) {
        st = hvdc__fail(counts && displs ? HVD_ERR_INTERNAL : HVD_ERR_NO_MEMORY,
                        "allgather '%s': could not set up the per-rank counts", op->desc.name);
        goto fail;
    }
    size_t total = 0; /* the coordinator checked total < 2^31 */
    for (int i = 0; i < ex->size; i++) {
        counts[i] = (int)r->rank_counts[i];
        displs[i] = (int)total;
        total += r->rank_counts[i];
    }
    CHECK(element_type((hvd_dtype)op->desc.dtype, &type));
    const hvdc_tensor *t = &op->tensors[0];
    MPI_Request request;
    CHECK_MPI(MPI_Iallgatherv(t->send, (int)t->count, type, t->recv, counts, displs, type, ex->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
    if (op->recv_count_out) *op->recv_count_out = total;
    if (op->rank_counts_out)
        for (int i = 0; i < ex->size; i++) op->rank_counts_out[i] = r->rank_counts[i];
fail:
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    free(counts);
    free(displs);
    return st;
}

static hvd_status execute_reducescatter(hvdc_executor *ex, hvdc_op *op) {
    hvd_status st = HVD_OK;
    const hvdc_tensor *t = &op->tensors[0];
    hvd_dtype dtype = (hvd_dtype)op->desc.dtype;
    size_t elem = hvd_dtype_size(dtype), start, len;
    CHECK(hvdc__buffer_reserve(&ex->fusion, t->count * elem));
    const void *src = t->send;
    if (op->desc.prescale != 1.0 && t->count > 0) {
        memcpy(ex->fusion.data, t->send, t->count * elem);
        hvdc__scale(ex->fusion.data, t->count, dtype, op->desc.prescale);
        src = ex->fusion.data;
    }
    CHECK(hvdc__ring_reduce_scatter(ex->comm, src, ex->fusion.data, t->count, dtype,
                                    (hvd_reduce_op)op->desc.op, &ex->scratch, ex->liveness));
    hvdc__block_range(t->count, ex->size, ex->rank, &start, &len);
    char *block = (char *)ex->fusion.data + start * elem;
    finish_reduction(block, len, dtype, (hvd_reduce_op)op->desc.op, op->desc.postscale, ex->size);
    if (len > 0) memcpy(t->recv, block, len * elem); /* an empty block may have NULL buffers */
    if (op->recv_count_out) *op->recv_count_out = len;
fail:
    return st;
}

static hvd_status execute_alltoall(hvdc_executor *ex, hvdc_op *op) {
    hvd_status st = HVD_OK;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    size_t n = (size_t)ex->size;
    uint64_t *recv64 = malloc(n * sizeof *recv64);
    int *ints = malloc(4 * n * sizeof *ints); /* send counts, send displs, recv counts, recv displs */
    if (!recv64 || !ints) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "alltoall '%s': out of memory", op->desc.name);
        goto fail;
    }
    MPI_Request request;
    CHECK_MPI(MPI_Ialltoall(op->desc.counts, 1, MPI_UINT64_T, recv64, 1, MPI_UINT64_T, ex->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
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
    const hvdc_tensor *t = &op->tensors[0];
    CHECK_MPI(MPI_Ialltoallv(t->send, scounts, sdispls, type, t->recv, rcounts, rdispls, type, ex->comm, &request));
    CHECK(hvdc__wait_requests(1, &request, ex->liveness));
    if (op->recv_count_out) *op->recv_count_out = received;
    if (op->rank_counts_out)
        for (size_t i = 0; i < n; i++) op->rank_counts_out[i] = recv64[i];
fail:
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
    free(recv64);
    free(ints);
    return st;
}

hvd_status hvdc__execute(hvdc_executor *ex, const hvdc_wire_response *response, hvdc_op **ops,
                         size_t n_ops, hvdc_gpu_pending **pending) {
    *pending = NULL;
    if (n_ops > 0 && ops[0]->desc.device >= 0) /* barrier and join are always host ops */
        return hvdc__execute_gpu(ex, response, ops, n_ops, pending);
    switch ((hvdc_kind)response->kind) {
    case HVDC_KIND_ALLREDUCE:
        return execute_allreduce(ex, ops, n_ops, ex->size - (int)response->n_joined);
    case HVDC_KIND_BROADCAST: return execute_broadcast(ex, ops[0]);
    case HVDC_KIND_ALLGATHER: return execute_allgather(ex, ops[0], response);
    case HVDC_KIND_REDUCESCATTER: return execute_reducescatter(ex, ops[0]);
    case HVDC_KIND_ALLTOALL: return execute_alltoall(ex, ops[0]);
    case HVDC_KIND_BARRIER: return HVD_OK; /* negotiation itself synchronized every rank */
    case HVDC_KIND_JOIN: /* every rank has joined: report which joined last */
        if (response->n_rank_counts == 1 && ops[0]->recv_count_out)
            *ops[0]->recv_count_out = (size_t)response->rank_counts[0];
        return HVD_OK;
    case HVDC_KIND_COUNT: break;
    }
    return hvdc__fail(HVD_ERR_INTERNAL, "response of unknown kind %d", response->kind);
}
