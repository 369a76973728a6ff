/*
 * background.c - the background thread: the only thread that talks to the network.
 *
 * It sleeps on queue_cond while this rank has nothing in flight. Once it has, it runs rounds:
 *   1. take the ops submitted since the last round;
 *   2. negotiate: every rank sends rank 0 its new announcements, rank 0 answers every rank
 *      with the same response list (point-to-point, so rank 0 sees who has not joined yet and
 *      can report stalls while it waits);
 *   3. execute the responses in order, and complete their ops.
 * A round is collective, so it starts only when every rank has something in flight; a rank with
 * nothing to do sleeps instead of cycling. A round that changed nothing (names still waiting
 * for other ranks) is followed by a wait of at most HVD_CYCLE_TIME for new submissions, so
 * stuck rounds are paced while a fresh submission still starts a round at once.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "log.h"
#include "negotiate.h"
#include "reduce.h"
#include "runtime.h"
#include "status.h"

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

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Records phase on the timeline row of every tensor of op. */
static void op_span(hvdc_timeline *tl, const hvdc_op *op, const char *phase, int64_t start,
                    int64_t end, int64_t group) {
    for (size_t k = 0; k < op->n_tensors; k++)
        hvdc__timeline_span(tl, op->tensors[k].name, phase, start, end, group);
}

/* Marks ops done with status and message, wakes waiters. */
static void complete_ops(hvdc_runtime *rt, hvdc_op **ops, size_t n, hvd_status status,
                         const char *message) {
    pthread_mutex_lock(&rt->queue_mutex);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < ops[i]->n_tensors; k++)
            hvdc__name_table_remove(&rt->in_flight, ops[i]->tensors[k].name);
    pthread_mutex_unlock(&rt->queue_mutex);
    pthread_mutex_lock(&rt->completion_mutex);
    for (size_t i = 0; i < n; i++) {
        ops[i]->status = status;
        if (status != HVD_OK) ops[i]->error = strdup(message ? message : hvd_status_string(status));
        ops[i]->done = 1;
    }
    pthread_cond_broadcast(&rt->completion_cond);
    pthread_mutex_unlock(&rt->completion_mutex);
}

/* SIGUSR1: print what this rank has queued, what it waits for, and on rank 0 which names
 * wait for which ranks. */
static void print_op(char *line, size_t len, size_t *at, const hvdc_op *op) {
    if (*at + 80 < len)
        *at += (size_t)snprintf(line + *at, len - *at, " %s(%s %s x%llu)", op->desc.name,
                                hvdc__kind_name(op->desc.kind), hvdc__dtype_name(op->desc.dtype),
                                (unsigned long long)(op->desc.n_counts ? op->desc.counts[0] : 0));
}

typedef struct dump_scan {
    char queued[2048], announced[2048];
    size_t at_queued, at_announced, n_queued, n_announced;
    const hvdc_op *last; /* grouped ops appear once per member name */
} dump_scan;

static void dump_op(void *value, void *ctx) {
    dump_scan *d = ctx;
    const hvdc_op *op = value;
    if (op == d->last) return;
    d->last = op;
    if (op->announced) {
        d->n_announced++;
        print_op(d->announced, sizeof d->announced, &d->at_announced, op);
    } else {
        d->n_queued++;
        print_op(d->queued, sizeof d->queued, &d->at_queued, op);
    }
}

static void dump_state(round_state *s, const char *doing) {
    hvdc_runtime *rt = s->rt;
    dump_scan d = {.at_queued = 0};
    pthread_mutex_lock(&rt->queue_mutex);
    hvdc__name_table_each(&rt->in_flight, dump_op, &d);
    pthread_mutex_unlock(&rt->queue_mutex);
    fprintf(stderr, "[hvdc rank %d] state dump (SIGUSR1) while %s\n"
            "[hvdc rank %d]   %zu submitted, not yet announced:%s\n"
            "[hvdc rank %d]   %zu announced to rank 0, not yet executed:%s\n",
            rt->topo.rank, doing, rt->topo.rank, d.n_queued, d.queued, rt->topo.rank,
            d.n_announced, d.announced);
    if (s->negotiator) {
        char report[1200];
        double oldest = 0;
        size_t n = hvdc__negotiator_report_stalls(s->negotiator, now_seconds(), 0, report,
                                                  sizeof report, &oldest);
        fprintf(stderr, "[hvdc rank 0]   coordinator: %zu names wait for other ranks%s%s\n", n,
                n ? ":\n" : "", report);
    }
}

static void serve_dump(round_state *s, const char *doing) {
    if (atomic_load_explicit(&s->rt->dump_requested, memory_order_relaxed) &&
        atomic_exchange(&s->rt->dump_requested, 0))
        dump_state(s, doing);
}

/* ---- device work: queued by the executor, completed here when its event fires ---- */

typedef struct gpu_work {
    hvdc_gpu_pending *pending;
    hvdc_op **ops; /* (n) owned */
    size_t n;
} gpu_work;

static hvd_status keep_gpu_work(round_state *s, hvdc_gpu_pending *pending, hvdc_op **ops, size_t n) {
    if (s->n_gpu_work == s->cap_gpu_work) {
        size_t cap = s->cap_gpu_work ? 2 * s->cap_gpu_work : 16;
        gpu_work *grown = realloc(s->gpu_work, cap * sizeof *grown);
        if (!grown) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory tracking device work");
        s->gpu_work = grown;
        s->cap_gpu_work = cap;
    }
    s->gpu_work[s->n_gpu_work++] = (gpu_work){pending, ops, n};
    return HVD_OK;
}

/* Completes the device work that has finished (or, with wait, all of it). Never blocks
 * unless wait is set (shutdown). */
static void finish_gpu_work(round_state *s, int wait) {
    for (size_t i = 0; i < s->n_gpu_work;) {
        gpu_work *w = &s->gpu_work[i];
        int done = 0;
        hvdc__clear_error();
        hvd_status st = wait ? hvdc__gpu_pending_wait(w->pending)
                             : hvdc__gpu_pending_poll(w->pending, &done);
        if (!wait && !done && st == HVD_OK) {
            i++;
            continue;
        }
        complete_ops(s->rt, w->ops, w->n, st, hvd_last_error());
        s->n_in_flight -= w->n;
        hvdc__gpu_pending_free(w->pending);
        free(w->ops);
        *w = s->gpu_work[--s->n_gpu_work];
    }
}

/* Waits until there is a reason to run a round; returns the ops submitted meanwhile. */
static hvdc_op *wait_for_work(round_state *s, int progressed, int *shutdown) {
    hvdc_runtime *rt = s->rt;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    long long ns = deadline.tv_nsec + (long long)(rt->config.cycle_time_ms * 1e6);
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);

    pthread_mutex_lock(&rt->queue_mutex);
    for (;;) {
        if (atomic_load(&rt->dump_requested)) {
            pthread_mutex_unlock(&rt->queue_mutex);
            serve_dump(s, "waiting for work");
            pthread_mutex_lock(&rt->queue_mutex);
            continue;
        }
        if (rt->queue_head || rt->shutdown_requested) break;
        if (s->n_in_flight == 0) {
            pthread_cond_wait(&rt->queue_cond, &rt->queue_mutex);
            continue;
        }
        if (progressed) break;
        if (pthread_cond_timedwait(&rt->queue_cond, &rt->queue_mutex, &deadline) == ETIMEDOUT) break;
    }
    hvdc_op *fresh = rt->queue_head;
    rt->queue_head = rt->queue_tail = NULL;
    for (hvdc_op *op = fresh; op; op = op->next) op->announced = 1;
    *shutdown = rt->shutdown_requested;
    pthread_mutex_unlock(&rt->queue_mutex);
    return fresh;
}

enum { TAG_ANNOUNCE = 1, TAG_ANSWER = 2 };

static int reserve_bytes(hvdc_bytes *b, size_t n) {
    if (n <= b->cap) return 0;
    void *grown = realloc(b->data, n);
    if (!grown) return -1;
    b->data = grown;
    b->cap = n;
    return 0;
}

/* Rank 0: one rank's announcements into the negotiator. */
static hvd_status take_announcement(round_state *s, int rank, const uint8_t *data, size_t len) {
    hvdc_request_list list;
    const char *why = NULL;
    if (hvdc__wire_decode_requests(data, len, &list, &why) != 0)
        return hvdc__fail(HVD_ERR_INTERNAL, "rank %d sent a damaged negotiation message: %s", rank, why);
    hvd_status st = hvdc__negotiator_add(s->negotiator, rank, &list);
    if (st != HVD_OK) return hvdc__fail(st, "rank %d announced a name it already had in flight", rank);
    s->arrived[rank] = 1;
    return HVD_OK;
}

/* Rank 0, every HVD_STALL_CHECK_TIME: log the names some ranks wait for, and the ranks that
 * have not joined the current round; past HVD_STALL_SHUTDOWN_TIME, stop the job. */
static hvd_status inspect_stalls(round_state *s, double now, double round_started) {
    hvdc_runtime *rt = s->rt;
    double limit = rt->config.stall_check_s, oldest = 0, absent_for = now - round_started;
    char report[1200];
    size_t n = hvdc__negotiator_report_stalls(s->negotiator, now, limit, report, sizeof report, &oldest);
    size_t len = strlen(report), n_absent = 0;
    for (int r = 0; r < rt->topo.size && absent_for >= limit; r++) {
        if (s->arrived[r] || len + 32 >= sizeof report) continue;
        len += (size_t)snprintf(report + len, sizeof report - len, "%s%d",
                                n_absent++ ? "," : (n ? "\nranks " : "ranks "), r);
    }
    if (n_absent) {
        snprintf(report + len, sizeof report - len, " have not joined negotiation for %.0f s "
                 "(nothing in flight there: still computing, or stuck before submitting)", absent_for);
        if (absent_for > oldest) oldest = absent_for;
    }
    if (n == 0 && n_absent == 0) return HVD_OK;
    HVDC_LOG(HVDC_LOG_WARNING, "stall: operations submitted on some ranks but not on others "
             "(HVD_STALL_CHECK_TIME=%g s):\n%s", limit, report);
    if (rt->config.stall_shutdown_s > 0 && oldest >= rt->config.stall_shutdown_s)
        return hvdc__fail(HVD_ERR_STALLED, "stopped after HVD_STALL_SHUTDOWN_TIME=%g s of stall: %s",
                          rt->config.stall_shutdown_s, report);
    return HVD_OK;
}

/* Rank 0: this round's announcement from every rank; inspects stalls while waiting. */
static hvd_status gather_announcements(round_state *s) {
    hvd_status st = HVD_OK;
    hvdc_runtime *rt = s->rt;
    int missing = rt->topo.size - 1;
    double started = now_seconds();
    memset(s->arrived, 0, (size_t)rt->topo.size);
    hvdc__negotiator_set_time(s->negotiator, started);
    CHECK(take_announcement(s, 0, s->message.data, s->message.len));
    while (missing > 0) {
        int flag = 0, len = 0;
        MPI_Status status;
        CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, TAG_ANNOUNCE, rt->control_comm, &flag, &status));
        if (flag) {
            CHECK_MPI(MPI_Get_count(&status, MPI_BYTE, &len));
            if (reserve_bytes(&s->gathered, (size_t)len)) {
                st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for %d bytes of requests", len);
                goto fail;
            }
            CHECK_MPI(MPI_Recv(s->gathered.data, len, MPI_BYTE, status.MPI_SOURCE, TAG_ANNOUNCE,
                               rt->control_comm, MPI_STATUS_IGNORE));
            CHECK(take_announcement(s, status.MPI_SOURCE, s->gathered.data, (size_t)len));
            missing--;
            continue;
        }
        if (rt->config.stall_check_s > 0) {
            double now = now_seconds();
            if (now >= s->next_stall_check) {
                CHECK(inspect_stalls(s, now, started));
                s->next_stall_check = now + rt->config.stall_check_s;
            }
        }
        serve_dump(s, "waiting for other ranks to join the negotiation round");
        finish_gpu_work(s, 0);
        CHECK(hvdc__liveness_check(rt->executor.liveness));
        sched_yield(); /* a waiting rank gives an oversubscribed core to the compute threads */
    }
fail:
    return st;
}

/* Rank 0: answer every other rank with the same bytes. */
static hvd_status send_answer(round_state *s) {
    hvd_status st = HVD_OK;
    hvdc_runtime *rt = s->rt;
    for (int r = 1; r < rt->topo.size; r++)
        CHECK_MPI(MPI_Isend(s->answer.data, (int)s->answer.len, MPI_BYTE, r, TAG_ANSWER,
                            rt->control_comm, &s->requests[r - 1]));
    CHECK(hvdc__wait_requests(rt->topo.size - 1, s->requests, rt->executor.liveness));
fail:
    return st;
}

/* Rank 0's round: gather, negotiate, answer. A stall past HVD_STALL_SHUTDOWN_TIME answers
 * with an abort instead, so every rank stops with the same message. */
static hvd_status coordinate(round_state *s) {
    hvd_status st = HVD_OK;
    hvdc_runtime *rt = s->rt;
    hvdc_response_list responses = {0};
    hvd_status gathered = gather_announcements(s);
    if (gathered == HVD_OK && rt->config.stall_check_s > 0) {
        double now = now_seconds();
        if (now >= s->next_stall_check) {
            gathered = inspect_stalls(s, now, now);
            s->next_stall_check = now + rt->config.stall_check_s;
        }
    }
    if (gathered == HVD_ERR_STALLED) {
        responses.flags = HVDC_ABORT_FLAGS(HVD_ERR_STALLED);
        responses.reason = strdup(hvd_last_error());
        if (hvdc__wire_encode_responses(&s->answer, &responses) == 0) {
            /* small enough to go eagerly, also to ranks that have not joined this round */
            for (int r = 1; r < rt->topo.size; r++)
                MPI_Send(s->answer.data, (int)s->answer.len, MPI_BYTE, r, TAG_ANSWER, rt->control_comm);
        }
        st = hvdc__fail(HVD_ERR_STALLED, "%s", responses.reason ? responses.reason : "stall");
        goto fail;
    }
    CHECK(gathered);
    CHECK(hvdc__negotiator_respond(s->negotiator, rt->config.fusion_threshold_bytes,
                                   rt->config.gpu_fusion_threshold_bytes, &responses));
    if (hvdc__wire_encode_responses(&s->answer, &responses) != 0) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory encoding %u responses", responses.n);
        goto fail;
    }
    CHECK(send_answer(s));
fail:
    hvdc__response_list_free(&responses);
    return st;
}

/* A worker's round: announce to rank 0, wait for its answer. */
static hvd_status ask_coordinator(round_state *s) {
    hvd_status st = HVD_OK;
    hvdc_runtime *rt = s->rt;
    MPI_Request sent = MPI_REQUEST_NULL;
    CHECK_MPI(MPI_Isend(s->message.data, (int)s->message.len, MPI_BYTE, 0, TAG_ANNOUNCE,
                        rt->control_comm, &sent));
    double started = now_seconds(), next_report = started + rt->config.stall_check_s;
    for (;;) {
        int flag = 0, len = 0;
        MPI_Status status;
        CHECK_MPI(MPI_Iprobe(0, TAG_ANSWER, rt->control_comm, &flag, &status));
        if (flag) {
            CHECK_MPI(MPI_Get_count(&status, MPI_BYTE, &len));
            if (reserve_bytes(&s->answer, (size_t)len)) {
                st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for %d bytes of responses", len);
                goto fail;
            }
            CHECK_MPI(MPI_Recv(s->answer.data, len, MPI_BYTE, 0, TAG_ANSWER, rt->control_comm,
                               MPI_STATUS_IGNORE));
            s->answer.len = (size_t)len;
            break;
        }
        if (rt->config.stall_check_s > 0) {
            double now = now_seconds();
            if (now >= next_report) {
                HVDC_LOG(HVDC_LOG_WARNING, "waited %.0f s for rank 0 to answer negotiation: some ranks "
                         "have not submitted what this rank waits for (rank 0 logs which)", now - started);
                next_report = now + rt->config.stall_check_s;
            }
        }
        serve_dump(s, "waiting for rank 0's answer");
        finish_gpu_work(s, 0);
        CHECK(hvdc__liveness_check(rt->executor.liveness));
        sched_yield();
    }
    /* rank 0 has read the announcement unless it aborted; then do not wait for it */
    int done = 0;
    CHECK_MPI(MPI_Test(&sent, &done, MPI_STATUS_IGNORE));
    if (!done) {
        if (s->answer.len >= 14 && (s->answer.data[6] & HVDC_FLAG_ABORT)) MPI_Request_free(&sent);
        else CHECK(hvdc__wait_requests(1, &sent, rt->executor.liveness));
    }
fail:
    return st;
}

/* One negotiation: this rank's announcements in, everyone's response list out. */
static hvd_status negotiate(round_state *s, hvdc_response_list *responses) {
    hvd_status st = HVD_OK;
    if (s->rt->topo.rank == 0) CHECK(coordinate(s));
    else CHECK(ask_coordinator(s));
    const char *why = NULL;
    if (hvdc__wire_decode_responses(s->answer.data, s->answer.len, responses, &why) != 0)
        st = hvdc__fail(HVD_ERR_INTERNAL, "damaged response list from rank 0: %s", why);
fail:
    return st;
}

/* Executes one response and completes its ops. */
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
            op->tensors[k] = (hvdc_tensor){r->names[i], identity->data, discard->data, (size_t)r->counts[next++]};
        ops[i] = op;
    }
    return HVD_OK;
}

/* Executes one response and completes its ops. */
static hvd_status run_response(round_state *s, const hvdc_wire_response *r) {
    hvdc_runtime *rt = s->rt;
    hvdc_op **ops = calloc(r->n_names, sizeof *ops);
    if (!ops) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory running a response");
    pthread_mutex_lock(&rt->queue_mutex);
    size_t n = 0;
    for (uint32_t i = 0; i < r->n_names; i++) {
        hvdc_op *op = hvdc__name_table_get(&rt->in_flight, r->names[i]);
        if (op) ops[n++] = op;
    }
    int joined = hvdc__name_table_get(&rt->in_flight, HVDC_JOIN_NAME) != NULL;
    pthread_mutex_unlock(&rt->queue_mutex);
    hvd_status st = HVD_OK;
    if (n == 0 && joined && (r->type == HVDC_RESPONSE_ERROR || r->n_joined > 0)) {
        /* others' operations while this rank has joined */
        if (r->type == HVDC_RESPONSE_EXECUTE) {
            st = stand_in_ops(r, ops, &s->identity, &s->discard);
            hvdc_gpu_pending *none = NULL;
            if (st == HVD_OK) st = hvdc__execute(&rt->executor, r, ops, r->n_names, &none);
        }
        for (uint32_t i = 0; i < r->n_names; i++) hvdc__op_free(ops[i]);
        free(ops);
        return st;
    }
    if (n != r->n_names) {
        free(ops);
        return hvdc__fail(HVD_ERR_INTERNAL, "rank 0 scheduled '%s', which this rank never announced",
                          r->names[0]);
    }
    hvdc_timeline *tl = rt->executor.timeline;
    int64_t answered = hvdc__timeline_now_us(tl), group = ++rt->executor.group;
    for (size_t i = 0; tl && i < n; i++) {
        int64_t from = ops[i]->announced_us;
        if (from < s->round_started_us) {
            op_span(tl, ops[i], "WAIT_FOR_RANKS", from, s->round_started_us, group);
            from = s->round_started_us;
        }
        op_span(tl, ops[i], "NEGOTIATE", from, answered, group);
    }
    if (r->type == HVDC_RESPONSE_ERROR) {
        complete_ops(rt, ops, n, HVD_ERR_MISMATCH, r->error);
    } else {
        hvdc__clear_error();
        hvdc_gpu_pending *pending = NULL;
        st = hvdc__execute(&rt->executor, r, ops, n, &pending);
        if (st == HVD_OK && pending) {
            /* device work: completed by finish_gpu_work when its event fires */
            st = keep_gpu_work(s, pending, ops, n);
            if (st == HVD_OK) return HVD_OK;
            hvdc__gpu_pending_free(pending);
        }
        if (tl && r->kind != HVDC_KIND_ALLREDUCE)
            op_span(tl, ops[0], hvdc__kind_name(r->kind), answered, hvdc__timeline_now_us(tl), group);
        if (st == HVD_OK && r->kind == HVDC_KIND_JOIN && r->n_rank_counts == 1 && ops[0]->recv_count_out)
            *ops[0]->recv_count_out = (size_t)r->rank_counts[0];
        complete_ops(rt, ops, n, st, hvd_last_error());
    }
    s->n_in_flight -= n;
    free(ops);
    /* a failed collective leaves the ranks out of step: only mismatches are survivable */
    return st;
}

/* Fails every op not yet completed: in the queue or announced. */
static void fail_everything(hvdc_runtime *rt, hvd_status status, const char *message) {
    pthread_mutex_lock(&rt->queue_mutex);
    rt->stopped = 1;
    rt->stop_status = status;
    snprintf(rt->stop_message, sizeof rt->stop_message, "%s", message);
    hvdc_op *queued = rt->queue_head;
    rt->queue_head = rt->queue_tail = NULL;
    size_t n = 0, cap = rt->in_flight.count;
    hvdc_op **ops = malloc((cap ? cap : 1) * sizeof *ops);
    hvdc_op *op;
    while (ops && (op = hvdc__name_table_pop(&rt->in_flight)) != NULL) {
        int seen = 0; /* grouped ops sit in the table once per member name */
        for (size_t i = 0; i < n; i++) seen |= ops[i] == op;
        if (!seen) ops[n++] = op;
    }
    pthread_mutex_unlock(&rt->queue_mutex);
    (void)queued; /* queued ops are in in_flight too */
    if (ops) complete_ops(rt, ops, n, status, message);
    free(ops);
}

void *hvdc__background_main(void *arg) {
    round_state s = {.rt = arg};
    hvdc_runtime *rt = s.rt;
    hvd_status st = HVD_OK;
    const hvdc_wire_request **fresh_descs = NULL;
    size_t fresh_cap = 0;
    int progressed = 0, shutdown = 0;
    if (rt->topo.rank == 0) {
        s.negotiator = hvdc__negotiator_create(rt->topo.size);
        s.arrived = calloc((size_t)rt->topo.size, 1);
        s.requests = calloc((size_t)rt->topo.size, sizeof *s.requests);
        s.next_stall_check = now_seconds() + rt->config.stall_check_s;
        if (!s.negotiator || !s.arrived || !s.requests) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory starting the coordinator");
            goto stop;
        }
    }
    for (;;) {
        finish_gpu_work(&s, 0);
        hvdc_op *fresh = wait_for_work(&s, progressed, &shutdown);
        size_t n_fresh = 0;
        for (hvdc_op *op = fresh; op; op = op->next) n_fresh++;
        if (n_fresh > fresh_cap) {
            fresh_cap = n_fresh * 2;
            const hvdc_wire_request **grown = realloc(fresh_descs, fresh_cap * sizeof *grown);
            if (!grown) {
                st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory taking %zu requests", n_fresh);
                goto stop;
            }
            fresh_descs = grown;
        }
        n_fresh = 0;
        hvdc_timeline *tl = rt->executor.timeline;
        s.round_started_us = hvdc__timeline_now_us(tl);
        hvdc__timeline_cycle(tl, s.round_started_us, ++s.rounds);
        for (hvdc_op *op = fresh; op; op = op->next) {
            fresh_descs[n_fresh++] = &op->desc;
            op->announced_us = s.round_started_us;
            if (tl) op_span(tl, op, "QUEUED", op->submitted_us, op->announced_us, -1);
        }
        s.n_in_flight += n_fresh;

        if (hvdc__wire_encode_requests(&s.message, shutdown ? HVDC_FLAG_SHUTDOWN : 0, fresh_descs,
                                       (uint32_t)n_fresh) != 0) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory encoding %zu requests", n_fresh);
            goto stop;
        }
        hvdc_response_list responses = {0};
        CHECK(negotiate(&s, &responses));
        if (responses.flags & HVDC_FLAG_ABORT) {
            st = hvdc__fail(HVDC_ABORT_STATUS(responses.flags), "%s",
                            responses.reason ? responses.reason : "rank 0 stopped the job");
            hvdc__response_list_free(&responses);
            goto fail;
        }
        for (uint32_t i = 0; i < responses.n && st == HVD_OK; i++)
            st = run_response(&s, &responses.items[i]);
        progressed = n_fresh > 0 || responses.n > 0;
        int stop_now = (responses.flags & HVDC_FLAG_SHUTDOWN) != 0;
        hvdc__response_list_free(&responses);
        if (st != HVD_OK) goto fail;
        if (stop_now) break;
    }
    finish_gpu_work(&s, 1); /* device work already queued finishes; only the rest fails */
    fail_everything(rt, HVD_ERR_SHUTDOWN,
                    "libhvdc was shut down (hvd_shutdown on this or another rank) before this "
                    "operation completed");
    goto done;
fail:
stop:
    HVDC_LOG(HVDC_LOG_ERROR, "background thread stopping: %s", hvd_last_error());
    {
        char message[HVDC_ERROR_MAX];
        snprintf(message, sizeof message, "%s", hvd_last_error());
        finish_gpu_work(&s, 1);
        fail_everything(rt, st, message);
    }
done:
    hvdc__negotiator_destroy(s.negotiator);
    free(s.gpu_work);
    hvdc__bytes_free(&s.message);
    hvdc__bytes_free(&s.gathered);
    hvdc__bytes_free(&s.answer);
    free(s.arrived);
    free(s.requests);
    hvdc__buffer_free(&s.identity);
    hvdc__buffer_free(&s.discard);
    free(fresh_descs);
    return NULL;
}
