/*
 * test_consistency.c - hvd_check_consistency names the replicas that differ, and the
 * optimizer's periodic check (HVD_CHECK_CONSISTENCY) logs them at the right update.
 * The victim is the last rank (rank 2 at np 3); np >= 3, so "ranks 0-1 vs rank 2" shows that
 * the ranks holding one value are grouped, not just rank 0 set against the rest.
 *
 * Usage (under mpirun, np >= 3):  test_consistency MODE
 *   check      the C function: identical buffers report nothing; one float nudged by one ulp
 *              on the victim is the one buffer counted, with the victim's hash alone in its
 *              row; a value on every rank its own, and a size that differs, count too; rank
 *              0's log line names the buffer and the groups; names that differ (a renamed
 *              buffer, an extra one) fail every rank with HVD_ERR_MISMATCH naming the ranks and
 *              the first name; a bad argument on one rank fails every rank, none waits
 *   optimizer  an SGD optimizer (momentum) steps 7 times; after update 4 the victim writes one
 *              weight. With HVD_CHECK_CONSISTENCY=3 rank 0's log stays empty until update 6,
 *              whose check names 'fc.w', the groups and the update; unset, nothing is logged
 * Rank 0 reads its own stderr back (redirected to a file) to check the log lines, then prints
 * them. Uses only hvdc.h. The verdict is the exit status; any failing rank fails the run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "mpitest.h"

enum { COUNT = 1000 };

/* ---- rank 0's stderr, captured ---------------------------------------------------------- */

static FILE *capture;
static int saved_stderr = -1;
static off_t read_upto;

static void capture_start(void) {
    fflush(stderr);
    capture = tmpfile();
    saved_stderr = dup(2);
    read_upto = 0;
    if (capture) dup2(fileno(capture), 2);
}

/* What was logged since the last call, into out (len bytes); also echoed to stdout. */
static void capture_take(char *out, size_t len) {
    fflush(stderr);
    out[0] = '\0';
    if (!capture) return;
    off_t end = lseek(2, 0, SEEK_CUR); /* where the writes to fd 2 have reached */
    ssize_t got = end > read_upto ? pread(2, out, len - 1, read_upto) : 0;
    if (got < 0) got = 0;
    out[got] = '\0';
    read_upto = end;
    if (got) printf("# rank 0 logged:\n%s", out);
}

static void capture_stop(void) {
    fflush(stderr);
    if (saved_stderr >= 0) dup2(saved_stderr, 2);
    if (saved_stderr >= 0) close(saved_stderr);
    if (capture) fclose(capture);
    capture = NULL;
}

/* ---- the C function ---------------------------------------------------------------------- */

typedef struct replica {
    float w[COUNT];
    int64_t steps[4];
    unsigned char flags[7];
    int32_t mine;
    hvd_named_buffer b[6];
} replica;

/* Five buffers, equal on every rank unless a case changes them. */
static int replica_init(replica *r) {
    for (int i = 0; i < COUNT; i++) r->w[i] = (float)((i * 7919) % 1000) / 64.0f;
    for (int i = 0; i < 4; i++) r->steps[i] = 1000 + i;
    memset(r->flags, 1, sizeof r->flags);
    r->mine = 5;
    r->b[0] = (hvd_named_buffer){"layer1.weight", r->w, sizeof r->w};
    r->b[1] = (hvd_named_buffer){"layer1.steps", r->steps, sizeof r->steps};
    r->b[2] = (hvd_named_buffer){"empty", NULL, 0};
    r->b[3] = (hvd_named_buffer){"flags", r->flags, sizeof r->flags};
    r->b[4] = (hvd_named_buffer){"mine", &r->mine, sizeof r->mine};
    return 5;
}

/* hashes (size x n): buffer i's row, rank by rank, groups as expected? expect[r] is the lowest
 * rank whose value rank r should share. */
static void check_groups(mt_ctx *t, const uint64_t *hashes, int n, int i, const int *expect) {
    for (int r = 0; r < t->size; r++)
        for (int s = 0; s < t->size; s++) {
            int same = hashes[(size_t)r * n + i] == hashes[(size_t)s * n + i];
            MT_CHECK(t, same == (expect[r] == expect[s]), "buffer %d: ranks %d and %d %s the "
                     "same hash, expected %s", i, r, s, same ? "have" : "do not have",
                     expect[r] == expect[s] ? "the same" : "different ones");
        }
}

static void test_identical(mt_ctx *t) {
    replica r;
    int n = replica_init(&r), differ = -1;
    uint64_t *hashes = calloc((size_t)t->size * n, sizeof *hashes);
    int *one = calloc((size_t)t->size, sizeof *one);
    mt_begin(t, "identical replicas: nothing differs, every row of hashes alike");
    MT_EXPECT(t, hvd_check_consistency(r.b, n, 1, hashes, &differ), HVD_OK);
    MT_CHECK(t, differ == 0, "n_differ = %d, expected 0", differ);
    for (int i = 0; i < n; i++) check_groups(t, hashes, n, i, one);
    MT_CHECK(t, hashes[0] != hashes[1] && hashes[2] != hashes[3], "different buffers hashed "
             "alike: %016llx %016llx %016llx %016llx", (unsigned long long)hashes[0],
             (unsigned long long)hashes[1], (unsigned long long)hashes[2],
             (unsigned long long)hashes[3]);
    MT_EXPECT(t, hvd_check_consistency(r.b, n, 0, NULL, &differ), HVD_OK); /* no hashes out */
    MT_EXPECT(t, hvd_check_consistency(NULL, 0, 0, NULL, &differ), HVD_OK); /* nothing */
    MT_CHECK(t, differ == 0, "n_differ = %d for no buffers", differ);
    mt_end(t);
    free(hashes);
    free(one);
}

static void test_differences(mt_ctx *t) {
    replica r;
    int n = replica_init(&r), differ = -1, victim = t->size - 1;
    uint64_t *hashes = calloc((size_t)t->size * n, sizeof *hashes);
    int *nudged = calloc((size_t)t->size, sizeof *nudged);
    int *own = calloc((size_t)t->size, sizeof *own);
    for (int q = 0; q < t->size; q++) {
        nudged[q] = q == victim ? victim : 0;
        own[q] = q;
    }
    mt_begin(t, "one weight one ulp off on rank %d, 'mine' = rank, 'flags' shorter on rank 1",
             victim);
    if (t->rank == victim) r.w[17] = nextafterf(r.w[17], INFINITY);
    r.mine = t->rank;
    if (t->rank == 1) r.b[3].nbytes--;
    char log[4096];
    if (t->rank == 0) capture_start();
    MT_EXPECT(t, hvd_check_consistency(r.b, n, 1, hashes, &differ), HVD_OK);
    if (t->rank == 0) capture_take(log, sizeof log);
    MT_CHECK(t, differ == 3, "n_differ = %d, expected 3 (layer1.weight, flags, mine)", differ);
    check_groups(t, hashes, n, 0, nudged);
    check_groups(t, hashes, n, 4, own);
    int flags_short[8] = {0, 1, 0, 0, 0, 0, 0, 0};
    check_groups(t, hashes, n, 3, flags_short);
    int *one = calloc((size_t)t->size, sizeof *one);
    check_groups(t, hashes, n, 1, one);
    check_groups(t, hashes, n, 2, one);
    if (t->rank == 0) {
        char want[200];
        snprintf(want, sizeof want, "'layer1.weight' (4000 bytes) differs across ranks: ranks "
                 "0-%d %016llx; rank %d %016llx", victim - 1, (unsigned long long)hashes[0],
                 victim, (unsigned long long)hashes[(size_t)victim * n]);
        MT_CHECK(t, strstr(log, want) != NULL, "rank 0's log lacks \"%s\"", want);
        MT_CHECK(t, strstr(log, "'mine' (4 bytes) differs across ranks: rank 0 ") != NULL,
                 "rank 0's log does not give 'mine' a value per rank");
        MT_CHECK(t, strstr(log, "3 of 5 buffers differ across") != NULL,
                 "rank 0's log lacks the count");
        MT_CHECK(t, strstr(log, "layer1.steps") == NULL, "an equal buffer was logged");
        capture_stop();
    }
    mt_end(t);
    free(hashes);
    free(nudged);
    free(own);
    free(one);
}

/* Every rank fails with status and a message that holds each of want[] (NULL-terminated). */
static void expect_failure(mt_ctx *t, hvd_status got, hvd_status status, const char *const *want) {
    if (!MT_EXPECT(t, got, status)) return;
    const char *e = hvd_last_error();
    for (int k = 0; want[k]; k++)
        MT_CHECK(t, strstr(e, want[k]) != NULL, "message \"%s\" lacks \"%s\"", e, want[k]);
    if (t->rank == 0) printf("#   message on rank 0: %s\n", e);
}

static void test_names(mt_ctx *t) {
    replica r;
    int n = replica_init(&r), differ = -1, victim = t->size - 1;
    char want_renamed[200];
    snprintf(want_renamed, sizeof want_renamed, "rank %d: name #3 of 5 is 'hollow' where rank 0 "
             "has 'empty'", victim);
    mt_begin(t, "names: rank %d renames buffer 2, rank 1 has one more", victim);
    hvd_named_buffer b[6];
    memcpy(b, r.b, sizeof b);
    if (t->rank == victim) b[2].name = "hollow";
    if (t->rank == 1) b[n] = (hvd_named_buffer){"extra", &r.mine, sizeof r.mine};
    const char *want[] = {"different lists of names", want_renamed,
                          "rank 1: 6 names where rank 0 has 5 (the first extra: 'extra')",
                          NULL};
    expect_failure(t, hvd_check_consistency(b, n + (t->rank == 1), 1, NULL, &differ),
                   HVD_ERR_MISMATCH, want);
    MT_EXPECT(t, hvd_check_consistency(r.b, n, 0, NULL, &differ), HVD_OK); /* usable after */
    mt_end(t);

    mt_begin(t, "bad arguments on rank 1 alone fail every rank");
    memcpy(b, r.b, sizeof b);
    if (t->rank == 1) b[4].name = "flags";
    const char *own[] = {"two buffers are named 'flags'", NULL};
    const char *other[] = {"another rank passed bad arguments", NULL};
    expect_failure(t, hvd_check_consistency(b, n, 1, NULL, &differ), HVD_ERR_INVALID_ARG,
                   t->rank == 1 ? own : other);
    MT_EXPECT(t, hvd_check_consistency(r.b, n, 0, NULL, &differ), HVD_OK);
    mt_end(t);
}

/* ---- the optimizer's periodic check ------------------------------------------------------- */

static void test_optimizer(mt_ctx *t) {
    float w[12], dw[12];
    double b[3], db[3];
    for (int i = 0; i < 12; i++) w[i] = (float)i / 4.0f;
    for (int i = 0; i < 3; i++) b[i] = i;
    hvd_param params[2] = {{"fc.w", w, dw, 12, HVD_FLOAT32, HVD_DEVICE_CPU},
                           {"fc.b", b, db, 3, HVD_FLOAT64, HVD_DEVICE_CPU}};
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    cfg.momentum = 0.9;
    hvd_optimizer *opt = NULL;
    int every = -1, victim = t->size - 1;
    const char *env = getenv("HVD_CHECK_CONSISTENCY");
    mt_begin(t, "optimizer: HVD_CHECK_CONSISTENCY=%s, rank %d writes fc.w after update 4",
             env ? env : "(unset)", victim);
    MT_EXPECT(t, hvd_check_consistency_every(&every), HVD_OK);
    MT_CHECK(t, every == (env ? atoi(env) : 0), "hvd_check_consistency_every gave %d", every);
    if (!MT_EXPECT(t, hvd_optimizer_create(params, 2, &cfg, &opt), HVD_OK)) return;
    if (t->rank == 0) capture_start();
    for (int step = 1; step <= 7; step++) {
        for (int i = 0; i < 12; i++) dw[i] = (float)((i + step + t->rank) % 5);
        for (int i = 0; i < 3; i++) db[i] = (double)(i * t->rank);
        MT_EXPECT(t, hvd_optimizer_step(opt, NULL), HVD_OK);
        if (step == 4 && t->rank == victim) w[5] += 1.0f;
        if (t->rank != 0) continue;
        char log[4096], want[200];
        capture_take(log, sizeof log);
        if (every != 3 || step != 6) {
            MT_CHECK(t, log[0] == '\0', "rank 0 logged after update %d: %s", step, log);
            continue;
        }
        snprintf(want, sizeof want, "'fc.w' (48 bytes) differs across ranks: ranks 0-%d ",
                 victim - 1);
        MT_CHECK(t, strstr(log, want) != NULL, "update 6: the log lacks \"%s\"", want);
        MT_CHECK(t, strstr(log, "replica check after update 6 (HVD_CHECK_CONSISTENCY=3): 1 of "
                            "4 parameters and state arrays differ") != NULL,
                 "update 6: the log lacks the optimizer's summary");
        MT_CHECK(t, strstr(log, "momentum_buffer") == NULL, "the momentum (equal) was logged");
    }
    if (t->rank == 0) capture_stop();
    MT_EXPECT(t, hvd_optimizer_destroy(opt), HVD_OK);
    mt_end(t);
}

int main(int argc, char **argv) {
    mt_ctx t;
    const char *mode = argc > 1 ? argv[1] : "check";
    if (mt_start(&t) != 0) return 1;
    if (t.size < 3) {
        printf("test_consistency needs np >= 3 (got %d)\nFAIL\n", t.size);
        return 1;
    }
    if (strcmp(mode, "optimizer") == 0) {
        test_optimizer(&t);
    } else {
        test_identical(&t);
        test_differences(&t);
        test_names(&t);
    }
    mt_combine(&t);
    MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
    return mt_exit_code(&t);
}
