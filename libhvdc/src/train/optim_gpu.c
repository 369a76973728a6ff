/*
 * optim_gpu.c - the distributed optimizer's CUDA runtime calls (see optim_gpu.h): device checks,
 * state allocation, ordering events, and the launches of optim_kernels.cu. Every call
 * makes its device current first and gives the caller's thread its own current device back
 * before it returns (device_enter/device_leave), and checks every CUDA call, reporting
 * file:line. Nothing on the step path synchronizes the host: launches and event records are
 * queued on the stream (only hvdc__gpu_optim_copy, for checkpoints, waits). The optimizer's
 * caller thread.
 */
#include "train/optim_gpu.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "gpu/cuda_check.h"
#include "train/optim_kernels.h"

hvd_status hvdc__gpu_optim_check(const char *fn, int device) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0)
        return hvdc__fail(HVD_ERR_CUDA, "%s: no CUDA device visible: %s", fn,
                          err != cudaSuccess ? cudaGetErrorString(err)
                                             : "cudaGetDeviceCount found 0 devices");
    if (device < 0 || device >= n)
        return hvdc__fail(HVD_ERR_CUDA, "%s: device %d is not visible (this process sees %d "
                          "CUDA device(s); check CUDA_VISIBLE_DEVICES)", fn, device, n);
    return HVD_OK;
}

/* Makes device current on this thread; *prev is the device that was, for device_leave. */
static hvd_status device_enter(int device, int *prev) {
    hvd_status st = HVD_OK;
    *prev = device;
    CHECK_CUDA(cudaGetDevice(prev));
    if (*prev != device) CHECK_CUDA(cudaSetDevice(device));
    return HVD_OK;
fail:
    return st;
}

/* The caller's device back; never fails the call (an error here is left for CUDA's next). */
static void device_leave(int device, int prev) {
    if (prev != device && cudaSetDevice(prev) != cudaSuccess) cudaGetLastError();
}

hvd_status hvdc__gpu_optim_wait_on_stream(int device, hvd_handle *handle, void *stream) {
    int prev = device;
    hvd_status st = device_enter(device, &prev);
    if (st != HVD_OK) return st;
    st = hvd_wait_on_stream(handle, stream);
    device_leave(device, prev);
    return st;
}

/* 4 resident blocks per SM bound the grid; grid-stride loops cover the rest. */
static hvd_status max_blocks(int device, int *out) {
    hvd_status st = HVD_OK;
    int sms = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    *out = sms > 0 ? 4 * sms : 1;
    return HVD_OK;
fail:
    return st;
}

hvd_status hvdc__gpu_optim_alloc(int device, size_t nbytes, void **out) {
    hvd_status st = HVD_OK;
    void *p = NULL;
    int prev = device;
    *out = NULL;
    CHECK(device_enter(device, &prev));
    CHECK_CUDA(cudaMalloc(&p, nbytes));
    CHECK_CUDA(cudaMemset(p, 0, nbytes));
    *out = p;
    device_leave(device, prev);
    return HVD_OK;
fail:
    if (p != NULL) cudaFree(p);
    device_leave(device, prev);
    return st;
}

void hvdc__gpu_optim_free(int device, void *ptr) {
    int prev = device;
    if (ptr == NULL) return;
    if (device_enter(device, &prev) != HVD_OK) return;
    cudaFree(ptr);
    device_leave(device, prev);
}

hvd_status hvdc__gpu_optim_event_create(int device, void **out) {
    hvd_status st = HVD_OK;
    cudaEvent_t ev = NULL;
    int prev = device;
    *out = NULL;
    CHECK(device_enter(device, &prev));
    CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *out = ev;
fail:
    device_leave(device, prev);
    return st;
}

void hvdc__gpu_optim_event_destroy(int device, void *event) {
    int prev = device;
    if (event == NULL) return;
    if (device_enter(device, &prev) != HVD_OK) return;
    cudaEventDestroy((cudaEvent_t)event);
    device_leave(device, prev);
}

hvd_status hvdc__gpu_optim_event_record(int device, void *event, void *stream) {
    hvd_status st = HVD_OK;
    int prev = device;
    CHECK(device_enter(device, &prev));
    CHECK_CUDA(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
fail:
    device_leave(device, prev);
    return st;
}

hvd_status hvdc__gpu_optim_copy(int device, void *stream, void *host, void *dev, size_t nbytes,
                                int to_host) {
    hvd_status st = HVD_OK;
    int prev = device;
    if (nbytes == 0) return HVD_OK;
    CHECK(device_enter(device, &prev));
    CHECK_CUDA(cudaMemcpyAsync(to_host ? host : dev, to_host ? dev : host, nbytes,
                               to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                               (cudaStream_t)stream));
    CHECK_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
fail:
    device_leave(device, prev);
    return st;
}

static hvd_status bad_dtype(const char *fn, hvd_dtype dtype) {
    return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: dtype %d is not float32 or float64", fn,
                      (int)dtype);
}

hvd_status hvdc__gpu_accumulate(int device, void *stream, void *accum, void *grad, size_t count,
                                hvd_dtype dtype, int finish, int passes) {
    hvd_status st = HVD_OK;
    int blocks = 1, prev = device;
    if (dtype != HVD_FLOAT32 && dtype != HVD_FLOAT64)
        return bad_dtype("hvdc__gpu_accumulate", dtype);
    CHECK(device_enter(device, &prev));
    CHECK(max_blocks(device, &blocks));
    CHECK_CUDA((cudaError_t)hvdc__launch_accumulate(stream, (int)dtype, accum, grad,
                                                    (uint64_t)count, finish, passes, blocks));
fail:
    device_leave(device, prev);
    return st;
}

hvd_status hvdc__gpu_sgd_step(int device, void *stream, void *data, const void *grad,
                              double *buf, size_t count, hvd_dtype dtype, double lr,
                              double momentum, int nesterov, double weight_decay) {
    hvd_status st = HVD_OK;
    int blocks = 1, prev = device;
    if (dtype != HVD_FLOAT32 && dtype != HVD_FLOAT64) return bad_dtype("hvdc__gpu_sgd_step", dtype);
    CHECK(device_enter(device, &prev));
    CHECK(max_blocks(device, &blocks));
    CHECK_CUDA((cudaError_t)hvdc__launch_sgd(stream, (int)dtype, data, grad, buf,
                                             (uint64_t)count, lr, momentum, nesterov,
                                             weight_decay, blocks));
fail:
    device_leave(device, prev);
    return st;
}

hvd_status hvdc__gpu_adam_step(int device, void *stream, void *data, const void *grad,
                               double *m, double *v, size_t count, hvd_dtype dtype, double lr,
                               double beta1, double beta2, double eps, double weight_decay,
                               int decoupled, uint64_t t) {
    hvd_status st = HVD_OK;
    int blocks = 1, prev = device;
    if (dtype != HVD_FLOAT32 && dtype != HVD_FLOAT64)
        return bad_dtype("hvdc__gpu_adam_step", dtype);
    /* the bias corrections exactly as update.c computes them, on the host */
    double c1 = 1.0 - pow(beta1, (double)t), c2 = 1.0 - pow(beta2, (double)t);
    CHECK(device_enter(device, &prev));
    CHECK(max_blocks(device, &blocks));
    CHECK_CUDA((cudaError_t)hvdc__launch_adam(stream, (int)dtype, data, grad, m, v,
                                              (uint64_t)count, lr, beta1, beta2, eps,
                                              weight_decay, decoupled, c1, c2, blocks));
fail:
    device_leave(device, prev);
    return st;
}
