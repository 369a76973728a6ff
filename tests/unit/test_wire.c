/* Unit test: request/response lists survive encode -> decode, and every truncation or damaged
 * byte of a message is rejected or decoded safely (never read out of bounds: run under ASan). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "negotiation/wire.h"

int main(void) {
    uint64_t counts_a[1] = {1000}, counts_b[3] = {1, 7, 1000003};
    hvdc_wire_request a = {.name = "layer1.grad", .kind = HVDC_KIND_ALLREDUCE, .dtype = HVD_FLOAT32,
                           .op = HVD_AVERAGE, .device = -1, .root = 0, .prescale = 0.5,
                           .postscale = 2.0, .n_counts = 1, .counts = counts_a};
    uint64_t shape_b[3] = {2, 0, 1ull << 40};
    hvdc_wire_request b = {.name = "group", .kind = HVDC_KIND_ALLTOALL, .dtype = HVD_BFLOAT16,
                           .device = 3, .root = -7, .prescale = 1, .postscale = 1,
                           .members_hash = 0x123456789abcdefull, .capacity = 99, .n_counts = 3,
                           .counts = counts_b, .has_shape = 1, .ndim = 3, .shape = shape_b};
    const hvdc_wire_request *items[2] = {&a, &b};
    hvdc_bytes bytes = {0};
    uint32_t slots[3] = {0, 7, 1023};
    CHECK_TRUE(
        hvdc__wire_encode_requests(&bytes, HVDC_FLAG_SHUTDOWN, items, 2, slots, 3, -40000) == 0,
        "encode");
    hvdc_request_list list;
    const char *why = NULL;
    CHECK_TRUE(hvdc__wire_decode_requests(bytes.data, bytes.len, &list, &why) == 0, "decode: %s", why);
    CHECK_TRUE(list.flags == HVDC_FLAG_SHUTDOWN && list.n == 2, "header");
    CHECK_TRUE(list.n_slots == 3 && list.slots[1] == 7 && list.slots[2] == 1023, "cached slots");
    CHECK_TRUE(list.ready_us == -40000, "when the sender was ready: %d us", list.ready_us);
    if (list.n == 2) {
        hvdc_wire_request *x = &list.items[0], *y = &list.items[1];
        CHECK_TRUE(strcmp(x->name, "layer1.grad") == 0 && x->op == HVD_AVERAGE && x->prescale == 0.5 &&
                   x->postscale == 2.0 && x->device == -1 && x->counts[0] == 1000, "first request");
        CHECK_TRUE(y->kind == HVDC_KIND_ALLTOALL && y->root == -7 && y->device == 3 &&
                   y->members_hash == 0x123456789abcdefull && y->capacity == 99 &&
                   y->n_counts == 3 && y->counts[2] == 1000003, "second request");
        CHECK_TRUE(!x->has_shape && x->ndim == 0 && x->shape == NULL, "no shape stays none");
        CHECK_TRUE(y->has_shape && y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 0 &&
                   y->shape[2] == 1ull << 40, "the shape survives");
        hvdc_wire_request copy;
        CHECK_TRUE(hvdc__wire_request_copy(&copy, y) == 0 && copy.shape != y->shape &&
                   copy.ndim == 3 && copy.shape[2] == y->shape[2] && copy.counts != y->counts &&
                   copy.counts[2] == 1000003, "a deep copy");
        hvdc__wire_request_free(&copy);
    }
    hvdc__request_list_free(&list);

    /* every truncation fails cleanly */
    int accepted = 0;
    for (size_t len = 0; len < bytes.len; len++)
        if (hvdc__wire_decode_requests(bytes.data, len, &list, &why) == 0) {
            accepted++;
            hvdc__request_list_free(&list);
        }
    CHECK_TRUE(accepted == 0, "%d truncated messages were accepted", accepted);
    /* flipping any byte either fails or decodes to something freeable */
    for (size_t i = 0; i < bytes.len; i++) {
        uint8_t saved = bytes.data[i];
        bytes.data[i] ^= 0xff;
        if (hvdc__wire_decode_requests(bytes.data, bytes.len, &list, &why) == 0)
            hvdc__request_list_free(&list);
        bytes.data[i] = saved;
    }
    bytes.data[0] ^= 1;
    CHECK_TRUE(hvdc__wire_decode_requests(bytes.data, bytes.len, &list, &why) != 0 &&
               strstr(why, "magic"), "bad magic is named: %s", why);

    /* responses */
    char names[2][HVD_MAX_NAME_LEN + 1] = {"a", "b.c"};
    uint64_t rank_counts[2] = {5, 6};
    hvdc_wire_response r[2] = {
        {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_ALLGATHER, .n_names = 2, .names = names,
         .n_rank_counts = 2, .rank_counts = rank_counts},
        {.type = HVDC_RESPONSE_ERROR, .kind = HVDC_KIND_ALLREDUCE, .n_names = 1, .names = names,
         .error = "count differs"},
    };
    hvdc_response_list rl = {0, 2, r, NULL, 0, 0, NULL}, back;
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &rl) == 0, "encode responses");
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) == 0, "decode: %s", why);
    CHECK_TRUE(back.n == 2 && back.items[0].n_names == 2 && strcmp(back.items[0].names[1], "b.c") == 0 &&
               back.items[0].rank_counts[1] == 6 && back.items[1].type == HVDC_RESPONSE_ERROR &&
               strcmp(back.items[1].error, "count differs") == 0, "responses round trip");
    hvdc__response_list_free(&back);
    accepted = 0;
    for (size_t len = 0; len < bytes.len; len++)
        if (hvdc__wire_decode_responses(bytes.data, len, &back, &why) == 0) {
            accepted++;
            hvdc__response_list_free(&back);
        }
    CHECK_TRUE(accepted == 0, "%d truncated response lists were accepted", accepted);
    /* a response for ranks that joined carries the tensor layout */
    uint32_t per_name[2] = {1, 2};
    uint64_t layout[3] = {10, 20, 30};
    hvdc_wire_response j = {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_ALLREDUCE, .n_names = 2,
                            .names = names, .n_joined = 1, .dtype = HVD_INT64, .op = HVD_MAX,
                            .tensors_per_name = per_name, .n_counts = 3, .counts = layout};
    hvdc_response_list jl = {HVDC_ABORT_FLAGS(HVD_ERR_STALLED), 1, &j, "why", 0, 0, NULL};
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &jl) == 0, "encode joined layout");
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) == 0, "decode: %s", why);
    CHECK_TRUE(back.n == 1 && back.items[0].n_joined == 1 && back.items[0].op == HVD_MAX &&
               back.items[0].tensors_per_name[1] == 2 && back.items[0].counts[2] == 30 &&
               HVDC_ABORT_STATUS(back.flags) == HVD_ERR_STALLED && strcmp(back.reason, "why") == 0,
               "joined layout and abort reason round trip");
    hvdc__response_list_free(&back);
    /* autotuning's cycle time and shared-memory step reach every rank (HVDC_FLAG_TUNE); out of
     * range is refused */
    hvdc_response_list tl = {HVDC_FLAG_TUNE, 1, &j, NULL, 2.5, 512 * 1024, NULL};
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &tl) == 0, "encode tune");
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) == 0, "decode: %s", why);
    CHECK_TRUE(back.flags == HVDC_FLAG_TUNE && back.cycle_time_ms == 2.5 && back.n == 1 &&
               back.shm_step_bytes == 512 * 1024, "cycle time and step round trip");
    hvdc__response_list_free(&back);
    tl.shm_step_bytes = ((uint64_t)1 << 30) + 4096; /* past any slot: a damaged message */
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &tl) == 0, "encode huge step");
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) != 0 && why &&
               strstr(why, "shared-memory step"), "a step over 1 GiB is refused");
    tl.shm_step_bytes = 0; /* unchanged: the tuner sends it until it tries steps */
    tl.cycle_time_ms = 0; /* HVD_CYCLE_TIME=0 is a setting the tuner may settle on */
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &tl) == 0, "encode tune 0");
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) == 0 &&
               back.flags == HVDC_FLAG_TUNE && back.cycle_time_ms == 0, "a cycle time of 0 travels");
    hvdc__response_list_free(&back);
    tl.cycle_time_ms = -1;
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &tl) == 0, "encode tune -1");
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) != 0 && why &&
               strstr(why, "cycle time"), "a negative cycle time is refused");
    tl.flags = 0;
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &tl) == 0, "encode untuned");
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) == 0 &&
               back.cycle_time_ms == 0, "no cycle time without the flag");
    hvdc__response_list_free(&back);
    /* a cached response carries slot numbers, not names: its size does not grow with them */
    char long_names[2][HVD_MAX_NAME_LEN + 1];
    memset(long_names, 'x', sizeof long_names);
    long_names[0][200] = long_names[1][200] = '\0';
    uint32_t cached_slots[2] = {4, 9};
    hvdc_wire_response c = {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_ALLREDUCE, .n_names = 2,
                            .names = long_names, .slots = cached_slots};
    hvdc_response_list cl = {0, 1, &c, NULL, 0, 0, NULL};
    CHECK_TRUE(hvdc__wire_encode_responses(&bytes, &cl) == 0, "encode cached");
    size_t cached_len = bytes.len;
    CHECK_TRUE(cached_len < 60, "a cached response of 2 names takes %zu bytes", cached_len);
    CHECK_TRUE(hvdc__wire_decode_responses(bytes.data, bytes.len, &back, &why) == 0, "decode: %s", why);
    CHECK_TRUE(back.n == 1 && back.items[0].slots && back.items[0].slots[1] == 9 &&
               back.items[0].names[0][0] == '\0', "cached response round trip (names left empty)");
    hvdc__response_list_free(&back);
    hvdc__bytes_free(&bytes);
    return check_verdict("wire encoding");
}
