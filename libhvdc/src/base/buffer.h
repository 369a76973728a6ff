/*
 * buffer.h - a grow-only, 64-byte-aligned host buffer (fusion buffer, ring scratch).
 * defines: hvdc_buffer, hvdc__buffer_reserve, hvdc__buffer_free
 * Owned by the background thread.
 */
#ifndef HVDC_BUFFER_H
#define HVDC_BUFFER_H

#include <stddef.h>

#include "hvdc.h"

typedef struct hvdc_buffer {
    void *data;
    size_t bytes;
} hvdc_buffer;

/* Makes buf hold at least bytes (contents are not kept). @return HVD_OK or HVD_ERR_NO_MEMORY. */
hvd_status hvdc__buffer_reserve(hvdc_buffer *buf, size_t bytes);
void hvdc__buffer_free(hvdc_buffer *buf);

#endif
