/*
 * tell.c - eager messages to every other rank, never waited for (see tell.h).
 * Any thread.
 */
#include "base/tell.h"

#include <stdatomic.h>
#include <string.h>

#include "base/bytes.h"

enum { TELL_KEPT = 8 };
static hvdc_bytes kept[TELL_KEPT];
static atomic_uint n_told;

void hvdc__tell_others(MPI_Comm comm, int tag, const void *bytes, size_t len) {
    int rank = 0, size = 1;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS ||
        size == 1)
        return;
    hvdc_bytes *copy = &kept[atomic_fetch_add(&n_told, 1) % TELL_KEPT];
    copy->len = 0;
    if (hvdc__bytes_append(copy, bytes, len) != 0) return;
    for (int r = 0; r < size; r++) {
        if (r == rank) continue;
        MPI_Request request;
        if (MPI_Isend(copy->data, (int)len, MPI_BYTE, r, tag, comm, &request) == MPI_SUCCESS)
            MPI_Request_free(&request);
    }
}
