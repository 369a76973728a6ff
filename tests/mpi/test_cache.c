/*
 * test_cache.c - the response cache seen from the API (np >= 2; run at 3): repeated
 * all-reduces go through the cache and stay right; a rank that changes a cached tensor's
 * count gets, like every rank, HVD_ERR_MISMATCH naming it (the change is caught although the
 * others announced the tensor by slot); a rank that joins while the others all-reduce cached
 * tensors contributes nothing and nobody hangs; afterwards everything works.
 * Main thread only.
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
    mt_combine(&t);
    hvd_shutdown();
    return mt_exit_code(&t);
}
