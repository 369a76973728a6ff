/*
 * test_soak.c - a long random workload: many thousands of collectives of every kind, dtype,
 * op and size, submitted in batches in a different random order on every rank and waited in
 * yet another, each result checked against a local reference. Looks for what short tests miss:
 * a lost or duplicated completion, a stale response-cache entry when a name comes back with
 * other parameters, fusion of mixed neighbours, handles or memory leaked over thousands of
 * rounds (run it under ASan: tests/sanitizers.sh does).
 *
 * The plan (which operations, with what parameters) comes from --seed alone, so every rank
 * draws the same one; orders of submission and waiting also depend on the rank. Each batch:
 *   1. 1..--max-batch operations: allreduce (sometimes scaled, in place or not), grouped
 *      allreduce (1-5 tensors), broadcast (random root), allgather (counts differ by rank),
 *      reducescatter, alltoall (a random count matrix); sizes mostly small, some up to
 *      --max-count elements; half the names come from a small pool reused by every batch;
 *   2. submitted async in a per-rank random order, some polled once on the way;
 *   3. waited in another per-rank order, each checked at once, then freed;
 *   now and then an hvd_barrier between batches.
 * Every 2 000 operations is one check group ("ops A-B: OK"). Exit status is the verdict.
 *
 * Usage: test_soak [--ops N] [--seed S] [--max-count C] [--max-batch B]
 *        defaults 20000, 1, 32768, 48.
 * Runs on the main thread only.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

#define MAX_GROUP 5
#define NAME_LEN 48
#define OPS_PER_GROUP 2000

typedef enum kind { K_ALLREDUCE, K_GROUPED, K_BROADCAST, K_ALLGATHER, K_REDUCESCATTER,
                    K_ALLTOALL, K_COUNT } kind;
static const char *const kind_names[K_COUNT] = {"allreduce", "grouped", "broadcast",
                                                "allgather", "reducescatter", "alltoall"};

/* One planned operation and this rank's buffers for it. Sizes are elements. */
typedef struct soak_op {
    kind kind;
    hvd_dtype dt;
    hvd_reduce_op op;
    double prescale, postscale;
    int in_place, root, n_tensors;
    uint64_t salt;
    char names[MAX_GROUP][NAME_LEN];
    size_t counts[MAX_GROUP];   /* allreduce/grouped/broadcast/reducescatter: per tensor;
                                   allgather: counts[0] + rank is rank's count */
    size_t *matrix;             /* alltoall: (size, size) count from row rank to column rank */
    void *send[MAX_GROUP], *recv[MAX_GROUP];
    size_t recv_elems;          /* elements expected in recv[0] (allgather, reducescatter,
                                   alltoall) */
    size_t recv_count;          /* what the library reported */
    size_t *rank_counts;        /* (size) allgather rank_counts / alltoall recvcounts */
    hvd_handle handle;
} soak_op;

/* ---- deterministic random numbers (SplitMix64) ------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rng_below(uint64_t *s, size_t n) { return n ? (size_t)(rng_next(s) % n) : 0; }

static void permute(int *p, int n, uint64_t *s) {
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(s, (size_t)i + 1);
        int tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
}

static void *xmalloc(size_t nbytes) {
    void *p = malloc(nbytes ? nbytes : 1);
    if (!p) {
        fprintf(stderr, "test_soak: out of memory\n");
        abort();
    }
    memset(p, 0xA5, nbytes ? nbytes : 1); /* garbage where results must land */
    return p;
}

/* Sizes: mostly tiny (fusion, negotiation), some medium, a few up to max_count, one in a
 * hundred up to 4 x max_count (past the 1 MiB above which all-reduces skip the fusion buffer). */
static size_t draw_count(uint64_t *s, size_t max_count) {
    size_t r = rng_below(s, 100);
    if (r < 1) return 1 + rng_below(s, 4 * max_count);
    if (r < 5) return 0;
    if (r < 65) return 1 + rng_below(s, 64);
    if (r < 92) return 1 + rng_below(s, max_count / 8 + 1);
    return 1 + rng_below(s, max_count);
}

/* ---- planning: identical on every rank ---------------------------------------------------- */

static void plan_op(soak_op *o, uint64_t *s, long id, int slot, int size, size_t max_count) {
    memset(o, 0, sizeof *o);
    o->kind = (kind)rng_below(s, K_COUNT);
    /* half the reductions are float32 sums, so neighbours fuse; the rest anything */
    int common = rng_below(s, 2) == 0;
    o->dt = common ? HVD_FLOAT32 : mt_all_dtypes[rng_below(s, HVD_DTYPE_COUNT)];
    o->op = common ? HVD_SUM : mt_defined_op(o->dt, mt_all_ops[rng_below(s, HVD_REDUCE_OP_COUNT)]);
    o->prescale = o->postscale = 1.0;
    if (mt_is_float(o->dt) && (o->kind == K_ALLREDUCE || o->kind == K_GROUPED ||
                               o->kind == K_REDUCESCATTER) && rng_below(s, 4) == 0) {
        static const double scales[3] = {0.5, 1.0, 2.0}; /* exact in every float dtype */
        o->prescale = scales[rng_below(s, 3)];
        o->postscale = scales[rng_below(s, 3)];
    }
    o->in_place = rng_below(s, 2) == 0;
    o->root = (int)rng_below(s, (size_t)size);
    o->salt = mt_hash((uint64_t)id, 0x50a4, 7);
    o->n_tensors = o->kind == K_GROUPED ? 1 + (int)rng_below(s, MAX_GROUP) : 1;
    /* names: a pool reused by every batch (slot is unique within a batch), or unique */
    char base[NAME_LEN / 2];
    if (rng_below(s, 2) == 0) snprintf(base, sizeof base, "pool.%d", slot);
    else snprintf(base, sizeof base, "op.%ld", id);
    for (int k = 0; k < o->n_tensors; k++) {
        if (o->kind == K_GROUPED) snprintf(o->names[k], NAME_LEN, "%s.m%d", base, k);
        else snprintf(o->names[k], NAME_LEN, "%s", base);
        o->counts[k] = draw_count(s, max_count);
    }
    if (o->kind == K_ALLGATHER || o->kind == K_ALLTOALL) o->counts[0] /= (size_t)size;
    if (o->kind == K_ALLTOALL) {
        o->matrix = xmalloc((size_t)size * (size_t)size * sizeof *o->matrix);
        for (int i = 0; i < size * size; i++)
            o->matrix[i] = rng_below(s, 4) == 0 ? 0 : rng_below(s, o->counts[0] + 1);
    }
}

/* Salt of the alltoall block from src to dst, and the allgather count of rank r. */
static uint64_t block_salt(const soak_op *o, int src, int dst) {
    return mt_hash(o->salt, (uint64_t)src, (uint64_t)dst);
}
static size_t gather_count(const soak_op *o, int r) { return o->counts[0] + (size_t)r; }

/* ---- this rank's buffers, submission, checking -------------------------------------------- */

static void setup_buffers(soak_op *o, int rank, int size) {
    size_t es = mt_dtype_size(o->dt);
    switch (o->kind) {
    case K_ALLREDUCE:
    case K_GROUPED:
        for (int k = 0; k < o->n_tensors; k++) {
            o->send[k] = xmalloc(o->counts[k] * es);
            mt_fill(o->send[k], o->dt, o->op, rank, 0, o->counts[k], o->salt + (uint64_t)k);
            o->recv[k] = o->in_place ? o->send[k] : xmalloc(o->counts[k] * es);
        }
        break;
    case K_BROADCAST:
        o->send[0] = o->recv[0] = xmalloc(o->counts[0] * es);
        if (rank == o->root) mt_fill(o->send[0], o->dt, HVD_MAX, rank, 0, o->counts[0], o->salt);
        break;
    case K_ALLGATHER:
        o->send[0] = xmalloc(gather_count(o, rank) * es);
        mt_fill(o->send[0], o->dt, HVD_MAX, rank, 0, gather_count(o, rank), o->salt);
        for (int r = 0; r < size; r++) o->recv_elems += gather_count(o, r);
        o->recv[0] = xmalloc(o->recv_elems * es);
        o->rank_counts = xmalloc((size_t)size * sizeof(size_t));
        break;
    case K_REDUCESCATTER: {
        o->send[0] = xmalloc(o->counts[0] * es);
        mt_fill(o->send[0], o->dt, o->op, rank, 0, o->counts[0], o->salt);
        size_t q = o->counts[0] / (size_t)size, rem = o->counts[0] % (size_t)size;
        o->recv_elems = q + ((size_t)rank < rem ? 1 : 0);
        o->recv[0] = xmalloc(o->recv_elems * es);
        break;
    }
    case K_ALLTOALL: {
        size_t total = 0, off = 0;
        for (int d = 0; d < size; d++) total += o->matrix[rank * size + d];
        o->send[0] = xmalloc(total * es);
        for (int d = 0; d < size; d++) {
            size_t n = o->matrix[rank * size + d];
            mt_fill((char *)o->send[0] + off * es, o->dt, HVD_MAX, rank, 0, n,
                    block_salt(o, rank, d));
            off += n;
        }
        for (int src = 0; src < size; src++) o->recv_elems += o->matrix[src * size + rank];
        o->recv[0] = xmalloc(o->recv_elems * es);
        o->rank_counts = xmalloc((size_t)size * sizeof(size_t));
        break;
    }
    default: break;
    }
}

static hvd_status submit(soak_op *o, int rank, int size) {
    hvd_options opts = HVD_OPTIONS_INIT;
    opts.prescale = o->prescale;
    opts.postscale = o->postscale;
    switch (o->kind) {
    case K_ALLREDUCE:
        return hvd_allreduce_async(o->names[0], o->send[0], o->recv[0], o->counts[0], o->dt,
                                   o->op, &opts, &o->handle);
    case K_GROUPED: {
        const char *names[MAX_GROUP];
        for (int k = 0; k < o->n_tensors; k++) names[k] = o->names[k];
        return hvd_grouped_allreduce_async(o->n_tensors, names, (const void *const *)o->send,
                                           o->recv, o->counts, o->dt, o->op, &opts, &o->handle);
    }
    case K_BROADCAST:
        return hvd_broadcast_async(o->names[0], o->send[0], o->counts[0], o->dt, o->root, NULL,
                                   &o->handle);
    case K_ALLGATHER:
        return hvd_allgather_async(o->names[0], o->send[0], gather_count(o, rank), o->recv[0],
                                   o->recv_elems, o->dt, &o->recv_count, o->rank_counts, NULL,
                                   &o->handle);
    case K_REDUCESCATTER:
        return hvd_reducescatter_async(o->names[0], o->send[0], o->recv[0], o->counts[0], o->dt,
                                       o->op, &opts, &o->recv_count, &o->handle);
    case K_ALLTOALL:
        return hvd_alltoall_async(o->names[0], o->send[0], &o->matrix[rank * size], o->recv[0],
                                  o->recv_elems, o->dt, &o->recv_count, o->rank_counts, NULL,
                                  &o->handle);
    default: return HVD_ERR_INTERNAL;
    }
}

static void check(mt_ctx *t, soak_op *o, long id) {
    int rank = t->rank, size = t->size;
    size_t es = mt_dtype_size(o->dt);
    char what[128];
    snprintf(what, sizeof what, "op %ld %s %s %s '%s'", id, kind_names[o->kind],
             mt_dtype_name(o->dt), mt_op_name(o->op), o->names[0]);
    int approx = mt_is_float(o->dt) &&
                 (o->op == HVD_AVERAGE || o->prescale != 1.0 || o->postscale != 1.0);
    switch (o->kind) {
    case K_ALLREDUCE:
    case K_GROUPED:
        for (int k = 0; k < o->n_tensors; k++) {
            void *ref = xmalloc(o->counts[k] * es);
            mt_reduce_ref(ref, o->dt, o->op, size, 0, o->counts[k], o->salt + (uint64_t)k,
                          o->prescale, o->postscale);
            mt_compare(t, o->recv[k], ref, o->dt, o->counts[k], approx, what);
            free(ref);
        }
        break;
    case K_BROADCAST: {
        void *ref = xmalloc(o->counts[0] * es);
        mt_fill(ref, o->dt, HVD_MAX, o->root, 0, o->counts[0], o->salt);
        mt_compare(t, o->recv[0], ref, o->dt, o->counts[0], 0, what);
        free(ref);
        break;
    }
    case K_ALLGATHER: {
        void *ref = xmalloc(o->recv_elems * es);
        size_t off = 0;
        for (int r = 0; r < size; r++) {
            mt_fill((char *)ref + off * es, o->dt, HVD_MAX, r, 0, gather_count(o, r), o->salt);
            MT_CHECK(t, o->rank_counts[r] == gather_count(o, r), "%s: rank_counts[%d] = %zu",
                     what, r, o->rank_counts[r]);
            off += gather_count(o, r);
        }
        MT_CHECK(t, o->recv_count == o->recv_elems, "%s: recv_count %zu, expected %zu", what,
                 o->recv_count, o->recv_elems);
        mt_compare(t, o->recv[0], ref, o->dt, o->recv_elems, 0, what);
        free(ref);
        break;
    }
    case K_REDUCESCATTER: {
        size_t q = o->counts[0] / (size_t)size, rem = o->counts[0] % (size_t)size;
        size_t ur = (size_t)rank, first = ur * q + (ur < rem ? ur : rem);
        void *ref = xmalloc(o->recv_elems * es);
        mt_reduce_ref(ref, o->dt, o->op, size, first, o->recv_elems, o->salt, o->prescale,
                      o->postscale);
        MT_CHECK(t, o->recv_count == o->recv_elems, "%s: recv_count %zu, expected %zu", what,
                 o->recv_count, o->recv_elems);
        mt_compare(t, o->recv[0], ref, o->dt, o->recv_elems, approx, what);
        free(ref);
        break;
    }
    case K_ALLTOALL: {
        void *ref = xmalloc(o->recv_elems * es);
        size_t off = 0;
        for (int src = 0; src < size; src++) {
            size_t n = o->matrix[src * size + rank];
            mt_fill((char *)ref + off * es, o->dt, HVD_MAX, src, 0, n, block_salt(o, src, rank));
            MT_CHECK(t, o->rank_counts[src] == n, "%s: recvcounts[%d] = %zu, expected %zu", what,
                     src, o->rank_counts[src], n);
            off += n;
        }
        MT_CHECK(t, o->recv_count == o->recv_elems, "%s: recv_count %zu, expected %zu", what,
                 o->recv_count, o->recv_elems);
        mt_compare(t, o->recv[0], ref, o->dt, o->recv_elems, 0, what);
        free(ref);
        break;
    }
    default: break;
    }
}

static void free_op(soak_op *o) {
    for (int k = 0; k < o->n_tensors; k++) {
        if (o->recv[k] != o->send[k]) free(o->recv[k]);
        free(o->send[k]);
    }
    free(o->matrix);
    free(o->rank_counts);
}

static long parse_arg(const char *flag, const char *value, long lo, long hi) {
    char *end;
    long v = value ? strtol(value, &end, 10) : 0;
    if (!value || *end || v < lo || v > hi) {
        fprintf(stderr, "test_soak: %s needs an integer in [%ld, %ld]\n", flag, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    long n_ops = 20000, seed = 1, max_count = 32768, max_batch = 48;
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--ops") == 0) n_ops = parse_arg(argv[i], v, 1, 100000000);
        else if (strcmp(argv[i], "--seed") == 0) seed = parse_arg(argv[i], v, 0, 1L << 40);
        else if (strcmp(argv[i], "--max-count") == 0) max_count = parse_arg(argv[i], v, 1, 1 << 26);
        else if (strcmp(argv[i], "--max-batch") == 0) max_batch = parse_arg(argv[i], v, 1, 4096);
        else {
            fprintf(stderr, "usage: test_soak [--ops N] [--seed S] [--max-count C] "
                            "[--max-batch B]\n");
            return 2;
        }
    }
    mt_ctx t;
    mt_init(&t, 0, 1);
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    hvd_rank(&t.rank);
    hvd_size(&t.size);
    if (t.size > MT_MAX_RANKS) {
        printf("test data is exact only up to %d ranks\nFAIL\n", MT_MAX_RANKS);
        hvd_shutdown();
        return 1;
    }
    if (t.rank == 0)
        printf("# test_soak: %d ranks, %ld ops, seed %ld, sizes up to %ld elements (a few up to "
               "%ld), batches of 1-%ld\n", t.size, n_ops, seed, max_count, 4 * max_count,
               max_batch);

    soak_op *ops = xmalloc((size_t)max_batch * sizeof *ops);
    int *order = xmalloc((size_t)max_batch * sizeof *order);
    uint64_t plan = (uint64_t)seed, mine = mt_hash((uint64_t)seed, (uint64_t)t.rank, 0x50a4);
    long done = 0, by_kind[K_COUNT] = {0}, barriers = 0;
    double start = mt_now();
    mt_begin(&t, "ops 0-%ld", (long)OPS_PER_GROUP - 1);
    while (done < n_ops) {
        int n = 1 + (int)rng_below(&plan, (size_t)max_batch);
        if (n > n_ops - done) n = (int)(n_ops - done);
        for (int i = 0; i < n; i++) {
            plan_op(&ops[i], &plan, done + i, i, t.size, (size_t)max_count);
            setup_buffers(&ops[i], t.rank, t.size);
            by_kind[ops[i].kind]++;
        }
        permute(order, n, &mine);
        for (int i = 0; i < n; i++) {
            soak_op *o = &ops[order[i]];
            if (!MT_EXPECT(&t, submit(o, t.rank, t.size), HVD_OK)) o->handle = HVD_HANDLE_NULL;
            int finished = 0;
            if (o->handle && rng_below(&mine, 4) == 0)
                MT_EXPECT(&t, hvd_poll(o->handle, &finished), HVD_OK);
        }
        permute(order, n, &mine);
        for (int i = 0; i < n; i++) {
            soak_op *o = &ops[order[i]];
            if (o->handle == HVD_HANDLE_NULL) continue;
            hvd_handle h = o->handle;
            if (MT_EXPECT(&t, hvd_wait(&o->handle), HVD_OK)) check(&t, o, done + order[i]);
            if (rng_below(&mine, 16) == 0) /* a released handle must stay released */
                MT_EXPECT(&t, hvd_wait(&h), HVD_ERR_INVALID_ARG);
        }
        for (int i = 0; i < n; i++) free_op(&ops[i]);
        long before = done;
        done += n;
        if (rng_below(&plan, 32) == 0) {
            MT_EXPECT(&t, hvd_barrier(), HVD_OK);
            barriers++;
        }
        if (done / OPS_PER_GROUP != before / OPS_PER_GROUP || done == n_ops) {
            mt_end(&t);
            if (done < n_ops)
                mt_begin(&t, "ops %ld-%ld", done,
                         (done / OPS_PER_GROUP + 1) * OPS_PER_GROUP - 1 < n_ops - 1
                             ? (done / OPS_PER_GROUP + 1) * OPS_PER_GROUP - 1
                             : n_ops - 1);
        }
    }
    double seconds = mt_now() - start;
    if (t.rank == 0) {
        printf("# %ld ops in %.1f s (%.0f ops/s), %ld barriers:", done, seconds,
               (double)done / seconds, barriers);
        for (int k = 0; k < K_COUNT; k++) printf(" %s %ld", kind_names[k], by_kind[k]);
        printf("\n");
    }
    free(ops);
    free(order);
    mt_combine(&t);
    mt_begin(&t, "hvd_shutdown after the soak");
    MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
    mt_end(&t);
    return mt_exit_code(&t);
}
