/*
 * direct.c - the reduce-scatter in rank order, and the all-reduce for large buffers built on it
 * (allreduce.h has the picture, the order and the cost).
 *
 * Rank r of N owns block r. Schedule: for every segment j of the blocks (all ranks cut a block
 * into the same segments, so message boundaries match), post the receives of segment j of
 * block r from every peer, then send segment j of block p to each peer p, starting with r+1 so
 * that no rank is everyone's first target. At most WINDOW segments per peer are in flight each
 * way; when segment k has arrived from every peer it is folded in rank order (fold.h), rank r's
 * own copy read from src, while segments k+1..k+WINDOW-1 are still moving. MPI keeps messages
 * with the same source and tag in order, so segment j of a peer lands in segment j's slot.
 *
 * scratch holds, in this order: the receive window (WINDOW slots of N-1 segments), the receive
 * and send requests (WINDOW x (N-1) each), and the N input pointers of a fold.
 * Background thread.
 */
#include <string.h>

#include "base/status.h"
#include "base/tags.h"
#include "collectives/allreduce.h"
#include "collectives/block.h"
#include "collectives/fold.h"
#include "collectives/ring.h"

enum {
    WINDOW = 4,                  /* segments in flight per peer each way while one is folded */
    SEGMENT_BYTES = 512 * 1024,  /* the ring's segment; with many peers, smaller (SLOT_BYTES) */
    SLOT_BYTES = 1024 * 1024,    /* one window slot (a segment from each peer) at most */
    MAX_SEGMENTS = 1 << 20,      /* per block: keeps segment counts within int */
};

typedef struct direct {
    MPI_Comm comm;
    hvdc_liveness *watch;
    int rank, size;
    size_t count, elem;
    size_t seg;         /* elements per segment */
    size_t seg_bytes;   /* seg * elem rounded up to 64: the stride of the window's slots */
    char *window;       /* (WINDOW, size-1, seg_bytes) */
    MPI_Request *recvs; /* (WINDOW, size-1) */
    MPI_Request *sends; /* (WINDOW, size-1) */
    const void **in;    /* (size) */
} direct;

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* The scratch layout for count elements of elem bytes over size ranks: sets the segment length
 * (elements), the receive window's and each request array's bytes; returns the total. */
static size_t direct_layout(size_t count, size_t elem, int size, size_t *seg, size_t *window,
                            size_t *requests) {
    size_t peers = (size_t)size - 1;
    size_t bytes = peers > 0 && peers * SEGMENT_BYTES > SLOT_BYTES ? SLOT_BYTES / peers : SEGMENT_BYTES;
    *seg = bytes / elem ? bytes / elem : 1;
    size_t largest_block = count / (size_t)size + 1;
    if (largest_block / *seg >= MAX_SEGMENTS) *seg = largest_block / MAX_SEGMENTS + 1;
    *window = (size_t)WINDOW * peers * round64(*seg * elem);
    *requests = round64((size_t)WINDOW * peers * sizeof(MPI_Request));
    return *window + 2 * *requests + (size_t)size * sizeof(void *);
}

size_t hvdc__direct_scratch_bytes(size_t count, hvd_dtype dtype, int size) {
    size_t seg, window, requests;
    return size > 1 ? direct_layout(count, hvd_dtype_size(dtype), size, &seg, &window, &requests) : 0;
}

static hvd_status direct_setup(direct *d, MPI_Comm comm, size_t count, hvd_dtype dtype,
                               hvdc_buffer *scratch, hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    d->comm = comm;
    d->watch = watch;
    CHECK_MPI(MPI_Comm_rank(comm, &d->rank));
    CHECK_MPI(MPI_Comm_size(comm, &d->size));
    d->count = count;
    d->elem = hvd_dtype_size(dtype);
    size_t peers = (size_t)d->size - 1, window, requests;
    size_t total = direct_layout(count, d->elem, d->size, &d->seg, &window, &requests);
    d->seg_bytes = round64(d->seg * d->elem);
    CHECK(hvdc__buffer_reserve(scratch, total));
    d->window = scratch->data;
    d->recvs = (MPI_Request *)(d->window + window);
    d->sends = (MPI_Request *)((char *)d->recvs + requests);
    d->in = (const void **)((char *)d->sends + requests);
    for (size_t i = 0; i < (size_t)WINDOW * peers; i++) d->recvs[i] = d->sends[i] = MPI_REQUEST_NULL;
fail:
    return st;
}

static size_t segments_in(const direct *d, size_t len) { return (len + d->seg - 1) / d->seg; }

/* Segment j of a block of block_len elements: [*start, *start + *len) within the block. */
static void segment_range(const direct *d, size_t block_len, size_t j, size_t *start, size_t *len) {
    *start = j * d->seg;
    *len = block_len - *start < d->seg ? block_len - *start : d->seg;
}

/* Peer i = 1..size-1 is rank (rank + i) % size; its slot in a window row is i - 1. */
static int peer_of(const direct *d, int i) { return (d->rank + i) % d->size; }

static char *slot(const direct *d, size_t j, int i) {
    return d->window + ((j % WINDOW) * (size_t)(d->size - 1) + (size_t)(i - 1)) * d->seg_bytes;
}

/* Posts segment j: receives of block rank's segment from every peer, sends of block p's
 * segment to every peer p (those blocks that have a segment j). */
static hvd_status post_segment(const direct *d, const char *src, size_t j) {
    hvd_status st = HVD_OK;
    size_t peers = (size_t)d->size - 1, row = (j % WINDOW) * peers, off, len, s0, sl;
    hvdc__block_range(d->count, (size_t)d->size, (size_t)d->rank, &off, &len);
    if (j < segments_in(d, len)) {
        segment_range(d, len, j, &s0, &sl);
        for (int i = 1; i < d->size; i++)
            CHECK_MPI(MPI_Irecv(slot(d, j, i), (int)(sl * d->elem), MPI_BYTE, peer_of(d, i),
                                HVDC_TAG_REDUCE_SCATTER, d->comm, &d->recvs[row + (size_t)i - 1]));
    }
    for (int i = 1; i < d->size; i++) {
        int p = peer_of(d, i);
        hvdc__block_range(d->count, (size_t)d->size, (size_t)p, &off, &len);
        if (j >= segments_in(d, len)) continue;
        segment_range(d, len, j, &s0, &sl);
        CHECK_MPI(MPI_Isend(src + (off + s0) * d->elem, (int)(sl * d->elem), MPI_BYTE, p,
                            HVDC_TAG_REDUCE_SCATTER, d->comm, &d->sends[row + (size_t)i - 1]));
    }
fail:
    return st;
}

/* Waits for segment k from every peer and folds it in rank order into work; then waits for
 * segment k's sends, which frees its slot row. */
static hvd_status finish_segment(const direct *d, const char *src, char *work, size_t k,
                                 hvd_dtype dtype, hvd_reduce_op op) {
    hvd_status st = HVD_OK;
    size_t peers = (size_t)d->size - 1, row = (k % WINDOW) * peers, off, len, s0, sl;
    CHECK(hvdc__wait_requests((int)peers, &d->recvs[row], d->watch));
    hvdc__block_range(d->count, (size_t)d->size, (size_t)d->rank, &off, &len);
    if (k < segments_in(d, len)) {
        segment_range(d, len, k, &s0, &sl);
        size_t at = (off + s0) * d->elem;
        for (int i = 0; i < d->size; i++) /* input of rank q = rank + i is at d->in[q] */
            d->in[peer_of(d, i)] = i == 0 ? (const void *)(src + at) : (const void *)slot(d, k, i);
        hvdc__fold(work + at, d->in, d->size, sl, dtype, op);
    }
    CHECK(hvdc__wait_requests((int)peers, &d->sends[row], d->watch));
fail:
    return st;
}

hvd_status hvdc__direct_reduce_scatter(MPI_Comm comm, const void *src, void *work, size_t count,
                                       hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                       hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    direct d;
    CHECK(direct_setup(&d, comm, count, dtype, scratch, watch));
    size_t elem = d.elem, off, len, n = 0;
    if (d.size == 1 || count == 0) {
        if (src != work && count) memmove(work, src, count * elem);
        return HVD_OK;
    }
    for (int p = 0; p < d.size; p++) { /* segments in the longest block */
        hvdc__block_range(count, (size_t)d.size, (size_t)p, &off, &len);
        if (segments_in(&d, len) > n) n = segments_in(&d, len);
    }
    for (size_t j = 0; j < n + WINDOW; j++) {
        if (j >= WINDOW) CHECK(finish_segment(&d, src, work, j - WINDOW, dtype, op));
        if (j < n) CHECK(post_segment(&d, src, j));
    }
fail:
    return st;
}

hvd_status hvdc__direct_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                  hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                  hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    CHECK(hvdc__direct_reduce_scatter(comm, src, dst, count, dtype, op, scratch, watch));
    CHECK(hvdc__ring_allgather_blocks(comm, dst, count, dtype, watch));
fail:
    return st;
}
