/*
 * le_bytes.h - little-endian integers in and out of byte buffers, for the two file formats
 * (ckpt_format.c, elastic_format.c): a writer that appends at an offset, and readers at a
 * pointer. The caller sizes the buffer first; nothing here checks bounds.
 * defines: hvdc__le_writer, hvdc__le_put_bytes, hvdc__le_put_u32, hvdc__le_put_u64,
 *          hvdc__le_u32, hvdc__le_u64, hvdc__little_endian_host
 * Pure; any thread.
 */
#ifndef HVDC_LE_BYTES_H
#define HVDC_LE_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct hvdc__le_writer {
    unsigned char *buf;
    size_t off; // where the next put writes
} hvdc__le_writer;

static inline void hvdc__le_put_bytes(hvdc__le_writer *w, const void *p, size_t n) {
    if (n > 0) memcpy(w->buf + w->off, p, n);
    w->off += n;
}
static inline void hvdc__le_put_u32(hvdc__le_writer *w, uint32_t v) {
    for (int i = 0; i < 4; i++) w->buf[w->off++] = (unsigned char)(v >> (8 * i));
}
static inline void hvdc__le_put_u64(hvdc__le_writer *w, uint64_t v) {
    for (int i = 0; i < 8; i++) w->buf[w->off++] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t hvdc__le_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t hvdc__le_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
/* The files store values (parameters, optimizer state) in the host's own byte order, which
 * must therefore be little-endian. */
static inline int hvdc__little_endian_host(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

#endif
