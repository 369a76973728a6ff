/*
 * runtime.h - the one runtime struct behind the API, and who may touch which part.
 *
 *   user threads ──submit──> queue (queue_mutex, queue_cond) ──> background thread
 *   user threads <──hvd_wait── handles, op completion (completion_mutex, completion_cond)
 *
 * defines: hvdc_runtime, hvdc__runtime (the live instance), hvdc__enter, hvdc__leave, HVDC_GATED,
 *          hvdc__background_main,
 *          hvdc__topology_detect
 */
#ifndef HVDC_RUNTIME_H
#define HVDC_RUNTIME_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "base/name_table.h"
#include "runtime/config.h"
#include "runtime/execute.h"
#include "runtime/op.h"

typedef struct hvdc_topology {
    int rank, size;             /* in the communicator libhvdc was started on */
    int local_rank, local_size; /* among processes sharing this node's memory */
    int cross_rank, cross_size; /* among processes with the same local rank (one per node) */
} hvdc_topology;

typedef struct hvdc_runtime {
    /* set by hvd_init, read-only afterwards */
    hvdc_config config;
    hvdc_topology topo;
    int we_initialized_mpi;
    MPI_Comm control_comm; /* negotiation rounds */

    /* the request queue: user threads push, the background thread drains */
    pthread_mutex_t queue_mutex;
    pthread_cond_t queue_cond;
    hvdc_op *queue_head, *queue_tail;
    hvdc_name_table in_flight; /* name -> op, from submission to completion */
    int shutdown_requested;
    int stopped;            /* the background thread has exited; submissions fail */
    hvd_status stop_status; /* why: HVD_ERR_SHUTDOWN, or the error that stopped it */
    char stop_message[512];
    unsigned long long barrier_count; /* names the n-th hvd_barrier */
    /* negotiation's cost so far, copied from the exchange after every round */
    atomic_ullong stat_rounds, stat_bytes_sent, stat_bytes_received;
    atomic_int dump_requested;        /* SIGUSR1 arrived: the background thread prints its state */

    /* completion: the background thread marks ops done, hvd_wait waits */
    pthread_mutex_t completion_mutex;
    pthread_cond_t completion_cond;
    hvdc_handles handles;

    /* the background thread waits here until every rank's hvd_init has succeeded (1) or one
     * has failed (-1: it exits touching nothing); under queue_mutex, signalled on queue_cond */
    int start_decision;
    int thread_started;

    /* owned by the background thread */
    pthread_t thread;
    hvdc_executor executor;
    FILE *autotune_log; /* HVD_AUTOTUNE_LOG (rank 0, with HVD_AUTOTUNE=1), opened by hvd_init */
} hvdc_runtime;

extern hvdc_runtime *hvdc__runtime;

/* Brackets a public call that uses hvdc__runtime: enter fails with HVD_ERR_NOT_INITIALIZED
 * (message naming fn) when there is no live runtime; after HVD_OK, call hvdc__leave once. */
hvd_status hvdc__enter(const char *fn);
void hvdc__leave(void);

/* The body of a public call: returns call's status, run between hvdc__enter(fn) and
 * hvdc__leave(), or enter's error. */
#define HVDC_GATED(fn, call)                                                                 \
    do {                                                                                     \
        hvd_status gated_ = hvdc__enter(fn);                                                 \
        if (gated_ != HVD_OK) return gated_;                                                 \
        gated_ = (call);                                                                     \
        hvdc__leave();                                                                       \
        return gated_;                                                                       \
    } while (0)

void *hvdc__background_main(void *runtime);

/* This rank's negotiation rounds and the bytes it sent and received in them since hvd_init
 * (for benchmarks/negotiation_bench; any thread). @return HVD_OK or HVD_ERR_NOT_INITIALIZED. */
hvd_status hvdc__negotiation_stats(uint64_t *rounds, uint64_t *bytes_sent, uint64_t *bytes_received);

/* Fills topo from comm. Collective over comm. */
hvd_status hvdc__topology_detect(MPI_Comm comm, hvdc_topology *topo);

#endif
