/*
 * model.c - the mlp and cnn classifiers of model.h: parameter layout, initialization, and the
 * forward and backward passes as sequences of layers.h calls.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "rng.h"

/* One row of a parameter table: name, element count, fan-in (0 for a bias). */
typedef struct tensor_spec {
    const char *name;
    size_t count;
    int fan_in;
} tensor_spec;

static const tensor_spec MLP_TENSORS[] = {
    {"fc1.weight", 256 * 784, 784}, {"fc1.bias", 256, 0},
    {"fc2.weight", 128 * 256, 256}, {"fc2.bias", 128, 0},
    {"fc3.weight", 10 * 128, 128},  {"fc3.bias", 10, 0},
};
enum { MLP_FC1_W, MLP_FC1_B, MLP_FC2_W, MLP_FC2_B, MLP_FC3_W, MLP_FC3_B };

static const tensor_spec CNN_TENSORS[] = {
    {"conv1.weight", 16 * 1 * 9, 1 * 9},  {"conv1.bias", 16, 0},
    {"conv2.weight", 32 * 16 * 9, 16 * 9}, {"conv2.bias", 32, 0},
    {"fc1.weight", 128 * 1568, 1568},      {"fc1.bias", 128, 0},
    {"fc2.weight", 10 * 128, 128},         {"fc2.bias", 10, 0},
};
enum { CNN_C1_W, CNN_C1_B, CNN_C2_W, CNN_C2_B, CNN_FC1_W, CNN_FC1_B, CNN_FC2_W, CNN_FC2_B };

/* Activations, per image (multiplied by max_batch when allocated), in the order of act[]. */
enum { MLP_H1, MLP_H2, MLP_LOGITS, MLP_PROBS, MLP_DLOGITS, MLP_DH2, MLP_DH1, MLP_NUM_ACTS };
static const size_t MLP_ACT_SIZES[MLP_NUM_ACTS] = {
    256, 128, 10, 10, // h1, h2 (fc then ReLU in place), logits, probs
    10, 128, 256,     // dlogits, dh2, dh1
};

enum {
    CNN_COL1, CNN_C1, CNN_P1, CNN_COL2, CNN_C2, CNN_P2, CNN_H, CNN_LOGITS, CNN_PROBS,
    CNN_DLOGITS, CNN_DH, CNN_DP2, CNN_DC2, CNN_DP1, CNN_DC1, CNN_DCOL2, CNN_NUM_ACTS
};
static const size_t CNN_ACT_SIZES[CNN_NUM_ACTS] = {
    9 * 784,   // col1 (9, 28*28)
    16 * 784,  // c1   (16, 28, 28), conv1 then ReLU in place
    16 * 196,  // p1   (16, 14, 14)
    144 * 196, // col2 (16*9, 14*14)
    32 * 196,  // c2   (32, 14, 14), conv2 then ReLU in place
    32 * 49,   // p2   (32, 7, 7) = 1568 features
    128,       // h    fc1 then ReLU in place
    10,        // logits
    10,        // probs
    10,        // dlogits
    128,       // dh
    32 * 49,   // dp2
    32 * 196,  // dc2
    16 * 196,  // dp1
    16 * 784,  // dc1
    0,         // dcol2 (144, 196) is per batch, not per image; sized in model_init
};

_Static_assert(MLP_NUM_ACTS <= MODEL_MAX_ACTS && CNN_NUM_ACTS <= MODEL_MAX_ACTS,
               "raise MODEL_MAX_ACTS in model.h");
_Static_assert(sizeof CNN_TENSORS / sizeof CNN_TENSORS[0] <= MODEL_MAX_TENSORS &&
                   sizeof MLP_TENSORS / sizeof MLP_TENSORS[0] <= MODEL_MAX_TENSORS,
               "raise MODEL_MAX_TENSORS in model.h");

int model_init(model *m, model_kind kind, int max_batch) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->max_batch = max_batch;
    const tensor_spec *specs = kind == MODEL_MLP ? MLP_TENSORS : CNN_TENSORS;
    m->num_tensors = kind == MODEL_MLP ? (int)(sizeof MLP_TENSORS / sizeof MLP_TENSORS[0])
                                       : (int)(sizeof CNN_TENSORS / sizeof CNN_TENSORS[0]);
    for (int i = 0; i < m->num_tensors; i++) m->num_params += specs[i].count;
    m->params = calloc(m->num_params, sizeof(float));
    m->grads = calloc(m->num_params, sizeof(float));

    const size_t *sizes = kind == MODEL_MLP ? MLP_ACT_SIZES : CNN_ACT_SIZES;
    int num_acts = kind == MODEL_MLP ? MLP_NUM_ACTS : CNN_NUM_ACTS;
    size_t offsets[MODEL_MAX_ACTS], total = 0;
    for (int i = 0; i < num_acts; i++) {
        offsets[i] = total;
        total += sizes[i] * (size_t)max_batch;
    }
    if (kind == MODEL_CNN) {
        offsets[CNN_DCOL2] = total; // the last entry: one image's dcol, reused image by image
        total += 144 * 196;
        m->argmax = malloc(((size_t)16 * 196 + 32 * 49) * (size_t)max_batch * sizeof(int32_t));
    }
    m->acts = malloc(total * sizeof(float));
    if (m->params == NULL || m->grads == NULL || m->acts == NULL ||
        (kind == MODEL_CNN && m->argmax == NULL)) {
        model_free(m);
        return -1;
    }
    for (int i = 0; i < num_acts; i++) m->act[i] = m->acts + offsets[i];

    size_t off = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        model_tensor *t = &m->tensors[i];
        strncpy(t->name, specs[i].name, sizeof t->name - 1);
        t->count = specs[i].count;
        t->param = m->params + off;
        t->grad = m->grads + off;
        off += t->count;
    }
    return 0;
}

void model_init_params(model *m, uint64_t seed) {
    const tensor_spec *specs = m->kind == MODEL_MLP ? MLP_TENSORS : CNN_TENSORS;
    rng r;
    rng_init(&r, seed, 0xC0FFEE);
    for (int i = 0; i < m->num_tensors; i++) {
        model_tensor *t = &m->tensors[i];
        float bound = specs[i].fan_in > 0 ? sqrtf(6.0f / (float)specs[i].fan_in) : 0.0f;
        for (size_t k = 0; k < t->count; k++) t->param[k] = bound * (2.0f * rng_uniform(&r) - 1.0f);
    }
}

/* Adds to *correct the rows of logits (B, V) whose largest entry is at the target. */
static void count_correct(const float *logits, const uint8_t *targets, int B, int V,
                          long *correct) {
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * V;
        int best = 0;
        for (int v = 1; v < V; v++) best = z[v] > z[best] ? v : best;
        *correct += best == targets[b];
    }
}

static double mlp_forward(model *m, int B, long *correct) {
    float **a = m->act;
    model_tensor *t = m->tensors;
    linear_forward(a[MLP_H1], m->inp, t[MLP_FC1_W].param, t[MLP_FC1_B].param, B, 784, 256);
    relu_forward(a[MLP_H1], a[MLP_H1], B * 256);
    linear_forward(a[MLP_H2], a[MLP_H1], t[MLP_FC2_W].param, t[MLP_FC2_B].param, B, 256, 128);
    relu_forward(a[MLP_H2], a[MLP_H2], B * 128);
    linear_forward(a[MLP_LOGITS], a[MLP_H2], t[MLP_FC3_W].param, t[MLP_FC3_B].param, B, 128, 10);
    count_correct(a[MLP_LOGITS], m->targets, B, 10, correct);
    return softmax_xent_forward(a[MLP_PROBS], a[MLP_LOGITS], m->targets, B, 10);
}

static void mlp_backward(model *m, model_grad_ready_fn ready, void *ctx) {
    float **a = m->act;
    model_tensor *t = m->tensors;
    int B = m->batch;
    softmax_xent_backward(a[MLP_DLOGITS], a[MLP_PROBS], m->targets, 1.0f / (float)B, B, 10);
    linear_backward(a[MLP_DH2], t[MLP_FC3_W].grad, t[MLP_FC3_B].grad, a[MLP_DLOGITS], a[MLP_H2],
                    t[MLP_FC3_W].param, B, 128, 10);
    if (ready) { ready(ctx, MLP_FC3_W); ready(ctx, MLP_FC3_B); }
    relu_backward(a[MLP_DH2], a[MLP_DH2], a[MLP_H2], B * 128);
    linear_backward(a[MLP_DH1], t[MLP_FC2_W].grad, t[MLP_FC2_B].grad, a[MLP_DH2], a[MLP_H1],
                    t[MLP_FC2_W].param, B, 256, 128);
    if (ready) { ready(ctx, MLP_FC2_W); ready(ctx, MLP_FC2_B); }
    relu_backward(a[MLP_DH1], a[MLP_DH1], a[MLP_H1], B * 256);
    linear_backward(NULL, t[MLP_FC1_W].grad, t[MLP_FC1_B].grad, a[MLP_DH1], m->inp,
                    t[MLP_FC1_W].param, B, 784, 256);
    if (ready) { ready(ctx, MLP_FC1_W); ready(ctx, MLP_FC1_B); }
}

static double cnn_forward(model *m, int B, long *correct) {
    float **a = m->act;
    model_tensor *t = m->tensors;
    int32_t *argmax1 = m->argmax, *argmax2 = m->argmax + (size_t)16 * 196 * m->max_batch;
    conv3x3_forward(a[CNN_C1], a[CNN_COL1], m->inp, t[CNN_C1_W].param, t[CNN_C1_B].param,
                    B, 1, 28, 28, 16);
    relu_forward(a[CNN_C1], a[CNN_C1], B * 16 * 784);
    maxpool2_forward(a[CNN_P1], argmax1, a[CNN_C1], B, 16, 28, 28);
    conv3x3_forward(a[CNN_C2], a[CNN_COL2], a[CNN_P1], t[CNN_C2_W].param, t[CNN_C2_B].param,
                    B, 16, 14, 14, 32);
    relu_forward(a[CNN_C2], a[CNN_C2], B * 32 * 196);
    maxpool2_forward(a[CNN_P2], argmax2, a[CNN_C2], B, 32, 14, 14);
    linear_forward(a[CNN_H], a[CNN_P2], t[CNN_FC1_W].param, t[CNN_FC1_B].param, B, 1568, 128);
    relu_forward(a[CNN_H], a[CNN_H], B * 128);
    linear_forward(a[CNN_LOGITS], a[CNN_H], t[CNN_FC2_W].param, t[CNN_FC2_B].param, B, 128, 10);
    count_correct(a[CNN_LOGITS], m->targets, B, 10, correct);
    return softmax_xent_forward(a[CNN_PROBS], a[CNN_LOGITS], m->targets, B, 10);
}

static void cnn_backward(model *m, model_grad_ready_fn ready, void *ctx) {
    float **a = m->act;
    model_tensor *t = m->tensors;
    int B = m->batch;
    int32_t *argmax1 = m->argmax, *argmax2 = m->argmax + (size_t)16 * 196 * m->max_batch;
    softmax_xent_backward(a[CNN_DLOGITS], a[CNN_PROBS], m->targets, 1.0f / (float)B, B, 10);
    linear_backward(a[CNN_DH], t[CNN_FC2_W].grad, t[CNN_FC2_B].grad, a[CNN_DLOGITS], a[CNN_H],
                    t[CNN_FC2_W].param, B, 128, 10);
    if (ready) { ready(ctx, CNN_FC2_W); ready(ctx, CNN_FC2_B); }
    relu_backward(a[CNN_DH], a[CNN_DH], a[CNN_H], B * 128);
    linear_backward(a[CNN_DP2], t[CNN_FC1_W].grad, t[CNN_FC1_B].grad, a[CNN_DH], a[CNN_P2],
                    t[CNN_FC1_W].param, B, 1568, 128);
    if (ready) { ready(ctx, CNN_FC1_W); ready(ctx, CNN_FC1_B); }
    maxpool2_backward(a[CNN_DC2], a[CNN_DP2], argmax2, B, 32, 14, 14);
    relu_backward(a[CNN_DC2], a[CNN_DC2], a[CNN_C2], B * 32 * 196);
    conv3x3_backward(a[CNN_DP1], t[CNN_C2_W].grad, t[CNN_C2_B].grad, a[CNN_DCOL2], a[CNN_DC2],
                     a[CNN_COL2], t[CNN_C2_W].param, B, 16, 14, 14, 32);
    if (ready) { ready(ctx, CNN_C2_W); ready(ctx, CNN_C2_B); }
    maxpool2_backward(a[CNN_DC1], a[CNN_DP1], argmax1, B, 16, 28, 28);
    relu_backward(a[CNN_DC1], a[CNN_DC1], a[CNN_C1], B * 16 * 784);
    conv3x3_backward(NULL, t[CNN_C1_W].grad, t[CNN_C1_B].grad, NULL, a[CNN_DC1], a[CNN_COL1],
                     t[CNN_C1_W].param, B, 1, 28, 28, 16);
    if (ready) { ready(ctx, CNN_C1_W); ready(ctx, CNN_C1_B); }
}

double model_forward(model *m, const float *inp, const uint8_t *targets, int B,
                     long *correct) {
    m->inp = inp;
    m->targets = targets;
    m->batch = B;
    return m->kind == MODEL_MLP ? mlp_forward(m, B, correct) : cnn_forward(m, B, correct);
}

void model_backward(model *m, model_grad_ready_fn grad_ready, void *ctx) {
    if (m->kind == MODEL_MLP) mlp_backward(m, grad_ready, ctx);
    else cnn_backward(m, grad_ready, ctx);
}

void model_free(model *m) {
    if (m == NULL) return;
    free(m->params);
    free(m->grads);
    free(m->acts);
    free(m->argmax);
    memset(m, 0, sizeof *m);
}

int model_kind_parse(const char *name, model_kind *kind) {
    if (strcmp(name, "mlp") == 0) { *kind = MODEL_MLP; return 0; }
    if (strcmp(name, "cnn") == 0) { *kind = MODEL_CNN; return 0; }
    return -1;
}

const char *model_kind_name(model_kind kind) {
    return kind == MODEL_MLP ? "mlp" : "cnn";
}
