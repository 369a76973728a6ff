/* Unit test: the response cache (negotiation/cache.c) and the coordinator's slot path
 * (negotiate.c): slots advance alike, a request matches only when identical, a full cache takes
 * nothing more; announcements by slot become ready when every rank's bit is in, mix with a full
 * request for the same name (which is then validated like any other), show in stall reports,
 * and go back as slot numbers; a cached device all-reduce is refused while a rank has joined. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "negotiation/cache.h"
#include "negotiation/negotiate.h"

static uint64_t counts_store[64][1];
static int n_store;

static hvdc_wire_request req(const char *name, uint64_t count) {
    hvdc_wire_request q = {.kind = HVDC_KIND_ALLREDUCE, .dtype = HVD_FLOAT32, .op = HVD_SUM,
                           .device = -1, .prescale = 1, .postscale = 1, .n_counts = 1};
    strcpy(q.name, name);
    counts_store[n_store][0] = count;
    q.counts = counts_store[n_store++];
    return q;
}

/* A heap copy for lists the negotiator takes and frees. */
static hvdc_wire_request owned(const char *name, uint64_t count) {
    hvdc_wire_request q = req(name, count);
    q.counts = malloc(sizeof *q.counts);
    q.counts[0] = count;
    return q;
}

static void add(hvdc_negotiator *n, int rank, const hvdc_wire_request *full, int n_full,
                const uint32_t *slots, int n_slots) {
    hvdc_request_list list = {.n = (uint32_t)n_full, .items = calloc((size_t)n_full + 1, sizeof(hvdc_wire_request)),
                              .n_slots = (uint32_t)n_slots, .slots = malloc(((size_t)n_slots + 1) * sizeof(uint32_t))};
    for (int i = 0; i < n_full; i++) list.items[i] = full[i];
    for (int i = 0; i < n_slots; i++) list.slots[i] = slots[i];
    CHECK_TRUE(hvdc__negotiator_add(n, rank, &list) == HVD_OK, "add");
}

int main(void) {
    /* ---- the cache itself ---- */
    hvdc_cache *c = hvdc__cache_create(3);
    hvdc_wire_request a = req("a", 10), b = req("b", 20), a2 = req("a", 11), d = req("d", 1), e = req("e", 1);
    CHECK_TRUE(hvdc__cache_put(c, &a) == 0 && hvdc__cache_put(c, &b) == 1, "slots 0 and 1");
    CHECK_TRUE(hvdc__cache_lookup(c, &a) == 0 && hvdc__cache_lookup(c, &b) == 1, "exact lookups");
    CHECK_TRUE(hvdc__cache_lookup(c, &b) == 1 && hvdc__cache_lookup(c, &a) == 0 &&
               hvdc__cache_lookup(c, &a) == 0, "out of slot order, and the same twice");
    CHECK_TRUE(hvdc__cache_lookup(c, &a2) == -1 && hvdc__cache_find(c, "a") == 0, "a changed count is not a hit");
    CHECK_TRUE(hvdc__cache_put(c, &a2) == 0 && hvdc__cache_lookup(c, &a2) == 0 &&
               hvdc__cache_lookup(c, &a) == -1, "the same name keeps its slot, with the new request");
    CHECK_TRUE(hvdc__cache_put(c, &d) == 2 && hvdc__cache_put(c, &e) == -1 &&
               hvdc__cache_find(c, "e") == -1, "a full cache takes nothing more");
    CHECK_TRUE(strcmp(hvdc__cache_name(c, 1), "b") == 0 && hvdc__cache_name(c, 3) == NULL, "names by slot");
    uint32_t held[3] = {2, 0, 1}, unheld[3] = {1, 3, 0};
    CHECK_TRUE(hvdc__cache_first_missing(c, held, 3) == 3 && hvdc__cache_first_missing(c, unheld, 3) == 1,
               "slots checked against the cache");
    char names[3][HVD_MAX_NAME_LEN + 1] = {"d", "", ""};
    hvdc_wire_response cached = {.n_names = 3, .names = names, .slots = held};
    hvdc__cache_fill_names(c, &cached);
    CHECK_TRUE(strcmp(names[0], "d") == 0 && strcmp(names[1], "a") == 0 && strcmp(names[2], "b") == 0,
               "a cached response's names filled from the cache");
    hvdc_wire_request grouped = req("g", 5);
    grouped.kind = HVDC_KIND_BROADCAST;
    CHECK_TRUE(!hvdc__cache_cacheable(&grouped) && hvdc__cache_cacheable(&a), "all-reduces only");
    hvdc__cache_destroy(c);

    /* ---- the coordinator's slot path, 3 ranks ---- */
    hvdc_cache *rank0 = hvdc__cache_create(8);
    hvdc_wire_request w = req("w", 100), v = req("v", 100), u = req("u", 7);
    hvdc__cache_put(rank0, &w); /* slot 0 */
    hvdc__cache_put(rank0, &v); /* slot 1 */
    hvdc__cache_put(rank0, &u); /* slot 2 */
    hvdc_negotiator *n = hvdc__negotiator_create(3, rank0);
    uint32_t s01[2] = {0, 1};
    hvdc_response_list out;
    add(n, 0, NULL, 0, s01, 2);
    add(n, 1, NULL, 0, s01, 2);
    CHECK_TRUE(hvdc__negotiator_waiting(n) == 2, "two slots wait for rank 2");
    hvdc__negotiator_set_time(n, 100.0);
    char report[512];
    double oldest = 0;
    CHECK_TRUE(hvdc__negotiator_report_stalls(n, 100.0, 0, report, sizeof report, &oldest) == 2 &&
               strstr(report, "'w'") && strstr(report, "missing on ranks 2"), "stall report: %s", report);
    add(n, 2, NULL, 0, s01, 2);
    CHECK_TRUE(hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 1 && out.items[0].n_names == 2 && out.items[0].slots &&
               out.items[0].slots[0] == 0 && out.items[0].slots[1] == 1 && !out.items[0].names,
               "fused, sent as slots 0 and 1 (no names)");
    hvdc__response_list_free(&out);
    CHECK_TRUE(hvdc__negotiator_waiting(n) == 0, "nothing waits");

    /* rank 1 sends u in full with another count; ranks 0 and 2 by slot: validated, refused */
    uint32_t s2[1] = {2};
    hvdc_wire_request u_changed = owned("u", 8);
    add(n, 0, NULL, 0, s2, 1);
    add(n, 1, &u_changed, 1, NULL, 0);
    add(n, 2, NULL, 0, s2, 1);
    CHECK_TRUE(hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 1 && out.items[0].type == HVDC_RESPONSE_ERROR && !out.items[0].slots &&
               out.items[0].error && strstr(out.items[0].error, "rank 1 has 8"),
               "mismatch through the cache: %s", out.n && out.items[0].error ? out.items[0].error : "");
    hvdc__response_list_free(&out);

    /* a full request first, then slots: the same name, named response */
    hvdc_wire_request u_same = owned("u", 7);
    add(n, 1, &u_same, 1, NULL, 0);
    add(n, 0, NULL, 0, s2, 1);
    add(n, 2, NULL, 0, s2, 1);
    CHECK_TRUE(hvdc__negotiator_respond(n, 1 << 20, 1 << 20, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 1 && out.items[0].type == HVDC_RESPONSE_EXECUTE && !out.items[0].slots &&
               strcmp(out.items[0].names[0], "u") == 0, "full + slots of one name execute by name");
    hvdc__response_list_free(&out);
    hvdc__negotiator_destroy(n);
    hvdc__cache_destroy(rank0);

    /* while rank 2 has joined: a cached host all-reduce runs (rank 2 stands in), a cached
     * device all-reduce is refused like a named one (a joined rank cannot stand in on NCCL) */
    rank0 = hvdc__cache_create(4);
    hvdc_wire_request host = req("host", 4), dev = req("dev", 4);
    dev.device = 0;
    hvdc__cache_put(rank0, &host); /* slot 0 */
    hvdc__cache_put(rank0, &dev);  /* slot 1 */
    n = hvdc__negotiator_create(3, rank0);
    hvdc_wire_request join = owned("hvd.join", 0);
    join.kind = HVDC_KIND_JOIN;
    join.dtype = HVD_UINT8;
    add(n, 2, &join, 1, NULL, 0);
    add(n, 0, NULL, 0, s01, 2);
    add(n, 1, NULL, 0, s01, 2);
    CHECK_TRUE(hvdc__negotiator_respond(n, 0, 0, &out) == HVD_OK, "respond");
    CHECK_TRUE(out.n == 2, "two responses, got %u", out.n);
    for (uint32_t i = 0; i < out.n; i++) {
        const hvdc_wire_response *r = &out.items[i];
        if (r->slots ? r->slots[0] == 0 : strcmp(r->names[0], "host") == 0)
            CHECK_TRUE(r->type == HVDC_RESPONSE_EXECUTE && r->n_joined == 1, "cached host all-reduce runs");
        else
            CHECK_TRUE(r->type == HVDC_RESPONSE_ERROR && !r->slots && r->error &&
                       strstr(r->error, "'dev'") && strstr(r->error, "hvd_join") &&
                       strstr(r->error, "device"), "cached device all-reduce refused: %s",
                       r->error ? r->error : "(none)");
    }
    hvdc__response_list_free(&out);
    hvdc__negotiator_destroy(n);
    hvdc__cache_destroy(rank0);
    return check_verdict("response cache");
}
