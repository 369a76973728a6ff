/*
 * ckpt_format.h - the checkpoint file format (version 1) as pure functions on memory buffers:
 * encoding, validation and decoding, inside file_frame.h's frame (header and CRC-32s).
 * checkpoint.c does the files and the collectives; tests/unit/test_checkpoint_format.c tests
 * this part alone.
 *
 * defines: hvdc__ckpt_tensor, hvdc__ckpt, hvdc__ckpt_encode, hvdc__ckpt_decode,
 *          HVDC_CKPT_MAGIC, HVDC_CKPT_VERSION, HVDC_CKPT_HEADER_NBYTES
 *
 * Layout; every integer little-endian, values in the host's order (which must be little-endian):
 *
 *   header (64 bytes)
 *     0  char[8] magic "HVDCCKPT"        28  u32 num_tensors
 *     8  u32 version = 1                 32  u64 values_nbytes (sum of count * dtype size)
 *    12  u32 header_nbytes = 64          40  u64 state_nbytes (sum of slots * count * 8)
 *    16  u64 body_nbytes                 48  12 bytes zero
 *    24  u32 body_crc32                  60  u32 crc32 of header bytes 0 .. 59
 *   body (body_nbytes)
 *     tensor table, per tensor: u32 name_nbytes, name (no NUL), u32 dtype, u64 count
 *     optimizer: u32 kind, u32 slots, u64 steps
 *     sampler:   u32 present, u32 shuffle, u32 drop_last, u32 0, u64 dataset_size, u64 seed,
 *                u64 epoch
 *     info:      u64 epoch, u64 step, u64 user[4]
 *     values:    each tensor's count elements, in table order
 *     state:     each tensor's slots * count float64, in table order
 *
 * Pure functions; any thread.
 */
#ifndef HVDC_CKPT_FORMAT_H
#define HVDC_CKPT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"
#include "train/file_frame.h" /* hvdc__crc32, for the format's users and tests */

#define HVDC_CKPT_MAGIC "HVDCCKPT"
#define HVDC_CKPT_VERSION 1u
#define HVDC_CKPT_HEADER_NBYTES HVDC_FRAME_HEADER_NBYTES

typedef struct hvdc__ckpt_tensor {
    const char *name;
    hvd_dtype dtype;
    size_t count;  // elements
    void *data;    // (count) values
    double *state; // (slots, count), or NULL when slots is 0
} hvdc__ckpt_tensor;

/* Everything a checkpoint holds. For decode, the caller fills in what it expects (the tensor
 * table, kind, slots, sampler presence and its dataset_size, shuffle, drop_last) and where the
 * values go; decode checks the file against it and only then fills in the rest. */
typedef struct hvdc__ckpt {
    uint32_t num_tensors;
    hvdc__ckpt_tensor *tensors; // (num_tensors)
    uint32_t kind;              // hvd_optimizer_kind
    uint32_t slots;             // state arrays per tensor
    uint64_t steps;
    uint32_t has_sampler;
    uint32_t sampler_shuffle, sampler_drop_last;
    uint64_t sampler_size, sampler_seed, sampler_epoch;
    hvd_checkpoint_info info;
} hvdc__ckpt;


/* Encodes c into a new buffer (*out, *nbytes; the caller frees *out).
 * @return HVD_OK, HVD_ERR_NO_MEMORY, HVD_ERR_UNSUPPORTED on a big-endian host. */
hvd_status hvdc__ckpt_encode(const hvdc__ckpt *c, unsigned char **out, size_t *nbytes);

/* Checks buf (a whole file, nbytes long, named path in messages) and, if everything agrees
 * with c, copies values, state, steps, sampler seed/epoch and info into c.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for a file that is not a checkpoint, truncated,
 *         corrupted or of another version; HVD_ERR_MISMATCH for one from a different model,
 *         optimizer or sampler. On failure nothing in c (or what it points to) is changed. */
hvd_status hvdc__ckpt_decode(const unsigned char *buf, size_t nbytes, const char *path,
                             hvdc__ckpt *c);

#endif
