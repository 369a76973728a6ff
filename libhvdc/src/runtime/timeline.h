/*
 * timeline.h - a Chrome-trace / Perfetto JSON record of what the runtime did (HVD_TIMELINE).
 *
 * One row per tensor name, with its phases as complete events: QUEUED (submitted, not yet
 * picked up), NEGOTIATE (announced, in the round that answered it), WAIT_FOR_RANKS (announced,
 * other ranks had not submitted it yet), PACK / ALLREDUCE / UNPACK (or the collective's name)
 * while executing; events of one fused response carry the same "group" argument. With
 * HVD_TIMELINE_MARK_CYCLES=1, every negotiation round is an instant event.
 *
 * The file stays valid JSON at every moment: each flush rewrites the closing bracket after the
 * new events in one write, so a job that ends early or is killed leaves a loadable file.
 * Events are buffered in memory; a writer thread does the file I/O, off the background thread.
 *
 * defines: hvdc_timeline, hvdc__timeline_open, _close, _now_us, _span, _instant, hvdc__timeline_row
 * The background thread records; the writer thread writes; open/close on the hvd_init thread.
 */
#ifndef HVDC_TIMELINE_H
#define HVDC_TIMELINE_H

#include <stdint.h>

#include "hvdc.h"

typedef struct hvdc_timeline hvdc_timeline;

/* Opens path for writing (replacing it). @return HVD_OK or HVD_ERR_CONFIG naming the path. */
hvd_status hvdc__timeline_open(const char *path, int rank, int mark_cycles, hvdc_timeline **out);
/* Flushes, stops the writer, closes the file. NULL-safe. */
void hvdc__timeline_close(hvdc_timeline *timeline);

/* Microseconds since the timeline opened (0 when timeline is NULL). */
int64_t hvdc__timeline_now_us(const hvdc_timeline *timeline);

/* The row of name: created on first use with a label. Returns -1 when timeline is NULL. */
int hvdc__timeline_row(hvdc_timeline *timeline, const char *name);

/* A phase on a tensor's row from start_us to end_us; group >= 0 ties a fused response's events. */
void hvdc__timeline_span(hvdc_timeline *timeline, const char *name, const char *phase,
                         int64_t start_us, int64_t end_us, int64_t group);

/* A global instant event (a negotiation round) if mark_cycles was asked for. */
void hvdc__timeline_cycle(hvdc_timeline *timeline, int64_t at_us, uint64_t round);

#endif
