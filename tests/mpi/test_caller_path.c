/*
 * test_caller_path.c - a blocking all-reduce that every rank of the node submitted next runs on
 * its caller's thread (libhvdc/src/runtime/caller_path.h); everything else takes the round.
 * Each mode checks results, and counts negotiation rounds (hvdc__negotiation_stats) to see
 * which way the ops went: an op on the caller's path takes none.
 *
 *   numerics   float sums and averages whose bits depend on the order of the fold, and a scaled
 *              2-D sum by hvd_allreduce_with_options, at np 3-4:
 *              bitwise equal to the rank-order fold computed here, and to the same op through
 *              the round (async + wait), on every rank; integer min, max, product too. With
 *              --path on: steps go on until STEPS blocking ops took no round (at most
 *              MAX_STEPS steps); --path off (HVD_CALLER_THREAD=0): every one took one.
 *   mixed      steps mixing blocking ops, a burst of async ones (fused in the round), grouped
 *              ones, and a second thread's blocking ops: every result exact.
 *   late R     rank R sleeps 20 ms before some blocking ops: the others give up waiting and
 *              go through the round; results exact; the path is taken again afterwards.
 *   stall W    rank W never submits the cached "withheld": the others' blocking calls must
 *              fail with HVD_ERR_STALLED naming W (HVD_STALL_SHUTDOWN_TIME), not spin.
 *   join       rank r runs 4 * (r + 1) blocking steps, then joins: the others' steps go on
 *              with its zeros; hvd_join returns the last rank.
 *   kill       kill_loop.h's steps on one cached name, for tests/mpi/check_kill.py: with
 *              HVDC_TEST_FAULTS=die_in_caller_path the victim dies once every rank agreed,
 *              the others inside the collective must fail naming it.
 * Main thread (mixed: and one more).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "kill_loop.h"
#include "mpitest.h"
#include "runtime/runtime.h" /* hvdc__negotiation_stats: this test links the internal library */

enum { COUNT = 1000, STEPS = 40, MAX_STEPS = 2000 };

static uint64_t rounds_now(void) {
    uint64_t rounds = 0, sent, received;
    hvdc__negotiation_stats(&rounds, &sent, &received);
    return rounds;
}

/* Rounds this rank's blocking all-reduces took, how many it made (blocking()), and the last
 * one's message (reading the counters clears hvd_last_error). */
static _Thread_local uint64_t blocking_rounds, blocking_ops; /* per thread (mixed) */
static _Thread_local char blocking_error[1024];

/* hvd_allreduce (options NULL) or hvd_allreduce_with_options, counting the rounds it took:
 * the round's stats are taken before its responses run, so an op's round is counted by the
 * time it returns. */
static hvd_status blocking_with(const char *name, const void *in, void *out, size_t count,
                                hvd_dtype dtype, hvd_reduce_op op, const hvd_options *options) {
    uint64_t before = rounds_now();
    hvd_status st = options ? hvd_allreduce_with_options(name, in, out, count, dtype, op, options)
                            : hvd_allreduce(name, in, out, count, dtype, op);
    snprintf(blocking_error, sizeof blocking_error, "%s", hvd_last_error());
    if (st != HVD_OK) printf("# %s: %s: %s\n", name, hvd_status_string(st), blocking_error);
    blocking_rounds += rounds_now() - before;
    blocking_ops++;
    return st;
}

static hvd_status blocking(const char *name, const void *in, void *out, size_t count,
                           hvd_dtype dtype, hvd_reduce_op op) {
    return blocking_with(name, in, out, count, dtype, op, NULL);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Rank r's input: magnitudes spread over 2^-20..2^20, so float sums depend on their order. */
static float input(int rank, int i, int step) {
    int e = (int)((unsigned)(rank * 7919 + i * 104729 + step * 31) % 41) - 20;
    return ldexpf(1.0f + (float)((rank * 13 + i * 7 + step) % 97) / 97.0f, e) *
           ((i + rank) % 3 == 0 ? -1.0f : 1.0f);
}

/* ((x0 + x1) + x2) + ...: the fold order every host all-reduce keeps (collectives/fold.h). */
static float fold_ref(int size, int i, int step) {
    float acc = input(0, i, step);
    for (int r = 1; r < size; r++) acc += input(r, i, step);
    return acc;
}

/* One float op blocking and through the round (async, which never takes the caller's path),
 * both with options (NULL: none), compared bitwise with each other and, for a sum, with
 * fold_ref scaled as the options say (the prescale is a power of 2: exact before the fold). */
static void float_case(mt_ctx *t, const char *name, hvd_reduce_op op, const hvd_options *options,
                       int step) {
    float *mine = malloc(COUNT * sizeof *mine), *fast = malloc(COUNT * sizeof *fast);
    float *slow = malloc(COUNT * sizeof *slow);
    char async_name[96];
    snprintf(async_name, sizeof async_name, "%s.async", name);
    for (int i = 0; i < COUNT; i++) mine[i] = input(t->rank, i, step);
    MT_EXPECT(t, blocking_with(name, mine, fast, COUNT, HVD_FLOAT32, op, options), HVD_OK);
    hvd_handle h;
    if (MT_EXPECT(t, hvd_allreduce_async(async_name, mine, slow, COUNT, HVD_FLOAT32, op, options,
                                         &h), HVD_OK))
        MT_EXPECT(t, hvd_wait(&h), HVD_OK);
    int wrong = 0;
    for (int i = 0; i < COUNT && wrong < 3; i++) {
        float ref = fold_ref(t->size, i, step);
        if (options) ref = ref * (float)options->prescale * (float)options->postscale;
        if (memcmp(&fast[i], &slow[i], sizeof(float)) != 0 ||
            (op == HVD_SUM && memcmp(&fast[i], &ref, sizeof(float)) != 0)) {
            MT_CHECK(t, 0, "%s[%d] step %d: caller %a, round %a, fold %a", name, i, step,
                     (double)fast[i], (double)slow[i], (double)ref);
            wrong++;
        }
    }
    free(mine);
    free(fast);
    free(slow);
}

/* Whether, on every rank, STEPS of the blocking ops so far took no round. Ranks outnumber
 * this machine's CPUs: a vote times out whenever a rank waits for a time slice (under a
 * sanitizer, for most votes), so numerics steps on until enough ops took the path. */
static int path_seen(void) {
    long on_path = (long)(blocking_ops - blocking_rounds);
    MPI_Allreduce(MPI_IN_PLACE, &on_path, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
    return on_path >= STEPS;
}

/* Integer ops, exact in any order: against mt_reduce_ref. */
static void int_case(mt_ctx *t, const char *name, hvd_dtype dtype, hvd_reduce_op op, int step) {
    size_t bytes = COUNT * mt_dtype_size(dtype);
    void *in = malloc(bytes), *out = malloc(bytes), *ref = malloc(bytes);
    mt_fill(in, dtype, op, t->rank, 0, COUNT, (uint64_t)step);
    mt_reduce_ref(ref, dtype, op, t->size, 0, COUNT, (uint64_t)step, 1.0, 1.0);
    MT_EXPECT(t, blocking(name, in, out, COUNT, dtype, op), HVD_OK);
    mt_compare(t, out, ref, dtype, COUNT, 0, name);
    free(in);
    free(out);
    free(ref);
}

/* A scaled sum of a 2-D tensor: what hvd_allreduce_with_options adds (the Python binding's
 * blocking all-reduce passes the shape, and scale factors where it has them). */
static const int64_t scaled_shape[2] = {COUNT / 10, 10};
static const hvd_options scaled = {sizeof(hvd_options), 0.5, 3.0, HVD_DEVICE_CPU, NULL,
                                   HVD_PROCESS_SET_GLOBAL, scaled_shape, 2};

/* Each case's name once through the round, to cache it; then STEPS steps of blocking ops. */
static int numerics(mt_ctx *t, int path_on) {
    mt_begin(t, "numerics at np %d: bitwise the round's and the rank-order fold's", t->size);
    float_case(t, "sum.f32", HVD_SUM, NULL, 0);
    float_case(t, "avg.f32", HVD_AVERAGE, NULL, 0);
    float_case(t, "scaled.f32", HVD_SUM, &scaled, 0);
    int_case(t, "min.i32", HVD_INT32, HVD_MIN, 0);
    int_case(t, "prod.i64", HVD_INT64, HVD_PRODUCT, 0);
    blocking_rounds = blocking_ops = 0;
    for (int step = 1; step <= STEPS || (path_on && step <= MAX_STEPS && !path_seen()); step++) {
        float_case(t, "sum.f32", HVD_SUM, NULL, step);
        float_case(t, "avg.f32", HVD_AVERAGE, NULL, step);
        float_case(t, "scaled.f32", HVD_SUM, &scaled, step);
        int_case(t, "min.i32", HVD_INT32, HVD_MIN, step);
        int_case(t, "prod.i64", HVD_INT64, HVD_PRODUCT, step);
    }
    mt_end(t);
    mt_begin(t, "the blocking ops %s the caller's path (%llu rounds for %llu ops)",
             path_on ? "took" : "did not take", (unsigned long long)blocking_rounds,
             (unsigned long long)blocking_ops);
    if (path_on)
        MT_CHECK(t, path_seen(), "fewer than %d ops took no round in %d steps", STEPS, MAX_STEPS);
    else
        MT_CHECK(t, blocking_rounds >= blocking_ops, "some took no round");
    return mt_end(t);
}

/* An int32 sum of (rank + 1) * (i + 1 + salt) over n elements, blocking (or async + wait),
 * checked. */
static void int_sum(mt_ctx *t, const char *name, int n, int salt, int async) {
    int32_t buf[64];
    for (int i = 0; i < n; i++) buf[i] = (t->rank + 1) * (i + 1 + salt);
    hvd_status st;
    if (async) {
        hvd_handle h;
        st = hvd_allreduce_async(name, buf, buf, (size_t)n, HVD_INT32, HVD_SUM, NULL, &h);
        if (st == HVD_OK) st = hvd_wait(&h);
    } else {
        st = blocking(name, buf, buf, (size_t)n, HVD_INT32, HVD_SUM);
    }
    MT_CHECK(t, st == HVD_OK, "%s: %s: %s", name, hvd_status_string(st), hvd_last_error());
    int tri = t->size * (t->size + 1) / 2;
    for (int i = 0; st == HVD_OK && i < n; i++)
        MT_CHECK(t, buf[i] == tri * (i + 1 + salt), "%s[%d] = %d, not %d", name, i, buf[i],
                 tri * (i + 1 + salt));
}

typedef struct second_thread {
    mt_ctx *t;
    int steps;
} second_thread;

/* The second thread of mixed: blocking ops of its own names, racing the main thread's. */
static void *second_main(void *arg) {
    second_thread *s = arg;
    for (int step = 0; step < s->steps; step++) int_sum(s->t, "thread.b", 7, step, 0);
    return NULL;
}

/* A burst of async ops (fused in one round) between blocking ones; a grouped all-reduce. */
static void mixed_step(mt_ctx *t, int step) {
    int_sum(t, "mixed.a", 5, step, 0);
    enum { BURST = 6 };
    int32_t burst[BURST][9];
    hvd_handle h[BURST];
    for (int k = 0; k < BURST; k++) {
        char name[32];
        snprintf(name, sizeof name, "mixed.burst.%d", k);
        for (int i = 0; i < 9; i++) burst[k][i] = (t->rank + 1) * (k + i + step);
        MT_EXPECT(t, hvd_allreduce_async(name, burst[k], burst[k], 9, HVD_INT32, HVD_SUM, NULL,
                                         &h[k]), HVD_OK);
    }
    int_sum(t, "mixed.b", 3, step, 0); /* while the burst is with the background thread */
    int tri = t->size * (t->size + 1) / 2;
    for (int k = 0; k < BURST; k++) {
        MT_EXPECT(t, hvd_wait(&h[k]), HVD_OK);
        for (int i = 0; i < 9; i++)
            MT_CHECK(t, burst[k][i] == tri * (k + i + step), "burst %d[%d] step %d", k, i, step);
    }
    int32_t g0[4], g1[4];
    const char *names[2] = {"mixed.g0", "mixed.g1"};
    const void *in[2] = {g0, g1};
    void *out[2] = {g0, g1};
    size_t counts[2] = {4, 4};
    for (int i = 0; i < 4; i++) g0[i] = g1[i] = (t->rank + 1) * (i + step);
    MT_EXPECT(t, hvd_grouped_allreduce(2, names, in, out, counts, HVD_INT32, HVD_SUM), HVD_OK);
    for (int i = 0; i < 4; i++)
        MT_CHECK(t, g0[i] == tri * (i + step) && g1[i] == g0[i], "grouped[%d] step %d", i, step);
    int_sum(t, "mixed.c", 11, step, 0);
}

static int mixed(mt_ctx *t) {
    mt_begin(t, "mixed blocking, async bursts, grouped and a second thread at np %d", t->size);
    second_thread s = {t, STEPS};
    pthread_t other;
    int started = pthread_create(&other, NULL, second_main, &s) == 0;
    MT_CHECK(t, started, "second thread");
    for (int step = 0; step < STEPS; step++) mixed_step(t, step);
    if (started) pthread_join(other, NULL);
    return mt_end(t);
}

/* Rank `late` sleeps before every other step's op; then all run on time again. */
static int late(mt_ctx *t, int late_rank) {
    mt_begin(t, "rank %d late by 20 ms every other step at np %d", late_rank, t->size);
    int_sum(t, "late.x", 16, 0, 0); /* cached */
    blocking_rounds = blocking_ops = 0;
    for (int step = 1; step <= 10; step++) {
        if (t->rank == late_rank && step % 2) sleep_ms(20);
        int_sum(t, "late.x", 16, step, 0);
    }
    uint64_t late_rounds = blocking_rounds;
    blocking_rounds = blocking_ops = 0;
    for (int step = 0; step < STEPS || (step < MAX_STEPS && !path_seen()); step++)
        int_sum(t, "late.x", 16, step, 0);
    MT_CHECK(t, late_rounds >= 1, "a late rank: the others took no round (%llu)",
             (unsigned long long)late_rounds);
    MT_CHECK(t, path_seen(), "on time again, %llu rounds for %llu ops",
             (unsigned long long)blocking_rounds, (unsigned long long)blocking_ops);
    return mt_end(t);
}

/* Rank `withholder` never submits "withheld" after the first time; the others' blocking
 * calls must stop with HVD_ERR_STALLED naming it (run with HVD_STALL_SHUTDOWN_TIME=3). */
static int stall(mt_ctx *t, int withholder) {
    float x = 1;
    MT_EXPECT(t, blocking("withheld", &x, &x, 1, HVD_FLOAT32, HVD_SUM), HVD_OK); /* cached */
    mt_begin(t, "rank %d never submits: the others' blocking calls stall, named", withholder);
    double start = mt_now();
    if (t->rank != withholder) {
        hvd_status st = blocking("withheld", &x, &x, 1, HVD_FLOAT32, HVD_SUM);
        char words[32];
        snprintf(words, sizeof words, "%d", withholder);
        MT_CHECK(t, st == HVD_ERR_STALLED, "got %s: %s", hvd_status_string(st), blocking_error);
        MT_CHECK(t, strstr(blocking_error, "withheld") && strstr(blocking_error, words),
                 "the message names the tensor and rank %d: %s", withholder, blocking_error);
        MT_CHECK(t, mt_now() - start < 6.5, "took %.1f s to stop", mt_now() - start);
    } else {
        sleep_ms(8000); /* longer than the others may take to stop */
    }
    hvd_shutdown();
    mt_end(t);
    MPI_Finalize();
    return mt_exit_code(t); /* the job is stopped: each rank's own verdict */
}

/* Rank r runs 4 * (r + 1) steps, then joins; the joined ranks' part is zeros. */
static int join(mt_ctx *t) {
    mt_begin(t, "uneven steps and hvd_join at np %d", t->size);
    int mine = 4 * (t->rank + 1), last = -1;
    for (int step = 0; step < mine; step++) {
        int32_t v[8], running = 0;
        for (int r = 0; r < t->size; r++) running += step < 4 * (r + 1) ? r + 1 : 0;
        for (int i = 0; i < 8; i++) v[i] = (t->rank + 1) * (i + 1);
        MT_EXPECT(t, blocking("join.x", v, v, 8, HVD_INT32, HVD_SUM), HVD_OK);
        for (int i = 0; i < 8; i++)
            MT_CHECK(t, v[i] == running * (i + 1), "step %d [%d] = %d, not %d", step, i, v[i],
                     running * (i + 1));
    }
    MT_EXPECT(t, hvd_join(&last), HVD_OK);
    MT_CHECK(t, last == t->size - 1, "hvd_join says rank %d joined last", last);
    int_sum(t, "join.after", 5, 1, 0); /* together again */
    return mt_end(t);
}

typedef struct kill_step_ctx {
    int rank, size;
} kill_step_ctx;

/* kill_loop's step, always under one name, small: cached, so on the caller's path. */
static hvd_status kill_step(void *ctx, const char *name, int *wrong) {
    (void)name;
    kill_step_ctx *k = ctx;
    int32_t v[16];
    for (int i = 0; i < 16; i++) v[i] = (k->rank + 1) * (i + 1);
    hvd_status st = hvd_allreduce("kill.x", v, v, 16, HVD_INT32, HVD_SUM);
    for (int i = 0; st == HVD_OK && i < 16; i++)
        *wrong |= v[i] != k->size * (k->size + 1) / 2 * (i + 1);
    return st;
}

static int kill_mode(int argc, char **argv) {
    if (hvd_init() != HVD_OK) {
        printf("hvd_init failed: %s\nFAIL\n", hvd_last_error());
        return 1;
    }
    kill_step_ctx k = {0, 1};
    hvd_rank(&k.rank);
    hvd_size(&k.size);
    kill_test test = {kill_step, NULL, &k, "16-int cached all-reduces", ""};
    return kill_loop(argc, argv, &test);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "numerics";
    for (int i = 1; i < argc; i++) /* check_kill.py puts its options first */
        if (strcmp(argv[i], "kill") == 0) return kill_mode(argc, argv);
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    int arg = argc > 2 ? atoi(argv[2]) : t.size - 1;
    if (strcmp(mode, "stall") == 0) return stall(&t, arg);
    if (strcmp(mode, "numerics") == 0) numerics(&t, !(argc > 2 && strcmp(argv[2], "off") == 0));
    else if (strcmp(mode, "mixed") == 0) mixed(&t);
    else if (strcmp(mode, "late") == 0) late(&t, arg);
    else if (strcmp(mode, "join") == 0) join(&t);
    else MT_CHECK(&t, 0, "unknown mode '%s' (numerics [off], mixed, late R, stall W, join, kill)",
                  mode);
    mt_combine(&t);
    hvd_shutdown();
    MPI_Finalize();
    return mt_exit_code(&t);
}
