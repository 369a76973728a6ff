/*
 * runtime.h - the one runtime struct behind the API, and who may touch which part.
 *
 *   user threads ──submit──> queue (queue_mutex, queue_cond) ──> background thread
 *   user threads <──hvd_wait── handles, op completion (completion_mutex, completion_cond)
 *   (a waiter may take queue_mutex while it holds completion_mutex; never the other way)
 *
 * defines: hvdc_runtime, hvdc__runtime (the live instance), hvdc__enter, hvdc__leave, HVDC_GATED,
 *          hvdc__background_main, hvdc__submit, hvdc__submit_wait, hvdc__runtime_start_child,
 *          hvdc__runtime_stop_child, hvdc__runtime_free_child, hvdc__runtime_on_shutdown
 * (the process sets' table, which runtime an op of a set goes to: set_table.h)
 *
 * Who calls MPI after hvd_init: each runtime's background thread makes every negotiation and
 * collective call. Two other threads call MPI, never collectively on a runtime's communicators
 * (MPI runs with MPI_THREAD_MULTIPLE): hvd_add_process_set's caller splits the set's
 * communicator from sets_comm, which nothing else uses; and the watchdog (HVD_CPU_ALLREDUCE=mpi)
 * probes control_comm for death notices while the background thread blocks in MPI_Allreduce
 * (watchdog.h).
 */
#ifndef HVDC_RUNTIME_H
#define HVDC_RUNTIME_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "base/name_table.h"
#include "base/poll.h"
#include "base/topology.h"
#include "runtime/config.h"
#include "runtime/execute.h"
#include "runtime/op.h"
#include "runtime/phases.h"

typedef struct hvdc_runtime {
    /* set by hvd_init, read-only afterwards */
    hvdc_config config;
    hvdc_topology topo;
    int we_initialized_mpi;
    MPI_Comm control_comm; /* negotiation rounds */
    MPI_Comm sets_comm;    /* the global runtime's: process sets' communicators are split from
                              it, by hvd_add_process_set's caller (no other use) */
    struct hvdc_peers *peers; /* every rank's host and pid (the global runtime; NULL in a set's) */
    struct hvdc_watch *watch; /* the host watch (the global runtime at np > 1; else NULL) */
    struct hvdc_report *report; /* HVD_REPORT's figures (rank 0 of the global runtime, when set;
                                   else NULL): the background thread adds, any thread copies */

    /* the request queue: user threads push, the background thread drains */
    pthread_mutex_t queue_mutex;
    pthread_cond_t queue_cond;
    hvdc_op *queue_head, *queue_tail;
    atomic_ullong queue_seq; /* ops queued so far, counted under queue_mutex: what the background
                                thread's hand-off spin watches (base/poll.h) */
    hvdc_name_table in_flight; /* name -> op, from submission to completion */
    int shutdown_requested;
    int stopped;            /* the background thread has exited; submissions fail */
    hvd_status stop_status; /* why: HVD_ERR_SHUTDOWN, or the error that stopped it */
    char stop_message[512];
    int told_stopped;       /* it stopped on an error of its own and told every rank so (the
                               others then do not finalize MPI: neither may this one) */
    unsigned long long barrier_count; /* names the n-th hvd_barrier */
    char last_submitted[HVD_MAX_NAME_LEN + 1]; /* the last name queued, and when (hvdc__now_ns):
                                                  what a stuck rank did last (whereabouts.h) */
    int64_t last_submitted_ns;
    /* negotiation's cost so far, copied from the exchange after every round */
    atomic_ullong stat_rounds, stat_bytes_sent, stat_bytes_received;
    hvdc_phase_totals phases; /* where host ops' time went (phases.h), added by their waiters
                                 under completion_mutex */
    hvdc_phase_totals device_phases; /* the same for device ops */
    atomic_int dump_requested;        /* SIGUSR1 arrived: the background thread prints its state */
    atomic_int device_done;           /* the GPU backend's work finished (set on a CUDA thread
                                         under queue_mutex, signalled on queue_cond) */

    /* completion: the background thread marks ops done, hvd_wait waits */
    pthread_mutex_t completion_mutex;
    pthread_cond_t completion_cond;
    hvdc_handles handles;
    atomic_ullong completion_seq; /* changes announced on completion_cond, counted under
                                     completion_mutex: what a waiter's hand-off spin watches */
    hvdc_poll_policy poll;    /* how waits pause and hand-offs spin (base/poll.h): the budgets
                                 set by hvd_init; app_waiting counts the threads waiting in
                                 hvdc__wait_completion */
    int device_waiters;       /* threads inside a wait on a device op's done event (complete.h):
                                 the GPU backend, which owns the events, outlives them */
    atomic_int device_aborted; /* the GPU backend aborted its communicators (set before it
                                  does): a done event that fires afterwards marks no result */
    atomic_int rank_device;   /* the CUDA device of this rank's collectives once a GPU backend
                                 exists, else -1: the global runtime's is the one read (api.c)
                                 and written (the first backend, global or a process set's) */
    /* how a waiter asks whether a done event fired: hvdc__gpu_event_finished; the unit test
     * of complete.c puts a fake device's here */
    int (*device_event_finished)(void *event, const atomic_int *aborted, int block);
    /* how hvd_wait_on_stream makes a stream wait for a done event: hvdc__gpu_stream_wait_on
     * (the unit test's fake device likewise) */
    hvd_status (*device_stream_wait)(void *stream, void *event);
    /* what hvd_shutdown calls first, to stop the process sets' runtimes (their members
     * together): registered by hvd_add_process_set (hvdc__runtime_on_shutdown), NULL while no
     * set was ever added; under init.c's gate lock */
    void (*stop_process_sets)(void);

    /* the background thread waits here until every rank's hvd_init has succeeded (1) or one
     * has failed (-1: it exits touching nothing); under queue_mutex, signalled on queue_cond */
    int start_decision;
    int thread_started;
    int left_behind; /* a rank died while the background thread was inside MPI_Allreduce, and
                        hvd_shutdown gave up joining it (watchdog.h): never freed */
    int fault_add_handle; /* tests (base/fault.h): the handle table cannot grow */
    int fault_caller_die; /* tests: SIGKILL this rank once every rank agreed on a caller's op */

    /* the caller's path (caller_path.h) */
    pthread_mutex_t executor_token; /* held by whoever runs collectives on the executor: the
                                       background thread while it runs responses, a caller
                                       while it runs its own op */
    const struct hvdc_cache *token_cache; /* the background thread's response cache, under
                                             executor_token (NULL while it has none) */
    struct hvdc_node_vote *vote; /* the node's vote; NULL: the path is off (set by hvd_init) */
    int vote_busy;               /* this rank's busy bit as published, under queue_mutex */
    int vote_hold;               /* this rank's hold bit as published, under executor_token */
    int vote_hold_always;        /* rank 0 with HVD_REPORT or HVD_AUTOTUNE: held for good */
    const char *caller_name;     /* the op a caller runs, under queue_mutex; NULL: none */
    atomic_int caller_failed;    /* a caller's op failed midway: the background thread stops
                                    with this status and caller_message (written before) */
    char caller_message[512];

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

/* A process set's runtime on comm, its members' communicator (init.c). Collective over comm. */
hvd_status hvdc__runtime_start_child(const hvdc_runtime *parent, MPI_Comm comm,
                                     hvdc_runtime **out);
/* Stops it (its members together, like hvd_shutdown): its thread fails what is left and ends;
 * threads woken in hvd_wait may still be leaving it. NULL-safe. */
void hvdc__runtime_stop_child(hvdc_runtime *child);
/* Frees a stopped child, once no call uses it any more (set_table.c counts them). */
void hvdc__runtime_free_child(hvdc_runtime *child);

/* Gives a checked op a handle and queues it on process_set's runtime; on failure frees op and
 * returns the error (unknown set, not a member, stopped runtime, duplicate name). submit.c */
hvd_status hvdc__submit(const char *fn, int process_set, hvdc_op *op, hvd_handle *handle);
/* Submits op as hvdc__submit does and waits for it as hvd_wait does, for the collectives
 * libhvdc runs for itself inside a public call (process sets' agreement), without re-entering
 * the public API. @return the op's status (its message naming fn). submit.c */
hvd_status hvdc__submit_wait(const char *fn, int process_set, hvdc_op *op);

/* Registers what hvd_shutdown calls before stopping the global runtime (process_sets.c: stop
 * every set). The live runtime's; one hook, a second registration replaces it. init.c */
void hvdc__runtime_on_shutdown(void (*stop)(void));

#endif
