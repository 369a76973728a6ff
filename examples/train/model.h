/*
 * model.h - the two image classifiers examples/train trains, built from layers.h: a multilayer
 * perceptron and a small convolutional network, for 28x28 grey images and 10 classes.
 *
 * defines: model_init, model_init_params, model_forward, model_backward, model_free,
 *          model_kind_parse, model_kind_name
 *
 *   mlp: x (B, 784) -> linear 256 -> ReLU -> linear 128 -> ReLU -> linear 10 -> softmax
 *   cnn: x (B, 1, 28, 28) -> conv3x3 16 -> ReLU -> maxpool -> (B, 16, 14, 14)
 *        -> conv3x3 32 -> ReLU -> maxpool -> (B, 32, 7, 7) = (B, 1568)
 *        -> linear 128 -> ReLU -> linear 10 -> softmax
 *
 * All parameters live in one contiguous buffer (params), their gradients in another with the
 * same layout (grads); tensors[] names each piece. The backward pass walks the layers from the
 * last to the first and calls the caller's grad_ready callback for each tensor as soon as its
 * gradient is final, so a data-parallel caller can start reducing it while the earlier layers
 * are still being differentiated. The model knows nothing about ranks or communication.
 */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_MAX_TENSORS 8
#define MODEL_MAX_ACTS 16 /* activation buffers of the larger model */
#define MODEL_IMAGE_SIZE 784 /* 28 x 28 */
#define MODEL_NUM_CLASSES 10

typedef enum model_kind { MODEL_MLP = 0, MODEL_CNN = 1 } model_kind;

typedef struct model_tensor {
    char name[32]; // "fc1.weight", unique within the model
    size_t count;  // elements
    float *param;  // points into model.params
    float *grad;   // points into model.grads, same offset
} model_tensor;

typedef struct model {
    model_kind kind;
    int max_batch;     // capacity of the activation buffers
    int num_tensors;
    model_tensor tensors[MODEL_MAX_TENSORS];
    size_t num_params;
    float *params;     // (num_params)
    float *grads;      // (num_params), written by model_backward
    float *acts;       // every activation and activation gradient, one allocation
    float *act[MODEL_MAX_ACTS]; // pointers into acts, indexed by the enums in model.c
    int32_t *argmax;   // max-pooling winners (cnn only)
    // remembered by model_forward for model_backward:
    const float *inp;        // (B, 784)
    const uint8_t *targets;  // (B)
    int batch;               // B of the last forward
} model;

/* Allocates a model of this kind for batches of up to max_batch images; parameters are zero
 * until model_init_params. Returns 0, or -1 if out of memory (m is then empty). */
int model_init(model *m, model_kind kind, int max_batch);

/* He-uniform weights (bound sqrt(6/fan_in)), zero biases, drawn from seed. */
void model_init_params(model *m, uint64_t seed);

/* Forward pass on B <= max_batch images inp (B, 784) with labels targets (B). Returns the
 * summed cross-entropy loss and adds the number of correct predictions to *correct.
 * inp and targets must stay valid until model_backward. */
double model_forward(model *m, const float *inp, const uint8_t *targets, int B,
                     long *correct);

/* Gradient of the MEAN loss of the last forward pass into m->grads; calls grad_ready(ctx, i)
 * for tensor i as soon as its gradient is final, last layer first. grad_ready may be NULL. */
typedef void (*model_grad_ready_fn)(void *ctx, int tensor);
void model_backward(model *m, model_grad_ready_fn grad_ready, void *ctx);

/* Frees everything model_init allocated. NULL-safe. */
void model_free(model *m);

/* "mlp" or "cnn" to a kind; returns 0, or -1 for an unknown name. */
int model_kind_parse(const char *name, model_kind *kind);
const char *model_kind_name(model_kind kind);

#endif /* MODEL_H */
