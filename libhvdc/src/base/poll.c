/*
 * poll.c - a background wait's pause between two polls (see poll.h).
 * Any thread that waits; the policy's counter is shared with application threads.
 */
#include "base/poll.h"

#include <sched.h>

#include "base/clock.h"

hvdc_poll hvdc__poll_begin(const hvdc_poll_policy *policy) {
    hvdc_poll poll = {policy, 0};
    if (policy && policy->spin_ns > 0) poll.spin_until_ns = hvdc__now_ns() + policy->spin_ns;
    return poll;
}

int hvdc__poll_spins(const hvdc_poll *poll, int64_t now_ns) {
    const hvdc_poll_policy *policy = poll->policy;
    if (!policy || policy->spin_ns <= 0 || now_ns >= poll->spin_until_ns) return 0;
    return atomic_load_explicit(&policy->app_waiting, memory_order_relaxed) > 0;
}

void hvdc__poll_pause(const hvdc_poll *poll) {
    if (hvdc__poll_spins(poll, hvdc__now_ns())) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        return;
    }
    sched_yield();
}
