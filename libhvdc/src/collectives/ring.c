/*
 * ring.c - the ring all-gather (see ring.h for the picture and the cost).
 *
 * Schedule for rank r of N, which starts owning block r: at step t = 0..N-2 it sends block
 * (r-t) to its right and receives block (r-t-1) from its left, straight into buf. Receives are
 * posted before sends. Sender and receiver cut a block into the same segments, so message
 * boundaries match. Background thread.
 */
#include "collectives/ring.h"

#include "base/status.h"
#include "base/tags.h"

enum {
    SEGMENT_BYTES = 512 * 1024, /* 64 KiB..1 MiB measured within noise of each other (np = 2) */
    WINDOW = 4,                 /* segments in flight each way */
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

/* One step: block send_b of buf goes to the right while block recv_b comes from the left
 * straight into buf, both cut into segments with at most WINDOW of each in flight (a bounded
 * number of outstanding messages keeps MPI's rendezvous traffic orderly on large blocks). */
static hvd_status ring_step(const ring *g, char *buf, int send_b, int recv_b) {
    hvd_status st = HVD_OK;
    MPI_Request sends[WINDOW], recvs[WINDOW];
    size_t send_start, send_len, recv_start, recv_len, s0, sl;
    hvdc__block_range(g->count, (size_t)g->size, (size_t)send_b, &send_start, &send_len);
    hvdc__block_range(g->count, (size_t)g->size, (size_t)recv_b, &recv_start, &recv_len);
    size_t n_send = segments_in(g, send_len), n_recv = segments_in(g, recv_len);
    size_t n = n_send > n_recv ? n_send : n_recv;
    for (size_t j = 0; j < n + WINDOW; j++) {
        /* finish segment j - WINDOW, which frees its slot, then post segment j into it */
        if (j >= WINDOW) {
            size_t k = j - WINDOW;
            if (k < n_recv) CHECK(hvdc__wait_requests(1, &recvs[k % WINDOW], g->watch));
            if (k < n_send) CHECK(hvdc__wait_requests(1, &sends[k % WINDOW], g->watch));
        }
        if (j < n_recv) {
            segment_range(g, recv_len, j, &s0, &sl);
            CHECK_MPI(MPI_Irecv(buf + (recv_start + s0) * g->elem, (int)(sl * g->elem), MPI_BYTE,
                                g->left, HVDC_TAG_ALLGATHER, g->comm, &recvs[j % WINDOW]));
        }
        if (j < n_send) {
            segment_range(g, send_len, j, &s0, &sl);
            CHECK_MPI(MPI_Isend(buf + (send_start + s0) * g->elem, (int)(sl * g->elem), MPI_BYTE,
                                g->right, HVDC_TAG_ALLGATHER, g->comm, &sends[j % WINDOW]));
        }
    }
fail:
    return st;
}

hvd_status hvdc__ring_allgather_blocks(MPI_Comm comm, void *buf, size_t count, hvd_dtype dtype,
                                       hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    ring g;
    CHECK(ring_setup(&g, comm, count, dtype, watch));
    for (int t = 0; t < g.size - 1 && count > 0; t++)
        CHECK(ring_step(&g, buf, mod(g.rank - t, g.size), mod(g.rank - t - 1, g.size)));
fail:
    return st;
}
