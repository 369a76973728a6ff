/*
 * node_vote.c - the node's shared-memory vote of node_vote.h.
 * Any thread (node_vote.h says which when).
 */
#include "negotiation/node_vote.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/node_segment.h"
#include "base/poll.h"
#include "base/status.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the vote must be lock-free to be shared");

enum { LINE = 64, SEGMENT_BYTES = 4096 };
enum { OPEN = 0, GO = 1, ABORT = 2 };
enum { BUSY_SHARE = 8 }; /* a busy rank is waited for an eighth of the vote's wait */

/* The segment: the vote, the busy bits, the hold bits, one cache line each. */
typedef struct shared_words {
    _Alignas(LINE) _Atomic uint64_t word;
    _Alignas(LINE) _Atomic uint64_t busy;
    _Alignas(LINE) _Atomic uint64_t hold;
} shared_words;

_Static_assert(sizeof(shared_words) <= SEGMENT_BYTES, "the vote's words fit the segment");

struct hvdc_node_vote {
    shared_words *shared;
    uint64_t me, all; /* this rank's bit; every rank's */
};

/* The fields of the word (node_vote.h draws them). */
static uint64_t votes_of(uint64_t w) { return w & 0xffff; }
static uint64_t left_of(uint64_t w) { return (w >> 16) & 0xffff; }
static unsigned state_of(uint64_t w) { return (unsigned)(w >> 32) & 3; }
static uint64_t epoch_of(uint64_t w) { return (w >> 34) & 0x3fff; }
static uint32_t slot_of(uint64_t w) { return (uint32_t)(w >> 48); }

static uint64_t make(uint64_t epoch, uint32_t slot, unsigned state, uint64_t votes, uint64_t left) {
    return votes | left << 16 | (uint64_t)state << 32 | (epoch & 0x3fff) << 34 |
           (uint64_t)slot << 48;
}

static uint64_t with_state(uint64_t w, unsigned state) {
    return (w & ~((uint64_t)3 << 32)) | (uint64_t)state << 32;
}

/* No vote open and every voter of the last one has read its verdict (the zeroed segment
 * reads as an open epoch nobody voted in). */
static int over(uint64_t w) {
    return state_of(w) == OPEN ? votes_of(w) == 0 : left_of(w) == votes_of(w);
}

/* Another rank's bit is set in *bits (busy or hold). */
static int others_in(const hvdc_node_vote *v, _Atomic uint64_t *bits) {
    return (atomic_load_explicit(bits, memory_order_acquire) & ~v->me) != 0;
}

/* Whether a vote is hopeless at now: past its deadline, another rank keeps the path off, or
 * one is still busy once a BUSY_SHARE of the wait has passed (a rank whose last op is being
 * completed by its background thread clears its bit within microseconds; one that has more
 * with its background thread does not vote). */
static int hopeless(const hvdc_node_vote *v, int64_t start, int64_t deadline) {
    int64_t now = hvdc__now_ns();
    if (now >= deadline || others_in(v, &v->shared->hold)) return 1;
    return others_in(v, &v->shared->busy) && now >= start + (deadline - start) / BUSY_SHARE;
}

static void pause_once(int spin) {
    if (spin) hvdc__cpu_relax();
    else sched_yield();
}

hvd_status hvdc__node_vote_create(MPI_Comm local, hvdc_node_vote **out) {
    hvd_status st = HVD_OK;
    int rank = 0, size = 0;
    void *base = NULL;
    *out = NULL;
    CHECK_MPI(MPI_Comm_rank(local, &rank));
    CHECK_MPI(MPI_Comm_size(local, &size));
    if (size < 2 || size > HVDC_NODE_VOTE_MAX_RANKS)
        return hvdc__fail(HVD_ERR_INTERNAL, "the node vote takes 2 to %d ranks, not %d",
                          HVDC_NODE_VOTE_MAX_RANKS, size);
    hvdc_node_vote *v = calloc(1, sizeof *v);
    if (!v) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the node vote");
    st = hvdc__node_segment_map(local, SEGMENT_BYTES, "the node vote", &base);
    if (st != HVD_OK) {
        free(v);
        return st;
    }
    v->shared = base;
    v->me = (uint64_t)1 << rank;
    v->all = ((uint64_t)1 << size) - 1;
    *out = v;
fail:
    return st;
}

void hvdc__node_vote_destroy(hvdc_node_vote *v) {
    if (!v) return;
    hvdc__node_segment_unmap(v->shared, SEGMENT_BYTES);
    free(v);
}

void hvdc__node_vote_set_busy(hvdc_node_vote *v, int busy) {
    if (busy) atomic_fetch_or(&v->shared->busy, v->me);
    else atomic_fetch_and(&v->shared->busy, ~v->me);
}

void hvdc__node_vote_set_hold(hvdc_node_vote *v, int hold) {
    if (hold) atomic_fetch_or(&v->shared->hold, v->me);
    else atomic_fetch_and(&v->shared->hold, ~v->me);
}

/* What a vote comes to: run, fall back, or wait for the others' votes. */
enum { RUN, FALL_BACK, WAIT };

/* Puts this rank's vote for slot in: opens a new epoch when the last is over, else joins the
 * open one (or aborts it, when it is for another slot). A vote closed but not yet over is
 * waited for until deadline. */
static int cast(hvdc_node_vote *v, uint32_t slot, int64_t start, int64_t deadline, int spin) {
    _Atomic uint64_t *word = &v->shared->word;
    for (unsigned spins = 0;; spins++) {
        uint64_t w = atomic_load(word), next;
        if (over(w)) {
            next = make(epoch_of(w) + 1, slot, OPEN, v->me, 0);
            if (atomic_compare_exchange_weak(word, &w, next)) return WAIT;
        } else if (state_of(w) == OPEN && slot_of(w) != slot) {
            if (atomic_compare_exchange_weak(word, &w, with_state(w, ABORT))) return FALL_BACK;
        } else if (state_of(w) == OPEN) {
            uint64_t votes = votes_of(w) | v->me;
            int all = votes == v->all; /* the last vote: go, and this rank has read it */
            next = make(epoch_of(w), slot, all ? GO : OPEN, votes, all ? v->me : 0);
            if (atomic_compare_exchange_weak(word, &w, next)) return all ? RUN : WAIT;
        } else if ((spins & 63) == 0 && hopeless(v, start, deadline)) {
            return FALL_BACK; /* the last vote's voters are slow to read it */
        } else {
            pause_once(spin);
        }
    }
}

/* Waits for the verdict of the vote this rank is in (its epoch cannot end before this rank
 * has read it: until then the word's state is its verdict); past deadline, or once another
 * rank cannot take part, aborts it (unless it was decided meanwhile). */
static int await_verdict(hvdc_node_vote *v, int64_t start, int64_t deadline, int spin) {
    _Atomic uint64_t *word = &v->shared->word;
    const uint64_t read_it = v->me << 16;
    for (unsigned spins = 0;; spins++) {
        uint64_t w = atomic_load(word);
        if (state_of(w) != OPEN) {
            atomic_fetch_or(word, read_it); /* decided: only the left bits change now */
            return state_of(w) == GO ? RUN : FALL_BACK;
        }
        if ((spins & 63) == 63 && hopeless(v, start, deadline)) {
            if (atomic_compare_exchange_strong(word, &w, with_state(w, ABORT) | read_it))
                return FALL_BACK;
            continue; /* decided meanwhile: read it */
        }
        pause_once(spin);
    }
}

int hvdc__node_vote(hvdc_node_vote *v, uint32_t slot, int64_t wait_ns, int spin) {
    if (others_in(v, &v->shared->hold)) return 0;
    int64_t start = hvdc__now_ns(), deadline = start + wait_ns;
    int outcome = cast(v, slot, start, deadline, spin);
    if (outcome == WAIT) outcome = await_verdict(v, start, deadline, spin);
    return outcome == RUN;
}
