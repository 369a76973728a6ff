/*
 * elastic_format.c - encodes and parses elastic commit files in memory (the layout is drawn in
 * elastic_format.h). Parsing checks the whole structure before it describes anything, so a
 * truncated or corrupted file is refused with a message naming the first failed check.
 * Pure functions; any thread.
 */
#include "train/elastic_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"
#include "train/file_frame.h"
#include "train/le_bytes.h"

static const hvdc__frame_format FRAME = {HVDC_ELASTIC_MAGIC, HVDC_ELASTIC_VERSION,
                                         "elastic commit", "it was left as it is and nothing "
                                         "was restored"};

#define FLAG_OPTIMIZER 1u
#define FLAG_SAMPLER 2u
#define SAMPLER_NBYTES 48u
#define ENTRY_FIXED_NBYTES 20u /* kind, dtype, count, name_nbytes */

static size_t entry_nbytes(const hvdc__elastic_entry *e) {
    return e->count * hvd_dtype_size(e->dtype);
}

hvd_status hvdc__elastic_encode(const hvdc__elastic_image *img, unsigned char **out,
                                size_t *nbytes) {
    if (!hvdc__little_endian_host())
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "elastic commits are written on little-endian "
                          "hosts only");
    size_t body = (img->ckpt != NULL ? 8 + img->ckpt_nbytes : 0) +
                  (img->has_sampler ? SAMPLER_NBYTES : 0);
    for (uint32_t i = 0; i < img->num_entries; i++)
        body += ENTRY_FIXED_NBYTES + strlen(img->entries[i].name) + entry_nbytes(&img->entries[i]);
    size_t total = HVDC_ELASTIC_HEADER_NBYTES + body;
    hvdc__le_writer w = {.buf = calloc(total, 1), .off = HVDC_ELASTIC_HEADER_NBYTES};
    if (w.buf == NULL)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for a %zu-byte elastic commit", total);
    uint32_t flags = 0;
    if (img->ckpt != NULL) {
        flags |= FLAG_OPTIMIZER;
        hvdc__le_put_u64(&w, img->ckpt_nbytes);
        hvdc__le_put_bytes(&w, img->ckpt, img->ckpt_nbytes);
    }
    if (img->has_sampler) {
        const hvdc__elastic_sampler *s = &img->sampler;
        flags |= FLAG_SAMPLER;
        hvdc__le_put_u64(&w, s->dataset_size);
        hvdc__le_put_u32(&w, s->shuffle);
        hvdc__le_put_u32(&w, s->drop_last);
        hvdc__le_put_u64(&w, s->seed);
        hvdc__le_put_u64(&w, s->epoch);
        hvdc__le_put_u64(&w, s->position);
        hvdc__le_put_u64(&w, 0); // reserved
    }
    for (uint32_t i = 0; i < img->num_entries; i++) {
        const hvdc__elastic_entry *e = &img->entries[i];
        size_t len = strlen(e->name);
        hvdc__le_put_u32(&w, e->kind);
        hvdc__le_put_u32(&w, (uint32_t)e->dtype);
        hvdc__le_put_u64(&w, e->count);
        hvdc__le_put_u32(&w, (uint32_t)len);
        hvdc__le_put_bytes(&w, e->name, len);
        hvdc__le_put_bytes(&w, e->data, entry_nbytes(e));
    }
    w.off = HVDC_FRAME_FIELDS_OFFSET; /* this format's header fields; the frame writes the rest */
    hvdc__le_put_u32(&w, img->num_entries);
    hvdc__le_put_u64(&w, img->sequence);
    hvdc__le_put_u32(&w, img->size);
    hvdc__le_put_u32(&w, flags);
    hvdc__le_put_u64(&w, img->time_ms);
    hvdc__frame_seal(w.buf, total, &FRAME);
    *out = w.buf;
    *nbytes = total;
    return HVD_OK;
}

hvd_status hvdc__elastic_parse(const unsigned char *buf, size_t nbytes, const char *path,
                               hvdc__elastic_image *img) {
    *img = (hvdc__elastic_image){0};
    if (!hvdc__little_endian_host())
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "elastic commits are read on little-endian hosts "
                          "only");
    const unsigned char *b = NULL;
    size_t body = 0;
    hvd_status st = hvdc__frame_open(buf, nbytes, path, &FRAME, &b, &body);
    if (st != HVD_OK) return st;
    // The body passed its checksum: what follows guards against a writer's bug, and never
    // reads past the end.
    uint32_t flags = hvdc__le_u32(buf + 44), n = hvdc__le_u32(buf + 28);
    if ((flags & ~(FLAG_OPTIMIZER | FLAG_SAMPLER)) != 0 || n > body / ENTRY_FIXED_NBYTES)
        return hvdc__frame_refuse(&FRAME, path, "is corrupted: its header has unknown flags or too many entries");
    img->sequence = hvdc__le_u64(buf + 32);
    img->size = hvdc__le_u32(buf + 40);
    img->time_ms = hvdc__le_u64(buf + 48);
    size_t off = 0;
    if (flags & FLAG_OPTIMIZER) {
        if (body - off < 8 || hvdc__le_u64(b + off) > body - off - 8)
            return hvdc__frame_refuse(&FRAME, path, "is corrupted: its optimizer section is cut short");
        img->ckpt_nbytes = (size_t)hvdc__le_u64(b + off);
        img->ckpt = b + off + 8;
        off += 8 + img->ckpt_nbytes;
    }
    if (flags & FLAG_SAMPLER) {
        if (body - off < SAMPLER_NBYTES)
            return hvdc__frame_refuse(&FRAME, path, "is corrupted: its sampler section is cut short");
        hvdc__elastic_sampler *s = &img->sampler;
        img->has_sampler = 1;
        s->dataset_size = hvdc__le_u64(b + off);
        s->shuffle = hvdc__le_u32(b + off + 8);
        s->drop_last = hvdc__le_u32(b + off + 12);
        s->seed = hvdc__le_u64(b + off + 16);
        s->epoch = hvdc__le_u64(b + off + 24);
        s->position = hvdc__le_u64(b + off + 32);
        off += SAMPLER_NBYTES;
    }
    hvdc__elastic_entry *entries = calloc(n > 0 ? n : 1, sizeof *entries);
    if (entries == NULL) {
        *img = (hvdc__elastic_image){0};
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory reading elastic commit '%s'", path);
    }
    const char *why = NULL;
    for (uint32_t i = 0; i < n && why == NULL; i++) {
        hvdc__elastic_entry *e = &entries[i];
        if (body - off < ENTRY_FIXED_NBYTES) {
            why = "is corrupted: its entry table is cut short";
            break;
        }
        uint32_t kind = hvdc__le_u32(b + off), dtype = hvdc__le_u32(b + off + 4);
        uint64_t count = hvdc__le_u64(b + off + 8), len = hvdc__le_u32(b + off + 16);
        off += ENTRY_FIXED_NBYTES;
        if (kind > HVDC_ELASTIC_BLOB || !hvdc__dtype_valid((int)dtype) || len == 0 ||
            len > HVDC_ELASTIC_NAME_MAX || len > body - off) {
            why = "is corrupted: an entry has an unknown kind or dtype, or a bad name";
            break;
        }
        memcpy(e->name, b + off, len);
        e->name[len] = '\0';
        off += len;
        size_t esize = hvd_dtype_size((hvd_dtype)dtype);
        if (count > (body - off) / esize) {
            why = "is corrupted: an entry's values are cut short";
            break;
        }
        e->kind = kind;
        e->dtype = (hvd_dtype)dtype;
        e->count = (size_t)count;
        e->data = b + off;
        off += (size_t)count * esize;
    }
    if (why == NULL && off != body) why = "is corrupted: bytes are left over after its entries";
    if (why != NULL) {
        free(entries);
        *img = (hvdc__elastic_image){0};
        return hvdc__frame_refuse(&FRAME, path, why);
    }
    img->num_entries = n;
    img->entries = entries;
    return HVD_OK;
}
