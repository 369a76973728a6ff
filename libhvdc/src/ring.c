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
#include "ring.h"

#include <string.h>

#include "reduce.h"
#include "status.h"

enum {
    SEGMENT_BYTES = 512 * 1024, /* see benchmarks/allreduce_bench for the choice */
    RECV_WINDOW = 4,            /* receive segments in flight while one is reduced */
    MAX_SEGMENTS = 256,         /* per block; larger blocks get larger segments */
    TAG_REDUCE_SCATTER = 1,
    TAG_ALLGATHER = 2,
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

/* Posts isends of every segment of block b of buf. */
static hvd_status send_block(const ring *g, const char *buf, int b, int tag, MPI_Request *reqs,
                             int *n_reqs) {
    hvd_status st = HVD_OK;
    size_t start, len;
    hvdc__block_range(g->count, g->size, b, &start, &len);
    for (size_t j = 0, n = segments_in(g, len); j < n; j++) {
        size_t s0, sl;
        segment_range(g, len, j, &s0, &sl);
        CHECK_MPI(MPI_Isend(buf + (start + s0) * g->elem, (int)(sl * g->elem), MPI_BYTE, g->right,
                            tag, g->comm, &reqs[(*n_reqs)++]));
    }
fail:
    return st;
}

/* One reduce-scatter step: receive block recv_b in segments through the scratch window and
 * reduce each into dst as it lands, while block send_b goes out. */
static hvd_status reduce_step(const ring *g, const char *send_from, int send_b, const char *src,
                              char *dst, int recv_b, hvd_dtype dtype, hvd_reduce_op op,
                              char *window) {
    hvd_status st = HVD_OK;
    MPI_Request sends[MAX_SEGMENTS + 1], recvs[RECV_WINDOW];
    int n_sends = 0;
    size_t start, len;
    hvdc__block_range(g->count, g->size, recv_b, &start, &len);
    size_t n_recv = segments_in(g, len), seg_bytes = g->segment_count * g->elem;
    for (size_t j = 0; j < n_recv && j < RECV_WINDOW; j++) {
        size_t s0, sl;
        segment_range(g, len, j, &s0, &sl);
        CHECK_MPI(MPI_Irecv(window + (j % RECV_WINDOW) * seg_bytes, (int)(sl * g->elem), MPI_BYTE,
                            g->left, TAG_REDUCE_SCATTER, g->comm, &recvs[j % RECV_WINDOW]));
    }
    CHECK(send_block(g, send_from, send_b, TAG_REDUCE_SCATTER, sends, &n_sends));
    for (size_t j = 0; j < n_recv; j++) {
        size_t s0, sl, slot = j % RECV_WINDOW;
        segment_range(g, len, j, &s0, &sl);
        CHECK(hvdc__wait_requests(1, &recvs[slot], g->watch));
        size_t at = (start + s0) * g->elem;
        hvdc__reduce(dst + at, src + at, window + slot * seg_bytes, sl, dtype, op);
        if (j + RECV_WINDOW < n_recv) {
            segment_range(g, len, j + RECV_WINDOW, &s0, &sl);
            CHECK_MPI(MPI_Irecv(window + slot * seg_bytes, (int)(sl * g->elem), MPI_BYTE, g->left,
                                TAG_REDUCE_SCATTER, g->comm, &recvs[slot]));
        }
    }
    CHECK(hvdc__wait_requests(n_sends, sends, g->watch));
fail:
    return st;
}

static hvd_status reduce_scatter_phase(const ring *g, const char *src, char *dst, int shift,
                                       hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch) {
    hvd_status st = HVD_OK;
    CHECK(hvdc__buffer_reserve(scratch, (size_t)RECV_WINDOW * g->segment_count * g->elem));
    for (int s = 0; s < g->size - 1; s++) {
        int send_b = mod(g->rank - s + shift, g->size), recv_b = mod(g->rank - s - 1 + shift, g->size);
        CHECK(reduce_step(g, s == 0 ? src : dst, send_b, src, dst, recv_b, dtype, op, scratch->data));
    }
fail:
    return st;
}

/* All-gather where rank r starts owning block r+1+shift (the block its reduce-scatter left). */
static hvd_status allgather_phase(const ring *g, char *dst, int shift) {
    hvd_status st = HVD_OK;
    MPI_Request reqs[2 * MAX_SEGMENTS + 2];
    for (int t = 0; t < g->size - 1; t++) {
        int n_reqs = 0, recv_b = mod(g->rank - t + shift, g->size),
            send_b = mod(g->rank + 1 - t + shift, g->size);
        size_t start, len;
        hvdc__block_range(g->count, g->size, recv_b, &start, &len);
        for (size_t j = 0, n = segments_in(g, len); j < n; j++) {
            size_t s0, sl;
            segment_range(g, len, j, &s0, &sl);
            CHECK_MPI(MPI_Irecv(dst + (start + s0) * g->elem, (int)(sl * g->elem), MPI_BYTE, g->left,
                                TAG_ALLGATHER, g->comm, &reqs[n_reqs++]));
        }
        CHECK(send_block(g, dst, send_b, TAG_ALLGATHER, reqs, &n_reqs));
        CHECK(hvdc__wait_requests(n_reqs, reqs, g->watch));
    }
fail:
    return st;
}

hvd_status hvdc__ring_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    ring g;
    CHECK(ring_setup(&g, comm, count, dtype, watch));
    if (g.size == 1 || count == 0) {
        if (src != dst && count) memmove(dst, src, count * g.elem);
        return HVD_OK;
    }
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
    CHECK(ring_setup(&g, comm, count, dtype, watch));
    if (g.size == 1 || count == 0) {
        if (src != work && count) memmove(work, src, count * g.elem);
        return HVD_OK;
    }
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
