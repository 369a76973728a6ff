/*
 * test_threads.c - several user threads per rank submit at once.
 *
 * Part 1: 4 threads per rank each submit 250 small async allreduces (names "t<thread>.<i>",
 *         dtypes and ops cycling, 1 to 40 elements), released together by a barrier, then
 *         each waits for its own 250 and checks them: 1000 operations in flight per rank.
 *         Three rounds, reusing the names.
 * Part 2: the same 4 threads each run 40 blocking allreduces concurrently.
 * Part 3: hvd_last_error is per thread: a thread's failed call does not change what another
 *         thread sees, and a thread that never failed sees "".
 * Threads: main starts and joins the workers; workers call only libhvdc and mt_* helpers.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

#define N_THREADS 4
#define N_ASYNC 250
#define N_BLOCKING 40
#define MAX_COUNT 40

typedef struct worker {
    mt_ctx *t;
    int id;
    pthread_barrier_t *start; /* all threads submit at once */
} worker;

static void case_of(int id, int i, hvd_dtype *dt, hvd_reduce_op *op, size_t *count) {
    *dt = mt_all_dtypes[(i + id) % HVD_DTYPE_COUNT];
    *op = mt_defined_op(*dt, mt_all_ops[(i / HVD_DTYPE_COUNT + id) % HVD_REDUCE_OP_COUNT]);
    *count = 1 + (size_t)((i * 13 + id * 7) % MAX_COUNT);
}

static void check_one(mt_ctx *t, const char *name, const void *got, hvd_dtype dt,
                      hvd_reduce_op op, size_t count, uint64_t salt) {
    unsigned char ref[MAX_COUNT * 8];
    mt_reduce_ref(ref, dt, op, t->size, 0, count, salt, 1.0, 1.0);
    mt_compare(t, got, ref, dt, count, mt_is_float(dt) && op == HVD_AVERAGE, name);
}

static void *async_worker(void *arg) {
    worker *w = arg;
    mt_ctx *t = w->t;
    static unsigned char bufs[N_THREADS][N_ASYNC][MAX_COUNT * 8];
    hvd_handle handles[N_ASYNC];
    char name[32];
    for (int i = 0; i < N_ASYNC; i++) {
        hvd_dtype dt; hvd_reduce_op op; size_t count;
        case_of(w->id, i, &dt, &op, &count);
        snprintf(name, sizeof name, "t%d.%d", w->id, i);
        mt_fill(bufs[w->id][i], dt, op, t->rank, 0, count, mt_hash((uint64_t)w->id, (uint64_t)i, 5));
        handles[i] = HVD_HANDLE_NULL;
    }
    pthread_barrier_wait(w->start);
    for (int i = 0; i < N_ASYNC; i++) {
        hvd_dtype dt; hvd_reduce_op op; size_t count;
        case_of(w->id, i, &dt, &op, &count);
        snprintf(name, sizeof name, "t%d.%d", w->id, i);
        MT_EXPECT(t, hvd_allreduce_async(name, bufs[w->id][i], bufs[w->id][i], count, dt, op,
                                         NULL, &handles[i]),
                  HVD_OK);
    }
    for (int i = 0; i < N_ASYNC; i++) {
        hvd_dtype dt; hvd_reduce_op op; size_t count;
        case_of(w->id, i, &dt, &op, &count);
        snprintf(name, sizeof name, "t%d.%d", w->id, i);
        if (handles[i] == HVD_HANDLE_NULL) continue;
        if (MT_EXPECT(t, hvd_wait(&handles[i]), HVD_OK))
            check_one(t, name, bufs[w->id][i], dt, op, count,
                      mt_hash((uint64_t)w->id, (uint64_t)i, 5));
    }
    return NULL;
}

static void *blocking_worker(void *arg) {
    worker *w = arg;
    mt_ctx *t = w->t;
    unsigned char send[MAX_COUNT * 8], recv[MAX_COUNT * 8];
    char name[32];
    pthread_barrier_wait(w->start);
    for (int i = 0; i < N_BLOCKING; i++) {
        hvd_dtype dt; hvd_reduce_op op; size_t count;
        case_of(w->id, i + 1000, &dt, &op, &count);
        snprintf(name, sizeof name, "b%d.%d", w->id, i);
        uint64_t salt = mt_hash((uint64_t)w->id, (uint64_t)i, 6);
        mt_fill(send, dt, op, t->rank, 0, count, salt);
        if (MT_EXPECT(t, hvd_allreduce(name, send, recv, count, dt, op), HVD_OK))
            check_one(t, name, recv, dt, op, count, salt);
    }
    return NULL;
}

/* Part 3: thread 0 fails a call; the others must still see "" afterwards. */
typedef struct err_worker {
    mt_ctx *t;
    int id;
    pthread_barrier_t *step;
} err_worker;

static void *error_worker(void *arg) {
    err_worker *w = arg;
    mt_ctx *t = w->t;
    const char *e = hvd_last_error();
    MT_CHECK(t, e && e[0] == '\0', "thread %d: fresh thread sees last error \"%s\"", w->id,
             e ? e : "(null)");
    pthread_barrier_wait(w->step);
    if (w->id == 0) {
        int x = 0;
        MT_EXPECT(t, hvd_allreduce("", &x, &x, 1, HVD_INT32, HVD_SUM), HVD_ERR_INVALID_ARG);
        e = hvd_last_error();
        MT_CHECK(t, e && e[0] != '\0', "thread 0: empty last error after a failed call");
    }
    pthread_barrier_wait(w->step);
    if (w->id != 0) {
        e = hvd_last_error();
        MT_CHECK(t, e && e[0] == '\0', "thread %d sees another thread's error \"%s\"", w->id,
                 e ? e : "(null)");
    }
    return NULL;
}

static void run_workers(mt_ctx *t, void *(*fn)(void *)) {
    pthread_t th[N_THREADS];
    worker w[N_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){t, i, &start};
        if (pthread_create(&th[i], NULL, fn, &w[i]) != 0) abort();
    }
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
}

int main(void) {
    mt_ctx t;
    if (mt_start(&t) != 0) return 1;
    int rank = t.rank, size = t.size;
    if (rank == 0) printf("# test_threads: %d ranks x %d threads\n", size, N_THREADS);

    double t0 = mt_now();
    for (int round = 0; round < 3; round++) {
        mt_begin(&t, "threads round %d: %d threads x %d async allreduces in flight at once",
                 round, N_THREADS, N_ASYNC);
        run_workers(&t, async_worker);
        mt_end(&t);
    }
    if (rank == 0) printf("# async part: %.2f s\n", mt_now() - t0);

    t0 = mt_now();
    mt_begin(&t, "threads: %d threads x %d blocking allreduces concurrently", N_THREADS,
             N_BLOCKING);
    run_workers(&t, blocking_worker);
    mt_end(&t);
    if (rank == 0) printf("# blocking part: %.2f s\n", mt_now() - t0);

    mt_begin(&t, "threads: hvd_last_error is per thread");
    {
        pthread_t th[N_THREADS];
        err_worker w[N_THREADS];
        pthread_barrier_t step;
        pthread_barrier_init(&step, NULL, N_THREADS);
        for (int i = 0; i < N_THREADS; i++) {
            w[i] = (err_worker){&t, i, &step};
            if (pthread_create(&th[i], NULL, error_worker, &w[i]) != 0) abort();
        }
        for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&step);
    }
    mt_end(&t);

    mt_combine(&t);
    hvd_status s = hvd_shutdown();
    if (s != HVD_OK) {
        printf("[rank %d] hvd_shutdown failed: %s: %s\n", rank, hvd_status_string(s),
               hvd_last_error());
        atomic_fetch_add(&t.failures, 1);
    }
    return mt_exit_code(&t);
}
