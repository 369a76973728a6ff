/*
 * test_mismatch.c - failure paths: ranks that disagree, duplicate names, bad arguments, calls
 * outside init/shutdown, released handles. Each failure must be reported (status and a
 * message), must not hang, and must leave the library usable: right after each one a correct
 * operation with a new name has to work.
 *
 * Mismatches (np >= 2; rank 0 differs from the others): count, dtype, op, broadcast root,
 * kind of collective, allgather and alltoall capacity too small on one rank, and a mismatch in
 * flight next to a correct async operation. Every rank must get HVD_ERR_MISMATCH with the
 * tensor's name in hvd_last_error(), and the receive buffer must be left untouched.
 * Runs on the main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

#define SENTINEL 0x5A5A5A5A


/* Checks a mismatch status: HVD_ERR_MISMATCH and the name in the message. */
static void check_mismatch(mt_ctx *t, hvd_status s, const char *name) {
    if (!MT_EXPECT(t, s, HVD_ERR_MISMATCH)) return;
    const char *e = hvd_last_error();
    MT_CHECK(t, e && strstr(e, name), "hvd_last_error() \"%s\" does not name the tensor \"%s\"",
             e ? e : "(null)", name);
    if (t->rank == 0 && e) printf("#   message on rank 0: %s\n", e);
}

static int untouched(const int32_t *buf, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (buf[i] != SENTINEL) return 0;
    return 1;
}

static void fill_sentinel(int32_t *buf, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = SENTINEL;
}

static void test_mismatches(mt_ctx *t) {
    int32_t send[64], recv[64];
    int other = t->rank != 0; /* rank 0 asks for one thing, every other rank for another */
    for (int i = 0; i < 64; i++) send[i] = t->rank + i;

    mt_begin(t, "mismatch count (rank 0: 10, others: 11)");
    fill_sentinel(recv, 64);
    check_mismatch(t, hvd_allreduce("mm.count", send, recv, other ? 11 : 10, HVD_INT32, HVD_SUM),
                   "mm.count");
    MT_CHECK(t, untouched(recv, 64), "recvbuf was written although the operation failed");
    mt_check_recovers(t, "after.count");
    mt_end(t);

    mt_begin(t, "mismatch dtype (rank 0: float32, others: int32)");
    fill_sentinel(recv, 64);
    check_mismatch(t, hvd_allreduce("mm.dtype", send, recv, 8, other ? HVD_INT32 : HVD_FLOAT32,
                                    HVD_SUM),
                   "mm.dtype");
    MT_CHECK(t, untouched(recv, 64), "recvbuf was written although the operation failed");
    mt_check_recovers(t, "after.dtype");
    mt_end(t);

    mt_begin(t, "mismatch op (rank 0: sum, others: max)");
    fill_sentinel(recv, 64);
    check_mismatch(t, hvd_allreduce("mm.op", send, recv, 8, HVD_INT32, other ? HVD_MAX : HVD_SUM),
                   "mm.op");
    MT_CHECK(t, untouched(recv, 64), "recvbuf was written although the operation failed");
    mt_check_recovers(t, "after.op");
    mt_end(t);

    mt_begin(t, "mismatch broadcast root (rank 0: 0, others: 1)");
    fill_sentinel(recv, 64);
    check_mismatch(t, hvd_broadcast("mm.root", recv, 8, HVD_INT32, other ? 1 : 0), "mm.root");
    MT_CHECK(t, untouched(recv, 64), "buf was written although the broadcast failed");
    mt_check_recovers(t, "after.root");
    mt_end(t);

    mt_begin(t, "mismatch kind (rank 0: allreduce, others: broadcast)");
    fill_sentinel(recv, 64);
    if (other)
        check_mismatch(t, hvd_broadcast("mm.kind", recv, 8, HVD_INT32, 0), "mm.kind");
    else
        check_mismatch(t, hvd_allreduce("mm.kind", send, recv, 8, HVD_INT32, HVD_SUM), "mm.kind");
    mt_check_recovers(t, "after.kind");
    mt_end(t);

    mt_begin(t, "mismatch allgather capacity too small on rank 1");
    {
        size_t cap = t->rank == 1 ? (size_t)t->size * 4 - 1 : 64;
        fill_sentinel(recv, 64);
        check_mismatch(t, hvd_allgather("mm.agcap", send, 4, recv, cap, HVD_INT32, NULL, NULL),
                       "mm.agcap");
        MT_CHECK(t, untouched(recv, 64), "recvbuf was written although the allgather failed");
        mt_check_recovers(t, "after.agcap");
    }
    mt_end(t);

    mt_begin(t, "mismatch alltoall capacity too small on rank 1");
    {
        size_t counts[16];
        for (int d = 0; d < t->size; d++) counts[d] = 2;
        size_t cap = t->rank == 1 ? (size_t)t->size * 2 - 1 : 64;
        fill_sentinel(recv, 64);
        check_mismatch(t, hvd_alltoall("mm.a2acap", send, counts, recv, cap, HVD_INT32, NULL,
                                       NULL),
                       "mm.a2acap");
        MT_CHECK(t, untouched(recv, 64), "recvbuf was written although the alltoall failed");
        mt_check_recovers(t, "after.a2acap");
    }
    mt_end(t);

    mt_begin(t, "mismatch shape: 6 elements as [2, 3] on rank 0, [3, 2] elsewhere");
    {
        int64_t mine[2] = {other ? 3 : 2, other ? 2 : 3};
        hvd_options o = HVD_OPTIONS_INIT;
        o.shape = mine, o.ndim = 2;
        hvd_handle h = HVD_HANDLE_NULL;
        fill_sentinel(recv, 64);
        hvd_status s = hvd_allreduce_async("mm.shape", send, recv, 6, HVD_INT32, HVD_SUM, &o, &h);
        if (MT_EXPECT(t, s, HVD_OK)) s = hvd_wait(&h);
        check_mismatch(t, s, "mm.shape");
        MT_CHECK(t, strstr(hvd_last_error(), "shape differs") && strstr(hvd_last_error(), "[2, 3]") &&
                 strstr(hvd_last_error(), "[3, 2]"), "the message names both shapes: %s", hvd_last_error());
        MT_CHECK(t, untouched(recv, 64), "recvbuf was written although the operation failed");
        /* blocking, of a name cached with one shape: the ranks that change it miss the cache,
         * so the one that does not cannot run it alone on the caller's path */
        int64_t first[2] = {2, 3};
        o.shape = first;
        MT_EXPECT(t, hvd_allreduce_with_options("mm.shape.blocking", send, recv, 6, HVD_INT32,
                                                HVD_SUM, &o), HVD_OK);
        o.shape = mine;
        fill_sentinel(recv, 64);
        check_mismatch(t, hvd_allreduce_with_options("mm.shape.blocking", send, recv, 6,
                                                     HVD_INT32, HVD_SUM, &o),
                       "mm.shape.blocking");
        MT_CHECK(t, untouched(recv, 64), "recvbuf was written although the operation failed");
        /* an allgather's first dimension may differ, the rest not: [r+1, 2] agrees everywhere */
        int64_t rows[2] = {t->rank + 1, 2};
        o.shape = rows;
        size_t got = 0;
        s = hvd_allgather_async("mm.shape.rows.ok", send, (size_t)(t->rank + 1) * 2, recv, 64,
                                HVD_INT32, &got, NULL, &o, &h);
        if (MT_EXPECT(t, s, HVD_OK)) MT_EXPECT(t, hvd_wait(&h), HVD_OK);
        MT_CHECK(t, got == (size_t)t->size * (t->size + 1), "allgather of [r+1, 2]: %zu elements", got);
        /* a rank that gives no shape is compared by counts alone */
        o.shape = other ? NULL : mine;
        s = hvd_allreduce_async("mm.shape.some", send, recv, 6, HVD_INT32, HVD_SUM, &o, &h);
        if (MT_EXPECT(t, s, HVD_OK)) MT_EXPECT(t, hvd_wait(&h), HVD_OK);
        mt_check_recovers(t, "after.shape");
    }
    mt_end(t);

    mt_begin(t, "mismatch in flight beside a correct async allreduce");
    {
        hvd_handle bad = HVD_HANDLE_NULL, good = HVD_HANDLE_NULL;
        int32_t gbuf[3] = {1, 2, 3};
        MT_EXPECT(t, hvd_allreduce_async("mm.async", send, recv, other ? 3 : 2, HVD_INT32,
                                         HVD_SUM, NULL, &bad),
                  HVD_OK);
        MT_EXPECT(t, hvd_allreduce_async("ok.async", gbuf, gbuf, 3, HVD_INT32, HVD_SUM, NULL,
                                         &good),
                  HVD_OK);
        if (good != HVD_HANDLE_NULL && MT_EXPECT(t, hvd_wait(&good), HVD_OK))
            for (int i = 0; i < 3; i++)
                MT_CHECK(t, gbuf[i] == (i + 1) * t->size, "ok.async[%d] = %d", i, gbuf[i]);
        if (bad != HVD_HANDLE_NULL) check_mismatch(t, hvd_wait(&bad), "mm.async");
        mt_check_recovers(t, "after.async");
    }
    mt_end(t);
}

/* One rank's duplicate check on `name`; the first submission must still be in flight, which
 * the caller guarantees by holding back another rank's matching submission. */
static void check_duplicate(mt_ctx *t, const char *name, hvd_handle *h1, int32_t *a) {
    int32_t b[4];
    hvd_handle h2 = HVD_HANDLE_NULL;
    for (int i = 0; i < 4; i++) a[i] = b[i] = t->rank + 1;
    MT_EXPECT(t, hvd_allreduce_async(name, a, a, 4, HVD_INT32, HVD_SUM, NULL, h1), HVD_OK);
    if (MT_EXPECT(t, hvd_allreduce_async(name, b, b, 4, HVD_INT32, HVD_SUM, NULL, &h2),
                  HVD_ERR_DUPLICATE_NAME)) {
        const char *e = hvd_last_error();
        MT_CHECK(t, e && strstr(e, name), "hvd_last_error() \"%s\" does not name \"%s\"",
                 e ? e : "(null)", name);
        MT_CHECK(t, h2 == HVD_HANDLE_NULL, "a rejected submission produced a handle");
    }
    for (int i = 0; i < 4; i++)
        MT_CHECK(t, b[i] == t->rank + 1, "the rejected submission's buffer changed");
}

/* The first "dup" cannot complete before the duplicate is tried: the checking ranks submit
 * before a barrier, the others only after it. Phase 1 checks rank 0, phase 2 every other rank.
 * (A single rank cannot hold its own operation back, so np = 1 skips this.) */
static void test_duplicate(mt_ctx *t) {
    mt_begin(t, "duplicate in-flight name");
    if (t->size < 2) {
        if (t->rank == 0) printf("duplicate in-flight name: skipped (needs 2 or more ranks)\n");
        return;
    }
    int32_t ranks_sum = t->size * (t->size + 1) / 2;
    for (int phase = 0; phase < 2; phase++) {
        const char *name = phase == 0 ? "dup" : "dup2";
        int checker = phase == 0 ? t->rank == 0 : t->rank != 0;
        int32_t a[4];
        hvd_handle h1 = HVD_HANDLE_NULL;
        if (checker) check_duplicate(t, name, &h1, a);
        MT_EXPECT(t, hvd_barrier(), HVD_OK);
        if (!checker) {
            for (int i = 0; i < 4; i++) a[i] = t->rank + 1;
            MT_EXPECT(t, hvd_allreduce_async(name, a, a, 4, HVD_INT32, HVD_SUM, NULL, &h1),
                      HVD_OK);
        }
        if (h1 != HVD_HANDLE_NULL && MT_EXPECT(t, hvd_wait(&h1), HVD_OK))
            for (int i = 0; i < 4; i++)
                MT_CHECK(t, a[i] == ranks_sum, "%s[%d] = %d, expected %d", name, i, a[i],
                         ranks_sum);
        /* once completed, the name is free again */
        MT_EXPECT(t, hvd_allreduce(name, a, a, 4, HVD_INT32, HVD_SUM), HVD_OK);
    }
    mt_check_recovers(t, "after.dup");
    mt_end(t);
}

#define EXPECT_INVALID(t, expr)                                                                \
    do {                                                                                       \
        if (MT_EXPECT((t), (expr), HVD_ERR_INVALID_ARG))                                       \
            MT_CHECK((t), hvd_last_error()[0] != '\0', "empty hvd_last_error() after %s",      \
                     #expr);                                                                   \
    } while (0)

enum { HVDC_TEST_DIMS = 64 }; /* hvdc.h: a shape has at most 64 dimensions */

static void test_bad_args(mt_ctx *t) {
    int32_t buf[8] = {0}, out[8];
    size_t counts[16] = {0};
    hvd_handle h = HVD_HANDLE_NULL;
    char long_name[HVD_MAX_NAME_LEN + 2], max_name[HVD_MAX_NAME_LEN + 1];
    memset(long_name, 'x', HVD_MAX_NAME_LEN + 1);
    long_name[HVD_MAX_NAME_LEN + 1] = '\0';
    memset(max_name, 'm', HVD_MAX_NAME_LEN);
    max_name[HVD_MAX_NAME_LEN] = '\0';

    mt_begin(t, "local argument errors -> HVD_ERR_INVALID_ARG");
    {
        int64_t negative[2] = {2, -4}, many[HVDC_TEST_DIMS + 1] = {0};
        hvd_options o = HVD_OPTIONS_INIT;
        o.shape = negative, o.ndim = 2;
        EXPECT_INVALID(t, hvd_allreduce_async("bad.shape.neg", buf, out, 8, HVD_INT32, HVD_SUM, &o, &h));
        o.shape = many, o.ndim = HVDC_TEST_DIMS + 1;
        EXPECT_INVALID(t, hvd_allreduce_async("bad.shape.dims", buf, out, 8, HVD_INT32, HVD_SUM, &o, &h));
        o.ndim = 2;
        const char *names[1] = {"bad.shape.grouped"};
        const void *sends[1] = {buf};
        void *recvs[1] = {out};
        size_t n8[1] = {8};
        EXPECT_INVALID(t, hvd_grouped_allreduce_async(1, names, sends, recvs, n8, HVD_INT32, HVD_SUM, &o, &h));
    }
    EXPECT_INVALID(t, hvd_allreduce("bad.null", NULL, out, 8, HVD_INT32, HVD_SUM));
    EXPECT_INVALID(t, hvd_allreduce("bad.null", buf, NULL, 8, HVD_INT32, HVD_SUM));
    EXPECT_INVALID(t, hvd_allreduce("bad.dtype", buf, out, 8, (hvd_dtype)99, HVD_SUM));
    EXPECT_INVALID(t, hvd_allreduce("bad.dtype", buf, out, 8, (hvd_dtype)-1, HVD_SUM));
    EXPECT_INVALID(t, hvd_allreduce("bad.op", buf, out, 8, HVD_INT32, (hvd_reduce_op)99));
    EXPECT_INVALID(t, hvd_allreduce("", buf, out, 8, HVD_INT32, HVD_SUM));
    EXPECT_INVALID(t, hvd_allreduce(NULL, buf, out, 8, HVD_INT32, HVD_SUM));
    EXPECT_INVALID(t, hvd_allreduce(long_name, buf, out, 8, HVD_INT32, HVD_SUM));
    EXPECT_INVALID(t, hvd_allreduce_async("bad.handle", buf, out, 8, HVD_INT32, HVD_SUM, NULL,
                                          NULL));
    EXPECT_INVALID(t, hvd_allreduce_async("bad.dtype", buf, out, 8, (hvd_dtype)99, HVD_SUM,
                                          NULL, &h));
    MT_CHECK(t, h == HVD_HANDLE_NULL, "a rejected submission produced a handle");
    EXPECT_INVALID(t, hvd_broadcast("bad.root", buf, 8, HVD_INT32, -1));
    EXPECT_INVALID(t, hvd_broadcast("bad.root", buf, 8, HVD_INT32, t->size));
    EXPECT_INVALID(t, hvd_broadcast("bad.null", NULL, 8, HVD_INT32, 0));
    EXPECT_INVALID(t, hvd_broadcast("bad.dtype", buf, 8, (hvd_dtype)99, 0));
    EXPECT_INVALID(t, hvd_broadcast("", buf, 8, HVD_INT32, 0));
    EXPECT_INVALID(t, hvd_allgather("bad.null", NULL, 8, out, 8 * (size_t)t->size, HVD_INT32,
                                    NULL, NULL));
    EXPECT_INVALID(t, hvd_allgather("bad.null", buf, 1, NULL, 8, HVD_INT32, NULL, NULL));
    EXPECT_INVALID(t, hvd_allgather("bad.dtype", buf, 1, out, 8, (hvd_dtype)99, NULL, NULL));
    EXPECT_INVALID(t, hvd_reducescatter("bad.op", buf, out, 8, HVD_INT32, (hvd_reduce_op)99,
                                        NULL));
    EXPECT_INVALID(t, hvd_reducescatter("bad.null", NULL, out, 8, HVD_INT32, HVD_SUM, NULL));
    /* the average of bool is undefined (sum is or, min is and): refused, with what to use */
    EXPECT_INVALID(t, hvd_allreduce("bad.boolavg", buf, out, 8, HVD_BOOL, HVD_AVERAGE));
    MT_CHECK(t, strstr(hvd_last_error(), "bool") && strstr(hvd_last_error(), "HVD_SUM"),
             "bool average: the message \"%s\" does not say what to use", hvd_last_error());
    EXPECT_INVALID(t, hvd_reducescatter("bad.boolavg", buf, out, 8, HVD_BOOL, HVD_AVERAGE, NULL));
    {
        const char *names[1] = {"bad.boolavg"};
        const void *sends[1] = {buf};
        void *recvs[1] = {out};
        size_t gcounts[1] = {8};
        EXPECT_INVALID(t, hvd_grouped_allreduce(1, names, sends, recvs, gcounts, HVD_BOOL,
                                                HVD_AVERAGE));
    }
    EXPECT_INVALID(t, hvd_allreduce("bad.dtype", buf, out, 8, (hvd_dtype)HVD_DTYPE_COUNT, HVD_SUM));
    EXPECT_INVALID(t, hvd_alltoall("bad.counts", buf, NULL, out, 8, HVD_INT32, NULL, NULL));
    {
        hvd_options scaled = HVD_OPTIONS_INIT;
        scaled.postscale = 2.0;
        void *got = NULL;
        EXPECT_INVALID(t, hvd_allgather_alloc_async("bad.alloc", buf, 1, HVD_FLOAT32, &scaled,
                                                    &got, NULL, NULL, &h));
        EXPECT_INVALID(t, hvd_allgather_alloc_async("bad.alloc", buf, 1, HVD_INT32, NULL, NULL,
                                                    NULL, NULL, &h));
        EXPECT_INVALID(t, hvd_alltoall_alloc_async("bad.alloc", buf, NULL, HVD_INT32, NULL, &got,
                                                   NULL, NULL, &h));
        MT_CHECK(t, got == NULL && h == HVD_HANDLE_NULL, "a refused _alloc call left a buffer or handle");
        hvd_free(NULL); /* NULL-safe */
    }
    EXPECT_INVALID(t, hvd_alltoall(long_name, buf, counts, out, 8, HVD_INT32, NULL, NULL));
    {
        const char *names[2] = {"bad.g0", NULL};
        const void *sends[2] = {buf, buf};
        void *recvs[2] = {out, out};
        size_t gcounts[2] = {1, 1};
        EXPECT_INVALID(t, hvd_grouped_allreduce(-1, names, sends, recvs, gcounts, HVD_INT32,
                                                HVD_SUM));
        EXPECT_INVALID(t, hvd_grouped_allreduce(2, names, sends, recvs, gcounts, HVD_INT32,
                                                HVD_SUM));
        EXPECT_INVALID(t, hvd_grouped_allreduce(1, names, sends, recvs, gcounts, (hvd_dtype)99,
                                                HVD_SUM));
        /* names[i] must be distinct: invalid, or a duplicate name; never sent */
        const char *same[2] = {"bad.same", "bad.same"};
        hvd_status s = hvd_grouped_allreduce(2, same, sends, recvs, gcounts, HVD_INT32, HVD_SUM);
        MT_CHECK(t, s == HVD_ERR_INVALID_ARG || s == HVD_ERR_DUPLICATE_NAME,
                 "grouped allreduce with two equal names returned %s", hvd_status_string(s));
    }
    {
        int done = 0;
        hvd_handle never = (hvd_handle)0xdeadbeefull;
        EXPECT_INVALID(t, hvd_wait(NULL));
        h = HVD_HANDLE_NULL;
        EXPECT_INVALID(t, hvd_wait(&h));
        EXPECT_INVALID(t, hvd_wait(&never));
        EXPECT_INVALID(t, hvd_poll(HVD_HANDLE_NULL, &done));
        EXPECT_INVALID(t, hvd_poll(never, &done));
    }
    /* nothing above was sent: the ranks still agree on what comes next */
    mt_check_recovers(t, "after.badargs");
    /* the longest legal name works */
    mt_check_recovers(t, max_name);
    mt_end(t);

    mt_begin(t, "hvd_wait on a released handle -> HVD_ERR_INVALID_ARG");
    {
        hvd_handle live = HVD_HANDLE_NULL;
        int32_t x[2] = {1, 1};
        if (MT_EXPECT(t, hvd_allreduce_async("released", x, x, 2, HVD_INT32, HVD_SUM, NULL, &live),
                      HVD_OK)) {
            hvd_handle copy = live;
            int done = 0;
            MT_EXPECT(t, hvd_poll(live, &done), HVD_OK);
            MT_EXPECT(t, hvd_wait(&live), HVD_OK);
            MT_CHECK(t, live == HVD_HANDLE_NULL, "hvd_wait did not clear the handle");
            MT_CHECK(t, x[0] == t->size, "released: %d, expected %d", x[0], t->size);
            EXPECT_INVALID(t, hvd_wait(&copy));
            EXPECT_INVALID(t, hvd_poll(copy, &done));
        }
        mt_check_recovers(t, "after.released");
    }
    mt_end(t);

    mt_begin(t, "hvd_init twice -> HVD_ERR_ALREADY_INITIALIZED");
    MT_EXPECT(t, hvd_init(), HVD_ERR_ALREADY_INITIALIZED);
    MT_CHECK(t, hvd_is_initialized() == 1, "no longer initialized after a second hvd_init");
    mt_check_recovers(t, "after.reinit");
    mt_end(t);
}

/* Every call that needs the runtime must say so, before hvd_init and after hvd_shutdown. */
static void check_not_initialized(mt_ctx *t) {
    int32_t x[2] = {1, 2};
    int v = 0, done = 0;
    size_t counts[1] = {1};
    hvd_handle h = (hvd_handle)1;
    MT_CHECK(t, hvd_is_initialized() == 0, "hvd_is_initialized() = 1");
    MT_EXPECT(t, hvd_rank(&v), HVD_ERR_NOT_INITIALIZED);
    MT_CHECK(t, hvd_last_error()[0] != '\0', "empty hvd_last_error() after hvd_rank");
    MT_EXPECT(t, hvd_size(&v), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_local_rank(&v), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_local_size(&v), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_cross_rank(&v), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_cross_size(&v), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_allreduce("ni", x, x, 2, HVD_INT32, HVD_SUM), HVD_ERR_NOT_INITIALIZED);
    MT_CHECK(t, hvd_last_error()[0] != '\0', "empty hvd_last_error() after hvd_allreduce");
    MT_EXPECT(t, hvd_allreduce_async("ni", x, x, 2, HVD_INT32, HVD_SUM, NULL, &h),
              HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_broadcast("ni", x, 2, HVD_INT32, 0), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_allgather("ni", x, 1, x, 2, HVD_INT32, NULL, NULL), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_reducescatter("ni", x, x, 1, HVD_INT32, HVD_SUM, NULL),
              HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_alltoall("ni", x, counts, x, 2, HVD_INT32, NULL, NULL),
              HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_barrier(), HVD_ERR_NOT_INITIALIZED);
    h = (hvd_handle)1;
    MT_EXPECT(t, hvd_wait(&h), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_poll((hvd_handle)1, &done), HVD_ERR_NOT_INITIALIZED);
    MT_EXPECT(t, hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);
    /* these need no runtime */
    MT_CHECK(t, hvd_dtype_size(HVD_FLOAT64) == 8, "hvd_dtype_size(float64) without init");
    MT_CHECK(t, hvd_status_string(HVD_ERR_MISMATCH) != NULL, "hvd_status_string without init");
}

static void test_misc(mt_ctx *t) {
    char version[32];
    mt_begin(t, "status strings, version, dtype sizes");
#define EXPECT_TEXT(name, value, text)                                                         \
    MT_CHECK(t, strcmp(hvd_status_string(name), text) == 0, "hvd_status_string(%s) = \"%s\"",  \
             #name, hvd_status_string(name));
    HVD_STATUS_TABLE(EXPECT_TEXT)
#undef EXPECT_TEXT
    MT_CHECK(t, hvd_status_string((hvd_status)999) != NULL, "hvd_status_string(999) is NULL");
    snprintf(version, sizeof version, "%d.%d.%d", HVD_VERSION_MAJOR, HVD_VERSION_MINOR,
             HVD_VERSION_PATCH);
    MT_CHECK(t, strcmp(hvd_version(), version) == 0, "hvd_version() = \"%s\", header says %s",
             hvd_version(), version);
    MT_CHECK(t, hvd_dtype_size((hvd_dtype)99) == 0, "hvd_dtype_size(99) = %zu",
             hvd_dtype_size((hvd_dtype)99));
    for (int d = 0; d < HVD_DTYPE_COUNT; d++)
        MT_CHECK(t, hvd_dtype_size(mt_all_dtypes[d]) == mt_dtype_size(mt_all_dtypes[d]),
                 "hvd_dtype_size(%s) = %zu", mt_dtype_name(mt_all_dtypes[d]),
                 hvd_dtype_size(mt_all_dtypes[d]));
    mt_end(t);
}

/* An _alloc result that one rank cannot allocate fails on every rank before data moves, naming
 * that rank, and the runtime goes on (HVDC_TEST_FAULTS=alloc_output on the last rank only; it is
 * read by the background thread after the submission, so setting it here does not race). */
static void test_alloc_failure(mt_ctx *t) {
    mt_begin(t, "an _alloc result one rank cannot allocate fails on every rank, alone");
    int last = t->size - 1;
    if (t->rank == last) setenv("HVDC_TEST_FAULTS", "alloc_output", 1);
    int32_t mine[3] = {1, 2, 3};
    void *got = NULL;
    size_t total = 0;
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status s = hvd_allgather_alloc_async("alloc.fails", mine, 3, HVD_INT32, NULL, &got, &total, NULL, &h);
    if (s == HVD_OK) s = hvd_wait(&h);
    if (MT_EXPECT(t, s, HVD_ERR_NO_MEMORY)) {
        char want[64];
        snprintf(want, sizeof want, "rank %d could not allocate", last);
        MT_CHECK(t, strstr(hvd_last_error(), want), "message: %s", hvd_last_error());
    }
    MT_CHECK(t, got == NULL, "a failed _alloc call left a buffer");
    if (t->rank == last) unsetenv("HVDC_TEST_FAULTS");
    s = hvd_allgather_alloc_async("alloc.after", mine, 3, HVD_INT32, NULL, &got, &total, NULL, &h);
    if (MT_EXPECT(t, s == HVD_OK ? hvd_wait(&h) : s, HVD_OK))
        MT_CHECK(t, total == 3 * (size_t)t->size && got && ((int32_t *)got)[2] == 3, "after: %zu", total);
    hvd_free(got);
    mt_check_recovers(t, "after.alloc.failure");
    mt_end(t);
}

int main(void) {
    mt_ctx t;
    mt_init(&t, 0, 1);
    mt_begin(&t, "calls before hvd_init -> HVD_ERR_NOT_INITIALIZED");
    check_not_initialized(&t);

    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    hvd_rank(&t.rank);
    hvd_size(&t.size);
    if (t.rank == 0) printf("# test_mismatch: %d ranks\n", t.size);
    mt_end(&t); /* the before-init group, printed now that the rank is known */

    test_misc(&t);
    if (t.size >= 2) {
        test_mismatches(&t);
    } else if (t.rank == 0) {
        printf("mismatch checks: skipped (they need 2 or more ranks)\n");
    }
    test_duplicate(&t);
    test_bad_args(&t);
    test_alloc_failure(&t);

    mt_combine(&t);
    mt_begin(&t, "hvd_shutdown, then calls after it -> HVD_ERR_NOT_INITIALIZED");
    MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
    check_not_initialized(&t);
    mt_end(&t);
    return mt_exit_code(&t);
}
