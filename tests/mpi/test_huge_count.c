/*
 * test_huge_count.c - a count whose bytes no process can address (2^59 float32 = 2^61 bytes on
 * an 8-element buffer, SIZE_MAX, a sum of counts that overflows) is refused at submission by
 * every collective, with HVD_ERR_INVALID_ARG and a message naming the tensor and the most it
 * takes, the same message on every rank; nothing is sent, so the next request still works. The
 * shared-memory all-reduce used to take such a request and die of SIGSEGV reading past the
 * buffer: meson.build runs this on every host all-reduce path (HVD_CPU_ALLREDUCE shm, ring, mpi)
 * at np 2 and 3.
 *
 * Also: one rank's count refused while the others submitted a normal one (the others wait; a
 * later submission of that name with another count fails every rank with HVD_ERR_MISMATCH), and
 * one rank's count under the bound but beyond its buffer (the negotiation's count check fails
 * it on every rank before any data moves). Then a normal all-reduce gives exact sums, in the
 * global set and in a process set (ranks 0 and 1; rank 0 alone at np 2).
 * Main thread only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

#define HUGE_FLOATS ((size_t)1 << 59) /* 2^61 bytes: the count that crashed the shm path */

/* FNV-1a of a message, to compare messages across ranks (the test's own, not libhvdc's). */
static int64_t message_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (int64_t)(h >> 1);
}

/* st must be a refusal naming `name` and what is expected; returns its message hash. */
static int64_t refused_here(mt_ctx *t, hvd_status st, const char *name) {
    char message[1024];
    snprintf(message, sizeof message, "%s", hvd_last_error());
    if (MT_EXPECT(t, st, HVD_ERR_INVALID_ARG)) {
        MT_CHECK(t, strstr(message, name) != NULL, "the message does not name '%s': %s", name, message);
        MT_CHECK(t, strstr(message, "expected at most") != NULL, "the message does not say what is expected: %s", message);
    }
    if (t->rank == 0 && strcmp(name, "huge.allreduce") == 0) printf("#   message on rank 0: %s\n", message);
    return message_hash(message);
}

/* refused_here, with the same message on every rank (an all-gather of its hash: every rank
 * calls this for every refusal). */
static void expect_refused(mt_ctx *t, hvd_status st, const char *name) {
    char message[1024];
    snprintf(message, sizeof message, "%s", hvd_last_error());
    int64_t mine = refused_here(t, st, name), all[MT_MAX_RANKS] = {0};
    if (!MT_EXPECT(t, hvd_allgather("huge.compare", &mine, 1, all, MT_MAX_RANKS, HVD_INT64, NULL, NULL), HVD_OK))
        return;
    for (int r = 0; r < t->size; r++)
        MT_CHECK(t, all[r] == all[0], "rank %d's message differs from rank 0's (rank %d: %s)", r, t->rank, message);
}

/* An all-reduce of n float32 among `ranks` ranks (options: its set) gives exact sums. */
static void check_allreduce(mt_ctx *t, const char *name, size_t n, const hvd_options *options, int ranks) {
    float *x = malloc(n * sizeof *x);
    if (!x) {
        MT_CHECK(t, 0, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) x[i] = (float)((t->rank + 1) * (int)(i % 97 + 1));
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status st = hvd_allreduce_async(name, x, x, n, HVD_FLOAT32, HVD_SUM, options, &h);
    if (st == HVD_OK) st = hvd_wait(&h);
    if (MT_EXPECT(t, st, HVD_OK)) {
        /* ranks 0..ranks-1 contribute: (1 + ... + ranks) times (i % 97 + 1) */
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++)
            wrong += x[i] != (float)(ranks * (ranks + 1) / 2 * (int)(i % 97 + 1));
        MT_CHECK(t, wrong == 0, "%s: %zu of %zu elements wrong", name, wrong, n);
    }
    free(x);
}

static void every_collective_refuses(mt_ctx *t) {
    mt_begin(t, "2^59 float32 (2^61 bytes) on an 8-element buffer: refused by every collective on every rank");
    float x[8] = {0}, y[64] = {0};
    size_t counts[MT_MAX_RANKS];
    for (int r = 0; r < MT_MAX_RANKS; r++) counts[r] = 1;
    hvd_handle h = HVD_HANDLE_NULL;
    void *out = NULL;

    expect_refused(t, hvd_allreduce("huge.allreduce", x, x, HUGE_FLOATS, HVD_FLOAT32, HVD_SUM), "huge.allreduce");
    expect_refused(t, hvd_allreduce("huge.allreduce.max", x, y, SIZE_MAX, HVD_FLOAT32, HVD_SUM), "huge.allreduce.max");
    expect_refused(t, hvd_allreduce("huge.allreduce.u8", x, x, SIZE_MAX / 2, HVD_UINT8, HVD_MAX), "huge.allreduce.u8");
    hvd_options device = HVD_OPTIONS_INIT; /* refused before anything looks at the device */
    device.device = 0;
    expect_refused(t, hvd_allreduce_async("huge.allreduce.device", x, x, HUGE_FLOATS, HVD_FLOAT32, HVD_SUM, &device, &h),
                   "huge.allreduce.device");

    const char *names[2] = {"huge.group.a", "huge.group.b"};
    const void *sends[2] = {x, y};
    void *recvs[2] = {x, y};
    size_t group[2] = {8, HUGE_FLOATS};
    expect_refused(t, hvd_grouped_allreduce(2, names, sends, recvs, group, HVD_FLOAT32, HVD_SUM), "huge.group.b");
    /* each under the bound, their sum (one fused buffer) over it */
    size_t halves[2] = {((size_t)1 << 53) + 1, (size_t)1 << 53};
    expect_refused(t, hvd_grouped_allreduce(2, names, sends, recvs, halves, HVD_INT32, HVD_SUM), "huge.group.b");

    expect_refused(t, hvd_broadcast("huge.broadcast", x, HUGE_FLOATS, HVD_FLOAT32, 0), "huge.broadcast");
    expect_refused(t, hvd_allgather("huge.allgather", x, HUGE_FLOATS, y, 64, HVD_FLOAT32, NULL, NULL), "huge.allgather");
    expect_refused(t, hvd_allgather("huge.allgather.capacity", x, 8, y, HUGE_FLOATS, HVD_FLOAT32, NULL, NULL),
                   "huge.allgather.capacity");
    expect_refused(t, hvd_allgather_alloc_async("huge.allgather.alloc", x, HUGE_FLOATS, HVD_FLOAT32, NULL, &out, NULL, NULL, &h),
                   "huge.allgather.alloc");
    MT_CHECK(t, out == NULL, "allgather_alloc handed out a buffer although it refused");
    expect_refused(t, hvd_reducescatter("huge.reducescatter", x, x, HUGE_FLOATS, HVD_FLOAT32, HVD_SUM, NULL),
                   "huge.reducescatter");
    counts[t->size - 1] = HUGE_FLOATS;
    expect_refused(t, hvd_alltoall("huge.alltoall", x, counts, y, 64, HVD_FLOAT32, NULL, NULL), "huge.alltoall");
    expect_refused(t, hvd_alltoall_alloc_async("huge.alltoall.alloc", x, counts, HVD_FLOAT32, NULL, &out, NULL, NULL, &h),
                   "huge.alltoall.alloc");
    for (int r = 0; r < t->size; r++) counts[r] = (size_t)1 << 53; /* each fits, the sum does not */
    expect_refused(t, hvd_alltoall("huge.alltoall.sum", x, counts, y, 64, HVD_FLOAT64, NULL, NULL), "huge.alltoall.sum");
    expect_refused(t, hvd_alltoall("huge.alltoall.capacity", x, (size_t[MT_MAX_RANKS]){1, 1, 1, 1, 1, 1, 1, 1}, y,
                                   HUGE_FLOATS, HVD_FLOAT32, NULL, NULL),
                   "huge.alltoall.capacity");

    check_allreduce(t, "huge.after.small", 1037, NULL, t->size);
    check_allreduce(t, "huge.after.large", (size_t)1 << 18, NULL, t->size);
    mt_end(t);
}

static void one_rank_differs(mt_ctx *t) {
    float a[8];
    for (int i = 0; i < 8; i++) a[i] = (float)(t->rank + i);

    mt_begin(t, "rank 0's huge count refused while the others submitted 8: a later count 4 fails every rank");
    hvd_status st;
    if (t->rank == 0) {
        refused_here(t, hvd_allreduce("huge.mixed", a, a, HUGE_FLOATS, HVD_FLOAT32, HVD_SUM), "huge.mixed");
        hvd_barrier(); /* the others' huge.mixed is queued, waiting for rank 0 */
        st = hvd_allreduce("huge.mixed", a, a, 4, HVD_FLOAT32, HVD_SUM);
    } else {
        hvd_handle h = HVD_HANDLE_NULL;
        st = hvd_allreduce_async("huge.mixed", a, a, 8, HVD_FLOAT32, HVD_SUM, NULL, &h);
        hvd_barrier(); /* completes although huge.mixed cannot yet: nothing hangs */
        if (MT_EXPECT(t, st, HVD_OK)) st = hvd_wait(&h);
    }
    if (MT_EXPECT(t, st, HVD_ERR_MISMATCH))
        MT_CHECK(t, strstr(hvd_last_error(), "huge.mixed") != NULL, "message: %s", hvd_last_error());
    for (int i = 0; i < 8; i++) MT_CHECK(t, a[i] == (float)(t->rank + i), "a[%d] was written", i);
    check_allreduce(t, "huge.after.mixed", 1037, NULL, t->size);
    mt_end(t);

    mt_begin(t, "rank 0's count 2^40 (under the bound, beyond its buffer), the others' 8: HVD_ERR_MISMATCH before data moves");
    st = hvd_allreduce("huge.under", a, a, t->rank == 0 ? (size_t)1 << 40 : 8, HVD_FLOAT32, HVD_SUM);
    if (MT_EXPECT(t, st, HVD_ERR_MISMATCH))
        MT_CHECK(t, strstr(hvd_last_error(), "huge.under") != NULL, "message: %s", hvd_last_error());
    for (int i = 0; i < 8; i++) MT_CHECK(t, a[i] == (float)(t->rank + i), "a[%d] was written", i);
    check_allreduce(t, "huge.after.under", 1037, NULL, t->size);
    mt_end(t);
}

static void in_a_process_set(mt_ctx *t) {
    /* ranks 0 and 1, or rank 0 alone at np 2 (both ranks are the global set, which cannot be
     * added again) */
    int members = t->size >= 3 ? 2 : 1;
    mt_begin(t, "in a process set of %d rank(s): refused, then a normal all-reduce", members);
    int ranks[2] = {0, 1}, set = 0;
    if (!MT_EXPECT(t, hvd_add_process_set(ranks, members, &set), HVD_OK)) {
        mt_end(t);
        return;
    }
    if (t->rank < members) {
        hvd_options o = HVD_OPTIONS_INIT;
        o.process_set = set;
        float x[8] = {0};
        hvd_handle h = HVD_HANDLE_NULL;
        size_t counts[2] = {HUGE_FLOATS, HUGE_FLOATS};
        const char *name = "huge.set";
        /* each refusal once per member; no all-gather here (rank 2 is not in the set) */
        MT_EXPECT(t, hvd_allreduce_async(name, x, x, HUGE_FLOATS, HVD_FLOAT32, HVD_SUM, &o, &h), HVD_ERR_INVALID_ARG);
        MT_CHECK(t, strstr(hvd_last_error(), name) != NULL, "message: %s", hvd_last_error());
        MT_EXPECT(t, hvd_broadcast_async(name, x, HUGE_FLOATS, HVD_FLOAT32, members - 1, &o, &h), HVD_ERR_INVALID_ARG);
        MT_EXPECT(t, hvd_alltoall_async(name, x, counts, x, 8, HVD_FLOAT32, NULL, NULL, &o, &h), HVD_ERR_INVALID_ARG);
        MT_EXPECT(t, hvd_reducescatter_async(name, x, x, HUGE_FLOATS, HVD_FLOAT32, HVD_SUM, &o, NULL, &h), HVD_ERR_INVALID_ARG);
        check_allreduce(t, "huge.set.after", 1037, &o, members);
    }
    MT_EXPECT(t, hvd_remove_process_set(set), HVD_OK);
    mt_end(t);
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    if (t.size > MT_MAX_RANKS) {
        printf("test_huge_count runs at np <= %d\nFAIL\n", MT_MAX_RANKS);
        return 1;
    }
    every_collective_refuses(&t);
    if (t.size >= 2) {
        one_rank_differs(&t);
        in_a_process_set(&t);
    }
    mt_combine(&t);
    hvd_shutdown();
    return mt_exit_code(&t);
}
