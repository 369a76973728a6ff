/*
 * fusion.c - plans which tensors of a fused all-reduce are packed, and where, and which are
 * reduced in place. Pure; background thread.
 */
#include "collectives/fusion.h"

#include <string.h>

static size_t align_up(size_t count, size_t align) { return (count + align - 1) / align * align; }

hvd_status hvdc__pack_plan_make(const size_t *counts, size_t n, size_t elem_size,
                                size_t piece_bytes, size_t large_bytes, hvdc_pack_plan *plan) {
    size_t room = n ? n : 1; /* a plan has at most one piece per tensor */
    if (hvdc__buffer_reserve(&plan->pieces_room, room * sizeof *plan->pieces) != HVD_OK ||
        hvdc__buffer_reserve(&plan->offsets_room, room * sizeof *plan->offsets) != HVD_OK)
        return HVD_ERR_NO_MEMORY;
    plan->pieces = plan->pieces_room.data;
    plan->offsets = plan->offsets_room.data;
    plan->n_pieces = 0;
    size_t align = HVDC_PACK_ALIGN_BYTES / elem_size;
    size_t piece_count = piece_bytes / elem_size; /* capacity in elements */
    hvdc_pack_piece *open = NULL;                 /* the packed piece being filled */
    for (size_t i = 0; i < n; i++) {
        int large = piece_count == 0 || counts[i] > piece_count || counts[i] * elem_size >= large_bytes;
        if (large) {
            open = NULL;
            plan->offsets[i] = 0;
            plan->pieces[plan->n_pieces++] = (hvdc_pack_piece){i, 1, 1, counts[i]};
            continue;
        }
        size_t offset = open ? align_up(open->count, align) : 0;
        if (!open || offset + counts[i] > piece_count) {
            open = &plan->pieces[plan->n_pieces++];
            *open = (hvdc_pack_piece){i, 0, 0, 0};
            offset = 0;
        }
        plan->offsets[i] = offset;
        open->n++;
        open->count = offset + counts[i];
    }
    for (size_t p = 0; p < plan->n_pieces; p++) {
        if (plan->pieces[p].n == 1) plan->pieces[p].in_place = 1;
    }
    return HVD_OK;
}

void hvdc__pack_plan_free(hvdc_pack_plan *plan) {
    hvdc__buffer_free(&plan->pieces_room);
    hvdc__buffer_free(&plan->offsets_room);
    memset(plan, 0, sizeof *plan);
}
