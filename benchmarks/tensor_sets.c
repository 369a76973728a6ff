/*
 * tensor_sets.c - parameter shapes of ResNet-50, BERT-base and a set of tiny tensors (see
 * tensor_sets.h). Written from the architectures, not loaded from a checkpoint. Main thread.
 */
#include "tensor_sets.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends one tensor; the name is formatted like printf. Returns 0 or -1 (no memory). */
static int add(tensor_set *s, size_t *cap, size_t count, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int add(tensor_set *s, size_t *cap, size_t count, const char *fmt, ...) {
    if (s->n == *cap) {
        size_t grown = *cap ? *cap * 2 : 64;
        void *names = realloc(s->names, grown * sizeof *s->names);
        if (names) s->names = names;
        void *counts = realloc(s->counts, grown * sizeof *s->counts);
        if (counts) s->counts = counts;
        if (!names || !counts) return -1;
        *cap = grown;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->names[s->n], TENSOR_NAME_LEN, fmt, ap);
    va_end(ap);
    s->counts[s->n++] = count;
    s->total += count;
    return 0;
}

/* A conv without bias and its batch norm (weight, bias): 3 tensors. */
static int conv_bn(tensor_set *s, size_t *cap, const char *prefix, const char *conv,
                   const char *bn, size_t out, size_t in, size_t k) {
    int err = add(s, cap, out * in * k * k, "%s%s.weight", prefix, conv);
    err |= add(s, cap, out, "%s%s.weight", prefix, bn);
    err |= add(s, cap, out, "%s%s.bias", prefix, bn);
    return err;
}

static int make_resnet50(tensor_set *s, size_t *cap) {
    static const size_t blocks[4] = {3, 4, 6, 3}, planes[4] = {64, 128, 256, 512};
    const size_t expansion = 4;
    int err = conv_bn(s, cap, "", "conv1", "bn1", 64, 3, 7);
    size_t in = 64;
    for (int stage = 0; stage < 4; stage++) {
        size_t p = planes[stage];
        for (size_t b = 0; b < blocks[stage]; b++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%zu.", stage + 1, b);
            err |= conv_bn(s, cap, prefix, "conv1", "bn1", p, in, 1);
            err |= conv_bn(s, cap, prefix, "conv2", "bn2", p, p, 3);
            err |= conv_bn(s, cap, prefix, "conv3", "bn3", p * expansion, p, 1);
            if (b == 0) err |= conv_bn(s, cap, prefix, "downsample.0", "downsample.1", p * expansion, in, 1);
            in = p * expansion;
        }
    }
    err |= add(s, cap, 1000 * 2048, "fc.weight");
    err |= add(s, cap, 1000, "fc.bias");
    return err;
}

/* A linear layer: weight (out, in) and bias (out). */
static int linear(tensor_set *s, size_t *cap, const char *name, size_t out, size_t in) {
    int err = add(s, cap, out * in, "%s.weight", name);
    err |= add(s, cap, out, "%s.bias", name);
    return err;
}

static int make_bert_base(tensor_set *s, size_t *cap) {
    const size_t hidden = 768, ffn = 3072, vocab = 30522, positions = 512, types = 2;
    int err = add(s, cap, vocab * hidden, "embeddings.word_embeddings.weight");
    err |= add(s, cap, positions * hidden, "embeddings.position_embeddings.weight");
    err |= add(s, cap, types * hidden, "embeddings.token_type_embeddings.weight");
    err |= add(s, cap, hidden, "embeddings.LayerNorm.weight");
    err |= add(s, cap, hidden, "embeddings.LayerNorm.bias");
    for (int l = 0; l < 12; l++) {
        char name[96];
        static const char *const parts[] = {"attention.self.query", "attention.self.key",
                                            "attention.self.value", "attention.output.dense"};
        for (int i = 0; i < 4; i++) {
            if (i == 3) {
                snprintf(name, sizeof name, "encoder.layer.%d.%s", l, parts[i]);
                err |= linear(s, cap, name, hidden, hidden);
                err |= add(s, cap, hidden, "encoder.layer.%d.attention.output.LayerNorm.weight", l);
                err |= add(s, cap, hidden, "encoder.layer.%d.attention.output.LayerNorm.bias", l);
            } else {
                snprintf(name, sizeof name, "encoder.layer.%d.%s", l, parts[i]);
                err |= linear(s, cap, name, hidden, hidden);
            }
        }
        snprintf(name, sizeof name, "encoder.layer.%d.intermediate.dense", l);
        err |= linear(s, cap, name, ffn, hidden);
        snprintf(name, sizeof name, "encoder.layer.%d.output.dense", l);
        err |= linear(s, cap, name, hidden, ffn);
        err |= add(s, cap, hidden, "encoder.layer.%d.output.LayerNorm.weight", l);
        err |= add(s, cap, hidden, "encoder.layer.%d.output.LayerNorm.bias", l);
    }
    err |= linear(s, cap, "pooler.dense", hidden, hidden);
    return err;
}

static int make_tiny(tensor_set *s, size_t *cap) {
    uint64_t state = 0x2545F4914F6CDD1Dull; /* fixed seed: every rank builds the same set */
    int err = 0;
    for (int i = 0; i < 1000; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        size_t bytes = 1024 + (size_t)((state >> 33) % (63 * 1024 + 1)); /* 1..64 KiB */
        err |= add(s, cap, bytes / sizeof(float), "tiny.%d", i);
    }
    return err;
}

/* 1000 tensors of 4 floats: nothing to move, so a step is the per-tensor host cost */
static int make_overhead(tensor_set *s, size_t *cap) {
    int err = 0;
    for (int i = 0; i < 1000; i++) err |= add(s, cap, 4, "overhead.%d", i);
    return err;
}

int tensor_set_make(tensor_set *set, const char *model) {
    memset(set, 0, sizeof *set);
    size_t cap = 0;
    int err;
    if (strcmp(model, "resnet50") == 0) {
        set->model = "resnet50";
        err = make_resnet50(set, &cap);
    } else if (strcmp(model, "bert-base") == 0 || strcmp(model, "bert") == 0) {
        set->model = "bert-base";
        err = make_bert_base(set, &cap);
    } else if (strcmp(model, "tiny") == 0) {
        set->model = "tiny";
        err = make_tiny(set, &cap);
    } else if (strcmp(model, "overhead") == 0) {
        set->model = "overhead";
        err = make_overhead(set, &cap);
    } else {
        return -1;
    }
    if (err) tensor_set_free(set);
    return err ? -1 : 0;
}

void tensor_set_free(tensor_set *set) {
    if (!set) return;
    free(set->names);
    free(set->counts);
    memset(set, 0, sizeof *set);
}
