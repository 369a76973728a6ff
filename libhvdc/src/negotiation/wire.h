/*
 * wire.h - the messages ranks exchange while negotiating, and their binary encoding.
 *
 * Each round every rank sends the coordinator (rank 0) a request list: the operations submitted
 * since the last round. The coordinator answers every rank with one response list: operations
 * to execute now, in this order (several names in one response = fused), or to fail.
 * The decoders check every length against the buffer, so a damaged message is an error, never
 * a crash (they are fuzzed in tests/fuzz).
 *
 * defines: hvdc_kind, hvdc_wire_request, hvdc_request_list, hvdc_wire_response,
 *          hvdc_response_list, hvdc__wire_{encode,decode}_{requests,responses},
 *          hvdc__wire_request_copy, hvdc__wire_request_free, hvdc__response_list_free,
 *          hvdc__request_list_free
 * Pure; runs on the background thread (and in tests).
 */
#ifndef HVDC_WIRE_H
#define HVDC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/bytes.h"
#include "hvdc.h"

#define HVDC_WIRE_MAGIC 0x48564443u /* "HVDC" */
#define HVDC_WIRE_VERSION 7u

typedef enum hvdc_kind {
    HVDC_KIND_ALLREDUCE = 0,
    HVDC_KIND_BROADCAST,
    HVDC_KIND_ALLGATHER,
    HVDC_KIND_REDUCESCATTER,
    HVDC_KIND_ALLTOALL,
    HVDC_KIND_BARRIER,
    HVDC_KIND_JOIN,
    HVDC_KIND_COUNT
} hvdc_kind;

const char *hvdc__kind_name(int kind);

/* What one rank announces about one submission; every field must agree across ranks except
 * where a kind allows differences (allgather's count, alltoall's splits, capacities). */
typedef struct hvdc_wire_request {
    char name[HVD_MAX_NAME_LEN + 1];
    uint8_t kind, dtype, op;
    int32_t device;
    int32_t root;            /* broadcast */
    double prescale, postscale;
    uint64_t members_hash;   /* grouped allreduce: hash of the member names, else 0 */
    uint64_t capacity;       /* allgather/alltoall: receive capacity in elements */
    uint32_t n_counts;
    uint64_t *counts;        /* (n_counts) per-tensor counts; alltoall: count per destination */
    uint8_t has_shape;       /* the caller gave the tensor's shape (hvd_options.shape): it is
                                compared across ranks. 0: only counts are (a zeroed request) */
    uint32_t ndim;
    uint64_t *shape;         /* (ndim) */
} hvdc_wire_request;
#define HVDC_MAX_DIMS 64     /* a shape with more dimensions is refused at submission */

/* Round flags. */
#define HVDC_FLAG_SHUTDOWN 1u /* in a request list: this rank is shutting down;
                                 in a response list: everyone stops after executing it */
#define HVDC_FLAG_ABORT 2u    /* in a response list: everyone stops at once and fails every
                                 pending operation with the list's reason (stall, failure) */
#define HVDC_FLAG_TUNE 4u     /* in a response list: every rank uses cycle_time_ms and
                                 shm_step_bytes from now on (HVD_AUTOTUNE: rank 0 tries a
                                 setting or settles) */
/* With HVDC_FLAG_ABORT, bits 16.. of the flags carry the hvd_status to fail with. */
#define HVDC_ABORT_FLAGS(status) (HVDC_FLAG_ABORT | ((uint32_t)(status) << 16))
#define HVDC_ABORT_STATUS(flags) ((hvd_status)((flags) >> 16))

/* Up to this many ranks an alltoall's response carries every rank's send counts (at most
 * 32 KiB), sparing the executors an exchange of counts per call. Beyond, rank 0 would send
 * size^3 * 8 bytes per alltoall, more than the exchange costs the whole job. */
#define HVDC_ALLTOALL_MATRIX_RANKS 64

typedef struct hvdc_request_list {
    uint32_t flags;
    uint32_t n;
    hvdc_wire_request *items; /* (n) */
    uint32_t n_slots;
    uint32_t *slots;          /* (n_slots) cached requests announced by slot (cache.h) */
    int32_t ready_us;         /* when the sender was ready with the newest of these requests:
                                 microseconds after it received rank 0's last answer (negative:
                                 before), so rank 0 dates it on its own clock (arrivals.h) */
} hvdc_request_list;

typedef enum hvdc_response_type { HVDC_RESPONSE_EXECUTE = 0, HVDC_RESPONSE_ERROR = 1 } hvdc_response_type;

typedef struct hvdc_wire_response {
    uint8_t type, kind;
    uint32_t n_names;
    char (*names)[HVD_MAX_NAME_LEN + 1]; /* (n_names) in execution/fusion order; NULL in
                                            the negotiator's cached responses */
    uint32_t *slots;                     /* (n_names) a cached response: the names' cache slots,
                                            sent instead of the names (the receiver fills
                                            names from its cache); else NULL */
    uint32_t n_rank_counts;
    uint64_t *rank_counts;               /* allgather: (size) each rank's count;
                                            join: (1) the rank that joined last;
                                            alltoall: (size * size) the send counts, row s
                                            rank s's, while size <= HVDC_ALLTOALL_MATRIX_RANKS
                                            (else none: the ranks exchange them) */
    char *error;                         /* HVDC_RESPONSE_ERROR: the message for every rank */
    /* All-reduce while ranks have joined (hvd_join): those ranks hold no op for these names,
     * so the response carries what they need to contribute neutral values of the right shape. */
    uint32_t n_joined;                   /* ranks contributing nothing; 0 normally */
    uint8_t dtype, op;
    uint32_t *tensors_per_name;          /* (n_names) when n_joined > 0, else NULL */
    uint32_t n_counts;
    uint64_t *counts;                    /* (n_counts) every tensor's count, in order */
} hvdc_wire_response;

typedef struct hvdc_response_list {
    uint32_t flags;
    uint32_t n;
    hvdc_wire_response *items; /* (n) */
    char *reason;              /* HVDC_FLAG_ABORT: why, for every rank's message; else NULL */
    double cycle_time_ms;      /* HVDC_FLAG_TUNE: the cycle time every rank uses next */
    uint64_t shm_step_bytes;   /* HVDC_FLAG_TUNE: the shared-memory all-reduce's step
                                  (collectives/shm.h) every rank uses next; 0: unchanged */
    const int32_t *last_ranks; /* rank 0, never sent: (n) the rank whose announcement made each
                                  response ready last (-1: not known), or NULL; the
                                  negotiator's, valid until its next response */
} hvdc_response_list;

/* Encoders append to out (cleared first). @return 0, or -1 when out of memory. */
int hvdc__wire_encode_requests(hvdc_bytes *out, uint32_t flags,
                               const hvdc_wire_request *const *items, uint32_t n,
                               const uint32_t *slots, uint32_t n_slots, int32_t ready_us);
int hvdc__wire_encode_responses(hvdc_bytes *out, const hvdc_response_list *list);

/* Decoders fill a list the caller frees. @return 0, or -1 with *why set to a static string
 * saying what was wrong with the message. */
int hvdc__wire_decode_requests(const uint8_t *data, size_t len, hvdc_request_list *out,
                               const char **why);
int hvdc__wire_decode_responses(const uint8_t *data, size_t len, hvdc_response_list *out,
                                const char **why);

void hvdc__wire_request_free(hvdc_wire_request *request);

/* *to = a deep copy of *from (its counts and shape duplicated). @return 0; -1 out of memory
 * (then *to owns nothing). */
int hvdc__wire_request_copy(hvdc_wire_request *to, const hvdc_wire_request *from);
void hvdc__request_list_free(hvdc_request_list *list);
void hvdc__response_free(hvdc_wire_response *response);
void hvdc__response_list_free(hvdc_response_list *list);

#endif
