/*
 * hash.h - FNV-1a, the hash of what is compared across ranks or saved: grouped all-reduce
 * member lists, a new process set's ranks, the optimizer's cross-rank signature, the elastic
 * state's signature. Not
 * cryptographic; well spread for short strings. (The name table's buckets use a faster hash
 * of their own, name_table.c: it never leaves the process.)
 * defines: HVDC_FNV_OFFSET, hvdc__fnv1a, hvdc__fnv1a_string
 * Pure; any thread.
 */
#ifndef HVDC_HASH_H
#define HVDC_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HVDC_FNV_OFFSET 1469598103934665603ull /* the starting value of a hash */

/* Folds nbytes of data into h. */
static inline uint64_t hvdc__fnv1a(uint64_t h, const void *data, size_t nbytes) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < nbytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Folds a NUL-terminated string into h, its NUL included when with_nul (so that a list of
 * strings hashes differently from their concatenation). */
static inline uint64_t hvdc__fnv1a_string(uint64_t h, const char *s, int with_nul) {
    for (const unsigned char *p = (const unsigned char *)s;; p++) {
        if (!*p && !with_nul) break;
        h = (h ^ *p) * 1099511628211ull;
        if (!*p) break;
    }
    return h;
}

#endif
