/*
 * xxh64.c - XXH64 (see xxh64.h). Input words are read little-endian, as the specification
 * says, so every machine computes the same value.
 * Pure; any thread.
 */
#include "base/xxh64.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t read64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t read32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint64_t lane_round(uint64_t acc, uint64_t input) {
    return rotl(acc + input * P2, 31) * P1;
}

static inline uint64_t merge_round(uint64_t acc, uint64_t lane) {
    return (acc ^ lane_round(0, lane)) * P1 + P4;
}

/* The four lanes over every whole 32-byte stripe, folded into one value. */
static uint64_t stripes(const unsigned char **p, size_t *nbytes, uint64_t seed) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    const unsigned char *q = *p;
    size_t left = *nbytes;
    for (; left >= 32; q += 32, left -= 32) {
        v1 = lane_round(v1, read64(q));
        v2 = lane_round(v2, read64(q + 8));
        v3 = lane_round(v3, read64(q + 16));
        v4 = lane_round(v4, read64(q + 24));
    }
    *p = q;
    *nbytes = left;
    uint64_t h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge_round(h, v1);
    h = merge_round(h, v2);
    h = merge_round(h, v3);
    return merge_round(h, v4);
}

uint64_t hvdc__xxh64(const void *data, size_t nbytes, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t total = (uint64_t)nbytes;
    uint64_t h = nbytes >= 32 ? stripes(&p, &nbytes, seed) : seed + P5;
    h += total;
    for (; nbytes >= 8; p += 8, nbytes -= 8) h = rotl(h ^ lane_round(0, read64(p)), 27) * P1 + P4;
    if (nbytes >= 4) {
        h = rotl(h ^ (uint64_t)read32(p) * P1, 23) * P2 + P3;
        p += 4;
        nbytes -= 4;
    }
    for (; nbytes > 0; p++, nbytes--) h = rotl(h ^ (uint64_t)*p * P5, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}
