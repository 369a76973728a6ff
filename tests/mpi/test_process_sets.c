/*
 * test_process_sets.c - process sets: the even ranks and the odd ranks as two sets running at
 * once (every collective in each, checked against a local reference), independence (the even
 * set and the global set keep completing while an odd-set operation waits for its last rank),
 * overlapping sets, and the failure paths: a non-member submitting, unknown sets, a root outside
 * the set, ranks that disagree on a new set, bad ranks, a set added twice, removing with work
 * in flight (refused on every rank, then allowed), using a removed set, a mismatch inside a set.
 * Runs at np >= 2 (np = 4 adds the overlapping sets). Main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

static hvd_options in_set(int id) {
    hvd_options o = HVD_OPTIONS_INIT;
    o.process_set = id;
    return o;
}

/* the members of the set with this parity, in order */
static int members(int size, int parity, int *out) {
    int n = 0;
    for (int r = parity; r < size; r += 2) out[n++] = r;
    return n;
}

static hvd_status wait_status(hvd_status submitted, hvd_handle *h) {
    return submitted != HVD_OK ? submitted : hvd_wait(h);
}

/* Every collective inside the set of this rank's parity. */
static void test_collectives_in_sets(mt_ctx *t, int set_of_mine, const int *mine, int n) {
    hvd_options o = in_set(set_of_mine);
    int me = -1;
    for (int i = 0; i < n; i++)
        if (mine[i] == t->rank) me = i;
    mt_begin(t, "collectives inside the %s set (%d ranks), concurrently with the other set",
             t->rank % 2 ? "odd" : "even", n);
    /* 20 all-reduces in flight in the set, 5 global ones interleaved */
    enum { K = 20, G = 5 };
    int32_t vals[K][3], gvals[G][2];
    hvd_handle h[K], gh[G];
    char name[64];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < 3; i++) vals[k][i] = (t->rank + 1) * (k + i + 1);
        snprintf(name, sizeof name, "set.ar.%d", k);
        MT_EXPECT(t, hvd_allreduce_async(name, vals[k], vals[k], 3, HVD_INT32, HVD_SUM, &o, &h[k]), HVD_OK);
        if (k % 4 == 0 && k / 4 < G) {
            gvals[k / 4][0] = gvals[k / 4][1] = t->rank + 1;
            snprintf(name, sizeof name, "global.ar.%d", k / 4);
            MT_EXPECT(t, hvd_allreduce_async(name, gvals[k / 4], gvals[k / 4], 2, HVD_INT32, HVD_SUM,
                                             NULL, &gh[k / 4]), HVD_OK);
        }
    }
    int member_sum = 0;
    for (int i = 0; i < n; i++) member_sum += mine[i] + 1;
    for (int k = 0; k < K; k++)
        if (MT_EXPECT(t, hvd_wait(&h[k]), HVD_OK))
            for (int i = 0; i < 3; i++)
                MT_CHECK(t, vals[k][i] == member_sum * (k + i + 1), "set allreduce %d[%d] = %d, expected %d",
                         k, i, vals[k][i], member_sum * (k + i + 1));
    for (int g = 0; g < G; g++)
        if (MT_EXPECT(t, hvd_wait(&gh[g]), HVD_OK))
            MT_CHECK(t, gvals[g][0] == t->size * (t->size + 1) / 2, "global allreduce %d = %d", g, gvals[g][0]);

    /* broadcast from the set's last member, named by its global rank */
    int64_t b[4];
    for (int i = 0; i < 4; i++) b[i] = t->rank * 100 + i;
    hvd_handle hb;
    if (MT_EXPECT(t, wait_status(hvd_broadcast_async("set.bc", b, 4, HVD_INT64, mine[n - 1], &o, &hb), &hb), HVD_OK))
        for (int i = 0; i < 4; i++)
            MT_CHECK(t, b[i] == mine[n - 1] * 100 + i, "broadcast[%d] = %lld", i, (long long)b[i]);

    /* allgather (libhvdc allocates): set rank i sends i + 1 elements */
    int32_t send[8];
    for (int i = 0; i < me + 1; i++) send[i] = t->rank * 10 + i;
    void *got = NULL;
    size_t total = 0, counts[8] = {0};
    hvd_handle hg;
    if (MT_EXPECT(t, wait_status(hvd_allgather_alloc_async("set.ag", send, (size_t)me + 1, HVD_INT32, &o,
                                                           &got, &total, counts, &hg), &hg), HVD_OK)) {
        MT_CHECK(t, total == (size_t)(n * (n + 1) / 2), "allgather total %zu", total);
        size_t at = 0;
        for (int i = 0; i < n && got; i++) {
            MT_CHECK(t, counts[i] == (size_t)i + 1, "allgather count[%d] = %zu", i, counts[i]);
            for (int k = 0; k <= i; k++, at++)
                MT_CHECK(t, ((int32_t *)got)[at] == mine[i] * 10 + k, "allgather element %zu", at);
        }
        hvd_free(got);
    }

    /* reducescatter: set rank i keeps block i */
    float rs[16], rs_out[16];
    size_t rs_count = (size_t)n * 2 + 1, kept = 0;
    for (size_t i = 0; i < rs_count; i++) rs[i] = (float)((t->rank + 1) * (int)(i + 1));
    hvd_handle hr;
    if (MT_EXPECT(t, wait_status(hvd_reducescatter_async("set.rs", rs, rs_out, rs_count, HVD_FLOAT32, HVD_SUM,
                                                         &o, &kept, &hr), &hr), HVD_OK)) {
        size_t first = (size_t)me * (rs_count / (size_t)n) + ((size_t)me < rs_count % (size_t)n ? (size_t)me : rs_count % (size_t)n);
        MT_CHECK(t, kept == rs_count / (size_t)n + ((size_t)me < rs_count % (size_t)n), "reducescatter kept %zu", kept);
        for (size_t i = 0; i < kept; i++)
            MT_CHECK(t, rs_out[i] == (float)(member_sum * (int)(first + i + 1)), "reducescatter[%zu] = %g", i, rs_out[i]);
    }

    /* alltoall: one element to each set rank */
    int32_t a2a[8];
    size_t sc[8], rc[8];
    for (int d = 0; d < n; d++) a2a[d] = t->rank * 100 + mine[d], sc[d] = 1;
    void *a2a_out = NULL;
    hvd_handle ha;
    if (MT_EXPECT(t, wait_status(hvd_alltoall_alloc_async("set.a2a", a2a, sc, HVD_INT32, &o, &a2a_out,
                                                          &total, rc, &ha), &ha), HVD_OK)) {
        for (int s = 0; s < n && a2a_out; s++)
            MT_CHECK(t, ((int32_t *)a2a_out)[s] == mine[s] * 100 + t->rank, "alltoall from %d", s);
        hvd_free(a2a_out);
    }
    hvd_handle hbar;
    MT_EXPECT(t, wait_status(hvd_barrier_async(&o, &hbar), &hbar), HVD_OK);
    mt_end(t);
}

/* The even set and the global set complete while an odd-set operation waits for rank 3. */
static void test_independence(mt_ctx *t, int even, int odd) {
    mt_begin(t, "sets never wait for each other: 50 even-set all-reduces and a global barrier "
             "complete while an odd-set all-reduce waits for its last rank");
    int last_odd = (t->size - 1) % 2 ? t->size - 1 : t->size - 2;
    hvd_options oe = in_set(even), oo = in_set(odd);
    int32_t x = 1;
    hvd_handle stuck = HVD_HANDLE_NULL;
    if (t->rank % 2 == 1 && t->rank != last_odd)  /* the odd ranks but the last submit early */
        MT_EXPECT(t, hvd_allreduce_async("odd.late", &x, &x, 1, HVD_INT32, HVD_SUM, &oo, &stuck), HVD_OK);
    if (t->rank % 2 == 0)
        for (int k = 0; k < 50; k++) {
            int32_t v = 1;
            hvd_handle h;
            MT_EXPECT(t, wait_status(hvd_allreduce_async("even.many", &v, &v, 1, HVD_INT32, HVD_SUM, &oe, &h), &h), HVD_OK);
        }
    MT_EXPECT(t, hvd_barrier(), HVD_OK); /* the even ranks reach it only if their set ran */
    if (stuck != HVD_HANDLE_NULL) {
        int done = -1;
        MT_EXPECT(t, hvd_poll(stuck, &done), HVD_OK);
        MT_CHECK(t, done == 0 || t->size == 2, "the odd all-reduce completed before its last rank submitted it");
    }
    /* the last odd rank may leave the first barrier before the others poll: it submits only
     * once every poll is done */
    MT_EXPECT(t, hvd_barrier(), HVD_OK);
    if (t->rank == last_odd)
        MT_EXPECT(t, hvd_allreduce_async("odd.late", &x, &x, 1, HVD_INT32, HVD_SUM, &oo, &stuck), HVD_OK);
    if (t->rank % 2 == 1 && MT_EXPECT(t, hvd_wait(&stuck), HVD_OK))
        MT_CHECK(t, x == t->size / 2, "odd.late = %d, expected %d", x, t->size / 2);
    mt_end(t);
}

static void test_refusals(mt_ctx *t, int even, int odd) {
    mt_begin(t, "refused: non-member, unknown set, root outside the set, bad ranks, a set twice");
    int other = t->rank % 2 ? even : odd, mine = t->rank % 2 ? odd : even;
    hvd_options oo = in_set(other), ou = in_set(12345), om = in_set(mine);
    int32_t v = 0;
    hvd_handle h = HVD_HANDLE_NULL;
    MT_EXPECT(t, hvd_allreduce_async("not.mine", &v, &v, 1, HVD_INT32, HVD_SUM, &oo, &h), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "is not in process set"), "message: %s", hvd_last_error());
    MT_CHECK(t, h == HVD_HANDLE_NULL, "a refused submission gave a handle");
    MT_EXPECT(t, hvd_allreduce_async("unknown", &v, &v, 1, HVD_INT32, HVD_SUM, &ou, &h), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "does not exist"), "message: %s", hvd_last_error());
    MT_EXPECT(t, hvd_broadcast_async("bad.root", &v, 1, HVD_INT32, t->rank % 2 ? 0 : 1, &om, &h),
              HVD_ERR_INVALID_ARG);
    int bad[3] = {0, t->size, 1}, dup[2] = {0, 0}, id = -7;
    MT_EXPECT(t, hvd_add_process_set(bad, 3, &id), HVD_ERR_INVALID_ARG);
    MT_EXPECT(t, hvd_add_process_set(dup, 2, &id), HVD_ERR_INVALID_ARG);
    MT_EXPECT(t, hvd_add_process_set(bad, 0, &id), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, id == -7, "a refused add wrote an id");
    int evens[8], n = members(t->size, 0, evens);
    MT_EXPECT(t, hvd_add_process_set(evens, n, &id), HVD_ERR_INVALID_ARG); /* exists already */
    MT_CHECK(t, strstr(hvd_last_error(), "has these ranks already"), "message: %s", hvd_last_error());
    int everyone[8];
    for (int r = 0; r < t->size; r++) everyone[t->size - 1 - r] = r; /* any order */
    MT_EXPECT(t, hvd_add_process_set(everyone, t->size, &id), HVD_ERR_INVALID_ARG); /* the global set */
    MT_CHECK(t, strstr(hvd_last_error(), "duplicate process set") && strstr(hvd_last_error(), "global"),
             "message: %s", hvd_last_error());
    MT_EXPECT(t, hvd_remove_process_set(HVD_PROCESS_SET_GLOBAL), HVD_ERR_INVALID_ARG);
    MT_EXPECT(t, hvd_remove_process_set(12345), HVD_ERR_INVALID_ARG);
    /* a list only rank 1 gets wrong fails every rank instead of leaving them waiting */
    int fine[2] = {0, 1}, *lst = t->rank == 1 ? bad : fine;
    MT_EXPECT(t, hvd_add_process_set(lst, 2, &id), HVD_ERR_INVALID_ARG);
    if (t->rank != 1) MT_CHECK(t, strstr(hvd_last_error(), "rank(s) 1 passed an invalid"), "message: %s", hvd_last_error());
    /* different ids to remove: a mismatch on every rank, nothing removed */
    MT_EXPECT(t, hvd_remove_process_set(t->rank == 0 ? even : odd), HVD_ERR_MISMATCH);
    /* ranks disagree: rank 0 names {0}, the others {0, 1} */
    int first[2] = {0, 1};
    MT_EXPECT(t, hvd_add_process_set(first, t->rank == 0 ? 1 : 2, &id), HVD_ERR_MISMATCH);
    /* as many ranks, other ones: rank 0 names {0, 1}, the others {1, 0}, then {0, 1} and
     * {1, 2} (what tells these apart is the hash of the sorted ranks) */
    int swapped[2] = {1, 0}, shifted[2] = {1, 2};
    if (t->size >= 3) { /* at np 2, {0, 1} is the global set, which cannot be added again */
        MT_EXPECT(t, hvd_add_process_set(t->rank == 0 ? first : swapped, 2, &id), HVD_OK);
        MT_EXPECT(t, hvd_remove_process_set(id), HVD_OK);
        MT_EXPECT(t, hvd_add_process_set(t->rank == 0 ? first : shifted, 2, &id), HVD_ERR_MISMATCH);
    } else {
        MT_EXPECT(t, hvd_add_process_set(t->rank == 0 ? first : swapped, 2, &id), HVD_ERR_INVALID_ARG);
        MT_CHECK(t, strstr(hvd_last_error(), "global process set"), "message: %s", hvd_last_error());
    }
    /* a mismatch inside a set fails its members, and the set goes on */
    int32_t c[4] = {1, 1, 1, 1};
    hvd_status s = wait_status(hvd_allreduce_async("set.mm", c, c, t->rank < 2 ? 3 : 4, HVD_INT32, HVD_SUM, &om, &h), &h);
    /* ranks 0 and 2 disagree from 3 ranks up, ranks 1 and 3 from 4 */
    int mm_expected = t->rank % 2 == 0 ? t->size >= 3 : t->size >= 4;
    MT_EXPECT(t, s, mm_expected ? HVD_ERR_MISMATCH : HVD_OK);
    v = 1;
    MT_EXPECT(t, wait_status(hvd_allreduce_async("set.after.mm", &v, &v, 1, HVD_INT32, HVD_SUM, &om, &h), &h), HVD_OK);
    mt_end(t);
}

/* A new set of ranks 0 and 1 (no other test's set): rank 0 submits, rank 1 not yet. From 3
 * ranks: at 2, {0, 1} is the global set, which cannot be added again. */
static void test_remove(mt_ctx *t) {
    if (t->size < 3) return;
    mt_begin(t, "removing a set with work in flight is refused on every rank; then allowed");
    int ends[2] = {0, 1}, id = 0;
    if (!MT_EXPECT(t, hvd_add_process_set(ends, 2, &id), HVD_OK)) {
        mt_end(t);
        return;
    }
    hvd_options o = in_set(id);
    int32_t x = 1;
    hvd_handle h = HVD_HANDLE_NULL;
    int member = t->rank <= 1;
    if (t->rank == 0) MT_EXPECT(t, hvd_allreduce_async("ends.pending", &x, &x, 1, HVD_INT32, HVD_SUM, &o, &h), HVD_OK);
    MT_EXPECT(t, hvd_remove_process_set(id), HVD_ERR_INVALID_ARG);
    MT_CHECK(t, strstr(hvd_last_error(), "in flight on rank(s) 0"), "message: %s", hvd_last_error());
    if (t->rank == 1)
        MT_EXPECT(t, hvd_allreduce_async("ends.pending", &x, &x, 1, HVD_INT32, HVD_SUM, &o, &h), HVD_OK);
    if (member && MT_EXPECT(t, hvd_wait(&h), HVD_OK)) MT_CHECK(t, x == 2, "ends.pending = %d", x);
    MT_EXPECT(t, hvd_remove_process_set(id), HVD_OK);
    if (member)
        MT_EXPECT(t, hvd_allreduce_async("ends.gone", &x, &x, 1, HVD_INT32, HVD_SUM, &o, &h), HVD_ERR_INVALID_ARG);
    int size = -1;
    MT_EXPECT(t, hvd_process_set_size(id, &size), HVD_ERR_INVALID_ARG);
    mt_end(t);
}

static void test_overlapping(mt_ctx *t) {
    mt_begin(t, "overlapping sets {0,1,2} and {1,2,3} at once");
    int a_ranks[3] = {0, 1, 2}, b_ranks[3] = {3, 2, 1}, a = 0, b = 0; /* any order */
    MT_EXPECT(t, hvd_add_process_set(a_ranks, 3, &a), HVD_OK);
    MT_EXPECT(t, hvd_add_process_set(b_ranks, 3, &b), HVD_OK);
    MT_CHECK(t, a != b && a > 0 && b > 0, "ids %d and %d", a, b);
    int pos = -2;
    MT_EXPECT(t, hvd_process_set_rank(b, &pos), HVD_OK);
    MT_CHECK(t, pos == (t->rank >= 1 ? t->rank - 1 : -1), "rank in {1,2,3} = %d", pos);
    hvd_options oa = in_set(a), ob = in_set(b);
    int32_t va = t->rank + 1, vb = t->rank + 1;
    hvd_handle ha = HVD_HANDLE_NULL, hb = HVD_HANDLE_NULL;
    if (t->rank <= 2) MT_EXPECT(t, hvd_allreduce_async("ov", &va, &va, 1, HVD_INT32, HVD_SUM, &oa, &ha), HVD_OK);
    if (t->rank >= 1) MT_EXPECT(t, hvd_allreduce_async("ov", &vb, &vb, 1, HVD_INT32, HVD_SUM, &ob, &hb), HVD_OK);
    if (t->rank <= 2 && MT_EXPECT(t, hvd_wait(&ha), HVD_OK)) MT_CHECK(t, va == 6, "{0,1,2} sum %d", va);
    if (t->rank >= 1 && MT_EXPECT(t, hvd_wait(&hb), HVD_OK)) MT_CHECK(t, vb == 9, "{1,2,3} sum %d", vb);
    /* float numerics in a set of three: non-integer values whose sum depends on the order; every
     * member must hold the rank-order sum ((x0 + x1) + x2) of the set's members, bit for bit */
    enum { N = 4099 };
    float *x = malloc(N * sizeof *x), *want = malloc(N * sizeof *want);
    for (int i = 0; i < N; i++) {
        want[i] = 0.0f;
        for (int m = 1; m <= 3; m++) { /* members 1, 2, 3 of b, in set order */
            float v = 0.1f * (float)m + 1e-3f * (float)i + 1e7f * (float)((i + m) % 3 == 0);
            want[i] = m == 1 ? v : want[i] + v;
            if (m == t->rank) x[i] = v;
        }
    }
    if (t->rank >= 1 && MT_EXPECT(t, wait_status(hvd_allreduce_async("ov.float", x, x, N, HVD_FLOAT32, HVD_SUM, &ob, &hb), &hb), HVD_OK)) {
        int bad = 0;
        for (int i = 0; i < N; i++) bad += memcmp(&x[i], &want[i], sizeof x[i]) != 0;
        MT_CHECK(t, bad == 0, "{1,2,3} float sum: %d of %d elements differ from the rank-order sum", bad, N);
    }
    free(x), free(want);
    MT_EXPECT(t, hvd_remove_process_set(a), HVD_OK);
    /* b stays: hvd_shutdown stops it */
    mt_end(t);
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    int evens[8], odds[8];
    int n_even = members(t.size, 0, evens), n_odd = members(t.size, 1, odds);
    int even = 0, odd = 0, size = 0, rank = -2;
    mt_begin(&t, "add the even and the odd ranks as two sets");
    MT_EXPECT(&t, hvd_add_process_set(evens, n_even, &even), HVD_OK);
    if (n_odd > 0) MT_EXPECT(&t, hvd_add_process_set(odds, n_odd, &odd), HVD_OK);
    MT_CHECK(&t, even > 0 && (n_odd == 0 || odd > even), "ids %d, %d", even, odd);
    MT_EXPECT(&t, hvd_process_set_size(even, &size), HVD_OK);
    MT_EXPECT(&t, hvd_process_set_rank(even, &rank), HVD_OK);
    MT_CHECK(&t, size == n_even && rank == (t.rank % 2 ? -1 : t.rank / 2), "even set: size %d rank %d", size, rank);
    mt_end(&t);
    if (n_odd > 0) {
        test_collectives_in_sets(&t, t.rank % 2 ? odd : even, t.rank % 2 ? odds : evens,
                                 t.rank % 2 ? n_odd : n_even);
        test_independence(&t, even, odd);
        test_refusals(&t, even, odd);
        test_remove(&t);
    }
    if (t.size == 4) test_overlapping(&t);
    mt_combine(&t);
    hvd_status s = hvd_shutdown(); /* stops the sets still there */
    if (s != HVD_OK) {
        printf("[rank %d] hvd_shutdown: %s\n", t.rank, hvd_last_error());
        atomic_fetch_add(&t.failures, 1);
    }
    return mt_exit_code(&t);
}
