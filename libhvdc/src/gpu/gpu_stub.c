/*
 * gpu_stub.c - the GPU backend of a build without CUDA/NCCL: every call fails with
 * HVD_ERR_UNSUPPORTED and says how to get the real one (see gpu.h); no buffer is device memory.
 * Any thread.
 */
#include "gpu/gpu.h"

#include <stdio.h>

#include "base/fault.h"
#include "base/status.h"

static hvd_status unsupported(void) {
    return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s", HVDC_GPU_STUB_MESSAGE);
}

/* HVDC_TEST_GPU_COUNT can pretend devices here too, so the runtime's refusal of a device it
 * cannot set up is tested in builds without CUDA as well (the sanitizer builds). */
int hvdc__gpu_device_count(void) { return hvdc__fault_device_count(0); }

hvd_status hvdc__gpu_probe(char *why, size_t len) {
    if (hvdc__gpu_device_count() > 0) {
        if (why && len) why[0] = '\0';
        return HVD_OK;
    }
    if (why && len) snprintf(why, len, "%s", HVDC_GPU_STUB_MESSAGE);
    return HVD_ERR_UNSUPPORTED;
}

hvd_status hvdc__gpu_stream_wait(hvdc_gpu *gpu, void *event) {
    (void)gpu, (void)event;
    return unsupported();
}

int hvdc__gpu_pointer_device(const void *ptr) {
    (void)ptr;
    return HVDC_GPU_PTR_UNKNOWN;
}

void hvdc__gpu_versions(char *buf, size_t len) {
    if (buf && len) snprintf(buf, len, "built without CUDA/NCCL");
}

int hvdc__gpu_nccl_version_built(void) {
    return 0;
}

/* The device choice is agreed as in the real backend (so a device that is not visible is
 * named the same way in every build), then every rank refuses together. */
hvd_status hvdc__gpu_create(const hvdc_gpu_config *config, hvdc_gpu **out) {
    int device = -1;
    *out = NULL;
    hvdc__clear_error();
    hvd_status st = hvdc__gpu_agree(config,
                                    hvdc__gpu_choose_device(config->device, config->topo->local_rank,
                                                            hvdc__gpu_device_count(), &device),
                                    "choosing the CUDA device");
    if (st != HVD_OK) return st;
    hvdc__clear_error();
    return hvdc__gpu_agree(config, unsupported(), "CUDA device");
}

int hvdc__gpu_device(const hvdc_gpu *gpu) {
    (void)gpu;
    return -1;
}

void hvdc__gpu_abort(hvdc_gpu *gpu, const char *why) { (void)gpu, (void)why; }

void hvdc__gpu_destroy(hvdc_gpu *gpu) { (void)gpu; }

hvd_status hvdc__gpu_allreduce(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                               hvd_dtype dtype, hvd_reduce_op op, double prescale,
                               double postscale, void *ready_event, hvdc_gpu_pending **out) {
    (void)gpu, (void)tensors, (void)n, (void)dtype, (void)op, (void)prescale, (void)postscale;
    (void)ready_event;
    if (out) *out = NULL;
    return unsupported();
}

hvd_status hvdc__gpu_broadcast(hvdc_gpu *gpu, void *buf, size_t count, hvd_dtype dtype, int root,
                               void *ready_event, hvdc_gpu_pending **out) {
    (void)gpu, (void)buf, (void)count, (void)dtype, (void)root, (void)ready_event;
    if (out) *out = NULL;
    return unsupported();
}

hvd_status hvdc__gpu_allgather(hvdc_gpu *gpu, const void *send, void *recv,
                               const size_t *rank_counts, hvd_dtype dtype, void *ready_event,
                               hvdc_gpu_pending **out) {
    (void)gpu, (void)send, (void)recv, (void)rank_counts, (void)dtype, (void)ready_event;
    if (out) *out = NULL;
    return unsupported();
}

hvd_status hvdc__gpu_reducescatter(hvdc_gpu *gpu, const void *send, void *recv, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op, double prescale,
                                   double postscale, void *ready_event, hvdc_gpu_pending **out) {
    (void)gpu, (void)send, (void)recv, (void)count, (void)dtype, (void)op, (void)prescale;
    (void)postscale, (void)ready_event;
    if (out) *out = NULL;
    return unsupported();
}

hvd_status hvdc__gpu_alltoall(hvdc_gpu *gpu, const void *send, const size_t *send_counts,
                              void *recv, const size_t *recv_counts, hvd_dtype dtype,
                              void *ready_event, hvdc_gpu_pending **out) {
    (void)gpu, (void)send, (void)send_counts, (void)recv, (void)recv_counts, (void)dtype;
    (void)ready_event;
    if (out) *out = NULL;
    return unsupported();
}

hvd_status hvdc__gpu_pending_poll(hvdc_gpu_pending *pending, int *done) {
    (void)pending;
    if (done) *done = 1;
    return unsupported();
}

void hvdc__gpu_pending_free(hvdc_gpu_pending *pending) { (void)pending; }

void hvdc__gpu_pending_notify(hvdc_gpu_pending *pending) { (void)pending; }

void *hvdc__gpu_pending_event(const hvdc_gpu_pending *pending) {
    (void)pending;
    return NULL;
}

int hvdc__gpu_event_finished(void *event, const atomic_int *aborted, int block) {
    (void)event, (void)aborted, (void)block;
    return 0;
}

hvd_status hvdc__gpu_stream_wait_on(void *stream, void *event) {
    (void)stream, (void)event;
    return unsupported();
}

hvd_status hvdc__gpu_adasum_to_host(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                                    const size_t *offsets, size_t shard, hvd_dtype dtype,
                                    double prescale, void *ready_event, void **host,
                                    hvdc_gpu_pending **out) {
    (void)gpu, (void)tensors, (void)n, (void)offsets, (void)shard, (void)dtype, (void)prescale;
    (void)ready_event;
    if (host) *host = NULL;
    if (out) *out = NULL;
    return unsupported();
}

hvd_status hvdc__gpu_adasum_from_host(hvdc_gpu *gpu, const hvdc_gpu_tensor *tensors, size_t n,
                                      const size_t *offsets, size_t shard, hvd_dtype dtype,
                                      double postscale, hvdc_gpu_pending **out) {
    (void)gpu, (void)tensors, (void)n, (void)offsets, (void)shard, (void)dtype, (void)postscale;
    if (out) *out = NULL;
    return unsupported();
}

hvd_status hvdc__gpu_node_comm(hvdc_gpu *gpu, const hvdc_gpu_config *config) {
    (void)gpu, (void)config;
    return unsupported();
}
