/*
 * round.h - the background thread's state between negotiation rounds, shared by the files that
 * make up the thread: background.c (the loop, execution, completion) and dump.c (the SIGUSR1
 * state dump). The negotiation round itself is negotiation/exchange.c, which this thread owns
 * and calls back only through its between_steps hook.
 * defines: round_state, hvdc__dump_state
 * Background thread only.
 */
#ifndef HVDC_ROUND_H
#define HVDC_ROUND_H

#include "negotiation/exchange.h"
#include "runtime/autotune.h"
#include "runtime/runtime.h"

typedef struct round_state {
    hvdc_runtime *rt;
    hvdc_exchange exchange;      /* negotiation: this rank's messages, rank 0's negotiator */
    hvdc_cache *cache;           /* the response cache, the same slots on every rank */
    int told_cache_full;         /* rank 0 said once that the cache took no more names */
    hvdc_op **slot_ops;          /* (cache capacity) the op last announced by each slot */
    int64_t round_started_us;    /* timeline clock */
    uint64_t rounds;
    hvdc_buffer identity, discard; /* a joined rank's stand-in tensors */
    hvdc_buffer response_ops;    /* the ops of the response being run (run_response) */
    const hvdc_wire_request **fresh_descs; /* (fresh_cap) a round's announcements in full */
    uint32_t *fresh_slots;       /* (fresh_cap) and by cache slot */
    size_t fresh_cap;
    struct gpu_work *gpu_work;   /* device responses queued, not finished: (n_gpu_work) */
    size_t n_gpu_work, cap_gpu_work;
    size_t n_in_flight;          /* announced ops not yet completed */
    size_t n_on_device;          /* of those, the ops queued on the device (need no rounds) */
    double device_polled;        /* when device work was last looked at (hvdc__now_seconds) */
    double cycle_ms;             /* HVD_CYCLE_TIME, or what rank 0's autotuning sent last */
    int tuning;                  /* rank 0 with HVD_AUTOTUNE=1, until the tuner settles */
    int fault_encode, fault_run; /* tests (base/fault.h): encoding this rank's requests, or
                                    running a response, fails */
    hvdc_autotune tune;
} round_state;

/* Prints this rank's state to stderr (dump.c). */
void hvdc__dump_state(round_state *s, const char *doing);

#endif
