/*
 * exchange.c - one negotiation round over point-to-point messages (see exchange.h): every rank
 * sends rank 0 its new announcements; rank 0 feeds them to the negotiator as they arrive,
 * answers every rank with the same response list, and, because it sees who has not joined yet,
 * reports stalls while it waits and stops the job past HVD_STALL_SHUTDOWN_TIME.
 * Waits are Iprobe loops that call the owner's between_steps hook and pause as the liveness
 * watch's poll policy says (base/poll.h: a short spin while the application waits, else yield).
 * Background thread.
 */
#include "negotiation/exchange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/poll.h"
#include "base/status.h"
#include "base/tags.h"
#include "base/peers.h"
#include "base/tell.h"


/* Makes b hold n bytes from its start (a message being received replaces the last). */
static int reserve_message(hvdc_bytes *b, size_t n) {
    b->len = 0;
    return hvdc__bytes_reserve(b, n);
}

/* Rank 0: one rank's announcements into the negotiator, dated when that rank was ready with
 * them: its ready_us after the last answer, which every rank received when rank 0 sent it
 * (answered_at), so no clocks are compared across ranks (arrivals.h). */
static hvd_status take_announcement(hvdc_exchange *x, int rank, const uint8_t *data, size_t len) {
    hvdc_request_list list;
    const char *why = NULL;
    if (hvdc__wire_decode_requests(data, len, &list, &why) != 0)
        return hvdc__fail(HVD_ERR_INTERNAL, "rank %d sent a damaged negotiation message: %s", rank, why);
    hvdc__negotiator_set_time(x->negotiator, x->answered_at + 1e-6 * list.ready_us);
    hvd_status st = hvdc__negotiator_add(x->negotiator, rank, &list);
    if (st == HVD_ERR_NO_MEMORY)
        return hvdc__fail(st, "rank 0 ran out of memory recording rank %d's announcements%s", rank,
                          hvdc__fault("negotiator_add") ? " (HVDC_TEST_FAULTS=negotiator_add)" : "");
    if (st != HVD_OK) return hvdc__fail(st, "rank %d announced a name it already had in flight", rank);
    x->arrived[rank] = 1;
    return HVD_OK;
}

/* How often rank 0 inspects stalls: every HVD_STALL_CHECK_TIME; with reports off
 * (HVD_STALL_CHECK_TIME=0) but HVD_STALL_SHUTDOWN_TIME set, often enough to enforce it;
 * else never (0). */
static double inspect_period(const hvdc_exchange *x) {
    if (x->stall_check_s > 0) return x->stall_check_s;
    if (x->stall_shutdown_s > 0) return x->stall_shutdown_s < 1.0 ? x->stall_shutdown_s : 1.0;
    return 0;
}

/* Rank 0: the line of the stall verdict for rank r, which holds up s->missing names, and has
 * not joined the round for away_s seconds (0: it has). */
static void stall_line(const hvdc_exchange *x, int r, const hvdc_rank_stall *s, double away_s,
                       char *out, size_t len) {
    char who[160];
    size_t used =
        (size_t)snprintf(out, len, "%s", hvdc__peers_say_rank(x->peers, r, who, sizeof who));
    if (s->missing && used < len)
        used += (size_t)snprintf(out + used, len - used, " has not submitted %zu operation%s the "
                                 "others wait for (%s%s; the oldest for %.0f s)", s->missing,
                                 s->missing == 1 ? "" : "s", s->names,
                                 s->missing > 3 ? " and more" : "", s->oldest);
    if (away_s > 0 && used < len)
        snprintf(out + used, len - used, "%s has not joined negotiation for %.0f s (nothing in "
                 "flight there: still computing, or stuck before submitting)",
                 s->missing ? "; it" : "", away_s);
}

/* Rank 0, every inspect_period: one verdict grouped by rank, for the ranks that hold up names
 * the others submitted, or that have not joined the round (round_started: when it began),
 * unless reports are off; past HVD_STALL_SHUTDOWN_TIME, stop the job. */
static hvd_status inspect_stalls(hvdc_exchange *x, double now, double round_started) {
    double limit = x->stall_check_s > 0 ? x->stall_check_s : x->stall_shutdown_s;
    double oldest = 0, away_s = now - round_started >= limit ? now - round_started : 0;
    hvdc__negotiator_stalls_by_rank(x->negotiator, now, limit, x->stalls, &oldest);
    int n = 0;
    for (int r = 0; r < x->size && n < STALL_RANKS_MAX; r++) {
        double away = x->arrived[r] ? 0 : away_s;
        if (!x->stalls[r].missing && away <= 0) continue;
        stall_line(x, r, &x->stalls[r], away, x->stall_lines[n], sizeof x->stall_lines[n]);
        x->stall_ranks[n++] = r;
        if (away > oldest) oldest = away;
    }
    if (n == 0) return HVD_OK;
    if (x->stall_check_s > 0) {
        char head[200];
        const char *lines[STALL_RANKS_MAX];
        for (int i = 0; i < n; i++) lines[i] = x->stall_lines[i];
        snprintf(head, sizeof head, "stall: for %.0f s (HVD_STALL_CHECK_TIME=%g) the others "
                 "have waited for %s:", oldest, limit, n == 1 ? "this rank" : "these ranks");
        x->stall_verdict(x->ctx, head, x->stall_ranks, lines, n);
    }
    if (x->stall_shutdown_s > 0 && oldest >= x->stall_shutdown_s) {
        char all[HVDC_ERROR_MAX] = "";
        for (int i = 0, used = 0; i < n && used < (int)sizeof all; i++)
            used += snprintf(all + used, sizeof all - (size_t)used, "%s%s", i ? "; " : "",
                             x->stall_lines[i]);
        return hvdc__fail(HVD_ERR_STALLED, "stopped after HVD_STALL_SHUTDOWN_TIME=%g s of stall: "
                          "%s", x->stall_shutdown_s, all);
    }
    return HVD_OK;
}

/* Rank 0: receives the announcement waiting (status from the probe) and takes it. */
static hvd_status receive_announcement(hvdc_exchange *x, const MPI_Status *status) {
    hvd_status st = HVD_OK;
    int len = 0;
    CHECK_MPI(MPI_Get_count(status, MPI_BYTE, &len));
    if (reserve_message(&x->gathered, (size_t)len)) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for %d bytes of requests", len);
        goto fail;
    }
    CHECK_MPI(MPI_Recv(x->gathered.data, len, MPI_BYTE, status->MPI_SOURCE, HVDC_TAG_ANNOUNCE,
                       x->comm, MPI_STATUS_IGNORE));
    x->bytes_received += (uint64_t)len;
    CHECK(take_announcement(x, status->MPI_SOURCE, x->gathered.data, (size_t)len));
fail:
    return st;
}

/* Rank 0: this round's announcement from every rank; inspects stalls while waiting. */
static hvd_status gather_announcements(hvdc_exchange *x) {
    hvd_status st = HVD_OK;
    int missing = x->size - 1;
    double started = hvdc__now_seconds();
    hvdc_poll poll = hvdc__poll_begin(hvdc__liveness_poll_policy(x->liveness));
    memset(x->arrived, 0, (size_t)x->size);
    CHECK(take_announcement(x, 0, x->message.data, x->message.len));
    while (missing > 0) {
        int flag = 0;
        MPI_Status status;
        CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, HVDC_TAG_ANNOUNCE, x->comm, &flag, &status));
        if (flag) {
            CHECK(receive_announcement(x, &status));
            missing--;
            continue;
        }
        if (inspect_period(x) > 0) {
            double now = hvdc__now_seconds();
            if (now >= x->next_stall_check) {
                CHECK(inspect_stalls(x, now, started));
                x->next_stall_check = now + inspect_period(x);
            }
        }
        st = x->between_steps(x->ctx, "waiting for other ranks to join the negotiation round");
        if (st != HVD_OK) {
            x->owner_failed = 1;
            goto fail;
        }
        hvdc__poll_pause(&poll); /* yields an oversubscribed core to the compute threads */
    }
fail:
    return st;
}

/* Rank 0: answer every other rank with the same bytes. */
static hvd_status send_answer(hvdc_exchange *x) {
    hvd_status st = HVD_OK;
    x->answered_at = hvdc__now_seconds(); /* every rank receives it now (the next round's dates) */
    for (int r = 1; r < x->size; r++)
        CHECK_MPI(MPI_Isend(x->answer.data, (int)x->answer.len, MPI_BYTE, r, HVDC_TAG_ANSWER,
                            x->comm, &x->requests[r - 1]));
    x->bytes_sent += (uint64_t)x->answer.len * (uint64_t)(x->size - 1);
    CHECK(hvdc__wait_requests(x->size - 1, x->requests, x->liveness));
fail:
    return st;
}

/* Rank 0, when its round fails: every other rank gets, in place of the answer it waits for,
 * an abort with the same status and message, so the job stops the same way everywhere instead
 * of the others waiting for an answer that never comes. Never waits for these (base/tell.h): a
 * rank with nothing in flight makes no MPI progress until it next submits, and a blocking send
 * to it would hold rank 0 until then; it reads the abort when it next negotiates. */
static void answer_abort(hvdc_exchange *x, hvd_status status, const char *why) {
    char reason[HVDC_ERROR_MAX];
    snprintf(reason, sizeof reason, "%s", why);
    hvdc_response_list responses = {.flags = HVDC_ABORT_FLAGS(status), .reason = reason};
    /* x->answer is free: the last answer went out, this round's was not sent. If the abort
     * cannot be encoded or sent, x->aborted stays 0 and the background thread sends its stop
     * notice instead (liveness.h), which needs no memory. */
    if (hvdc__wire_encode_responses(&x->answer, &responses) != 0 ||
        hvdc__tell_others(x->comm, HVDC_TAG_ANSWER, x->answer.data, x->answer.len) != 0)
        return;
    x->aborted = 1;
}

/* Rank 0: gather, inspect stalls, negotiate; the answer encoded into x->answer. A stall past
 * HVD_STALL_SHUTDOWN_TIME fails with HVD_ERR_STALLED. */
static hvd_status decide(hvdc_exchange *x) {
    hvd_status st = HVD_OK;
    hvdc_response_list responses = {0};
    CHECK(gather_announcements(x));
    if (inspect_period(x) > 0) {
        double now = hvdc__now_seconds();
        if (now >= x->next_stall_check) {
            CHECK(inspect_stalls(x, now, now));
            x->next_stall_check = now + inspect_period(x);
        }
    }
    if (x->fault_respond) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory negotiating the round's responses "
                        "(HVDC_TEST_FAULTS=negotiate_respond)");
        goto fail;
    }
    CHECK(hvdc__negotiator_respond(x->negotiator, x->fusion_threshold,
                                   x->gpu_fusion_threshold, &responses));
    if (x->tune_cycle_ms >= 0) {
        responses.flags |= HVDC_FLAG_TUNE;
        responses.cycle_time_ms = x->tune_cycle_ms;
        responses.shm_step_bytes = x->tune_shm_step;
        x->tune_cycle_ms = -1;
    }
    if (hvdc__wire_encode_responses(&x->answer, &responses) != 0) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory encoding %u responses", responses.n);
        goto fail;
    }
    x->last_ranks = responses.last_ranks; /* not sent: for this rank's decoded copy */
fail:
    hvdc__response_list_free(&responses);
    return st;
}

/* Rank 0's round: decide, answer. A failure of the round before the answer goes out is
 * answered with an abort instead, but not a dead rank (every rank learns of that itself,
 * liveness.h) nor a failure of the owner's own that its hook returned (device work that failed
 * on this rank: the owner tells the others as any rank would, so they fail with
 * HVD_ERR_RANK_FAILED naming it, wherever rank 0 noticed it). */
static hvd_status coordinate(hvdc_exchange *x) {
    x->owner_failed = 0;
    hvd_status st = decide(x);
    if (st == HVD_OK) return send_answer(x);
    if (st != HVD_ERR_RANK_FAILED && !x->owner_failed) answer_abort(x, st, hvd_last_error());
    return st;
}

/* A worker's round: announce to rank 0, wait for its answer. */
static hvd_status ask_coordinator(hvdc_exchange *x) {
    hvd_status st = HVD_OK;
    MPI_Request sent = MPI_REQUEST_NULL;
    CHECK_MPI(MPI_Isend(x->message.data, (int)x->message.len, MPI_BYTE, 0, HVDC_TAG_ANNOUNCE,
                        x->comm, &sent));
    x->bytes_sent += x->message.len;
    double started = hvdc__now_seconds(), next_report = started + x->stall_check_s;
    hvdc_poll poll = hvdc__poll_begin(hvdc__liveness_poll_policy(x->liveness));
    for (;;) {
        int flag = 0, len = 0;
        MPI_Status status;
        CHECK_MPI(MPI_Iprobe(0, HVDC_TAG_ANSWER, x->comm, &flag, &status));
        if (flag) {
            CHECK_MPI(MPI_Get_count(&status, MPI_BYTE, &len));
            if (reserve_message(&x->answer, (size_t)len)) {
                st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for %d bytes of responses", len);
                goto fail;
            }
            CHECK_MPI(MPI_Recv(x->answer.data, len, MPI_BYTE, 0, HVDC_TAG_ANSWER, x->comm,
                               MPI_STATUS_IGNORE));
            x->answer.len = (size_t)len;
            x->bytes_received += (uint64_t)len;
            x->answered_at = hvdc__now_seconds(); /* rank 0 sent it now, on its clock */
            break;
        }
        if (x->stall_check_s > 0) {
            double now = hvdc__now_seconds();
            if (now >= next_report) {
                HVDC_LOG(HVDC_LOG_WARNING, "waited %.0f s for rank 0 to answer negotiation: some ranks "
                         "have not submitted what this rank waits for (rank 0 logs which)", now - started);
                next_report = now + x->stall_check_s;
            }
        }
        CHECK(x->between_steps(x->ctx, "waiting for rank 0's answer"));
        hvdc__poll_pause(&poll);
    }
    /* rank 0 has read the announcement unless it aborted; then do not wait for it */
    int done = 0;
    CHECK_MPI(MPI_Test(&sent, &done, MPI_STATUS_IGNORE));
    if (!done) {
        if (x->answer.len >= 14 && (x->answer.data[6] & HVDC_FLAG_ABORT)) MPI_Request_free(&sent);
        else CHECK(hvdc__wait_requests(1, &sent, x->liveness));
    }
fail:
    return st;
}

hvd_status hvdc__exchange_init(hvdc_exchange *x) {
    x->answered_at = hvdc__now_seconds(); /* until the first answer: every rank starts together */
    if (x->rank != 0) return HVD_OK;
    x->fault_respond = hvdc__fault("negotiate_respond"); /* read once, off the hot path */
    x->negotiator = hvdc__negotiator_create(x->size, x->cache);
    x->arrived = calloc((size_t)x->size, 1);
    x->requests = calloc((size_t)x->size, sizeof *x->requests);
    x->stalls = calloc((size_t)x->size, sizeof *x->stalls);
    x->next_stall_check = hvdc__now_seconds() + inspect_period(x);
    if (!x->negotiator || !x->arrived || !x->requests || !x->stalls) {
        hvdc__exchange_free(x);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory starting the coordinator");
    }
    return HVD_OK;
}

void hvdc__exchange_free(hvdc_exchange *x) {
    hvdc__negotiator_destroy(x->negotiator);
    x->negotiator = NULL;
    hvdc__bytes_free(&x->message);
    hvdc__bytes_free(&x->gathered);
    hvdc__bytes_free(&x->answer);
    free(x->arrived);
    x->arrived = NULL;
    free(x->requests);
    x->requests = NULL;
    free(x->stalls);
    x->stalls = NULL;
}

int hvdc__exchange_awaited(hvdc_exchange *x) {
    int flag = 0;
    if (x->rank != 0 || x->size == 1) return 0;
    if (MPI_Iprobe(MPI_ANY_SOURCE, HVDC_TAG_ANNOUNCE, x->comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return 0; /* the round itself will meet the error */
    return flag;
}

hvd_status hvdc__exchange_round(hvdc_exchange *x, hvdc_response_list *responses) {
    hvd_status st = HVD_OK;
    x->rounds++;
    if (x->rank == 0) CHECK(coordinate(x));
    else CHECK(ask_coordinator(x));
    const char *why = NULL;
    if (hvdc__wire_decode_responses(x->answer.data, x->answer.len, responses, &why) != 0) {
        st = hvdc__fail(HVD_ERR_INTERNAL, "damaged response list from rank 0: %s", why);
        goto fail;
    }
    responses->last_ranks = x->last_ranks; /* rank 0's own, else NULL */
    x->last_ranks = NULL;
    for (uint32_t i = 0; i < responses->n; i++) {
        hvdc_wire_response *r = &responses->items[i];
        if (!r->slots) continue;
        uint32_t k = hvdc__cache_first_missing(x->cache, r->slots, r->n_names);
        if (k < r->n_names) {
            st = hvdc__fail(HVD_ERR_INTERNAL, "rank 0 scheduled cache slot %u, which this "
                            "rank's cache does not hold (caches out of step)", r->slots[k]);
            hvdc__response_list_free(responses);
            goto fail;
        }
        /* the first name for messages; the rest only where needed (hvdc__cache_fill_names) */
        const char *name = hvdc__cache_name(x->cache, r->slots[0]);
        memcpy(r->names[0], name, strlen(name) + 1); /* the cache holds names that fit */
    }
fail:
    return st;
}
