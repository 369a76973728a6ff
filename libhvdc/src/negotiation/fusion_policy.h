/*
 * fusion_policy.h - which ready all-reduces rank 0 fuses into one response. A pure function of
 * the ready list, so the policy is tested alone (tests/unit/test_fusion_policy.c):
 *
 *   ready:  a(40 B)  b(int32)  c(70 B)  d(30 B)  e(20 B)      threshold 100 B, a leads
 *   fused:  a ------------------------> d ------> e            first fit, in ready order:
 *           b cannot fuse with a, c does not fit beside a; d and e do (40 + 30 + 20 <= 100)
 *
 * Two requests fuse when both are all-reduces of the same dtype, op, scale factors and memory
 * (host or device), and the same ranks announced both (while ranks have joined, each response
 * carries one set of contributing ranks). Each fused request must fit under the threshold
 * (the device one for device tensors) beside those taken so far; the search stops once they
 * reach it. The first request always goes, however large.
 * defines: hvdc_fusion_item, hvdc__fusion_can_fuse, hvdc__fusion_pick
 * Background thread of rank 0 (and tests).
 */
#ifndef HVDC_FUSION_POLICY_H
#define HVDC_FUSION_POLICY_H

#include <stddef.h>

#include "negotiation/wire.h"

/* One ready request as the policy sees it. */
typedef struct hvdc_fusion_item {
    const hvdc_wire_request *request; /* kind, dtype, op, device, scale factors, counts */
    const unsigned char *announced;   /* (size) the ranks that announced it (joined ones did not) */
    int n_announced;
    int available;                    /* may still be fused: in no response yet, not refused */
} hvdc_fusion_item;

/* Whether a and b may run as one all-reduce (the same kind of work, reduced alike). */
int hvdc__fusion_can_fuse(const hvdc_wire_request *a, const hvdc_wire_request *b);

/* The all-reduce items[lead] heads a response: picks it and the later available items that
 * fuse with it. size: the number of ranks; host_threshold, gpu_threshold: bytes.
 * @return how many were picked; picked (room for n - lead) gets their indices in ready order,
 * lead first. Reads items only. */
size_t hvdc__fusion_pick(const hvdc_fusion_item *items, size_t n, size_t lead, int size,
                         size_t host_threshold, size_t gpu_threshold, size_t *picked);

#endif
