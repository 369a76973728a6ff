/*
 * test_order.c - ranks submit the same operations in different orders; all must complete with
 * the right results (the background threads negotiate one common order).
 *
 * Round 1: 50 async allreduces of different sizes (0 to ~70 000 elements), dtypes and ops,
 * submitted in a rank-dependent permutation (same seed on every run), with short
 * rank-dependent pauses so submissions straddle negotiation cycles, then waited in another
 * permutation. Five iterations reuse the same names (steady state, response cache).
 * Round 2: the same with every kind of collective mixed (allreduce, broadcast, allgather,
 * reducescatter, alltoall).
 *
 * Modes (argv[1]):
 *   (none)      hvd_init starts MPI and hvd_shutdown must finalize it;
 *   --app-mpi   the application starts MPI (MPI_THREAD_MULTIPLE) before hvd_init; hvd_shutdown
 *               must leave it running; the application finalizes it;
 *   --split     like --app-mpi, but libhvdc runs on half of the world (even and odd ranks)
 *               through hvd_init_comm;
 *   --serialized  the application starts MPI with only MPI_THREAD_SERIALIZED: hvd_init must
 *               fail with HVD_ERR_MPI (hvdc.h) and leave MPI to the application. No rounds.
 * Runs on the main thread only.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h> /* before hvdc.h, so hvd_init_comm is declared */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpitest.h"

#define N_OPS 50
#define N_ITER 5

typedef enum kind { K_ALLREDUCE, K_BROADCAST, K_ALLGATHER, K_REDUCESCATTER, K_ALLTOALL } kind;

typedef struct op_case {
    char name[64];
    kind kind;
    hvd_dtype dt;
    hvd_reduce_op op;
    size_t count; /* per-kind meaning: see run_round */
    int in_place;
    int root;
    size_t *counts;        /* alltoall sendcounts / allgather rank counts (size entries) */
    size_t *counts_out;    /* alltoall recvcounts */
    size_t recv_count;
    unsigned char *send, *recv;
    size_t recv_elems;     /* expected result elements */
    hvd_handle handle;
} op_case;

static uint64_t lcg_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void permute(int *p, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(lcg_next(&seed) % (uint64_t)(i + 1));
        int tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
}

static void pause_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static size_t count_of(int k) {
    if (k == 0) return 0;
    if (k % 7 == 0) return 20000 + (size_t)k * 1000; /* larger than default fusion chunks */
    return (size_t)(k * k * 37 + k) % 2000 + 1;
}

static void *xmalloc(size_t nbytes) {
    void *p = malloc(nbytes ? nbytes : 1);
    if (!p) abort();
    memset(p, 0xA5, nbytes ? nbytes : 1);
    return p;
}

/* Prepares case k of a round; mixed = 0 gives allreduces only. */
static void setup_case(mt_ctx *t, op_case *c, int k, int mixed) {
    memset(c, 0, sizeof *c);
    c->kind = mixed ? (kind)(k % 5) : K_ALLREDUCE;
    c->dt = mt_all_dtypes[k % HVD_DTYPE_COUNT];
    c->op = mt_all_ops[(k / HVD_DTYPE_COUNT) % HVD_REDUCE_OP_COUNT];
    c->count = mixed ? count_of(k) / 4 : count_of(k);
    c->in_place = k % 2 == 0;
    c->root = k % t->size;
    snprintf(c->name, sizeof c->name, "%s.%d", mixed ? "mixed" : "order", k);
    size_t es = mt_dtype_size(c->dt);
    uint64_t salt = mt_hash((uint64_t)k, (uint64_t)mixed, 99);
    switch (c->kind) {
    case K_ALLREDUCE:
        c->send = xmalloc(c->count * es);
        mt_fill(c->send, c->dt, c->op, t->rank, 0, c->count, salt);
        c->recv = c->in_place ? c->send : xmalloc(c->count * es);
        c->recv_elems = c->count;
        break;
    case K_BROADCAST:
        c->send = c->recv = xmalloc(c->count * es);
        mt_fill(c->send, c->dt, HVD_MAX, t->rank, 0, c->count, salt);
        c->recv_elems = c->count;
        break;
    case K_ALLGATHER:
        c->send = xmalloc((c->count + (size_t)t->rank) * es);
        mt_fill(c->send, c->dt, HVD_MAX, t->rank, 0, c->count + (size_t)t->rank, salt);
        c->recv_elems = 0;
        for (int r = 0; r < t->size; r++) c->recv_elems += c->count + (size_t)r;
        c->recv = xmalloc(c->recv_elems * es);
        c->counts = xmalloc((size_t)t->size * sizeof(size_t));
        break;
    case K_REDUCESCATTER: {
        c->send = xmalloc(c->count * es);
        mt_fill(c->send, c->dt, c->op, t->rank, 0, c->count, salt);
        size_t q = c->count / (size_t)t->size, rem = c->count % (size_t)t->size;
        c->recv_elems = q + ((size_t)t->rank < rem ? 1 : 0);
        c->recv = xmalloc(c->recv_elems * es);
        break;
    }
    case K_ALLTOALL: {
        c->counts = xmalloc((size_t)t->size * sizeof(size_t));
        c->counts_out = xmalloc((size_t)t->size * sizeof(size_t));
        size_t total = 0;
        for (int d = 0; d < t->size; d++) {
            c->counts[d] = c->count + (size_t)(t->rank * 2 + d);
            total += c->counts[d];
        }
        c->send = xmalloc(total * es);
        size_t off = 0;
        for (int d = 0; d < t->size; d++) {
            mt_fill(c->send + off * es, c->dt, HVD_MAX, t->rank, 0, c->counts[d],
                    mt_hash(salt, (uint64_t)d, 1));
            off += c->counts[d];
        }
        c->recv_elems = 0;
        for (int s = 0; s < t->size; s++) c->recv_elems += c->count + (size_t)(s * 2 + t->rank);
        c->recv = xmalloc(c->recv_elems * es);
        break;
    }
    }
    c->handle = HVD_HANDLE_NULL;
}

static hvd_status submit_case(mt_ctx *t, op_case *c) {
    switch (c->kind) {
    case K_ALLREDUCE:
        return hvd_allreduce_async(c->name, c->send, c->recv, c->count, c->dt, c->op, NULL,
                                   &c->handle);
    case K_BROADCAST:
        return hvd_broadcast_async(c->name, c->send, c->count, c->dt, c->root, NULL,
                                   &c->handle);
    case K_ALLGATHER:
        return hvd_allgather_async(c->name, c->send, c->count + (size_t)t->rank, c->recv,
                                   c->recv_elems, c->dt, &c->recv_count, c->counts, NULL,
                                   &c->handle);
    case K_REDUCESCATTER:
        return hvd_reducescatter_async(c->name, c->send, c->recv, c->count, c->dt, c->op, NULL,
                                       &c->recv_count, &c->handle);
    case K_ALLTOALL:
        return hvd_alltoall_async(c->name, c->send, c->counts, c->recv, c->recv_elems, c->dt,
                                  &c->recv_count, c->counts_out, NULL, &c->handle);
    }
    return HVD_ERR_INTERNAL;
}

/* --serialized: MPI below MPI_THREAD_MULTIPLE must be refused. */
static int serialized_mode(int *argc, char ***argv) {
    mt_ctx t;
    int provided = 0, rank = 0, flag = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    mt_init(&t, rank, 1);
    mt_begin(&t, "hvd_init on MPI started with MPI_THREAD_SERIALIZED -> HVD_ERR_MPI");
    if (provided >= MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("# MPI gave MPI_THREAD_MULTIPLE anyway; nothing to check\n");
    } else {
        hvd_status s = hvd_init();
        if (MT_EXPECT(&t, s, HVD_ERR_MPI)) {
            MT_CHECK(&t, hvd_last_error()[0] != '\0', "empty hvd_last_error()");
            if (rank == 0) printf("#   message: %s\n", hvd_last_error());
        }
        if (s == HVD_OK) hvd_shutdown();
        MT_CHECK(&t, hvd_is_initialized() == 0, "initialized after a failed hvd_init");
        MPI_Finalized(&flag);
        MT_CHECK(&t, flag == 0, "the failed hvd_init finalized the application's MPI");
    }
    mt_end(&t);
    MPI_Finalized(&flag);
    if (!flag) MPI_Finalize();
    return mt_exit_code(&t);
}

static void check_case(mt_ctx *t, op_case *c, int k, int mixed) {
    size_t es = mt_dtype_size(c->dt);
    uint64_t salt = mt_hash((uint64_t)k, (uint64_t)mixed, 99);
    unsigned char *ref = xmalloc(c->recv_elems * es);
    int approx = 0;
    switch (c->kind) {
    case K_ALLREDUCE:
        mt_reduce_ref(ref, c->dt, c->op, t->size, 0, c->count, salt, 1.0, 1.0);
        approx = mt_is_float(c->dt) && c->op == HVD_AVERAGE;
        break;
    case K_BROADCAST:
        mt_fill(ref, c->dt, HVD_MAX, c->root, 0, c->count, salt);
        break;
    case K_ALLGATHER: {
        size_t off = 0;
        for (int r = 0; r < t->size; r++) {
            mt_fill(ref + off * es, c->dt, HVD_MAX, r, 0, c->count + (size_t)r, salt);
            MT_CHECK(t, c->counts[r] == c->count + (size_t)r, "%s: rank_counts[%d] = %zu",
                     c->name, r, c->counts[r]);
            off += c->count + (size_t)r;
        }
        MT_CHECK(t, c->recv_count == c->recv_elems, "%s: recv_count %zu, expected %zu", c->name,
                 c->recv_count, c->recv_elems);
        break;
    }
    case K_REDUCESCATTER: {
        size_t q = c->count / (size_t)t->size, rem = c->count % (size_t)t->size;
        size_t ur = (size_t)t->rank, first = ur * q + (ur < rem ? ur : rem);
        mt_reduce_ref(ref, c->dt, c->op, t->size, first, c->recv_elems, salt, 1.0, 1.0);
        approx = mt_is_float(c->dt) && c->op == HVD_AVERAGE;
        MT_CHECK(t, c->recv_count == c->recv_elems, "%s: recv_count %zu, expected %zu", c->name,
                 c->recv_count, c->recv_elems);
        break;
    }
    case K_ALLTOALL: {
        size_t off = 0;
        for (int s = 0; s < t->size; s++) {
            size_t n = c->count + (size_t)(s * 2 + t->rank);
            mt_fill(ref + off * es, c->dt, HVD_MAX, s, 0, n, mt_hash(salt, (uint64_t)t->rank, 1));
            MT_CHECK(t, c->counts_out[s] == n, "%s: recvcounts[%d] = %zu, expected %zu", c->name,
                     s, c->counts_out[s], n);
            off += n;
        }
        MT_CHECK(t, c->recv_count == c->recv_elems, "%s: recv_count %zu, expected %zu", c->name,
                 c->recv_count, c->recv_elems);
        break;
    }
    }
    mt_compare(t, c->recv, ref, c->dt, c->recv_elems, approx, c->name);
    free(ref);
}

static void free_case(op_case *c) {
    if (c->recv != c->send) free(c->recv);
    free(c->send);
    free(c->counts);
    free(c->counts_out);
}

static void run_round(mt_ctx *t, int mixed, int iter) {
    op_case cases[N_OPS];
    int n = mixed ? N_OPS / 2 : N_OPS;
    int order[N_OPS], wait_order[N_OPS];
    uint64_t seed = 12345 + (uint64_t)t->rank * 7919 + (uint64_t)iter * 104729 + (uint64_t)mixed;
    permute(order, n, seed);
    permute(wait_order, n, seed ^ 0xabcdefull);
    mt_begin(t, "order %s iteration %d: %d ops in rank-dependent order (first %d)",
             mixed ? "mixed collectives" : "allreduce", iter, n, order[0]);
    for (int k = 0; k < n; k++) setup_case(t, &cases[k], k, mixed);
    uint64_t pause_seed = seed * 31 + 7;
    for (int i = 0; i < n; i++) {
        op_case *c = &cases[order[i]];
        MT_EXPECT(t, submit_case(t, c), HVD_OK);
        if (lcg_next(&pause_seed) % 8 == 0) pause_us((long)(lcg_next(&pause_seed) % 3000));
    }
    for (int i = 0; i < n; i++) {
        int k = wait_order[i];
        op_case *c = &cases[k];
        if (c->handle == HVD_HANDLE_NULL) continue;
        if (MT_EXPECT(t, hvd_wait(&c->handle), HVD_OK)) check_case(t, c, k, mixed);
    }
    mt_end(t);
    for (int k = 0; k < n; k++) free_case(&cases[k]);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int app_mpi = strcmp(mode, "--app-mpi") == 0, split = strcmp(mode, "--split") == 0;
    if (strcmp(mode, "--serialized") == 0) return serialized_mode(&argc, &argv);
    if (*mode && !app_mpi && !split) {
        fprintf(stderr, "usage: test_order [--app-mpi | --split | --serialized]\n");
        return 2;
    }
    mt_ctx t;
    mt_init(&t, 0, 1);
    int world_rank = 0, flag = 0;
    MPI_Comm sub = MPI_COMM_NULL;
    hvd_status s;
    if (app_mpi || split) {
        int provided = 0;
        if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
            provided < MPI_THREAD_MULTIPLE) {
            printf("MPI_Init_thread did not give MPI_THREAD_MULTIPLE (%d)\nFAIL\n", provided);
            return 1;
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    } else {
        MPI_Initialized(&flag);
        MT_CHECK(&t, flag == 0, "MPI initialized before hvd_init in default mode");
    }
    if (split) {
        MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &sub);
        s = hvd_init_comm(sub);
    } else {
        s = hvd_init();
    }
    if (s != HVD_OK) {
        printf("[world rank %d] hvd_init failed: %s: %s\nFAIL\n", world_rank,
               hvd_status_string(s), hvd_last_error());
        if (app_mpi || split) MPI_Finalize();
        return 1;
    }
    int rank = 0, size = 1;
    hvd_rank(&rank);
    hvd_size(&size);
    t.rank = rank;
    t.size = size;
    if (rank == 0)
        printf("# test_order%s%s: %d ranks%s\n", *mode ? " " : "", mode, size,
               split ? " in each half of the world" : "");

    mt_begin(&t, "init mode %s", *mode ? mode : "default");
    MPI_Initialized(&flag);
    MT_CHECK(&t, flag == 1, "MPI not initialized after hvd_init");
    if (split) {
        int sub_rank = -1, sub_size = -1;
        MPI_Comm_rank(sub, &sub_rank);
        MPI_Comm_size(sub, &sub_size);
        MT_CHECK(&t, rank == sub_rank && size == sub_size,
                 "hvd rank/size %d/%d, but the communicator's are %d/%d", rank, size, sub_rank,
                 sub_size);
    }
    mt_end(&t);

    double t0 = mt_now();
    for (int iter = 0; iter < N_ITER; iter++) run_round(&t, 0, iter);
    for (int iter = 0; iter < N_ITER; iter++) run_round(&t, 1, iter);
    if (rank == 0) printf("# rounds took %.2f s\n", mt_now() - t0);

    mt_combine(&t);
    s = hvd_shutdown();
    mt_begin(&t, "shutdown");
    MT_EXPECT(&t, s, HVD_OK);
    MPI_Finalized(&flag);
    if (app_mpi || split)
        MT_CHECK(&t, flag == 0, "hvd_shutdown finalized MPI that the application started");
    else
        MT_CHECK(&t, flag == 1, "hvd_shutdown did not finalize the MPI that hvd_init started");
    mt_end(&t);

    if (app_mpi || split) {
        /* an independent verdict over the whole world, on the application's MPI */
        int mine = atomic_load(&t.failures), all = -1;
        if (!flag) {
            MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            if (all > mine && t.remote_failures == 0) t.remote_failures = all - mine;
            if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
            MPI_Finalize();
        }
    }
    return mt_exit_code(&t);
}
