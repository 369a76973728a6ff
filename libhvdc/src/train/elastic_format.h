/*
 * elastic_format.h - the elastic commit file (version 1) as pure functions on memory buffers:
 * encoding, and parsing with every structural check (sizes, magic, version, CRC-32s). Which
 * entries a commit must hold is elastic.c's business; tests/unit/test_elastic_format.c tests
 * this part alone.
 *
 * defines: hvdc__elastic_entry, hvdc__elastic_sampler, hvdc__elastic_image,
 *          hvdc__elastic_encode, hvdc__elastic_parse, HVDC_ELASTIC_MAGIC, HVDC_ELASTIC_VERSION,
 *          HVDC_ELASTIC_HEADER_NBYTES, HVDC_ELASTIC_NAME_MAX, HVDC_ELASTIC_TENSOR,
 *          HVDC_ELASTIC_BLOB
 *
 * Layout; every integer little-endian, values in the host's order (which must be little-endian):
 *
 *   header (64 bytes)
 *     0  char[8] magic "HVDCELST"        28  u32 num_entries
 *     8  u32 version = 1                 32  u64 sequence: commits of this job, from 1
 *    12  u32 header_nbytes = 64          40  u32 size: ranks of the run that committed
 *    16  u64 body_nbytes                 44  u32 flags: 1 optimizer, 2 sampler
 *    24  u32 body_crc32                  48  u64 time of the commit, ms since 1970
 *                                        56  u32 zero;  60  u32 crc32 of header bytes 0 .. 59
 *   body (body_nbytes)
 *     optimizer (flag 1): u64 nbytes, then that many bytes: a whole checkpoint file of the
 *                         optimizer (ckpt_format.h, without a sampler)
 *     sampler (flag 2):   u64 dataset_size, u32 shuffle, u32 drop_last, u64 seed, u64 epoch,
 *                         u64 position (of the epoch's list consumed by all ranks together),
 *                         u64 0
 *     entries, num_entries times:
 *                         u32 kind (0 tensor, 1 blob), u32 dtype, u64 count,
 *                         u32 name_nbytes, name (no NUL), then count * dtype size bytes
 *
 * Pure functions; any thread.
 */
#ifndef HVDC_ELASTIC_FORMAT_H
#define HVDC_ELASTIC_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"
#include "train/file_frame.h"

#define HVDC_ELASTIC_MAGIC "HVDCELST"
#define HVDC_ELASTIC_VERSION 1u
#define HVDC_ELASTIC_HEADER_NBYTES HVDC_FRAME_HEADER_NBYTES
#define HVDC_ELASTIC_NAME_MAX 200 /* bytes of an entry name: "hvd.elastic.x.<name>" fits an op name */

#define HVDC_ELASTIC_TENSOR 0u /* registered by pointer: restored in place, size fixed */
#define HVDC_ELASTIC_BLOB 1u   /* bytes the state owns (hvd_elastic_set_blob): any size */

typedef struct hvdc__elastic_entry {
    char name[HVDC_ELASTIC_NAME_MAX + 1];
    uint32_t kind;    // HVDC_ELASTIC_TENSOR or HVDC_ELASTIC_BLOB
    hvd_dtype dtype;  // HVD_UINT8 for blobs
    size_t count;     // elements
    const void *data; // (count) encode: the values; parse: points into the parsed buffer
} hvdc__elastic_entry;

typedef struct hvdc__elastic_sampler {
    uint64_t dataset_size, seed, epoch, position;
    uint32_t shuffle, drop_last;
} hvdc__elastic_sampler;

typedef struct hvdc__elastic_image {
    uint64_t sequence;
    uint32_t size;
    uint64_t time_ms;
    const unsigned char *ckpt; // the optimizer's checkpoint file, or NULL for none
    size_t ckpt_nbytes;
    int has_sampler;
    hvdc__elastic_sampler sampler;
    uint32_t num_entries;
    hvdc__elastic_entry *entries; // (num_entries) parse: allocated, the caller frees it
} hvdc__elastic_image;

/* Encodes img into a new buffer (*out, *nbytes; the caller frees *out).
 * @return HVD_OK; HVD_ERR_NO_MEMORY; HVD_ERR_UNSUPPORTED on a big-endian host. */
hvd_status hvdc__elastic_encode(const hvdc__elastic_image *img, unsigned char **out,
                                size_t *nbytes);

/* Checks that buf (a whole file of nbytes, called path in messages) is a well-formed commit
 * and describes it in *img: ckpt and every entry's data point into buf, img->entries is
 * allocated (free() it). Checks, in order: size, magic, version, header CRC, body size, body
 * CRC, then every section's bounds, each entry's kind, dtype and name.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for a file that is not a commit, truncated, corrupted or
 *         of another version (the message names the file and the check); HVD_ERR_NO_MEMORY.
 *         On failure *img is zeroed. */
hvd_status hvdc__elastic_parse(const unsigned char *buf, size_t nbytes, const char *path,
                               hvdc__elastic_image *img);

#endif
