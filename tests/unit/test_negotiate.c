/* Unit test: the coordinator's table - readiness only when all ranks announced, one order
 * whatever the submission order, mismatches named with their ranks, fusion under a threshold. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "negotiation/negotiate.h"

static hvdc_wire_request req(const char *name, hvdc_kind kind, hvd_dtype dtype, uint64_t count) {
    hvdc_wire_request q = {.kind = (uint8_t)kind, .dtype = (uint8_t)dtype, .op = HVD_SUM,
                           .device = -1, .prescale = 1, .postscale = 1, .n_counts = 1};
    strcpy(q.name, name);
    q.counts = malloc(sizeof *q.counts);
    q.counts[0] = count;
    return q;
}

/* Announces names[0..n) for rank, each as a float32 allreduce of counts[i] elements. */
static void announce(hvdc_negotiator *n, int rank, const char *const *names, const uint64_t *counts, int k) {
    hvdc_request_list list = {.n = (uint32_t)k, .items = calloc((size_t)k + 1, sizeof(hvdc_wire_request))};
    for (int i = 0; i < k; i++) list.items[i] = req(names[i], HVDC_KIND_ALLREDUCE, HVD_FLOAT32, counts[i]);
    CHECK_TRUE(hvdc__negotiator_add(n, rank, &list) == HVD_OK, "add");
}

int main(void) {
    /* order: rank 0 submits a,b,c; rank 1 submits c,b,a in two rounds */
    hvdc_negotiator *n = hvdc__negotiator_create(2, NULL);
    const char *abc[3] = {"a", "b", "c"}, *c[1] = {"c"}, *ba[2] = {"b", "a"};
    uint64_t ones[3] = {1, 1, 1};
    announce(n, 0, abc, ones, 3);
    announce(n, 1, c, ones, 1);
    hvdc_response_list out;
    CHECK_TRUE(hvdc__negotiator_respond(n, 0, 0, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 1 && strcmp(out.items[0].names[0], "c") == 0, "only c is ready");
    CHECK_TRUE(hvdc__negotiator_waiting(n) == 2, "a and b wait");
    hvdc__response_list_free(&out);
    announce(n, 1, ba, ones, 2);
    CHECK_TRUE(hvdc__negotiator_respond(n, 0, 0, &out) == HVD_OK, "respond");
    /* ready order follows the rank-ordered additions: b then a (rank 1 completed them) */
    CHECK_TRUE(out.n == 2 && strcmp(out.items[0].names[0], "b") == 0 &&
               strcmp(out.items[1].names[0], "a") == 0, "b then a, unfused at threshold 0");
    hvdc__response_list_free(&out);
    CHECK_TRUE(hvdc__negotiator_waiting(n) == 0, "nothing waits");

    /* fusion: three 100-float tensors with a 1000-byte threshold fuse two, then one */
    uint64_t hundred[3] = {100, 100, 100};
    announce(n, 0, abc, hundred, 3);
    announce(n, 1, abc, hundred, 3);
    CHECK_TRUE(hvdc__negotiator_respond(n, 1000, 1000, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 2 && out.items[0].n_names == 2 && out.items[1].n_names == 1, "fused 2 + 1");
    hvdc__response_list_free(&out);

    /* mismatch: count differs on rank 1 -> an ERROR naming tensor, field and ranks */
    uint64_t c0[1] = {1000}, c1[1] = {999};
    const char *x[1] = {"layer1.grad"};
    announce(n, 0, x, c0, 1);
    announce(n, 1, x, c1, 1);
    CHECK_TRUE(hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 1 && out.items[0].type == HVDC_RESPONSE_ERROR, "error response");
    if (out.n == 1 && out.items[0].error) {
        const char *e = out.items[0].error;
        CHECK_TRUE(strstr(e, "layer1.grad") && strstr(e, "count") && strstr(e, "rank 0 has 1000") &&
                   strstr(e, "rank 1 has 999"), "message: %s", e);
    }
    hvdc__response_list_free(&out);

    /* a refusal whose message cannot be made (HVDC_TEST_FAULTS=refusal_message: strdup out of
     * memory) fails the answer; it never executes the mismatched request */
    announce(n, 0, x, c0, 1);
    announce(n, 1, x, c1, 1);
    setenv("HVDC_TEST_FAULTS", "refusal_message", 1);
    hvd_status refused = hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out);
    unsetenv("HVDC_TEST_FAULTS");
    CHECK_TRUE(refused == HVD_ERR_NO_MEMORY && out.n == 0,
               "no message, no answer: status %d, %u responses%s", (int)refused, out.n,
               out.n && out.items[0].type == HVDC_RESPONSE_EXECUTE ? " (the mismatch EXECUTEs)" : "");
    hvdc__response_list_free(&out);
    CHECK_TRUE(hvdc__negotiator_waiting(n) == 0, "the failed answer forgot its names");

    /* dtype mismatch, and allgather capacity */
    hvdc_request_list l0 = {.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    hvdc_request_list l1 = {.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    l0.items[0] = req("t", HVDC_KIND_ALLREDUCE, HVD_FLOAT32, 4);
    l1.items[0] = req("t", HVDC_KIND_ALLREDUCE, HVD_FLOAT64, 4);
    hvdc__negotiator_add(n, 0, &l0);
    hvdc__negotiator_add(n, 1, &l1);
    hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out);
    CHECK_TRUE(out.n == 1 && out.items[0].error && strstr(out.items[0].error, "dtype") &&
               strstr(out.items[0].error, "float64"), "dtype message");
    hvdc__response_list_free(&out);
    l0 = (hvdc_request_list){.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    l1 = (hvdc_request_list){.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    l0.items[0] = req("g", HVDC_KIND_ALLGATHER, HVD_INT32, 3);
    l1.items[0] = req("g", HVDC_KIND_ALLGATHER, HVD_INT32, 4);
    l0.items[0].capacity = 7;
    l1.items[0].capacity = 6;
    hvdc__negotiator_add(n, 0, &l0);
    hvdc__negotiator_add(n, 1, &l1);
    hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out);
    CHECK_TRUE(out.n == 1 && out.items[0].error && strstr(out.items[0].error, "rank 1"),
               "capacity message names rank 1: %s", out.n ? out.items[0].error : "");
    hvdc__response_list_free(&out);

    /* while rank 1 has joined: a host all-reduce runs (rank 1 stands in), a device one is
     * refused on every rank (a joined rank cannot stand in on a device) */
    hvdc_request_list join = {.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    join.items[0] = req("hvd.join", HVDC_KIND_JOIN, HVD_UINT8, 0);
    CHECK_TRUE(hvdc__negotiator_add(n, 1, &join) == HVD_OK, "join");
    hvdc_request_list both = {.n = 2, .items = calloc(2, sizeof(hvdc_wire_request))};
    both.items[0] = req("host", HVDC_KIND_ALLREDUCE, HVD_FLOAT32, 4);
    both.items[1] = req("dev", HVDC_KIND_ALLREDUCE, HVD_FLOAT32, 4);
    both.items[1].device = 0;
    CHECK_TRUE(hvdc__negotiator_add(n, 0, &both) == HVD_OK, "add while joined");
    CHECK_TRUE(hvdc__negotiator_respond(n, 0, 0, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 2, "two responses, got %u", out.n);
    for (uint32_t i = 0; i < out.n; i++) {
        const hvdc_wire_response *r = &out.items[i];
        if (strcmp(r->names[0], "host") == 0)
            CHECK_TRUE(r->type == HVDC_RESPONSE_EXECUTE && r->n_joined == 1, "host runs");
        else
            CHECK_TRUE(r->type == HVDC_RESPONSE_ERROR && r->error && strstr(r->error, "hvd_join") &&
                       strstr(r->error, "device"), "device refused: %s", r->error ? r->error : "");
    }
    hvdc__response_list_free(&out);
    /* rank 0 joins too: the join completes */
    join = (hvdc_request_list){.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    join.items[0] = req("hvd.join", HVDC_KIND_JOIN, HVD_UINT8, 0);
    hvdc__negotiator_add(n, 0, &join);
    CHECK_TRUE(hvdc__negotiator_respond(n, 0, 0, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 1 && out.items[0].type == HVDC_RESPONSE_EXECUTE &&
               out.items[0].kind == HVDC_KIND_JOIN, "join done");
    hvdc__response_list_free(&out);

    /* a rank announcing a pending name twice is a protocol error */
    announce(n, 0, x, c0, 1);
    hvdc_request_list dup = {.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
    dup.items[0] = req("layer1.grad", HVDC_KIND_ALLREDUCE, HVD_FLOAT32, 1000);
    CHECK_TRUE(hvdc__negotiator_add(n, 0, &dup) == HVD_ERR_INTERNAL, "duplicate announcement");
    hvdc__negotiator_destroy(n); /* frees the still-pending entry */

    /* an alltoall's response carries every rank's send counts, so no rank exchanges them
     * again: row r is rank r's (size 2: rank 0 sends 1 and 2, rank 1 sends 3 and 4) */
    n = hvdc__negotiator_create(2, NULL);
    for (int r = 0; r < 2; r++) {
        hvdc_request_list a2a = {.n = 1, .items = calloc(1, sizeof(hvdc_wire_request))};
        a2a.items[0] = req("a2a", HVDC_KIND_ALLTOALL, HVD_INT32, (uint64_t)(2 * r + 1));
        a2a.items[0].counts = realloc(a2a.items[0].counts, 2 * sizeof(uint64_t));
        a2a.items[0].counts[1] = (uint64_t)(2 * r + 2);
        a2a.items[0].n_counts = 2;
        a2a.items[0].capacity = 100;
        CHECK_TRUE(hvdc__negotiator_add(n, r, &a2a) == HVD_OK, "alltoall add");
    }
    CHECK_TRUE(hvdc__negotiator_respond(n, 0, 0, &out) == HVD_OK, "respond");
    const uint64_t matrix[4] = {1, 2, 3, 4};
    CHECK_TRUE(out.n == 1 && out.items[0].type == HVDC_RESPONSE_EXECUTE &&
                   out.items[0].n_rank_counts == 4 &&
                   memcmp(out.items[0].rank_counts, matrix, sizeof matrix) == 0,
               "the alltoall response carries the send-count matrix (%u values)",
               out.n ? out.items[0].n_rank_counts : 0);
    hvdc__response_list_free(&out);
    hvdc__negotiator_destroy(n);
    return check_verdict("negotiation");
}
