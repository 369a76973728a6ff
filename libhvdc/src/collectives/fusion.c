/*
 * fusion.c - plans which tensors of a fused all-reduce are packed, and where, and which are
 * reduced in place. Pure; background thread.
 */
#include "collectives/fusion.h"

#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t count, size_t align) { return (count + align - 1) / align * align; }

/* Makes plan's arrays hold n tensors (a plan has at most one piece per tensor). */
static hvd_status reserve(hvdc_pack_plan *plan, size_t n) {
    if (n <= plan->capacity) return HVD_OK;
    hvdc__pack_plan_free(plan);
    plan->pieces = malloc(n * sizeof *plan->pieces);
    plan->offsets = malloc(n * sizeof *plan->offsets);
    if (!plan->pieces || !plan->offsets) {
        hvdc__pack_plan_free(plan);
        return HVD_ERR_NO_MEMORY;
    }
    plan->capacity = n;
    return HVD_OK;
}

hvd_status hvdc__pack_plan_make(const size_t *counts, size_t n, size_t elem_size,
                                size_t piece_bytes, size_t large_bytes, hvdc_pack_plan *plan) {
    if (reserve(plan, n ? n : 1) != HVD_OK) return HVD_ERR_NO_MEMORY;
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
    free(plan->pieces);
    free(plan->offsets);
    memset(plan, 0, sizeof *plan);
}
