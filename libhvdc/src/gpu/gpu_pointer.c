/*
 * gpu_pointer.c - which device a buffer lives on (hvdc__gpu_pointer_device, gpu.h), asked of
 * the CUDA driver directly.
 *
 * Why not cudaPointerGetAttributes: the runtime API initializes itself on first use and creates
 * a context on the current device (GPU 0 unless the caller chose one), which costs every rank
 * hundreds of MiB on GPU 0 even when it only ever reduces host buffers. The driver's
 * cuPointerGetAttributes needs no context. libcuda is opened with dlopen (once), not linked, so
 * a CUDA build still starts on a machine without the driver: every buffer is then host memory.
 * Should the driver not answer (an older driver that wants a current context), the runtime's
 * query is the fallback.
 *
 * A device buffer's allocation is remembered, per thread, among the last RECENT_RANGES seen:
 * a model's tensors live in a few allocations (PyTorch's caching allocator, one parameter
 * buffer), so most submissions find their buffers there, without two driver calls per tensor
 * on the submission path. A remembered range is trusted until it is
 * pushed out: memory freed and given back for another device's allocation within that time
 * would be taken for the first device's (libhvdc runs one device per rank; CUDA keeps freed
 * device ranges for device memory, never the host's).
 * Any thread.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "gpu/gpu_internal.h"

typedef CUresult (*init_fn)(unsigned int flags);
typedef CUresult (*attribute_fn)(unsigned int n, CUpointer_attribute *attributes, void **data,
                                 CUdeviceptr ptr);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static attribute_fn get_attribute; /* NULL: no usable driver */

#define RECENT_RANGES 16
typedef struct device_range {
    uintptr_t start, end; /* [start, end): one allocation of device */
    int device;
} device_range;
static _Thread_local device_range recent[RECENT_RANGES];
static _Thread_local unsigned recent_next; /* the slot replaced next (round robin) */

static int recent_device(uintptr_t p) {
    for (int i = 0; i < RECENT_RANGES; i++)
        if (p >= recent[i].start && p < recent[i].end) return recent[i].device;
    return -1;
}

/* Remembers the allocation holding p (device memory of device), if the driver tells it. */
static void remember_range(CUdeviceptr p, int device) {
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute which[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                    CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[2] = {&start, &size};
    if (get_attribute(2, which, data, p) != CUDA_SUCCESS || size == 0) return;
    recent[recent_next] = (device_range){(uintptr_t)start, (uintptr_t)start + size, device};
    recent_next = (recent_next + 1) % RECENT_RANGES;
}

#ifdef HVDC_SIM_DEVICE
/* The simulated device (tests/gpu/sim) links its driver in: there is no library to open. */
static void load_driver(void) {
    if (cuInit(0) == CUDA_SUCCESS) get_attribute = cuPointerGetAttributes;
}
#else
static void load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    void *init_sym = dlsym(lib, "cuInit"), *attribute_sym = dlsym(lib, "cuPointerGetAttributes");
    init_fn init = NULL;
    attribute_fn attribute = NULL;
    if (!init_sym || !attribute_sym) return;
    memcpy(&init, &init_sym, sizeof init); /* object to function pointer, as dlsym needs */
    memcpy(&attribute, &attribute_sym, sizeof attribute);
    if (init && attribute && init(0) == CUDA_SUCCESS) get_attribute = attribute;
    /* the library stays loaded for the process's life, as the CUDA runtime keeps it */
}
#endif

/* The runtime API's answer (creates a context: the fallback only). */
static int runtime_query(const void *ptr) {
    struct cudaPointerAttributes attributes;
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
        cudaGetLastError();
        return HVDC_GPU_PTR_UNKNOWN;
    }
    switch (attributes.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return attributes.device;
    case cudaMemoryTypeHost: return HVDC_GPU_PTR_UNKNOWN;
    default: return HVDC_GPU_PTR_HOST;
    }
}

int hvdc__gpu_pointer_device(const void *ptr) {
    if (!ptr) return HVDC_GPU_PTR_UNKNOWN;
    pthread_once(&once, load_driver);
    if (!get_attribute) return HVDC_GPU_PTR_UNKNOWN;
    int known = recent_device((uintptr_t)ptr);
    if (known >= 0) return known;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    /* The plural query answers memory CUDA never saw with type 0 and success, where the
     * singular one fails with CUDA_ERROR_INVALID_VALUE, which compute-sanitizer reports as an
     * API error on every host submission. */
    unsigned int type = 0;
    int ordinal = -2;
    CUpointer_attribute which[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[2] = {&type, &ordinal};
    CUresult res = get_attribute(2, which, data, p);
    if (res == CUDA_ERROR_INVALID_CONTEXT || res == CUDA_ERROR_NOT_INITIALIZED)
        return runtime_query(ptr);
    if (res != CUDA_SUCCESS) return HVDC_GPU_PTR_UNKNOWN;
    if (type == 0) return HVDC_GPU_PTR_HOST; /* memory CUDA never saw */
    if (type == CU_MEMORYTYPE_HOST) return HVDC_GPU_PTR_UNKNOWN; /* pinned: devices can map it */
    if (ordinal < 0) return runtime_query(ptr);
    remember_range(p, ordinal);
    return ordinal;
}
