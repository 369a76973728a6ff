/*
 * buffer.c - grow-only aligned buffers; persistent so steady-state steps allocate nothing.
 * Background thread.
 */
#include "base/buffer.h"

#include <stdlib.h>

#include "base/status.h"

hvd_status hvdc__buffer_reserve(hvdc_buffer *buf, size_t bytes) {
    if (bytes <= buf->bytes) return HVD_OK;
    size_t rounded = (bytes + 63) / 64 * 64;
    void *data = aligned_alloc(64, rounded);
    if (!data) return hvdc__fail(HVD_ERR_NO_MEMORY, "could not allocate a %zu-byte buffer", bytes);
    free(buf->data);
    buf->data = data;
    buf->bytes = rounded;
    return HVD_OK;
}

void hvdc__buffer_free(hvdc_buffer *buf) {
    free(buf->data);
    buf->data = NULL;
    buf->bytes = 0;
}
