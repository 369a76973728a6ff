/*
 * tell.c - eager messages to every other rank, never waited for (see tell.h).
 * Any thread.
 */
#include "base/tell.h"

#include <stdatomic.h>
#include <string.h>

enum { TELL_KEPT = 8 };
static char kept[TELL_KEPT][HVDC_TELL_MAX];
static atomic_uint n_told;

int hvdc__tell_others(MPI_Comm comm, int tag, const void *bytes, size_t len) {
    if (len > HVDC_TELL_MAX) return -1;
    int rank = 0, size = 1;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS ||
        size == 1)
        return 0;
    char *copy = kept[atomic_fetch_add(&n_told, 1) % TELL_KEPT];
    memcpy(copy, bytes, len);
    for (int r = 0; r < size; r++) {
        if (r == rank) continue;
        MPI_Request request;
        if (MPI_Isend(copy, (int)len, MPI_BYTE, r, tag, comm, &request) == MPI_SUCCESS)
            MPI_Request_free(&request);
    }
    return 0;
}
