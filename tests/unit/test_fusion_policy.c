/* Unit test: the fusion policy (negotiation/fusion_policy.h) on its own - first fit in ready
 * order under the host or device threshold, what may fuse with what, unavailable and refused
 * requests skipped, the leader always taken, joined ranks' sets compared. */
#include <string.h>

#include "check.h"
#include "negotiation/fusion_policy.h"

#define MAX_ITEMS 8

typedef struct ready_list {
    hvdc_wire_request req[MAX_ITEMS];
    uint64_t counts[MAX_ITEMS];
    unsigned char announced[MAX_ITEMS][4];
    hvdc_fusion_item items[MAX_ITEMS];
    size_t n;
} ready_list;

/* Appends a float32 all-reduce of bytes bytes (a multiple of 4) on the host, every rank in. */
static hvdc_wire_request *add(ready_list *l, uint64_t bytes) {
    size_t i = l->n++;
    l->counts[i] = bytes / 4;
    l->req[i] = (hvdc_wire_request){.kind = HVDC_KIND_ALLREDUCE, .dtype = HVD_FLOAT32,
                                    .op = HVD_SUM, .device = -1, .prescale = 1, .postscale = 1,
                                    .n_counts = 1, .counts = &l->counts[i]};
    memset(l->announced[i], 1, sizeof l->announced[i]);
    l->items[i] = (hvdc_fusion_item){&l->req[i], l->announced[i], 4, 1};
    return &l->req[i];
}

/* The picks from lead as a string of item indices, e.g. "034". */
static const char *pick(ready_list *l, size_t lead, size_t host, size_t gpu) {
    static char text[MAX_ITEMS + 1];
    size_t picked[MAX_ITEMS];
    size_t k = hvdc__fusion_pick(l->items, l->n, lead, 4, host, gpu, picked);
    for (size_t i = 0; i < k; i++) text[i] = (char)('0' + picked[i]);
    text[k] = '\0';
    return text;
}

int main(void) {
    /* the header's drawing: first fit, b of another dtype, c too big beside a */
    ready_list l = {0};
    add(&l, 40);
    add(&l, 40)->dtype = HVD_INT32;
    add(&l, 72);
    add(&l, 32);
    add(&l, 20);
    CHECK_TRUE(strcmp(pick(&l, 0, 100, 100), "034") == 0, "first fit: got %s", pick(&l, 0, 100, 100));
    CHECK_TRUE(strcmp(pick(&l, 0, 92, 92), "034") == 0, "exactly the threshold fits: got %s",
               pick(&l, 0, 92, 92));
    CHECK_TRUE(strcmp(pick(&l, 0, 91, 91), "03") == 0, "one byte short: got %s", pick(&l, 0, 91, 91));
    CHECK_TRUE(strcmp(pick(&l, 0, 0, 0), "0") == 0, "threshold 0: the leader alone");
    CHECK_TRUE(strcmp(pick(&l, 2, 100, 100), "24") == 0, "a later leader fuses only later items: %s",
               pick(&l, 2, 100, 100));

    /* the search stops once the threshold is reached: nothing after it, even what would fit */
    ready_list full = {0};
    add(&full, 100);
    add(&full, 4);
    CHECK_TRUE(strcmp(pick(&full, 0, 100, 100), "0") == 0, "a leader at the threshold fuses nothing");
    CHECK_TRUE(strcmp(pick(&full, 0, 10, 10), "0") == 0, "a leader over it is still taken alone");

    /* taken or refused items are skipped */
    ready_list gone = {0};
    add(&gone, 8);
    add(&gone, 8);
    add(&gone, 8);
    gone.items[1].available = 0;
    CHECK_TRUE(strcmp(pick(&gone, 0, 100, 100), "02") == 0, "an unavailable item is skipped");

    /* what must match: op, scale factors, memory kind; kind is allreduce only */
    ready_list differ = {0};
    add(&differ, 8);
    add(&differ, 8)->op = HVD_MAX;
    add(&differ, 8)->prescale = 0.5;
    add(&differ, 8)->postscale = 2;
    add(&differ, 8)->device = 0;
    add(&differ, 8)->kind = HVDC_KIND_BROADCAST;
    add(&differ, 8);
    CHECK_TRUE(strcmp(pick(&differ, 0, 1000, 1000), "06") == 0, "only the like request fuses: %s",
               pick(&differ, 0, 1000, 1000));
    CHECK_TRUE(!hvdc__fusion_can_fuse(&differ.req[5], &differ.req[5]), "broadcasts never fuse");

    /* device tensors use the device threshold; two device requests on different devices of
     * their ranks still fuse (each rank has one) */
    ready_list dev = {0};
    add(&dev, 40)->device = 0;
    add(&dev, 40)->device = 1;
    add(&dev, 40)->device = 0;
    CHECK_TRUE(strcmp(pick(&dev, 0, 1000, 80), "01") == 0, "device threshold: %s", pick(&dev, 0, 1000, 80));
    CHECK_TRUE(strcmp(pick(&dev, 0, 40, 1000), "012") == 0, "host threshold unused: %s",
               pick(&dev, 0, 40, 1000));

    /* while ranks have joined, only requests with the same contributing ranks fuse */
    ready_list joined = {0};
    add(&joined, 8);
    add(&joined, 8);
    add(&joined, 8);
    add(&joined, 8);
    for (size_t i = 0; i < 3; i++) {
        joined.announced[i][3] = 0; /* rank 3 joined before announcing 0, 1, 2 */
        joined.items[i].n_announced = 3;
    }
    joined.announced[1][2] = 0; /* and rank 2 before announcing 1 */
    joined.items[1].n_announced = 2;
    CHECK_TRUE(strcmp(pick(&joined, 0, 1000, 1000), "02") == 0, "same contributing ranks: %s",
               pick(&joined, 0, 1000, 1000));
    CHECK_TRUE(strcmp(pick(&joined, 1, 1000, 1000), "1") == 0, "a set of its own fuses alone");
    return check_verdict("test_fusion_policy");
}
