/*
 * model_gpu.c - model_gpu.h: the MLP (784-256-128-10) on a CUDA device, the layer sequence of
 * model.c's mlp_forward/mlp_backward with layers_gpu.h's device layers. Plain C against the
 * CUDA runtime; every call checked. The caller's thread.
 */
#include "model_gpu.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers_gpu.h"

enum { FC1_W, FC1_B, FC2_W, FC2_B, FC3_W, FC3_B, NUM_TENSORS };
enum { IN = MODEL_IMAGE_SIZE, H1 = 256, H2 = 128, OUT = MODEL_NUM_CLASSES };

struct model_gpu {
    int device, max_batch, batch;
    gpu_layers *layers;
    size_t num_params;
    float *params, *grads;       // (num_params) each, host layout
    float *tensor[NUM_TENSORS];  // into params
    float *dtensor[NUM_TENSORS]; // into grads
    float *acts;                 // one allocation for all of:
    float *inp, *h1, *h2, *logits, *probs, *dlogits, *dh2, *dh1; // (B, 784|256|128|10...)
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

static int setup(model_gpu *mg, const model *host) {
    size_t B = (size_t)host->max_batch;
    size_t floats = B * (IN + H1 + H2 + 3 * OUT + H2 + H1);
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
    mg->inp = a, a += B * IN;
    mg->h1 = a, a += B * H1;
    mg->h2 = a, a += B * H2;
    mg->logits = a, a += B * OUT;
    mg->probs = a, a += B * OUT;
    mg->dlogits = a, a += B * OUT;
    mg->dh2 = a, a += B * H2;
    mg->dh1 = a;
    for (int i = 0; i < NUM_TENSORS; i++) {
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
    if (host->kind != MODEL_MLP || host->num_tensors != NUM_TENSORS) {
        snprintf(err, len, "--device gpu runs the mlp model only (the cnn runs on the CPU)");
        return -1;
    }
    model_gpu *mg = calloc(1, sizeof *mg);
    if (mg == NULL) {
        snprintf(err, len, "out of memory");
        return -1;
    }
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
    gpu_layers_free(mg->layers); // waits for the stream
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

int model_gpu_forward(model_gpu *mg, const float *inp, const uint8_t *targets, int B) {
    cudaStream_t s = gpu_layers_stream(mg->layers);
    gpu_layers *g = mg->layers;
    if (B < 1 || B > mg->max_batch) {
        snprintf(mg->err, sizeof mg->err, "batch %d outside 1..%d", B, mg->max_batch);
        return -1;
    }
    mg->batch = B;
    // Through pinned staging, so the copy is truly asynchronous. The staging buffers are
    // reused only after their previous upload finished: that event fired long ago in practice
    // (a whole step, whose all-reduces waited for the backward, lies between), so the wait is
    // only a check, not a stall.
    CUDA_OK(mg, cudaEventSynchronize((cudaEvent_t)mg->uploaded));
    memcpy(mg->inp_host, inp, (size_t)B * IN * sizeof(float));
    memcpy(mg->targets_host, targets, (size_t)B);
    CUDA_OK(mg, cudaMemcpyAsync(mg->inp, mg->inp_host, (size_t)B * IN * sizeof(float),
                                cudaMemcpyHostToDevice, s));
    CUDA_OK(mg, cudaMemcpyAsync(mg->targets, mg->targets_host, (size_t)B,
                                cudaMemcpyHostToDevice, s));
    CUDA_OK(mg, cudaEventRecord((cudaEvent_t)mg->uploaded, s));
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

int model_gpu_backward(model_gpu *mg, model_grad_ready_fn ready, void *ctx) {
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
