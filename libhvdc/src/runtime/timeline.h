/*
 * timeline.h - a Chrome-trace / Perfetto JSON record of what the runtime did (HVD_TIMELINE).
 *
 * Rank 0 keeps one timeline object for the runtime's life; it records only between start and
 * stop (HVD_TIMELINE starts it at init, hvd_start_timeline / hvd_stop_timeline at run time),
 * each start into a new file.
 *
 * One row per tensor name, with its phases as complete events: QUEUED (submitted, not yet
 * picked up), NEGOTIATE (announced, in the round that answered it), WAIT_FOR_RANKS (announced,
 * other ranks had not submitted it yet), PACK / ALLREDUCE / UNPACK (or the collective's name)
 * while executing; events of one fused response carry the same "group" argument, and the
 * waits name the rank the response waited for last ("last_rank"). With
 * HVD_TIMELINE_MARK_CYCLES=1, every negotiation round is an instant event.
 *
 * The file stays valid JSON at every moment: each flush rewrites the closing bracket after the
 * new events in one write, so a job that ends early or is killed leaves a loadable file.
 * Events are buffered in memory; a writer thread does the file I/O, off the background thread.
 *
 * defines: hvdc_timeline, hvdc__timeline_open, _close, _start, _stop, _now_us, _us_at, _span,
 *          _wait_span, _recording, _cycle
 * The background thread records; the writer thread writes; open/close on the hvd_init thread;
 * start/stop on any user thread (serialized by the timeline's own lock).
 */
#ifndef HVDC_TIMELINE_H
#define HVDC_TIMELINE_H

#include <stdint.h>

#include "hvdc.h"

typedef struct hvdc_timeline hvdc_timeline;

/* Creates rank's timeline; with a non-empty path it starts recording there at once (HVD_TIMELINE).
 * @return HVD_OK, HVD_ERR_NO_MEMORY, or HVD_ERR_CONFIG naming the path and HVD_TIMELINE. */
hvd_status hvdc__timeline_open(const char *path, int rank, int mark_cycles, hvdc_timeline **out);
/* Stops recording (the file ends valid) and frees the timeline. NULL-safe. */
void hvdc__timeline_close(hvdc_timeline *timeline);

/* Starts recording into path (replaced). @return HVD_OK; HVD_ERR_INVALID_ARG when already
 * recording (naming that file) or when path cannot be written (naming it and the error). */
hvd_status hvdc__timeline_start(hvdc_timeline *timeline, const char *path, int mark_cycles);
/* Stops recording: every event so far is written and the file closed, as valid JSON, when it
 * returns. Does nothing when not recording. */
void hvdc__timeline_stop(hvdc_timeline *timeline);

/* Microseconds since the timeline was created (0 when timeline is NULL). */
int64_t hvdc__timeline_now_us(const hvdc_timeline *timeline);
/* The same for a moment taken earlier with hvdc__now_ns (base/clock.h). */
int64_t hvdc__timeline_us_at(const hvdc_timeline *timeline, int64_t now_ns);

/* A phase on a tensor's row from start_us to end_us; group >= 0 ties a fused response's events.
 * Rows are labelled with the tensor name on first use in each file. No-op unless recording. */
void hvdc__timeline_span(hvdc_timeline *timeline, const char *name, const char *phase,
                         int64_t start_us, int64_t end_us, int64_t group);

/* The same for a wait for other ranks (WAIT_FOR_RANKS, NEGOTIATE): its args name the rank whose
 * announcement ended it, last_rank (none when -1). */
void hvdc__timeline_wait_span(hvdc_timeline *timeline, const char *name, const char *phase,
                              int64_t start_us, int64_t end_us, int64_t group, int last_rank);

/* Whether timeline (NULL-safe) records now: a caller with many spans to give skips them all
 * when it does not (a hint: recording may start or stop meanwhile, and spans check again). */
int hvdc__timeline_recording(const hvdc_timeline *timeline);

/* A global instant event (a negotiation round) if mark_cycles was asked for. */
void hvdc__timeline_cycle(hvdc_timeline *timeline, int64_t at_us, uint64_t round);

#endif
