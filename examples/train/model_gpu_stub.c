/*
 * model_gpu_stub.c - model_gpu.h in a build without CUDA: model_gpu_create says so; the rest
 * is never reached (there is no model_gpu to call it with).
 */
#include "model_gpu.h"

#include <stdio.h>

#define NO_GPU "examples/train was built without CUDA (libhvdc's GPU backend and cuBLAS were " \
               "not found); --device gpu needs a build configured where CUDA, NCCL and cuBLAS " \
               "are installed"

int model_gpu_create(model_gpu **out, const model *host, int device, char *err, size_t len) {
    (void)host, (void)device;
    *out = NULL;
    snprintf(err, len, "%s", NO_GPU);
    return -1;
}

void model_gpu_free(model_gpu *mg) { (void)mg; }
float *model_gpu_param(model_gpu *mg, int i) { (void)mg, (void)i; return NULL; }
float *model_gpu_grad(model_gpu *mg, int i) { (void)mg, (void)i; return NULL; }
void *model_gpu_stream(model_gpu *mg) { (void)mg; return NULL; }

int model_gpu_forward(model_gpu *mg, const float *inp, const uint8_t *targets, int B) {
    (void)mg, (void)inp, (void)targets, (void)B;
    return -1;
}

int model_gpu_backward(model_gpu *mg, model_grad_ready_fn grad_ready, void *ctx) {
    (void)mg, (void)grad_ready, (void)ctx;
    return -1;
}

int model_gpu_take_metrics(model_gpu *mg, double *loss_sum, long *correct) {
    (void)mg, (void)loss_sum, (void)correct;
    return -1;
}

int model_gpu_download(model_gpu *mg, model *host) {
    (void)mg, (void)host;
    return -1;
}

const char *model_gpu_error(const model_gpu *mg) {
    (void)mg;
    return NO_GPU;
}
