/*
 * file_frame.c - file_frame.h: sealing and opening the 64-byte frame of libhvdc's files, and
 * their CRC-32.
 * Pure functions; any thread.
 */
#include "train/file_frame.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "train/le_bytes.h"

/* CRC-32 (IEEE, reflected, as zlib's), eight bytes per step ("slicing-by-8"): table[k][b] is
 * the CRC of byte b followed by k zero bytes, so eight lookups fold eight bytes at once. Every
 * save and load checksums megabytes; byte by byte, the checksum would be most of a commit's
 * cost. The tables are built once, by the first call (pthread_once: any thread). */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_build(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xffu];
}

uint32_t hvdc__crc32(uint32_t crc, const void *data, size_t nbytes) {
    pthread_once(&crc_once, crc_build);
    uint32_t (*t)[256] = crc_table;
    const unsigned char *p = data;
    crc = ~crc;
    for (; nbytes >= 8; p += 8, nbytes -= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        crc = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^
              t[4][lo >> 24] ^ t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^
              t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
    }
    while (nbytes-- > 0) crc = t[0][(crc ^ *p++) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

/* ---- the frame ------------------------------------------------------------------------ */

void hvdc__frame_seal(unsigned char *buf, size_t total, const hvdc__frame_format *f) {
    uint64_t body = total - HVDC_FRAME_HEADER_NBYTES;
    hvdc__le_writer w = {.buf = buf, .off = 0};
    hvdc__le_put_bytes(&w, f->magic, 8);
    hvdc__le_put_u32(&w, f->version);
    hvdc__le_put_u32(&w, HVDC_FRAME_HEADER_NBYTES);
    hvdc__le_put_u64(&w, body);
    hvdc__le_put_u32(&w, hvdc__crc32(0, buf + HVDC_FRAME_HEADER_NBYTES, body));
    w.off = 60;
    hvdc__le_put_u32(&w, hvdc__crc32(0, buf, 60));
}

hvd_status hvdc__frame_refuse(const hvdc__frame_format *f, const char *path, const char *what) {
    return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s' %s; %s", f->noun, path, what, f->consequence);
}

hvd_status hvdc__frame_open(const unsigned char *buf, size_t nbytes, const char *path,
                            const hvdc__frame_format *f, const unsigned char **body,
                            size_t *body_nbytes) {
    char what[512];
    const size_t header = HVDC_FRAME_HEADER_NBYTES;
    if (nbytes < 8 || memcmp(buf, f->magic, 8) != 0) {
        snprintf(what, sizeof what, "is not a libhvdc %s (its first 8 bytes are not \"%.8s\")",
                 f->noun, f->magic);
        return hvdc__frame_refuse(f, path, what);
    }
    if (nbytes < header) {
        snprintf(what, sizeof what, "is truncated: %zu bytes, less than its %zu-byte header",
                 nbytes, header);
        return hvdc__frame_refuse(f, path, what);
    }
    uint32_t version = hvdc__le_u32(buf + 8);
    if (version != f->version) {
        snprintf(what, sizeof what, "has format version %u; this libhvdc reads version %u",
                 version, f->version);
        return hvdc__frame_refuse(f, path, what);
    }
    if (hvdc__le_u32(buf + 60) != hvdc__crc32(0, buf, 60) || hvdc__le_u32(buf + 12) != header)
        return hvdc__frame_refuse(f, path, "is corrupted: its header fails its CRC-32 check");
    uint64_t announced = hvdc__le_u64(buf + 16);
    if (announced != nbytes - header) {
        snprintf(what, sizeof what, "is %s: the header announces %llu bytes of data, the file "
                 "holds %zu", announced > nbytes - header ? "truncated" : "corrupted",
                 (unsigned long long)announced, nbytes - header);
        return hvdc__frame_refuse(f, path, what);
    }
    uint32_t crc = hvdc__crc32(0, buf + header, announced);
    if (crc != hvdc__le_u32(buf + 24)) {
        snprintf(what, sizeof what, "is corrupted: its data has CRC-32 %08x, the header says "
                 "%08x", crc, (unsigned)hvdc__le_u32(buf + 24));
        return hvdc__frame_refuse(f, path, what);
    }
    *body = buf + header;
    *body_nbytes = (size_t)announced;
    return HVD_OK;
}
