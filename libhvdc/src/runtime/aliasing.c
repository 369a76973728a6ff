/*
 * aliasing.c - the overlap and name checks of aliasing.h. A group is checked in O(n log n):
 * the buffers are sorted by address and swept once, so large groups cost little.
 * Any thread.
 */
#include "runtime/aliasing.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static int overlap(uintptr_t a, size_t an, uintptr_t b, size_t bn) {
    return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

hvd_status hvdc__check_overlap(const char *fn, const char *name, const void *send,
                               size_t send_bytes, const void *recv, size_t recv_bytes,
                               int in_place_ok) {
    if (send == recv && in_place_ok) return HVD_OK;
    if (!overlap((uintptr_t)send, send_bytes, (uintptr_t)recv, recv_bytes)) return HVD_OK;
    return hvdc__fail(HVD_ERR_INVALID_ARG,
                      "%s '%s': recvbuf overlaps sendbuf (%p, %zu bytes, and %p, %zu bytes); "
                      "expected %s", fn, name, recv, recv_bytes, send, send_bytes,
                      in_place_ok ? "recvbuf == sendbuf (in place) or buffers that do not overlap"
                                  : "buffers that do not overlap (this call is never in place)");
}

typedef struct span {
    uintptr_t start;
    size_t bytes;
    int tensor;
    int is_output;
} span;

static int by_start(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

hvd_status hvdc__check_group(const char *fn, int n, const char *const names[],
                             const void *const sends[], void *const recvs[],
                             const size_t counts[], size_t elem) {
    hvd_status st = HVD_OK;
    const char **sorted = malloc((size_t)n * sizeof *sorted);
    span *spans = malloc(2 * (size_t)n * sizeof *spans);
    if (!sorted || !spans) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory checking %d tensors", fn, n);
        goto done;
    }
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_name);
    for (int i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            st = hvdc__fail(HVD_ERR_INVALID_ARG, "%s: the name '%s' is given to two tensors of "
                            "the group; expected a different name for each", fn, sorted[i]);
            goto done;
        }
    }
    /* every output, and every input that is not also its own output */
    size_t n_spans = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = counts[i] * elem;
        spans[n_spans++] = (span){(uintptr_t)recvs[i], bytes, i, 1};
        if (sends[i] != recvs[i]) spans[n_spans++] = (span){(uintptr_t)sends[i], bytes, i, 0};
    }
    qsort(spans, n_spans, sizeof *spans, by_start);
    /* sweep: the span reaching furthest so far, and the output reaching furthest so far; an
     * output may overlap nothing, an input may overlap other inputs but no output */
    const span *far_any = NULL, *far_out = NULL;
    for (size_t k = 0; k < n_spans; k++) {
        const span *s = &spans[k];
        if (s->bytes == 0) continue;
        const span *hit = NULL;
        if (far_out && s->start < far_out->start + far_out->bytes) hit = far_out;
        else if (s->is_output && far_any && s->start < far_any->start + far_any->bytes) hit = far_any;
        if (hit) {
            const span *out = hit->is_output ? hit : s, *other = hit->is_output ? s : hit;
            st = hvdc__fail(HVD_ERR_INVALID_ARG,
                            "%s: the output of '%s' overlaps the %s of '%s'; expected each "
                            "output to overlap nothing but its own input, and only when equal "
                            "to it (in place)", fn, names[out->tensor],
                            other->is_output ? "output" : "input", names[other->tensor]);
            goto done;
        }
        if (!far_any || s->start + s->bytes > far_any->start + far_any->bytes) far_any = s;
        if (s->is_output && (!far_out || s->start + s->bytes > far_out->start + far_out->bytes)) far_out = s;
    }
done:
    free(sorted);
    free(spans);
    return st;
}
