/*
 * fusion.h - how a fused all-reduce is laid out in host memory.
 *
 * The coordinator fuses up to HVD_FUSION_THRESHOLD bytes of ready tensors into one response,
 * which saves a negotiation and a collective per tensor. On the CPU, copying a tensor into a
 * buffer and back costs two passes over memory, which only pays for small tensors: so the
 * executor packs runs of small tensors into cache-sized pieces and reduces each large tensor
 * where it lies, without a copy. This file makes that plan; it does no I/O.
 *
 * defines: hvdc_pack_piece, hvdc_pack_plan, hvdc__pack_plan_make, hvdc__pack_plan_free,
 *          HVDC_PACK_ALIGN_BYTES
 * Pure; background thread (and tests).
 */
#ifndef HVDC_FUSION_H
#define HVDC_FUSION_H

#include <stddef.h>

#include "base/buffer.h"
#include "hvdc.h"

/* Each packed tensor starts on this boundary, so reduction loops see aligned data. */
#define HVDC_PACK_ALIGN_BYTES 64

typedef struct hvdc_pack_piece {
    size_t first;   /* first tensor of the piece */
    size_t n;       /* tensors in the piece */
    int in_place;   /* 1: one tensor, reduced in its own buffer; 0: packed into the buffer */
    size_t count;   /* packed: elements the piece spans in the buffer, padding included */
} hvdc_pack_piece;

typedef struct hvdc_pack_plan {
    size_t n_pieces;
    hvdc_pack_piece *pieces; /* (n_pieces) in tensor order */
    size_t *offsets;         /* (n_tensors) element offset of each packed tensor in its piece
                                (0 for a tensor reduced in place) */
    hvdc_buffer pieces_room, offsets_room; /* where the two live, kept from one make to the next */
} hvdc_pack_plan;

/* Plans tensors of counts[n] elements of elem_size bytes: a tensor of at least large_bytes is
 * reduced in place; smaller ones are packed in order into pieces of at most piece_bytes; a
 * piece that ends up holding one tensor is reduced in place instead. plan starts zeroed ({0})
 * and keeps its arrays from one make to the next, growing them only for more tensors than ever
 * (the executor plans every all-reduce with one plan: in steady state that allocates nothing);
 * hvdc__pack_plan_free releases them.
 * @return HVD_OK or HVD_ERR_NO_MEMORY. */
hvd_status hvdc__pack_plan_make(const size_t *counts, size_t n, size_t elem_size,
                                size_t piece_bytes, size_t large_bytes, hvdc_pack_plan *plan);
void hvdc__pack_plan_free(hvdc_pack_plan *plan);

#endif
