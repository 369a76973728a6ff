/*
 * arrivals.h - who arrives last (rank 0): for every name that becomes ready, the rank whose
 * announcement completed it, how long after the one before it (its lateness: what everyone else
 * waited for that rank alone) and how long after the first (the others' whole wait). Rank 0
 * sees every announcement arrive, so no clocks are compared across ranks; it stamps them when
 * it takes them, so a time is as exact as rank 0's attention (a round it is in: at once; while
 * it computes with nothing in flight: at its next look, exchange.c).
 * The report (runtime/report.h) reads and resets it every period.
 * defines: hvdc_arrivals, hvdc__arrivals_create, _destroy, _note, _summary, _reset,
 *          hvdc_arrival_summary
 * Rank 0's background thread.
 */
#ifndef HVDC_ARRIVALS_H
#define HVDC_ARRIVALS_H

#include <stdint.h>

typedef struct hvdc_arrivals hvdc_arrivals;

typedef struct hvdc_arrival_summary {
    uint64_t names;         /* names that became ready since the last reset */
    int last_rank;          /* the rank that completed most of them (-1: none) */
    uint64_t last_count;    /* how many it completed */
    double last_median_s;   /* its median lateness */
    double wait_median_s;   /* median wait of a name, first announcement to last */
} hvdc_arrival_summary;

hvdc_arrivals *hvdc__arrivals_create(int size); /* NULL: out of memory */
void hvdc__arrivals_destroy(hvdc_arrivals *arrivals); /* NULL-safe */

/* A name became ready: rank's announcement completed it, lateness_s after the one before and
 * wait_s after the first. */
void hvdc__arrivals_note(hvdc_arrivals *arrivals, int rank, double lateness_s, double wait_s);

/* What was noted since the last reset (medians over the last samples kept). */
void hvdc__arrivals_summary(hvdc_arrivals *arrivals, hvdc_arrival_summary *out);
void hvdc__arrivals_reset(hvdc_arrivals *arrivals);

#endif
