/*
 * optim_gpu_stub.c - the optimizer's device side in a build without the GPU backend: every
 * call fails with HVD_ERR_UNSUPPORTED and says how to get the real one (see optim_gpu.h).
 * Any thread.
 */
#include "train/optim_gpu.h"

#include "base/status.h"
#include "gpu/gpu.h"

static hvd_status unsupported(void) {
    return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s", HVDC_GPU_STUB_MESSAGE);
}

hvd_status hvdc__gpu_optim_check(const char *fn, int device) {
    return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s: a parameter is on device %d, but %s; register "
                      "host memory (HVD_DEVICE_CPU)", fn, device, HVDC_GPU_STUB_MESSAGE);
}

hvd_status hvdc__gpu_optim_alloc(int device, size_t nbytes, void **out) {
    (void)device, (void)nbytes;
    *out = NULL;
    return unsupported();
}

void hvdc__gpu_optim_free(int device, void *ptr) { (void)device, (void)ptr; }

hvd_status hvdc__gpu_optim_event_create(int device, void **out) {
    (void)device;
    *out = NULL;
    return unsupported();
}

void hvdc__gpu_optim_event_destroy(int device, void *event) { (void)device, (void)event; }

hvd_status hvdc__gpu_optim_event_record(int device, void *event, void *stream) {
    (void)device, (void)event, (void)stream;
    return unsupported();
}

hvd_status hvdc__gpu_optim_wait_on_stream(int device, hvd_handle *handle, void *stream) {
    (void)device, (void)handle, (void)stream;
    return unsupported();
}

hvd_status hvdc__gpu_optim_copy(int device, void *stream, void *host, void *dev, size_t nbytes,
                                int to_host) {
    (void)device, (void)stream, (void)host, (void)dev, (void)nbytes, (void)to_host;
    return unsupported();
}

hvd_status hvdc__gpu_accumulate(int device, void *stream, void *accum, void *grad, size_t count,
                                hvd_dtype dtype, int finish, int passes) {
    (void)device, (void)stream, (void)accum, (void)grad, (void)count, (void)dtype;
    (void)finish, (void)passes;
    return unsupported();
}

hvd_status hvdc__gpu_sgd_step(int device, void *stream, void *data, const void *grad,
                              double *buf, size_t count, hvd_dtype dtype, double lr,
                              double momentum, int nesterov, double weight_decay) {
    (void)device, (void)stream, (void)data, (void)grad, (void)buf, (void)count, (void)dtype;
    (void)lr, (void)momentum, (void)nesterov, (void)weight_decay;
    return unsupported();
}

hvd_status hvdc__gpu_adam_step(int device, void *stream, void *data, const void *grad,
                               double *m, double *v, size_t count, hvd_dtype dtype, double lr,
                               double beta1, double beta2, double eps, double weight_decay,
                               int decoupled, uint64_t t) {
    (void)device, (void)stream, (void)data, (void)grad, (void)m, (void)v, (void)count;
    (void)dtype, (void)lr, (void)beta1, (void)beta2, (void)eps, (void)weight_decay;
    (void)decoupled, (void)t;
    return unsupported();
}
