/*
 * model_gpu.h - model.h's models (the MLP, and the CNN where cuDNN was found) on a CUDA
 * device (examples/train --device gpu): the same parameter table, layer sequence and
 * grad_ready order, with parameters, gradients and activations in device memory and the
 * layers of layers_gpu.h and conv_gpu.h. Forward and backward only
 * queue work on the model's stream; the loss and accuracy are summed on the device and read
 * back by model_gpu_take_metrics (one stream sync, e.g. per epoch).
 *
 * defines: model_gpu, model_gpu_create, model_gpu_free, model_gpu_param, model_gpu_grad,
 *          model_gpu_stream, model_gpu_forward, model_gpu_backward, model_gpu_take_metrics,
 *          model_gpu_download, model_gpu_error
 *
 * Two builds: model_gpu.c + layers_gpu.cu with the GPU backend, or model_gpu_stub.c, whose
 * model_gpu_create fails with "built without CUDA". Functions returning int give 0, or -1 with
 * the message in model_gpu_error (model_gpu_create: in err).
 */
#ifndef MODEL_GPU_H
#define MODEL_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct model_gpu model_gpu;

/* A device copy of host (an MLP, or a CNN in a cuDNN build; its parameters are uploaded) on
 * CUDA device `device`, for batches of up to host->max_batch. Blocks while it allocates and uploads. */
int model_gpu_create(model_gpu **out, const model *host, int device, char *err, size_t len);
void model_gpu_free(model_gpu *mg); /* NULL-safe */
float *model_gpu_param(model_gpu *mg, int i); /* device pointer of tensor i's values */
float *model_gpu_grad(model_gpu *mg, int i);  /* ... and of its gradient */
void *model_gpu_stream(model_gpu *mg);        /* the cudaStream_t all work is queued on */

/* Uploads inp (B, 784) and targets (B) from host memory (they may be reused once this
 * returns) and queues the forward pass; the loss and correct count add to device sums. */
int model_gpu_forward(model_gpu *mg, const float *inp, const uint8_t *targets, int B);
/* Queues the backward pass of the last forward (mean loss) into the device gradients and
 * calls grad_ready(ctx, i) as each tensor's gradient has been queued, last layer first. */
int model_gpu_backward(model_gpu *mg, model_grad_ready_fn grad_ready, void *ctx);
/* Waits for the stream, returns the sums since the last call and zeroes them. */
int model_gpu_take_metrics(model_gpu *mg, double *loss_sum, long *correct);
/* Waits for the stream and copies the parameters into host->params. */
int model_gpu_download(model_gpu *mg, model *host);
const char *model_gpu_error(const model_gpu *mg);

#endif /* MODEL_GPU_H */
