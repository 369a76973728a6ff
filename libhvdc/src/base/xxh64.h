/*
 * xxh64.h - XXH64, the 64-bit hash of the xxHash family (Yann Collet; the algorithm as its
 * specification, doc/xxhash_spec.md, gives it), for comparing bulk data across ranks: the
 * replica check hashes every parameter of a model with it. Four independent lanes of
 * multiply-rotate over 32-byte stripes make it several times faster than a CRC-32 with tables
 * (one lookup chain per 8 bytes), fast enough that hashing a model costs about what reading
 * it from memory costs. Not cryptographic. The values are the reference implementation's
 * (tests/unit/test_xxh64.c checks them against vectors taken from libxxhash).
 * defines: hvdc__xxh64
 * Pure; any thread.
 */
#ifndef HVDC_XXH64_H
#define HVDC_XXH64_H

#include <stddef.h>
#include <stdint.h>

/* The XXH64 of nbytes at data (NULL allowed when nbytes is 0) with this seed. */
uint64_t hvdc__xxh64(const void *data, size_t nbytes, uint64_t seed);

#endif
