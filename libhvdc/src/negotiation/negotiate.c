/*
 * negotiate.c - the coordinator's table of announced names, its validation and fusion.
 *
 * Every rank's announcements are kept per name until all size ranks have announced it; then the
 * name joins the ready queue. Ranks' lists are added in rank order each round, so the ready
 * order, and so the execution order, is the same whatever order users submitted in.
 * Validation compares every rank's announcement with rank 0's and names the ranks that differ.
 * Background thread of rank 0.
 */
#include "negotiation/negotiate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buffer.h"
#include "base/dtype.h"
#include "base/fault.h"
#include "base/name_table.h"
#include "negotiation/arrivals.h"
#include "negotiation/fusion_policy.h"

/* A name some ranks have announced. A named entry holds each rank's request; a slot entry
 * (slot >= 0) is a cached all-reduce announced by slot number, whose request every announcing
 * rank has exactly as rank 0's cache holds it, so it needs no copies and no validation. */
typedef struct entry {
    int64_t slot;               /* cache slot, or -1 for a named entry */
    const hvdc_wire_request *cached; /* a slot entry's request in the cache (its address
                                        stays while the cache lives) */
    hvdc_wire_request *by_rank; /* (size) what each rank announced; NULL for a slot entry */
    unsigned char *announced;   /* (size) in the entry's own allocation, after it */
    int n_announced;
    int queued; /* on the ready list */
    double first_seen; /* when the first rank was ready with it (the earliest stamp) */
    double latest, second; /* the latest stamp and the one before it */
    int last_rank;     /* the rank with the latest stamp (-1: none yet) */
    struct entry *next_ready;   /* the ready list; the spare list once retired */
} entry;

struct hvdc_negotiator {
    int size;
    const hvdc_cache *cache;   /* rank 0's cache (the same slots as every rank's), or NULL */
    hvdc_name_table table; /* name -> named entry; keys live in by_rank[first announcer].name */
    entry **by_slot;       /* (cache capacity) slot -> slot entry, NULL when none pending */
    size_t n_slot_entries; /* slot entries pending or ready */
    entry *ready_head, *ready_tail;
    int shutdown;
    double now;
    unsigned char *joined; /* (size) ranks that called hvd_join and wait for the rest */
    int n_joined, last_joined;
    entry *spare;          /* retired slot entries, for reuse: in steady state every name is
                              cached, and announcing it allocates nothing */
    hvdc_buffer ready, errors, items, picked; /* respond's working lists (respond_lists),
                                                 kept between rounds */
    int fault_add;         /* tests (base/fault.h): recording announcements runs out of memory */
    int fault_no_matrix;   /* tests: alltoall responses leave the send counts out (wire.h) */
    hvdc_arrivals *arrivals;   /* who arrives last, when the report asks (else NULL) */
    hvdc_buffer last_ranks;    /* (int32_t) respond's hvdc_response_list.last_ranks */
};

void hvdc__negotiator_set_time(hvdc_negotiator *n, double now) { n->now = now; }

hvdc_negotiator *hvdc__negotiator_create(int size, const hvdc_cache *cache) {
    hvdc_negotiator *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->size = size;
    n->cache = cache;
    n->fault_add = hvdc__fault("negotiator_add"); /* read once, off the hot path */
    n->fault_no_matrix = hvdc__fault("alltoall_no_matrix");
    n->joined = calloc((size_t)size, 1);
    uint32_t capacity = hvdc__cache_capacity(cache);
    n->by_slot = calloc(capacity ? capacity : 1, sizeof *n->by_slot);
    if (!n->joined || !n->by_slot) {
        free(n->joined);
        free(n->by_slot);
        free(n);
        return NULL;
    }
    hvdc__name_table_init(&n->table);
    return n;
}

static void entry_free(entry *e, int size) {
    if (!e) return;
    for (int r = 0; e->by_rank && r < size; r++) hvdc__wire_request_free(&e->by_rank[r]);
    free(e->by_rank);
    free(e);
}

/* An entry that is done with: a slot entry is kept for reuse, a named one freed. */
static void entry_retire(hvdc_negotiator *n, entry *e) {
    if (e->slot < 0) {
        entry_free(e, n->size);
        return;
    }
    e->next_ready = n->spare;
    n->spare = e;
}

void hvdc__negotiator_destroy(hvdc_negotiator *n) {
    if (!n) return;
    entry *e;
    while ((e = hvdc__name_table_pop(&n->table)) != NULL) entry_free(e, n->size);
    while ((e = n->spare) != NULL) {
        n->spare = e->next_ready;
        entry_free(e, n->size);
    }
    hvdc__buffer_free(&n->ready);
    hvdc__buffer_free(&n->errors);
    hvdc__buffer_free(&n->items);
    hvdc__buffer_free(&n->picked);
    hvdc__buffer_free(&n->last_ranks);
    hvdc__arrivals_destroy(n->arrivals);
    hvdc__name_table_free(&n->table);
    for (uint32_t s = 0; s < hvdc__cache_capacity(n->cache); s++) entry_free(n->by_slot[s], n->size);
    free(n->by_slot);
    free(n->joined);
    free(n);
}

/* The request rank announced for e (for a slot entry: the cached one). */
static const hvdc_wire_request *entry_request(const entry *e, int rank) {
    return e->slot >= 0 ? e->cached : &e->by_rank[rank];
}

/* Every rank has announced e, or has joined and so contributes nothing. */
static int covered(const hvdc_negotiator *n, const entry *e) {
    for (int r = 0; r < n->size; r++)
        if (!e->announced[r] && !n->joined[r]) return 0;
    return 1;
}

static void enqueue_ready(hvdc_negotiator *n, entry *e) {
    e->queued = 1;
    if (n->ready_tail) n->ready_tail->next_ready = e;
    else n->ready_head = e;
    n->ready_tail = e;
}

static void enqueue_if_covered(void *value, void *ctx) {
    entry *e = value;
    hvdc_negotiator *n = ctx;
    if (!e->queued && covered(n, e)) enqueue_ready(n, e);
}

/* Finds the entry's name: the cached one, or any announcing rank's. */
static const char *entry_name(const hvdc_negotiator *n, const entry *e) {
    if (e->slot >= 0) return e->cached->name;
    for (int r = 0; r < n->size; r++)
        if (e->announced[r]) return e->by_rank[r].name;
    return "";
}

/* A zeroed entry for slot (-1: named), a retired one where there is one. */
static entry *entry_new(hvdc_negotiator *n, int64_t slot) {
    size_t bytes = sizeof(entry) + (size_t)n->size;
    entry *e = slot >= 0 ? n->spare : NULL;
    if (e) {
        n->spare = e->next_ready;
        *e = (entry){0}; /* stores the compiler writes out, where memset of bytes is a call */
        unsigned char *announced = (unsigned char *)(e + 1);
        for (int r = 0; r < n->size; r++) announced[r] = 0;
    } else if (!(e = calloc(1, bytes))) {
        return NULL;
    }
    e->announced = (unsigned char *)(e + 1);
    e->slot = slot;
    e->last_rank = -1;
    if (slot < 0 && !(e->by_rank = calloc((size_t)n->size, sizeof *e->by_rank))) {
        free(e);
        return NULL;
    }
    return e;
}

/* Orders rank's stamp (n->now) among e's: who was ready last, and who before it. */
static void note_stamp(hvdc_negotiator *n, entry *e, int rank) {
    double t = n->now;
    if (e->n_announced == 1) {
        e->first_seen = e->latest = e->second = t;
        e->last_rank = rank;
        return;
    }
    if (t < e->first_seen) e->first_seen = t;
    if (t > e->latest) {
        e->second = e->latest;
        e->latest = t;
        e->last_rank = rank;
    } else if (t > e->second || e->n_announced == 2) {
        e->second = t;
    }
}

/* Counts rank's announcement of e (join bookkeeping, readiness, who was ready last). */
static void note_announced(hvdc_negotiator *n, entry *e, int rank) {
    e->announced[rank] = 1;
    e->n_announced++;
    note_stamp(n, e, rank);
    if (entry_request(e, rank)->kind == HVDC_KIND_JOIN && !n->joined[rank]) {
        n->joined[rank] = 1;
        n->n_joined++;
        n->last_joined = rank;
    }
    if (!e->queued && covered(n, e)) {
        if (n->arrivals && e->n_announced > 1)
            hvdc__arrivals_note(n->arrivals, e->last_rank, e->latest - e->second,
                                e->latest - e->first_seen);
        enqueue_ready(n, e);
    }
}

/* A slot entry becomes a named one (some rank sent the full request for its name): every rank
 * that announced the slot announced exactly the cached request. @return the named entry, or
 * NULL out of memory. */
static entry *materialize(hvdc_negotiator *n, entry *slotted) {
    entry *e = entry_new(n, -1);
    if (!e) return NULL;
    const hvdc_wire_request *cached = hvdc__cache_request(n->cache, (uint32_t)slotted->slot);
    for (int r = 0; r < n->size; r++) {
        if (!slotted->announced[r]) continue;
        if (hvdc__wire_request_copy(&e->by_rank[r], cached) != 0) {
            entry_free(e, n->size);
            return NULL;
        }
        e->announced[r] = 1;
    }
    e->n_announced = slotted->n_announced;
    e->first_seen = slotted->first_seen;
    e->latest = slotted->latest;
    e->second = slotted->second;
    e->last_rank = slotted->last_rank;
    if (hvdc__name_table_put(&n->table, cached->name, e) != 0) {
        entry_free(e, n->size);
        return NULL;
    }
    n->by_slot[slotted->slot] = NULL;
    n->n_slot_entries--;
    entry_retire(n, slotted);
    return e;
}

/* rank announced q in full; takes q's counts. */
static hvd_status announce_named(hvdc_negotiator *n, int rank, hvdc_wire_request *q) {
    entry *e = hvdc__name_table_get(&n->table, q->name);
    int64_t slot = e ? -1 : hvdc__cache_find(n->cache, q->name);
    if (!e && slot >= 0 && n->by_slot[slot]) {
        if (n->by_slot[slot]->announced[rank]) return HVD_ERR_INTERNAL;
        e = materialize(n, n->by_slot[slot]);
        if (!e) return HVD_ERR_NO_MEMORY;
    }
    if (!e) {
        e = entry_new(n, -1);
        if (!e) return HVD_ERR_NO_MEMORY;
        e->first_seen = n->now;
        e->by_rank[rank] = *q;
        if (hvdc__name_table_put(&n->table, e->by_rank[rank].name, e) != 0) {
            e->by_rank[rank].counts = NULL; /* still the caller's */
            e->by_rank[rank].shape = NULL;
            entry_free(e, n->size);
            return HVD_ERR_NO_MEMORY;
        }
    } else if (e->announced[rank]) {
        return HVD_ERR_INTERNAL; /* a rank never announces a name twice while it is pending */
    } else {
        e->by_rank[rank] = *q;
    }
    q->counts = NULL; /* moved into the entry */
    q->n_counts = 0;
    q->shape = NULL;
    q->ndim = 0;
    q->has_shape = 0;
    note_announced(n, e, rank);
    return HVD_OK;
}

/* rank announced cache slot s: its request is exactly the cached one. */
static hvd_status announce_slot(hvdc_negotiator *n, int rank, uint32_t s) {
    const hvdc_wire_request *cached = hvdc__cache_request(n->cache, s);
    if (!cached) return HVD_ERR_INTERNAL; /* caches out of step: a bug */
    entry *e = hvdc__name_table_get(&n->table, cached->name);
    if (e) { /* the name is pending in full: join it there */
        if (e->announced[rank]) return HVD_ERR_INTERNAL;
        if (hvdc__wire_request_copy(&e->by_rank[rank], cached) != 0) return HVD_ERR_NO_MEMORY;
        note_announced(n, e, rank);
        return HVD_OK;
    }
    e = n->by_slot[s];
    if (!e) {
        e = entry_new(n, (int64_t)s);
        if (!e) return HVD_ERR_NO_MEMORY;
        e->cached = cached;
        e->first_seen = n->now;
        n->by_slot[s] = e;
        n->n_slot_entries++;
    } else if (e->announced[rank]) {
        return HVD_ERR_INTERNAL;
    }
    note_announced(n, e, rank);
    return HVD_OK;
}

hvd_status hvdc__negotiator_add(hvdc_negotiator *n, int rank, hvdc_request_list *list) {
    if (list->flags & HVDC_FLAG_SHUTDOWN) n->shutdown = 1;
    hvd_status st = n->fault_add ? HVD_ERR_NO_MEMORY : HVD_OK;
    for (uint32_t i = 0; i < list->n && st == HVD_OK; i++) st = announce_named(n, rank, &list->items[i]);
    for (uint32_t i = 0; i < list->n_slots && st == HVD_OK; i++) st = announce_slot(n, rank, list->slots[i]);
    hvdc__request_list_free(list);
    return st;
}

size_t hvdc__negotiator_waiting(const hvdc_negotiator *n) {
    size_t ready = 0;
    for (entry *e = n->ready_head; e; e = e->next_ready) ready++;
    return n->table.count + n->n_slot_entries - ready;
}

/* ---- validation ---- */

typedef struct message message;
static void say_ranks(message *m, const unsigned char *announced, int size, int want);

struct message {
    char text[1024];
    size_t len;
};

static void say(message *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(message *m, const char *fmt, ...) {
    if (m->len >= sizeof m->text - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(m->text + m->len, sizeof m->text - m->len, fmt, ap);
    va_end(ap);
    if (k > 0) m->len += (size_t)k < sizeof m->text - m->len ? (size_t)k : sizeof m->text - m->len - 1;
}

/* The announcement validation compares the others with: the lowest announcing rank's (rank 0's
 * unless it has joined). */
static int base_rank(const entry *e, int size) {
    for (int r = 0; r < size; r++)
        if (e->announced[r]) return r;
    return 0;
}

/* Appends ", rank R has V" for each announcing rank whose field differs from the base rank's;
 * returns how many differ. */
typedef int (*field_differs)(const hvdc_wire_request *a, const hvdc_wire_request *b);
typedef void (*field_print)(message *m, const hvdc_wire_request *q);

static int list_differences(message *m, const entry *e, int size, const char *what,
                            field_differs differs, field_print print) {
    int b = base_rank(e, size);
    const hvdc_wire_request *base = &e->by_rank[b];
    int n_diff = 0;
    for (int r = b + 1; r < size; r++) {
        if (!e->announced[r] || !differs(base, &e->by_rank[r])) continue;
        if (n_diff == 0) {
            say(m, "%s differs across ranks: rank %d has ", what, b);
            print(m, base);
        }
        if (n_diff < 8) {
            say(m, ", rank %d has ", r);
            print(m, &e->by_rank[r]);
        } else if (n_diff == 8) {
            say(m, ", ...");
        }
        n_diff++;
    }
    return n_diff;
}

static int kind_differs(const hvdc_wire_request *a, const hvdc_wire_request *b) { return a->kind != b->kind; }
static void kind_print(message *m, const hvdc_wire_request *q) { say(m, "%s", hvdc__kind_name(q->kind)); }
static int dtype_differs(const hvdc_wire_request *a, const hvdc_wire_request *b) { return a->dtype != b->dtype; }
static void dtype_print(message *m, const hvdc_wire_request *q) { say(m, "%s", hvdc__dtype_name(q->dtype)); }
static int op_differs(const hvdc_wire_request *a, const hvdc_wire_request *b) { return a->op != b->op; }
static void op_print(message *m, const hvdc_wire_request *q) { say(m, "%s", hvdc__op_name(q->op)); }
static int root_differs(const hvdc_wire_request *a, const hvdc_wire_request *b) { return a->root != b->root; }
static void root_print(message *m, const hvdc_wire_request *q) { say(m, "%d", (int)q->root); }
static int device_differs(const hvdc_wire_request *a, const hvdc_wire_request *b) { return (a->device < 0) != (b->device < 0); }
static void device_print(message *m, const hvdc_wire_request *q) { say(m, "%s", q->device < 0 ? "CPU memory" : "GPU memory"); }
static int scale_differs(const hvdc_wire_request *a, const hvdc_wire_request *b) {
    return a->prescale != b->prescale || a->postscale != b->postscale;
}
static void scale_print(message *m, const hvdc_wire_request *q) {
    say(m, "prescale %g postscale %g", q->prescale, q->postscale);
}
/* Shapes, where both ranks gave one (hvd_options.shape; C callers may give none): all of it for
 * reductions and broadcast, all but the first dimension for allgather and alltoall, as Horovod
 * compares them. */
static int dims_differ(const hvdc_wire_request *a, const hvdc_wire_request *b, uint32_t from) {
    if (!a->has_shape || !b->has_shape) return 0;
    if (a->ndim != b->ndim) return 1;
    for (uint32_t d = from; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 1;
    return 0;
}
static int shape_differs(const hvdc_wire_request *a, const hvdc_wire_request *b) { return dims_differ(a, b, 0); }
static int rows_differ(const hvdc_wire_request *a, const hvdc_wire_request *b) { return dims_differ(a, b, 1); }
static void dims_print(message *m, const hvdc_wire_request *q, uint32_t from) {
    if (!q->has_shape) {
        say(m, "no shape");
        return;
    }
    say(m, "[");
    for (uint32_t d = 0; d < q->ndim; d++) {
        if (d < from) say(m, "%s*", d ? ", " : "");
        else say(m, "%s%llu", d ? ", " : "", (unsigned long long)q->shape[d]);
    }
    say(m, "]");
}
static void shape_print(message *m, const hvdc_wire_request *q) { dims_print(m, q, 0); }
static void rows_print(message *m, const hvdc_wire_request *q) { dims_print(m, q, 1); }
static int members_differ(const hvdc_wire_request *a, const hvdc_wire_request *b) {
    return a->members_hash != b->members_hash || a->n_counts != b->n_counts;
}
static void members_print(message *m, const hvdc_wire_request *q) {
    say(m, "%u tensor%s", q->n_counts, q->n_counts == 1 ? "" : "s");
}
static int counts_differ(const hvdc_wire_request *a, const hvdc_wire_request *b) {
    if (a->n_counts != b->n_counts) return 1;
    for (uint32_t i = 0; i < a->n_counts; i++)
        if (a->counts[i] != b->counts[i]) return 1;
    return 0;
}
static void counts_print(message *m, const hvdc_wire_request *q) {
    if (q->n_counts == 1) {
        say(m, "%llu", (unsigned long long)q->counts[0]);
        return;
    }
    say(m, "[");
    for (uint32_t i = 0; i < q->n_counts && i < 4; i++)
        say(m, "%s%llu", i ? ", " : "", (unsigned long long)q->counts[i]);
    say(m, "%s]", q->n_counts > 4 ? ", ..." : "");
}

static uint64_t total_count(const hvdc_wire_request *q) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < q->n_counts; i++) total += q->counts[i];
    return total;
}

/* A joined rank cannot stand in for a device (GPU) all-reduce: it would run a host all-reduce
 * that the others, on NCCL, never enter. Appends why and returns 1 if e is one that joined ranks
 * left unannounced. Checked for slot entries too (a cached device all-reduce is no exception). */
static int joined_device(const entry *e, const hvdc_wire_request *base, int size, message *m) {
    if (e->n_announced == size || base->kind != HVDC_KIND_ALLREDUCE || base->device < 0) return 0;
    say(m, "ranks ");
    say_ranks(m, e->announced, size, 0);
    say(m, " have called hvd_join, and a joined rank cannot stand in for a device (GPU) "
        "all-reduce; call hvd_join after the last device all-reduce, or reduce on the host");
    return 1;
}

/* Fills m and returns 1 if the ranks' announcements for e cannot execute together. */
static int find_disagreement(const entry *e, int size, message *m) {
    const hvdc_wire_request *base = &e->by_rank[base_rank(e, size)];
    say(m, "%s '%s': ", hvdc__kind_name(base->kind), base->name);
    size_t prefix = m->len;
    if (list_differences(m, e, size, "operation", kind_differs, kind_print)) return 1;
    if (e->n_announced < size && base->kind != HVDC_KIND_ALLREDUCE && base->kind != HVDC_KIND_JOIN) {
        say(m, "ranks ");
        say_ranks(m, e->announced, size, 0);
        say(m, " have called hvd_join; until every rank has, only allreduce can run");
        return 1;
    }
    if (joined_device(e, base, size, m)) return 1;
    if (!hvdc__dtype_valid(base->dtype) || (base->kind != HVDC_KIND_BARRIER &&
                                            base->kind != HVDC_KIND_JOIN && !hvdc__op_valid(base->op))) {
        say(m, "unknown dtype or reduce op in the request");
        return 1;
    }
    if (list_differences(m, e, size, "dtype", dtype_differs, dtype_print)) return 1;
    if (list_differences(m, e, size, "device", device_differs, device_print)) return 1;
    switch ((hvdc_kind)base->kind) {
    case HVDC_KIND_ALLREDUCE:
    case HVDC_KIND_REDUCESCATTER:
        if (list_differences(m, e, size, "reduce op", op_differs, op_print)) return 1;
        if (list_differences(m, e, size, "scaling", scale_differs, scale_print)) return 1;
        if (list_differences(m, e, size, "group", members_differ, members_print)) return 1;
        if (list_differences(m, e, size, "shape", shape_differs, shape_print)) return 1;
        if (list_differences(m, e, size, "count", counts_differ, counts_print)) return 1;
        break;
    case HVDC_KIND_BROADCAST:
        if (list_differences(m, e, size, "root", root_differs, root_print)) return 1;
        if (list_differences(m, e, size, "shape", shape_differs, shape_print)) return 1;
        if (list_differences(m, e, size, "count", counts_differ, counts_print)) return 1;
        if (base->root < 0 || base->root >= size) {
            say(m, "root %d is out of range 0..%d", (int)base->root, size - 1);
            return 1;
        }
        break;
    case HVDC_KIND_ALLGATHER: {
        if (list_differences(m, e, size, "shape beyond the first dimension", rows_differ, rows_print))
            return 1;
        uint64_t total = 0;
        for (int r = 0; r < size; r++) {
            if (e->by_rank[r].n_counts != 1) {
                say(m, "rank %d sent a malformed request", r);
                return 1;
            }
            /* saturating: a sum that wrapped around could pass the capacity check below */
            uint64_t c = e->by_rank[r].counts[0];
            total = c > UINT64_MAX - total ? UINT64_MAX : total + c;
        }
        for (int r = 0; r < size; r++) {
            if (e->by_rank[r].capacity < total) {
                say(m, "the result needs %llu elements but rank %d's output holds %llu",
                    (unsigned long long)total, r, (unsigned long long)e->by_rank[r].capacity);
                return 1;
            }
        }
        if (total > 0x7fffffffu) {
            say(m, "the result has %llu elements; at most 2^31-1 are supported", (unsigned long long)total);
            return 1;
        }
        break;
    }
    case HVDC_KIND_ALLTOALL:
        if (list_differences(m, e, size, "shape beyond the first dimension", rows_differ, rows_print))
            return 1;
        for (int r = 0; r < size; r++) {
            if (e->by_rank[r].n_counts != (uint32_t)size) {
                say(m, "rank %d gave %u send counts; expected one per rank (%d)", r,
                    e->by_rank[r].n_counts, size);
                return 1;
            }
            if (total_count(&e->by_rank[r]) > 0x7fffffffu) {
                say(m, "rank %d sends more than 2^31-1 elements", r);
                return 1;
            }
        }
        for (int d = 0; d < size; d++) {
            uint64_t incoming = 0;
            for (int r = 0; r < size; r++) incoming += e->by_rank[r].counts[d];
            if (incoming > e->by_rank[d].capacity) {
                say(m, "rank %d receives %llu elements but its output holds %llu", d,
                    (unsigned long long)incoming, (unsigned long long)e->by_rank[d].capacity);
                return 1;
            }
            if (incoming > 0x7fffffffu) {
                say(m, "rank %d receives more than 2^31-1 elements", d);
                return 1;
            }
        }
        break;
    case HVDC_KIND_BARRIER:
    case HVDC_KIND_JOIN:
    case HVDC_KIND_COUNT:
        break;
    }
    return m->len > prefix;
}

/* ---- responses ---- */

/* Ranks contributing nothing to e (joined, not announced). */
static uint32_t joined_missing(const hvdc_negotiator *n, const entry *e) {
    return (uint32_t)(n->size - e->n_announced);
}

/* The request the others are compared with and fused by: the lowest announcing rank's. */
static const hvdc_wire_request *base_request(const hvdc_negotiator *n, const entry *e) {
    return e->slot >= 0 ? e->cached : &e->by_rank[base_rank(e, n->size)]; /* cached: every rank's */
}

/* The working lists of one respond, one item per ready entry, in ready order. */
typedef struct respond_lists {
    entry **ready;
    char **errors;           /* why each is refused, or NULL */
    hvdc_fusion_item *items; /* each as the fusion policy sees it */
    size_t *picked;          /* the entries of the response being made */
    int32_t *last_ranks;     /* (NULL unless arrivals are noted) each response's last rank */
    size_t n;
} respond_lists;

/* Room for n ready entries in the negotiator's working lists (kept between rounds). */
static hvd_status reserve_lists(hvdc_negotiator *n, size_t n_ready, respond_lists *l) {
    if (hvdc__buffer_reserve(&n->ready, n_ready * sizeof *l->ready) != HVD_OK ||
        hvdc__buffer_reserve(&n->errors, n_ready * sizeof *l->errors) != HVD_OK ||
        hvdc__buffer_reserve(&n->items, n_ready * sizeof *l->items) != HVD_OK ||
        hvdc__buffer_reserve(&n->picked, n_ready * sizeof *l->picked) != HVD_OK)
        return HVD_ERR_NO_MEMORY;
    *l = (respond_lists){n->ready.data, n->errors.data, n->items.data, n->picked.data, NULL,
                         n_ready};
    /* kept only while someone reads them (timeline, report) */
    if (n->arrivals && hvdc__buffer_reserve(&n->last_ranks, n_ready * sizeof(int32_t)) == HVD_OK)
        l->last_ranks = n->last_ranks.data;
    for (size_t i = 0; i < n_ready; i++) l->errors[i] = NULL;
    return HVD_OK;
}

/* Why e cannot execute, or NULL when it can: the ranks disagree, or a joined rank cannot
 * stand in for it. @return HVD_OK, or HVD_ERR_NO_MEMORY for the message (never executed). */
static hvd_status refusal(const hvdc_negotiator *n, const entry *e, char **why) {
    *why = NULL;
    if (e->slot >= 0 && e->n_announced == n->size) return HVD_OK; /* the steady state: cached,
                                                                     every rank in */
    message m; /* not zeroed: 1 KiB a name, the whole cost of this loop; say() ends it */
    m.len = 0;
    m.text[0] = '\0';
    int refused = 0;
    if (e->slot < 0) {
        refused = find_disagreement(e, n->size, &m);
    } else if (e->n_announced < n->size) { /* cached: identical on every announcing rank; only
                                              a join can refuse it */
        const hvdc_wire_request *q = entry_request(e, 0);
        say(&m, "%s '%s': ", hvdc__kind_name(q->kind), q->name);
        refused = joined_device(e, q, n->size, &m);
    }
    if (refused && (hvdc__fault("refusal_message") || !(*why = strdup(m.text))))
        return HVD_ERR_NO_MEMORY;
    return HVD_OK;
}

/* Fills the lists from the ready queue: each entry, whether it is refused (refused ones never
 * fuse), and its fusion item. *n_refused: how many messages were made. */
static hvd_status list_ready(hvdc_negotiator *n, respond_lists *l, size_t *n_refused) {
    size_t i = 0;
    for (entry *e = n->ready_head; e; e = e->next_ready, i++) {
        l->ready[i] = e;
        hvd_status st = refusal(n, e, &l->errors[i]);
        if (st != HVD_OK) return st;
        if (l->errors[i]) (*n_refused)++;
        l->items[i] = (hvdc_fusion_item){base_request(n, e), e->announced, e->n_announced,
                                         l->errors[i] == NULL};
    }
    return HVD_OK;
}

/* While ranks have joined, a response carries its tensors' layout for them (see wire.h). */
static hvd_status describe_for_joined(hvdc_wire_response *s, const respond_lists *l,
                                      size_t n_group) {
    uint32_t n_counts = 0;
    for (size_t i = 0; i < n_group; i++) n_counts += l->items[l->picked[i]].request->n_counts;
    s->tensors_per_name = malloc(n_group * sizeof *s->tensors_per_name);
    s->counts = malloc((n_counts ? n_counts : 1) * sizeof *s->counts);
    if (!s->tensors_per_name || !s->counts) return HVD_ERR_NO_MEMORY;
    s->n_counts = 0;
    for (size_t i = 0; i < n_group; i++) {
        const hvdc_wire_request *q = l->items[l->picked[i]].request;
        s->tensors_per_name[i] = q->n_counts;
        for (uint32_t k = 0; k < q->n_counts; k++) s->counts[s->n_counts++] = q->counts[k];
    }
    return HVD_OK;
}

/* What an executed response carries beyond its names: every rank's count for an allgather,
 * every rank's send counts for an alltoall (small jobs), the last rank to join for a join, the
 * tensors' layout for joined ranks. */
static hvd_status add_payload(hvdc_negotiator *n, hvdc_wire_response *s, const entry *e,
                              const respond_lists *l, size_t n_group) {
    if (s->kind == HVDC_KIND_ALLGATHER) {
        s->rank_counts = malloc((size_t)n->size * sizeof *s->rank_counts);
        if (!s->rank_counts) return HVD_ERR_NO_MEMORY;
        s->n_rank_counts = (uint32_t)n->size;
        for (int r = 0; r < n->size; r++) s->rank_counts[r] = e->by_rank[r].counts[0];
    } else if (s->kind == HVDC_KIND_JOIN) {
        s->rank_counts = malloc(sizeof *s->rank_counts);
        if (!s->rank_counts) return HVD_ERR_NO_MEMORY;
        s->n_rank_counts = 1;
        s->rank_counts[0] = (uint64_t)n->last_joined;
    } else if (s->kind == HVDC_KIND_ALLTOALL && n->size <= HVDC_ALLTOALL_MATRIX_RANKS &&
               !n->fault_no_matrix) {
        size_t size = (size_t)n->size;
        if (!(s->rank_counts = malloc(size * size * sizeof *s->rank_counts))) return HVD_ERR_NO_MEMORY;
        s->n_rank_counts = (uint32_t)(size * size);
        for (size_t r = 0; r < size; r++) /* validated: each rank sent size counts */
            memcpy(&s->rank_counts[r * size], e->by_rank[r].counts, size * sizeof *s->rank_counts);
    } else if (s->kind == HVDC_KIND_ALLREDUCE) {
        s->n_joined = joined_missing(n, e);
        if (s->n_joined > 0) return describe_for_joined(s, l, n_group);
    }
    return HVD_OK;
}

/* The rank whose announcement made the latest of the response's entries ready. */
static int32_t last_to_arrive(const respond_lists *l, size_t n_group) {
    const entry *latest = l->ready[l->picked[0]];
    for (size_t i = 1; i < n_group; i++)
        if (l->ready[l->picked[i]]->latest > latest->latest) latest = l->ready[l->picked[i]];
    return latest->last_rank;
}

hvdc_arrivals *hvdc__negotiator_arrivals(hvdc_negotiator *n) {
    if (!n->arrivals) n->arrivals = hvdc__arrivals_create(n->size);
    return n->arrivals;
}

/* The response's names: as slot numbers when every one is cached (every rank reads the names
 * from its cache), else in full. */
static hvd_status name_group(hvdc_wire_response *s, const respond_lists *l, size_t n_group) {
    int all_cached = s->type == HVDC_RESPONSE_EXECUTE;
    for (size_t i = 0; i < n_group; i++) all_cached &= l->ready[l->picked[i]]->slot >= 0;
    s->n_names = (uint32_t)n_group;
    if (all_cached) {
        if (!(s->slots = malloc(n_group * sizeof *s->slots))) return HVD_ERR_NO_MEMORY;
        for (size_t i = 0; i < n_group; i++) s->slots[i] = (uint32_t)l->ready[l->picked[i]]->slot;
        return HVD_OK;
    }
    if (!(s->names = malloc(n_group * sizeof *s->names))) return HVD_ERR_NO_MEMORY;
    for (size_t i = 0; i < n_group; i++)
        memcpy(s->names[i], l->items[l->picked[i]].request->name, sizeof s->names[0]);
    return HVD_OK;
}

/* The response led by ready entry lead: an ERROR for a refused one, else EXECUTE with the
 * later all-reduces that fuse with it (fusion_policy.h), which leave the ready list. */
static hvd_status respond_one(hvdc_negotiator *n, respond_lists *l, size_t lead,
                              size_t host_threshold, size_t gpu_threshold,
                              hvdc_response_list *out) {
    const hvdc_wire_request *base = l->items[lead].request;
    hvdc_wire_response *s = &out->items[out->n++];
    *s = (hvdc_wire_response){0};
    s->kind = base->kind;
    s->dtype = base->dtype;
    s->op = base->op;
    s->type = l->errors[lead] ? HVDC_RESPONSE_ERROR : HVDC_RESPONSE_EXECUTE;
    s->error = l->errors[lead];
    l->errors[lead] = NULL; /* the response owns it */
    size_t n_group = 1;
    l->picked[0] = lead;
    if (s->type == HVDC_RESPONSE_EXECUTE && base->kind == HVDC_KIND_ALLREDUCE)
        n_group = hvdc__fusion_pick(l->items, l->n, lead, n->size, host_threshold, gpu_threshold,
                                    l->picked);
    for (size_t i = 0; i < n_group; i++) l->items[l->picked[i]].available = 0;
    if (s->type == HVDC_RESPONSE_EXECUTE) {
        hvd_status st = add_payload(n, s, l->ready[lead], l, n_group);
        if (st != HVD_OK) return st;
    }
    if (l->last_ranks) l->last_ranks[out->n - 1] = last_to_arrive(l, n_group);
    return name_group(s, l, n_group);
}

/* Forgets every ready entry (they are answered, or the answer failed). */
static void forget_ready(hvdc_negotiator *n) {
    while (n->ready_head) {
        entry *e = n->ready_head;
        n->ready_head = e->next_ready;
        if (e->slot >= 0) {
            n->by_slot[e->slot] = NULL;
            n->n_slot_entries--;
        } else {
            hvdc__name_table_remove(&n->table, entry_name(n, e));
        }
        entry_retire(n, e);
    }
    n->ready_tail = NULL;
}

hvd_status hvdc__negotiator_respond(hvdc_negotiator *n, size_t host_threshold,
                                    size_t gpu_threshold, hvdc_response_list *out) {
    memset(out, 0, sizeof *out);
    out->flags = n->shutdown ? HVDC_FLAG_SHUTDOWN : 0;
    if (n->n_joined > 0) { /* a rank that joined since a name was announced may have completed it */
        hvdc__name_table_each(&n->table, enqueue_if_covered, n);
        for (uint32_t s = 0; s < hvdc__cache_capacity(n->cache); s++)
            if (n->by_slot[s]) enqueue_if_covered(n->by_slot[s], n);
    }
    size_t n_ready = 0, n_refused = 0; /* messages made: none in the steady state */
    for (entry *e = n->ready_head; e; e = e->next_ready) n_ready++;
    if (n_ready == 0) return HVD_OK;
    respond_lists l = {0};
    hvd_status st = reserve_lists(n, n_ready, &l);
    if (st == HVD_OK && !(out->items = malloc(n_ready * sizeof *out->items))) st = HVD_ERR_NO_MEMORY;
    if (st == HVD_OK) st = list_ready(n, &l, &n_refused);
    out->last_ranks = l.last_ranks;
    int join_done = 0;
    for (size_t i = 0; i < n_ready && st == HVD_OK; i++) {
        if (!l.items[i].available && !l.errors[i]) continue; /* fused into an earlier one */
        join_done |= l.items[i].request->kind == HVDC_KIND_JOIN && !l.errors[i];
        st = respond_one(n, &l, i, host_threshold, gpu_threshold, out);
    }
    if (st == HVD_OK && join_done) {
        memset(n->joined, 0, (size_t)n->size);
        n->n_joined = 0;
    }
    forget_ready(n);
    for (size_t i = 0; n_refused > 0 && i < l.n; i++) free(l.errors[i]);
    if (st != HVD_OK) hvdc__response_list_free(out);
    return st;
}

/* ---- stall reports ---- */

/* Appends ranks r with announced[r] == want as compact ranges: "0-3,6". */
static void say_ranks(message *m, const unsigned char *announced, int size, int want) {
    int first = 1;
    for (int r = 0; r < size; r++) {
        if ((announced[r] != 0) != want) continue;
        int end = r;
        while (end + 1 < size && (announced[end + 1] != 0) == want) end++;
        say(m, "%s%d", first ? "" : ",", r);
        if (end > r) say(m, "-%d", end);
        first = 0;
        r = end;
    }
}

typedef struct stall_scan {
    const hvdc_negotiator *n;
    double now, older_than, oldest;
    size_t stalled;
    message m;
} stall_scan;

static void scan_entry(void *value, void *ctx) {
    stall_scan *scan = ctx;
    const entry *e = value;
    int size = scan->n->size;
    double age = scan->now - e->first_seen;
    if (e->n_announced == size || age < scan->older_than) return;
    scan->stalled++;
    if (age > scan->oldest) scan->oldest = age;
    const hvdc_wire_request *q = base_request(scan->n, e);
    say(&scan->m, "%s%s '%s' has waited %.0f s: submitted by ranks ", scan->stalled > 1 ? "\n" : "",
        hvdc__kind_name(q->kind), q->name, age);
    say_ranks(&scan->m, e->announced, size, 1);
    say(&scan->m, ", missing on ranks ");
    say_ranks(&scan->m, e->announced, size, 0);
}

size_t hvdc__negotiator_report_stalls(const hvdc_negotiator *n, double now, double older_than,
                                      char *out, size_t len, double *oldest) {
    stall_scan scan = {.n = n, .now = now, .older_than = older_than};
    scan.m.text[0] = '\0';
    hvdc__name_table_each(&n->table, scan_entry, &scan);
    for (uint32_t s = 0; s < hvdc__cache_capacity(n->cache); s++)
        if (n->by_slot[s]) scan_entry(n->by_slot[s], &scan);
    snprintf(out, len, "%s", scan.m.text);
    *oldest = scan.oldest;
    return scan.stalled;
}

typedef struct rank_scan {
    const hvdc_negotiator *n;
    double now, older_than, oldest;
    size_t stalled;
    hvdc_rank_stall *by_rank;
} rank_scan;

static void scan_entry_by_rank(void *value, void *ctx) {
    rank_scan *scan = ctx;
    const entry *e = value;
    double age = scan->now - e->first_seen;
    if (e->n_announced == scan->n->size || age < scan->older_than) return;
    scan->stalled++;
    if (age > scan->oldest) scan->oldest = age;
    const char *name = entry_name(scan->n, e);
    for (int r = 0; r < scan->n->size; r++) {
        if (e->announced[r] || scan->n->joined[r]) continue;
        hvdc_rank_stall *s = &scan->by_rank[r];
        if (age > s->oldest) s->oldest = age;
        size_t used = strlen(s->names);
        if (s->missing++ < 3 && used + strlen(name) + 5 < sizeof s->names)
            snprintf(s->names + used, sizeof s->names - used, "%s'%s'", used ? ", " : "", name);
    }
}

size_t hvdc__negotiator_stalls_by_rank(const hvdc_negotiator *n, double now, double older_than,
                                       hvdc_rank_stall *by_rank, double *oldest) {
    rank_scan scan = {.n = n, .now = now, .older_than = older_than, .by_rank = by_rank};
    memset(by_rank, 0, (size_t)n->size * sizeof *by_rank);
    hvdc__name_table_each(&n->table, scan_entry_by_rank, &scan);
    for (uint32_t s = 0; s < hvdc__cache_capacity(n->cache); s++)
        if (n->by_slot[s]) scan_entry_by_rank(n->by_slot[s], &scan);
    *oldest = scan.oldest;
    return scan.stalled;
}
