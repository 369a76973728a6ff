/*
 * fusion_policy.c - hvdc__fusion_pick (fusion_policy.h).
 * Background thread of rank 0 (and tests).
 */
#include "negotiation/fusion_policy.h"

#include <string.h>

#include "base/dtype.h"

int hvdc__fusion_can_fuse(const hvdc_wire_request *a, const hvdc_wire_request *b) {
    return a->kind == HVDC_KIND_ALLREDUCE && b->kind == HVDC_KIND_ALLREDUCE &&
           a->dtype == b->dtype && a->op == b->op && (a->device < 0) == (b->device < 0) &&
           a->prescale == b->prescale && a->postscale == b->postscale;
}

static uint64_t request_bytes(const hvdc_wire_request *q) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < q->n_counts; i++) total += q->counts[i];
    return total * hvd_dtype_size((hvd_dtype)q->dtype);
}

/* The same ranks contribute to both (compared only while some rank has joined). */
static int same_ranks(const hvdc_fusion_item *a, const hvdc_fusion_item *b, int size) {
    if (a->n_announced == size && b->n_announced == size) return 1;
    return memcmp(a->announced, b->announced, (size_t)size) == 0;
}

size_t hvdc__fusion_pick(const hvdc_fusion_item *items, size_t n, size_t lead, int size,
                         size_t host_threshold, size_t gpu_threshold, size_t *picked) {
    const hvdc_wire_request *base = items[lead].request;
    size_t threshold = base->device < 0 ? host_threshold : gpu_threshold, n_picked = 0;
    uint64_t bytes = request_bytes(base);
    picked[n_picked++] = lead;
    for (size_t i = lead + 1; i < n && bytes < threshold; i++) {
        const hvdc_fusion_item *f = &items[i];
        if (!f->available || !hvdc__fusion_can_fuse(base, f->request) ||
            !same_ranks(&items[lead], f, size))
            continue;
        uint64_t more = request_bytes(f->request);
        if (bytes + more > threshold) continue;
        picked[n_picked++] = i;
        bytes += more;
    }
    return n_picked;
}
