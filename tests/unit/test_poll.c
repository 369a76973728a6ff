/*
 * Unit test: when a background wait spins and when it yields (base/poll.h). It spins only
 * under a policy with a spin budget, while an application thread is blocked waiting
 * (app_waiting > 0), and only until the budget from the wait's first pause runs out; without a
 * policy, with a zero budget or with nobody waiting it always yields, and then reads no clock.
 * A pause must return either way.
 * The hand-off spin (hvdc__spin_unlocked) lets go of the mutex while it spins, so another
 * thread can take it and move the counter, and then returns 1; with nothing moved it returns 0
 * once its budget is spent, not before; with no budget at once. It returns holding the mutex.
 * A burst's gathering (hvdc__spin_until_quiet) lets go of the mutex too, waits out a burst of
 * moves that come closer together than its quiet time, stops at its budget under a burst that
 * never pauses, returns after the quiet time when nothing moves, and at once with no budget.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "base/clock.h"
#include "base/poll.h"
#include "check.h"

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_ullong moved;

/* What a completing thread does: the change and its count under the mutex. */
static void *move_later(void *arg) {
    (void)arg;
    struct timespec t = {0, 2000000L}; /* 2 ms into a spin of up to 10 s */
    nanosleep(&t, NULL);
    pthread_mutex_lock(&mutex);
    atomic_fetch_add(&moved, 1);
    pthread_mutex_unlock(&mutex);
    return NULL;
}

/* Whether this thread holds the (default, non-recursive) mutex. */
static int held_here(void) { return pthread_mutex_trylock(&mutex) == EBUSY; }

static void test_handoff_spin(void) {
    atomic_init(&moved, 7);
    pthread_mutex_lock(&mutex);
    CHECK_TRUE(!hvdc__spin_unlocked(&mutex, &moved, 0), "no budget: said changed");
    CHECK_TRUE(held_here(), "no budget: returned without the mutex");

    int64_t budget = 200000, before = hvdc__now_ns();
    int changed = hvdc__spin_unlocked(&mutex, &moved, budget);
    int64_t spent = hvdc__now_ns() - before;
    CHECK_TRUE(!changed, "nothing moved the counter, yet the spin saw a change");
    CHECK_TRUE(spent >= budget, "the spin gave up after %lld ns of its %lld", (long long)spent, (long long)budget);
    CHECK_TRUE(held_here(), "returned without the mutex after spending the budget");

    /* the other thread needs the mutex to move the counter: the spin must have let it go */
    pthread_t t;
    pthread_create(&t, NULL, move_later, NULL);
    changed = hvdc__spin_unlocked(&mutex, &moved, 10000000000LL);
    CHECK_TRUE(changed, "a counter moved by another thread mid-spin was not seen");
    CHECK_TRUE(held_here(), "returned without the mutex after a change");
    pthread_mutex_unlock(&mutex);
    pthread_join(t, NULL);
    CHECK_TRUE(atomic_load(&moved) == 8, "counter %llu, want 8", atomic_load(&moved));
}

/* A burst: the counter moved (under the mutex) every millisecond, n times, or until stop. */
typedef struct burst {
    int n;
    atomic_int stop;
} burst;

static void *move_burst(void *arg) {
    burst *b = arg;
    for (int i = 0; (b->n < 0 || i < b->n) && !atomic_load(&b->stop); i++) {
        struct timespec t = {0, 1000000L};
        nanosleep(&t, NULL);
        pthread_mutex_lock(&mutex);
        atomic_fetch_add(&moved, 1);
        pthread_mutex_unlock(&mutex);
    }
    return NULL;
}

static void test_burst_gather(void) {
    const int64_t ms = 1000000;
    atomic_init(&moved, 0);
    pthread_mutex_lock(&mutex);
    int64_t before = hvdc__now_ns();
    hvdc__spin_until_quiet(&mutex, &moved, 50 * ms, 0);
    CHECK_TRUE(hvdc__now_ns() - before < 50 * ms, "no budget: waited for quiet");
    CHECK_TRUE(held_here(), "no budget: returned without the mutex");

    before = hvdc__now_ns();
    hvdc__spin_until_quiet(&mutex, &moved, 5 * ms, 10000 * ms);
    int64_t spent = hvdc__now_ns() - before;
    CHECK_TRUE(spent >= 5 * ms && spent < 5000 * ms, "nothing moved: returned after %lld ns, "
               "want the quiet time (5 ms)", (long long)spent);
    CHECK_TRUE(held_here(), "returned without the mutex after a quiet time");

    /* ten moves 1 ms apart, far closer than the 500 ms quiet time (room for a loaded machine's
     * scheduling): the gathering outlasts them all (each move needs the mutex, so the spin
     * must have let it go) */
    burst ten = {10, 0};
    pthread_t t;
    pthread_create(&t, NULL, move_burst, &ten);
    hvdc__spin_until_quiet(&mutex, &moved, 500 * ms, 10000 * ms);
    CHECK_TRUE(atomic_load(&moved) == 10, "returned mid-burst: %llu of 10 moves seen",
               atomic_load(&moved));
    CHECK_TRUE(held_here(), "returned without the mutex after a burst");
    pthread_mutex_unlock(&mutex);
    pthread_join(t, NULL);

    /* a burst that never pauses: the budget ends the gathering */
    burst endless = {-1, 0};
    pthread_create(&t, NULL, move_burst, &endless);
    pthread_mutex_lock(&mutex);
    before = hvdc__now_ns();
    hvdc__spin_until_quiet(&mutex, &moved, 50 * ms, 20 * ms);
    spent = hvdc__now_ns() - before;
    CHECK_TRUE(spent >= 20 * ms, "gave up after %lld ns of a 20 ms budget", (long long)spent);
    CHECK_TRUE(held_here(), "returned without the mutex at the budget");
    pthread_mutex_unlock(&mutex);
    atomic_store(&endless.stop, 1);
    pthread_join(t, NULL);
}

int main(void) {
    test_handoff_spin();
    test_burst_gather();
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
