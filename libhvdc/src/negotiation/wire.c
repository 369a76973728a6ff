/*
 * wire.c - binary encoding of request and response lists. Little-endian fixed-width fields
 * written byte by byte, so ranks on different hosts agree whatever their compiler's padding.
 *
 * request list:  magic u32 | version u16 | flags u32 | n u32 | n x request
 * request:       name (u16 len + bytes) | kind u8 | dtype u8 | op u8 | device i32 | root i32 |
 *                prescale f64 | postscale f64 | members_hash u64 | capacity u64 |
 *                n_counts u32 | n_counts x u64 | has_shape u8 | ndim u32 | ndim x u64
 * response list: magic u32 | version u16 | flags u32 | n u32 | n x response |
 *                reason (u32 len + bytes) |
 *                with HVDC_FLAG_TUNE: cycle_time_ms f64 | shm_step_bytes u64
 * response:      type u8 | kind u8 | n_names u32 | n_names x name |
 *                n_rank_counts u32 | n_rank_counts x u64 | error (u32 len + bytes) |
 *                n_joined u32, and when n_joined > 0: dtype u8 | op u8 |
 *                tensors_per_name (n_names x u32) | n_counts u32 | n_counts x u64
 * Pure; background thread.
 */
#include "negotiation/wire.h"

#include <stdlib.h>
#include <string.h>

/* Caps that keep a damaged length field from asking for absurd allocations. */
#define MAX_ITEMS (1u << 24)
#define MAX_COUNTS (1u << 24)
#define MAX_ERROR_LEN (1u << 16)

const char *hvdc__kind_name(int kind) {
    static const char *const names[HVDC_KIND_COUNT] = {
        "allreduce", "broadcast", "allgather", "reducescatter", "alltoall", "barrier", "join"};
    return kind >= 0 && kind < HVDC_KIND_COUNT ? names[kind] : "unknown-operation";
}

/* ---- writing ---- */

static int put_uint(hvdc_bytes *b, uint64_t v, int nbytes) {
    if (hvdc__bytes_reserve(b, (size_t)nbytes)) return -1;
    for (int i = 0; i < nbytes; i++) b->data[b->len++] = (uint8_t)(v >> (8 * i));
    return 0;
}

/* n u32 values, room made once: a cached round's slots are most of its bytes. */
static int put_u32_array(hvdc_bytes *b, const uint32_t *v, uint32_t n) {
    if (hvdc__bytes_reserve(b, (size_t)n * 4)) return -1;
    uint8_t *p = b->data + b->len;
    for (uint32_t k = 0; k < n; k++, p += 4) {
        p[0] = (uint8_t)v[k];
        p[1] = (uint8_t)(v[k] >> 8);
        p[2] = (uint8_t)(v[k] >> 16);
        p[3] = (uint8_t)(v[k] >> 24);
    }
    b->len += (size_t)n * 4;
    return 0;
}

static int put_f64(hvdc_bytes *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return put_uint(b, bits, 8);
}

static int put_name(hvdc_bytes *b, const char *name) {
    size_t len = strnlen(name, HVD_MAX_NAME_LEN);
    return put_uint(b, len, 2) || hvdc__bytes_append(b, name, len);
}

/* An optional string: u32 length (0 for NULL) + bytes. */
static int put_text(hvdc_bytes *b, const char *text) {
    size_t len = text ? strnlen(text, MAX_ERROR_LEN - 1) : 0;
    return put_uint(b, len, 4) || hvdc__bytes_append(b, text, len);
}

static int put_header(hvdc_bytes *b, uint32_t flags, uint32_t n) {
    b->len = 0;
    return put_uint(b, HVDC_WIRE_MAGIC, 4) || put_uint(b, HVDC_WIRE_VERSION, 2) ||
           put_uint(b, flags, 4) || put_uint(b, n, 4);
}

int hvdc__wire_encode_requests(hvdc_bytes *out, uint32_t flags,
                               const hvdc_wire_request *const *items, uint32_t n,
                               const uint32_t *slots, uint32_t n_slots, int32_t ready_us) {
    if (put_header(out, flags, n)) return -1;
    for (uint32_t i = 0; i < n; i++) {
        const hvdc_wire_request *r = items[i];
        if (put_name(out, r->name) || put_uint(out, r->kind, 1) || put_uint(out, r->dtype, 1) ||
            put_uint(out, r->op, 1) || put_uint(out, (uint32_t)r->device, 4) ||
            put_uint(out, (uint32_t)r->root, 4) || put_f64(out, r->prescale) ||
            put_f64(out, r->postscale) || put_uint(out, r->members_hash, 8) ||
            put_uint(out, r->capacity, 8) || put_uint(out, r->n_counts, 4))
            return -1;
        for (uint32_t c = 0; c < r->n_counts; c++)
            if (put_uint(out, r->counts[c], 8)) return -1;
        if (put_uint(out, r->has_shape, 1) || put_uint(out, r->ndim, 4)) return -1;
        for (uint32_t d = 0; d < r->ndim; d++)
            if (put_uint(out, r->shape[d], 8)) return -1;
    }
    return put_uint(out, n_slots, 4) || put_u32_array(out, slots, n_slots) ||
                   put_uint(out, (uint32_t)ready_us, 4) ? -1 : 0;
}

int hvdc__wire_encode_responses(hvdc_bytes *out, const hvdc_response_list *list) {
    if (put_header(out, list->flags, list->n)) return -1;
    for (uint32_t i = 0; i < list->n; i++) {
        const hvdc_wire_response *r = &list->items[i];
        if (put_uint(out, r->type, 1) || put_uint(out, r->kind, 1) ||
            put_uint(out, r->slots != NULL, 1) || put_uint(out, r->n_names, 4))
            return -1;
        if (r->slots && put_u32_array(out, r->slots, r->n_names)) return -1;
        for (uint32_t k = 0; !r->slots && k < r->n_names; k++)
            if (put_name(out, r->names[k])) return -1;
        if (put_uint(out, r->n_rank_counts, 4)) return -1;
        for (uint32_t k = 0; k < r->n_rank_counts; k++)
            if (put_uint(out, r->rank_counts[k], 8)) return -1;
        if (put_text(out, r->error) || put_uint(out, r->n_joined, 4)) return -1;
        if (r->n_joined == 0) continue;
        if (put_uint(out, r->dtype, 1) || put_uint(out, r->op, 1)) return -1;
        for (uint32_t k = 0; k < r->n_names; k++)
            if (put_uint(out, r->tensors_per_name[k], 4)) return -1;
        if (put_uint(out, r->n_counts, 4)) return -1;
        for (uint32_t k = 0; k < r->n_counts; k++)
            if (put_uint(out, r->counts[k], 8)) return -1;
    }
    if (put_text(out, list->reason)) return -1;
    if (!(list->flags & HVDC_FLAG_TUNE)) return 0;
    return put_f64(out, list->cycle_time_ms) || put_uint(out, list->shm_step_bytes, 8) ? -1 : 0;
}

/* ---- reading ---- */

typedef struct reader {
    const uint8_t *p;
    size_t left;
    const char *why; /* first problem seen */
} reader;

static int fail_read(reader *r, const char *why) {
    if (!r->why) r->why = why;
    return -1;
}

static int get_uint(reader *r, int nbytes, uint64_t *v) {
    if (r->left < (size_t)nbytes) return fail_read(r, "message ends in the middle of a field");
    uint64_t x = 0;
    for (int i = 0; i < nbytes; i++) x |= (uint64_t)r->p[i] << (8 * i);
    r->p += nbytes;
    r->left -= (size_t)nbytes;
    *v = x;
    return 0;
}

static int get_u8(reader *r, uint8_t *v) {
    uint64_t x;
    if (get_uint(r, 1, &x)) return -1;
    *v = (uint8_t)x;
    return 0;
}

static int get_u32(reader *r, uint32_t *v) {
    uint64_t x;
    if (get_uint(r, 4, &x)) return -1;
    *v = (uint32_t)x;
    return 0;
}

static int get_f64(reader *r, double *v) {
    uint64_t bits;
    if (get_uint(r, 8, &bits)) return -1;
    memcpy(v, &bits, sizeof *v);
    return 0;
}

static int get_name(reader *r, char name[HVD_MAX_NAME_LEN + 1]) {
    uint64_t len;
    if (get_uint(r, 2, &len)) return -1;
    if (len == 0 || len > HVD_MAX_NAME_LEN) return fail_read(r, "name length out of range");
    if (r->left < len) return fail_read(r, "message ends in the middle of a name");
    memcpy(name, r->p, len);
    name[len] = '\0';
    if (strlen(name) != len) return fail_read(r, "name contains a NUL byte");
    r->p += len;
    r->left -= len;
    return 0;
}

/* Reads n u64 values into a new array (NULL when n == 0). */
static int get_u64_array(reader *r, uint32_t n, uint64_t **out) {
    *out = NULL;
    if (n == 0) return 0;
    if (n > MAX_COUNTS || r->left / 8 < n) return fail_read(r, "count array longer than message");
    uint64_t *values = malloc((size_t)n * sizeof *values);
    if (!values) return fail_read(r, "out of memory");
    for (uint32_t i = 0; i < n; i++) get_uint(r, 8, &values[i]);
    *out = values;
    return 0;
}

static int get_header(reader *r, uint32_t *flags, uint32_t *n) {
    uint64_t magic, version;
    if (get_uint(r, 4, &magic) || get_uint(r, 2, &version)) return -1;
    if (magic != HVDC_WIRE_MAGIC) return fail_read(r, "bad magic number (not a libhvdc message)");
    if (version != HVDC_WIRE_VERSION)
        return fail_read(r, "unsupported message version (ranks run different libhvdc versions?)");
    if (get_u32(r, flags) || get_u32(r, n)) return -1;
    if (*n > MAX_ITEMS) return fail_read(r, "too many items");
    return 0;
}

static int get_request(reader *r, void *item) {
    hvdc_wire_request *q = item;
    uint32_t device, root;
    if (get_name(r, q->name) || get_u8(r, &q->kind) || get_u8(r, &q->dtype) ||
        get_u8(r, &q->op) || get_u32(r, &device) || get_u32(r, &root) ||
        get_f64(r, &q->prescale) || get_f64(r, &q->postscale) ||
        get_uint(r, 8, &q->members_hash) || get_uint(r, 8, &q->capacity) ||
        get_u32(r, &q->n_counts) || get_u64_array(r, q->n_counts, &q->counts))
        return -1;
    if (get_u8(r, &q->has_shape) || get_u32(r, &q->ndim)) return -1;
    if (q->has_shape > 1 || q->ndim > HVDC_MAX_DIMS || (!q->has_shape && q->ndim))
        return fail_read(r, "bad shape");
    if (get_u64_array(r, q->ndim, &q->shape)) return -1;
    q->device = (int32_t)device;
    q->root = (int32_t)root;
    if (q->kind >= HVDC_KIND_COUNT) return fail_read(r, "unknown operation kind");
    return 0;
}

/* Reads n items of item_size bytes with get() into a new array. Each item takes at least
 * min_bytes on the wire, so a count the message cannot hold is refused before allocating.
 * *got counts the items the caller must free, a partly read one included. */
static int get_items(reader *r, uint32_t n, size_t min_bytes, size_t item_size,
                     int (*get)(reader *, void *), void **items, uint32_t *got, const char *what) {
    *items = NULL;
    *got = 0;
    if (n > r->left / min_bytes) return fail_read(r, what);
    if (n == 0) return 0; /* nothing to allocate (a list of cached slots only, say) */
    *items = calloc(n, item_size);
    if (!*items) return fail_read(r, "out of memory");
    for (; *got < n; (*got)++) {
        if (get(r, (char *)*items + (size_t)*got * item_size)) {
            (*got)++;
            return -1;
        }
    }
    return 0;
}

/* Reads an optional string into a new allocation (NULL when empty unless required). */
static int get_text(reader *r, int required, char **out) {
    uint32_t len;
    *out = NULL;
    if (get_u32(r, &len)) return -1;
    if (len >= MAX_ERROR_LEN || len > r->left) return fail_read(r, "text length out of range");
    if (len == 0 && !required) return 0;
    if (memchr(r->p, '\0', len)) return fail_read(r, "text contains a NUL byte");
    *out = malloc(len + 1);
    if (!*out) return fail_read(r, "out of memory");
    memcpy(*out, r->p, len);
    (*out)[len] = '\0';
    r->p += len;
    r->left -= len;
    return 0;
}

static int get_response(reader *r, void *item) {
    hvdc_wire_response *s = item;
    uint8_t cached = 0;
    if (get_u8(r, &s->type) || get_u8(r, &s->kind) || get_u8(r, &cached) || get_u32(r, &s->n_names))
        return -1;
    if (s->type > HVDC_RESPONSE_ERROR) return fail_read(r, "unknown response type");
    if (s->kind >= HVDC_KIND_COUNT) return fail_read(r, "unknown operation kind");
    if (cached > 1) return fail_read(r, "bad cached flag");
    if (s->n_names == 0 || s->n_names > r->left / 3)
        return fail_read(r, "name count out of range");
    /* not zeroed (256 bytes a name): every name is written below, a cached one left empty
     * for the receiver to fill from its cache */
    s->names = malloc((size_t)s->n_names * sizeof *s->names);
    if (!s->names) return fail_read(r, "out of memory");
    if (cached) {
        for (uint32_t k = 0; k < s->n_names; k++) s->names[k][0] = '\0';
        if (r->left / 4 < s->n_names) return fail_read(r, "slot list longer than message");
        s->slots = malloc((size_t)s->n_names * sizeof *s->slots);
        if (!s->slots) return fail_read(r, "out of memory");
        for (uint32_t k = 0; k < s->n_names; k++)
            if (get_u32(r, &s->slots[k])) return -1;
    } else {
        for (uint32_t k = 0; k < s->n_names; k++)
            if (get_name(r, s->names[k])) return -1;
    }
    if (get_u32(r, &s->n_rank_counts) || get_u64_array(r, s->n_rank_counts, &s->rank_counts) ||
        get_text(r, s->type == HVDC_RESPONSE_ERROR, &s->error) || get_u32(r, &s->n_joined))
        return -1;
    if (s->n_joined == 0) return 0;
    if (get_u8(r, &s->dtype) || get_u8(r, &s->op)) return -1;
    if (r->left / 4 < s->n_names) return fail_read(r, "tensor counts longer than message");
    s->tensors_per_name = malloc((size_t)s->n_names * sizeof *s->tensors_per_name);
    if (!s->tensors_per_name) return fail_read(r, "out of memory");
    uint64_t total = 0;
    for (uint32_t k = 0; k < s->n_names; k++) {
        if (get_u32(r, &s->tensors_per_name[k])) return -1;
        total += s->tensors_per_name[k];
    }
    if (get_u32(r, &s->n_counts) || get_u64_array(r, s->n_counts, &s->counts)) return -1;
    if (total != s->n_counts) return fail_read(r, "tensor counts do not add up");
    return 0;
}

/* A list message: header, n items read with get(), then what tail() reads (requests: the
 * cached slots; responses: the abort reason); nothing may follow. too_many and trailing are the (static) reasons for those
 * two faults. *items and *n are set even on failure, for freeing. */
static int decode_list(const uint8_t *data, size_t len, size_t min_bytes, size_t item_size,
                       int (*get)(reader *, void *), const char *too_many, const char *trailing,
                       uint32_t *flags, void **items, uint32_t *n,
                       int (*tail)(reader *, uint32_t flags, void *ctx), void *tail_ctx,
                       const char **why) {
    reader r = {data, len, NULL};
    uint32_t announced = 0;
    *items = NULL;
    *n = 0;
    if (get_header(&r, flags, &announced) ||
        get_items(&r, announced, min_bytes, item_size, get, items, n, too_many) ||
        tail(&r, *flags, tail_ctx) || (r.left != 0 && fail_read(&r, trailing))) {
        *why = r.why;
        return -1;
    }
    return 0;
}

/* After a request list's items: the slots announced from the cache, then when the sender was
 * ready with the newest request. */
static int get_request_tail(reader *r, uint32_t flags, void *ctx) {
    hvdc_request_list *out = ctx;
    (void)flags;
    if (get_u32(r, &out->n_slots)) return -1;
    if (out->n_slots > r->left / 4) return fail_read(r, "slot list longer than message");
    out->slots = malloc((out->n_slots ? out->n_slots : 1) * sizeof *out->slots);
    if (!out->slots) return fail_read(r, "out of memory");
    for (uint32_t k = 0; k < out->n_slots; k++)
        if (get_u32(r, &out->slots[k])) return -1;
    uint32_t ready;
    if (get_u32(r, &ready)) return -1;
    out->ready_us = (int32_t)ready;
    return 0;
}

/* After a response list's items: the abort reason (present with HVDC_FLAG_ABORT), then the
 * cycle time (with HVDC_FLAG_TUNE; HVD_CYCLE_TIME's range) and the shared-memory step (up to
 * 1 GiB; every receiver rounds it alike, collectives/shm.h). */
static int get_response_tail(reader *r, uint32_t flags, void *ctx) {
    hvdc_response_list *out = ctx;
    if (get_text(r, (flags & HVDC_FLAG_ABORT) != 0, &out->reason)) return -1;
    if (!(flags & HVDC_FLAG_TUNE)) return 0;
    if (get_f64(r, &out->cycle_time_ms)) return -1;
    if (!(out->cycle_time_ms >= 0 && out->cycle_time_ms <= 10000))
        return fail_read(r, "cycle time out of range");
    if (get_uint(r, 8, &out->shm_step_bytes)) return -1;
    if (out->shm_step_bytes > ((uint64_t)1 << 30))
        return fail_read(r, "shared-memory step out of range");
    return 0;
}

int hvdc__wire_decode_requests(const uint8_t *data, size_t len, hvdc_request_list *out,
                               const char **why) {
    memset(out, 0, sizeof *out);
    void *items = NULL;
    /* each request takes at least 47 bytes on the wire */
    int bad = decode_list(data, len, 47, sizeof *out->items, get_request,
                          "more requests announced than the message holds",
                          "trailing bytes after the last slot", &out->flags, &items, &out->n,
                          get_request_tail, out, why);
    out->items = items;
    if (bad) hvdc__request_list_free(out);
    return bad;
}

int hvdc__wire_decode_responses(const uint8_t *data, size_t len, hvdc_response_list *out,
                                const char **why) {
    memset(out, 0, sizeof *out);
    void *items = NULL;
    /* each response takes at least 18 bytes on the wire */
    int bad = decode_list(data, len, 18, sizeof *out->items, get_response,
                          "more responses announced than the message holds",
                          "trailing bytes after the last response", &out->flags, &items, &out->n,
                          get_response_tail, out, why);
    out->items = items;
    if (bad) hvdc__response_list_free(out);
    return bad;
}

/* ---- freeing ---- */

void hvdc__wire_request_free(hvdc_wire_request *request) {
    free(request->counts);
    request->counts = NULL;
    request->n_counts = 0;
    free(request->shape);
    request->shape = NULL;
    request->ndim = 0;
    request->has_shape = 0;
}

int hvdc__wire_request_copy(hvdc_wire_request *to, const hvdc_wire_request *from) {
    *to = *from;
    to->counts = NULL;
    to->shape = NULL;
    if (from->n_counts > 0 && !(to->counts = malloc(from->n_counts * sizeof *to->counts))) goto fail;
    if (from->n_counts > 0) memcpy(to->counts, from->counts, from->n_counts * sizeof *to->counts);
    if (from->ndim > 0 && !(to->shape = malloc(from->ndim * sizeof *to->shape))) goto fail;
    if (from->ndim > 0) memcpy(to->shape, from->shape, from->ndim * sizeof *to->shape);
    return 0;
fail:
    hvdc__wire_request_free(to);
    return -1;
}

void hvdc__request_list_free(hvdc_request_list *list) {
    for (uint32_t i = 0; i < list->n; i++) hvdc__wire_request_free(&list->items[i]);
    free(list->items);
    free(list->slots);
    memset(list, 0, sizeof *list);
}

void hvdc__response_free(hvdc_wire_response *response) {
    free(response->names);
    free(response->slots);
    free(response->rank_counts);
    free(response->error);
    free(response->tensors_per_name);
    free(response->counts);
    memset(response, 0, sizeof *response);
}

void hvdc__response_list_free(hvdc_response_list *list) {
    for (uint32_t i = 0; i < list->n; i++) hvdc__response_free(&list->items[i]);
    free(list->items);
    free(list->reason);
    memset(list, 0, sizeof *list);
}
