/* Unit test: who arrives last, as rank 0's coordinator sees it - the rank with the latest
 * readiness stamp, whatever order the announcements are taken in, its lateness after the rank
 * before it and the wait from the first; the medians; the stall verdict grouped by rank. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "negotiation/arrivals.h"
#include "negotiation/negotiate.h"

/* rank announces a float32 all-reduce of name, ready at `at` (seconds on rank 0's clock). */
static void announce_at(hvdc_negotiator *n, int rank, const char *name, double at) {
    hvdc_request_list list = {.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    hvdc_wire_request *q = &list.items[0];
    *q = (hvdc_wire_request){.kind = HVDC_KIND_ALLREDUCE, .dtype = HVD_FLOAT32, .op = HVD_SUM,
                             .device = -1, .prescale = 1, .postscale = 1, .n_counts = 1};
    strcpy(q->name, name);
    q->counts = malloc(sizeof *q->counts);
    q->counts[0] = 4;
    hvdc__negotiator_set_time(n, at);
    CHECK_TRUE(hvdc__negotiator_add(n, rank, &list) == HVD_OK, "add %s for rank %d", name, rank);
}

static void arrivals_alone(void) {
    hvdc_arrivals *a = hvdc__arrivals_create(4);
    hvdc_arrival_summary s;
    hvdc__arrivals_summary(a, &s);
    CHECK_TRUE(s.names == 0 && s.last_rank == -1 && s.last_median_s == 0, "empty");
    for (int i = 0; i < 5; i++) hvdc__arrivals_note(a, 2, 0.040 + 0.001 * i, 0.050);
    hvdc__arrivals_note(a, 1, 0.9, 0.9); /* an outlier of another rank */
    hvdc__arrivals_note(a, 7, 1, 1);     /* out of range: ignored */
    hvdc__arrivals_summary(a, &s);
    CHECK_TRUE(s.names == 6 && s.last_rank == 2 && s.last_count == 5, "rank 2 last 5 of 6: %d %llu",
               s.last_rank, (unsigned long long)s.last_count);
    CHECK_TRUE(s.last_median_s > 0.0419 && s.last_median_s < 0.0421, "median of its lateness %g",
               s.last_median_s);
    CHECK_TRUE(s.wait_median_s == (float)0.050, "median wait %g", s.wait_median_s);
    hvdc__arrivals_reset(a);
    hvdc__arrivals_summary(a, &s);
    CHECK_TRUE(s.names == 0 && s.last_rank == -1, "reset");
    hvdc__arrivals_destroy(a);
}

/* Rank 0 ready last (its own announcement taken first, the others' later, dated earlier): the
 * stamps, not the order they are taken in, say who was last. */
static void latest_stamp_wins(void) {
    hvdc_negotiator *n = hvdc__negotiator_create(3, NULL);
    hvdc_arrivals *a = hvdc__negotiator_arrivals(n);
    announce_at(n, 0, "g", 10.040);
    announce_at(n, 1, "g", 10.000);
    announce_at(n, 2, "g", 10.002);
    hvdc_response_list out;
    CHECK_TRUE(hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 1 && out.last_ranks && out.last_ranks[0] == 0, "the response waited for "
               "rank 0 last: %d", out.last_ranks ? out.last_ranks[0] : -9);
    hvdc__response_list_free(&out);
    hvdc_arrival_summary s;
    hvdc__arrivals_summary(a, &s);
    CHECK_TRUE(s.names == 1 && s.last_rank == 0, "rank 0 was last: %d", s.last_rank);
    CHECK_TRUE(s.last_median_s > 0.0379 && s.last_median_s < 0.0381, "38 ms after rank 2: %g",
               s.last_median_s);
    CHECK_TRUE(s.wait_median_s > 0.0399 && s.wait_median_s < 0.0401, "40 ms from the first: %g",
               s.wait_median_s);
    hvdc__negotiator_destroy(n);
}

/* The verdict's grouping: each rank that holds names up, how many, which, for how long. */
static void stalls_by_rank(void) {
    hvdc_negotiator *n = hvdc__negotiator_create(3, NULL);
    const char *names[5] = {"w.0", "w.1", "w.2", "w.3", "w.4"};
    for (int i = 0; i < 5; i++) {
        announce_at(n, 0, names[i], 100.0 + i);
        announce_at(n, 1, names[i], 100.0 + i);
    }
    announce_at(n, 2, "w.0", 100.0);
    announce_at(n, 0, "x", 103.0); /* only rank 0: ranks 1 and 2 hold it up, but not for long */
    hvdc_rank_stall by_rank[3];
    double oldest = 0;
    size_t stalled = hvdc__negotiator_stalls_by_rank(n, 110.0, 5.0, by_rank, &oldest);
    CHECK_TRUE(stalled == 5, "w.1..w.4 and x waited 5 s or more: %zu", stalled);
    CHECK_TRUE(by_rank[0].missing == 0 && by_rank[1].missing == 1, "rank 1 holds up x only");
    CHECK_TRUE(by_rank[2].missing == 5 && by_rank[2].oldest == 9.0, "rank 2: %zu names, %g s",
               by_rank[2].missing, by_rank[2].oldest);
    CHECK_TRUE(strstr(by_rank[2].names, "'w.1'") && !strstr(by_rank[2].names, "'w.0'"),
               "rank 2's names: %s", by_rank[2].names);
    CHECK_TRUE(oldest == 9.0, "oldest %g", oldest);
    hvdc__negotiator_destroy(n);
}

int main(void) {
    arrivals_alone();
    latest_stamp_wins();
    stalls_by_rank();
    return check_verdict("test_arrivals");
}
