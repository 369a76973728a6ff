/*
 * ckpt_format.c - encodes and decodes checkpoint files in memory (the layout is drawn in
 * ckpt_format.h). Decoding checks, in order: size, magic, version, header CRC, section sizes,
 * body CRC, then the tensor table, optimizer and sampler against what the caller expects, and
 * copies nothing until every check has passed. Pure functions (the CRC's tables are built once,
 * on first use); any thread.
 */
#include "train/ckpt_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"
#include "train/file_frame.h"
#include "train/le_bytes.h"

static const hvdc__frame_format FRAME = {HVDC_CKPT_MAGIC, HVDC_CKPT_VERSION, "checkpoint",
                                         "the file was left as it is and nothing was loaded"};

/* ---- writing --------------------------------------------------------------------------- */

/* Sizes of the three variable parts of the body. */
static void body_sizes(const hvdc__ckpt *c, size_t *table, size_t *values, size_t *state) {
    *table = *values = *state = 0;
    for (uint32_t i = 0; i < c->num_tensors; i++) {
        const hvdc__ckpt_tensor *t = &c->tensors[i];
        *table += 4 + strlen(t->name) + 4 + 8;
        *values += t->count * hvd_dtype_size(t->dtype);
        *state += (size_t)c->slots * t->count * sizeof(double);
    }
}

#define FIXED_BODY_NBYTES (16 + 40 + 48) /* optimizer, sampler, info */

hvd_status hvdc__ckpt_encode(const hvdc__ckpt *c, unsigned char **out, size_t *nbytes) {
    if (!hvdc__little_endian_host())
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "checkpoints are written on little-endian hosts "
                          "only");
    size_t table, values, state;
    body_sizes(c, &table, &values, &state);
    size_t body = table + FIXED_BODY_NBYTES + values + state;
    size_t total = HVDC_CKPT_HEADER_NBYTES + body;
    hvdc__le_writer w = {.buf = calloc(total, 1), .off = HVDC_CKPT_HEADER_NBYTES};
    if (w.buf == NULL)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for a %zu-byte checkpoint", total);
    for (uint32_t i = 0; i < c->num_tensors; i++) {
        const hvdc__ckpt_tensor *t = &c->tensors[i];
        hvdc__le_put_u32(&w, (uint32_t)strlen(t->name));
        hvdc__le_put_bytes(&w, t->name, strlen(t->name));
        hvdc__le_put_u32(&w, (uint32_t)t->dtype);
        hvdc__le_put_u64(&w, t->count);
    }
    hvdc__le_put_u32(&w, c->kind);
    hvdc__le_put_u32(&w, c->slots);
    hvdc__le_put_u64(&w, c->steps);
    hvdc__le_put_u32(&w, c->has_sampler);
    hvdc__le_put_u32(&w, c->sampler_shuffle);
    hvdc__le_put_u32(&w, c->sampler_drop_last);
    hvdc__le_put_u32(&w, 0);
    hvdc__le_put_u64(&w, c->sampler_size);
    hvdc__le_put_u64(&w, c->sampler_seed);
    hvdc__le_put_u64(&w, c->sampler_epoch);
    hvdc__le_put_u64(&w, c->info.epoch);
    hvdc__le_put_u64(&w, c->info.step);
    for (int k = 0; k < 4; k++) hvdc__le_put_u64(&w, c->info.user[k]);
    for (uint32_t i = 0; i < c->num_tensors; i++) {
        hvdc__le_put_bytes(&w, c->tensors[i].data, c->tensors[i].count * hvd_dtype_size(c->tensors[i].dtype));
    }
    for (uint32_t i = 0; i < c->num_tensors && c->slots > 0; i++) {
        hvdc__le_put_bytes(&w, c->tensors[i].state, (size_t)c->slots * c->tensors[i].count * sizeof(double));
    }
    w.off = HVDC_FRAME_FIELDS_OFFSET; /* this format's header fields; the frame writes the rest */
    hvdc__le_put_u32(&w, c->num_tensors);
    hvdc__le_put_u64(&w, values);
    hvdc__le_put_u64(&w, state);
    hvdc__frame_seal(w.buf, total, &FRAME);
    *out = w.buf;
    *nbytes = total;
    return HVD_OK;
}

/* ---- reading --------------------------------------------------------------------------- */

hvd_status hvdc__ckpt_decode(const unsigned char *buf, size_t nbytes, const char *path,
                             hvdc__ckpt *c) {
    if (!hvdc__little_endian_host())
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "checkpoints are read on little-endian hosts only");
    const unsigned char *b = NULL;
    size_t body = 0;
    hvd_status st = hvdc__frame_open(buf, nbytes, path, &FRAME, &b, &body);
    if (st != HVD_OK) return st;
    // The body passed its checksum, so a size inconsistency below means a bug in the writer;
    // still, never read past the end.
    uint64_t n = hvdc__le_u32(buf + 28);
    if (n != c->num_tensors)
        return hvdc__fail(HVD_ERR_MISMATCH, "checkpoint '%s' was saved from a different model: "
                          "it has %llu parameter tensors, this optimizer %u", path,
                          (unsigned long long)n, c->num_tensors);
    size_t off = 0;
    for (uint32_t i = 0; i < c->num_tensors; i++) {
        const hvdc__ckpt_tensor *t = &c->tensors[i];
        if (off + 4 > body) return hvdc__frame_refuse(&FRAME, path, "is corrupted: its tensor table is cut short");
        size_t len = hvdc__le_u32(b + off);
        if (off + 4 + len + 12 > body) return hvdc__frame_refuse(&FRAME, path, "is corrupted: its tensor table is cut short");
        const char *name = (const char *)b + off + 4;
        uint64_t dtype = hvdc__le_u32(b + off + 4 + len), count = hvdc__le_u64(b + off + 8 + len);
        off += 4 + len + 12;
        if (len != strlen(t->name) || memcmp(name, t->name, len) != 0 || dtype != (uint64_t)t->dtype ||
            count != t->count)
            return hvdc__fail(HVD_ERR_MISMATCH, "checkpoint '%s' was saved from a different "
                              "model: parameter %u is '%.*s' (%s, %llu elements) in the file "
                              "but '%s' (%s, %zu elements) here", path, i, (int)(len > 200 ? 200 : len),
                              name, hvdc__dtype_name((int)dtype), (unsigned long long)count,
                              t->name, hvdc__dtype_name((int)t->dtype), t->count);
    }
    if (off + 16 > body) return hvdc__frame_refuse(&FRAME, path, "is corrupted: its optimizer section is cut short");
    const unsigned char *f = b + off;
    uint64_t kind = hvdc__le_u32(f), slots = hvdc__le_u32(f + 4);
    if (kind != c->kind || slots != c->slots)
        return hvdc__fail(HVD_ERR_MISMATCH, "checkpoint '%s' was saved by optimizer kind %llu with "
                          "%llu state arrays per parameter; this optimizer is kind %u with %u "
                          "(HVD_OPT_SGD=0, ADAM=1, ADAMW=2, CUSTOM=3)", path,
                          (unsigned long long)kind, (unsigned long long)slots, c->kind, c->slots);
    size_t table, values, state;
    body_sizes(c, &table, &values, &state);
    if (off != table || hvdc__le_u64(buf + 32) != values || body != table + FIXED_BODY_NBYTES + values + state)
        return hvdc__fail(HVD_ERR_MISMATCH, "checkpoint '%s' holds a different amount of "
                          "optimizer state than this optimizer keeps (another optimizer kind or "
                          "momentum setting?)", path);
    const unsigned char *s = f + 16;
    uint64_t has_sampler = hvdc__le_u32(s), shuffle = hvdc__le_u32(s + 4), drop = hvdc__le_u32(s + 8);
    uint64_t size = hvdc__le_u64(s + 16);
    if (c->has_sampler && !has_sampler)
        return hvdc__fail(HVD_ERR_MISMATCH, "checkpoint '%s' was saved without a sampler; load it "
                          "with sampler = NULL", path);
    if (c->has_sampler && (size != c->sampler_size || shuffle != c->sampler_shuffle ||
                           drop != c->sampler_drop_last))
        return hvdc__fail(HVD_ERR_MISMATCH, "checkpoint '%s' has a sampler over %llu examples "
                          "(shuffle %llu, drop_last %llu); this one is over %llu (shuffle %u, "
                          "drop_last %u)", path, (unsigned long long)size,
                          (unsigned long long)shuffle, (unsigned long long)drop,
                          (unsigned long long)c->sampler_size, c->sampler_shuffle,
                          c->sampler_drop_last);
    // Every check passed: fill in.
    c->steps = hvdc__le_u64(f + 8);
    if (c->has_sampler) {
        c->sampler_seed = hvdc__le_u64(s + 24);
        c->sampler_epoch = hvdc__le_u64(s + 32);
    }
    const unsigned char *in = s + 40;
    c->info.epoch = hvdc__le_u64(in);
    c->info.step = hvdc__le_u64(in + 8);
    for (int k = 0; k < 4; k++) c->info.user[k] = hvdc__le_u64(in + 16 + 8 * k);
    const unsigned char *v = in + 48;
    for (uint32_t i = 0; i < c->num_tensors; i++) {
        size_t nb = c->tensors[i].count * hvd_dtype_size(c->tensors[i].dtype);
        memcpy(c->tensors[i].data, v, nb);
        v += nb;
    }
    for (uint32_t i = 0; i < c->num_tensors && c->slots > 0; i++) {
        size_t nb = (size_t)c->slots * c->tensors[i].count * sizeof(double);
        memcpy(c->tensors[i].state, v, nb);
        v += nb;
    }
    return HVD_OK;
}
