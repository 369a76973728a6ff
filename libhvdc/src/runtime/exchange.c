/*
 * exchange.c - one negotiation round over point-to-point messages: every rank sends rank 0 its
 * new announcements; rank 0 feeds them to the negotiator as they arrive, answers every rank with
 * the same response list, and, because it sees who has not joined yet, reports stalls while it
 * waits (HVD_STALL_CHECK_TIME) and stops the job past HVD_STALL_SHUTDOWN_TIME.
 * Waits are Iprobe loops that yield the core and call hvdc__between_steps.
 * Background thread.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "runtime/round.h"

enum { TAG_ANNOUNCE = 1, TAG_ANSWER = 2 };

/* Makes b hold n bytes from its start (a message being received replaces the last). */
static int reserve_bytes(hvdc_bytes *b, size_t n) {
    b->len = 0;
    return hvdc__bytes_reserve(b, n);
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
    double started = hvdc__now_seconds();
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
            double now = hvdc__now_seconds();
            if (now >= s->next_stall_check) {
                CHECK(inspect_stalls(s, now, started));
                s->next_stall_check = now + rt->config.stall_check_s;
            }
        }
        CHECK(hvdc__between_steps(s, "waiting for other ranks to join the negotiation round"));
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
        double now = hvdc__now_seconds();
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
    double started = hvdc__now_seconds(), next_report = started + rt->config.stall_check_s;
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
            double now = hvdc__now_seconds();
            if (now >= next_report) {
                HVDC_LOG(HVDC_LOG_WARNING, "waited %.0f s for rank 0 to answer negotiation: some ranks "
                         "have not submitted what this rank waits for (rank 0 logs which)", now - started);
                next_report = now + rt->config.stall_check_s;
            }
        }
        CHECK(hvdc__between_steps(s, "waiting for rank 0's answer"));
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

hvd_status hvdc__negotiate(round_state *s, hvdc_response_list *responses) {
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
