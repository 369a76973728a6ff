/*
 * poll.h - what a background wait does between two polls (of MPI, or of the flags in shared
 * memory): spin for a short while when that is cheap and someone is waiting for the answer,
 * give the core away otherwise.
 *
 * Why not always yield: sched_yield is a system call, and a message that arrives during one is
 * seen only after it returns; where system calls are dear a negotiation round, which waits
 * twice, pays several (docs/performance.md: what spinning saved).
 * Why not always spin: a spinning thread holds its core. So a wait spins only while
 *   - an application thread is blocked waiting for this runtime (hvd_wait and the calls built
 *     on it: app_waiting > 0) - not while it submits or computes, which needs the core; and
 *   - the node has a CPU for every rank (spin_ns > 0, set by hvd_init from the ranks' affinity)
 *     - with more ranks than CPUs the rank being waited for may need this very core.
 * Otherwise every pause yields, as Open MPI's own waits do with mpi_yield_when_idle.
 *
 * Hand-offs between threads (an application thread waiting for its op's completion, the
 * background thread waiting for the next op) spin too, for HVDC_SPIN_NS before they sleep,
 * where the node has two CPUs for every rank (handoff_spin_ns > 0): then the other side of the
 * hand-off runs on a CPU of its own, and waking a sleeping thread there costs a system call on
 * one CPU and a wake-up from idle on the other.
 * With fewer CPUs the two threads of a rank share one, and a spinning thread would only delay
 * the thread it waits for.
 *
 * defines: hvdc_poll_policy, hvdc_poll, HVDC_SPIN_NS, hvdc__poll_begin, hvdc__poll_spins,
 *          hvdc__poll_pause, hvdc__spin_unlocked, hvdc__spin_until_quiet, hvdc__cpu_relax
 * policy: written by the thread that calls hvd_init, app_waiting by application threads;
 * hvdc_poll: the waiting thread's own.
 */
#ifndef HVDC_POLL_H
#define HVDC_POLL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* How long one wait may spin; past it every pause yields. A negotiation round's waits take a
 * few microseconds when every rank is ready (-D to measure others). */
#ifndef HVDC_SPIN_NS
#define HVDC_SPIN_NS 20000
#endif

typedef struct hvdc_poll_policy {
    int64_t spin_ns;         /* HVDC_SPIN_NS, or 0: never spin (more ranks than CPUs) */
    int64_t handoff_spin_ns; /* HVDC_SPIN_NS, or 0: hand-offs sleep at once (fewer than two
                                CPUs per rank) */
    atomic_int app_waiting; /* application threads blocked waiting for an op of this runtime */
} hvdc_poll_policy;

typedef struct hvdc_poll {
    const hvdc_poll_policy *policy; /* NULL: every pause yields */
    int64_t spin_until_ns;          /* hvdc__now_ns() deadline of the spinning, set by the
                                       wait's first pause (0 before: a wait that never pauses
                                       never reads the clock) */
} hvdc_poll;

/* Starts a wait under policy (NULL-safe). */
static inline hvdc_poll hvdc__poll_begin(const hvdc_poll_policy *policy) {
    hvdc_poll poll = {policy, 0};
    return poll;
}

/* Whether a pause at now_ns (hvdc__now_ns) spins rather than yields: before the deadline, under
 * a policy with a budget, while an application thread waits. Pure but for the atomic. */
int hvdc__poll_spins(const hvdc_poll *poll, int64_t now_ns);

/* Between two polls: hvdc__cpu_relax while hvdc__poll_spins, else sched_yield. The first pause
 * of a wait under a policy with a budget sets the deadline. */
void hvdc__poll_pause(hvdc_poll *poll);

/* A hand-off's spin, with mutex held: *seq counts, under mutex, the changes a waiter on the
 * condition variable paired with it waits for. Releases mutex, spins (hvdc__cpu_relax) until
 * *seq moves or budget_ns has passed, and takes mutex again. @return whether *seq moved since
 * the call, read with mutex held: 0 means the change, and its signal, are still to come, so
 * the caller may sleep on the condition variable. budget_ns <= 0: returns 0 at once. */
int hvdc__spin_unlocked(pthread_mutex_t *mutex, const atomic_ullong *seq, int64_t budget_ns);

/* A burst's gathering, with mutex held: releases mutex, spins while *seq keeps moving (it
 * counts under mutex what another thread adds), until it has stood still for quiet_ns or
 * budget_ns has passed, and takes mutex again. */
void hvdc__spin_until_quiet(pthread_mutex_t *mutex, const atomic_ullong *seq, int64_t quiet_ns,
                            int64_t budget_ns);

/* One busy-wait step: the CPU's pause hint where it has one. */
static inline void hvdc__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

#endif
