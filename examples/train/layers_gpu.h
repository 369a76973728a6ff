/*
 * layers_gpu.h - the models' layers on a CUDA device, as a plain-C interface: linear layers by
 * cuBLAS (cublasSgemm) and ReLU, softmax-cross-entropy and bias kernels (layers_gpu.cu). The
 * same functions, shapes and conventions as layers.h (row-major, backward OVERWRITES the
 * parameter gradients, NULL dinp skips it), but every pointer is device memory and every call
 * only queues work on the context's stream: nothing waits for the device.
 *
 * defines: gpu_layers, gpu_layers_create, gpu_layers_free, gpu_layers_stream,
 *          gpu_linear_forward, gpu_linear_backward, gpu_relu_forward, gpu_relu_backward,
 *          gpu_softmax_xent_forward, gpu_softmax_xent_backward, gpu_maxpool2_forward,
 *          gpu_maxpool2_backward (the CNN's convolutions: conv_gpu.h, cuDNN)
 *
 * Each returns 0, or -1 with a message (file:line, CUDA's or cuBLAS's words) in the
 * context's err buffer (gpu_layers_error). Built only with the GPU backend (examples/meson.build).
 */
#ifndef LAYERS_GPU_H
#define LAYERS_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_layers gpu_layers; /* device, a non-blocking stream, a cuBLAS handle */

/* Selects device, creates the stream and the cuBLAS handle bound to it. Returns 0, or -1 with
 * the reason in err (len bytes), e.g. "no CUDA device visible: ...". */
int gpu_layers_create(gpu_layers **out, int device, char *err, size_t len);
void gpu_layers_free(gpu_layers *g); /* NULL-safe; waits for its stream */
void *gpu_layers_stream(const gpu_layers *g); /* the cudaStream_t everything is queued on */
const char *gpu_layers_error(const gpu_layers *g); /* the last failure's message */

/* out (B, OC) = inp (B, C) @ weight (OC, C)^T + bias (OC) */
int gpu_linear_forward(gpu_layers *g, float *out, const float *inp, const float *weight,
                       const float *bias, int B, int C, int OC);
/* dweight (OC, C) = dout^T @ inp; dbias (OC) = column sums of dout (B, OC);
 * dinp (B, C) = dout @ weight, unless dinp is NULL */
int gpu_linear_backward(gpu_layers *g, float *dinp, float *dweight, float *dbias,
                        const float *dout, const float *inp, const float *weight, int B, int C,
                        int OC);
int gpu_relu_forward(gpu_layers *g, float *out, const float *inp, size_t N);
int gpu_relu_backward(gpu_layers *g, float *dinp, const float *dout, const float *out, size_t N);
/* probs (B, V) = softmax of each row of logits; adds the summed cross-entropy against targets
 * (B, device uint8) to *loss_sum and the number of rows whose largest logit is the target to
 * *correct (both device memory, accumulated with atomics; the caller reads them when it
 * wants, e.g. once per epoch). V <= 64. */
int gpu_softmax_xent_forward(gpu_layers *g, float *probs, double *loss_sum,
                             unsigned long long *correct, const float *logits,
                             const uint8_t *targets, int B, int V);
/* dlogits = scale * (probs - onehot(targets)) */
int gpu_softmax_xent_backward(gpu_layers *g, float *dlogits, const float *probs,
                              const uint8_t *targets, float scale, int B, int V);

/* 2x2 max pooling, stride 2, as layers.h's maxpool2 (argmax: the winner's index in inp, the
 * first of equals); backward zeroes dinp and routes each dout to its winner. */
int gpu_maxpool2_forward(gpu_layers *g, float *out, int32_t *argmax, const float *inp, int B,
                         int C, int H, int W);
int gpu_maxpool2_backward(gpu_layers *g, float *dinp, const float *dout, const int32_t *argmax,
                          int B, int C, int H, int W);

#ifdef __cplusplus
}
#endif

#endif /* LAYERS_GPU_H */
