/*
 * tensor_sets.h - the gradient tensors of a few models, in forward (parameter) order, for the
 * benchmarks that replay a training step's all-reduces.
 *
 * defines: tensor_set, tensor_set_make, tensor_set_free, TENSOR_SET_NAMES
 *
 *   resnet50   torchvision ResNet-50: 161 tensors, 25 557 032 floats (conv1 64x3x7x7, bn1, four
 *              stages of [3, 4, 6, 3] bottlenecks, each conv1/bn1, conv2 3x3/bn2, conv3/bn3 and
 *              a downsample conv/bn in the first block of a stage, fc 1000x2048 + bias)
 *   bert-base  Hugging Face BertModel (bert-base-uncased): 199 tensors, 109 482 240 floats
 *              (embeddings 30522x768, 512x768, 2x768 + LayerNorm; 12 layers of q/k/v/o
 *              768x768 + biases, 2 LayerNorms, FFN 3072x768 and 768x3072 + biases; pooler)
 *   tiny       1000 tensors of 1 to 64 KiB of floats, sizes from a fixed seed (same on all ranks)
 *   overhead   1000 tensors of 4 floats: nothing to move, a step is the per-tensor host cost
 * Main thread.
 */
#ifndef HVDC_TENSOR_SETS_H
#define HVDC_TENSOR_SETS_H

#include <stddef.h>

#define TENSOR_SET_NAMES "resnet50, bert-base, tiny, overhead"
#define TENSOR_NAME_LEN 64

typedef struct tensor_set {
    const char *model;
    size_t n;                      /* tensors */
    char (*names)[TENSOR_NAME_LEN]; /* (n) parameter names, forward order */
    size_t *counts;                /* (n) float elements */
    size_t total;                  /* sum of counts */
} tensor_set;

/* Builds the set called model. @return 0, or -1 for an unknown model or no memory. */
int tensor_set_make(tensor_set *set, const char *model);
/* NULL-safe; leaves *set zeroed. */
void tensor_set_free(tensor_set *set);

#endif
