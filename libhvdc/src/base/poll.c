/*
 * poll.c - a background wait's pause between two polls, and a hand-off's spin (see poll.h).
 * Any thread that waits; the policy's counter is shared with application threads.
 */
#include "base/poll.h"

#include <sched.h>

#include "base/clock.h"

int hvdc__poll_spins(const hvdc_poll *poll, int64_t now_ns) {
    const hvdc_poll_policy *policy = poll->policy;
    if (!policy || policy->spin_ns <= 0 || now_ns >= poll->spin_until_ns) return 0;
    return atomic_load_explicit(&policy->app_waiting, memory_order_relaxed) > 0;
}

void hvdc__poll_pause(hvdc_poll *poll) {
    if (poll->policy && poll->policy->spin_ns > 0) { /* no clock read where it never spins */
        int64_t now = hvdc__now_ns();
        if (poll->spin_until_ns == 0) poll->spin_until_ns = now + poll->policy->spin_ns;
        if (hvdc__poll_spins(poll, now)) {
            hvdc__cpu_relax();
            return;
        }
    }
    sched_yield();
}

int hvdc__spin_unlocked(pthread_mutex_t *mutex, const atomic_ullong *seq, int64_t budget_ns) {
    if (budget_ns <= 0) return 0;
    unsigned long long seen = atomic_load_explicit(seq, memory_order_relaxed);
    pthread_mutex_unlock(mutex);
    int64_t until = hvdc__now_ns() + budget_ns;
    for (unsigned spins = 1; atomic_load_explicit(seq, memory_order_relaxed) == seen; spins++) {
        if (spins % 64 == 0 && hvdc__now_ns() >= until) break; /* a clock read per 64 */
        hvdc__cpu_relax();
    }
    pthread_mutex_lock(mutex);
    return atomic_load_explicit(seq, memory_order_relaxed) != seen; /* counted under mutex */
}

void hvdc__spin_until_quiet(pthread_mutex_t *mutex, const atomic_ullong *seq, int64_t quiet_ns,
                            int64_t budget_ns) {
    if (budget_ns <= 0) return;
    unsigned long long seen = atomic_load_explicit(seq, memory_order_relaxed);
    pthread_mutex_unlock(mutex);
    int64_t now = hvdc__now_ns(), until = now + budget_ns, quiet_until = now + quiet_ns;
    for (unsigned spins = 1;; spins++) {
        unsigned long long at = atomic_load_explicit(seq, memory_order_relaxed);
        if (at != seen || spins % 16 == 0) { /* a clock read per 16 polls, or per change */
            now = hvdc__now_ns();
            if (at != seen) {
                seen = at;
                quiet_until = now + quiet_ns;
            }
            if (now >= until || now >= quiet_until) break;
        }
        hvdc__cpu_relax();
    }
    pthread_mutex_lock(mutex);
}
