/*
 * sim_arena.c - the simulated device's address space (see sim.h): device memory comes from one
 * reserved range of its own, never from the host's heap, as CUDA's unified addressing keeps
 * device and host allocations apart. So a host buffer can never sit where a device buffer was
 * (libhvdc remembers device ranges it has seen, gpu/gpu_pointer.c), while device addresses are
 * reused for device memory, as cudaMalloc reuses them.
 *
 *   [ alloc | redzone ][ alloc | redzone ]...[ free ]...  <- top           (4 GiB reserved)
 *
 * First fit over a free list sorted by address, neighbours merged; untouched pages cost
 * nothing (MAP_NORESERVE), and freed ranges of a MiB or more are handed back (MADV_DONTNEED).
 * Under AddressSanitizer the redzone after every allocation (256 bytes at least) and every
 * freed range are poisoned, so an overrun or a use after cudaFree is reported as for the heap.
 * Any thread (one mutex).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sim.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ARENA_BYTES ((size_t)4 << 30) /* reserved, not committed: the tests use under 1 GiB */
#define GRAIN 256   /* alignment and redzone, as cudaMalloc aligns */
#define GIVE_BACK ((size_t)1 << 20)

typedef struct span {
    char *base;
    size_t size;
} span;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *arena, *top;  /* the reservation; everything from top up is untouched */
static span *holes;        /* (n_holes) freed ranges below top, sorted by base */
static size_t n_holes, cap_holes;

static int reserve(void) {
    if (arena) return 1;
    void *p = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return 0;
    arena = top = p; /* not poisoned as a whole: that would take 512 MiB of ASan's shadow */
    return 1;
}

static size_t rounded(size_t size) { return (size + GRAIN - 1) / GRAIN * GRAIN + GRAIN; }

void *sim_arena_alloc(size_t size) {
    size_t need = rounded(size ? size : 1);
    char *p = NULL;
    pthread_mutex_lock(&mu);
    if (reserve()) {
        for (size_t i = 0; i < n_holes && !p; i++) {
            if (holes[i].size < need) continue;
            p = holes[i].base;
            holes[i].base += need;
            holes[i].size -= need;
            if (holes[i].size == 0) {
                memmove(&holes[i], &holes[i + 1], (n_holes - i - 1) * sizeof *holes);
                n_holes--;
            }
        }
        if (!p && (size_t)(arena + ARENA_BYTES - top) >= need) {
            p = top;
            top += need;
        }
    }
    pthread_mutex_unlock(&mu);
    if (p) {
        UNPOISON(p, size ? size : 1);
        POISON(p + (size ? size : 1), need - (size ? size : 1)); /* the redzone after it */
    }
    return p;
}

/* With mu held: gives [base, base + size) back, merged with the holes beside it. */
static void add_hole(char *base, size_t size) {
    size_t at = 0;
    while (at < n_holes && holes[at].base < base) at++;
    int before = at > 0 && holes[at - 1].base + holes[at - 1].size == base;
    int after = at < n_holes && base + size == holes[at].base;
    if (before && after) {
        holes[at - 1].size += size + holes[at].size;
        memmove(&holes[at], &holes[at + 1], (n_holes - at - 1) * sizeof *holes);
        n_holes--;
    } else if (before) {
        holes[at - 1].size += size;
    } else if (after) {
        holes[at].base = base;
        holes[at].size += size;
    } else {
        if (n_holes == cap_holes) {
            size_t cap = cap_holes ? 2 * cap_holes : 64;
            span *grown = realloc(holes, cap * sizeof *grown);
            if (!grown) return; /* the range is lost to the arena, nothing worse */
            holes = grown;
            cap_holes = cap;
        }
        memmove(&holes[at + 1], &holes[at], (n_holes - at) * sizeof *holes);
        holes[at] = (span){base, size};
        n_holes++;
    }
}

void sim_arena_free(void *ptr, size_t size) {
    if (!ptr) return;
    size_t need = rounded(size ? size : 1);
    POISON(ptr, need);
    if (need >= GIVE_BACK) madvise(ptr, need, MADV_DONTNEED); /* reads as zeros until reused */
    pthread_mutex_lock(&mu);
    add_hole(ptr, need);
    pthread_mutex_unlock(&mu);
}
