/*
 * test_join.c - hvd_join for uneven data: rank r runs 3*(r+1) steps of all-reduces, then joins.
 * At step i only the ranks still running contribute: the sum is theirs, and the average divides
 * it by the number of ranks, joined ones included (they contributed zeros), as Horovod does. Nobody hangs; hvd_join reports the last rank to join; afterwards every
 * rank works together again. A broadcast while a rank has joined fails with HVD_ERR_MISMATCH.
 * Then each rank in turn joins first (as Horovod's test_horovod_join_* do), and the others
 * submit every collective other than an all-reduce: an allgather, a broadcast from a rank that
 * has not joined and one from the joined rank, an alltoall, a reducescatter and a barrier. Each
 * must fail on every rank that submitted it, with HVD_ERR_MISMATCH and a message naming the
 * joined rank and hvd_join; then they join too, the first rank's hvd_join returns, and the
 * next round starts. The joined rank never called the refused barrier, yet its next barrier
 * must have the same name as everyone's (before, the rounds after the first hung there).
 */
#include <stdio.h>
#include <string.h>

#include "mpitest.h"

enum { COUNT = 3000 }; /* large enough for the ring and a packed piece */
enum { PAIRED = 1001 }; /* a second sum, usually fused with the first: a packed piece of two */

static float value(int rank, int step, int i) { return (float)((rank + 1) * 10 + step + i % 5); }

/* The collective failed as a join requires: HVD_ERR_MISMATCH naming the joined rank. */
static void expect_join_refusal(mt_ctx *t, hvd_status st, const char *what, int joined) {
    char rank_words[64];
    snprintf(rank_words, sizeof rank_words, "ranks %d have called hvd_join", joined);
    const char *e = hvd_last_error();
    MT_CHECK(t, st == HVD_ERR_MISMATCH && e && strstr(e, rank_words),
             "%s while rank %d has joined: %s: %s", what, joined, hvd_status_string(st),
             e ? e : "(null)");
    if (t->rank == (joined + 1) % t->size && st == HVD_ERR_MISMATCH && joined == 0)
        printf("#   %s: %s\n", what, e);
}

/* Every collective but an all-reduce, while rank `joined` waits in hvd_join. */
static void refused_while_joined(mt_ctx *t, int joined) {
    int size = t->size, other = (joined + 1) % size;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, all[8 * 4 * 8];
    size_t got = 0, per_rank[64], sendcounts[64];
    char name[64];
    snprintf(name, sizeof name, "joined%d.allgather", joined);
    expect_join_refusal(t, hvd_allgather(name, x, 2, all, sizeof all / sizeof all[0],
                                         HVD_FLOAT32, &got, per_rank), "allgather", joined);
    snprintf(name, sizeof name, "joined%d.broadcast", joined);
    expect_join_refusal(t, hvd_broadcast(name, x, 3, HVD_FLOAT32, other), "broadcast", joined);
    snprintf(name, sizeof name, "joined%d.broadcast.from.joined", joined);
    expect_join_refusal(t, hvd_broadcast(name, x, 3, HVD_FLOAT32, joined),
                        "broadcast from the joined rank", joined);
    for (int r = 0; r < size; r++) sendcounts[r] = 1;
    snprintf(name, sizeof name, "joined%d.alltoall", joined);
    expect_join_refusal(t, hvd_alltoall(name, x, sendcounts, all, sizeof all / sizeof all[0],
                                        HVD_FLOAT32, &got, per_rank), "alltoall", joined);
    snprintf(name, sizeof name, "joined%d.reducescatter", joined);
    expect_join_refusal(t, hvd_reducescatter(name, all, x, (size_t)size, HVD_FLOAT32, HVD_SUM,
                                             &got), "reducescatter", joined);
    expect_join_refusal(t, hvd_barrier(), "barrier", joined);
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    int rank = t.rank, size = t.size;
    static float sum[COUNT], avg[COUNT], small[3], paired[PAIRED];
    int steps = 3 * (rank + 1);
    mt_begin(&t, "uneven steps: all-reduces complete without the ranks that joined");
    for (int step = 0; step < steps; step++) {
        int contributors = 0;
        for (int r = 0; r < size; r++) contributors += 3 * (r + 1) > step;
        for (int i = 0; i < COUNT; i++) sum[i] = avg[i] = value(rank, step, i);
        for (int i = 0; i < 3; i++) small[i] = 1;
        for (int i = 0; i < PAIRED; i++) paired[i] = value(rank, step, i + 1);
        char n1[32], n2[32], n3[32], n4[32];
        snprintf(n1, sizeof n1, "sum.%d", step);
        snprintf(n2, sizeof n2, "avg.%d", step);
        snprintf(n3, sizeof n3, "prod.%d", step);
        snprintf(n4, sizeof n4, "sum-paired.%d", step);
        hvd_handle h[4];
        MT_CHECK(&t, hvd_allreduce_async(n1, sum, sum, COUNT, HVD_FLOAT32, HVD_SUM, NULL, &h[0]) == HVD_OK, "%s", hvd_last_error());
        MT_CHECK(&t, hvd_allreduce_async(n2, avg, avg, COUNT, HVD_FLOAT32, HVD_AVERAGE, NULL, &h[1]) == HVD_OK, "%s", hvd_last_error());
        MT_CHECK(&t, hvd_allreduce_async(n3, small, small, 3, HVD_FLOAT32, HVD_PRODUCT, NULL, &h[2]) == HVD_OK, "%s", hvd_last_error());
        MT_CHECK(&t, hvd_allreduce_async(n4, paired, paired, PAIRED, HVD_FLOAT32, HVD_SUM, NULL, &h[3]) == HVD_OK, "%s", hvd_last_error());
        for (int k = 0; k < 4; k++) MT_CHECK(&t, hvd_wait(&h[k]) == HVD_OK, "step %d: %s", step, hvd_last_error());
        int bad = 0;
        for (int i = 0; i < COUNT; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                if (3 * (r + 1) > step) want += value(r, step, i);
            bad += sum[i] != want || avg[i] != want * (float)(1.0 / size); /* as the core scales */
        }
        for (int i = 0; i < PAIRED; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                if (3 * (r + 1) > step) want += value(r, step, i + 1);
            bad += paired[i] != want;
        }
        bad += small[0] != 1 || small[2] != 1;
        MT_CHECK(&t, bad == 0, "step %d (%d contributors): %d wrong, sum[0]=%g avg[0]=%g", step,
                 contributors, bad, sum[0], avg[0]);
    }
    int last = -1;
    hvd_status st;
    if (rank == 0 && size > 1) {
        /* joined rank 0 sees nothing; a broadcast by the others while it waits is refused */
        st = hvd_join(&last);
    } else {
        if (rank == size - 1 && size > 1) {
            /* by now ranks 0..size-2 have joined or will: a broadcast must fail, not hang */
            int x = 7;
            hvd_status b = hvd_broadcast("while-joined", &x, 1, HVD_INT32, size - 1);
            MT_CHECK(&t, b == HVD_ERR_MISMATCH && strstr(hvd_last_error(), "hvd_join"),
                     "broadcast while rank 0 has joined: %s %s", hvd_status_string(b), hvd_last_error());
        }
        st = hvd_join(&last);
    }
    MT_CHECK(&t, st == HVD_OK, "hvd_join: %s", hvd_last_error());
    MT_CHECK(&t, last == size - 1, "last joined rank %d, expected %d", last, size - 1);
    mt_end(&t);

    for (int first = 0; first < size && size > 1; first++) {
        mt_begin(&t, "rank %d joins first: the others' collectives fail, naming it", first);
        if (rank == first) {
            MT_CHECK(&t, hvd_join(&last) == HVD_OK, "hvd_join: %s", hvd_last_error());
        } else {
            refused_while_joined(&t, first);
            MT_CHECK(&t, hvd_join(&last) == HVD_OK, "hvd_join: %s", hvd_last_error());
        }
        mt_end(&t);
    }

    mt_begin(&t, "after everyone joined, all ranks reduce together again");
    /* the rank that joined first last round missed that round's barrier: the next one must
     * still be the same barrier on every rank */
    MT_CHECK(&t, hvd_barrier() == HVD_OK, "barrier after the joins: %s", hvd_last_error());
    int v = rank + 1;
    MT_CHECK(&t, hvd_allreduce("after", &v, &v, 1, HVD_INT32, HVD_SUM) == HVD_OK, "%s", hvd_last_error());
    MT_CHECK(&t, v == size * (size + 1) / 2, "got %d", v);
    mt_end(&t);
    mt_combine(&t);
    int code = mt_exit_code(&t);
    hvd_shutdown();
    return code;
}
