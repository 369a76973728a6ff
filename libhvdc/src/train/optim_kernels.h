/*
 * optim_kernels.h - the optimizer kernels of optim_kernels.cu as plain-C launchers (used
 * by optim_gpu.c). Each queues one grid-stride launch on stream and returns 0 (cudaSuccess) or
 * the launch's cudaError_t. dtype: HVD_FLOAT32 or HVD_FLOAT64 (else cudaErrorInvalidValue).
 * defines: hvdc__launch_sgd, hvdc__launch_adam, hvdc__launch_accumulate
 * The optimizer's caller thread.
 */
#ifndef HVDC_GPU_OPTIM_KERNELS_H
#define HVDC_GPU_OPTIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int hvdc__launch_sgd(void *stream, int dtype, void *data, const void *grad, double *buf,
                     uint64_t count, double lr, double momentum, int nesterov,
                     double weight_decay, int max_blocks);
/* c1 = 1 - beta1^t, c2 = 1 - beta2^t, computed by the caller on the host. */
int hvdc__launch_adam(void *stream, int dtype, void *data, const void *grad, double *m,
                      double *v, uint64_t count, double lr, double beta1, double beta2,
                      double eps, double weight_decay, int decoupled, double c1, double c2,
                      int max_blocks);
/* finish = 0: accum += grad; finish = 1: grad = (accum + grad) / passes, accum = 0. */
int hvdc__launch_accumulate(void *stream, int dtype, void *accum, void *grad, uint64_t count,
                            int finish, int passes, int max_blocks);

#ifdef __cplusplus
}
#endif

#endif
