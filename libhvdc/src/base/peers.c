/*
 * peers.c - every rank's host name and pid (see peers.h).
 */
#include "base/peers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"

enum { HOST_MAX = 64 };

typedef struct peer {
    char host[HOST_MAX];
    int pid;
} peer;

struct hvdc_peers {
    int size;
    peer *by_rank; /* (size) */
};

hvd_status hvdc__peers_create(MPI_Comm comm, hvdc_peers **out) {
    hvd_status st = HVD_OK;
    hvdc_peers *p = calloc(1, sizeof *p);
    peer mine = {.pid = (int)getpid()};
    if (gethostname(mine.host, sizeof mine.host - 1) != 0)
        snprintf(mine.host, sizeof mine.host, "?");
    if (!p) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the ranks' host names");
    CHECK_MPI(MPI_Comm_size(comm, &p->size));
    p->by_rank = calloc((size_t)p->size, sizeof *p->by_rank);
    if (!p->by_rank) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the ranks' host names");
        goto fail;
    }
    CHECK_MPI(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, p->by_rank, (int)sizeof mine,
                            MPI_BYTE, comm));
    for (int r = 0; r < p->size; r++) p->by_rank[r].host[HOST_MAX - 1] = '\0';
    *out = p;
    return HVD_OK;
fail:
    hvdc__peers_destroy(p);
    return st;
}

void hvdc__peers_destroy(hvdc_peers *p) {
    if (!p) return;
    free(p->by_rank);
    free(p);
}

const char *hvdc__peers_host(const hvdc_peers *p, int rank) {
    return p && rank >= 0 && rank < p->size ? p->by_rank[rank].host : "?";
}

int hvdc__peers_pid(const hvdc_peers *p, int rank) {
    return p && rank >= 0 && rank < p->size ? p->by_rank[rank].pid : 0;
}

char *hvdc__peers_say_rank(const hvdc_peers *p, int rank, char *out, size_t len) {
    snprintf(out, len, "rank %d (host '%s', pid %d)", rank, hvdc__peers_host(p, rank),
             hvdc__peers_pid(p, rank));
    return out;
}

char *hvdc__peers_say_host(const hvdc_peers *p, int rank, char *out, size_t len) {
    const char *host = hvdc__peers_host(p, rank);
    int size = p ? p->size : 0, members = 0;
    for (int r = 0; r < size; r++) members += strcmp(p->by_rank[r].host, host) == 0;
    size_t used = (size_t)snprintf(out, len, "host '%s' (rank%s ", host, members == 1 ? "" : "s");
    const char *sep = "";
    for (int r = 0; r < size && used < len; r++) {
        if (strcmp(p->by_rank[r].host, host) != 0) continue;
        int end = r;
        while (end + 1 < size && strcmp(p->by_rank[end + 1].host, host) == 0) end++;
        used += (size_t)(end > r ? snprintf(out + used, len - used, "%s%d-%d", sep, r, end)
                                 : snprintf(out + used, len - used, "%s%d", sep, r));
        sep = ",";
        r = end;
    }
    if (used < len) snprintf(out + used, len - used, ")");
    return out;
}
