/*
 * Unit test: when a background wait spins and when it yields (base/poll.h). It spins only
 * under a policy with a spin budget, while an application thread is blocked waiting
 * (app_waiting > 0), and only until the budget from the wait's first pause runs out; without a
 * policy, with a zero budget or with nobody waiting it always yields, and then reads no clock.
 * A pause must return either way.
 */
#include <stdint.h>

#include "base/clock.h"
#include "base/poll.h"
#include "check.h"

int main(void) {
    hvdc_poll_policy policy = {.spin_ns = 20000};
    atomic_init(&policy.app_waiting, 0);

    hvdc_poll none = hvdc__poll_begin(NULL);
    CHECK_TRUE(!hvdc__poll_spins(&none, hvdc__now_ns()), "no policy: spun");
    hvdc__poll_pause(&none);
    CHECK_TRUE(none.spin_until_ns == 0, "no policy: a deadline was set");

    /* the budget runs from the wait's first pause (a wait that never pauses reads no clock) */
    hvdc_poll poll = hvdc__poll_begin(&policy);
    CHECK_TRUE(poll.spin_until_ns == 0, "hvdc__poll_begin set a deadline");
    int64_t before = hvdc__now_ns();
    hvdc__poll_pause(&poll); /* nobody waits: yields, but the budget starts */
    int64_t after = hvdc__now_ns();
    CHECK_TRUE(poll.spin_until_ns >= before + policy.spin_ns && poll.spin_until_ns <= after + policy.spin_ns,
               "the budget runs from the first pause: until %lld, paused in [%lld, %lld]",
               (long long)poll.spin_until_ns, (long long)before, (long long)after);
    int64_t deadline = poll.spin_until_ns;
    hvdc__poll_pause(&poll);
    CHECK_TRUE(poll.spin_until_ns == deadline, "a later pause moved the deadline");
    int64_t start = deadline - policy.spin_ns;
    CHECK_TRUE(!hvdc__poll_spins(&poll, start), "nobody waiting: spun");

    atomic_store(&policy.app_waiting, 1);
    CHECK_TRUE(hvdc__poll_spins(&poll, start), "an application thread waits: did not spin");
    CHECK_TRUE(hvdc__poll_spins(&poll, poll.spin_until_ns - 1), "did not spin to the end of the budget");
    CHECK_TRUE(!hvdc__poll_spins(&poll, poll.spin_until_ns), "spun past the budget");
    atomic_store(&policy.app_waiting, 2);
    CHECK_TRUE(hvdc__poll_spins(&poll, start), "two application threads wait: did not spin");
    atomic_store(&policy.app_waiting, 0);
    CHECK_TRUE(!hvdc__poll_spins(&poll, start), "spun after the waiter left");

    /* more ranks than CPUs: hvd_init sets no budget, and then nothing spins */
    hvdc_poll_policy crowded = {.spin_ns = 0};
    atomic_init(&crowded.app_waiting, 1);
    hvdc_poll never = hvdc__poll_begin(&crowded);
    CHECK_TRUE(!hvdc__poll_spins(&never, hvdc__now_ns()), "zero budget: spun");
    hvdc__poll_pause(&never);
    CHECK_TRUE(never.spin_until_ns == 0, "zero budget: a deadline was set (a clock read per pause)");

    /* a pause that spins returns too */
    atomic_store(&policy.app_waiting, 1);
    hvdc_poll fresh = hvdc__poll_begin(&policy);
    hvdc__poll_pause(&fresh);
    return check_verdict("test_poll");
}
