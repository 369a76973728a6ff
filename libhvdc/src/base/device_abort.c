/*
 * device_abort.c - this process's aborted GPU communicators (see device_abort.h). A lock, not
 * atomics: several backends may note at once, and nothing here is on a hot path.
 * Any thread.
 */
#include "base/device_abort.h"

#include <pthread.h>
#include <stdio.h>

#include "base/status.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int aborted;
static char first_why[256];

void hvdc__device_abort_note(const char *why) {
    pthread_mutex_lock(&lock);
    if (!aborted) snprintf(first_why, sizeof first_why, "%s", why ? why : "no reason given");
    aborted = 1;
    pthread_mutex_unlock(&lock);
}

void hvdc__device_abort_reset(void) {
    pthread_mutex_lock(&lock);
    aborted = 0;
    first_why[0] = '\0';
    pthread_mutex_unlock(&lock);
}

hvd_status hvdc__device_results_trusted(const char *fn) {
    char why[sizeof first_why];
    pthread_mutex_lock(&lock);
    int was_aborted = aborted;
    snprintf(why, sizeof why, "%s", first_why);
    pthread_mutex_unlock(&lock);
    if (!was_aborted) return HVD_OK;
    return hvdc__fail(HVD_ERR_NCCL, "%s: nothing written: device results may be wrong (%s): an "
                      "aborted collective ends early with partial sums, and work queued behind "
                      "it on a stream (the optimizer's update) used them", fn, why);
}
