/*
 * background.c - the background thread: the only thread that talks to the network.
 *
 * It sleeps on queue_cond while this rank has nothing in flight. Once it has, it runs rounds:
 *   1. take the ops submitted since the last round;
 *   2. negotiate: every rank sends rank 0 its new announcements (MPI_Gather/Gatherv), rank 0
 *      answers everyone with the same response list (MPI_Bcast);
 *   3. execute the responses in order, and complete their ops.
 * A round is collective, so it starts only when every rank has something in flight; a rank with
 * nothing to do sleeps instead of cycling. A round that changed nothing (names still waiting
 * for other ranks) is followed by a wait of at most HVD_CYCLE_TIME for new submissions, so
 * stuck rounds are paced while a fresh submission still starts a round at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "negotiate.h"
#include "runtime.h"
#include "status.h"

typedef struct round_state {
    hvdc_runtime *rt;
    hvdc_negotiator *negotiator; /* rank 0 only */
    hvdc_bytes message, gathered, answer;
    int *lengths, *displs;       /* (size) rank 0 only */
    size_t n_in_flight;          /* announced ops not yet completed */
} round_state;

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
    *shutdown = rt->shutdown_requested;
    pthread_mutex_unlock(&rt->queue_mutex);
    return fresh;
}

/* Rank 0: decode every rank's message, feed the negotiator, encode the answer. */
static hvd_status coordinate(round_state *s) {
    hvd_status st = HVD_OK;
    hvdc_runtime *rt = s->rt;
    hvdc_response_list responses = {0};
    for (int r = 0; r < rt->topo.size; r++) {
        hvdc_request_list list;
        const char *why = NULL;
        if (hvdc__wire_decode_requests(s->gathered.data + s->displs[r], (size_t)s->lengths[r],
                                       &list, &why) != 0) {
            st = hvdc__fail(HVD_ERR_INTERNAL, "rank %d sent a damaged negotiation message: %s", r, why);
            goto fail;
        }
        st = hvdc__negotiator_add(s->negotiator, r, &list);
        if (st != HVD_OK) {
            st = hvdc__fail(st, "rank %d announced a name it already had in flight", r);
            goto fail;
        }
    }
    CHECK(hvdc__negotiator_respond(s->negotiator, rt->config.fusion_threshold_bytes, &responses));
    if (hvdc__wire_encode_responses(&s->answer, &responses) != 0)
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory encoding %u responses", responses.n);
fail:
    hvdc__response_list_free(&responses);
    return st;
}

/* One negotiation: this rank's announcements in, everyone's response list out. */
static hvd_status negotiate(round_state *s, hvdc_response_list *responses) {
    hvd_status st = HVD_OK;
    hvdc_runtime *rt = s->rt;
    int root = 0, is_root = rt->topo.rank == 0, length = (int)s->message.len, answer_len = 0;
    CHECK_MPI(MPI_Gather(&length, 1, MPI_INT, s->lengths, 1, MPI_INT, root, rt->control_comm));
    if (is_root) {
        size_t total = 0;
        for (int r = 0; r < rt->topo.size; r++) {
            s->displs[r] = (int)total;
            total += (size_t)s->lengths[r];
        }
        if (total > s->gathered.cap) {
            void *grown = realloc(s->gathered.data, total);
            if (!grown) {
                st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for %zu bytes of requests", total);
                goto fail;
            }
            s->gathered.data = grown;
            s->gathered.cap = total;
        }
    }
    CHECK_MPI(MPI_Gatherv(s->message.data, length, MPI_BYTE, s->gathered.data, s->lengths,
                          s->displs, MPI_BYTE, root, rt->control_comm));
    if (is_root) {
        hvd_status coordinated = coordinate(s);
        if (coordinated != HVD_OK) {
            /* tell everyone to stop rather than leave them waiting in the broadcast */
            HVDC_LOG(HVDC_LOG_ERROR, "coordinator failed, stopping every rank: %s", hvd_last_error());
            hvdc_response_list stop = {HVDC_FLAG_SHUTDOWN, 0, NULL};
            hvdc__wire_encode_responses(&s->answer, &stop);
        }
        answer_len = (int)s->answer.len;
    }
    CHECK_MPI(MPI_Bcast(&answer_len, 1, MPI_INT, root, rt->control_comm));
    if (!is_root && (size_t)answer_len > s->answer.cap) {
        void *grown = realloc(s->answer.data, (size_t)answer_len);
        if (!grown) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for %d bytes of responses", answer_len);
            goto fail;
        }
        s->answer.data = grown;
        s->answer.cap = (size_t)answer_len;
    }
    CHECK_MPI(MPI_Bcast(s->answer.data, answer_len, MPI_BYTE, root, rt->control_comm));
    const char *why = NULL;
    if (hvdc__wire_decode_responses(s->answer.data, (size_t)answer_len, responses, &why) != 0)
        st = hvdc__fail(HVD_ERR_INTERNAL, "damaged response list from rank 0: %s", why);
fail:
    return st;
}

/* Executes one response and completes its ops. */
static hvd_status run_response(round_state *s, const hvdc_wire_response *r) {
    hvdc_runtime *rt = s->rt;
    hvdc_op **ops = malloc(r->n_names * sizeof *ops);
    if (!ops) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory running a response");
    pthread_mutex_lock(&rt->queue_mutex);
    size_t n = 0;
    for (uint32_t i = 0; i < r->n_names; i++) {
        hvdc_op *op = hvdc__name_table_get(&rt->in_flight, r->names[i]);
        if (op) ops[n++] = op;
    }
    pthread_mutex_unlock(&rt->queue_mutex);
    if (n != r->n_names) {
        free(ops);
        return hvdc__fail(HVD_ERR_INTERNAL, "rank 0 scheduled '%s', which this rank never announced",
                          r->names[0]);
    }
    hvd_status st = HVD_OK;
    if (r->type == HVDC_RESPONSE_ERROR) {
        complete_ops(rt, ops, n, HVD_ERR_MISMATCH, r->error);
    } else {
        hvdc__clear_error();
        st = hvdc__execute(&rt->executor, r, ops, n);
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
        s.lengths = calloc((size_t)rt->topo.size, sizeof *s.lengths);
        s.displs = calloc((size_t)rt->topo.size, sizeof *s.displs);
        if (!s.negotiator || !s.lengths || !s.displs) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory starting the coordinator");
            goto stop;
        }
    }
    for (;;) {
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
        for (hvdc_op *op = fresh; op; op = op->next) fresh_descs[n_fresh++] = &op->desc;
        s.n_in_flight += n_fresh;

        if (hvdc__wire_encode_requests(&s.message, shutdown ? HVDC_FLAG_SHUTDOWN : 0, fresh_descs,
                                       (uint32_t)n_fresh) != 0) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory encoding %zu requests", n_fresh);
            goto stop;
        }
        hvdc_response_list responses = {0};
        CHECK(negotiate(&s, &responses));
        for (uint32_t i = 0; i < responses.n && st == HVD_OK; i++)
            st = run_response(&s, &responses.items[i]);
        progressed = n_fresh > 0 || responses.n > 0;
        int stop_now = (responses.flags & HVDC_FLAG_SHUTDOWN) != 0;
        hvdc__response_list_free(&responses);
        if (st != HVD_OK) goto fail;
        if (stop_now) break;
    }
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
        fail_everything(rt, st, message);
    }
done:
    hvdc__negotiator_destroy(s.negotiator);
    hvdc__bytes_free(&s.message);
    hvdc__bytes_free(&s.gathered);
    hvdc__bytes_free(&s.answer);
    free(s.lengths);
    free(s.displs);
    free(fresh_descs);
    return NULL;
}
