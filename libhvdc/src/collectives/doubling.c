/*
 * doubling.c - recursive-doubling all-reduce for small buffers, where the ring's 2(N-1)
 * latency steps cost more than its bandwidth saves.
 *
 *   N = 4:  step 1: 0<->1, 2<->3 exchange and reduce     step 2: 0<->2, 1<->3
 *
 * log2(N) exchanges of the whole buffer. With N not a power of two, the first 2*rem ranks
 * (rem = N - largest power of two) pair up first: each even one hands its buffer to the odd one
 * above it, sits out, and gets the result back at the end. Every rank combines the same partial
 * results in the same tree, and a op b == b op a exactly, so all ranks end bitwise equal.
 * Background thread.
 */
#include <string.h>

#include "base/status.h"
#include "base/tags.h"
#include "collectives/reduce.h"
#include "collectives/ring.h"


/* Sends count elements of out to peer while receiving as many from it into in. */
static hvd_status exchange(MPI_Comm comm, int peer, const void *out, void *in, size_t nbytes,
                           hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int n = 0;
    if (in) CHECK_MPI(MPI_Irecv(in, (int)nbytes, MPI_BYTE, peer, HVDC_TAG_DOUBLING, comm, &requests[n++]));
    if (out) CHECK_MPI(MPI_Isend(out, (int)nbytes, MPI_BYTE, peer, HVDC_TAG_DOUBLING, comm, &requests[n++]));
    CHECK(hvdc__wait_requests(n, requests, watch));
fail:
    return st;
}

hvd_status hvdc__doubling_allreduce(MPI_Comm comm, const void *src, void *dst, size_t count,
                                    hvd_dtype dtype, hvd_reduce_op op, hvdc_buffer *scratch,
                                    hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    int rank, size;
    CHECK_MPI(MPI_Comm_rank(comm, &rank));
    CHECK_MPI(MPI_Comm_size(comm, &size));
    size_t nbytes = count * hvd_dtype_size(dtype);
    if (src != dst && nbytes) memmove(dst, src, nbytes);
    if (size == 1 || count == 0) return HVD_OK;
    CHECK(hvdc__buffer_reserve(scratch, nbytes));
    char *theirs = scratch->data;
    int pof2 = 1;
    while (pof2 * 2 <= size) pof2 *= 2;
    int rem = size - pof2, new_rank;
    if (rank < 2 * rem) {
        if (rank % 2 == 0) {
            CHECK(exchange(comm, rank + 1, dst, NULL, nbytes, watch));
            new_rank = -1; /* sits out; gets the result at the end */
        } else {
            CHECK(exchange(comm, rank - 1, NULL, theirs, nbytes, watch));
            hvdc__reduce(dst, dst, theirs, count, dtype, op);
            new_rank = rank / 2;
        }
    } else {
        new_rank = rank - rem;
    }
    if (new_rank >= 0) {
        for (int mask = 1; mask < pof2; mask <<= 1) {
            int partner_new = new_rank ^ mask;
            int partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
            CHECK(exchange(comm, partner, dst, theirs, nbytes, watch));
            hvdc__reduce(dst, dst, theirs, count, dtype, op);
        }
    }
    if (rank < 2 * rem) {
        if (rank % 2 == 1) CHECK(exchange(comm, rank - 1, dst, NULL, nbytes, watch));
        else CHECK(exchange(comm, rank + 1, NULL, dst, nbytes, watch));
    }
fail:
    return st;
}
