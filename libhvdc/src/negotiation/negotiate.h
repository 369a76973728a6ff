/*
 * negotiate.h - the coordinator's bookkeeping (rank 0): which names each rank has announced,
 * which are now announced by every rank, whether the ranks agree about them, and how ready
 * all-reduces fuse. It sees only decoded messages, never MPI, so it is unit-tested alone.
 *
 * defines: hvdc_negotiator, hvdc_rank_stall, hvdc__negotiator_create, _destroy, _add, _respond,
 *          _waiting, _set_time, _report_stalls, _stalls_by_rank, _arrivals
 * Background thread of rank 0 (and tests).
 */
#ifndef HVDC_NEGOTIATE_H
#define HVDC_NEGOTIATE_H

#include <stddef.h>

#include "hvdc.h"
#include "negotiation/arrivals.h"
#include "negotiation/cache.h"
#include "negotiation/wire.h"

typedef struct hvdc_negotiator hvdc_negotiator;

/* cache: rank 0's response cache (slot announcements are resolved against it), or NULL. */
hvdc_negotiator *hvdc__negotiator_create(int size, const hvdc_cache *cache);
void hvdc__negotiator_destroy(hvdc_negotiator *negotiator); /* NULL-safe */

/* Records rank's request list: its named requests and its cache slots; takes the list's items
 * (the list is left empty).
 * @return HVD_OK, HVD_ERR_NO_MEMORY, or HVD_ERR_INTERNAL if rank announced a name twice. */
hvd_status hvdc__negotiator_add(hvdc_negotiator *negotiator, int rank, hvdc_request_list *list);

/* Fills out with a response for every name that all ranks have now announced, in the order
 * they became ready: EXECUTE (all-reduces fused up to fusion_threshold bytes, or
 * gpu_fusion_threshold for device tensors) or ERROR when
 * the ranks disagree. A response whose names are all cached carries their slots and no
 * names (every rank reads them from its cache). Forgets those names. Sets HVDC_FLAG_SHUTDOWN
 * once any rank asked.
 * @return HVD_OK or HVD_ERR_NO_MEMORY. */
hvd_status hvdc__negotiator_respond(hvdc_negotiator *negotiator, size_t fusion_threshold,
                                    size_t gpu_fusion_threshold, hvdc_response_list *out);

/* Starts noting who arrives last (arrivals.h) and which rank made each response ready
 * (hvdc_response_list.last_ranks), if it has not yet; its record, or NULL out of memory. */
hvdc_arrivals *hvdc__negotiator_arrivals(hvdc_negotiator *negotiator);

/* Names announced by some ranks but not yet by all. */
size_t hvdc__negotiator_waiting(const hvdc_negotiator *negotiator);

/* The clock (seconds, any origin) stamped on names announced from now on. */
void hvdc__negotiator_set_time(hvdc_negotiator *negotiator, double now);

/* Writes into out (at most len bytes) one line per name that has waited for some ranks for at
 * least older_than seconds: its kind, its age, the ranks that submitted it and those missing.
 * @return how many such names; *oldest gets the longest wait (0 if none). */
size_t hvdc__negotiator_report_stalls(const hvdc_negotiator *negotiator, double now,
                                      double older_than, char *out, size_t len, double *oldest);

/* What one rank holds up: the names it has not announced that others have waited for. */
typedef struct hvdc_rank_stall {
    size_t missing;  /* how many */
    double oldest;   /* the longest wait among them, seconds */
    char names[200]; /* the first few, quoted: "'a', 'b'" */
} hvdc_rank_stall;

/* The same names grouped by the ranks that have not announced them (a joined rank holds nothing
 * up): by_rank[r] for every rank r (size entries, overwritten). @return how many names have
 * waited at least older_than; *oldest gets the longest wait (0 if none). */
size_t hvdc__negotiator_stalls_by_rank(const hvdc_negotiator *negotiator, double now,
                                       double older_than, hvdc_rank_stall *by_rank,
                                       double *oldest);

#endif
