/*
 * Unit test: when a background wait spins and when it yields (base/poll.h). It spins only
 * under a policy with a spin budget, while an application thread is blocked waiting
 * (app_waiting > 0), and only until the budget from the wait's first pause runs out; without a
 * policy, with a zero budget or with nobody waiting it always yields, and then reads no clock.
 * A pause must return either way.
 * The hand-off spin (hvdc__spin_while_unchanged) returns 1 as soon as the counter moves, also
 * when another thread moves it mid-spin, and 0 once its budget is spent, not before; with no
 * budget it only looks.
 */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "base/clock.h"
#include "base/poll.h"
#include "check.h"

static atomic_ullong moved;

static void *move_later(void *arg) {
    (void)arg;
    struct timespec t = {0, 2000000L}; /* 2 ms into a spin of up to 10 s */
    nanosleep(&t, NULL);
    atomic_fetch_add(&moved, 1);
    return NULL;
}

static void test_handoff_spin(void) {
    atomic_init(&moved, 7);
    CHECK_TRUE(!hvdc__spin_while_unchanged(&moved, 7, 0), "no budget, unchanged: said changed");
    CHECK_TRUE(hvdc__spin_while_unchanged(&moved, 6, 0), "no budget, changed: said unchanged");
    CHECK_TRUE(hvdc__spin_while_unchanged(&moved, 6, 1000000000), "changed before the spin: said unchanged");

    int64_t budget = 200000, before = hvdc__now_ns();
    int changed = hvdc__spin_while_unchanged(&moved, 7, budget);
    int64_t spent = hvdc__now_ns() - before;
    CHECK_TRUE(!changed, "nothing moved the counter, yet the spin saw a change");
    CHECK_TRUE(spent >= budget, "the spin gave up after %lld ns of its %lld", (long long)spent, (long long)budget);

    pthread_t t;
    pthread_create(&t, NULL, move_later, NULL);
    before = hvdc__now_ns();
    changed = hvdc__spin_while_unchanged(&moved, 7, 10000000000LL);
    spent = hvdc__now_ns() - before;
    pthread_join(t, NULL);
    CHECK_TRUE(changed, "a counter moved by another thread mid-spin was not seen");
    CHECK_TRUE(spent < 5000000000LL, "the spin ran %lld ns past a change made after 2 ms", (long long)spent);
}

int main(void) {
    test_handoff_spin();
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
