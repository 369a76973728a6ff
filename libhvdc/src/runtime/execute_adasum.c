/*
 * execute_adasum.c - runs a negotiated Adasum all-reduce (collectives/adasum.h), as Horovod
 * 0.28's AdasumMPIAllreduceOp::Execute does on host memory:
 *
 *   pack every tensor of the response back to back into the fusion buffer (no padding: the
 *   halving cuts the buffer by element counts, as Horovod's does), times prescale
 *   -> VHDD over all ranks, told each tensor's count -> unpack, times postscale
 *
 * Negotiation fused only Adasum tensors of one dtype and scaling together (negotiate.c's
 * can_fuse compares the op), and api.c refused what Adasum does not define, so here the dtype
 * is floating and the size a power of 2. A rank that has joined runs it with zeros, which the
 * combine leaves out (a coefficient of 1 for the other vector).
 * Device tensors on one node: Horovod's device Adasum there is the average (NCCL sums inside the
 * node, no nodes to combine, postscale / local_size), so the device all-reduce runs as a sum
 * with that postscale; across nodes, execute_adasum_gpu.c.
 * Background thread.
 */
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"
#include "collectives/adasum.h"
#include "collectives/reduce.h"
#include "runtime/execute.h"
#include "runtime/working_memory.h"

/* The tensors' counts, in ex->tensor_list (kept from one response to the next). */
static hvd_status list_counts(hvdc_executor *ex, hvdc_op **ops, size_t n_ops, size_t **counts,
                              size_t *n, size_t *total) {
    *n = *total = 0;
    for (size_t i = 0; i < n_ops; i++) *n += ops[i]->n_tensors;
    if (hvdc__buffer_reserve(&ex->tensor_list, (*n ? *n : 1) * sizeof(size_t)) != HVD_OK)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning an Adasum of %zu tensors", *n);
    *counts = ex->tensor_list.data;
    size_t k = 0;
    for (size_t i = 0; i < n_ops; i++)
        for (size_t j = 0; j < ops[i]->n_tensors; j++) *total += (*counts)[k++] = ops[i]->tensors[j].count;
    return HVD_OK;
}

/* The VHDD of adasum_host over the n tensors (counts, total elements), once its working
 * memory is agreed. */
static hvd_status adasum_data(hvdc_executor *ex, hvdc_op **ops, size_t n_ops, const size_t *counts,
                              size_t n, size_t total) {
    hvd_status st = HVD_OK;
    const hvdc_wire_request *d = &ops[0]->desc;
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    size_t elem = hvd_dtype_size(dtype);
    int64_t t0 = hvdc__timeline_now_us(ex->timeline);
    char *buf = ex->fusion.data;
    size_t at = 0;
    for (size_t i = 0; i < n_ops; i++)
        for (size_t j = 0; j < ops[i]->n_tensors; j++) {
            const hvdc_tensor *t = &ops[i]->tensors[j];
            if (t->count) memcpy(buf + at * elem, t->send, t->count * elem);
            at += t->count;
        }
    hvdc__scale(buf, total, dtype, d->prescale);
    int64_t t1 = hvdc__timeline_now_us(ex->timeline);
    CHECK(hvdc__adasum_mpi(ex->comm, buf, counts, n, dtype, &ex->scratch, ex->liveness));
    int64_t t2 = hvdc__timeline_now_us(ex->timeline);
    hvdc__scale(buf, total, dtype, d->postscale);
    at = 0;
    for (size_t i = 0; i < n_ops; i++)
        for (size_t j = 0; j < ops[i]->n_tensors; j++) {
            const hvdc_tensor *t = &ops[i]->tensors[j];
            if (t->count) memcpy(t->recv, buf + at * elem, t->count * elem);
            at += t->count;
        }
    if (ex->timeline) {
        int64_t t3 = hvdc__timeline_now_us(ex->timeline);
        for (size_t i = 0; i < n_ops; i++)
            for (size_t j = 0; j < ops[i]->n_tensors; j++) {
                const char *name = ops[i]->tensors[j].name;
                hvdc__timeline_span(ex->timeline, name, "PACK", t0, t1, ex->group);
                hvdc__timeline_span(ex->timeline, name, "ADASUM", t1, t2, ex->group);
                hvdc__timeline_span(ex->timeline, name, "UNPACK", t2, t3, ex->group);
            }
    }
fail:
    return st;
}

static hvdc_outcome adasum_host(hvdc_executor *ex, hvdc_op **ops, size_t n_ops) {
    hvd_dtype dtype = (hvd_dtype)ops[0]->desc.dtype;
    size_t *counts = NULL, n, total;
    hvd_status st = list_counts(ex, ops, n_ops, &counts, &n, &total);
    if (st != HVD_OK) return hvdc__ran(st);
    hvdc_outcome reserved = hvdc__reserve_agreed(ex, "allreduce", ops[0]->tensors[0].name,
                                                 total * hvd_dtype_size(dtype),
                                                 hvdc__adasum_scratch_bytes(total, n, dtype));
    if (reserved.status != HVD_OK) return reserved;
    return hvdc__ran(adasum_data(ex, ops, n_ops, counts, n, total));
}

hvdc_outcome hvdc__execute_adasum(hvdc_executor *ex, const hvdc_wire_response *response,
                                  hvdc_op **ops, size_t n_ops, hvdc_gpu_pending **pending) {
    *pending = NULL;
    if (n_ops == 0) return hvdc__ran(HVD_OK);
    const hvdc_wire_request *d = &ops[0]->desc;
    if (d->device >= 0 && ex->topo->local_size == ex->topo->size) {
        /* Horovod's device Adasum (NCCL) sums inside each node, runs Adasum across nodes and
         * divides by the node's ranks: on one node that is the average, all on the device */
        return hvdc__execute_gpu_allreduce_as(ex, ops, n_ops, HVD_SUM, d->prescale,
                                              d->postscale / ex->topo->local_size, pending);
    }
    if (d->device >= 0) /* every rank sees the same: local_size == size on one means one node */
        return hvdc__execute_adasum_gpu(ex, response, ops, n_ops, pending);
    return adasum_host(ex, ops, n_ops);
}
