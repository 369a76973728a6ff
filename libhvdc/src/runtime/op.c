/*
 * op.c - creation and recycling of submitted operations, and the generation-checked handle table.
 * Any thread; callers hold runtime.completion_mutex around handle-table calls.
 */
#include "runtime/op.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* a spare op is poisoned, so a use after its release still fails under ASan */
#define POISON_OP(op) ASAN_POISON_MEMORY_REGION((op), ONE_TENSOR_OP_BYTES)
#define UNPOISON_OP(op) ASAN_UNPOISON_MEMORY_REGION((op), ONE_TENSOR_OP_BYTES)
#else
#define POISON_OP(op) ((void)(op))
#define UNPOISON_OP(op) ((void)(op))
#endif

static size_t op_bytes(size_t n_tensors) {
    /* one allocation an op (all 8-byte aligned): the op, its tensors, a count each */
    return sizeof(hvdc_op) + n_tensors * (sizeof(hvdc_tensor) + sizeof(uint64_t));
}
#define ONE_TENSOR_OP_BYTES op_bytes(1)

/* This thread's spare op, for its next submission (hvdc__op_take_spare). The key frees it when
 * the thread exits. */
static _Thread_local hvdc_op *thread_spare;
static _Thread_local int thread_spare_keyed; /* the key holds a value for this thread */
static pthread_key_t spare_key;
static int spare_key_made; /* 0: no key (out of keys): threads keep no spare */
static pthread_once_t spare_key_once = PTHREAD_ONCE_INIT;

static void free_thread_spare(void *unused) {
    (void)unused;
    if (thread_spare) UNPOISON_OP(thread_spare);
    free(thread_spare);
    thread_spare = NULL;
}

static void make_spare_key(void) {
    spare_key_made = pthread_key_create(&spare_key, free_thread_spare) == 0;
}

/* Unloaded (dlclose), the library must not leave its free_thread_spare for threads that exit
 * later: their spares then leak instead. */
__attribute__((destructor)) static void delete_spare_key(void) {
    if (spare_key_made) pthread_key_delete(spare_key);
    spare_key_made = 0;
}

/* Where hvdc__op_create put op's counts: after its tensors, in the op's own allocation. */
static uint64_t *inline_counts(hvdc_op *op) {
    return (uint64_t *)(op->tensors + (op->n_tensors ? op->n_tensors : 1));
}

hvdc_op *hvdc__op_create(size_t n_tensors) {
    size_t n = n_tensors ? n_tensors : 1;
    size_t bytes = op_bytes(n);
    hvdc_op *op = NULL;
    if (n == 1 && thread_spare) {
        op = thread_spare;
        thread_spare = NULL;
        UNPOISON_OP(op);
    } else if (!(op = malloc(bytes))) {
        return NULL;
    }
    /* zeroed but for the name's room, a third of the op (zeroing it would be a submission's
     * largest cost): the name is read only up to its NUL */
    _Static_assert(offsetof(hvdc_op, desc.name) == 0, "the name's room comes first");
    op->desc.name[0] = '\0';
    memset((char *)op + sizeof op->desc.name, 0, bytes - sizeof op->desc.name);
    op->tensors = (hvdc_tensor *)(op + 1);
    op->n_tensors = n_tensors;
    op->desc.counts = inline_counts(op);
    op->desc.prescale = op->desc.postscale = 1.0;
    op->desc.device = HVD_DEVICE_CPU;
    return op;
}

int hvdc__op_set_counts(hvdc_op *op, const size_t *counts, size_t n) {
    uint64_t *to = inline_counts(op);
    if (n > (op->n_tensors ? op->n_tensors : 1) && !(to = malloc(n * sizeof *to))) return -1;
    if (op->desc.counts != inline_counts(op)) free(op->desc.counts);
    for (size_t i = 0; i < n; i++) to[i] = counts[i];
    op->desc.counts = to;
    op->desc.n_counts = (uint32_t)n;
    return 0;
}

/* Frees what op owns, not op itself. */
static void free_owned(hvdc_op *op) {
    if (op->desc.counts == inline_counts(op)) op->desc.counts = NULL; /* not an allocation */
    hvdc__wire_request_free(&op->desc);
    free(op->member_names);
    free(op->error);
}

void hvdc__op_free(hvdc_op *op) {
    if (!op) return;
    free_owned(op);
    free(op);
}

void hvdc__op_recycle(hvdc_handles *h, hvdc_op *op) {
    if (!op) return;
    if (op->n_tensors > 1 || h->n_spare >= HVDC_MAX_SPARE_OPS) {
        hvdc__op_free(op);
        return;
    }
    free_owned(op); /* its memory stays: hvdc__op_create zeroes it again */
    op->next = h->spare_ops;
    h->spare_ops = op;
    h->n_spare++;
    POISON_OP(op);
}

void hvdc__op_take_spare(hvdc_handles *h) {
    if (thread_spare || !h->spare_ops) return;
    if (!thread_spare_keyed) { /* once a thread: the key frees its spare at its exit */
        pthread_once(&spare_key_once, make_spare_key);
        if (!spare_key_made || pthread_setspecific(spare_key, &thread_spare) != 0)
            return;
        thread_spare_keyed = 1;
    }
    hvdc_op *op = h->spare_ops;
    UNPOISON_OP(op);
    h->spare_ops = op->next;
    h->n_spare--;
    POISON_OP(op);
    thread_spare = op;
}

void hvdc__handles_init(hvdc_handles *h) { memset(h, 0, sizeof *h); }

void hvdc__handles_free(hvdc_handles *h) {
    for (uint32_t i = 0; i < h->n_slots; i++) hvdc__op_free(h->slots[i].op);
    while (h->spare_ops) {
        hvdc_op *op = h->spare_ops;
        UNPOISON_OP(op);
        h->spare_ops = op->next;
        free(op);
    }
    free(h->slots);
    free(h->free_list);
    memset(h, 0, sizeof *h);
}

hvd_handle hvdc__handles_add(hvdc_handles *h, hvdc_op *op) {
    if (h->n_free == 0) {
        uint32_t n = h->n_slots ? h->n_slots * 2 : 64;
        hvdc_handle_slot *slots = realloc(h->slots, n * sizeof *slots);
        if (!slots) return HVD_HANDLE_NULL;
        h->slots = slots;
        uint32_t *free_list = realloc(h->free_list, n * sizeof *free_list);
        if (!free_list) return HVD_HANDLE_NULL;
        h->free_list = free_list;
        for (uint32_t i = n; i > h->n_slots; i--) {
            h->slots[i - 1] = (hvdc_handle_slot){0, NULL};
            h->free_list[h->n_free++] = i - 1;
        }
        h->n_slots = n;
    }
    uint32_t slot = h->free_list[--h->n_free];
    h->slots[slot].op = op;
    /* 24 bits: a handle's top byte names its process set (runtime.h) */
    h->slots[slot].generation = (h->slots[slot].generation + 1) & 0xffffffu;
    if (h->slots[slot].generation == 0) h->slots[slot].generation = 1;
    return ((uint64_t)h->slots[slot].generation << 32) | (uint64_t)(slot + 1);
}

hvdc_op *hvdc__handles_find(const hvdc_handles *h, hvd_handle handle) {
    uint64_t low = handle & 0xffffffffu;
    if (low == 0 || low > h->n_slots) return NULL;
    const hvdc_handle_slot *s = &h->slots[low - 1];
    if (s->op == NULL || s->generation != (uint32_t)(handle >> 32)) return NULL;
    return s->op;
}

void hvdc__handles_remove(hvdc_handles *h, hvd_handle handle) {
    if (!hvdc__handles_find(h, handle)) return;
    uint32_t slot = (uint32_t)(handle & 0xffffffffu) - 1;
    h->slots[slot].op = NULL;
    h->free_list[h->n_free++] = slot;
}
