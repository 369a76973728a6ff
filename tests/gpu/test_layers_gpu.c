/*
 * test_layers_gpu.c - examples/train's device layers (layers_gpu.h: cuBLAS and kernels;
 * conv_gpu.h: cuDNN) against layers.c on the CPU (itself checked against finite differences by
 * tests/unit/test_layers.c): linear, ReLU, softmax-cross-entropy, 2x2 max pooling and, where the
 * build has cuDNN, the 3x3 convolution, forward and backward, on index-dependent data and
 * shapes that are not multiples of anything; then one whole training step (forward, loss,
 * backward) of each model, model_gpu.h against model.h from the same parameters and batch.
 * Prints "<layer> TENSOR OK, maxdiff = ..." per tensor; tolerance 1e-4 relative (the sums run
 * in another order; 2e-4 for a whole step). Without a visible CUDA device it prints SKIPPED
 * and exits 77.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "layers_gpu.h"
#include "model.h"
#include "model_gpu.h"
#ifdef HVDC_HAVE_CUDNN
#include "conv_gpu.h"
#endif

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
static double tolerance = 1e-4;

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
        if (diff > tolerance * (1.0 + fabs(want[i]))) ok = 0;
    }
    printf("%-22s %s, maxdiff = %g\n", label, ok ? "TENSOR OK" : "MISMATCH", maxdiff);
    failures += !ok;
    free(got);
}

static void fill(float *a, size_t n, int salt) {
    for (size_t i = 0; i < n; i++) a[i] = (float)((int)((i * 31 + salt * 17) % 53) - 26) / 32.0f;
}

/* 2x2 max pooling, forward and backward, on (B, C, H, W) with many ties (ReLU'd data) */
static void test_pool(gpu_layers *g) {
    enum { B = 3, C = 5, H = 14, W = 10, N = B * C * H * W, NO = N / 4 };
    float *inp = malloc(N * sizeof(float)), *dinp = malloc(N * sizeof(float));
    float out[NO], dout[NO];
    int32_t argmax[NO];
    fill(inp, N, 6);
    relu_forward(inp, inp, N); /* zeros: ties, where the first of equals must win */
    fill(dout, NO, 7);
    float *d_inp = up(inp, N), *d_out = up(NULL, NO), *d_dout = up(dout, NO), *d_dinp = up(NULL, N);
    int32_t *d_arg;
    CUDA_MUST(cudaMalloc((void **)&d_arg, NO * sizeof(int32_t)));
    maxpool2_forward(out, argmax, inp, B, C, H, W);
    LAYER_MUST(g, gpu_maxpool2_forward(g, d_out, d_arg, d_inp, B, C, H, W));
    compare(g, "maxpool out", d_out, out, NO);
    int32_t got[NO];
    CUDA_MUST(cudaMemcpy(got, d_arg, sizeof got, cudaMemcpyDeviceToHost));
    int same = memcmp(got, argmax, sizeof got) == 0;
    printf("%-22s %s\n", "maxpool argmax", same ? "TENSOR OK" : "MISMATCH");
    failures += !same;
    maxpool2_backward(dinp, dout, argmax, B, C, H, W);
    LAYER_MUST(g, gpu_maxpool2_backward(g, d_dinp, d_dout, d_arg, B, C, H, W));
    compare(g, "maxpool dinp", d_dinp, dinp, N);
    cudaFree(d_inp), cudaFree(d_out), cudaFree(d_dout), cudaFree(d_dinp), cudaFree(d_arg);
    free(inp), free(dinp);
}

#ifdef HVDC_HAVE_CUDNN
/* the 3x3 convolution through cuDNN against layers.c's im2col + sgemm, at two batch sizes
 * (the second re-sets the descriptors, as the last batch of an epoch does) */
static void test_conv(gpu_layers *g) {
    enum { BMAX = 5, C = 3, H = 9, W = 7, OC = 4 };
    const size_t n_in = (size_t)BMAX * C * H * W, n_out = (size_t)BMAX * OC * H * W;
    float *inp = malloc(n_in * sizeof(float)), *out = malloc(n_out * sizeof(float));
    float *dout = malloc(n_out * sizeof(float)), *dinp = malloc(n_in * sizeof(float));
    float *col = malloc((size_t)BMAX * C * 9 * H * W * sizeof(float));
    float *dcol = malloc((size_t)C * 9 * H * W * sizeof(float));
    float w[OC * C * 9], bias[OC], dw[OC * C * 9], db[OC];
    fill(inp, n_in, 8), fill(w, OC * C * 9, 9), fill(bias, OC, 10), fill(dout, n_out, 11);
    float *d_inp = up(inp, n_in), *d_w = up(w, OC * C * 9), *d_b = up(bias, OC);
    float *d_out = up(NULL, n_out), *d_dout = up(dout, n_out), *d_dinp = up(NULL, n_in);
    float *d_dw = up(NULL, OC * C * 9), *d_db = up(NULL, OC);
    char why[512];
    gpu_conv *conv = NULL;
    if (gpu_conv_create(&conv, gpu_layers_stream(g), BMAX, C, H, W, OC, why, sizeof why) != 0) {
        printf("%-22s MISMATCH: %s\n", "conv create", why);
        failures++;
        return;
    }
    const int batches[2] = {BMAX, 2};
    for (int k = 0; k < 2; k++) {
        int B = batches[k];
        char label[64];
        conv3x3_forward(out, col, inp, w, bias, B, C, H, W, OC);
        if (gpu_conv_forward(conv, d_out, d_inp, d_w, d_b, B) != 0) {
            printf("conv forward: %s\n", gpu_conv_error(conv));
            failures++;
            break;
        }
        snprintf(label, sizeof label, "conv out B=%d", B);
        compare(g, label, d_out, out, (size_t)B * OC * H * W);
        conv3x3_backward(dinp, dw, db, dcol, dout, col, w, B, C, H, W, OC);
        if (gpu_conv_backward(conv, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B) != 0) {
            printf("conv backward: %s\n", gpu_conv_error(conv));
            failures++;
            break;
        }
        snprintf(label, sizeof label, "conv dinp B=%d", B);
        compare(g, label, d_dinp, dinp, (size_t)B * C * H * W);
        snprintf(label, sizeof label, "conv dweight B=%d", B);
        compare(g, label, d_dw, dw, OC * C * 9);
        snprintf(label, sizeof label, "conv dbias B=%d", B);
        compare(g, label, d_db, db, OC);
    }
    gpu_conv_free(conv);
    float *frees[] = {d_inp, d_w, d_b, d_out, d_dout, d_dinp, d_dw, d_db};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) cudaFree(frees[i]);
    free(inp), free(out), free(dout), free(dinp), free(col), free(dcol);
}
#endif

/* One training step of a whole model on the GPU against the CPU: same parameters, batch and
 * labels; the loss, the correct count and every gradient. */
static void test_model_step(gpu_layers *g, model_kind kind) {
    enum { B = 13 };
    model host;
    if (model_init(&host, kind, B) != 0) {
        printf("model_init failed\n");
        failures++;
        return;
    }
    model_init_params(&host, 42);
    float *inp = malloc((size_t)B * MODEL_IMAGE_SIZE * sizeof(float));
    uint8_t targets[B];
    fill(inp, (size_t)B * MODEL_IMAGE_SIZE, 12);
    for (int b = 0; b < B; b++) targets[b] = (uint8_t)((b * 3) % MODEL_NUM_CLASSES);
    char why[512];
    model_gpu *mg = NULL;
    if (model_gpu_create(&mg, &host, 0, why, sizeof why) != 0) {
        printf("%s step: MISMATCH: %s\n", model_kind_name(kind), why);
        failures++;
        model_free(&host);
        free(inp);
        return;
    }
    long correct = 0, got_correct = 0;
    double loss = model_forward(&host, inp, targets, B, &correct), got_loss = 0.0;
    model_backward(&host, NULL, NULL);
    if (model_gpu_forward(mg, inp, targets, B) != 0 || model_gpu_backward(mg, NULL, NULL) != 0 ||
        model_gpu_take_metrics(mg, &got_loss, &got_correct) != 0) {
        printf("%s step: %s\n", model_kind_name(kind), model_gpu_error(mg));
        failures++;
    } else {
        int ok = fabs(got_loss - loss) <= 2e-4 * (1.0 + fabs(loss)) && got_correct == correct;
        printf("%s step loss, correct %s, loss %.6f vs %.6f, correct %ld vs %ld\n",
               model_kind_name(kind), ok ? "OK" : "MISMATCH", got_loss, loss, got_correct, correct);
        failures += !ok;
        tolerance = 2e-4;
        for (int i = 0; i < host.num_tensors; i++) {
            char label[64];
            snprintf(label, sizeof label, "%s %s grad", model_kind_name(kind), host.tensors[i].name);
            compare(g, label, model_gpu_grad(mg, i), host.tensors[i].grad, host.tensors[i].count);
        }
        tolerance = 1e-4;
    }
    model_gpu_free(mg);
    model_free(&host);
    free(inp);
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

    test_pool(g);
#ifdef HVDC_HAVE_CUDNN
    test_conv(g);
#else
    printf("conv (cuDNN)           not tested: this build has no cuDNN\n");
#endif
    test_model_step(g, MODEL_MLP);
#ifdef HVDC_HAVE_CUDNN
    test_model_step(g, MODEL_CNN);
#endif

    float *frees[] = {d_inp, d_w, d_b, d_out, d_dout, d_dinp, d_dw, d_db, d_r, d_logits,
                      d_probs, d_dl};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) cudaFree(frees[i]);
    cudaFree(d_t), cudaFree(d_loss), cudaFree(d_correct);
    gpu_layers_free(g);
    printf("test_layers_gpu: %s\n", failures ? "FAIL" : "OK");
    return failures ? 1 : 0;
}
