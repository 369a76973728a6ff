/*
 * report.h - HVD_REPORT: rank 0 adds up what the job did over a period (rounds, operations,
 * bytes, time inside all-reduces, and who arrived last: negotiation/arrivals.h), then prints one
 * short block and keeps the figures for hvd_report_get. Off (HVD_REPORT=0), nothing is created
 * and the background thread pays one NULL test per round.
 * defines: hvdc_report, hvdc__report_create, _destroy, _attach, _round, _response, _tick, _copy
 * Create and destroy: the hvd_init/hvd_shutdown thread; then rank 0's background thread; _copy:
 * any thread.
 */
#ifndef HVDC_REPORT_H
#define HVDC_REPORT_H

#include "base/peers.h"
#include "hvdc.h"
#include "negotiation/arrivals.h"
#include "negotiation/cache.h"
#include "negotiation/wire.h"

typedef struct hvdc_report hvdc_report;

/* period_s > 0; peers: every rank's host. NULL: out of memory. */
hvdc_report *hvdc__report_create(double period_s, int size, const hvdc_peers *peers);
/* The negotiator's record of who arrives last (NULL: none), read and reset every period. */
void hvdc__report_attach(hvdc_report *report, hvdc_arrivals *arrivals);
void hvdc__report_destroy(hvdc_report *report); /* NULL-safe */

void hvdc__report_round(hvdc_report *report);

/* A response ran: its tensors (names from r, slots resolved through cache), their bytes if an
 * all-reduce, and the seconds it took (host work; 0 for device work, which runs on). */
void hvdc__report_response(hvdc_report *report, const hvdc_wire_response *r,
                           const hvdc_cache *cache, size_t tensors, uint64_t bytes,
                           double seconds);

/* Ends the period if it is over: prints the block, keeps the figures. */
void hvdc__report_tick(hvdc_report *report, double now);

/* The last period's figures (zeros before the first). NULL report: zeros. */
void hvdc__report_copy(hvdc_report *report, hvd_report *out);

#endif
