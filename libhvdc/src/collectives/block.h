/*
 * block.h - how a buffer of count elements is cut into parts blocks: the public
 * reduce-scatter's layout (hvdc.h), which the ring's phases and the GPU path's reduce-scatter
 * also use, so every path agrees on who owns which elements.
 *
 *   count = 10, parts = 4:  | 0 1 2 | 3 4 5 | 6 7 | 8 9 |   the first count % parts blocks
 *                                                          hold one element more
 *
 * defines: hvdc__block_range
 * Pure; any thread. C and C++ (included by CUDA sources' hosts).
 */
#ifndef HVDC_BLOCK_H
#define HVDC_BLOCK_H

#include <stddef.h>

/* Block r of count over parts starts at r*(count/parts) + min(r, count%parts) and holds
 * count/parts elements, plus one if r < count%parts. */
static inline void hvdc__block_range(size_t count, size_t parts, size_t r, size_t *offset,
                                     size_t *n) {
    size_t base = count / parts, extra = count % parts;
    *offset = r * base + (r < extra ? r : extra);
    *n = base + (r < extra ? 1 : 0);
}

#endif
