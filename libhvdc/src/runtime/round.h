/*
 * round.h - the background thread's state between negotiation rounds, shared by the files that
 * make up the thread: background.c (the loop, execution, completion), exchange.c (one
 * negotiation over point-to-point, stall inspection) and dump.c (the SIGUSR1 state dump).
 * defines: round_state, hvdc__negotiate, hvdc__between_steps,
 *          hvdc__dump_state
 * Background thread only.
 */
#ifndef HVDC_ROUND_H
#define HVDC_ROUND_H

#include "base/clock.h"
#include "negotiation/negotiate.h"
#include "runtime/runtime.h"

typedef struct round_state {
    hvdc_runtime *rt;
    hvdc_negotiator *negotiator; /* rank 0 only */
    hvdc_bytes message, gathered, answer;
    unsigned char *arrived;      /* (size) rank 0: whose announcement this round has */
    MPI_Request *requests;       /* (size - 1) rank 0: answers in flight */
    double next_stall_check;     /* rank 0 */
    int64_t round_started_us;    /* timeline clock */
    uint64_t rounds;
    hvdc_buffer identity, discard; /* a joined rank's stand-in tensors */
    struct gpu_work *gpu_work;   /* device responses queued, not finished: (n_gpu_work) */
    size_t n_gpu_work, cap_gpu_work;
    size_t n_in_flight;          /* announced ops not yet completed */
} round_state;


/* One negotiation (exchange.c): this rank's announcements (s->message) in, the response list
 * every rank gets out. Rank 0 also reports stalls while it waits. */
hvd_status hvdc__negotiate(round_state *s, hvdc_response_list *responses);

/* What a wait loop does between two probes (background.c): serve a SIGUSR1 dump request,
 * complete finished device work, check that every rank is alive. */
hvd_status hvdc__between_steps(round_state *s, const char *doing);

/* Prints this rank's state to stderr (dump.c). */
void hvdc__dump_state(round_state *s, const char *doing);

#endif
