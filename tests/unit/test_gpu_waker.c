/*
 * Unit test: the GPU backend's waker (gpu/gpu_waker.h), driven by hand as CUDA's host functions
 * would drive it: every fire before close wakes, none after; the waker outlives close while
 * host functions still hold it, and the last release frees it (the sanitizer stage checks
 * that nothing leaks); fires from several threads racing a close never wake after close.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "gpu/gpu_waker.h"

static atomic_int wakes, closed_flag, late_wakes;

static void wake(void *ctx) {
    (void)ctx;
    atomic_fetch_add(&wakes, 1);
    if (atomic_load(&closed_flag)) atomic_fetch_add(&late_wakes, 1);
}

static void *fire_many(void *w) {
    for (int i = 0; i < 1000; i++) hvdc__gpu_waker_fire(w);
    return NULL;
}

int main(void) {
    hvdc_gpu_waker *w = hvdc__gpu_waker_create(wake, NULL);
    CHECK_TRUE(w != NULL, "created");
    hvdc__gpu_waker_hold(w);
    hvdc__gpu_waker_hold(w);
    hvdc__gpu_waker_fire(w); /* a host function ran */
    CHECK_TRUE(atomic_load(&wakes) == 1, "one wake, got %d", atomic_load(&wakes));
    hvdc__gpu_waker_close(w); /* the backend is gone; one host function is still queued */
    atomic_store(&closed_flag, 1);
    hvdc__gpu_waker_fire(w); /* runs late: no wake, and it frees the waker */
    CHECK_TRUE(atomic_load(&wakes) == 1, "no wake after close, got %d", atomic_load(&wakes));

    /* NULL-safe, and a NULL wake function */
    hvdc__gpu_waker_hold(NULL);
    hvdc__gpu_waker_fire(NULL);
    hvdc__gpu_waker_close(NULL);
    hvdc_gpu_waker *quiet = hvdc__gpu_waker_create(NULL, NULL);
    hvdc__gpu_waker_hold(quiet);
    hvdc__gpu_waker_fire(quiet);
    hvdc__gpu_waker_close(quiet);

    /* 4 threads fire 1000 held references each while the creator closes */
    atomic_store(&wakes, 0);
    atomic_store(&closed_flag, 0);
    hvdc_gpu_waker *r = hvdc__gpu_waker_create(wake, NULL);
    for (int i = 0; i < 4000; i++) hvdc__gpu_waker_hold(r);
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, fire_many, r);
    hvdc__gpu_waker_close(r);
    atomic_store(&closed_flag, 1); /* every wake counted after this is a late one */
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    CHECK_TRUE(atomic_load(&late_wakes) == 0, "%d wakes after close returned",
               atomic_load(&late_wakes));
    CHECK_TRUE(atomic_load(&wakes) <= 4000, "at most one wake per fire");
    return check_verdict("test_gpu_waker");
}
