/*
 * gpu_stub.c - the GPU backend of a build without CUDA/NCCL: every call fails with
 * HVD_ERR_UNSUPPORTED and says how to get the real one (see gpu.h). Any thread.
 */
#include "gpu/gpu.h"

#include <stdio.h>

#include "base/status.h"

static hvd_status unsupported(void) {
    return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s", HVDC_GPU_STUB_MESSAGE);
}

hvd_status hvdc__gpu_probe(char *why, size_t len) {
    if (why && len) snprintf(why, len, "%s", HVDC_GPU_STUB_MESSAGE);
    return HVD_ERR_UNSUPPORTED;
}

hvd_status hvdc__gpu_stream_wait(hvdc_gpu *gpu, void *event) {
    (void)gpu, (void)event;
    return unsupported();
}

int hvdc__gpu_pointer_device(const void *ptr) {
    (void)ptr;
    return -1;
}

void hvdc__gpu_versions(char *buf, size_t len) {
    if (buf && len) snprintf(buf, len, "built without CUDA/NCCL");
}

hvd_status hvdc__gpu_create(const hvdc_gpu_config *config, hvdc_gpu **out) {
    (void)config;
    if (out) *out = NULL;
    return unsupported();
}

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

hvd_status hvdc__gpu_pending_wait(hvdc_gpu_pending *pending) {
    (void)pending;
    return unsupported();
}

void hvdc__gpu_pending_free(hvdc_gpu_pending *pending) { (void)pending; }
