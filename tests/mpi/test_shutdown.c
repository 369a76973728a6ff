/*
 * test_shutdown.c - hvd_shutdown with operations still in flight (hvdc.h: "completes every
 * operation still in flight with HVD_ERR_SHUTDOWN"; "when one rank shuts down, the others'
 * pending and later operations fail with HVD_ERR_SHUTDOWN"). Nothing may hang or crash.
 *
 * Usage (np >= 2):
 *   test_shutdown inflight   each rank submits an allreduce under a name no other rank uses
 *                            (so it can never complete), a second thread blocks in hvd_wait on
 *                            it, and the main thread calls hvd_shutdown: the wait must return
 *                            HVD_ERR_SHUTDOWN.
 *   test_shutdown early      rank 0 shuts down at once; every other rank's pending allreduce
 *                            and its next one must fail with HVD_ERR_SHUTDOWN, and its own
 *                            hvd_shutdown must then succeed.
 * Threads: main, plus one waiter thread in "inflight".
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mpitest.h"

typedef struct waiter {
    mt_ctx *t;
    hvd_handle handle;   /* the waiter's own copy; main keeps another */
    hvd_status status;   /* what hvd_wait returned */
    atomic_int returned; /* 1 once hvd_wait has returned */
    char error[512];     /* the waiter's hvd_last_error() */
} waiter;

static void *wait_thread(void *arg) {
    waiter *w = arg;
    w->status = hvd_wait(&w->handle);
    snprintf(w->error, sizeof w->error, "%s", hvd_last_error());
    atomic_store(&w->returned, 1);
    return NULL;
}

static void inflight(mt_ctx *t) {
    int32_t x[4] = {1, 2, 3, 4};
    char name[32];
    snprintf(name, sizeof name, "orphan.%d", t->rank); /* unique to this rank */
    waiter w = {.t = t, .handle = HVD_HANDLE_NULL, .status = HVD_OK};
    atomic_init(&w.returned, 0);
    hvd_handle handle = HVD_HANDLE_NULL;
    mt_begin(t, "shutdown completes a blocked hvd_wait with HVD_ERR_SHUTDOWN");
    if (MT_EXPECT(t, hvd_allreduce_async(name, x, x, 4, HVD_INT32, HVD_SUM, NULL, &handle),
                  HVD_OK)) {
        pthread_t th;
        w.handle = handle;
        if (pthread_create(&th, NULL, wait_thread, &w) != 0) {
            mt_fail(t, __FILE__, __LINE__, "pthread_create failed");
        } else {
            MT_EXPECT(t, hvd_barrier(), HVD_OK); /* other ops still run beside the orphan */
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL); /* let the waiter block */
            int done = 1;
            MT_CHECK(t, !atomic_load(&w.returned),
                     "hvd_wait on '%s' returned before shutdown: %s: \"%s\"", name,
                     hvd_status_string(w.status), w.error);
            if (!atomic_load(&w.returned)) {
                MT_EXPECT(t, hvd_poll(handle, &done), HVD_OK);
                MT_CHECK(t, done == 0, "'%s' completed though no other rank submitted it", name);
            }
            /* shutdown is collective: no rank may start it before every rank has checked */
            MT_EXPECT(t, hvd_barrier(), HVD_OK);
            MT_EXPECT(t, hvd_shutdown(), HVD_OK);
            pthread_join(th, NULL);
            MT_CHECK(t, w.status == HVD_ERR_SHUTDOWN,
                     "the blocked hvd_wait returned %s (\"%s\"), expected HVD_ERR_SHUTDOWN",
                     hvd_status_string(w.status), w.error);
            MT_CHECK(t, x[0] == 1 && x[1] == 2 && x[2] == 3 && x[3] == 4,
                     "the orphan's buffer changed: %d %d %d %d", x[0], x[1], x[2], x[3]);
        }
    } else {
        hvd_shutdown();
    }
    mt_end(t);
}

static void early(mt_ctx *t) {
    mt_begin(t, "rank 0 shuts down first: others' pending and later ops fail with "
                "HVD_ERR_SHUTDOWN");
    MT_EXPECT(t, hvd_barrier(), HVD_OK);
    if (t->rank == 0) {
        MT_EXPECT(t, hvd_shutdown(), HVD_OK);
    } else {
        int32_t x[4] = {1, 2, 3, 4};
        hvd_handle h = HVD_HANDLE_NULL;
        if (MT_EXPECT(t, hvd_allreduce_async("lonely", x, x, 4, HVD_INT32, HVD_SUM, NULL, &h),
                      HVD_OK)) {
            hvd_status s = hvd_wait(&h);
            MT_EXPECT(t, s, HVD_ERR_SHUTDOWN);
        }
        hvd_status s = hvd_allreduce("later", x, x, 4, HVD_INT32, HVD_SUM);
        MT_EXPECT(t, s, HVD_ERR_SHUTDOWN);
        MT_EXPECT(t, hvd_shutdown(), HVD_OK);
    }
    mt_end(t);
}

int main(int argc, char **argv) {
    int is_inflight = argc > 1 && strcmp(argv[1], "inflight") == 0;
    int is_early = argc > 1 && strcmp(argv[1], "early") == 0;
    if (!is_inflight && !is_early) {
        fprintf(stderr, "usage: test_shutdown inflight|early   (under mpirun, np >= 2)\n");
        return 2;
    }
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    mt_ctx t;
    mt_init(&t, 0, 1);
    hvd_rank(&t.rank);
    hvd_size(&t.size);
    if (t.size < 2) {
        printf("test_shutdown needs 2 or more ranks\nFAIL\n");
        hvd_shutdown();
        return 1;
    }
    if (is_inflight) inflight(&t);
    else early(&t);
    /* the library is shut down: each rank's verdict is its own exit status */
    return mt_exit_code(&t);
}
