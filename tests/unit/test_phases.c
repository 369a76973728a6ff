/*
 * Unit test: the small-op latency breakdown's arithmetic (runtime/phases.h): each phase is the
 * span from its instant to the next one (the last one to the waiter's wake-up), added over
 * ops, a host op's device span 0 and a device op's the time it was on the device; a phase whose instant comes after the next one (a skipped phase: a device op completed
 * by its waiter, say) counts 0, never a huge unsigned span.
 */
#include <stdint.h>

#include "check.h"
#include "runtime/phases.h"

int main(void) {
    hvdc_phase_totals t = {0};
    /* a host op: submitted 100, taken 1100, answered 4100, completed 6100 (its on-device
     * instant is its completion), woke 9100 (ns) */
    const int64_t a[HVDC_N_PHASES] = {100, 1100, 4100, 6100, 6100};
    hvdc__phases_add(&t, a, 9100);
    /* a device op: queued on the device at 4200, its finish seen at 4500 */
    const int64_t b[HVDC_N_PHASES] = {0, 3000, 4000, 4200, 4500};
    hvdc__phases_add(&t, b, 10000);
    const unsigned long long want[HVDC_N_PHASES] = {1000 + 3000, 3000 + 1000, 2000 + 200,
                                                    0 + 300, 3000 + 5500};
    for (int p = 0; p < HVDC_N_PHASES; p++)
        CHECK_TRUE(t.ns[p] == want[p], "phase %d: %llu ns, want %llu", p,
                   (unsigned long long)t.ns[p], want[p]);
    CHECK_TRUE(t.ops == 2, "%llu ops, want 2", (unsigned long long)t.ops);
    /* answered before taken: negotiate counts 0, not 2^64 - 1000 */
    hvdc_phase_totals u = {0};
    const int64_t c[HVDC_N_PHASES] = {0, 5000, 4000, 6000, 6000};
    hvdc__phases_add(&u, c, 7000);
    CHECK_TRUE(u.ns[HVDC_PHASE_NEGOTIATE] == 0, "a negative span counted %llu ns",
               (unsigned long long)u.ns[HVDC_PHASE_NEGOTIATE]);
    CHECK_TRUE(u.ns[HVDC_PHASE_EXECUTE] == 2000, "execute %llu ns, want 2000",
               (unsigned long long)u.ns[HVDC_PHASE_EXECUTE]);
    CHECK_TRUE(u.ns[HVDC_PHASE_DEVICE] == 0 && u.ns[HVDC_PHASE_WAKE] == 1000,
               "device %llu ns, wake %llu ns, want 0 and 1000",
               (unsigned long long)u.ns[HVDC_PHASE_DEVICE],
               (unsigned long long)u.ns[HVDC_PHASE_WAKE]);
    return check_verdict("test_phases");
}
