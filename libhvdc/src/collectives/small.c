/*
 * small.c - the one-step all-reduce for small buffers (allreduce.h): every rank sends its whole
 * buffer to every peer, receives every peer's, and folds the N copies in rank order itself.
 *
 *   N = 3:   0 ──> 1, 2      each rank, once all have arrived:
 *            1 ──> 0, 2        dst = (x0 op x1) op x2
 *            2 ──> 0, 1
 *
 * One round of latency, where latency is what small buffers pay for. Every rank runs the same
 * fold on the same inputs in the same order, so all end with the same bits. Receives are
 * posted before sends; sends go to rank+1 first so that no rank is everyone's first target.
 * scratch holds the N-1 received copies, then the requests and the fold's input pointers.
 * Background thread.
 */
#include <limits.h>
#include <string.h>

#include "base/status.h"
#include "base/tags.h"
#include "collectives/allreduce.h"
#include "collectives/fold.h"

/* The scratch layout for nbytes over size ranks: sets the stride of the received copies and the
 * request array's bytes; returns the total. */
static size_t small_layout(size_t nbytes, int size, size_t *stride, size_t *requests) {
    size_t peers = (size_t)size - 1;
    *stride = (nbytes + 63) / 64 * 64;
    *requests = (2 * peers * sizeof(MPI_Request) + 63) / 64 * 64;
    return peers * *stride + *requests + (size_t)size * sizeof(void *);
}

size_t hvdc__small_scratch_bytes(size_t count, hvd_dtype dtype, int size) {
    size_t stride, requests;
    return size > 1 && count > 0 ? small_layout(count * hvd_dtype_size(dtype), size, &stride, &requests) : 0;
}

hvd_status hvdc__small_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                 hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                 hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    int rank, size;
    CHECK_MPI(MPI_Comm_rank(comm, &rank));
    CHECK_MPI(MPI_Comm_size(comm, &size));
    size_t nbytes = count * hvd_dtype_size(dtype);
    if (size == 1 || count == 0) {
        if (src != dst && nbytes) memmove(dst, src, nbytes);
        return HVD_OK;
    }
    if (nbytes > INT_MAX)
        return hvdc__fail(HVD_ERR_INTERNAL, "one-step all-reduce of %zu bytes: too large", nbytes);
    size_t peers = (size_t)size - 1, stride, requests;
    CHECK(hvdc__buffer_reserve(scratch, small_layout(nbytes, size, &stride, &requests)));
    char *copies = scratch->data;                          /* peer i's copy at (i-1) * stride */
    MPI_Request *req = (MPI_Request *)(copies + peers * stride); /* (2 * peers) */
    const void **in = (const void **)((char *)req + requests);    /* (size), by rank */
    for (int i = 1; i < size; i++)
        CHECK_MPI(MPI_Irecv(copies + (size_t)(i - 1) * stride, (int)nbytes, MPI_BYTE,
                            (rank + i) % size, HVDC_TAG_SMALL, comm, &req[i - 1]));
    for (int i = 1; i < size; i++)
        CHECK_MPI(MPI_Isend(src, (int)nbytes, MPI_BYTE, (rank + i) % size, HVDC_TAG_SMALL, comm,
                            &req[peers + (size_t)i - 1]));
    CHECK(hvdc__wait_requests((int)(2 * peers), req, watch));
    for (int i = 0; i < size; i++)
        in[(rank + i) % size] = i == 0 ? src : (const void *)(copies + (size_t)(i - 1) * stride);
    hvdc__fold(dst, in, size, count, dtype, op);
fail:
    return st;
}
