/*
 * file_frame.h - the frame both of libhvdc's file formats (checkpoints, ckpt_format.h; elastic
 * commits, elastic_format.h) put around their data, and the CRC-32 that guards it: a 64-byte
 * header, then the body. Sealing writes the common fields and both checksums; opening checks
 * them in order (magic, size, version, header CRC, body size, body CRC) and names the first
 * that fails, so each format only lays out and checks its own fields.
 *
 *   0  char[8] magic                  28 .. 59  the format's own fields
 *   8  u32 version                    60  u32 crc32 of header bytes 0 .. 59
 *  12  u32 header_nbytes = 64
 *  16  u64 body_nbytes
 *  24  u32 body_crc32
 *
 * defines: hvdc__crc32, hvdc__frame_format, HVDC_FRAME_HEADER_NBYTES, HVDC_FRAME_FIELDS_OFFSET,
 *          hvdc__frame_seal,
 *          hvdc__frame_open, hvdc__frame_refuse
 * Pure functions (the CRC's tables are built once, on first use); any thread.
 */
#ifndef HVDC_FILE_FRAME_H
#define HVDC_FILE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

#define HVDC_FRAME_HEADER_NBYTES 64u
#define HVDC_FRAME_FIELDS_OFFSET 28u /* where a format's own header fields start */

/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320, as zlib's crc32): pass 0 to start,
 * or a previous result to continue. crc32("123456789") == 0xCBF43926. */
uint32_t hvdc__crc32(uint32_t crc, const void *data, size_t nbytes);

/* What a format is called in messages, e.g. {"HVDCCKPT", 1, "checkpoint", "the file was left
 * as it is and nothing was loaded"}. */
typedef struct hvdc__frame_format {
    const char *magic; /* 8 characters */
    uint32_t version;
    const char *noun;
    const char *consequence;
} hvdc__frame_format;

/* buf holds total bytes: the header, whose bytes 28..59 the format has filled, then the body.
 * Writes the rest of the header: magic, version, sizes and both CRCs. */
void hvdc__frame_seal(unsigned char *buf, size_t total, const hvdc__frame_format *f);

/* Checks the frame of nbytes at buf, read from path (for messages); on success *body points at
 * the body, *body_nbytes its length, and its CRC has been verified. Fails with
 * HVD_ERR_INVALID_ARG naming the first failed check. */
hvd_status hvdc__frame_open(const unsigned char *buf, size_t nbytes, const char *path,
                            const hvdc__frame_format *f, const unsigned char **body,
                            size_t *body_nbytes);

/* HVD_ERR_INVALID_ARG "<noun> '<path>' <what>; <consequence>": a format's own later checks. */
hvd_status hvdc__frame_refuse(const hvdc__frame_format *f, const char *path, const char *what);

#endif /* HVDC_FILE_FRAME_H */
