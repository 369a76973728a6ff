/*
 * sim_memory.c - the simulated device's memory (see sim.h): a table of the allocations made by
 * cudaMalloc[Async] (device memory: from the device's own address space, sim_arena.c, starting
 * as garbage) and cudaMallocHost (pinned, from the heap), which answers which device holds a pointer (cudaPointerGetAttributes, and the
 * driver's cuPointerGetAttributes that gpu/gpu_pointer.c asks), and copies and memsets queued
 * on streams with CUDA's host-side rules:
 *
 *   cudaMemcpy         on the legacy stream; the host waits, except device to device
 *   cudaMemcpyAsync    queued; from pageable host memory the source is taken at the call (CUDA
 *                      stages it), to pageable host memory the host waits for the copy
 *   cudaMemset[Async]  queued (the legacy stream for cudaMemset); the host never waits
 *   cudaFree           waits for the device's streams (CUDA synchronizes), then frees
 *   cudaFreeAsync      freed when the stream reaches it
 *
 * Every device-side range must lie inside one allocation of the table, else the call fails
 * with cudaErrorInvalidValue: an overrun on a real GPU is a memcheck report, here an error.
 * Any thread.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "sim.h"

#define ALIGN 256       /* as cudaMalloc's */
#define GARBAGE 0xA5    /* what fresh device memory holds: never zeros, which hide bugs */

typedef struct allocation {
    char *base;
    size_t size;
    int kind;   /* SIM_MEM_DEVICE or SIM_MEM_PINNED */
    int device; /* the device's, -1 for pinned host memory */
} allocation;

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static allocation *table; /* (n_table) sorted by base, capacity cap_table */
static size_t n_table, cap_table;

/* With table_mu held: the index of the first allocation whose base is above p. */
static size_t upper_bound(const char *p) {
    size_t lo = 0, hi = n_table;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (table[mid].base <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* With table_mu held: the allocation holding p, or NULL (a binary search: libhvdc asks for
 * every tensor it is given, and a model has hundreds). */
static allocation *find_locked(const void *p) {
    const char *c = p;
    size_t i = upper_bound(c);
    if (i == 0) return NULL;
    allocation *a = &table[i - 1];
    return c < a->base + (a->size ? a->size : 1) ? a : NULL;
}

int sim_memory_find(const void *p, int *device) {
    return sim_memory_range(p, device, NULL, NULL);
}

int sim_memory_range(const void *p, int *device, const void **start, size_t *size) {
    pthread_mutex_lock(&table_mu);
    allocation *a = find_locked(p);
    int kind = a ? a->kind : 0;
    if (device) *device = a ? a->device : -1;
    if (start) *start = a ? a->base : NULL;
    if (size) *size = a ? a->size : 0;
    pthread_mutex_unlock(&table_mu);
    return kind;
}

int sim_device_range(const void *p, size_t n) {
    pthread_mutex_lock(&table_mu);
    allocation *a = find_locked(p);
    int ok = a && a->kind == SIM_MEM_DEVICE && n <= a->size - (size_t)((const char *)p - a->base);
    pthread_mutex_unlock(&table_mu);
    return ok;
}

static cudaError_t table_add(void **out, size_t size, int kind, int device) {
    size_t rounded = (size + ALIGN - 1) / ALIGN * ALIGN;
    char *p = kind == SIM_MEM_DEVICE ? sim_arena_alloc(size)
                                     : aligned_alloc(ALIGN, rounded ? rounded : ALIGN);
    if (!p) return sim_error(cudaErrorMemoryAllocation);
    if (kind == SIM_MEM_DEVICE) memset(p, GARBAGE, size);
    pthread_mutex_lock(&table_mu);
    if (n_table == cap_table) {
        size_t cap = cap_table ? 2 * cap_table : 64;
        allocation *grown = realloc(table, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&table_mu);
            free(p);
            return sim_error(cudaErrorMemoryAllocation);
        }
        table = grown;
        cap_table = cap;
    }
    size_t at = upper_bound(p);
    memmove(&table[at + 1], &table[at], (n_table - at) * sizeof *table);
    table[at] = (allocation){p, size, kind, device};
    n_table++;
    pthread_mutex_unlock(&table_mu);
    *out = p;
    return cudaSuccess;
}

/* Takes p (an allocation's base, of kind) out of the table and frees it. */
static cudaError_t table_free(void *p, int kind) {
    pthread_mutex_lock(&table_mu);
    size_t i = upper_bound(p);
    if (i > 0 && table[i - 1].base == p && table[i - 1].kind == kind) {
        size_t size = table[i - 1].size;
        memmove(&table[i - 1], &table[i], (n_table - i) * sizeof *table);
        n_table--;
        pthread_mutex_unlock(&table_mu);
        if (kind == SIM_MEM_DEVICE) sim_arena_free(p, size);
        else free(p);
        return cudaSuccess;
    }
    pthread_mutex_unlock(&table_mu);
    return sim_error(cudaErrorInvalidValue);
}

/* ---- allocation ---------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **ptr, size_t size) {
    if (!ptr) return sim_error(cudaErrorInvalidValue);
    *ptr = NULL;
    if (size == 0) return cudaSuccess;
    return table_add(ptr, size, SIM_MEM_DEVICE, sim_current_device());
}

cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    int device = -1;
    if (sim_memory_find(ptr, &device) != SIM_MEM_DEVICE) return sim_error(cudaErrorInvalidValue);
    sim_device_drain(device); /* cudaFree synchronizes the device */
    return table_free(ptr, SIM_MEM_DEVICE);
}

cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream) {
    if (!ptr) return sim_error(cudaErrorInvalidValue);
    *ptr = NULL;
    if (!sim_config()->pools) return sim_error(cudaErrorNotSupported);
    struct CUstream_st *s = sim_stream_of(stream);
    if (!s) return sim_error(cudaErrorInvalidResourceHandle);
    if (size == 0) return cudaSuccess;
    return table_add(ptr, size, SIM_MEM_DEVICE, sim_stream_device(s));
}

static void run_free(void *args) {
    void *p;
    memcpy(&p, args, sizeof p);
    table_free(p, SIM_MEM_DEVICE);
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
    if (!ptr) return cudaSuccess;
    if (!sim_config()->pools) return sim_error(cudaErrorNotSupported);
    if (sim_memory_find(ptr, NULL) != SIM_MEM_DEVICE) return sim_error(cudaErrorInvalidValue);
    return sim_enqueue(stream, run_free, &ptr, sizeof ptr);
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
    if (!ptr) return sim_error(cudaErrorInvalidValue);
    return table_add(ptr, size, SIM_MEM_PINNED, -1);
}

cudaError_t cudaFreeHost(void *ptr) {
    if (!ptr) return cudaSuccess;
    return table_free(ptr, SIM_MEM_PINNED);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr) {
    if (!attributes) return sim_error(cudaErrorInvalidValue);
    int device = -1, kind = sim_memory_find(ptr, &device);
    memset(attributes, 0, sizeof *attributes);
    attributes->type = kind == SIM_MEM_DEVICE   ? cudaMemoryTypeDevice
                       : kind == SIM_MEM_PINNED ? cudaMemoryTypeHost
                                                : cudaMemoryTypeUnregistered;
    attributes->device = kind == SIM_MEM_DEVICE ? device : -2;
    attributes->devicePointer = kind == SIM_MEM_DEVICE ? (void *)ptr : NULL;
    attributes->hostPointer = kind == SIM_MEM_DEVICE ? NULL : (void *)ptr;
    return cudaSuccess;
}

/* ---- the driver's two calls ---------------------------------------------------------------- */

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    return sim_config()->devices > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

static atomic_ullong pointer_queries;

unsigned long long sim_pointer_queries(void) { return atomic_load(&pointer_queries); }

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes, void **data,
                                CUdeviceptr ptr) {
    atomic_fetch_add(&pointer_queries, 1);
    if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
    int device = -1;
    const void *start = NULL;
    size_t size = 0;
    int kind = sim_memory_range((const void *)ptr, &device, &start, &size);
    for (unsigned int i = 0; i < n; i++) {
        switch (attributes[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(unsigned int *)data[i] = kind == SIM_MEM_DEVICE   ? (unsigned)CU_MEMORYTYPE_DEVICE
                                       : kind == SIM_MEM_PINNED ? (unsigned)CU_MEMORYTYPE_HOST
                                                                : 0u;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            *(int *)data[i] = kind == SIM_MEM_DEVICE ? device : -2;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            if (!kind) return CUDA_ERROR_INVALID_VALUE;
            *(CUdeviceptr *)data[i] = (CUdeviceptr)start;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
            if (!kind) return CUDA_ERROR_INVALID_VALUE;
            *(size_t *)data[i] = size;
            break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}

/* ---- copies and memsets ------------------------------------------------------------------- */

typedef struct copy_args {
    void *dst;
    const void *src; /* NULL: the bytes follow these arguments (staged at the call) */
    size_t n;
} copy_args;

static void run_copy(void *args) {
    copy_args *a = args;
    memcpy(a->dst, a->src ? a->src : (const void *)(a + 1), a->n);
}

typedef struct set_args {
    void *dst;
    int value;
    size_t n;
} set_args;

static void run_set(void *args) {
    set_args *a = args;
    memset(a->dst, a->value, a->n);
}

static int is_device(const void *p) { return sim_memory_find(p, NULL) == SIM_MEM_DEVICE; }

/* Checks a copy's ranges against its kind (cudaMemcpyDefault: what the table says). */
static cudaError_t check_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                              int *dst_device, int *src_device) {
    if (kind == cudaMemcpyDefault) {
        *dst_device = is_device(dst);
        *src_device = is_device(src);
    } else if (kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDeviceToDevice) {
        *dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
        *src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    } else {
        return cudaErrorInvalidValue;
    }
    if (!dst || !src) return cudaErrorInvalidValue;
    if ((*dst_device && !sim_device_range(dst, n)) || (*src_device && !sim_device_range(src, n)))
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

static cudaError_t copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                        cudaStream_t stream, int synchronous) {
    if (n == 0) return cudaSuccess;
    int dst_device = 0, src_device = 0;
    cudaError_t err = check_copy(dst, src, n, kind, &dst_device, &src_device);
    if (err != cudaSuccess) return sim_error(err);
    int src_pageable = !src_device && sim_memory_find(src, NULL) == 0;
    int dst_pageable = !dst_device && sim_memory_find(dst, NULL) == 0;
    /* the host waits for cudaMemcpy (except device to device) and for a copy into pageable
     * memory */
    if ((synchronous && !(dst_device && src_device)) || dst_pageable)
        return sim_enqueue_wait(stream, run_copy, &(copy_args){dst, src, n}, sizeof(copy_args));
    if (!src_pageable)
        return sim_enqueue(stream, run_copy, &(copy_args){dst, src, n}, sizeof(copy_args));
    /* from pageable memory: the bytes are taken now, the caller may change them at once */
    copy_args *staged = malloc(sizeof *staged + n);
    if (!staged) return sim_error(cudaErrorMemoryAllocation);
    *staged = (copy_args){dst, NULL, n};
    memcpy(staged + 1, src, n);
    err = sim_enqueue(stream, run_copy, staged, sizeof *staged + n);
    free(staged);
    return err;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    return copy(dst, src, count, kind, cudaStreamLegacy, 1);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    return copy(dst, src, count, kind, stream, 0);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    if (!sim_device_range(ptr, count)) return sim_error(cudaErrorInvalidValue);
    return sim_enqueue(stream, run_set, &(set_args){ptr, value, count}, sizeof(set_args));
}

cudaError_t cudaMemset(void *ptr, int value, size_t count) {
    return cudaMemsetAsync(ptr, value, count, cudaStreamLegacy);
}
