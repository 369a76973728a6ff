/*
 * negotiate.c - the coordinator's table of announced names, its validation and fusion.
 *
 * Every rank's announcements are kept per name until all size ranks have announced it; then the
 * name joins the ready queue. Ranks' lists are added in rank order each round, so the ready
 * order, and so the execution order, is the same whatever order users submitted in.
 * Validation compares every rank's announcement with rank 0's and names the ranks that differ.
 * Background thread of rank 0.
 */
#include "negotiate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "name_table.h"

typedef struct entry {
    hvdc_wire_request *by_rank; /* (size) what each rank announced */
    unsigned char *announced;   /* (size) */
    int n_announced;
    int taken; /* already put in a response this round */
    double first_seen; /* when the first rank announced it */
    struct entry *next_ready;
} entry;

struct hvdc_negotiator {
    int size;
    hvdc_name_table table; /* name -> entry; keys live in by_rank[first announcer].name */
    entry *ready_head, *ready_tail;
    int shutdown;
    double now;
};

void hvdc__negotiator_set_time(hvdc_negotiator *n, double now) { n->now = now; }

hvdc_negotiator *hvdc__negotiator_create(int size) {
    hvdc_negotiator *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->size = size;
    hvdc__name_table_init(&n->table);
    return n;
}

static void entry_free(entry *e, int size) {
    if (!e) return;
    for (int r = 0; r < size; r++) hvdc__wire_request_free(&e->by_rank[r]);
    free(e->by_rank);
    free(e->announced);
    free(e);
}

void hvdc__negotiator_destroy(hvdc_negotiator *n) {
    if (!n) return;
    entry *e;
    while ((e = hvdc__name_table_pop(&n->table)) != NULL) entry_free(e, n->size);
    hvdc__name_table_free(&n->table);
    free(n);
}

/* Finds the entry's key: the name of any rank that announced it. */
static const char *entry_name(const entry *e, int size) {
    for (int r = 0; r < size; r++)
        if (e->announced[r]) return e->by_rank[r].name;
    return "";
}

hvd_status hvdc__negotiator_add(hvdc_negotiator *n, int rank, hvdc_request_list *list) {
    if (list->flags & HVDC_FLAG_SHUTDOWN) n->shutdown = 1;
    hvd_status st = HVD_OK;
    for (uint32_t i = 0; i < list->n; i++) {
        hvdc_wire_request *q = &list->items[i];
        entry *e = hvdc__name_table_get(&n->table, q->name);
        if (!e) {
            e = calloc(1, sizeof *e);
            if (e) e->by_rank = calloc((size_t)n->size, sizeof *e->by_rank);
            if (e) e->announced = calloc((size_t)n->size, 1);
            if (!e || !e->by_rank || !e->announced) {
                entry_free(e, 0);
                st = HVD_ERR_NO_MEMORY;
                break;
            }
            e->by_rank[rank] = *q;
            e->announced[rank] = 1;
            e->first_seen = n->now;
            if (hvdc__name_table_put(&n->table, e->by_rank[rank].name, e) != 0) {
                e->announced[rank] = 0;
                free(e->by_rank);
                free(e->announced);
                free(e);
                st = HVD_ERR_NO_MEMORY;
                break;
            }
        } else if (e->announced[rank]) {
            st = HVD_ERR_INTERNAL; /* a rank never announces a name twice while it is pending */
            hvdc__wire_request_free(q);
            continue;
        } else {
            e->by_rank[rank] = *q;
            e->announced[rank] = 1;
        }
        q->counts = NULL; /* moved into the entry */
        q->n_counts = 0;
        if (++e->n_announced == n->size) {
            if (n->ready_tail) n->ready_tail->next_ready = e;
            else n->ready_head = e;
            n->ready_tail = e;
        }
    }
    hvdc__request_list_free(list);
    return st;
}

size_t hvdc__negotiator_waiting(const hvdc_negotiator *n) {
    size_t ready = 0;
    for (entry *e = n->ready_head; e; e = e->next_ready) ready++;
    return n->table.count - ready;
}

/* ---- validation ---- */

typedef struct message {
    char text[1024];
    size_t len;
} message;

static void say(message *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(message *m, const char *fmt, ...) {
    if (m->len >= sizeof m->text - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(m->text + m->len, sizeof m->text - m->len, fmt, ap);
    va_end(ap);
    if (k > 0) m->len += (size_t)k < sizeof m->text - m->len ? (size_t)k : sizeof m->text - m->len - 1;
}

/* Appends "; rank R has V" for each rank whose field differs from rank 0's; returns how many. */
typedef int (*field_differs)(const hvdc_wire_request *a, const hvdc_wire_request *b);
typedef void (*field_print)(message *m, const hvdc_wire_request *q);

static int list_differences(message *m, const entry *e, int size, const char *what,
                            field_differs differs, field_print print) {
    const hvdc_wire_request *base = &e->by_rank[0];
    int n_diff = 0;
    for (int r = 1; r < size; r++) {
        if (!differs(base, &e->by_rank[r])) continue;
        if (n_diff == 0) {
            say(m, "%s differs across ranks: rank 0 has ", what);
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

/* Fills m and returns 1 if the ranks' announcements for e cannot execute together. */
static int find_disagreement(const entry *e, int size, message *m) {
    const hvdc_wire_request *base = &e->by_rank[0];
    say(m, "%s '%s': ", hvdc__kind_name(base->kind), base->name);
    size_t prefix = m->len;
    if (list_differences(m, e, size, "operation", kind_differs, kind_print)) return 1;
    if (!hvdc__dtype_valid(base->dtype) || (base->kind != HVDC_KIND_BARRIER && !hvdc__op_valid(base->op))) {
        say(m, "unknown dtype or reduce op in rank 0's request");
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
        if (list_differences(m, e, size, "count", counts_differ, counts_print)) return 1;
        break;
    case HVDC_KIND_BROADCAST:
        if (list_differences(m, e, size, "root", root_differs, root_print)) return 1;
        if (list_differences(m, e, size, "count", counts_differ, counts_print)) return 1;
        if (base->root < 0 || base->root >= size) {
            say(m, "root %d is out of range 0..%d", (int)base->root, size - 1);
            return 1;
        }
        break;
    case HVDC_KIND_ALLGATHER: {
        uint64_t total = 0;
        for (int r = 0; r < size; r++) {
            if (e->by_rank[r].n_counts != 1) {
                say(m, "rank %d sent a malformed request", r);
                return 1;
            }
            total += e->by_rank[r].counts[0];
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
    case HVDC_KIND_COUNT:
        break;
    }
    return m->len > prefix;
}

/* ---- responses ---- */

static int can_fuse(const hvdc_wire_request *a, const hvdc_wire_request *b) {
    return a->kind == HVDC_KIND_ALLREDUCE && b->kind == HVDC_KIND_ALLREDUCE &&
           a->dtype == b->dtype && a->op == b->op && (a->device < 0) == (b->device < 0) &&
           a->prescale == b->prescale && a->postscale == b->postscale;
}

static uint64_t request_bytes(const hvdc_wire_request *q) {
    return total_count(q) * hvd_dtype_size((hvd_dtype)q->dtype);
}

hvd_status hvdc__negotiator_respond(hvdc_negotiator *n, size_t fusion_threshold,
                                    hvdc_response_list *out) {
    memset(out, 0, sizeof *out);
    size_t n_ready = 0;
    for (entry *e = n->ready_head; e; e = e->next_ready) n_ready++;
    out->flags = n->shutdown ? HVDC_FLAG_SHUTDOWN : 0;
    if (n_ready == 0) return HVD_OK;
    out->items = calloc(n_ready, sizeof *out->items);
    if (!out->items) return HVD_ERR_NO_MEMORY;

    /* a disagreement fails the entry on its own; mark those first so fusion skips them */
    char **errors = calloc(n_ready, sizeof *errors);
    if (!errors) return HVD_ERR_NO_MEMORY;
    size_t idx = 0;
    for (entry *e = n->ready_head; e; e = e->next_ready, idx++) {
        message m = {.len = 0};
        m.text[0] = '\0';
        if (find_disagreement(e, n->size, &m)) errors[idx] = strdup(m.text);
    }

    hvd_status st = HVD_OK;
    idx = 0;
    for (entry *e = n->ready_head; e; e = e->next_ready, idx++) {
        if (e->taken) continue;
        e->taken = 1;
        const hvdc_wire_request *base = &e->by_rank[0];
        hvdc_wire_response *s = &out->items[out->n++];
        s->kind = base->kind;
        size_t cap = 1;
        s->names = malloc(sizeof *s->names);
        if (!s->names) { st = HVD_ERR_NO_MEMORY; goto done; }
        memcpy(s->names[0], base->name, sizeof s->names[0]);
        s->n_names = 1;
        if (errors[idx]) {
            s->type = HVDC_RESPONSE_ERROR;
            s->error = errors[idx];
            errors[idx] = NULL;
            continue;
        }
        s->type = HVDC_RESPONSE_EXECUTE;
        if (base->kind == HVDC_KIND_ALLGATHER) {
            s->rank_counts = malloc((size_t)n->size * sizeof *s->rank_counts);
            if (!s->rank_counts) { st = HVD_ERR_NO_MEMORY; goto done; }
            s->n_rank_counts = (uint32_t)n->size;
            for (int r = 0; r < n->size; r++) s->rank_counts[r] = e->by_rank[r].counts[0];
        }
        if (base->kind != HVDC_KIND_ALLREDUCE) continue;
        /* fuse later compatible all-reduces while they fit under the threshold */
        uint64_t bytes = request_bytes(base);
        size_t later = idx + 1;
        for (entry *f = e->next_ready; f && bytes < fusion_threshold; f = f->next_ready, later++) {
            if (f->taken || errors[later] || !can_fuse(base, &f->by_rank[0])) continue;
            uint64_t more = request_bytes(&f->by_rank[0]);
            if (bytes + more > fusion_threshold) continue;
            if (s->n_names == cap) {
                cap *= 2;
                void *grown = realloc(s->names, cap * sizeof *s->names);
                if (!grown) { st = HVD_ERR_NO_MEMORY; goto done; }
                s->names = grown;
            }
            memcpy(s->names[s->n_names++], f->by_rank[0].name, sizeof s->names[0]);
            f->taken = 1;
            bytes += more;
        }
    }
done:
    /* forget every ready entry */
    while (n->ready_head) {
        entry *e = n->ready_head;
        n->ready_head = e->next_ready;
        hvdc__name_table_remove(&n->table, entry_name(e, n->size));
        entry_free(e, n->size);
    }
    n->ready_tail = NULL;
    for (size_t i = 0; i < n_ready; i++) free(errors[i]);
    free(errors);
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
    const hvdc_wire_request *q = &e->by_rank[0];
    for (int r = 0; r < size; r++)
        if (e->announced[r]) {
            q = &e->by_rank[r];
            break;
        }
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
    snprintf(out, len, "%s", scan.m.text);
    *oldest = scan.oldest;
    return scan.stalled;
}
