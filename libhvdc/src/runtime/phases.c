/*
 * phases.c - the totals behind the small-op latency breakdown (phases.h).
 * Any thread; the totals under their runtime's completion_mutex.
 */
#include "runtime/phases.h"

#include "runtime/runtime.h"

void hvdc__phases_add(hvdc_phase_totals *t, const int64_t at[HVDC_N_PHASES], int64_t woke_ns) {
    for (int p = 0; p < HVDC_N_PHASES; p++) {
        int64_t until = p + 1 < HVDC_N_PHASES ? at[p + 1] : woke_ns;
        int64_t span = until > at[p] ? until - at[p] : 0; /* a phase skipped reads 0 */
        t->ns[p] += (uint64_t)span;
    }
    t->ops++;
}

const char *hvdc__phase_name(hvdc_phase p) {
    static const char *const names[HVDC_N_PHASES] = {"queued", "negotiate", "execute", "device",
                                                     "wake"};
    return p >= 0 && p < HVDC_N_PHASES ? names[p] : "?";
}

hvd_status hvdc__phase_breakdown(int device, double mean_us[HVDC_N_PHASES], uint64_t *ops) {
    hvd_status st = hvdc__enter("hvdc__phase_breakdown");
    if (st != HVD_OK) return st;
    hvdc_runtime *rt = hvdc__runtime;
    pthread_mutex_lock(&rt->completion_mutex);
    hvdc_phase_totals *t = device ? &rt->device_phases : &rt->phases;
    *ops = t->ops;
    for (int p = 0; p < HVDC_N_PHASES; p++)
        mean_us[p] = *ops ? (double)t->ns[p] * 1e-3 / (double)*ops : 0;
    *t = (hvdc_phase_totals){0};
    pthread_mutex_unlock(&rt->completion_mutex);
    hvdc__leave();
    return HVD_OK;
}
