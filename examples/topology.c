/*
 * topology.c - prints where the ranks of a job run: one line per rank with its host, local
 * rank (its place among the ranks on that host) and cross rank (its host's place among the
 * hosts), and the device a one-rank-per-GPU program would give it (device = local rank).
 *
 *   build/hvdcrun -np 8 -H node1:4,node2:4 build/examples/topology
 *
 *   # 8 ranks on 2 hosts
 *    rank host                 local_rank local_size cross_rank cross_size  device
 *       0 node1                         0          4          0          2       0
 *       ...
 *
 * The host is the UTS hostname (gethostname), the name MPI uses to tell hosts apart.
 * Every rank allgathers a fixed-size record; rank 0 prints. Runs on the main thread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hvdc.h>

#define HOST_LEN 64 /* bytes of host name per rank, NUL included */

typedef struct record {
    char host[HOST_LEN];
    int32_t local_rank, local_size, cross_rank, cross_size;
} record;

#define CHECK(call)                                                                            \
    do {                                                                                       \
        hvd_status s_ = (call);                                                                \
        if (s_ != HVD_OK) {                                                                    \
            fprintf(stderr, "topology: %s failed: %s: %s\n", #call, hvd_status_string(s_),     \
                    hvd_last_error());                                                         \
            exit(EXIT_FAILURE);                                                                \
        }                                                                                      \
    } while (0)

int main(void) {
    CHECK(hvd_init());
    int rank, size, v[4];
    CHECK(hvd_rank(&rank));
    CHECK(hvd_size(&size));
    CHECK(hvd_local_rank(&v[0]));
    CHECK(hvd_local_size(&v[1]));
    CHECK(hvd_cross_rank(&v[2]));
    CHECK(hvd_cross_size(&v[3]));

    record mine;
    memset(&mine, 0, sizeof mine);
    if (gethostname(mine.host, HOST_LEN - 1) != 0) snprintf(mine.host, HOST_LEN, "?");
    mine.local_rank = v[0];
    mine.local_size = v[1];
    mine.cross_rank = v[2];
    mine.cross_size = v[3];

    record *all = calloc((size_t)size, sizeof *all);
    if (!all) {
        fprintf(stderr, "topology: out of memory\n");
        return EXIT_FAILURE;
    }
    // the records travel as bytes: every rank runs this same binary, so the layout agrees
    CHECK(hvd_allgather("topology.records", &mine, sizeof mine, all, (size_t)size * sizeof mine,
                        HVD_UINT8, NULL, NULL));
    if (rank == 0) {
        int hosts = 0;
        for (int r = 0; r < size; r++) hosts += all[r].local_rank == 0;
        printf("# %d ranks on %d hosts\n", size, hosts);
        printf("%5s %-20s %10s %10s %10s %10s %7s\n", "rank", "host", "local_rank",
               "local_size", "cross_rank", "cross_size", "device");
        for (int r = 0; r < size; r++) {
            const record *x = &all[r];
            printf("%5d %-20.20s %10d %10d %10d %10d %7d\n", r, x->host, x->local_rank,
                   x->local_size, x->cross_rank, x->cross_size, x->local_rank);
        }
        fflush(stdout);
    }
    free(all);
    CHECK(hvd_shutdown());
    return EXIT_SUCCESS;
}
