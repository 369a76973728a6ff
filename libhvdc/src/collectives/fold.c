/*
 * fold.c - the fixed-order combine of n buffers (fold.h).
 *
 * The buffers are walked in chunks small enough to stay in L1: each chunk's running result is
 * combined with every input in turn before the next chunk starts, so memory sees n reads and one
 * write per element instead of a round trip per pair. When dst is also one of the later inputs
 * (an all-reduce in place: this rank's own contribution lives where the result goes) the
 * running result is kept in a stack chunk and copied out, since writing dst early would destroy
 * an input that is still needed.
 * Pure; any thread.
 */
#include "collectives/fold.h"

#include <string.h>

#include "collectives/reduce.h"

enum { CHUNK_BYTES = 8192 }; /* the running result: well inside L1 with the inputs streaming */

void hvdc__fold(void *dst, const void *const *in, int n, size_t count, hvd_dtype dtype,
                hvd_reduce_op op) {
    size_t elem = hvd_dtype_size(dtype), chunk = CHUNK_BYTES / elem;
    if (count == 0) return;
    if (n == 1) {
        if (dst != in[0]) memmove(dst, in[0], count * elem);
        return;
    }
    int aliased = 0; /* dst is a later input: it must not be written before it is read */
    for (int q = 1; q < n; q++) aliased |= in[q] == dst;
    _Alignas(64) unsigned char local[CHUNK_BYTES];
    for (size_t at = 0; at < count; at += chunk) {
        size_t len = count - at < chunk ? count - at : chunk, off = at * elem;
        char *acc = aliased ? (char *)local : (char *)dst + off;
        hvdc__reduce(acc, (const char *)in[0] + off, (const char *)in[1] + off, len, dtype, op);
        for (int q = 2; q < n; q++)
            hvdc__reduce(acc, acc, (const char *)in[q] + off, len, dtype, op);
        if (aliased) memcpy((char *)dst + off, local, len * elem);
    }
}
