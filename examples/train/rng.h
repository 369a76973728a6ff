/*
 * rng.h - a small deterministic random number generator (SplitMix64), the same stream on every
 * machine, so that every rank draws the same epoch permutation from the same seed.
 *
 * defines: rng_init, rng_next, rng_uniform, rng_below
 */
#ifndef RNG_H
#define RNG_H

#include <stdint.h>

typedef struct rng {
    uint64_t state;
} rng;

/* Streams for different (seed, stream) pairs are unrelated; stream is e.g. the epoch. */
static inline void rng_init(rng *r, uint64_t seed, uint64_t stream) {
    r->state = seed * 0x9E3779B97F4A7C15ull ^ (stream + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
}

static inline uint64_t rng_next(rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 random bits. */
static inline float rng_uniform(rng *r) {
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n), n > 0 (the modulo bias is below 2^-32 for n < 2^32). */
static inline uint32_t rng_below(rng *r, uint32_t n) {
    return (uint32_t)(rng_next(r) % n);
}

#endif /* RNG_H */
