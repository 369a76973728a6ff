/*
 * ring.c - the CPU ring (see ring.h for the picture and the cost).
 *
 * Schedule for rank r of N, with shift 0 for all-reduce (rank r ends owning block r+1) and
 * shift -1 for reduce-scatter (rank r ends owning block r):
 *   reduce-scatter step s = 0..N-2: send block (r-s+shift), receive block (r-s-1+shift) and
 *                                   set dst[b] = src[b] op received
 *   all-gather     step t = 0..N-2: send block (r+1-t), receive block (r-t) straight into dst
 * A block is sent from src at step 0 (not yet touched) and from dst afterwards. Receives are
 * posted before sends. Sender and receiver cut a block into the same segments, so message
 * boundaries match. Background thread.
 */
#include "collectives/ring.h"

#include <string.h>

#include "base/status.h"
#include "base/tags.h"
#include "collectives/reduce.h"

enum {
    SEGMENT_BYTES = 512 * 1024, /* 64 KiB..1 MiB measured within noise of each other (np = 2) */
    WINDOW = 4,                 /* segments in flight each way while one is reduced */
    MAX_SEGMENTS = 1 << 20,     /* per block: keeps segment counts within int */
};

typedef struct ring {
    MPI_Comm comm;
    hvdc_liveness *watch;
    int rank, size, left, right;
    size_t count, elem;
    size_t segment_count; /* elements per segment */
} ring;

static int mod(int a, int n) { return ((a % n) + n) % n; }

static size_t segments_in(const ring *g, size_t len) {
    return (len + g->segment_count - 1) / g->segment_count;
}

static void segment_range(const ring *g, size_t block_len, size_t j, size_t *start, size_t *len) {
    *start = j * g->segment_count;
    *len = block_len - *start < g->segment_count ? block_len - *start : g->segment_count;
}

static hvd_status ring_setup(ring *g, MPI_Comm comm, size_t count, hvd_dtype dtype,
                             hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    g->comm = comm;
    g->watch = watch;
    CHECK_MPI(MPI_Comm_rank(comm, &g->rank));
    CHECK_MPI(MPI_Comm_size(comm, &g->size));
    g->left = mod(g->rank - 1, g->size);
    g->right = mod(g->rank + 1, g->size);
    g->count = count;
    g->elem = hvd_dtype_size(dtype);
    size_t largest_block = count / (size_t)g->size + 1;
    g->segment_count = SEGMENT_BYTES / g->elem;
    if (largest_block / g->segment_count >= MAX_SEGMENTS)
        g->segment_count = largest_block / MAX_SEGMENTS + 1;
fail:
    return st;
}

/* One step: block send_b of send_from goes to the right while block recv_b comes from the
 * left, both cut into segments with at most WINDOW of each in flight (a bounded number of
 * outstanding messages keeps MPI's rendezvous traffic orderly on large blocks). A reduce step
 * (src != NULL) receives through the scratch window and sets dst = src op received as each
 * segment lands; a gather step receives straight into dst. */
static hvd_status ring_step(const ring *g, const char *send_from, int send_b, int recv_b,
                            const char *src, char *dst, hvd_dtype dtype, hvd_reduce_op op,
                            char *window, int tag) {
    hvd_status st = HVD_OK;
    MPI_Request sends[WINDOW], recvs[WINDOW];
    size_t send_start, send_len, recv_start, recv_len, s0, sl;
    hvdc__block_range(g->count, (size_t)g->size, (size_t)send_b, &send_start, &send_len);
    hvdc__block_range(g->count, (size_t)g->size, (size_t)recv_b, &recv_start, &recv_len);
    size_t n_send = segments_in(g, send_len), n_recv = segments_in(g, recv_len);
    size_t seg_bytes = g->segment_count * g->elem, n = n_send > n_recv ? n_send : n_recv;
    for (size_t j = 0; j < n + WINDOW; j++) {
        /* finish segment j - WINDOW, which frees its slot, then post segment j into it */
        if (j >= WINDOW) {
            size_t k = j - WINDOW;
            if (k < n_recv) {
                CHECK(hvdc__wait_requests(1, &recvs[k % WINDOW], g->watch));
                if (src) {
                    segment_range(g, recv_len, k, &s0, &sl);
                    size_t at = (recv_start + s0) * g->elem;
                    hvdc__reduce(dst + at, src + at, window + (k % WINDOW) * seg_bytes, sl, dtype, op);
                }
            }
            if (k < n_send) CHECK(hvdc__wait_requests(1, &sends[k % WINDOW], g->watch));
        }
        if (j < n_recv) {
            segment_range(g, recv_len, j, &s0, &sl);
            char *into = src ? window + (j % WINDOW) * seg_bytes : dst + (recv_start + s0) * g->elem;
            CHECK_MPI(MPI_Irecv(into, (int)(sl * g->elem), MPI_BYTE, g->left, tag, g->comm,
                                &recvs[j % WINDOW]));
        }
        if (j < n_send) {
            segment_range(g, send_len, j, &s0, &sl);
            CHECK_MPI(MPI_Isend(send_from + (send_start + s0) * g->elem, (int)(sl * g->elem),
                                MPI_BYTE, g->right, tag, g->comm, &sends[j % WINDOW]));
        }
    }
fail:
    return st;
}

size_t hvdc__ring_scratch_bytes(size_t count, hvd_dtype dtype, int size) {
    ring g = {.size = size, .count = count, .elem = hvd_dtype_size(dtype)};
    size_t largest_block = count / (size_t)size + 1;
    g.segment_count = SEGMENT_BYTES / g.elem;
    if (largest_block / g.segment_count >= MAX_SEGMENTS) g.segment_count = largest_block / MAX_SEGMENTS + 1;
    return size > 1 ? (size_t)WINDOW * g.segment_count * g.elem : 0;
}

static hvd_status reduce_scatter_phase(const ring *g, const char *src, char *dst, int shift,
                                       hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch) {
    hvd_status st = HVD_OK;
    CHECK(hvdc__buffer_reserve(scratch, (size_t)WINDOW * g->segment_count * g->elem));
    for (int s = 0; s < g->size - 1; s++) {
        int send_b = mod(g->rank - s + shift, g->size), recv_b = mod(g->rank - s - 1 + shift, g->size);
        CHECK(ring_step(g, s == 0 ? src : dst, send_b, recv_b, src, dst, dtype, op, scratch->data,
                        HVDC_TAG_REDUCE_SCATTER));
    }
fail:
    return st;
}

/* All-gather where rank r starts owning block r+1+shift (the block its reduce-scatter left). */
static hvd_status allgather_phase(const ring *g, char *dst, int shift) {
    hvd_status st = HVD_OK;
    for (int t = 0; t < g->size - 1; t++) {
        int recv_b = mod(g->rank - t + shift, g->size), send_b = mod(g->rank + 1 - t + shift, g->size);
        CHECK(ring_step(g, dst, send_b, recv_b, NULL, dst, HVD_UINT8, HVD_SUM, NULL, HVDC_TAG_ALLGATHER));
    }
fail:
    return st;
}

/* Sets g up; with one rank or no data there is nothing to exchange: copies src to dst and sets
 * *trivial. */
static hvd_status ring_begin(ring *g, MPI_Comm comm, const void *src, void *dst, size_t count,
                             hvd_dtype dtype, hvdc_liveness *watch, int *trivial) {
    hvd_status st = ring_setup(g, comm, count, dtype, watch);
    *trivial = st == HVD_OK && (g->size == 1 || count == 0);
    if (*trivial && src != dst && count) memmove(dst, src, count * g->elem);
    return st;
}

hvd_status hvdc__ring_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    ring g;
    int trivial = 0;
    CHECK(ring_begin(&g, comm, src, dst, count, dtype, watch, &trivial));
    if (trivial) return HVD_OK;
    CHECK(reduce_scatter_phase(&g, src, dst, 0, dtype, op, scratch));
    CHECK(allgather_phase(&g, dst, 0));
fail:
    return st;
}

hvd_status hvdc__ring_reduce_scatter(MPI_Comm comm, const void *src, void *work, size_t count,
                                     hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                     hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    ring g;
    int trivial = 0;
    CHECK(ring_begin(&g, comm, src, work, count, dtype, watch, &trivial));
    if (trivial) return HVD_OK;
    CHECK(reduce_scatter_phase(&g, src, work, -1, dtype, op, scratch));
fail:
    return st;
}

hvd_status hvdc__ring_allgather_blocks(MPI_Comm comm, void *buf, size_t count, hvd_dtype dtype,
                                       hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    ring g;
    CHECK(ring_setup(&g, comm, count, dtype, watch));
    if (g.size == 1 || count == 0) return HVD_OK;
    CHECK(allgather_phase(&g, buf, -1));
fail:
    return st;
}
