/*
 * conv_gpu.h - layers.h's conv3x3 (3x3, stride 1, zero padding 1, cross-correlation) on a CUDA
 * device through cuDNN, for examples/train --model cnn --device gpu. One gpu_conv per layer:
 * its descriptors are made once and its three algorithms (forward, backward data, backward
 * filter) chosen once by cuDNN's heuristics for the largest batch, preferring deterministic
 * ones, with FMA math only (no TF32, so it agrees with the CPU's float32 to rounding); one
 * workspace sized for them. Every call only queues work on the given stream.
 *
 * defines: gpu_conv, gpu_conv_create, gpu_conv_free, gpu_conv_forward, gpu_conv_backward,
 *          gpu_conv_error, gpu_conv_version
 *
 * Functions returning int give 0, or -1 with the message (file:line, cuDNN's words) in
 * gpu_conv_error (gpu_conv_create: in err). Built only where meson found cuDNN.
 */
#ifndef CONV_GPU_H
#define CONV_GPU_H

#include <stddef.h>

typedef struct gpu_conv gpu_conv;

/* A C -> OC channel layer on H x W images, batches of up to max_batch, queued on stream (a
 * cudaStream_t) of the current device. */
int gpu_conv_create(gpu_conv **out, void *stream, int max_batch, int C, int H, int W, int OC,
                    char *err, size_t len);
void gpu_conv_free(gpu_conv *c); /* NULL-safe */
const char *gpu_conv_error(const gpu_conv *c);
/* "cuDNN 9.19.0" (the library loaded), into buf */
void gpu_conv_version(char *buf, size_t len);

/* out (B, OC, H, W) = conv(inp (B, C, H, W), weight (OC, C, 3, 3)) + bias (OC) */
int gpu_conv_forward(gpu_conv *c, float *out, const float *inp, const float *weight,
                     const float *bias, int B);
/* dweight and dbias OVERWRITTEN from dout and inp; dinp too unless NULL */
int gpu_conv_backward(gpu_conv *c, float *dinp, float *dweight, float *dbias, const float *dout,
                      const float *inp, const float *weight, int B);

#endif /* CONV_GPU_H */
