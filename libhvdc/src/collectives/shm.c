/*
 * shm.c - the shared-memory all-reduce among the ranks of a node (shm.h has the picture).
 *
 * Segment layout: two flag lines per rank (64 bytes each, no false sharing), padded to a page;
 * then N slots and the result slot, slot_bytes each; then the one-shot all-reduce's two sets of
 * N slots. A rank's e-th arrival stores e in its flag line e % 2, so a waiter never confuses one
 * step with the next and nothing is ever reset. Why two lines: a rank arrives at e + 1 only
 * after every rank arrived at e, so no rank is more than one arrival ahead of another, and line
 * e % 2 is free for what arrival e carries (a one-shot's inline bytes) until arrival e + 2.
 * The segment itself is base/node_segment.h's (freed without a collective, even after a peer
 * died).
 * Background thread (create: the thread that calls hvd_init).
 */
#include "collectives/shm.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/node_segment.h"
#include "base/poll.h"
#include "base/status.h"
#include "collectives/block.h"
#include "collectives/fold.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the arrival counters must be lock-free to be shared");

/* Bytes per rank and step: HVDC_SHM_SLOT_BYTES (shm.h). Fewer, bigger steps win while a step
 * stays in cache: each step costs two arrivals and hands every slot line from core to core
 * (docs/performance.md has the sizes measured). With many ranks a slot shrinks so that the
 * N + 1 slots a step touches stay within STEP_BUDGET (a node's L3), never below SLOT_MIN. */
enum {
    SLOT_MAX = HVDC_SHM_SLOT_BYTES,
    SLOT_MIN = 64 * 1024,
    STEP_BUDGET = 16 * 1024 * 1024,
    STEP_ALIGN = HVDC_SHM_STEP_ALIGN,
    ONESHOT_BYTES = HVDC_SHM_ONESHOT_BYTES,
    BACK_CHUNK = 16 * 1024,  /* two ranks: folded and written back a chunk at a time */
    LINE = 64,               /* one flag per cache line */
    INLINE_MAX = 48,         /* a one-shot's bytes carried in its flag line */
    SPINS = 200,             /* busy polls before the wait's poll policy decides */
};

/* What a rank's arrival publishes: the arrival's number, and a small one-shot's bytes. */
typedef struct flag_line {
    _Atomic uint64_t epoch;
    unsigned char bytes[INLINE_MAX];
} flag_line;
_Static_assert(sizeof(flag_line) <= LINE, "a flag line must fit a cache line");

struct hvdc_shm {
    int rank, size;
    char *base;              /* the mapping */
    size_t map_bytes;
    size_t slot_bytes;       /* slot_bytes_for(size) */
    size_t step_bytes;       /* per rank and step: slot_bytes unless autotuning set less */
    char *slots;             /* slot q at slots + q * slot_bytes; the result slot at q = size */
    size_t oneshot_bytes;    /* a one-shot slot's bytes (whole pages): the most it takes */
    char *oneshot;           /* the one-shot sets: set p's slot q at oneshot + (p * size + q) *
                                oneshot_bytes */
    uint64_t epoch;          /* arrivals so far: the same on every rank of the node */
    int staged_inline;       /* the one-shot being staged carries its bytes in the flag line */
    const void **in;         /* (size) a fold's inputs */
    const char **staged;     /* (size) the last one-shot's bytes, by rank */
};

static flag_line *flag(const hvdc_shm *s, int q, uint64_t e) {
    return (flag_line *)(s->base + ((size_t)q * 2 + (e & 1)) * LINE);
}

static char *slot(const hvdc_shm *s, int q) { return s->slots + (size_t)q * s->slot_bytes; }

static char *oneshot_slot(const hvdc_shm *s, int q, uint64_t e) {
    return s->oneshot + ((e & 1) * (size_t)s->size + (size_t)q) * s->oneshot_bytes;
}

/* SLOT_MAX, or less so that size + 1 slots fit STEP_BUDGET; a multiple of 4 KiB (whole pages,
 * and every dtype's size divides it). */
static size_t slot_bytes_for(int size) {
    size_t fit = STEP_BUDGET / ((size_t)size + 1) / STEP_ALIGN * STEP_ALIGN;
    return fit > SLOT_MAX ? SLOT_MAX : fit < SLOT_MIN ? SLOT_MIN : fit;
}

static size_t header_bytes(int size) {
    size_t page = 4096, bytes = (size_t)size * 2 * LINE;
    return (bytes + page - 1) / page * page;
}

/* The reduce-scatter's and all-gather's steps: each moves piece elements (at most) of every
 * block, the block's piece in step `at` being [at, at + piece) of it. Block q's offset in the
 * buffer goes to *off; returns how many of its elements this step holds (0 once it is done). */
static size_t step_len(size_t count, size_t parts, size_t q, size_t at, size_t piece, size_t *off) {
    size_t n;
    hvdc__block_range(count, parts, q, off, &n);
    return at < n ? (n - at < piece ? n - at : piece) : 0;
}

/* Elements per block and step: the N pieces of a step fill one slot. */
static size_t piece_of(const hvdc_shm *s, size_t elem, size_t parts) {
    size_t piece = s->step_bytes / elem / parts;
    return piece ? piece : 1;
}

/* This rank's next arrival: what it wrote for it (slots, inline bytes) becomes visible to the
 * ranks that see the arrival. @return its number. */
static uint64_t arrive(hvdc_shm *s) {
    uint64_t e = ++s->epoch;
    atomic_store_explicit(&flag(s, s->rank, e)->epoch, e, memory_order_release);
    return e;
}

/* Waits until every rank of the node has arrived for the e-th time, reading the flags in one
 * pass that resumes at the first rank still missing: SPINS busy polls, then as the watch's
 * poll policy says (base/poll.h), checking the watch now and then. */
static hvd_status wait_for_all(hvdc_shm *s, uint64_t e, hvdc_liveness *watch) {
    hvdc_poll poll = hvdc__poll_begin(hvdc__liveness_poll_policy(watch));
    unsigned spins = 0;
    for (int q = 0;;) {
        while (q < s->size && atomic_load_explicit(&flag(s, q, e)->epoch, memory_order_acquire) >= e)
            q++;
        if (q == s->size) return HVD_OK;
        if (++spins < SPINS) {
            hvdc__cpu_relax();
            continue;
        }
        hvdc__poll_pause(&poll);
        if (watch && spins % 64 == 0) {
            hvd_status st = hvdc__liveness_check(watch);
            if (st != HVD_OK) return st;
        }
    }
}

static hvd_status arrive_and_wait(hvdc_shm *s, hvdc_liveness *watch) {
    return wait_for_all(s, arrive(s), watch);
}

hvd_status hvdc__shm_create(MPI_Comm local, hvdc_shm **out) {
    hvd_status st = HVD_OK;
    void *base = NULL;
    hvdc_shm *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the shared-memory all-reduce");
    CHECK_MPI(MPI_Comm_rank(local, &s->rank));
    CHECK_MPI(MPI_Comm_size(local, &s->size));
    s->in = calloc((size_t)s->size, sizeof *s->in);
    s->staged = calloc((size_t)s->size, sizeof *s->staged);
    s->slot_bytes = s->step_bytes = slot_bytes_for(s->size);
    s->oneshot_bytes = (ONESHOT_BYTES + STEP_ALIGN - 1) / STEP_ALIGN * STEP_ALIGN;
    s->map_bytes = header_bytes(s->size) + ((size_t)s->size + 1) * s->slot_bytes +
                   2 * (size_t)s->size * s->oneshot_bytes;
    /* collective: mapped (or failed) on every rank, whatever this one's memory */
    st = hvdc__node_segment_map(local, s->map_bytes, "the shared-memory all-reduce", &base);
    if (st == HVD_OK && (!s->in || !s->staged))
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the shared-memory all-reduce");
    if (st != HVD_OK) {
        hvdc__node_segment_unmap(base, s->map_bytes);
        goto fail;
    }
    s->base = base;
    s->slots = s->base + header_bytes(s->size);
    s->oneshot = s->slots + ((size_t)s->size + 1) * s->slot_bytes;
    *out = s;
    return HVD_OK;
fail:
    hvdc__shm_destroy(s);
    return st;
}

size_t hvdc__shm_step(const hvdc_shm *s) { return s->step_bytes; }

void hvdc__shm_set_step(hvdc_shm *s, size_t bytes) {
    bytes = bytes / STEP_ALIGN * STEP_ALIGN;
    s->step_bytes = bytes > s->slot_bytes ? s->slot_bytes : bytes < STEP_ALIGN ? STEP_ALIGN : bytes;
}

void hvdc__shm_destroy(hvdc_shm *s) {
    if (!s) return;
    hvdc__node_segment_unmap(s->base, s->map_bytes);
    free(s->in);
    free(s->staged);
    free(s);
}

/* Two ranks write each part's result back into the other's slot (fold_back); more ranks
 * would store it once per other rank, so they use the result slot. */
static int writes_back(const hvdc_shm *s) { return s->size == 2; }

/* Where a step's result is once fold_step returned: the result slot, or with two ranks this
 * rank's own slot (its own part folded there if staged, the other's written back). */
static char *step_results(const hvdc_shm *s) {
    return writes_back(s) ? slot(s, s->rank) : slot(s, s->size);
}

/* Two ranks: this rank's part folded from `own` and the other rank's slot into out, and the
 * result written back into the other rank's slot, chunk by chunk: into the lines the fold has
 * just read, which this core still holds, instead of the result slot's, which the other rank
 * read in the step before: faster at every size the steps take (docs/performance.md). */
static void fold_back(hvdc_shm *s, size_t off, size_t n, size_t elem, const void *own,
                      void *out, hvd_dtype dtype, hvd_reduce_op op) {
    int other = 1 - s->rank;
    char *theirs = slot(s, other) + off * elem;
    size_t chunk = BACK_CHUNK / elem;
    for (size_t at = 0; at < n; at += chunk) {
        size_t m = n - at < chunk ? n - at : chunk;
        char *folded = (char *)out + at * elem, *back = theirs + at * elem;
        s->in[other] = back;
        s->in[s->rank] = (const char *)own + at * elem;
        hvdc__fold(folded, s->in, 2, m, dtype, op);
        memcpy(back, folded, m * elem);
    }
}

/* The middle of an all-reduce step, once every rank's slot holds its step: elements
 * [off, off + n) of the step (this rank's part) folded in rank order from every slot, this
 * rank's own from `own`, into `out`, and copied from there to where the other ranks read it
 * (the result slot; with two ranks, the other rank's slot: step_results); returns once every
 * rank has done so, so the step's result is whole and the slots may be written again. out is memory this rank wrote last and nobody else reads: its own output, or its own
 * part of its slot (staged); it may be own (in place). Why not fold straight into the result
 * slot: its lines were read by the other ranks in the step before, so storing into them costs
 * more than folding here and copying (docs/performance.md). */
static hvd_status fold_step(hvdc_shm *s, size_t off, size_t n, size_t elem, const void *own,
                            void *out, hvd_dtype dtype, hvd_reduce_op op, hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    CHECK(arrive_and_wait(s, watch));
    if (writes_back(s)) {
        fold_back(s, off, n, elem, own, out, dtype, op);
    } else {
        for (int q = 0; q < s->size; q++) s->in[q] = slot(s, q) + off * elem;
        s->in[s->rank] = own;
        hvdc__fold(out, s->in, s->size, n, dtype, op);
        memcpy(slot(s, s->size) + off * elem, out, n * elem);
    }
    CHECK(arrive_and_wait(s, watch));
fail:
    return st;
}

/* Elements [0, len) of from into to, but for this rank's own part [off, off + n): the parts
 * the other ranks fold (into this rank's slot) or folded (out of the result slot). */
static void copy_others_parts(char *to, const char *from, size_t off, size_t n, size_t len,
                              size_t elem) {
    if (off > 0) memcpy(to, from, off * elem);
    if (off + n < len) memcpy(to + (off + n) * elem, from + (off + n) * elem, (len - off - n) * elem);
}

size_t hvdc__shm_oneshot_max(const hvdc_shm *s) { return s->oneshot_bytes; }

void *hvdc__shm_oneshot_staging(hvdc_shm *s, size_t bytes) {
    uint64_t next = s->epoch + 1;
    s->staged_inline = bytes <= INLINE_MAX;
    return s->staged_inline ? (void *)flag(s, s->rank, next)->bytes : oneshot_slot(s, s->rank, next);
}

hvd_status hvdc__shm_oneshot_exchange(hvdc_shm *s, hvdc_liveness *watch) {
    uint64_t e = arrive(s);
    for (int q = 0; q < s->size; q++)
        s->staged[q] = s->staged_inline ? (const char *)flag(s, q, e)->bytes : oneshot_slot(s, q, e);
    return wait_for_all(s, e, watch);
}

void hvdc__shm_oneshot_fold(hvdc_shm *s, size_t offset, size_t count, hvd_dtype dtype,
                            hvd_reduce_op op, void *dst) {
    for (int q = 0; q < s->size; q++) s->in[q] = s->staged[q] + offset;
    hvdc__fold(dst, s->in, s->size, count, dtype, op);
}

/* hvdc__shm_allreduce of a buffer a one-shot takes: copied in, exchanged, folded into dst. */
static hvd_status allreduce_oneshot(hvdc_shm *s, const void *src, void *dst, size_t count,
                                    hvd_dtype dtype, hvd_reduce_op op, hvdc_liveness *watch) {
    size_t bytes = count * hvd_dtype_size(dtype);
    memcpy(hvdc__shm_oneshot_staging(s, bytes), src, bytes);
    hvd_status st = hvdc__shm_oneshot_exchange(s, watch);
    if (st == HVD_OK) hvdc__shm_oneshot_fold(s, 0, count, dtype, op, dst);
    return st;
}

hvd_status hvdc__shm_allreduce(hvdc_shm *s, const void *src, void *dst, size_t count,
                               hvd_dtype dtype, hvd_reduce_op op, hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    size_t elem = hvd_dtype_size(dtype), step = s->step_bytes / elem;
    if (s->size == 1 || count == 0) {
        if (src != dst && count) memmove(dst, src, count * elem);
        return HVD_OK;
    }
    if (count * elem <= s->oneshot_bytes)
        return allreduce_oneshot(s, src, dst, count, dtype, op, watch);
    const char *result = step_results(s);
    for (size_t at = 0; at < count; at += step) {
        size_t len = count - at < step ? count - at : step, off, n;
        const char *mine = (const char *)src + at * elem;
        char *out = (char *)dst + at * elem;
        /* this rank folds its own part from src itself, into dst, where it then already is */
        hvdc__block_range(len, (size_t)s->size, (size_t)s->rank, &off, &n);
        copy_others_parts(slot(s, s->rank), mine, off, n, len, elem);
        CHECK(fold_step(s, off, n, elem, mine + off * elem, out + off * elem, dtype, op, watch));
        copy_others_parts(out, result, off, n, len, elem);
    }
fail:
    return st;
}

void *hvdc__shm_staging(hvdc_shm *s) { return slot(s, s->rank); }

hvd_status hvdc__shm_allreduce_staged(hvdc_shm *s, size_t count, hvd_dtype dtype,
                                      hvd_reduce_op op, hvdc_liveness *watch, const void **result) {
    hvd_status st = HVD_OK;
    size_t elem = hvd_dtype_size(dtype), off, n;
    *result = slot(s, s->rank);
    if (count > s->step_bytes / elem)
        return hvdc__fail(HVD_ERR_INTERNAL, "staged shared-memory all-reduce of %zu bytes: more than "
                          "the %zu-byte step", count * elem, s->step_bytes);
    if (s->size == 1 || count == 0) return HVD_OK;
    hvdc__block_range(count, (size_t)s->size, (size_t)s->rank, &off, &n);
    char *own = slot(s, s->rank) + off * elem; /* only this rank reads its own part of its slot */
    CHECK(fold_step(s, off, n, elem, own, own, dtype, op, watch));
    *result = step_results(s);
fail:
    return st;
}

hvd_status hvdc__shm_reduce_scatter(hvdc_shm *s, const void *src, void *dst, size_t count,
                                    hvd_dtype dtype, hvd_reduce_op op, hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    size_t elem = hvd_dtype_size(dtype), parts = (size_t)s->size, me = (size_t)s->rank;
    size_t piece = piece_of(s, elem, parts), first_len, off;
    hvdc__block_range(count, parts, 0, &off, &first_len); /* block 0 is the longest */
    for (size_t at = 0; at < first_len; at += piece) {
        for (size_t q = 0; q < parts; q++) { /* piece `at` of the others' blocks into my slot */
            if (q == me) continue;
            size_t len = step_len(count, parts, q, at, piece, &off);
            if (len) memcpy(slot(s, s->rank) + q * piece * elem, (const char *)src + (off + at) * elem, len * elem);
        }
        CHECK(arrive_and_wait(s, watch));
        size_t len = step_len(count, parts, me, at, piece, &off);
        for (int q = 0; q < s->size; q++) s->in[q] = slot(s, q) + me * piece * elem;
        s->in[me] = (const char *)src + (off + at) * elem; /* my own block: straight from src */
        hvdc__fold((char *)dst + (off + at) * elem, s->in, s->size, len, dtype, op);
        CHECK(arrive_and_wait(s, watch)); /* every slot read: they may be written again */
    }
fail:
    return st;
}

hvd_status hvdc__shm_allgather_blocks(hvdc_shm *s, void *buf, size_t count, hvd_dtype dtype,
                                      hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    size_t elem = hvd_dtype_size(dtype), parts = (size_t)s->size, me = (size_t)s->rank;
    size_t piece = piece_of(s, elem, parts), first_len, off;
    char *result = slot(s, s->size);
    hvdc__block_range(count, parts, 0, &off, &first_len);
    for (size_t at = 0; at < first_len; at += piece) {
        size_t len = step_len(count, parts, me, at, piece, &off);
        if (len) memcpy(result + me * piece * elem, (char *)buf + (off + at) * elem, len * elem);
        CHECK(arrive_and_wait(s, watch));
        for (size_t q = 0; q < parts; q++) {
            if (q == me) continue;
            len = step_len(count, parts, q, at, piece, &off);
            if (len) memcpy((char *)buf + (off + at) * elem, result + q * piece * elem, len * elem);
        }
        CHECK(arrive_and_wait(s, watch)); /* every rank has copied: the result slot is free */
    }
fail:
    return st;
}
