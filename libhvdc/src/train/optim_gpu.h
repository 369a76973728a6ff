/*
 * optim_gpu.h - the distributed optimizer's device side: the inner update rules as CUDA kernels
 * (optim_kernels.cu, the formulas of update_rules.h) and the few CUDA runtime calls the
 * optimizer needs around them (optim_gpu.c). Plain C: streams and events cross as void *
 * (cudaStream_t / cudaEvent_t); NULL stream is the legacy default stream.
 *
 *   hvd_optimizer_grad_ready(i)  event_record(ev_i, stream) -> hvd_allreduce_async(grad_i,
 *                                  .device = d, .ready_event = ev_i)    NCCL waits on ev_i
 *   hvd_optimizer_step           wait_on_stream(all, stream) -> sgd_step/adam_step queued
 *                                  on stream (no host sync: the next forward, queued on the
 *                                  same stream, sees the new parameters)
 *
 * Every call first makes `device` current on the calling thread. Every launch uses grid-stride
 * loops and 64-bit counts. Parameters and gradients are float32 or float64 (in the parameter's
 * dtype); optimizer state is float64, as on the host.
 *
 * Built two ways: optim_gpu.c + optim_kernels.cu with the GPU backend, or optim_gpu_stub.c,
 * whose calls fail with HVD_ERR_UNSUPPORTED and HVDC_GPU_STUB_MESSAGE.
 *
 * defines: hvdc__gpu_optim_check, hvdc__gpu_optim_alloc, hvdc__gpu_optim_free,
 *          hvdc__gpu_optim_event_create, hvdc__gpu_optim_event_destroy,
 *          hvdc__gpu_optim_event_record, hvdc__gpu_optim_wait_on_stream,
 *          hvdc__gpu_optim_copy, hvdc__gpu_accumulate, hvdc__gpu_sgd_step,
 *          hvdc__gpu_adam_step
 * The optimizer's caller thread (whichever thread uses that optimizer).
 */
#ifndef HVDC_GPU_OPTIM_H
#define HVDC_GPU_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

/* Is `device` a visible CUDA device? @return HVD_OK; HVD_ERR_CUDA "no CUDA device visible: ..."
 * or "device d is not visible (n devices)"; HVD_ERR_UNSUPPORTED without the GPU backend. The
 * message is recorded (hvdc__fail) and names who (`fn`) asked. */
hvd_status hvdc__gpu_optim_check(const char *fn, int device);

/* nbytes of zeroed device memory on device (blocking; at optimizer creation only). */
hvd_status hvdc__gpu_optim_alloc(int device, size_t nbytes, void **out);
/* Frees what hvdc__gpu_optim_alloc returned; NULL-safe. Waits for the device's queued work. */
void hvdc__gpu_optim_free(int device, void *ptr);

/* An event without timing, for ordering only. */
hvd_status hvdc__gpu_optim_event_create(int device, void **out);
void hvdc__gpu_optim_event_destroy(int device, void *event); /* NULL-safe */
/* Records event on stream (NULL: the legacy default stream). Never blocks. */
hvd_status hvdc__gpu_optim_event_record(int device, void *event, void *stream);

/* hvd_wait_on_stream(handle, stream) with device current, so that a NULL stream is device's
 * legacy default stream (the one the updates are queued on), not the calling thread's current
 * device's. @return as hvd_wait_on_stream (the handle stays live when the stream cannot wait);
 * HVD_ERR_CUDA when device cannot be made current (the handle stays live). */
hvd_status hvdc__gpu_optim_wait_on_stream(int device, hvd_handle *handle, void *stream);

/* Copies nbytes between host memory and device memory on device (to_host: device -> host),
 * queued on stream behind what is there (the last update), and waits for it. For checkpoints
 * and elastic commits: the only optimizer call that makes the host wait for the device, never
 * on the step path. @return HVD_OK; HVD_ERR_CUDA with file:line. */
hvd_status hvdc__gpu_optim_copy(int device, void *stream, void *host, void *dev, size_t nbytes,
                                int to_host);

/* Queues on stream: accum += grad (finish = 0), or grad = (accum + grad) / passes and
 * accum = 0 (finish = 1): backward_passes_per_step on the device. Never blocks. */
hvd_status hvdc__gpu_accumulate(int device, void *stream, void *accum, void *grad, size_t count,
                                hvd_dtype dtype, int finish, int passes);

/* Queues one SGD step over count elements (as hvdc__sgd_update); buf (count float64, device)
 * is the momentum buffer, NULL if momentum is 0. Never blocks.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for a dtype other than float32/float64; HVD_ERR_CUDA with
 *         file:line for a failed launch. */
hvd_status hvdc__gpu_sgd_step(int device, void *stream, void *data, const void *grad,
                              double *buf, size_t count, hvd_dtype dtype, double lr,
                              double momentum, int nesterov, double weight_decay);

/* Queues one Adam (decoupled = 1: AdamW) step at step t >= 1 (as hvdc__adam_update); m and v
 * (count float64 each, device) are the moments. Never blocks. @return as hvdc__gpu_sgd_step. */
hvd_status hvdc__gpu_adam_step(int device, void *stream, void *data, const void *grad,
                               double *m, double *v, size_t count, hvd_dtype dtype, double lr,
                               double beta1, double beta2, double eps, double weight_decay,
                               int decoupled, uint64_t t);

#endif
