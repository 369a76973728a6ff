/*
 * test_poll.c - the background waits' spin policy (base/poll.h) as hvd_init sets it up:
 *   1. hvdc__node_cpus against a reference computed here: every rank's affinity mask,
 *      gathered over the ranks that share memory and OR-ed by hand;
 *   2. the runtime's spin budgets: HVDC_SPIN_NS where the node has a CPU for every rank, else
 *      0; the hand-offs' HVDC_SPIN_NS where it has two, else 0 (on a 2-CPU machine np 1 spins
 *      in both, np 2 in the waits only, np 3 in neither: the suite runs all three); with the
 *      hand-off spin, the queue and completion locks are adaptive (they spin too), else plain;
 *   3. app_waiting counts a thread blocked in hvd_wait: rank 0 waits on an all-reduce the
 *      others submit only once rank 0 has seen the count go up; it is 0 again afterwards, and
 *      the sum is exact (integer-valued floats, any order). Needs a second rank to hold the
 *      op back: not at np 1;
 *   4. hand-offs either way: blocking all-reduces back to back (the background thread finds
 *      the next op within its spin) and after pauses far longer than the spin (it has gone to
 *      sleep, and the submission must wake it), every sum exact.
 * Main thread plus one waiting thread on rank 0; prints PASS or FAIL.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/affinity.h"
#include "base/clock.h"
#include "rank_check.h"
#include "runtime/runtime.h"

static int rank = 0;

enum { COUNT = 1000, HANDOFFS = 400 };

/* The CPUs the ranks sharing this node's memory may run on together, gathered here. */
static int reference_node_cpus(int *local_size) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, local_size);
    cpu_set_t mine, *all = calloc((size_t)*local_size, sizeof *all), both;
    CPU_ZERO(&mine);
    CPU_ZERO(&both);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) printf("[rank %d] sched_getaffinity failed\n", rank);
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, node);
    for (int r = 0; r < *local_size; r++) CPU_OR(&both, &both, &all[r]);
    free(all);
    MPI_Comm_free(&node);
    return CPU_COUNT(&both);
}

typedef struct waiter {
    hvd_handle handle;
    hvd_status status;
} waiter;

static void *wait_for_it(void *arg) {
    waiter *w = arg;
    w->status = hvd_wait(&w->handle);
    return NULL;
}

int main(int argc, char **argv) {
    int provided, size, local_size = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int want_cpus = reference_node_cpus(&local_size), cpus = -1;
    hvd_status st = hvdc__node_cpus(MPI_COMM_WORLD, &cpus);
    CHECK_T(st == HVD_OK, "hvdc__node_cpus: %s", hvd_last_error());
    CHECK_T(cpus == want_cpus, "hvdc__node_cpus says %d CPUs, the gathered masks %d", cpus, want_cpus);

    st = hvd_init();
    CHECK_T(st == HVD_OK, "hvd_init: %s", hvd_last_error());
    if (st != HVD_OK) {
        MPI_Finalize();
        return 1;
    }
    int64_t want_spin = want_cpus >= local_size ? HVDC_SPIN_NS : 0;
    CHECK_T(hvdc__runtime->poll.spin_ns == want_spin, "spin budget %lld ns with %d ranks on %d CPUs, want %lld",
            (long long)hvdc__runtime->poll.spin_ns, local_size, want_cpus, (long long)want_spin);
    int64_t want_handoff = want_cpus >= 2 * local_size ? HVDC_SPIN_NS : 0;
    CHECK_T(hvdc__runtime->poll.handoff_spin_ns == want_handoff,
            "hand-off spin %lld ns with %d ranks on %d CPUs, want %lld",
            (long long)hvdc__runtime->poll.handoff_spin_ns, local_size, want_cpus, (long long)want_handoff);
#ifdef __GLIBC__ /* the lock's kind is glibc's to record */
    int want_kind = want_handoff ? PTHREAD_MUTEX_ADAPTIVE_NP : PTHREAD_MUTEX_TIMED_NP;
    int queue_kind = hvdc__runtime->queue_mutex.__data.__kind & 3;
    int completion_kind = hvdc__runtime->completion_mutex.__data.__kind & 3;
    CHECK_T(queue_kind == want_kind && completion_kind == want_kind,
            "lock kinds %d (queue) and %d (completion), want %d (%s)", queue_kind, completion_kind,
            want_kind, want_handoff ? "adaptive" : "plain");
#endif
    if (rank == 0)
        printf("%d ranks on a node with %d CPUs: background waits %s, hand-offs %s\n", local_size,
               want_cpus, want_spin ? "spin while the application waits" : "always yield",
               want_handoff ? "spin before sleeping" : "sleep at once");

    float *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
    for (int i = 0; i < COUNT; i++) in[i] = (float)((rank + 1) * (i % 97));
    if (size == 1) {
        printf("np 1: no rank to hold an op back, app_waiting not checked\n");
    } else if (rank == 0) {
        waiter w = {0};
        CHECK_T(hvd_allreduce_async("late", in, out, COUNT, HVD_FLOAT32, HVD_SUM, NULL, &w.handle) == HVD_OK,
                "hvd_allreduce_async: %s", hvd_last_error());
        pthread_t thread;
        pthread_create(&thread, NULL, wait_for_it, &w);
        int seen = 0;
        for (double until = hvdc__now_seconds() + 10; !seen && hvdc__now_seconds() < until;)
            if (atomic_load(&hvdc__runtime->poll.app_waiting) == 1) seen = 1;
            else sched_yield();
        CHECK_T(seen, "a thread blocked in hvd_wait for 10 s was never counted in app_waiting");
        MPI_Barrier(MPI_COMM_WORLD); /* now the others submit */
        pthread_join(thread, NULL);
        CHECK_T(w.status == HVD_OK, "hvd_wait: %s", hvd_last_error());
        CHECK_T(atomic_load(&hvdc__runtime->poll.app_waiting) == 0, "app_waiting %d after the wait returned",
                atomic_load(&hvdc__runtime->poll.app_waiting));
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        CHECK_T(hvd_allreduce("late", in, out, COUNT, HVD_FLOAT32, HVD_SUM) == HVD_OK, "hvd_allreduce: %s",
                hvd_last_error());
    }
    int bad = 0;
    if (size > 1) {
        for (int i = 0; i < COUNT; i++) bad += out[i] != (float)(size * (size + 1) / 2 * (i % 97));
        CHECK_T(bad == 0, "%d of %d sums wrong", bad, COUNT);
    }

    /* 4: every fourth all-reduce after a 2 ms pause, a hundred times any spin */
    int failed = 0;
    bad = 0;
    for (int k = 0; k < HANDOFFS && !failed; k++) {
        if (k % 4 == 3) {
            struct timespec pause = {0, 2000000L};
            nanosleep(&pause, NULL);
        }
        float x = (float)(rank + 1 + k % 5), sum = 0;
        failed = hvd_allreduce("handoff", &x, &sum, 1, HVD_FLOAT32, HVD_SUM) != HVD_OK;
        bad += !failed && sum != (float)(size * (size + 1) / 2 + size * (k % 5));
    }
    CHECK_T(!failed, "hand-off all-reduce: %s", hvd_last_error());
    CHECK_T(bad == 0, "%d of %d hand-off sums wrong", bad, HANDOFFS);

    free(in);
    free(out);
    hvd_shutdown();
    int total = rank_check_total(MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", total ? "FAIL" : "PASS");
    MPI_Finalize();
    return total ? 1 : 0;
}
