/*
 * fuzz_wire.c - libFuzzer target for the negotiation message codec (libhvdc/src/wire.c).
 *
 * The first input byte picks a mode (byte % 4); the rest is the payload:
 *   0  decode a request list. Failure must leave the list empty and give a reason; success must
 *      give a list that obeys the decoder's invariants and re-encodes to exactly the input.
 *   1  decode a response list, likewise: re-encoding gives exactly the input (texts with NUL
 *      bytes are refused by the decoder, as names are), and decodes to the same list.
 *   2  build a valid request list from the payload, encode it: it must decode to the same list.
 *   3  the same for a response list.
 * Any broken property aborts (a crash to libFuzzer, a failed test to tests/fuzz/replay.c);
 * ASan/UBSan/LeakSanitizer catch the rest. Built by tests/fuzz.sh (clang, libFuzzer) and by
 * tests/fuzz/meson.build (any compiler, with replay.c as main, to replay corpus/ and regressions/).
 *
 * defines: LLVMFuzzerTestOneInput
 * Single-threaded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiation/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: fuzz_wire: broken: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* ---- comparing decoded lists ------------------------------------------------------------- */

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static int same_u64s(const uint64_t *a, const uint64_t *b, uint32_t n) {
    return n == 0 || (a && b && memcmp(a, b, n * sizeof *a) == 0);
}

/* NULL and "" are the same text on the wire (length 0). */
static int same_text(const char *a, const char *b) {
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static int same_request(const hvdc_wire_request *a, const hvdc_wire_request *b) {
    return strcmp(a->name, b->name) == 0 && a->kind == b->kind && a->dtype == b->dtype &&
           a->op == b->op && a->device == b->device && a->root == b->root &&
           same_bits(a->prescale, b->prescale) && same_bits(a->postscale, b->postscale) &&
           a->members_hash == b->members_hash && a->capacity == b->capacity &&
           a->n_counts == b->n_counts && same_u64s(a->counts, b->counts, a->n_counts);
}

static int same_response(const hvdc_wire_response *a, const hvdc_wire_response *b) {
    if (a->type != b->type || a->kind != b->kind || a->n_names != b->n_names ||
        a->n_rank_counts != b->n_rank_counts || a->n_joined != b->n_joined ||
        !same_text(a->error, b->error) ||
        !same_u64s(a->rank_counts, b->rank_counts, a->n_rank_counts))
        return 0;
    if ((a->slots == NULL) != (b->slots == NULL)) return 0;
    for (uint32_t k = 0; k < a->n_names; k++)
        if (a->slots ? a->slots[k] != b->slots[k] : strcmp(a->names[k], b->names[k]) != 0) return 0;
    if (a->n_joined == 0) return 1; /* the layout travels only for joined ranks */
    return a->dtype == b->dtype && a->op == b->op && a->n_counts == b->n_counts &&
           memcmp(a->tensors_per_name, b->tensors_per_name,
                  a->n_names * sizeof *a->tensors_per_name) == 0 &&
           same_u64s(a->counts, b->counts, a->n_counts);
}

/* What every successfully decoded list must satisfy (what the background thread relies on). */
static void check_request_invariants(const hvdc_request_list *l) {
    FUZZ_CHECK(l->n == 0 || l->items, "items missing");
    for (uint32_t i = 0; i < l->n; i++) {
        const hvdc_wire_request *q = &l->items[i];
        size_t len = strnlen(q->name, sizeof q->name);
        FUZZ_CHECK(len >= 1 && len <= HVD_MAX_NAME_LEN, "request %u: name length %zu", i, len);
        FUZZ_CHECK(q->kind < HVDC_KIND_COUNT, "request %u: kind %u", i, q->kind);
        FUZZ_CHECK((q->n_counts == 0) == (q->counts == NULL), "request %u: counts", i);
    }
}

static void check_response_invariants(const hvdc_response_list *l) {
    FUZZ_CHECK(l->n == 0 || l->items, "items missing");
    FUZZ_CHECK(!(l->flags & HVDC_FLAG_ABORT) || l->reason, "abort without a reason");
    for (uint32_t i = 0; i < l->n; i++) {
        const hvdc_wire_response *s = &l->items[i];
        FUZZ_CHECK(s->type <= HVDC_RESPONSE_ERROR, "response %u: type %u", i, s->type);
        FUZZ_CHECK(s->kind < HVDC_KIND_COUNT, "response %u: kind %u", i, s->kind);
        FUZZ_CHECK(s->n_names >= 1 && s->names, "response %u: no names", i);
        for (uint32_t k = 0; k < s->n_names; k++) {
            size_t len = strnlen(s->names[k], sizeof s->names[k]);
            /* a cached response carries slots; its names are left for the receiver to fill */
            if (s->slots) FUZZ_CHECK(len == 0, "response %u name %u: cached but named", i, k);
            else FUZZ_CHECK(len >= 1 && len <= HVD_MAX_NAME_LEN, "response %u name %u: length %zu",
                            i, k, len);
        }
        FUZZ_CHECK((s->n_rank_counts == 0) == (s->rank_counts == NULL), "response %u: ranks", i);
        FUZZ_CHECK(s->type != HVDC_RESPONSE_ERROR || s->error, "response %u: error text", i);
        if (s->n_joined == 0) {
            FUZZ_CHECK(!s->tensors_per_name && !s->counts && s->n_counts == 0,
                       "response %u: layout without joined ranks", i);
            continue;
        }
        uint64_t total = 0;
        for (uint32_t k = 0; k < s->n_names; k++) total += s->tensors_per_name[k];
        FUZZ_CHECK(total == s->n_counts, "response %u: %llu tensors, %u counts", i,
                   (unsigned long long)total, s->n_counts);
        FUZZ_CHECK((s->n_counts == 0) == (s->counts == NULL), "response %u: counts", i);
    }
}

/* ---- modes 0 and 1: decode arbitrary bytes ------------------------------------------------ */

static void encode_request_list(hvdc_bytes *out, const hvdc_request_list *l) {
    const hvdc_wire_request **ptrs = malloc((l->n ? l->n : 1) * sizeof *ptrs);
    FUZZ_CHECK(ptrs, "out of memory");
    for (uint32_t i = 0; i < l->n; i++) ptrs[i] = &l->items[i];
    FUZZ_CHECK(hvdc__wire_encode_requests(out, l->flags, ptrs, l->n, l->slots, l->n_slots,
                                          l->ready_us) == 0, "encode failed");
    free(ptrs);
}

/* Decodes bytes that encode_request_list wrote: must succeed and equal `want`. */
static void check_requests_decode_to(const hvdc_bytes *bytes, const hvdc_request_list *want) {
    hvdc_request_list got;
    const char *why = NULL;
    FUZZ_CHECK(hvdc__wire_decode_requests(bytes->data, bytes->len, &got, &why) == 0,
               "an encoded request list does not decode: %s", why ? why : "(no reason)");
    check_request_invariants(&got);
    FUZZ_CHECK(got.flags == want->flags && got.n == want->n && got.ready_us == want->ready_us,
               "header or readiness differs after round trip");
    for (uint32_t i = 0; i < got.n; i++)
        FUZZ_CHECK(same_request(&got.items[i], &want->items[i]), "request %u differs", i);
    FUZZ_CHECK(got.n_slots == want->n_slots &&
               (got.n_slots == 0 || memcmp(got.slots, want->slots, got.n_slots * sizeof *got.slots) == 0),
               "cached slots differ after round trip");
    hvdc__request_list_free(&got);
}

static void fuzz_decode_requests(const uint8_t *data, size_t len) {
    hvdc_request_list list;
    const char *why = NULL;
    if (hvdc__wire_decode_requests(data, len, &list, &why) != 0) {
        FUZZ_CHECK(why && *why, "refused without a reason");
        FUZZ_CHECK(list.n == 0 && list.items == NULL, "a refused list was not emptied");
        return;
    }
    check_request_invariants(&list);
    hvdc_bytes again = {0};
    encode_request_list(&again, &list);
    FUZZ_CHECK(again.len == len && memcmp(again.data, data, len) == 0,
               "re-encoding a decoded request list gives other bytes (%zu vs %zu)", again.len,
               len);
    check_requests_decode_to(&again, &list);
    hvdc__bytes_free(&again);
    hvdc__request_list_free(&list);
}

static void check_responses_decode_to(const hvdc_bytes *bytes, const hvdc_response_list *want) {
    hvdc_response_list got;
    const char *why = NULL;
    FUZZ_CHECK(hvdc__wire_decode_responses(bytes->data, bytes->len, &got, &why) == 0,
               "an encoded response list does not decode: %s", why ? why : "(no reason)");
    check_response_invariants(&got);
    FUZZ_CHECK(got.flags == want->flags && got.n == want->n, "header differs after round trip");
    FUZZ_CHECK(same_text(got.reason, want->reason), "reason differs after round trip");
    FUZZ_CHECK(!(got.flags & HVDC_FLAG_TUNE) || (got.cycle_time_ms == want->cycle_time_ms &&
                                                 got.shm_step_bytes == want->shm_step_bytes),
               "cycle time or shared-memory step differs after round trip");
    for (uint32_t i = 0; i < got.n; i++)
        FUZZ_CHECK(same_response(&got.items[i], &want->items[i]), "response %u differs", i);
    hvdc__response_list_free(&got);
}

static void fuzz_decode_responses(const uint8_t *data, size_t len) {
    hvdc_response_list list;
    const char *why = NULL;
    if (hvdc__wire_decode_responses(data, len, &list, &why) != 0) {
        FUZZ_CHECK(why && *why, "refused without a reason");
        FUZZ_CHECK(list.n == 0 && list.items == NULL && list.reason == NULL,
                   "a refused list was not emptied");
        return;
    }
    check_response_invariants(&list);
    hvdc_bytes again = {0}, third = {0};
    FUZZ_CHECK(hvdc__wire_encode_responses(&again, &list) == 0, "encode failed");
    /* Exact: the decoder refuses texts with NUL bytes, so nothing is lost on the way. */
    FUZZ_CHECK(again.len == len && memcmp(again.data, data, len) == 0,
               "re-encoding a decoded response list gives other bytes (%zu vs %zu)", again.len,
               len);
    check_responses_decode_to(&again, &list);
    hvdc_response_list back;
    FUZZ_CHECK(hvdc__wire_decode_responses(again.data, again.len, &back, &why) == 0, "decode");
    FUZZ_CHECK(hvdc__wire_encode_responses(&third, &back) == 0, "encode failed");
    FUZZ_CHECK(third.len == again.len && memcmp(third.data, again.data, again.len) == 0,
               "encode(decode(encode(list))) is not a fixed point");
    hvdc__response_list_free(&back);
    hvdc__bytes_free(&third);
    hvdc__bytes_free(&again);
    hvdc__response_list_free(&list);
}

/* ---- modes 2 and 3: valid lists built from the payload ------------------------------------ */

/* Takes bytes off the payload; zeros once it runs out. */
typedef struct source {
    const uint8_t *p;
    size_t left;
} source;

static uint64_t take(source *s, int nbytes) {
    uint64_t v = 0;
    for (int i = 0; i < nbytes && s->left; i++, s->p++, s->left--) v |= (uint64_t)*s->p << (8 * i);
    return v;
}

/* A name as callers make them: 1..HVD_MAX_NAME_LEN bytes, no NUL. */
static void take_name(source *s, char name[HVD_MAX_NAME_LEN + 1]) {
    size_t len = 1 + take(s, 1) % HVD_MAX_NAME_LEN;
    for (size_t i = 0; i < len; i++) name[i] = (char)(1 + take(s, 1) % 255);
    name[len] = '\0';
}

/* A text of 0..300 bytes without NUL, or NULL. */
static char *take_text(source *s) {
    uint64_t len = take(s, 2) % 301;
    if (len == 0) return NULL;
    char *text = malloc(len + 1);
    FUZZ_CHECK(text, "out of memory");
    for (uint64_t i = 0; i < len; i++) text[i] = (char)(1 + take(s, 1) % 255);
    text[len] = '\0';
    return text;
}

static uint64_t *take_u64s(source *s, uint32_t n) {
    if (n == 0) return NULL;
    uint64_t *v = malloc(n * sizeof *v);
    FUZZ_CHECK(v, "out of memory");
    for (uint32_t i = 0; i < n; i++) v[i] = take(s, 8);
    return v;
}

static void fuzz_build_requests(const uint8_t *data, size_t len) {
    source s = {data, len};
    hvdc_request_list list = {.flags = (uint32_t)take(&s, 4), .n = (uint32_t)(take(&s, 1) % 9)};
    list.items = calloc(list.n ? list.n : 1, sizeof *list.items);
    FUZZ_CHECK(list.items, "out of memory");
    for (uint32_t i = 0; i < list.n; i++) {
        hvdc_wire_request *q = &list.items[i];
        take_name(&s, q->name);
        q->kind = (uint8_t)(take(&s, 1) % HVDC_KIND_COUNT);
        q->dtype = (uint8_t)take(&s, 1);
        q->op = (uint8_t)take(&s, 1);
        q->device = (int32_t)(uint32_t)take(&s, 4);
        q->root = (int32_t)(uint32_t)take(&s, 4);
        uint64_t bits = take(&s, 8);
        memcpy(&q->prescale, &bits, sizeof bits);
        bits = take(&s, 8);
        memcpy(&q->postscale, &bits, sizeof bits);
        q->members_hash = take(&s, 8);
        q->capacity = take(&s, 8);
        q->n_counts = (uint32_t)(take(&s, 1) % 17);
        q->counts = take_u64s(&s, q->n_counts);
    }
    list.n_slots = (uint32_t)(take(&s, 1) % 9);
    list.slots = malloc((list.n_slots ? list.n_slots : 1) * sizeof *list.slots);
    FUZZ_CHECK(list.slots, "out of memory");
    for (uint32_t k = 0; k < list.n_slots; k++) list.slots[k] = (uint32_t)take(&s, 4);
    list.ready_us = (int32_t)(uint32_t)take(&s, 4);
    hvdc_bytes bytes = {0};
    encode_request_list(&bytes, &list);
    check_requests_decode_to(&bytes, &list);
    hvdc__bytes_free(&bytes);
    hvdc__request_list_free(&list);
}

static void fuzz_build_responses(const uint8_t *data, size_t len) {
    source s = {data, len};
    hvdc_response_list list = {.flags = (uint32_t)take(&s, 4), .n = (uint32_t)(take(&s, 1) % 9)};
    list.items = calloc(list.n ? list.n : 1, sizeof *list.items);
    FUZZ_CHECK(list.items, "out of memory");
    for (uint32_t i = 0; i < list.n; i++) {
        hvdc_wire_response *r = &list.items[i];
        r->type = (uint8_t)(take(&s, 1) % 2);
        r->kind = (uint8_t)(take(&s, 1) % HVDC_KIND_COUNT);
        r->n_names = 1 + (uint32_t)(take(&s, 1) % 8);
        r->names = calloc(r->n_names, sizeof *r->names);
        FUZZ_CHECK(r->names, "out of memory");
        if (take(&s, 1) % 2) { /* cached: slot numbers travel, names stay empty */
            r->slots = malloc(r->n_names * sizeof *r->slots);
            FUZZ_CHECK(r->slots, "out of memory");
            for (uint32_t k = 0; k < r->n_names; k++) r->slots[k] = (uint32_t)take(&s, 4);
        } else {
            for (uint32_t k = 0; k < r->n_names; k++) take_name(&s, r->names[k]);
        }
        r->n_rank_counts = (uint32_t)(take(&s, 1) % 9);
        r->rank_counts = take_u64s(&s, r->n_rank_counts);
        r->error = take_text(&s);
        r->n_joined = (uint32_t)take(&s, 1) % 3;
        if (r->n_joined == 0) continue;
        r->dtype = (uint8_t)take(&s, 1);
        r->op = (uint8_t)take(&s, 1);
        r->tensors_per_name = malloc(r->n_names * sizeof *r->tensors_per_name);
        FUZZ_CHECK(r->tensors_per_name, "out of memory");
        for (uint32_t k = 0; k < r->n_names; k++) {
            r->tensors_per_name[k] = (uint32_t)(take(&s, 1) % 5);
            r->n_counts += r->tensors_per_name[k];
        }
        r->counts = take_u64s(&s, r->n_counts);
    }
    list.reason = take_text(&s);
    if (list.flags & HVDC_FLAG_TUNE) {
        list.cycle_time_ms = (1 + take(&s, 2) % 20000) * 0.5; /* (0, 10 s] */
        list.shm_step_bytes = take(&s, 2) % 1025 * 4096;     /* 0 (unchanged) .. 4 MiB */
    }
    hvdc_bytes bytes = {0};
    FUZZ_CHECK(hvdc__wire_encode_responses(&bytes, &list) == 0, "encode failed");
    check_responses_decode_to(&bytes, &list);
    hvdc__bytes_free(&bytes);
    hvdc__response_list_free(&list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    switch (data[0] % 4) {
    case 0: fuzz_decode_requests(data + 1, size - 1); break;
    case 1: fuzz_decode_responses(data + 1, size - 1); break;
    case 2: fuzz_build_requests(data + 1, size - 1); break;
    default: fuzz_build_responses(data + 1, size - 1); break;
    }
    return 0;
}
