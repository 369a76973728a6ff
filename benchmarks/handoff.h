/*
 * handoff.h - MPI_Allreduce run by a second thread while the caller sleeps on a condition
 * variable: libhvdc's shape (the application's thread hands work to the background thread, the
 * only one that calls MPI, and sleeps until it completes) without libhvdc's negotiation,
 * fusion or bookkeeping. Timed next to hvd_allreduce it is the floor that shape costs on the
 * machine: the two thread hand-offs plus one collective.
 * Main thread (the helper thread is this file's own).
 */
#ifndef HVDC_BENCH_HANDOFF_H
#define HVDC_BENCH_HANDOFF_H

#include <mpi.h>

typedef struct bench_handoff bench_handoff;

/* Starts the helper thread, with a duplicate of comm for its calls (libhvdc's collectives run
 * on a duplicate too). Collective over comm. NULL if out of memory or without a thread. */
bench_handoff *bench_handoff_start(MPI_Comm comm);

/* MPI_Allreduce(send, recv, count, type, op) on the helper thread; returns its MPI status once
 * the helper has woken this thread. */
int bench_handoff_allreduce(bench_handoff *h, const void *send, void *recv, int count,
                            MPI_Datatype type, MPI_Op op);

/* Joins the helper thread and frees the duplicate communicator. Collective. */
void bench_handoff_stop(bench_handoff *h);

#endif
