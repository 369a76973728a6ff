/*
 * model_gpu.c - model_gpu.h: the MLP (784-256-128-10) and the CNN (conv 16, pool, conv 32,
 * pool, 128, 10) on a CUDA device, the layer sequences of model.c's forward and backward passes
 * with layers_gpu.h's device layers and, for the convolutions, conv_gpu.h's cuDNN layers (in
 * builds that found cuDNN: HVDC_HAVE_CUDNN). Plain C against the CUDA runtime; every call
 * checked. The caller's thread.
 */
#include "model_gpu.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers_gpu.h"
#ifdef HVDC_HAVE_CUDNN
#include "conv_gpu.h"
#endif

enum { FC1_W, FC1_B, FC2_W, FC2_B, FC3_W, FC3_B, MLP_NUM_TENSORS };
enum { IN = MODEL_IMAGE_SIZE, H1 = 256, H2 = 128, OUT = MODEL_NUM_CLASSES };
/* the CNN, as model.c: conv1 1->16 on 28x28, pool to 14x14, conv2 16->32, pool to 7x7 */
enum { C1_W, C1_B, C2_W, C2_B, CFC1_W, CFC1_B, CFC2_W, CFC2_B, CNN_NUM_TENSORS };
enum { K1 = 16, K2 = 32, S1 = 28, S2 = 14, S3 = 7, FLAT = K2 * S3 * S3, HID = 128 };

struct model_gpu {
    model_kind kind;
    int device, max_batch, batch;
    gpu_layers *layers;
    size_t num_params;
    float *params, *grads;             // (num_params) each, host layout
    float *tensor[MODEL_MAX_TENSORS];  // into params
    float *dtensor[MODEL_MAX_TENSORS]; // into grads
    float *acts;                       // one allocation for all of:
    float *inp, *h1, *h2, *logits, *probs, *dlogits, *dh2, *dh1; // MLP (B, 784|256|128|10...)
    float *c1, *p1, *c2, *p2, *dp2, *dc2, *dp1, *dc1;             // CNN, (B, channels, H, W)
    int32_t *argmax1, *argmax2;        // CNN pooling winners (B, 16|32, 14|7, 14|7)
#ifdef HVDC_HAVE_CUDNN
    gpu_conv *conv1, *conv2;
#endif
    uint8_t *targets;            // (max_batch)
    float *inp_host;             // (max_batch, 784) pinned staging for the upload
    uint8_t *targets_host;       // (max_batch) pinned
    void *uploaded;              // cudaEvent_t: the staging buffers' last upload is done
    double *loss_sum;            // device sums since the last model_gpu_take_metrics
    unsigned long long *correct;
    char err[512];
};

#define CUDA_OK(mg, call)                                                                    \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            snprintf((mg)->err, sizeof (mg)->err, "%s failed at %s:%d on device %d: %s",     \
                     #call, __FILE__, __LINE__, (mg)->device, cudaGetErrorString(e_));       \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)
#define LAYER_OK(mg, call)                                                                   \
    do {                                                                                     \
        if ((call) != 0) {                                                                   \
            snprintf((mg)->err, sizeof (mg)->err, "%s", gpu_layers_error((mg)->layers));     \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)

/* Activation floats per image: MLP inp, h1, h2, logits, probs, dlogits, dh2, dh1; CNN inp,
 * c1, p1, c2, p2 (= the FC input), h, logits, probs, dlogits, dh, dp2, dc2, dp1, dc1. */
static size_t act_floats(model_kind kind) {
    if (kind == MODEL_MLP) return IN + H1 + H2 + 3 * OUT + H2 + H1;
    size_t c1 = K1 * S1 * S1, p1 = K1 * S2 * S2, c2 = K2 * S2 * S2;
    return IN + c1 + p1 + c2 + FLAT + HID + 3 * OUT + HID + FLAT + c2 + p1 + c1;
}

/* Each activation starts on a 256-byte boundary, as cudaMalloc's own: cuDNN's kernels load in
 * vectors and fail (CUDNN_STATUS_INTERNAL_ERROR, seen on the H100 at batch 13) on buffers that
 * are only 8-byte aligned. */
enum { ALIGN_FLOATS = 64, MAX_ACTS = 24 };
static size_t aligned(size_t floats) { return (floats + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

static int setup(model_gpu *mg, const model *host) {
    size_t B = (size_t)host->max_batch;
    size_t floats = B * act_floats(host->kind) + (size_t)MAX_ACTS * ALIGN_FLOATS;
    CUDA_OK(mg, cudaMalloc((void **)&mg->params, mg->num_params * sizeof(float)));
    CUDA_OK(mg, cudaMalloc((void **)&mg->grads, mg->num_params * sizeof(float)));
    CUDA_OK(mg, cudaMalloc((void **)&mg->acts, floats * sizeof(float)));
    CUDA_OK(mg, cudaMalloc((void **)&mg->targets, B));
    CUDA_OK(mg, cudaMalloc((void **)&mg->loss_sum, sizeof(double)));
    CUDA_OK(mg, cudaMalloc((void **)&mg->correct, sizeof(unsigned long long)));
    CUDA_OK(mg, cudaMallocHost((void **)&mg->inp_host, B * IN * sizeof(float)));
    CUDA_OK(mg, cudaMallocHost((void **)&mg->targets_host, B));
    cudaEvent_t ev = NULL;
    CUDA_OK(mg, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    mg->uploaded = ev;
    float *a = mg->acts;
    mg->inp = a, a += aligned(B * IN);
    if (host->kind == MODEL_MLP) {
        mg->h1 = a, a += aligned(B * H1);
        mg->h2 = a, a += aligned(B * H2);
        mg->logits = a, a += aligned(B * OUT);
        mg->probs = a, a += aligned(B * OUT);
        mg->dlogits = a, a += aligned(B * OUT);
        mg->dh2 = a, a += aligned(B * H2);
        mg->dh1 = a;
    } else {
        mg->c1 = a, a += aligned(B * K1 * S1 * S1);
        mg->p1 = a, a += aligned(B * K1 * S2 * S2);
        mg->c2 = a, a += aligned(B * K2 * S2 * S2);
        mg->p2 = a, a += aligned(B * FLAT);
        mg->h1 = a, a += aligned(B * HID);
        mg->logits = a, a += aligned(B * OUT);
        mg->probs = a, a += aligned(B * OUT);
        mg->dlogits = a, a += aligned(B * OUT);
        mg->dh1 = a, a += aligned(B * HID);
        mg->dp2 = a, a += aligned(B * FLAT);
        mg->dc2 = a, a += aligned(B * K2 * S2 * S2);
        mg->dp1 = a, a += aligned(B * K1 * S2 * S2);
        mg->dc1 = a;
        CUDA_OK(mg, cudaMalloc((void **)&mg->argmax1, B * K1 * S2 * S2 * sizeof(int32_t)));
        CUDA_OK(mg, cudaMalloc((void **)&mg->argmax2, B * FLAT * sizeof(int32_t)));
#ifdef HVDC_HAVE_CUDNN
        void *s = gpu_layers_stream(mg->layers);
        if (gpu_conv_create(&mg->conv1, s, (int)B, 1, S1, S1, K1, mg->err, sizeof mg->err) != 0 ||
            gpu_conv_create(&mg->conv2, s, (int)B, K1, S2, S2, K2, mg->err, sizeof mg->err) != 0)
            return -1;
#endif
    }
    for (int i = 0; i < host->num_tensors; i++) {
        size_t off = (size_t)(host->tensors[i].param - host->params);
        mg->tensor[i] = mg->params + off;
        mg->dtensor[i] = mg->grads + off;
    }
    // blocking copies: creation only; the optimizer's broadcast then orders after them
    CUDA_OK(mg, cudaMemcpy(mg->params, host->params, mg->num_params * sizeof(float),
                           cudaMemcpyHostToDevice));
    CUDA_OK(mg, cudaMemset(mg->grads, 0, mg->num_params * sizeof(float)));
    CUDA_OK(mg, cudaMemset(mg->loss_sum, 0, sizeof(double)));
    CUDA_OK(mg, cudaMemset(mg->correct, 0, sizeof(unsigned long long)));
    return 0;
}

int model_gpu_create(model_gpu **out, const model *host, int device, char *err, size_t len) {
    *out = NULL;
    if (host->kind == MODEL_CNN) {
#ifndef HVDC_HAVE_CUDNN
        snprintf(err, len, "--model cnn --device gpu needs cuDNN, which this build did not find "
                 "(meson looks for cudnn.h and libcudnn beside CUDA, -Dcuda-root); the cnn runs "
                 "on the CPU (--device cpu), the mlp on the GPU");
        return -1;
#endif
    }
    int want = host->kind == MODEL_MLP ? MLP_NUM_TENSORS : CNN_NUM_TENSORS;
    if (host->num_tensors != want) {
        snprintf(err, len, "model_gpu_create: %d tensors, expected %d", host->num_tensors, want);
        return -1;
    }
    model_gpu *mg = calloc(1, sizeof *mg);
    if (mg == NULL) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    mg->kind = host->kind;
    mg->device = device;
    mg->max_batch = host->max_batch;
    mg->num_params = host->num_params;
    if (gpu_layers_create(&mg->layers, device, err, len) != 0) {
        free(mg);
        return -1;
    }
    if (setup(mg, host) != 0) {
        snprintf(err, len, "%s", mg->err);
        model_gpu_free(mg);
        return -1;
    }
    *out = mg;
    return 0;
}

void model_gpu_free(model_gpu *mg) {
    if (mg == NULL) return;
#ifdef HVDC_HAVE_CUDNN
    gpu_conv_free(mg->conv1); // each waits for the stream
    gpu_conv_free(mg->conv2);
#endif
    gpu_layers_free(mg->layers); // waits for the stream
    cudaFree(mg->argmax1);
    cudaFree(mg->argmax2);
    cudaFree(mg->params);
    cudaFree(mg->grads);
    cudaFree(mg->acts);
    cudaFree(mg->targets);
    cudaFree(mg->loss_sum);
    cudaFree(mg->correct);
    cudaFreeHost(mg->inp_host);
    cudaFreeHost(mg->targets_host);
    if (mg->uploaded) cudaEventDestroy((cudaEvent_t)mg->uploaded);
    free(mg);
}

float *model_gpu_param(model_gpu *mg, int i) { return mg->tensor[i]; }
float *model_gpu_grad(model_gpu *mg, int i) { return mg->dtensor[i]; }
void *model_gpu_stream(model_gpu *mg) { return gpu_layers_stream(mg->layers); }
const char *model_gpu_error(const model_gpu *mg) { return mg->err; }

static int mlp_forward(model_gpu *mg, int B) {
    gpu_layers *g = mg->layers;
    LAYER_OK(mg, gpu_linear_forward(g, mg->h1, mg->inp, mg->tensor[FC1_W], mg->tensor[FC1_B], B,
                                    IN, H1));
    LAYER_OK(mg, gpu_relu_forward(g, mg->h1, mg->h1, (size_t)B * H1));
    LAYER_OK(mg, gpu_linear_forward(g, mg->h2, mg->h1, mg->tensor[FC2_W], mg->tensor[FC2_B], B,
                                    H1, H2));
    LAYER_OK(mg, gpu_relu_forward(g, mg->h2, mg->h2, (size_t)B * H2));
    LAYER_OK(mg, gpu_linear_forward(g, mg->logits, mg->h2, mg->tensor[FC3_W], mg->tensor[FC3_B],
                                    B, H2, OUT));
    LAYER_OK(mg, gpu_softmax_xent_forward(g, mg->probs, mg->loss_sum, mg->correct, mg->logits,
                                          mg->targets, B, OUT));
    return 0;
}

#ifdef HVDC_HAVE_CUDNN
#define CONV_OK(mg, conv, call)                                                              \
    do {                                                                                     \
        if ((call) != 0) {                                                                   \
            snprintf((mg)->err, sizeof (mg)->err, "%s", gpu_conv_error(conv));               \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)
#endif

/* model.c's cnn_forward: conv, ReLU, pool, conv, ReLU, pool, linear, ReLU, linear, softmax */
static int cnn_forward(model_gpu *mg, int B) {
#ifdef HVDC_HAVE_CUDNN
    gpu_layers *g = mg->layers;
    float *const *t = mg->tensor;
    CONV_OK(mg, mg->conv1, gpu_conv_forward(mg->conv1, mg->c1, mg->inp, t[C1_W], t[C1_B], B));
    LAYER_OK(mg, gpu_relu_forward(g, mg->c1, mg->c1, (size_t)B * K1 * S1 * S1));
    LAYER_OK(mg, gpu_maxpool2_forward(g, mg->p1, mg->argmax1, mg->c1, B, K1, S1, S1));
    CONV_OK(mg, mg->conv2, gpu_conv_forward(mg->conv2, mg->c2, mg->p1, t[C2_W], t[C2_B], B));
    LAYER_OK(mg, gpu_relu_forward(g, mg->c2, mg->c2, (size_t)B * K2 * S2 * S2));
    LAYER_OK(mg, gpu_maxpool2_forward(g, mg->p2, mg->argmax2, mg->c2, B, K2, S2, S2));
    LAYER_OK(mg, gpu_linear_forward(g, mg->h1, mg->p2, t[CFC1_W], t[CFC1_B], B, FLAT, HID));
    LAYER_OK(mg, gpu_relu_forward(g, mg->h1, mg->h1, (size_t)B * HID));
    LAYER_OK(mg, gpu_linear_forward(g, mg->logits, mg->h1, t[CFC2_W], t[CFC2_B], B, HID, OUT));
    LAYER_OK(mg, gpu_softmax_xent_forward(g, mg->probs, mg->loss_sum, mg->correct, mg->logits,
                                          mg->targets, B, OUT));
    return 0;
#else
    (void)B;
    snprintf(mg->err, sizeof mg->err, "built without cuDNN");
    return -1;
#endif
}

int model_gpu_forward(model_gpu *mg, const float *inp, const uint8_t *targets, int B) {
    cudaStream_t s = gpu_layers_stream(mg->layers);
    if (B < 1 || B > mg->max_batch) {
        snprintf(mg->err, sizeof mg->err, "batch %d outside 1..%d", B, mg->max_batch);
        return -1;
    }
    mg->batch = B;
    // Through pinned staging, so the copy is truly asynchronous. The staging buffers are
    // reused only after their previous upload finished. The optimizer's step waits for the
    // all-reduces on the stream, not the host, so the host may run ahead of the device: this
    // wait is what keeps it at most about a step ahead.
    CUDA_OK(mg, cudaEventSynchronize((cudaEvent_t)mg->uploaded));
    memcpy(mg->inp_host, inp, (size_t)B * IN * sizeof(float));
    memcpy(mg->targets_host, targets, (size_t)B);
    CUDA_OK(mg, cudaMemcpyAsync(mg->inp, mg->inp_host, (size_t)B * IN * sizeof(float),
                                cudaMemcpyHostToDevice, s));
    CUDA_OK(mg, cudaMemcpyAsync(mg->targets, mg->targets_host, (size_t)B,
                                cudaMemcpyHostToDevice, s));
    CUDA_OK(mg, cudaEventRecord((cudaEvent_t)mg->uploaded, s));
    return mg->kind == MODEL_MLP ? mlp_forward(mg, B) : cnn_forward(mg, B);
}

static int mlp_backward(model_gpu *mg, model_grad_ready_fn ready, void *ctx) {
    gpu_layers *g = mg->layers;
    int B = mg->batch;
    LAYER_OK(mg, gpu_softmax_xent_backward(g, mg->dlogits, mg->probs, mg->targets,
                                           1.0f / (float)B, B, OUT));
    LAYER_OK(mg, gpu_linear_backward(g, mg->dh2, mg->dtensor[FC3_W], mg->dtensor[FC3_B],
                                     mg->dlogits, mg->h2, mg->tensor[FC3_W], B, H2, OUT));
    if (ready) { ready(ctx, FC3_W); ready(ctx, FC3_B); }
    LAYER_OK(mg, gpu_relu_backward(g, mg->dh2, mg->dh2, mg->h2, (size_t)B * H2));
    LAYER_OK(mg, gpu_linear_backward(g, mg->dh1, mg->dtensor[FC2_W], mg->dtensor[FC2_B],
                                     mg->dh2, mg->h1, mg->tensor[FC2_W], B, H1, H2));
    if (ready) { ready(ctx, FC2_W); ready(ctx, FC2_B); }
    LAYER_OK(mg, gpu_relu_backward(g, mg->dh1, mg->dh1, mg->h1, (size_t)B * H1));
    LAYER_OK(mg, gpu_linear_backward(g, NULL, mg->dtensor[FC1_W], mg->dtensor[FC1_B], mg->dh1,
                                     mg->inp, mg->tensor[FC1_W], B, IN, H1));
    if (ready) { ready(ctx, FC1_W); ready(ctx, FC1_B); }
    return 0;
}

/* model.c's cnn_backward; each layer's gradients are handed on as soon as they are queued */
static int cnn_backward(model_gpu *mg, model_grad_ready_fn ready, void *ctx) {
#ifdef HVDC_HAVE_CUDNN
    gpu_layers *g = mg->layers;
    float *const *t = mg->tensor, *const *d = mg->dtensor;
    int B = mg->batch;
    LAYER_OK(mg, gpu_softmax_xent_backward(g, mg->dlogits, mg->probs, mg->targets,
                                           1.0f / (float)B, B, OUT));
    LAYER_OK(mg, gpu_linear_backward(g, mg->dh1, d[CFC2_W], d[CFC2_B], mg->dlogits, mg->h1,
                                     t[CFC2_W], B, HID, OUT));
    if (ready) { ready(ctx, CFC2_W); ready(ctx, CFC2_B); }
    LAYER_OK(mg, gpu_relu_backward(g, mg->dh1, mg->dh1, mg->h1, (size_t)B * HID));
    LAYER_OK(mg, gpu_linear_backward(g, mg->dp2, d[CFC1_W], d[CFC1_B], mg->dh1, mg->p2,
                                     t[CFC1_W], B, FLAT, HID));
    if (ready) { ready(ctx, CFC1_W); ready(ctx, CFC1_B); }
    LAYER_OK(mg, gpu_maxpool2_backward(g, mg->dc2, mg->dp2, mg->argmax2, B, K2, S2, S2));
    LAYER_OK(mg, gpu_relu_backward(g, mg->dc2, mg->dc2, mg->c2, (size_t)B * K2 * S2 * S2));
    CONV_OK(mg, mg->conv2, gpu_conv_backward(mg->conv2, mg->dp1, d[C2_W], d[C2_B], mg->dc2,
                                             mg->p1, t[C2_W], B));
    if (ready) { ready(ctx, C2_W); ready(ctx, C2_B); }
    LAYER_OK(mg, gpu_maxpool2_backward(g, mg->dc1, mg->dp1, mg->argmax1, B, K1, S1, S1));
    LAYER_OK(mg, gpu_relu_backward(g, mg->dc1, mg->dc1, mg->c1, (size_t)B * K1 * S1 * S1));
    CONV_OK(mg, mg->conv1, gpu_conv_backward(mg->conv1, NULL, d[C1_W], d[C1_B], mg->dc1,
                                             mg->inp, t[C1_W], B));
    if (ready) { ready(ctx, C1_W); ready(ctx, C1_B); }
    return 0;
#else
    (void)ready, (void)ctx;
    snprintf(mg->err, sizeof mg->err, "built without cuDNN");
    return -1;
#endif
}

int model_gpu_backward(model_gpu *mg, model_grad_ready_fn ready, void *ctx) {
    return mg->kind == MODEL_MLP ? mlp_backward(mg, ready, ctx) : cnn_backward(mg, ready, ctx);
}

int model_gpu_take_metrics(model_gpu *mg, double *loss_sum, long *correct) {
    cudaStream_t s = gpu_layers_stream(mg->layers);
    double l = 0.0;
    unsigned long long c = 0;
    CUDA_OK(mg, cudaMemcpyAsync(&l, mg->loss_sum, sizeof l, cudaMemcpyDeviceToHost, s));
    CUDA_OK(mg, cudaMemcpyAsync(&c, mg->correct, sizeof c, cudaMemcpyDeviceToHost, s));
    CUDA_OK(mg, cudaMemsetAsync(mg->loss_sum, 0, sizeof(double), s));
    CUDA_OK(mg, cudaMemsetAsync(mg->correct, 0, sizeof(unsigned long long), s));
    CUDA_OK(mg, cudaStreamSynchronize(s));
    *loss_sum = l;
    *correct = (long)c;
    return 0;
}

int model_gpu_download(model_gpu *mg, model *host) {
    cudaStream_t s = gpu_layers_stream(mg->layers);
    CUDA_OK(mg, cudaMemcpyAsync(host->params, mg->params, mg->num_params * sizeof(float),
                                cudaMemcpyDeviceToHost, s));
    CUDA_OK(mg, cudaStreamSynchronize(s));
    return 0;
}
