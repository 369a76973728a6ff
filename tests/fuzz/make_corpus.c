/*
 * make_corpus.c - writes the seed corpus of fuzz_wire.c (tests/fuzz/corpus/): real messages
 * made by the encoder, each prefixed by the mode byte fuzz_wire.c dispatches on (0 request
 * list, 1 response list, 2 and 3 builder payloads). Run by hand after a wire format change:
 *     cc -D_GNU_SOURCE -Ilibhvdc/include -Ilibhvdc/src tests/fuzz/make_corpus.c \
 *         libhvdc/src/negotiation/wire.c libhvdc/src/base/bytes.c -o mk
 *     ./mk tests/fuzz/corpus
 * The files are committed; tests/fuzz.sh only reads them.
 *
 * defines: main
 * Single-threaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiation/wire.h"

static const char *out_dir;
static int failures;

static void write_seed(const char *name, uint8_t mode, const uint8_t *data, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputc(mode, f) == EOF || (len && fwrite(data, 1, len, f) != len) || fclose(f)) {
        perror(path);
        failures++;
        return;
    }
    printf("%s: %zu bytes\n", path, len + 1);
}

static void seed_requests(const char *name, uint32_t flags, const hvdc_wire_request *const *items,
                          uint32_t n, const uint32_t *slots, uint32_t n_slots) {
    hvdc_bytes b = {0};
    if (hvdc__wire_encode_requests(&b, flags, items, n, slots, n_slots, -1500) != 0) {
        fprintf(stderr, "%s: encode failed\n", name);
        failures++;
        return;
    }
    write_seed(name, 0, b.data, b.len);
    hvdc__bytes_free(&b);
}

static void seed_responses(const char *name, const hvdc_response_list *list) {
    hvdc_bytes b = {0};
    if (hvdc__wire_encode_responses(&b, list) != 0) {
        fprintf(stderr, "%s: encode failed\n", name);
        failures++;
        return;
    }
    write_seed(name, 1, b.data, b.len);
    hvdc__bytes_free(&b);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];

    /* ---- request lists, as api.c/background.c send them ---- */
    uint64_t one[1] = {1000}, group[3] = {1, 7, 1000003}, splits[4] = {0, 3, 5, 2};
    hvdc_wire_request allreduce = {.name = "layer1.grad", .kind = HVDC_KIND_ALLREDUCE,
                                   .dtype = HVD_FLOAT32, .op = HVD_AVERAGE, .device = -1,
                                   .prescale = 0.5, .postscale = 2.0, .n_counts = 1,
                                   .counts = one};
    hvdc_wire_request grouped = {.name = "group.0", .kind = HVDC_KIND_ALLREDUCE,
                                 .dtype = HVD_BFLOAT16, .op = HVD_SUM, .device = -1,
                                 .prescale = 1, .postscale = 1,
                                 .members_hash = 0x123456789abcdefull, .n_counts = 3,
                                 .counts = group};
    hvdc_wire_request bcast = {.name = "w", .kind = HVDC_KIND_BROADCAST, .dtype = HVD_INT64,
                               .device = -1, .root = 3, .prescale = 1, .postscale = 1,
                               .n_counts = 1, .counts = one};
    hvdc_wire_request gather = {.name = "gather", .kind = HVDC_KIND_ALLGATHER,
                                .dtype = HVD_UINT8, .device = -1, .prescale = 1, .postscale = 1,
                                .capacity = 4096, .n_counts = 1, .counts = one};
    hvdc_wire_request a2a = {.name = "a2a", .kind = HVDC_KIND_ALLTOALL, .dtype = HVD_INT8,
                             .device = 0, .prescale = 1, .postscale = 1, .capacity = 10,
                             .n_counts = 4, .counts = splits};
    hvdc_wire_request barrier = {.name = "hvd.barrier.1", .kind = HVDC_KIND_BARRIER,
                                 .dtype = HVD_UINT8, .device = -1, .prescale = 1,
                                 .postscale = 1};
    hvdc_wire_request join = {.name = "hvd.join", .kind = HVDC_KIND_JOIN, .device = -1,
                              .prescale = 1, .postscale = 1};
    hvdc_wire_request longest = allreduce;
    memset(longest.name, 'x', HVD_MAX_NAME_LEN);
    longest.name[HVD_MAX_NAME_LEN] = '\0';

    seed_requests("req-empty.bin", 0, NULL, 0, NULL, 0);
    seed_requests("req-shutdown.bin", HVDC_FLAG_SHUTDOWN, NULL, 0, NULL, 0);
    const hvdc_wire_request *single[1] = {&allreduce};
    seed_requests("req-allreduce.bin", 0, single, 1, NULL, 0);
    uint32_t slots[4] = {0, 1, 17, 1023};
    seed_requests("req-cached.bin", 0, single, 1, slots, 4);
    const hvdc_wire_request *mixed[7] = {&allreduce, &grouped, &bcast, &gather, &a2a,
                                         &barrier, &join};
    seed_requests("req-every-kind.bin", 0, mixed, 7, NULL, 0);
    const hvdc_wire_request *longest_one[2] = {&longest, &a2a};
    seed_requests("req-longest-name.bin", HVDC_FLAG_SHUTDOWN, longest_one, 2, NULL, 0);

    /* ---- response lists, as negotiate.c answers ---- */
    char names[3][HVD_MAX_NAME_LEN + 1] = {"layer1.grad", "layer2.grad", "b.c"};
    uint64_t rank_counts[4] = {5, 6, 0, 9}, layout[4] = {10, 20, 30, 40};
    uint32_t per_name[3] = {1, 2, 1};
    hvdc_wire_response fused = {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_ALLREDUCE,
                                .n_names = 3, .names = names};
    hvdc_wire_response gathered = {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_ALLGATHER,
                                   .n_names = 1, .names = names, .n_rank_counts = 4,
                                   .rank_counts = rank_counts};
    hvdc_wire_response error = {.type = HVDC_RESPONSE_ERROR, .kind = HVDC_KIND_BROADCAST,
                                .n_names = 1, .names = names,
                                .error = "broadcast 'layer1.grad': root differs: rank 0 has 0, "
                                         "rank 1 has 1"};
    hvdc_wire_response joined = {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_ALLREDUCE,
                                 .n_names = 3, .names = names, .n_joined = 1,
                                 .dtype = HVD_FLOAT64, .op = HVD_MAX,
                                 .tensors_per_name = per_name, .n_counts = 4, .counts = layout};
    hvdc_wire_response join_done = {.type = HVDC_RESPONSE_EXECUTE, .kind = HVDC_KIND_JOIN,
                                    .n_names = 1, .names = names, .n_rank_counts = 1,
                                    .rank_counts = rank_counts};

    seed_responses("resp-empty.bin", &(hvdc_response_list){0, 0, NULL, NULL});
    seed_responses("resp-fused.bin", &(hvdc_response_list){0, 1, &fused, NULL});
    hvdc_wire_response several[4] = {fused, gathered, error, join_done};
    seed_responses("resp-several.bin", &(hvdc_response_list){HVDC_FLAG_SHUTDOWN, 4, several, NULL});
    seed_responses("resp-joined.bin", &(hvdc_response_list){0, 1, &joined, NULL});
    uint32_t cached_slots[3] = {3, 0, 511};
    hvdc_wire_response cached = fused;
    cached.slots = cached_slots;
    hvdc_wire_response cached_and_named[2] = {cached, gathered};
    seed_responses("resp-cached.bin", &(hvdc_response_list){0, 2, cached_and_named, NULL});
    seed_responses("resp-abort.bin",
                   &(hvdc_response_list){HVDC_ABORT_FLAGS(HVD_ERR_STALLED), 1, &error,
                                         "stalled: rank 2 never submitted 'layer1.grad'"});
    seed_responses("resp-tune.bin", &(hvdc_response_list){HVDC_FLAG_TUNE, 1, &cached, NULL, 2.0, 256 * 1024});

    /* ---- builder payloads (modes 2 and 3): any bytes are valid; give them a few ---- */
    uint8_t payload[256];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 37 + 11);
    write_seed("build-req.bin", 2, payload, sizeof payload);
    write_seed("build-resp.bin", 3, payload, sizeof payload);
    return failures ? 1 : 0;
}
