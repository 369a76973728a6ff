/*
 * background.c - the background thread: it runs every negotiation round and every collective
 * of its runtime (which other threads call MPI, and why: runtime.h).
 *
 * It sleeps on queue_cond while this rank has nothing in flight. Once it has, it runs rounds:
 *   1. take the ops submitted since the last round (where a CPU is spare, a burst of them
 *      is first let finish: it pauses 1 us, at most BURST_MAX_NS);
 *   2. negotiate (negotiation/exchange.c): every rank sends rank 0 its new announcements, rank 0
 *      answers every rank with the same response list (point-to-point, so rank 0 sees who has
 *      not joined yet and can report stalls while it waits);
 *   3. execute the responses in order (execute.c: collectives/ or gpu/), complete their ops.
 * A round is collective, so it starts only when every rank has something in flight; a rank with
 * nothing to do sleeps instead of cycling. A round that changed nothing (names still waiting
 * for other ranks) is followed by a wait of at most HVD_CYCLE_TIME for new submissions, so
 * stuck rounds are paced while a fresh submission still starts a round at once.
 *
 * Device work needs no rounds once queued (device_work.h). On a fatal stop the NCCL
 * communicators are aborted before anything waits, so device work in flight cannot hang it.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/dtype.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/status.h"
#include "collectives/reduce.h"
#include "collectives/shm.h"
#include "runtime/caller_path.h"
#include "runtime/complete.h"
#include "runtime/device_work.h"
#include "runtime/report.h"
#include "runtime/round.h"
#include "runtime/watch.h"

/* Records phase on the timeline row of every tensor of op. */
static void op_span(hvdc_timeline *tl, const hvdc_op *op, const char *phase, int64_t start,
                    int64_t end, int64_t group) {
    for (size_t k = 0; k < op->n_tensors; k++)
        hvdc__timeline_span(tl, op->tensors[k].name, phase, start, end, group);
}

static void serve_dump(round_state *s, const char *doing) {
    if (atomic_load_explicit(&s->rt->dump_requested, memory_order_relaxed) &&
        atomic_exchange(&s->rt->dump_requested, 0))
        hvdc__dump_state(s, doing);
}

/* What every wait in a negotiation round does between two probes (exchange.h's hook): serve a
 * SIGUSR1 dump request, complete finished device work, check that every rank is alive and
 * that no caller's op failed midway (caller_path.h). */
static hvd_status between_steps(void *ctx, const char *doing) {
    round_state *s = ctx;
    serve_dump(s, doing);
    hvd_status st = hvdc__device_work_finish_due(s);
    if (st == HVD_OK) st = hvdc__caller_path_failure(s->rt);
    return st != HVD_OK ? st : hvdc__liveness_check(s->rt->executor.liveness);
}

/* The stall check's verdict (rank 0): the host watch asks those ranks where they are before it
 * logs it (watch.h); without a watch (a process set's runtime, HVD_HOST_TIMEOUT=0) it is logged
 * as it is. */
static void deliver_verdict(void *ctx, const char *head, const int *ranks,
                            const char *const *lines, int n) {
    round_state *s = ctx;
    if (s->rt->watch) {
        hvdc__watch_verdict(s->rt->watch, head, ranks, lines, n);
        return;
    }
    HVDC_LOG(HVDC_LOG_WARNING, "%s", head);
    for (int i = 0; i < n; i++) HVDC_LOG(HVDC_LOG_WARNING, "  %s", lines[i]);
    if (s->rt->peers) /* the global runtime: its watch is off */
        HVDC_LOG(HVDC_LOG_WARNING, "  (where those ranks are is not known: the host watch that "
                 "asks them is off, HVD_HOST_TIMEOUT=0)");
}

/* A burst of submissions is gathered until it pauses this long, for at most BURST_MAX_NS. */
#define BURST_QUIET_NS 1000
#define BURST_MAX_NS 50000

/* How often an idle rank 0 looks for rounds other ranks have started: rare enough to cost
 * nothing, often enough for stall checks counted in seconds. */
#define IDLE_PROBE_NS 50000000LL

/* Waits until there is a reason to run a round; returns the ops submitted meanwhile. *dead:
 * HVD_ERR_RANK_FAILED (message recorded) when a rank died while this one had device work in
 * flight and nothing to negotiate (NCCL on one node never notices a dead peer: its collective
 * would wait forever), or the error of device work that failed (hvdc__device_work_finish);
 * nothing is taken from the queue then. */
static hvdc_op *wait_for_work(round_state *s, int progressed, int *shutdown, hvd_status *dead) {
    hvdc_runtime *rt = s->rt;
    struct timespec deadline = hvdc__deadline_in(s->cycle_ms * 1e-3);
    int spun = 0; /* the hand-off spin: once per call, before the first sleep for work */
    *dead = HVD_OK;

    pthread_mutex_lock(&rt->queue_mutex);
    for (;;) {
        if ((*dead = hvdc__caller_path_failure(rt)) != HVD_OK) { /* the ranks are out of step */
            pthread_mutex_unlock(&rt->queue_mutex);
            return NULL;
        }
        if (atomic_load(&rt->dump_requested)) {
            pthread_mutex_unlock(&rt->queue_mutex);
            serve_dump(s, "waiting for work");
            pthread_mutex_lock(&rt->queue_mutex);
            continue;
        }
        if (hvdc__device_work_due(s)) {
            pthread_mutex_unlock(&rt->queue_mutex);
            /* device work finished: complete it now, no round needed */
            *dead = hvdc__device_work_finish(s, HVD_OK, NULL);
            /* still in flight: a peer that died inside the collective keeps it there */
            if (*dead == HVD_OK && s->n_gpu_work > 0)
                *dead = hvdc__liveness_check(rt->executor.liveness);
            pthread_mutex_lock(&rt->queue_mutex);
            if (*dead != HVD_OK) {
                pthread_mutex_unlock(&rt->queue_mutex);
                return NULL;
            }
            continue;
        }
        if (rt->queue_head || rt->shutdown_requested) {
            /* two or more queued: a burst (a backward pass's gradients) is being submitted;
             * where a CPU is spare, let it go on until it pauses, so the round takes it in
             * one piece instead of cutting it into many small rounds. A lone op never waits. */
            if (rt->queue_head != rt->queue_tail && !rt->shutdown_requested &&
                rt->poll.handoff_spin_ns > 0)
                hvdc__spin_until_quiet(&rt->queue_mutex, &rt->queue_seq, BURST_QUIET_NS,
                                       BURST_MAX_NS);
            break;
        }
        /* ops queued on the device need no round; only those still being negotiated do */
        size_t negotiating = s->n_in_flight - s->n_on_device;
        if (negotiating == 0 && s->n_gpu_work == 0 && !spun && rt->poll.handoff_spin_ns > 0) {
            /* a CPU to spare (base/poll.h): the next op may come within the spin, and is then
             * taken without a wake-up; shutdown and dump requests wait for the spin's end */
            spun = 1;
            hvdc__spin_unlocked(&rt->queue_mutex, &rt->queue_seq, rt->poll.handoff_spin_ns);
            continue; /* whatever moved: look at everything again */
        }
        if (negotiating == 0 && rt->topo.rank == 0 && rt->topo.size > 1) {
            /* idle rank 0 still coordinates the rounds others start (exchange.h) */
            struct timespec soon = hvdc__deadline_in(IDLE_PROBE_NS * 1e-9);
            if (pthread_cond_timedwait(&rt->queue_cond, &rt->queue_mutex, &soon) != ETIMEDOUT) continue;
            pthread_mutex_unlock(&rt->queue_mutex);
            int awaited = hvdc__exchange_awaited(&s->exchange);
            pthread_mutex_lock(&rt->queue_mutex);
            if (awaited) break;
            continue;
        }
        if (negotiating == 0 && s->n_gpu_work > 0) { /* woken by the backend, or looks again */
            struct timespec soon = hvdc__deadline_in(HVDC_DEVICE_POLL_S);
            pthread_cond_timedwait(&rt->queue_cond, &rt->queue_mutex, &soon);
            continue;
        }
        if (negotiating == 0) {
            pthread_cond_wait(&rt->queue_cond, &rt->queue_mutex);
            continue;
        }
        if (progressed) break;
        if (pthread_cond_timedwait(&rt->queue_cond, &rt->queue_mutex, &deadline) == ETIMEDOUT) break;
    }
    hvdc_op *fresh = rt->queue_head;
    rt->queue_head = rt->queue_tail = NULL;
    int64_t now = hvdc__now_ns();
    for (hvdc_op *op = fresh; op; op = op->next) {
        op->announced = 1;
        op->phase_at[HVDC_PHASE_NEGOTIATE] = now;
    }
    *shutdown = rt->shutdown_requested;
    pthread_mutex_unlock(&rt->queue_mutex);
    return fresh;
}

/* This rank has called hvd_join and waits for the others: it holds no op for the all-reduces
 * the others run meanwhile, so it builds stand-in ops that contribute neutral values (0 for a
 * sum, 1 for a product, ...) in the same tensor layout, and discards the results. */
static hvd_status stand_in_ops(const hvdc_wire_response *r, hvdc_op **ops, hvdc_buffer *identity,
                               hvdc_buffer *discard) {
    hvd_dtype dtype = (hvd_dtype)r->dtype;
    size_t largest = 0, elem = hvd_dtype_size(dtype);
    for (uint32_t k = 0; k < r->n_counts; k++)
        if (r->counts[k] > largest) largest = r->counts[k];
    hvd_status st = hvdc__buffer_reserve(identity, largest * elem);
    if (st == HVD_OK) st = hvdc__buffer_reserve(discard, largest * elem);
    if (st != HVD_OK) return st;
    hvdc__fill_identity(identity->data, largest, dtype, (hvd_reduce_op)r->op);
    size_t next = 0;
    for (uint32_t i = 0; i < r->n_names; i++) {
        hvdc_op *op = hvdc__op_create(r->tensors_per_name[i]);
        if (!op) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for a joined rank's stand-in");
        op->desc.kind = HVDC_KIND_ALLREDUCE;
        op->desc.dtype = r->dtype;
        op->desc.op = r->op;
        for (size_t k = 0; k < op->n_tensors; k++)
            op->tensors[k] = (hvdc_tensor){r->names[i], identity->data, discard->data, (size_t)r->counts[next++], 0};
        ops[i] = op;
    }
    return HVD_OK;
}

/* A barrier the others submitted while this rank had joined was refused without it: its
 * count moves past that barrier's, so the next hvd_barrier on every rank has the same name.
 * (Otherwise this rank's next barrier is named after one the others already spent, and the
 * two wait for each other for ever.) */
static void skip_refused_barriers(hvdc_runtime *rt, const hvdc_wire_response *r) {
    if (r->kind != HVDC_KIND_BARRIER) return;
    size_t prefix = strlen(HVDC_BARRIER_PREFIX);
    for (uint32_t i = 0; i < r->n_names; i++) {
        if (strncmp(r->names[i], HVDC_BARRIER_PREFIX, prefix) != 0) continue;
        unsigned long long n = strtoull(r->names[i] + prefix, NULL, 10);
        pthread_mutex_lock(&rt->queue_mutex);
        if (rt->barrier_count <= n) rt->barrier_count = n + 1;
        pthread_mutex_unlock(&rt->queue_mutex);
    }
}

/* Rank 0, once: the cache is full, and keeps the names it has (cache.h). Horovod evicts and
 * warns; here a name first seen from now on is negotiated in full every time. */
static void tell_cache_full(round_state *s) {
    if (hvdc__cache_capacity(s->cache) == 0 || s->told_cache_full || s->rt->topo.rank != 0)
        return; /* HVD_CACHE_CAPACITY=0 asked for no cache */
    s->told_cache_full = 1;
    HVDC_LOG(HVDC_LOG_WARNING, "the response cache is full (%u names, HVD_CACHE_CAPACITY): "
             "a name first seen from now on is negotiated in full every time, and never runs "
             "on the caller's thread. An unnamed all-reduce gets a new name every call "
             "(allreduce.noname.N in Python), so one every step fills the cache: name it, or "
             "raise HVD_CACHE_CAPACITY", hvdc__cache_capacity(s->cache));
}

/* After a named all-reduce ran on every rank (none joined), every rank caches each op's
 * request, in response order, so the slots stay the same everywhere (cache.h). Before the ops
 * complete: a completed op may be freed by its waiter. */
static void remember(round_state *s, const hvdc_wire_response *r, hvdc_op **ops, size_t n) {
    if (r->type != HVDC_RESPONSE_EXECUTE || r->slots || r->n_joined > 0) return;
    for (size_t i = 0; i < n; i++)
        if (hvdc__cache_cacheable(&ops[i]->desc) && hvdc__cache_put(s->cache, &ops[i]->desc) < 0)
            tell_cache_full(s);
}

/* HVD_AUTOTUNE on rank 0: an all-reduce of host tensors that ran is one observation. When a
 * trial ends it is logged and the next setting applied: the threshold to this rank's
 * negotiator (the only reader), the cycle time and shared-memory step to every rank with the
 * next answer. */
static void autotune_observe(round_state *s, hvdc_wire_response *r, hvdc_op **ops, size_t n) {
    if (!s->tuning || r->kind != HVDC_KIND_ALLREDUCE || r->n_joined > 0 || ops[0]->desc.device >= 0)
        return;
    hvdc__cache_fill_names(s->cache, r);
    uint64_t bytes = 0;
    size_t elem = hvd_dtype_size((hvd_dtype)ops[0]->desc.dtype);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < ops[i]->n_tensors; k++) bytes += ops[i]->tensors[k].count * elem;
    hvdc_autotune *t = &s->tune;
    double cycle_before = t->cycle_ms;
    size_t step_before = t->shm_step;
    if (!hvdc__autotune_observe(t, (const char (*)[HVD_MAX_NAME_LEN + 1])r->names, r->n_names,
                                bytes, hvdc__now_seconds()))
        return;
    s->exchange.fusion_threshold = t->threshold;
    if (t->cycle_ms != cycle_before || t->shm_step != step_before) { /* both travel together */
        s->exchange.tune_cycle_ms = t->cycle_ms;
        s->exchange.tune_shm_step = t->shm_step;
    }
    int settled = t->phase == HVDC_AUTOTUNE_SETTLED;
    FILE *log = s->rt->autotune_log;
    if (log && (hvdc__autotune_write_row(log, &t->results[t->n_results - 1], 0) != 0 ||
                (settled && hvdc__autotune_write_row(log, &t->chosen, 1) != 0))) {
        HVDC_LOG(HVDC_LOG_WARNING, "HVD_AUTOTUNE_LOG: cannot write: %s; no more rows", strerror(errno));
        fclose(log);
        s->rt->autotune_log = NULL;
    }
    if (!settled) return;
    s->tuning = 0; /* nothing more to observe: every later all-reduce skips this function */
    HVDC_LOG(HVDC_LOG_INFO, "autotune settled after %d trials: fusion threshold %zu bytes, "
             "cycle time %g ms, shared-memory step %zu bytes (%.3g GB/s)", t->n_results,
             t->threshold, t->cycle_ms, t->shm_step, t->chosen.score * 1e-9);
}

/* This rank's ops for r, into ops: where the announcements left them (by slot), or by name from
 * the in-flight table. *joined: this rank has called hvd_join and waits for the others.
 * @return how many were found. */
static size_t find_ops(round_state *s, hvdc_wire_response *r, hvdc_op **ops, int *joined) {
    hvdc_runtime *rt = s->rt;
    size_t n = 0;
    *joined = 0;
    if (r->slots && r->n_joined == 0) {
        /* every rank announced these by slot, this one too, since its last response for each:
         * the ops are where the announcements left them, no name to look up */
        for (uint32_t i = 0; i < r->n_names; i++) {
            hvdc_op *op = s->slot_ops[r->slots[i]];
            s->slot_ops[r->slots[i]] = NULL;
            if (op) ops[n++] = op;
        }
        return n;
    }
    hvdc__cache_fill_names(s->cache, r); /* for the lookups and a joined rank's stand-ins */
    pthread_mutex_lock(&rt->queue_mutex);
    for (uint32_t i = 0; i < r->n_names; i++) {
        hvdc_op *op = hvdc__name_table_get(&rt->in_flight, r->names[i]);
        if (op) ops[n++] = op;
    }
    *joined = hvdc__name_table_get(&rt->in_flight, HVDC_JOIN_NAME) != NULL;
    pthread_mutex_unlock(&rt->queue_mutex);
    return n;
}

/* Others' operations while this rank has joined: stand-ins take its part and their results are
 * discarded. @return HVD_OK while the ranks stay in step. */
static hvd_status run_joined(round_state *s, hvdc_wire_response *r, hvdc_op **ops) {
    hvd_status st = HVD_OK;
    memset(ops, 0, r->n_names * sizeof *ops); /* stand-ins not made are NULL when freed */
    if (r->type == HVDC_RESPONSE_ERROR) skip_refused_barriers(s->rt, r);
    if (r->type == HVDC_RESPONSE_EXECUTE) {
        st = stand_in_ops(r, ops, &s->identity, &s->discard);
        hvdc_gpu_pending *none = NULL;
        if (st == HVD_OK) {
            hvdc_outcome out = hvdc__execute(&s->rt->executor, r, ops, r->n_names, &none);
            st = out.in_step ? HVD_OK : out.status;
        }
    }
    for (uint32_t i = 0; i < r->n_names; i++) hvdc__op_free(ops[i]);
    return st;
}

/* The timeline's rows for ops up to rank 0's answer (at answered): the wait for other ranks,
 * WAIT_FOR_RANKS in earlier rounds, then NEGOTIATE in the one that answered, each naming
 * last_rank, the rank it waited for last (-1: not known). */
static void negotiation_spans(round_state *s, hvdc_op **ops, size_t n, int64_t answered,
                              int64_t group, int last_rank) {
    hvdc_timeline *tl = s->rt->executor.timeline;
    if (!hvdc__timeline_recording(tl)) return; /* else no call a tensor (rank 0 has tl) */
    for (size_t i = 0; i < n; i++) {
        int64_t from = ops[i]->announced_us;
        for (size_t k = 0; k < ops[i]->n_tensors; k++) {
            const char *name = ops[i]->tensors[k].name;
            if (from < s->round_started_us)
                hvdc__timeline_wait_span(tl, name, "WAIT_FOR_RANKS", from, s->round_started_us,
                                         group, last_rank);
            hvdc__timeline_wait_span(tl, name, "NEGOTIATE",
                                     from < s->round_started_us ? s->round_started_us : from,
                                     answered, group, last_rank);
        }
    }
}

/* HVD_REPORT on rank 0: a response that ran, seconds of host work. */
static void report_response(round_state *s, const hvdc_wire_response *r, hvdc_op *const *ops,
                            size_t n, double seconds) {
    size_t tensors = 0;
    uint64_t bytes = 0, elem = hvd_dtype_size((hvd_dtype)ops[0]->desc.dtype);
    for (size_t i = 0; i < n; i++) {
        tensors += ops[i]->n_tensors;
        for (size_t k = 0; k < ops[i]->n_tensors; k++) bytes += ops[i]->tensors[k].count * elem;
    }
    hvdc__report_response(s->rt->report, r, s->cache, tensors, bytes, seconds);
}

/* Executes an EXECUTE response over this rank's ops and completes them (device work: once it
 * finishes, hvdc__device_work_finish). @return HVD_OK while the ranks stay in step. */
static hvd_status execute_response(round_state *s, hvdc_wire_response *r, hvdc_op **ops, size_t n,
                                   int64_t answered, int64_t group) {
    hvdc_runtime *rt = s->rt;
    hvdc_timeline *tl = rt->executor.timeline;
    hvdc__clear_error();
    hvdc_gpu_pending *pending = NULL;
    double started = rt->report ? hvdc__now_seconds() : 0;
    hvdc_outcome out = hvdc__execute(&rt->executor, r, ops, n, &pending);
    /* a watchdog that fired failed the ops (maybe freed now) and made execute fail */
    if (out.status != HVD_OK && hvdc__watchdog_fired(rt->executor.watchdog)) return out.status;
    if (out.status == HVD_OK) {
        if (rt->report) report_response(s, r, ops, n, pending ? 0 : hvdc__now_seconds() - started);
        remember(s, r, ops, n);
        autotune_observe(s, r, ops, n);
    }
    if (out.status == HVD_OK && pending) {
        hvd_status kept = hvdc__device_work_keep(s, pending, ops, n);
        if (kept == HVD_OK) return HVD_OK;
        hvdc__gpu_pending_free(pending);
        out = hvdc__ran(kept); /* this rank cannot follow work that runs on every rank */
    }
    if (tl && r->kind != HVDC_KIND_ALLREDUCE)
        op_span(tl, ops[0], hvdc__kind_name(r->kind), answered, hvdc__timeline_now_us(tl), group);
    hvdc__complete_ops(rt, ops, n, out.status, hvd_last_error());
    s->n_in_flight -= n;
    /* a collective that failed midway leaves the ranks out of step; one that every rank
     * refused before moving data (memory it could not get) does not */
    return out.in_step ? HVD_OK : out.status;
}

/* Runs one response and completes its ops; last_rank: the rank it waited for last (rank 0 with
 * a timeline or HVD_REPORT; else -1). @return HVD_OK while the ranks stay in step. */
static hvd_status run_response(round_state *s, hvdc_wire_response *r, int last_rank) {
    hvdc_runtime *rt = s->rt;
    if (s->fault_run ||
        hvdc__buffer_reserve(&s->response_ops, (r->n_names ? r->n_names : 1) * sizeof(hvdc_op *)) != HVD_OK)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory running a response%s",
                          s->fault_run ? " (HVDC_TEST_FAULTS=run_response)" : "");
    hvdc_op **ops = s->response_ops.data;
    int joined = 0;
    size_t n = find_ops(s, r, ops, &joined);
    int64_t now = hvdc__now_ns();
    for (size_t i = 0; i < n; i++) ops[i]->phase_at[HVDC_PHASE_EXECUTE] = now;
    if (n == 0 && joined && (r->type == HVDC_RESPONSE_ERROR || r->n_joined > 0))
        return run_joined(s, r, ops);
    if (n != r->n_names)
        return hvdc__fail(HVD_ERR_INTERNAL, "rank 0 scheduled '%s', which this rank never announced",
                          r->names[0]);
    int64_t answered = hvdc__timeline_now_us(rt->executor.timeline), group = ++rt->executor.group;
    negotiation_spans(s, ops, n, answered, group, last_rank);
    if (r->type == HVDC_RESPONSE_EXECUTE) return execute_response(s, r, ops, n, answered, group);
    /* a mismatch: refused on every rank alike */
    hvdc__complete_ops(rt, ops, n, HVD_ERR_MISMATCH, r->error);
    s->n_in_flight -= n;
    return HVD_OK;
}

/* When this rank was ready with the newest of the ops it is about to announce (newest: its
 * hvdc__now_ns stamp, 0 for none): microseconds after it received rank 0's last answer
 * (capped), from which rank 0 dates it on its own clock (negotiation/arrivals.h). */
static int32_t ready_us(const round_state *s, int64_t newest) {
    if (!newest) return 0;
    double us = ((double)newest * 1e-9 - s->exchange.answered_at) * 1e6;
    return us < INT32_MIN ? INT32_MIN : us > INT32_MAX ? INT32_MAX : (int32_t)us;
}

/* Holds the thread until hvd_init has agreed with every rank. @return 1 to run. */
static int wait_for_start(hvdc_runtime *rt) {
    pthread_mutex_lock(&rt->queue_mutex);
    while (rt->start_decision == 0) pthread_cond_wait(&rt->queue_cond, &rt->queue_mutex);
    int run = rt->start_decision > 0;
    pthread_mutex_unlock(&rt->queue_mutex);
    return run;
}

/* The thread's state before its first round: the device wake-up, the response cache, the
 * exchange, autotuning. */
static hvd_status round_setup(round_state *s) {
    hvdc_runtime *rt = s->rt;
    rt->executor.gpu_wake = hvdc__device_work_wake; /* before a device response makes the backend */
    rt->executor.gpu_wake_ctx = rt;
    rt->executor.gpu_aborted = &rt->device_aborted;
    s->fault_encode = hvdc__fault("encode_requests"); /* tests: read once, off the hot path */
    s->fault_run = hvdc__fault("run_response");
    s->cache = hvdc__cache_create((uint32_t)rt->config.cache_capacity);
    s->slot_ops = calloc(hvdc__cache_capacity(s->cache) + (size_t)1, sizeof *s->slot_ops);
    if (!s->cache || !s->slot_ops)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the response cache");
    pthread_mutex_lock(&rt->executor_token); /* callers look their requests up (caller_path.h) */
    rt->token_cache = s->cache;
    pthread_mutex_unlock(&rt->executor_token);
    s->exchange = (hvdc_exchange){
        .comm = rt->control_comm, .rank = rt->topo.rank, .size = rt->topo.size,
        .stall_check_s = rt->config.stall_check_s, .stall_shutdown_s = rt->config.stall_shutdown_s,
        .fusion_threshold = rt->config.fusion_threshold_bytes,
        .gpu_fusion_threshold = rt->config.gpu_fusion_threshold_bytes,
        .liveness = rt->executor.liveness, .cache = s->cache, .between_steps = between_steps,
        .stall_verdict = deliver_verdict, .peers = rt->peers, .ctx = s, .tune_cycle_ms = -1,
    };
    hvd_status st = hvdc__exchange_init(&s->exchange);
    if (st != HVD_OK) return st;
    if (rt->report)
        hvdc__report_attach(rt->report, hvdc__negotiator_arrivals(s->exchange.negotiator));
    s->cycle_ms = rt->config.cycle_time_ms;
    s->tuning = rt->config.autotune && rt->topo.rank == 0;
    if (s->tuning)
        hvdc__autotune_init(&s->tune, rt->config.fusion_threshold_bytes, rt->config.cycle_time_ms,
                            rt->executor.shm ? hvdc__shm_step(rt->executor.shm) : 0);
    return HVD_OK;
}

/* Room for n announcements in s->fresh_descs and s->fresh_slots. */
static hvd_status reserve_announcements(round_state *s, size_t n) {
    if (n <= s->fresh_cap) return HVD_OK;
    size_t cap = n * 2;
    const hvdc_wire_request **grown = realloc(s->fresh_descs, cap * sizeof *grown);
    if (grown) s->fresh_descs = grown;
    uint32_t *grown_slots = realloc(s->fresh_slots, cap * sizeof *grown_slots);
    if (grown_slots) s->fresh_slots = grown_slots;
    if (!grown || !grown_slots)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory taking %zu requests", n);
    s->fresh_cap = cap;
    return HVD_OK;
}

/* Starts a round with fresh, the ops submitted since the last one: each goes as its cache slot
 * when its request is exactly as cached (cache.h), else in full; the list is encoded into the
 * exchange's message. *n_announced: how many. */
static hvd_status announce(round_state *s, hvdc_op *fresh, int shutdown, size_t *n_announced) {
    size_t n_fresh = 0, n_slots = 0;
    int64_t newest = 0; /* the latest submission among them */
    for (hvdc_op *op = fresh; op; op = op->next) n_fresh++;
    hvd_status st = reserve_announcements(s, n_fresh);
    if (st != HVD_OK) return st;
    n_fresh = 0;
    hvdc_timeline *tl = s->rt->executor.timeline;
    s->round_started_us = hvdc__timeline_now_us(tl);
    hvdc__timeline_cycle(tl, s->round_started_us, ++s->rounds);
    int spans = hvdc__timeline_recording(tl);
    if (spans && s->exchange.negotiator) /* rank 0: the spans name the last rank */
        hvdc__negotiator_arrivals(s->exchange.negotiator);
    for (hvdc_op *op = fresh; op; op = op->next) {
        int64_t slot = hvdc__cache_lookup(s->cache, &op->desc);
        if (slot >= 0) {
            s->fresh_slots[n_slots++] = (uint32_t)slot;
            s->slot_ops[slot] = op; /* its response names the slot (find_ops) */
        } else {
            s->fresh_descs[n_fresh++] = &op->desc;
        }
        op->announced_us = s->round_started_us;
        if (op->phase_at[HVDC_PHASE_QUEUED] > newest) newest = op->phase_at[HVDC_PHASE_QUEUED];
        if (spans)
            op_span(tl, op, "QUEUED", hvdc__timeline_us_at(tl, op->phase_at[HVDC_PHASE_QUEUED]),
                    op->announced_us, -1);
    }
    s->n_in_flight += n_fresh + n_slots;
    *n_announced = n_fresh + n_slots;
    if (s->fault_encode ||
        hvdc__wire_encode_requests(&s->exchange.message, shutdown ? HVDC_FLAG_SHUTDOWN : 0,
                                   s->fresh_descs, (uint32_t)n_fresh, s->fresh_slots,
                                   (uint32_t)n_slots, ready_us(s, newest)) != 0)
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory encoding %zu requests%s", n_fresh,
                          s->fault_encode ? " (HVDC_TEST_FAULTS=encode_requests)" : "");
    return HVD_OK;
}

/* What rank 0's answer carries besides the responses, on every rank before they run:
 * negotiation's cost so far (for hvdc__negotiation_stats) and autotuning's next setting. */
static void take_answer(round_state *s, const hvdc_response_list *responses) {
    hvdc_runtime *rt = s->rt;
    atomic_store(&rt->stat_rounds, s->exchange.rounds);
    atomic_store(&rt->stat_bytes_sent, s->exchange.bytes_sent);
    atomic_store(&rt->stat_bytes_received, s->exchange.bytes_received);
    if (responses->flags & HVDC_FLAG_TUNE) {
        s->cycle_ms = responses->cycle_time_ms;
        if (responses->shm_step_bytes && rt->executor.shm)
            hvdc__shm_set_step(rt->executor.shm, responses->shm_step_bytes);
    }
}

/* One round: announce fresh, exchange with rank 0, run its responses in order. *progressed:
 * the round announced or ran something; *stop_now: every rank asked to shut down; *told: the
 * round's error is rank 0's abort, which every rank heard. */
static hvd_status run_round(round_state *s, hvdc_op *fresh, int shutdown, int *progressed,
                            int *stop_now, int *told) {
    size_t n_announced = 0;
    hvd_status st = announce(s, fresh, shutdown, &n_announced);
    if (st != HVD_OK) return st;
    hvdc_response_list responses = {0};
    st = hvdc__exchange_round(&s->exchange, &responses);
    if (st != HVD_OK) return st;
    /* the executor and the cache are this thread's until the responses ran (caller_path.h) */
    pthread_mutex_lock(&s->rt->executor_token);
    take_answer(s, &responses);
    if (responses.flags & HVDC_FLAG_ABORT) {
        pthread_mutex_unlock(&s->rt->executor_token);
        *told = 1; /* rank 0 stopped every rank */
        st = hvdc__fail(HVDC_ABORT_STATUS(responses.flags), "%s",
                        responses.reason ? responses.reason : "rank 0 stopped the job");
        hvdc__response_list_free(&responses);
        return st;
    }
    for (uint32_t i = 0; i < responses.n && st == HVD_OK; i++)
        st = run_response(s, &responses.items[i],
                          responses.last_ranks ? responses.last_ranks[i] : -1);
    pthread_mutex_unlock(&s->rt->executor_token);
    if (s->rt->report) {
        hvdc__report_round(s->rt->report);
        hvdc__report_tick(s->rt->report, hvdc__now_seconds());
    }
    *progressed = n_announced > 0 || responses.n > 0;
    *stop_now = (responses.flags & HVDC_FLAG_SHUTDOWN) != 0;
    hvdc__response_list_free(&responses);
    return st;
}

/* The thread stops on st (message recorded): an error of this rank's own is told to every
 * rank, which may wait for this one in negotiation or inside a collective; device work and
 * every op still held fail with it. */
static void stop_on_error(round_state *s, hvd_status st, int told) {
    hvdc_runtime *rt = s->rt;
    HVDC_LOG(HVDC_LOG_ERROR, "background thread stopping: %s", hvd_last_error());
    char message[HVDC_ERROR_MAX];
    snprintf(message, sizeof message, "%s", hvd_last_error());
    if (st != HVD_ERR_RANK_FAILED && !told && !s->exchange.aborted) {
        hvdc__liveness_tell_stopped(rt->executor.liveness, message);
        hvdc__note_told(rt);
    }
    hvdc__device_work_drain(s, st, message);
    hvdc__fail_everything(rt, st, message);
}

static void round_free(round_state *s) {
    pthread_mutex_lock(&s->rt->executor_token);
    s->rt->token_cache = NULL;
    pthread_mutex_unlock(&s->rt->executor_token);
    hvdc__exchange_free(&s->exchange);
    free(s->gpu_work);
    hvdc__buffer_free(&s->identity);
    hvdc__buffer_free(&s->discard);
    hvdc__buffer_free(&s->response_ops);
    free(s->fresh_descs);
    free(s->fresh_slots);
    hvdc__cache_destroy(s->cache);
    free(s->slot_ops);
}

void *hvdc__background_main(void *arg) {
    round_state s = {.rt = arg};
    hvdc_runtime *rt = s.rt;
    if (!wait_for_start(rt)) return NULL;
    int progressed = 0, shutdown = 0, stop_now = 0;
    int told = 0; /* the error that stops this thread reached every rank already */
    hvd_status st = round_setup(&s);
    while (st == HVD_OK && !stop_now) {
        hvdc_op *fresh = wait_for_work(&s, progressed, &shutdown, &st); /* completes device work too */
        if (st == HVD_OK) st = run_round(&s, fresh, shutdown, &progressed, &stop_now, &told);
    }
    /* device work already queued finishes; only the rest fails */
    if (st == HVD_OK) st = hvdc__device_work_drain(&s, HVD_OK, NULL);
    if (st == HVD_OK)
        hvdc__fail_everything(rt, HVD_ERR_SHUTDOWN,
                              "libhvdc was shut down (hvd_shutdown on this or another rank) "
                              "before this operation completed");
    else
        stop_on_error(&s, st, told);
    round_free(&s);
    return NULL;
}
