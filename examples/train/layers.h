/*
 * layers.h - forward and backward passes of the layers the example models are built from,
 * in float32 on the CPU, with the matrix products done by BLAS (cblas_sgemm).
 *
 * defines: linear_forward, linear_backward, relu_forward, relu_backward,
 *          softmax_xent_forward, softmax_xent_backward,
 *          conv3x3_forward, conv3x3_backward, maxpool2_forward, maxpool2_backward
 *
 * Conventions. Tensors are row-major; shapes are written beside each argument, with B the
 * batch, C input channels or features, OC output ones, H x W an image. Backward functions
 * OVERWRITE the parameter gradients (they do not accumulate), so no zeroing is needed between
 * steps. A NULL dinp skips the gradient with respect to the input (for the first layer).
 * None of these functions allocates; scratch space is passed in by the caller.
 * tests/unit/test_layers.c checks every backward against finite differences.
 */
#ifndef LAYERS_H
#define LAYERS_H

#include <stdint.h>

/* out = inp @ weight^T + bias */
void linear_forward(float *out,          // (B, OC)
                    const float *inp,    // (B, C)
                    const float *weight, // (OC, C)
                    const float *bias,   // (OC)
                    int B, int C, int OC);
void linear_backward(float *dinp,          // (B, C) or NULL
                     float *dweight,       // (OC, C)
                     float *dbias,         // (OC)
                     const float *dout,    // (B, OC)
                     const float *inp,     // (B, C)
                     const float *weight,  // (OC, C)
                     int B, int C, int OC);

/* out = max(inp, 0); out may equal inp. */
void relu_forward(float *out, const float *inp, int N); // (N) each
/* dinp = dout where out > 0, else 0; dinp may equal dout. */
void relu_backward(float *dinp, const float *dout, const float *out, int N); // (N) each

/* Softmax over each row of logits, then cross-entropy against the target class.
 * Returns the SUM over the batch of -log probs[b][targets[b]] (the caller divides). */
double softmax_xent_forward(float *probs,          // (B, V)
                            const float *logits,   // (B, V)
                            const uint8_t *targets, // (B) each in 0..V-1
                            int B, int V);
/* dlogits = scale * (probs - onehot(targets)); scale = 1/B for the mean loss. */
void softmax_xent_backward(float *dlogits,        // (B, V)
                           const float *probs,    // (B, V)
                           const uint8_t *targets, // (B)
                           float scale, int B, int V);

/* 3x3 convolution, stride 1, zero padding 1 (output H x W like the input), by im2col: each
 * image's 3x3 neighbourhoods are unrolled into the rows of col, and one sgemm does
 * out_b (OC, H*W) = weight (OC, C*9) @ col_b (C*9, H*W). col is kept for the backward pass. */
void conv3x3_forward(float *out,          // (B, OC, H, W)
                     float *col,          // (B, C*9, H*W) scratch, read again by backward
                     const float *inp,    // (B, C, H, W)
                     const float *weight, // (OC, C*9), i.e. (OC, C, 3, 3)
                     const float *bias,   // (OC)
                     int B, int C, int H, int W, int OC);
void conv3x3_backward(float *dinp,         // (B, C, H, W) or NULL
                      float *dweight,      // (OC, C*9)
                      float *dbias,        // (OC)
                      float *dcol,         // (C*9, H*W) scratch (unused if dinp is NULL)
                      const float *dout,   // (B, OC, H, W)
                      const float *col,    // (B, C*9, H*W) from conv3x3_forward
                      const float *weight, // (OC, C*9)
                      int B, int C, int H, int W, int OC);

/* 2x2 max pooling, stride 2; H and W must be even. argmax records, for each output, the index
 * of the winning input within the (B, C, H, W) tensor, for the backward pass. */
void maxpool2_forward(float *out,       // (B, C, H/2, W/2)
                      int32_t *argmax,  // (B, C, H/2, W/2)
                      const float *inp, // (B, C, H, W)
                      int B, int C, int H, int W);
void maxpool2_backward(float *dinp,            // (B, C, H, W)
                       const float *dout,      // (B, C, H/2, W/2)
                       const int32_t *argmax,  // (B, C, H/2, W/2)
                       int B, int C, int H, int W);

#endif /* LAYERS_H */
