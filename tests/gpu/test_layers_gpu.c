/*
 * test_layers_gpu.c - examples/train/layers_gpu.h (cuBLAS and kernels) against examples/train/layers.c on
 * the CPU (itself checked against finite differences by tests/unit/test_layers.c): linear
 * forward/backward, ReLU forward/backward and softmax-cross-entropy forward/backward on
 * index-dependent data, shapes that are not multiples of anything. Prints
 * "<layer> TENSOR OK, maxdiff = ..." per tensor; tolerance 1e-4 relative (the sums run in
 * another order). Without a visible CUDA device it prints SKIPPED and exits 77.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "layers.h"
#include "layers_gpu.h"

static int failures = 0;

#define CUDA_MUST(call)                                                                      \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
                    cudaGetErrorString(e_));                                                 \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define LAYER_MUST(g, call)                                                                  \
    do {                                                                                     \
        if ((call) != 0) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, gpu_layers_error(g));         \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* Device copy of h (n floats; NULL: uninitialised). The layers compute on a non-blocking
 * stream, which is not ordered after the legacy stream's copies and memsets (a pageable copy
 * may still be in flight when cudaMemcpy returns): every upload ends with a device sync. */
static float *up(const float *h, size_t n) {
    float *d;
    CUDA_MUST(cudaMalloc((void **)&d, n * sizeof(float)));
    if (h) CUDA_MUST(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_MUST(cudaDeviceSynchronize());
    return d;
}

/* Waits for g's stream, copies d back and compares with want. */
static void compare(gpu_layers *g, const char *label, const float *d, const float *want,
                    size_t n) {
    float *got = malloc(n * sizeof(float));
    CUDA_MUST(cudaStreamSynchronize(gpu_layers_stream(g)));
    CUDA_MUST(cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    double maxdiff = 0.0;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - want[i]);
        maxdiff = fmax(maxdiff, diff);
        if (diff > 1e-4 * (1.0 + fabs(want[i]))) ok = 0;
    }
    printf("%-22s %s, maxdiff = %g\n", label, ok ? "TENSOR OK" : "MISMATCH", maxdiff);
    failures += !ok;
    free(got);
}

static void fill(float *a, size_t n, int salt) {
    for (size_t i = 0; i < n; i++) a[i] = (float)((int)((i * 31 + salt * 17) % 53) - 26) / 32.0f;
}

int main(void) {
    char why[512];
    gpu_layers *g = NULL;
    if (gpu_layers_create(&g, 0, why, sizeof why) != 0) {
        printf("SKIPPED: %s\n", why);
        return 77;
    }
    enum { B = 37, C = 83, OC = 29, V = 10 };
    float inp[B * C], w[OC * C], bias[OC], out[B * OC], dout[B * OC];
    float dinp[B * C], dw[OC * C], db[OC], relu_out[B * OC], drelu[B * OC];
    fill(inp, B * C, 1), fill(w, OC * C, 2), fill(bias, OC, 3), fill(dout, B * OC, 4);
    float *d_inp = up(inp, B * C), *d_w = up(w, OC * C), *d_b = up(bias, OC);
    float *d_out = up(NULL, B * OC), *d_dout = up(dout, B * OC), *d_dinp = up(NULL, B * C);
    float *d_dw = up(NULL, OC * C), *d_db = up(NULL, OC), *d_r = up(NULL, B * OC);

    linear_forward(out, inp, w, bias, B, C, OC);
    LAYER_MUST(g, gpu_linear_forward(g, d_out, d_inp, d_w, d_b, B, C, OC));
    compare(g, "linear out", d_out, out, B * OC);
    linear_backward(dinp, dw, db, dout, inp, w, B, C, OC);
    LAYER_MUST(g, gpu_linear_backward(g, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B, C, OC));
    compare(g, "linear dinp", d_dinp, dinp, B * C);
    compare(g, "linear dweight", d_dw, dw, OC * C);
    compare(g, "linear dbias", d_db, db, OC);

    relu_forward(relu_out, out, B * OC);
    LAYER_MUST(g, gpu_relu_forward(g, d_r, d_out, B * OC));
    compare(g, "relu out", d_r, relu_out, B * OC);
    relu_backward(drelu, dout, relu_out, B * OC);
    LAYER_MUST(g, gpu_relu_backward(g, d_dinp, d_dout, d_r, B * OC));
    compare(g, "relu dinp", d_dinp, drelu, B * OC);

    float logits[B * V], probs[B * V], dlogits[B * V];
    uint8_t targets[B];
    fill(logits, B * V, 5);
    for (int b = 0; b < B; b++) targets[b] = (uint8_t)((b * 7) % V);
    double loss = softmax_xent_forward(probs, logits, targets, B, V);
    long correct = 0;
    for (int b = 0; b < B; b++) {
        int best = 0;
        for (int v = 1; v < V; v++) best = logits[b * V + v] > logits[b * V + best] ? v : best;
        correct += best == targets[b];
    }
    float *d_logits = up(logits, B * V), *d_probs = up(NULL, B * V), *d_dl = up(NULL, B * V);
    uint8_t *d_t;
    double *d_loss, got_loss = 0.0;
    unsigned long long *d_correct, got_correct = 0;
    CUDA_MUST(cudaMalloc((void **)&d_t, B));
    CUDA_MUST(cudaMemcpy(d_t, targets, B, cudaMemcpyHostToDevice));
    CUDA_MUST(cudaMalloc((void **)&d_loss, sizeof(double)));
    CUDA_MUST(cudaMalloc((void **)&d_correct, sizeof(unsigned long long)));
    CUDA_MUST(cudaMemset(d_loss, 0, sizeof(double)));
    CUDA_MUST(cudaMemset(d_correct, 0, sizeof(unsigned long long)));
    CUDA_MUST(cudaDeviceSynchronize()); /* the uploads before the layer's stream reads them */
    LAYER_MUST(g, gpu_softmax_xent_forward(g, d_probs, d_loss, d_correct, d_logits, d_t, B, V));
    compare(g, "softmax probs", d_probs, probs, B * V);
    CUDA_MUST(cudaMemcpy(&got_loss, d_loss, sizeof got_loss, cudaMemcpyDeviceToHost));
    CUDA_MUST(cudaMemcpy(&got_correct, d_correct, sizeof got_correct, cudaMemcpyDeviceToHost));
    int ok = fabs(got_loss - loss) <= 1e-4 * (1.0 + fabs(loss)) && (long)got_correct == correct;
    printf("%-22s %s, loss %.6f vs %.6f, correct %llu vs %ld\n", "xent loss, correct",
           ok ? "OK" : "MISMATCH", got_loss, loss, got_correct, correct);
    failures += !ok;
    softmax_xent_backward(dlogits, probs, targets, 1.0f / B, B, V);
    LAYER_MUST(g, gpu_softmax_xent_backward(g, d_dl, d_probs, d_t, 1.0f / B, B, V));
    compare(g, "xent dlogits", d_dl, dlogits, B * V);

    float *frees[] = {d_inp, d_w, d_b, d_out, d_dout, d_dinp, d_dw, d_db, d_r, d_logits,
                      d_probs, d_dl};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) cudaFree(frees[i]);
    cudaFree(d_t), cudaFree(d_loss), cudaFree(d_correct);
    gpu_layers_free(g);
    printf("test_layers_gpu: %s\n", failures ? "FAIL" : "OK");
    return failures ? 1 : 0;
}
