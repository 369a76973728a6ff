/*
 * clock.h - time on the monotonic clock, for timeouts, stall checks, liveness periods and the
 * timeline (never the wall clock, which can jump); and the wall-clock deadlines that
 * pthread_cond_timedwait and pthread_timedjoin_np take.
 * defines: hvdc__now_seconds, hvdc__now_us, hvdc__now_ns, hvdc__deadline_in
 * Any thread.
 */
#ifndef HVDC_CLOCK_H
#define HVDC_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Seconds since an arbitrary fixed origin. */
static inline double hvdc__now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Microseconds since the same origin. */
static inline int64_t hvdc__now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* Nanoseconds since the same origin. */
static inline int64_t hvdc__now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The absolute CLOCK_REALTIME time `seconds` from now, for pthread_cond_timedwait. */
static inline struct timespec hvdc__deadline_in(double seconds) {
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    long long ns = at.tv_nsec + (long long)(seconds * 1e9);
    at.tv_sec += (time_t)(ns / 1000000000);
    at.tv_nsec = (long)(ns % 1000000000);
    return at;
}

#endif
