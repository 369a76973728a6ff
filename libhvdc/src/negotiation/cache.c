/*
 * cache.c - the response cache of cache.h: an array of slots and a name table onto it.
 * Background thread only (hvdc__cache_peek: cache.h says who else).
 */
#include "negotiation/cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/name_table.h"

typedef struct slot {
    hvdc_wire_request request; /* name inside; counts owned */
    uint32_t index;
    int valid; /* 0: an allocation failed while filling it; it keeps its number (so every
                  rank's slots stay in step) but never matches a request */
} slot;

struct hvdc_cache {
    uint32_t capacity, used;
    uint32_t next;             /* the slot after lookup's last hit: tried first */
    slot *slots;               /* (capacity) slots 0..used-1 are filled */
    hvdc_name_table by_name;   /* name -> slot; keys live in the slots' requests */
};

hvdc_cache *hvdc__cache_create(uint32_t capacity) {
    hvdc_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->capacity = capacity;
    c->slots = calloc(capacity ? capacity : 1, sizeof *c->slots);
    if (!c->slots) {
        free(c);
        return NULL;
    }
    hvdc__name_table_init(&c->by_name);
    return c;
}

void hvdc__cache_destroy(hvdc_cache *c) {
    if (!c) return;
    for (uint32_t i = 0; i < c->used; i++) hvdc__wire_request_free(&c->slots[i].request);
    hvdc__name_table_free(&c->by_name);
    free(c->slots);
    free(c);
}

uint32_t hvdc__cache_capacity(const hvdc_cache *c) { return c ? c->capacity : 0; }

int hvdc__cache_cacheable(const hvdc_wire_request *q) { return q->kind == HVDC_KIND_ALLREDUCE; }

int64_t hvdc__cache_find(const hvdc_cache *c, const char *name) {
    const slot *s = c ? hvdc__name_table_get(&c->by_name, name) : NULL;
    return s ? (int64_t)s->index : -1;
}

/* A loop, not memcmp: the arrays are a few values (one count a tensor, a shape's dims). */
static int same_values(const uint64_t *a, const uint64_t *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static int same_request(const hvdc_wire_request *a, const hvdc_wire_request *b) {
    if (strcmp(a->name, b->name) != 0 || a->kind != b->kind || a->dtype != b->dtype ||
        a->op != b->op || a->device != b->device || a->root != b->root ||
        a->prescale != b->prescale || a->postscale != b->postscale ||
        a->members_hash != b->members_hash || a->capacity != b->capacity ||
        a->n_counts != b->n_counts || a->has_shape != b->has_shape || a->ndim != b->ndim)
        return 0;
    return same_values(a->counts, b->counts, a->n_counts) && same_values(a->shape, b->shape, a->ndim);
}

int64_t hvdc__cache_lookup(hvdc_cache *c, const hvdc_wire_request *q) {
    /* a training step submits its tensors in the order they were cached: the slot after the
     * last hit is compared first, which spares hashing the name (a name has one slot, so a
     * match there is the answer) */
    if (c && c->next < c->used && c->slots[c->next].valid && same_request(&c->slots[c->next].request, q))
        return c->next++;
    int64_t s = hvdc__cache_find(c, q->name);
    if (s < 0 || !c->slots[s].valid || !same_request(&c->slots[s].request, q)) return -1;
    c->next = (uint32_t)s + 1;
    return s;
}

int64_t hvdc__cache_peek(const hvdc_cache *c, const hvdc_wire_request *q) {
    int64_t s = hvdc__cache_find(c, q->name);
    return s >= 0 && c->slots[s].valid && same_request(&c->slots[s].request, q) ? s : -1;
}

/* Every rank calls this with the same names in the same order, so slot numbers must advance
 * the same way whatever happens on one rank: an allocation failure consumes the slot anyway,
 * marked invalid, instead of leaving this rank's numbering behind the others'. */
int64_t hvdc__cache_put(hvdc_cache *c, const hvdc_wire_request *q) {
    if (!c) return -1;
    int64_t found = hvdc__cache_find(c, q->name);
    if (found >= 0) {
        slot *s = &c->slots[found];
        hvdc__wire_request_free(&s->request);
        s->valid = hvdc__wire_request_copy(&s->request, q) == 0; /* same name: the table's key stays valid */
        return found;
    }
    if (c->used == c->capacity) return -1;
    slot *s = &c->slots[c->used];
    s->index = c->used;
    s->valid = hvdc__wire_request_copy(&s->request, q) == 0;
    if (hvdc__name_table_put(&c->by_name, s->request.name, s) != 0) s->valid = 0;
    return c->used++;
}

const char *hvdc__cache_name(const hvdc_cache *c, uint32_t slot_index) {
    return c && slot_index < c->used ? c->slots[slot_index].request.name : NULL;
}

const hvdc_wire_request *hvdc__cache_request(const hvdc_cache *c, uint32_t slot_index) {
    return c && slot_index < c->used ? &c->slots[slot_index].request : NULL;
}

uint32_t hvdc__cache_first_missing(const hvdc_cache *c, const uint32_t *slots, uint32_t n) {
    uint32_t used = c ? c->used : 0;
    for (uint32_t k = 0; k < n; k++)
        if (slots[k] >= used) return k;
    return n;
}

void hvdc__cache_fill_names(const hvdc_cache *c, hvdc_wire_response *r) {
    if (!r->slots || r->n_names < 2 || r->names[1][0] != '\0') return; /* none to fill, or done */
    for (uint32_t k = 1; k < r->n_names; k++)
        memcpy(r->names[k], c->slots[r->slots[k]].request.name, sizeof r->names[k]);
}
