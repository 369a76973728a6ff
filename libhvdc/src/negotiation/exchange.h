/*
 * exchange.h - one negotiation round over MPI point-to-point: every rank sends rank 0 its new
 * announcements, rank 0 feeds them to the negotiator, then answers every rank with the same
 * response list. Because rank 0 sees who has not joined a round yet, it reports stalls while
 * it waits (HVD_STALL_CHECK_TIME) and stops the job past HVD_STALL_SHUTDOWN_TIME. A round rank 0
 * cannot finish (a stall, memory) is answered with an abort, so every rank stops alike.
 *
 *   rank 1 ──announce──┐                         ┌──answer──> rank 1
 *   rank 2 ──announce──┼─> rank 0: negotiator ───┼──answer──> rank 2
 *   rank 0 (its own) ──┘   add, respond          └──answer──> rank 0 (its own copy)
 *
 * The owner (the background thread) encodes this rank's announcements into `message` before a
 * round and decodes nothing: hvdc__exchange_round hands back the decoded response list. Every
 * wait here calls the owner's between_steps hook, so the owner keeps serving its own work (a
 * state dump, finished device work) and a dead rank ends the wait (liveness).
 *
 * defines: hvdc_exchange, hvdc__exchange_init, hvdc__exchange_free, hvdc__exchange_round,
 *          hvdc__exchange_awaited
 * Background thread.
 */
#ifndef HVDC_EXCHANGE_H
#define HVDC_EXCHANGE_H

#include <mpi.h>
#include <stddef.h>

#include "base/bytes.h"
#include "base/liveness.h"
#include "base/peers.h"
#include "hvdc.h"
#include "negotiation/negotiate.h"
#include "negotiation/wire.h"

/* The most ranks one stall verdict lists (the first ones, by rank). */
#define STALL_RANKS_MAX 32

typedef struct hvdc_exchange {
    /* set by the owner before hvdc__exchange_init */
    MPI_Comm comm;                 /* private to negotiation */
    int rank, size;                /* in comm */
    double stall_check_s;          /* HVD_STALL_CHECK_TIME; 0: no reports */
    double stall_shutdown_s;       /* HVD_STALL_SHUTDOWN_TIME; 0: never stop */
    size_t fusion_threshold;       /* bytes, host tensors; the owner may change it between rounds */
    size_t gpu_fusion_threshold;   /* bytes, device tensors */
    double tune_cycle_ms;          /* rank 0: >= 0 sends this cycle time and tune_shm_step to
                                      every rank with the next answer (HVDC_FLAG_TUNE), then
                                      is reset to -1 (none: 0 is a cycle time,
                                      HVD_CYCLE_TIME=0) */
    size_t tune_shm_step;          /* rank 0: sent with tune_cycle_ms; 0: unchanged */
    hvdc_liveness *liveness;
    hvdc_cache *cache;             /* the response cache (cache.h), or NULL */
    /* Called between two probes of every wait; a status other than HVD_OK ends the round, and
     * rank 0 answers no abort for it: the owner's own failure, which it tells the others. */
    hvd_status (*between_steps)(void *ctx, const char *doing);
    /* Rank 0, with stall reports on: delivers a stall verdict (head, then a line for each of n
     * ranks: what it holds up); the owner adds where those ranks are and logs it. */
    void (*stall_verdict)(void *ctx, const char *head, const int *ranks,
                          const char *const *lines, int n);
    const hvdc_peers *peers;       /* every rank's host, for the verdict's lines */
    void *ctx;
    /* this rank's announcements for the next round, encoded by the owner (with when it was ready
     * with them, relative to answered_at: hvdc_request_list.ready_us) */
    hvdc_bytes message;
    /* owned here */
    hvdc_bytes gathered, answer;
    hvdc_negotiator *negotiator; /* rank 0 */
    unsigned char *arrived;      /* (size) rank 0: whose announcement this round has */
    hvdc_rank_stall *stalls;     /* (size) rank 0: what each rank holds up (inspect_stalls) */
    int stall_ranks[STALL_RANKS_MAX]; /* rank 0: the ranks of the verdict being written */
    char stall_lines[STALL_RANKS_MAX][512]; /* and their lines */
    MPI_Request *requests;       /* (size - 1) rank 0: answers in flight */
    double next_stall_check;     /* rank 0 */
    double answered_at;          /* when this rank received (rank 0: sent) the last answer: the
                                    moment every rank's next announcement is dated from */
    const int32_t *last_ranks;   /* rank 0: the answer's hvdc_response_list.last_ranks */
    int fault_respond;           /* rank 0, tests (base/fault.h): responding fails */
    int aborted;                 /* rank 0: a failed round was answered with an abort */
    int owner_failed;            /* rank 0: this round's between_steps failed (not aborted) */
    /* what negotiation has cost this rank so far (benchmarks/negotiation_bench reads them) */
    uint64_t rounds, bytes_sent, bytes_received;
} hvdc_exchange;

/* Allocates what rank 0 needs once the owner's fields are set. @return HVD_OK or
 * HVD_ERR_NO_MEMORY. */
hvd_status hvdc__exchange_init(hvdc_exchange *x);
void hvdc__exchange_free(hvdc_exchange *x);

/* Rank 0: has another rank started a round (its announcement is waiting)? Then rank 0 must
 * join it even with nothing of its own in flight: it coordinates every round, and only it can
 * see that it is itself the rank the others wait for (stall reports, HVD_STALL_SHUTDOWN_TIME).
 * Other ranks: 0. Never blocks. */
int hvdc__exchange_awaited(hvdc_exchange *x);

/* One round: x->message in, the response list every rank gets out (the caller frees it). A
 * cached response's slots are checked against x->cache and its first name filled in; the
 * others stay empty until hvdc__cache_fill_names (a steady-state response needs none).
 * Rank 0 answers a round it cannot finish with an abort list carrying its status and message
 * (x->aborted), so the other ranks stop as it does; not when a rank died: each learns that itself.
 * @return HVD_OK; HVD_ERR_STALLED on rank 0 when the stall limit passed; HVD_ERR_RANK_FAILED,
 * HVD_ERR_MPI, HVD_ERR_NO_MEMORY, HVD_ERR_INTERNAL. */
hvd_status hvdc__exchange_round(hvdc_exchange *x, hvdc_response_list *responses);

#endif
