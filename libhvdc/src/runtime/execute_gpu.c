/*
 * execute_gpu.c - runs a negotiated response on CUDA device memory through the GPU backend
 * (gpu.h). The backend is created on the first device response, which every rank executes at
 * the same point, so its collective setup (agreed steps, NCCL unique id over MPI) lines up; a
 * setup that fails fails that response on every rank, and CPU work goes on. Work is queued
 * on the backend's stream after the tensors' ready events; the caller gets a pending record
 * and completes the ops when it fires, so this thread never waits for the device.
 * Background thread.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/status.h"
#include "gpu/gpu.h"
#include "runtime/alltoall_counts.h"
#include "runtime/execute.h"

/* st of an agreed setup step (gpu.h): refused on every rank alike, unless the agreement
 * itself failed (HVD_ERR_MPI, HVD_ERR_RANK_FAILED). */
static hvdc_outcome agreed_setup(hvd_status st) {
    return st == HVD_ERR_MPI || st == HVD_ERR_RANK_FAILED ? hvdc__ran(st) : hvdc__refused(st);
}

static hvdc_gpu_config gpu_config(const hvdc_executor *ex, int device) {
    hvdc_gpu_config config = {
        .comm = ex->comm, .liveness = ex->liveness, .topo = ex->topo, .device = device,
        .hierarchical = ex->gpu_hierarchical, .fusion_bytes = ex->gpu_fusion_bytes,
        .wake = ex->gpu_wake, .wake_ctx = ex->gpu_wake_ctx, .aborted = ex->gpu_aborted,
    };
    return config;
}

/* The backend, created by the first device response on every rank at once. Its setup is agreed
 * step by step (gpu.h), so a failure there refuses this response on every rank before any data
 * moved: the runtime goes on, and the next device response tries again. */
static hvdc_outcome ensure_backend(hvdc_executor *ex, int device) {
    if (ex->gpu) {
        if (device == hvdc__gpu_device(ex->gpu)) return hvdc__ran(HVD_OK);
        /* api.c refuses this at submission once the backend exists; only two requests for
         * different devices submitted before it did get here, and the ranks are then out of
         * step (the others run NCCL), so it stops the runtime */
        return hvdc__ran(hvdc__fail(HVD_ERR_INVALID_ARG, "a device request for CUDA device %d "
                                    "reached the GPU backend of rank %d, which runs on device "
                                    "%d: use one device per rank", device, ex->topo->rank,
                                    hvdc__gpu_device(ex->gpu)));
    }
    int chosen = atomic_load(ex->rank_device);
    if (chosen >= 0 && device != chosen) /* another runtime's backend chose it (process sets) */
        return hvdc__ran(hvdc__fail(HVD_ERR_INVALID_ARG, "a device request for CUDA device %d "
                                    "reached rank %d, whose collectives run on device %d: use "
                                    "one device per rank", device, ex->topo->rank, chosen));
    hvdc_gpu_config config = gpu_config(ex, device);
    hvd_status st = hvdc__gpu_create(&config, &ex->gpu);
    if (st == HVD_OK) atomic_store(ex->rank_device, hvdc__gpu_device(ex->gpu));
    return agreed_setup(st);
}

/* The stream waits for every distinct ready event of the response's ops; returns the one
 * event left for the collective itself (NULL when it should wait on the default stream). */
static hvd_status wait_ready(hvdc_executor *ex, hvdc_op **ops, size_t n_ops, void **last) {
    *last = ops[0]->ready_event;
    for (size_t i = 1; i < n_ops; i++) {
        if (ops[i]->ready_event == *last) continue;
        hvd_status st = hvdc__gpu_stream_wait(ex->gpu, *last);
        if (st != HVD_OK) return st;
        *last = ops[i]->ready_event;
    }
    return HVD_OK;
}

/* The response's tensors as one device all-reduce, with op and scale factors given (the
 * requests' own, or an Adasum's stand-in: hvdc__execute_gpu_allreduce_as). */
static hvd_status gpu_allreduce(hvdc_executor *ex, hvdc_op **ops, size_t n_ops, hvd_reduce_op op,
                                double prescale, double postscale, void *ready,
                                hvdc_gpu_pending **pending) {
    size_t n = 0;
    for (size_t i = 0; i < n_ops; i++) n += ops[i]->n_tensors;
    hvdc_gpu_tensor *tensors = malloc((n ? n : 1) * sizeof *tensors);
    if (!tensors) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for %zu device tensors", n);
    n = 0;
    for (size_t i = 0; i < n_ops; i++)
        for (size_t k = 0; k < ops[i]->n_tensors; k++)
            tensors[n++] = (hvdc_gpu_tensor){ops[i]->tensors[k].send, ops[i]->tensors[k].recv,
                                             ops[i]->tensors[k].count};
    hvd_status st = hvdc__gpu_allreduce(ex->gpu, tensors, n, (hvd_dtype)ops[0]->desc.dtype, op,
                                        prescale, postscale, ready, pending);
    free(tensors);
    return st;
}

hvdc_outcome hvdc__execute_gpu_prepare(hvdc_executor *ex, hvdc_op **ops, size_t n_ops,
                                       void **ready) {
    *ready = NULL;
    hvdc_outcome backend = ensure_backend(ex, ops[0]->desc.device);
    if (backend.status != HVD_OK) return backend;
    return hvdc__ran(wait_ready(ex, ops, n_ops, ready));
}

hvdc_outcome hvdc__execute_gpu_node_comm(hvdc_executor *ex) {
    hvdc_gpu_config config = gpu_config(ex, hvdc__gpu_device(ex->gpu));
    return agreed_setup(hvdc__gpu_node_comm(ex->gpu, &config));
}

hvdc_outcome hvdc__execute_gpu_allreduce_as(hvdc_executor *ex, hvdc_op **ops, size_t n_ops,
                                            hvd_reduce_op op, double prescale, double postscale,
                                            hvdc_gpu_pending **pending) {
    void *ready = NULL;
    *pending = NULL;
    hvdc_outcome prepared = hvdc__execute_gpu_prepare(ex, ops, n_ops, &ready);
    if (prepared.status != HVD_OK) return prepared;
    return hvdc__ran(gpu_allreduce(ex, ops, n_ops, op, prescale, postscale, ready, pending));
}

/* The receive counts (alltoall_counts.h), then the device all-to-all. */
static hvd_status gpu_alltoall(hvdc_executor *ex, hvdc_op *op, const hvdc_wire_response *r,
                               void *ready, hvdc_gpu_pending **pending) {
    hvd_status st = HVD_OK;
    const hvdc_tensor *t = &op->tensors[0];
    size_t n = (size_t)ex->topo->size;
    uint64_t *recv64 = malloc(n * sizeof *recv64);
    size_t *send = malloc(n * sizeof *send), *recv = malloc(n * sizeof *recv);
    if (!recv64 || !send || !recv) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "alltoall '%s': out of memory for the counts", op->desc.name);
        goto fail;
    }
    CHECK(hvdc__alltoall_recv_counts(ex, op, r, recv64));
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        send[i] = (size_t)op->desc.counts[i];
        total += recv[i] = (size_t)recv64[i];
    }
    CHECK(hvdc__gpu_alltoall(ex->gpu, t->send, send, t->recv, recv, (hvd_dtype)op->desc.dtype,
                             ready, pending));
    if (op->recv_count_out) *op->recv_count_out = total;
    if (op->rank_counts_out)
        for (size_t i = 0; i < n; i++) op->rank_counts_out[i] = recv[i];
fail:
    free(recv64);
    free(send);
    free(recv);
    return st;
}

/* The collective of a device response, once the backend exists and its stream waits for the
 * tensors (ready). */
static hvd_status gpu_collective(hvdc_executor *ex, const hvdc_wire_response *r, hvdc_op *op,
                                 hvdc_op **ops, size_t n_ops, void *ready,
                                 hvdc_gpu_pending **pending) {
    hvd_status st = HVD_OK;
    const hvdc_tensor *t = &op->tensors[0];
    hvd_dtype dtype = (hvd_dtype)op->desc.dtype;
    switch ((hvdc_kind)r->kind) {
    case HVDC_KIND_ALLREDUCE:
        return gpu_allreduce(ex, ops, n_ops, (hvd_reduce_op)op->desc.op, op->desc.prescale,
                             op->desc.postscale, ready, pending);
    case HVDC_KIND_BROADCAST:
        return hvdc__gpu_broadcast(ex->gpu, t->recv, t->count, dtype, op->desc.root, ready, pending);
    case HVDC_KIND_ALLGATHER: {
        size_t *counts = malloc((size_t)ex->topo->size * sizeof *counts);
        if (!counts) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for allgather counts");
        size_t total = 0;
        for (int i = 0; i < ex->topo->size; i++) total += counts[i] = (size_t)r->rank_counts[i];
        st = hvdc__gpu_allgather(ex->gpu, t->send, t->recv, counts, dtype, ready, pending);
        if (st == HVD_OK && op->recv_count_out) *op->recv_count_out = total;
        if (st == HVD_OK && op->rank_counts_out)
            for (int i = 0; i < ex->topo->size; i++) op->rank_counts_out[i] = counts[i];
        free(counts);
        return st;
    }
    case HVDC_KIND_REDUCESCATTER:
        st = hvdc__gpu_reducescatter(ex->gpu, t->send, t->recv, t->count, dtype,
                                     (hvd_reduce_op)op->desc.op, op->desc.prescale,
                                     op->desc.postscale, ready, pending);
        if (st == HVD_OK && op->recv_count_out)
            *op->recv_count_out = t->count / (size_t)ex->topo->size +
                                  ((size_t)ex->topo->rank < t->count % (size_t)ex->topo->size ? 1 : 0);
        return st;
    case HVDC_KIND_ALLTOALL:
        return gpu_alltoall(ex, op, r, ready, pending);
    case HVDC_KIND_BARRIER:
    case HVDC_KIND_JOIN:
    case HVDC_KIND_COUNT:
        break;
    }
    return hvdc__fail(HVD_ERR_INTERNAL, "device response of kind %s", hvdc__kind_name(r->kind));
}

hvdc_outcome hvdc__execute_gpu(hvdc_executor *ex, const hvdc_wire_response *r, hvdc_op **ops,
                               size_t n_ops, hvdc_gpu_pending **pending) {
    void *ready = NULL;
    *pending = NULL;
    if (r->n_joined > 0) /* negotiation refuses these (negotiate.c); never reached */
        return hvdc__ran(hvdc__fail(HVD_ERR_INTERNAL, "allreduce '%s': a device all-reduce "
                                    "while a rank has joined", r->names[0]));
    hvdc_outcome prepared = hvdc__execute_gpu_prepare(ex, ops, n_ops, &ready);
    if (prepared.status != HVD_OK) return prepared;
    return hvdc__ran(gpu_collective(ex, r, ops[0], ops, n_ops, ready, pending));
}
