/*
 * bytes.c - the growable byte string of bytes.h.
 * Any thread (each hvdc_bytes has one owner).
 */
#include "base/bytes.h"

#include <stdlib.h>
#include <string.h>

int hvdc__bytes_reserve(hvdc_bytes *b, size_t more) {
    if (more > SIZE_MAX - b->len) return -1;
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap = cap > SIZE_MAX / 2 ? b->len + more : cap * 2;
    uint8_t *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

int hvdc__bytes_append(hvdc_bytes *b, const void *p, size_t n) {
    if (hvdc__bytes_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void hvdc__bytes_free(hvdc_bytes *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
