/*
 * test_cache.c - the response cache seen from the API (np >= 2; run at 3): repeated
 * all-reduces go through the cache and stay right; a rank that changes a cached tensor's
 * count gets, like every rank, HVD_ERR_MISMATCH naming it (the change is caught although the
 * others announced the tensor by slot); a rank that joins while the others all-reduce cached
 * tensors contributes nothing and nobody hangs; afterwards everything works. The 2-byte and
 * bool dtypes go through the cache like the others (and a changed dtype is caught); each
 * process set's runtime has a cache of its own, so one name cached with other counts in the
 * global set and in a set does not collide. Main thread only.
 */
#include <stdio.h>
#include <string.h>

#include "mpitest.h"

static void sum_check(mt_ctx *t, const char *name, int count, int contributors_sum) {
    int32_t buf[16];
    for (int i = 0; i < count; i++) buf[i] = (t->rank + 1) * (i + 1);
    if (!MT_EXPECT(t, hvd_allreduce(name, buf, buf, (size_t)count, HVD_INT32, HVD_SUM), HVD_OK)) return;
    for (int i = 0; i < count; i++)
        MT_CHECK(t, buf[i] == contributors_sum * (i + 1), "%s[%d] = %d, want %d", name, i, buf[i],
                 contributors_sum * (i + 1));
}

/* int16 sum, uint16 max and bool sum (= or) of rank- and index-dependent values, checked
 * against a local reference, 10 times under the same names: from the second step on, each is
 * announced by its cache slot. */
static void new_dtypes_check(mt_ctx *t) {
    for (int step = 0; step < 10; step++) {
        int16_t a[7];
        uint16_t b[7];
        uint8_t c[7];
        for (int i = 0; i < 7; i++) {
            a[i] = (int16_t)((t->rank + 1) * (i - 3));
            b[i] = (uint16_t)(1000 * t->rank + i + step);
            c[i] = (uint8_t)(i == t->rank); /* index i is true on rank i only: the or is i < size */
        }
        if (!MT_EXPECT(t, hvd_allreduce("cache.i16", a, a, 7, HVD_INT16, HVD_SUM), HVD_OK) ||
            !MT_EXPECT(t, hvd_allreduce("cache.u16", b, b, 7, HVD_UINT16, HVD_MAX), HVD_OK) ||
            !MT_EXPECT(t, hvd_allreduce("cache.bool", c, c, 7, HVD_BOOL, HVD_SUM), HVD_OK))
            return;
        int all = t->size * (t->size + 1) / 2;
        for (int i = 0; i < 7; i++) {
            MT_CHECK(t, a[i] == all * (i - 3), "step %d int16[%d] = %d, want %d", step, i, a[i], all * (i - 3));
            MT_CHECK(t, b[i] == 1000 * (t->size - 1) + i + step, "step %d uint16[%d] = %u", step, i, b[i]);
            MT_CHECK(t, c[i] == (i < t->size), "step %d bool[%d] = %u, want %d", step, i, c[i], i < t->size);
        }
    }
}

/* The ranks of this rank's parity as a process set; a name used with 3 elements in the
 * global set and with 9 in the set, interleaved: two caches, so both stay right and neither
 * is a mismatch. Then a count changed in the set fails in that set only. */
static void process_set_caches(mt_ctx *t) {
    int evens[4], odds[4], ne = 0, no = 0;
    for (int r = 0; r < t->size; r++) {
        if (r % 2) odds[no++] = r;
        else evens[ne++] = r;
    }
    int even = -1, odd = -1;
    if (!MT_EXPECT(t, hvd_add_process_set(evens, ne, &even), HVD_OK)) return;
    if (no > 0 && !MT_EXPECT(t, hvd_add_process_set(odds, no, &odd), HVD_OK)) return;
    int mine = t->rank % 2 ? odd : even;
    int *members = t->rank % 2 ? odds : evens;
    int n = t->rank % 2 ? no : ne;
    int set_sum = 0;
    for (int i = 0; i < n; i++) set_sum += members[i] + 1;
    hvd_options o = HVD_OPTIONS_INIT;
    o.process_set = mine;
    int all = t->size * (t->size + 1) / 2;
    for (int step = 0; step < 10; step++) {
        sum_check(t, "cache.shared", 3, all);
        int32_t buf[9];
        for (int i = 0; i < 9; i++) buf[i] = (t->rank + 1) * (i + 1);
        hvd_handle h;
        hvd_status s = hvd_allreduce_async("cache.shared", buf, buf, 9, HVD_INT32, HVD_SUM, &o, &h);
        if (s == HVD_OK) s = hvd_wait(&h);
        if (!MT_EXPECT(t, s, HVD_OK)) break;
        for (int i = 0; i < 9; i++)
            MT_CHECK(t, buf[i] == set_sum * (i + 1), "step %d set's [%d] = %d, want %d", step, i,
                     buf[i], set_sum * (i + 1));
    }
    if (n >= 2) { /* a set with one rank has nobody to disagree with */
        int32_t buf[9] = {0};
        hvd_handle h;
        hvd_status s = hvd_allreduce_async("cache.shared", buf, buf, members[0] == t->rank ? 8 : 9,
                                           HVD_INT32, HVD_SUM, &o, &h);
        if (s == HVD_OK) s = hvd_wait(&h);
        if (MT_EXPECT(t, s, HVD_ERR_MISMATCH))
            MT_CHECK(t, strstr(hvd_last_error(), "cache.shared") != NULL, "message: %s", hvd_last_error());
    }
    sum_check(t, "cache.shared", 3, all); /* the global cache is untouched by the set's error */
    MT_EXPECT(t, hvd_remove_process_set(even), HVD_OK);
    if (odd >= 0) MT_EXPECT(t, hvd_remove_process_set(odd), HVD_OK);
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    int all = t.size * (t.size + 1) / 2;

    mt_begin(&t, "repeated all-reduces through the cache");
    for (int step = 0; step < 20; step++) {
        sum_check(&t, "cache.a", 5, all);
        sum_check(&t, "cache.b", 16, all);
    }
    mt_end(&t);

    mt_begin(&t, "a cached tensor whose count changes on rank 0 fails on every rank");
    int32_t buf[8] = {0};
    hvd_status s = hvd_allreduce("cache.a", buf, buf, t.rank == 0 ? 6 : 5, HVD_INT32, HVD_SUM);
    if (MT_EXPECT(&t, s, HVD_ERR_MISMATCH))
        MT_CHECK(&t, strstr(hvd_last_error(), "cache.a") && strstr(hvd_last_error(), "count"),
                 "message: %s", hvd_last_error());
    sum_check(&t, "cache.a", 5, all); /* as cached before: still right */
    mt_end(&t);

    mt_begin(&t, "the last rank joins while the others all-reduce cached tensors");
    int last = t.size - 1;
    if (t.rank == last) {
        int last_joined = -1;
        MT_EXPECT(&t, hvd_join(&last_joined), HVD_OK);
        MT_CHECK(&t, last_joined != last, "the last rank to join was %d", last_joined);
    } else {
        for (int step = 0; step < 5; step++) sum_check(&t, "cache.b", 16, all - (last + 1));
        int last_joined = -1;
        MT_EXPECT(&t, hvd_join(&last_joined), HVD_OK);
    }
    sum_check(&t, "cache.b", 16, all);
    mt_end(&t);

    mt_begin(&t, "int16, uint16 and bool all-reduces through the cache");
    new_dtypes_check(&t);
    int16_t i16[7] = {0};
    hvd_status d = hvd_allreduce("cache.u16", i16, i16, 7, t.rank == 0 ? HVD_INT16 : HVD_UINT16, HVD_MAX);
    if (MT_EXPECT(&t, d, HVD_ERR_MISMATCH))
        MT_CHECK(&t, strstr(hvd_last_error(), "cache.u16") && strstr(hvd_last_error(), "dtype"),
                 "message: %s", hvd_last_error());
    new_dtypes_check(&t); /* as cached before: still right */
    mt_end(&t);

    mt_begin(&t, "each process set's runtime has its own cache");
    process_set_caches(&t);
    mt_end(&t);
    mt_combine(&t);
    hvd_shutdown();
    return mt_exit_code(&t);
}
