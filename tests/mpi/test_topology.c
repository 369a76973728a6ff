/*
 * test_topology.c - hvd_rank/size/local_rank/local_size/cross_rank/cross_size against a
 * reference computed from every rank's host name, and against what the command line expects.
 *
 * The reference. Every rank allgathers its host name: $HVDC_NETNS when set (the two-host test
 * stage's namespaced hosts set it, see tests/two_hosts.sh), else gethostname(). Then, for rank r:
 *   local_size = ranks on r's host;  local_rank = ranks on r's host below r;
 *   cross_size = ranks with r's local rank;  cross_rank = ranks with r's local rank below r.
 * This is what Horovod means by local and cross, computed without MPI_Comm_split_type.
 * When both HVDC_NETNS and gethostname() are there they must agree (the namespace's UTS
 * hostname is what Open MPI uses to decide which ranks share a node).
 *
 * Expectations (all optional; each one given is checked on every rank):
 *   --size N          world size
 *   --local-size N    ranks on every host
 *   --cross-size N    number of hosts (ranks per local rank)
 *   --hosts A,B,...   the hosts in the order mpirun -H fills them: the ranks on host k have
 *                     cross rank k, and a rank's host must be in the list
 * e.g. `test_topology --size 4 --local-size 2 --cross-size 2 --hosts node1,node2` under
 * `mpirun -np 4 -H node1:2,node2:2`, and `--size 4 --local-size 4 --cross-size 1` on one host.
 *
 * Rank 0 prints the job's layout (rank, host, local rank, cross rank) before the checks.
 * Runs on the main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpitest.h"

#define HOST_LEN 64 /* bytes per rank in the allgathered host table, NUL included */
#define MAX_HOSTS 16

typedef struct expect {
    int size, local_size, cross_size; /* -1: not given */
    int num_hosts;                    /* 0: --hosts not given */
    char hosts[MAX_HOSTS][HOST_LEN];
} expect;

typedef struct place {
    int local_rank, local_size, cross_rank, cross_size;
} place;

static int parse_count(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 1 || v > 1 << 20) return -1;
    *out = (int)v;
    return 0;
}

static int parse_hosts(const char *s, expect *e) {
    e->num_hosts = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 0 || n >= HOST_LEN || e->num_hosts == MAX_HOSTS) return -1;
        memcpy(e->hosts[e->num_hosts], s, n);
        e->hosts[e->num_hosts][n] = '\0';
        e->num_hosts++;
        s += n;
        if (*s == ',') s++;
    }
    return e->num_hosts > 0 ? 0 : -1;
}

/* Returns 0, or -1 with a message printed. */
static int parse_args(int argc, char **argv, expect *e) {
    *e = (expect){.size = -1, .local_size = -1, .cross_size = -1};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = val == NULL;
        if (!bad && strcmp(flag, "--size") == 0) {
            bad = parse_count(val, &e->size);
        } else if (!bad && strcmp(flag, "--local-size") == 0) {
            bad = parse_count(val, &e->local_size);
        } else if (!bad && strcmp(flag, "--cross-size") == 0) {
            bad = parse_count(val, &e->cross_size);
        } else if (!bad && strcmp(flag, "--hosts") == 0) {
            bad = parse_hosts(val, e);
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "test_topology: bad argument '%s'%s%s\nusage: test_topology "
                    "[--size N] [--local-size N] [--cross-size N] [--hosts A,B,...]\n",
                    flag, val ? " " : "", val ? val : "");
            return -1;
        }
        i++;
    }
    return 0;
}

/* This process's host name as the reference sees it; checks HVDC_NETNS against the UTS name. */
static void my_host(mt_ctx *t, char host[HOST_LEN]) {
    char uts[HOST_LEN] = "";
    if (gethostname(uts, sizeof uts) != 0) uts[0] = '\0';
    uts[HOST_LEN - 1] = '\0';
    const char *ns = getenv("HVDC_NETNS");
    if (ns && *ns) {
        MT_CHECK(t, strlen(ns) < HOST_LEN, "HVDC_NETNS is longer than %d bytes", HOST_LEN - 1);
        MT_CHECK(t, strcmp(ns, uts) == 0,
                 "HVDC_NETNS=%s but gethostname() = \"%s\": the namespace's UTS hostname is "
                 "not set, so MPI cannot tell the hosts apart", ns, uts);
        snprintf(host, HOST_LEN, "%s", ns);
    } else {
        snprintf(host, HOST_LEN, "%s", uts);
    }
}

/* The reference placement of rank r from the host table (size rows of HOST_LEN bytes). */
static place place_of(const char *hosts, int size, int r) {
    place p = {0, 0, 0, 0};
    const char *mine = hosts + (size_t)r * HOST_LEN;
    for (int q = 0; q < size; q++) {
        if (strcmp(hosts + (size_t)q * HOST_LEN, mine) != 0) continue;
        p.local_size++;
        if (q < r) p.local_rank++;
    }
    for (int q = 0; q < size; q++) {
        int lr = 0; /* q's local rank */
        const char *hq = hosts + (size_t)q * HOST_LEN;
        for (int k = 0; k < q; k++) lr += strcmp(hosts + (size_t)k * HOST_LEN, hq) == 0;
        if (lr != p.local_rank) continue;
        p.cross_size++;
        if (q < r) p.cross_rank++;
    }
    return p;
}

static void print_layout(const char *hosts, const int32_t *got, int size) {
    printf("# job layout: %d ranks\n", size);
    printf("# %5s %-20s %10s %10s %10s %10s\n", "rank", "host", "local_rank", "local_size",
           "cross_rank", "cross_size");
    for (int r = 0; r < size; r++) {
        const int32_t *g = got + 4 * r;
        printf("# %5d %-20s %10d %10d %10d %10d\n", r, hosts + (size_t)r * HOST_LEN, g[0], g[1],
               g[2], g[3]);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    expect e;
    if (parse_args(argc, argv, &e) != 0) return 2;
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    int rank = -1, size = -1, lr = -1, ls = -1, cr = -1, cs = -1;
    hvd_rank(&rank);
    hvd_size(&size);
    mt_ctx t;
    mt_init(&t, rank < 0 ? 0 : rank, size < 1 ? 1 : size);

    mt_begin(&t, "topology calls");
    MT_EXPECT(&t, hvd_rank(&rank), HVD_OK);
    MT_EXPECT(&t, hvd_size(&size), HVD_OK);
    MT_EXPECT(&t, hvd_local_rank(&lr), HVD_OK);
    MT_EXPECT(&t, hvd_local_size(&ls), HVD_OK);
    MT_EXPECT(&t, hvd_cross_rank(&cr), HVD_OK);
    MT_EXPECT(&t, hvd_cross_size(&cs), HVD_OK);
    MT_CHECK(&t, size >= 1 && rank >= 0 && rank < size, "rank %d size %d", rank, size);
    if (!mt_end(&t)) {
        hvd_shutdown();
        return mt_exit_code(&t);
    }

    /* everyone's host name and answers, so every rank can check every rank */
    char host[HOST_LEN] = "";
    int32_t mine[4] = {lr, ls, cr, cs};
    char *hosts = calloc((size_t)size, HOST_LEN);
    int32_t *got = calloc((size_t)size * 4, sizeof *got);
    if (!hosts || !got) {
        fprintf(stderr, "test_topology: out of memory\n");
        abort();
    }
    mt_begin(&t, "gather host names");
    my_host(&t, host);
    MT_EXPECT(&t, hvd_allgather("topology.hosts", host, HOST_LEN, hosts, (size_t)size * HOST_LEN,
                                HVD_UINT8, NULL, NULL), HVD_OK);
    MT_EXPECT(&t, hvd_allgather("topology.answers", mine, 4, got, (size_t)size * 4, HVD_INT32,
                                NULL, NULL), HVD_OK);
    for (int r = 0; r < size; r++) hosts[(size_t)r * HOST_LEN + HOST_LEN - 1] = '\0';
    mt_end(&t);
    if (rank == 0) print_layout(hosts, got, size);

    mt_begin(&t, "local and cross ranks match the host names");
    for (int r = 0; r < size; r++) {
        place p = place_of(hosts, size, r);
        const int32_t *g = got + 4 * r;
        MT_CHECK(&t, g[0] == p.local_rank && g[1] == p.local_size && g[2] == p.cross_rank &&
                         g[3] == p.cross_size,
                 "rank %d on %s: local rank/size %d/%d, cross rank/size %d/%d; expected "
                 "%d/%d, %d/%d", r, hosts + (size_t)r * HOST_LEN, g[0], g[1], g[2], g[3],
                 p.local_rank, p.local_size, p.cross_rank, p.cross_size);
    }
    mt_end(&t);

    mt_begin(&t, "layout as expected on the command line");
    MT_CHECK(&t, e.size < 0 || size == e.size, "size %d, expected %d", size, e.size);
    for (int r = 0; r < size; r++) {
        const int32_t *g = got + 4 * r;
        const char *h = hosts + (size_t)r * HOST_LEN;
        MT_CHECK(&t, e.local_size < 0 || g[1] == e.local_size,
                 "rank %d on %s: local size %d, expected %d", r, h, g[1], e.local_size);
        MT_CHECK(&t, e.cross_size < 0 || g[3] == e.cross_size,
                 "rank %d on %s: cross size %d, expected %d", r, h, g[3], e.cross_size);
        if (e.num_hosts > 0) {
            int k = 0;
            while (k < e.num_hosts && strcmp(e.hosts[k], h) != 0) k++;
            MT_CHECK(&t, k < e.num_hosts, "rank %d runs on %s, which is not in --hosts", r, h);
            MT_CHECK(&t, k == e.num_hosts || g[2] == k,
                     "rank %d on %s (host %d in --hosts): cross rank %d, expected %d", r, h, k,
                     g[2], k);
        }
    }
    mt_end(&t);

    free(hosts);
    free(got);
    mt_combine(&t);
    s = hvd_shutdown();
    if (s != HVD_OK) {
        printf("[rank %d] hvd_shutdown failed: %s: %s\n", rank, hvd_status_string(s),
               hvd_last_error());
        atomic_fetch_add(&t.failures, 1);
    }
    return mt_exit_code(&t);
}
