/*
 * test_elastic.c - hvd_elastic across ranks: a run commits and dies, a run with another number
 * of ranks restores and finishes the epoch; the sampler must visit the epoch's list front to
 * back with no example twice and none skipped, and the restored state must be the committed
 * one on every rank.
 *
 *   model:  pred = W x + b, W (3, 5) float32, b (3) float64, SGD with momentum (as in
 *           test_optimizer.c: exact gradients of small integer data, no data set)
 *   state:  the optimizer, the sampler (N = 1000, global batch 12, drop_last), "visits" (N
 *           int32: how often each example was trained on, the same on every rank: each step's
 *           indices are all-gathered) and "progress" (bytes: steps, and the parameters' hash at
 *           the commit)
 *
 * Usage (under mpirun; np must divide 12):
 *   test_elastic first DIR STEPS EVERY [--stop-at K]
 *       restore finds no commit (restored = 0, every rank gets rank 0's parameters); then
 *       STEPS steps of epoch 1, committing every EVERY steps; the steps after the last commit
 *       are lost, as when a host dies. --stop-at K: rank 0 creates DIR/stop.request before the
 *       K-th commit, which must return stop = 1 on every rank and leave DIR/stop.ack; the run
 *       then stops there.
 *   test_elastic resume DIR SEQ SIZE STEPS
 *       restores commit number SEQ written by SIZE ranks after STEPS steps; every rank's
 *       parameters must hash to the committed hash; then trains to the end of the epoch and
 *       checks "visits" against the epoch's order: each of its first P positions (P = the
 *       sampler's final position) visited exactly once, the rest never.
 *   test_elastic corrupt DIR
 *       (after a "first" run) a flipped byte, a truncated file, a tensor of another size and
 *       ranks that register different state are each refused on every rank with the right
 *       status, changing nothing; the intact commit then restores.
 * Uses only hvdc.h. The verdict is the exit status; any failing rank fails the run.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hvdc.h"

enum { IN = 5, OUT = 3, GLOBAL_BATCH = 12, N = 1000 };

static int rank, size, failures;

static void fail(int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] test_elastic.c:%d: FAILED: ", rank, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}
#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) fail(__LINE__, __VA_ARGS__);                                            \
    } while (0)
#define MUST(call)                                                                           \
    do {                                                                                     \
        hvd_status st_ = (call);                                                             \
        if (st_ != HVD_OK) {                                                                 \
            fprintf(stderr, "[rank %d] %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__, #call, \
                    hvd_status_string(st_), hvd_last_error());                               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

typedef struct progress {
    uint64_t steps;      // optimizer steps at the commit
    uint64_t param_hash; // of W and b at the commit
} progress;

typedef struct run {
    float w[OUT * IN], dw[OUT * IN];
    double b[OUT], db[OUT];
    int32_t visits[N];
    progress prog;
    hvd_optimizer *opt;
    hvd_sampler *sampler;
    hvd_elastic *es;
} run;

static double xval(size_t k, int i) { return (double)((k * 7 + (size_t)i * 3) % 11) - 5.0; }
static double yval(size_t k, int o) { return (double)((k * 5 + (size_t)o * 2) % 7) - 3.0; }

static uint64_t params_hash(const run *r) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)r->w;
    for (size_t i = 0; i < sizeof r->w; i++) h = (h ^ p[i]) * 1099511628211ull;
    p = (const unsigned char *)r->b;
    for (size_t i = 0; i < sizeof r->b; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h >> 1;
}

/* 1 if v is the same on every rank. */
static int same_everywhere(uint64_t v) {
    int64_t m[2] = {(int64_t)v, -(int64_t)v};
    MUST(hvd_allreduce("check.same", m, m, 2, HVD_INT64, HVD_MAX));
    return m[0] == -m[1];
}

/* Optimizer, sampler and the elastic state over them; every rank starts from different
 * parameters so that restore/sync must make them equal. */
static void setup(run *r, const char *dir, int extra_tensor) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < OUT * IN; i++) r->w[i] = (float)((i * 3 + rank) % 7) * 0.125f;
    for (int o = 0; o < OUT; o++) r->b[o] = 0.25 * o - 0.5 * rank;
    hvd_param params[2] = {
        {"w", r->w, r->dw, OUT * IN, HVD_FLOAT32, HVD_DEVICE_CPU},
        {"b", r->b, r->db, OUT, HVD_FLOAT64, HVD_DEVICE_CPU},
    };
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    cfg.lr = 0.01;
    cfg.momentum = 0.9;
    MUST(hvd_optimizer_create(params, 2, &cfg, &r->opt));
    // hvd_optimizer_create broadcast rank 0's values; scramble again so restore must sync them
    for (int o = 0; o < OUT; o++) r->b[o] += rank;
    MUST(hvd_sampler_create(N, size, rank, 1, 11, 1, &r->sampler));
    MUST(hvd_sampler_set_epoch(r->sampler, 1));
    MUST(hvd_elastic_create(dir, &r->es));
    MUST(hvd_elastic_add_optimizer(r->es, r->opt));
    MUST(hvd_elastic_add_sampler(r->es, r->sampler));
    MUST(hvd_elastic_add_tensor(r->es, "visits", r->visits, N, HVD_INT32));
    MUST(hvd_elastic_add_bytes(r->es, "progress", &r->prog, sizeof r->prog));
    static int32_t extra[4];
    if (extra_tensor) MUST(hvd_elastic_add_tensor(r->es, "extra", extra, 4, HVD_INT32));
}

static void teardown(run *r) {
    MUST(hvd_elastic_destroy(r->es));
    MUST(hvd_sampler_destroy(r->sampler));
    MUST(hvd_optimizer_destroy(r->opt));
}

/* One training step on this rank's share of the next global batch; every rank counts every
 * rank's examples in visits. */
static void step(run *r, size_t k) {
    int b = GLOBAL_BATCH / size;
    size_t idx[GLOBAL_BATCH];
    int64_t mine[GLOBAL_BATCH], all[GLOBAL_BATCH];
    MUST(hvd_sampler_indices(r->sampler, k * (size_t)b, (size_t)b, idx));
    double gw[OUT * IN] = {0}, gb[OUT] = {0};
    for (int e = 0; e < b; e++) {
        mine[e] = (int64_t)idx[e];
        for (int o = 0; o < OUT; o++) {
            double pred = r->b[o];
            for (int i = 0; i < IN; i++) pred += (double)r->w[o * IN + i] * xval(idx[e], i);
            double d = (pred - yval(idx[e], o)) / b;
            gb[o] += d;
            for (int i = 0; i < IN; i++) gw[o * IN + i] += d * xval(idx[e], i);
        }
    }
    for (int i = 0; i < OUT * IN; i++) r->dw[i] = (float)gw[i];
    for (int o = 0; o < OUT; o++) r->db[o] = gb[o];
    MUST(hvd_optimizer_step(r->opt, NULL));
    MUST(hvd_sampler_record(r->sampler, (size_t)b));
    size_t got = 0;
    MUST(hvd_allgather("visits.gather", mine, (size_t)b, all, GLOBAL_BATCH, HVD_INT64, &got, NULL));
    EXPECT(got == GLOBAL_BATCH, "allgather gave %zu indices", got);
    for (size_t e = 0; e < got; e++) r->visits[all[e]]++;
}

static int mode_first(const char *dir, long steps, long every, long stop_at) {
    run r;
    setup(&r, dir, 0);
    hvd_elastic_info info = {.restored = 7};
    MUST(hvd_elastic_restore(r.es, &info));
    EXPECT(info.restored == 0, "a fresh directory has no commit, but restored = %d", info.restored);
    EXPECT(same_everywhere(params_hash(&r)), "without a commit, restore must still give every "
           "rank rank 0's parameters");
    long commits = 0;
    for (long s = 1; s <= steps; s++) {
        step(&r, (size_t)(s - 1));
        if (s % every != 0) continue;
        commits++;
        char req[4200];
        snprintf(req, sizeof req, "%s/stop.request", dir);
        if (rank == 0 && commits == stop_at) {
            FILE *f = fopen(req, "w");
            EXPECT(f != NULL, "cannot create %s", req);
            if (f) fclose(f);
        }
        r.prog.steps = (uint64_t)s;
        r.prog.param_hash = params_hash(&r);
        int stop = -1;
        MUST(hvd_elastic_commit(r.es, &stop));
        size_t pos = 0;
        hvd_sampler_position(r.sampler, &pos);
        if (rank == 0)
            printf("ELASTIC commit %ld at step %ld, position %zu, stop %d\n", commits, s, pos,
                   stop);
        EXPECT(stop == (commits == stop_at), "commit %ld: stop = %d", commits, stop);
        EXPECT(same_everywhere((uint64_t)stop), "ranks disagree on stop");
        if (stop) {
            char ack[4200];
            snprintf(ack, sizeof ack, "%s/stop.ack", dir);
            if (rank == 0) {
                EXPECT(access(ack, F_OK) == 0, "after a stop, %s must exist", ack);
                EXPECT(access(req, F_OK) != 0, "after a stop, %s must be gone", req);
            }
            break;
        }
    }
    if (rank == 0) printf("ELASTIC first np=%d: %ld commits; steps after the last are lost\n",
                          size, commits);
    teardown(&r);
    return 0;
}

static int mode_resume(const char *dir, long seq, long committed_size, long committed_steps) {
    run r;
    setup(&r, dir, 0);
    hvd_elastic_info info;
    MUST(hvd_elastic_restore(r.es, &info));
    EXPECT(info.restored == 1, "restored = %d, want 1", info.restored);
    EXPECT(info.sequence == (uint64_t)seq, "sequence %llu, want %ld",
           (unsigned long long)info.sequence, seq);
    EXPECT(info.committed_size == committed_size, "committed by %d ranks, want %ld",
           info.committed_size, committed_size);
    EXPECT(r.prog.steps == (uint64_t)committed_steps, "progress.steps %llu, want %ld",
           (unsigned long long)r.prog.steps, committed_steps);
    uint64_t opt_steps = 0;
    MUST(hvd_optimizer_steps(r.opt, &opt_steps));
    EXPECT(opt_steps == r.prog.steps, "optimizer steps %llu, the commit says %llu",
           (unsigned long long)opt_steps, (unsigned long long)r.prog.steps);
    EXPECT(params_hash(&r) == r.prog.param_hash, "parameters after restore hash %llx, the "
           "commit's were %llx", (unsigned long long)params_hash(&r),
           (unsigned long long)r.prog.param_hash);
    size_t pos0 = 0, left = 0;
    uint64_t epoch = 0;
    hvd_sampler_position(r.sampler, &pos0);
    hvd_sampler_num_samples(r.sampler, &left, &epoch);
    EXPECT(epoch == 1 && pos0 == (size_t)committed_steps * GLOBAL_BATCH, "sampler restored at "
           "epoch %llu position %zu, want epoch 1 position %ld", (unsigned long long)epoch, pos0,
           committed_steps * GLOBAL_BATCH);
    size_t b = (size_t)(GLOBAL_BATCH / size), steps = left / b;
    for (size_t k = 0; k < steps; k++) step(&r, k);
    size_t end = 0;
    hvd_sampler_position(r.sampler, &end);
    EXPECT(end == pos0 + steps * GLOBAL_BATCH, "end position %zu", end);
    // The epoch's order, from a one-replica sampler: positions 0 .. end-1 once, others never.
    hvd_sampler *whole = NULL;
    size_t *order = malloc(N * sizeof *order);
    MUST(hvd_sampler_create(N, 1, 0, 1, 11, 1, &whole));
    MUST(hvd_sampler_set_epoch(whole, 1));
    MUST(hvd_sampler_indices(whole, 0, N, order));
    int twice = 0, skipped = 0, extra = 0;
    for (size_t i = 0; i < N; i++) {
        int v = r.visits[order[i]];
        if (i < end) {
            twice += v > 1;
            skipped += v == 0;
        } else {
            extra += v != 0;
        }
    }
    EXPECT(twice == 0 && skipped == 0 && extra == 0, "np %ld -> %d: of the first %zu positions "
           "%d were visited twice and %d never; %d later ones were visited", committed_size,
           size, end, twice, skipped, extra);
    EXPECT(N - end < (size_t)GLOBAL_BATCH, "%zu examples left unvisited; at most a global batch "
           "may be dropped", N - end);
    EXPECT(same_everywhere(params_hash(&r)), "replicas differ after the resumed epoch");
    if (rank == 0)
        printf("ELASTIC resume np %ld -> %d: restored commit %llu at position %zu, trained to "
               "%zu of %d: no example twice, none skipped\n", committed_size, size,
               (unsigned long long)info.sequence, pos0, end, N);
    free(order);
    hvd_sampler_destroy(whole);
    teardown(&r);
    return 0;
}

/* Restore must fail with want on every rank and change nothing. */
static void expect_refused(run *r, hvd_status want, const char *what) {
    uint64_t before = params_hash(r);
    int32_t v0 = r->visits[0];
    hvd_status s = hvd_elastic_restore(r->es, NULL);
    EXPECT(s == want, "%s: restore returned %s (%s), want %s", what, hvd_status_string(s),
           hvd_last_error(), hvd_status_string(want));
    EXPECT(params_hash(r) == before && r->visits[0] == v0, "%s: a refused restore changed the "
           "state", what);
    if (rank == 0 && s != HVD_OK) printf("ELASTIC refused (%s): %s\n", what, hvd_last_error());
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(b, 1, n, f);
        fclose(f);
    }
}

static int mode_corrupt(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/commit.hvdc", dir);
    size_t n = 0;
    unsigned char *good = slurp(path, &n);
    EXPECT(good != NULL && n > 200, "no commit at %s (run 'first' before)", path);
    if (good == NULL) return 1;
    run r;
    setup(&r, dir, 0);
    unsigned char *bad = malloc(n);
    memcpy(bad, good, n);
    bad[n / 2] ^= 0x40;
    if (rank == 0) spit(path, bad, n);
    expect_refused(&r, HVD_ERR_INVALID_ARG, "a flipped byte");
    if (rank == 0) spit(path, good, n - 7);
    expect_refused(&r, HVD_ERR_INVALID_ARG, "truncated");
    if (rank == 0) spit(path, good, n);
    teardown(&r);
    setup(&r, dir, 1); // one more tensor than the commit has
    expect_refused(&r, HVD_ERR_MISMATCH, "a tensor the commit does not have");
    teardown(&r);
    setup(&r, dir, rank == size - 1); // ranks disagree on what is registered
    expect_refused(&r, HVD_ERR_MISMATCH, "ranks registered different state");
    teardown(&r);
    setup(&r, dir, 0);
    hvd_elastic_info info;
    hvd_status s = hvd_elastic_restore(r.es, &info);
    EXPECT(s == HVD_OK && info.restored == 1, "the intact commit must restore: %s",
           hvd_last_error());
    size_t after = 0;
    unsigned char *again = slurp(path, &after);
    EXPECT(again != NULL && after == n && memcmp(again, good, n) == 0, "restore changed the file");
    teardown(&r);
    // A directory rank 0 cannot write to: commit fails everywhere and says where.
    setup(&r, "/nonexistent-hvdc-dir", 0);
    int stop = 0;
    s = hvd_elastic_commit(r.es, &stop);
    EXPECT(s == HVD_ERR_INVALID_ARG && strstr(hvd_last_error(), "/nonexistent-hvdc-dir") != NULL,
           "commit into a missing directory: %s: %s", hvd_status_string(s), hvd_last_error());
    teardown(&r);
    free(again);
    free(bad);
    free(good);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_elastic first|resume|corrupt DIR ...\n");
        return 2;
    }
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    hvd_rank(&rank);
    hvd_size(&size);
    const char *mode = argv[1], *dir = argv[2];
    if (GLOBAL_BATCH % size != 0) {
        fprintf(stderr, "test_elastic: np must divide %d\n", GLOBAL_BATCH);
        return 2;
    }
    if (strcmp(mode, "first") == 0 && argc >= 5) {
        long stop_at = argc >= 7 && strcmp(argv[5], "--stop-at") == 0 ? atol(argv[6]) : -1;
        mode_first(dir, atol(argv[3]), atol(argv[4]), stop_at);
    } else if (strcmp(mode, "resume") == 0 && argc >= 6) {
        mode_resume(dir, atol(argv[3]), atol(argv[4]), atol(argv[5]));
    } else if (strcmp(mode, "corrupt") == 0) {
        mode_corrupt(dir);
    } else {
        fprintf(stderr, "test_elastic: bad arguments\n");
        return 2;
    }
    int32_t total = failures;
    MUST(hvd_allreduce("failures", &total, &total, 1, HVD_INT32, HVD_SUM));
    if (rank == 0) printf("%s\n", total == 0 ? "PASS" : "FAIL");
    hvd_shutdown();
    return failures > 0 || total > 0;
}
