/*
 * bytes.h - a growable byte string: messages being encoded or received, text being batched.
 * Capacity doubles, so appending n bytes one piece at a time costs O(n) copies.
 * defines: hvdc_bytes, hvdc__bytes_reserve, hvdc__bytes_append, hvdc__bytes_free
 * Not thread-safe; its owner locks.
 */
#ifndef HVDC_BYTES_H
#define HVDC_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct hvdc_bytes {
    uint8_t *data; /* (cap) of which len are used */
    size_t len, cap;
} hvdc_bytes;

/* Makes room for `more` bytes after len (contents kept). @return 0, or -1 when out of memory
 * (b is unchanged). */
int hvdc__bytes_reserve(hvdc_bytes *b, size_t more);
/* Appends n bytes of p. @return 0, or -1 when out of memory (b is unchanged). */
int hvdc__bytes_append(hvdc_bytes *b, const void *p, size_t n);
/* Frees the storage and empties b; NULL-safe on an empty b. */
void hvdc__bytes_free(hvdc_bytes *b);

#endif
