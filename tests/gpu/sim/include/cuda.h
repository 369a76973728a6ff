/*
 * cuda.h (simulated device) - the two CUDA driver calls libhvdc makes (gpu/gpu_pointer.c asks
 * which device holds a buffer without creating a context), with CUDA 13's names and values,
 * answered by the simulated device's memory table (tests/gpu/sim/sim_memory.c).
 * defines: CUresult, CUdeviceptr, CUpointer_attribute, CUmemorytype, cuInit,
 *          cuPointerGetAttributes
 * Any thread.
 */
#ifndef HVDC_SIM_CUDA_H
#define HVDC_SIM_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_CONTEXT = 201,
} CUresult;

typedef uintptr_t CUdeviceptr;

typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
} CUpointer_attribute;

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
} CUmemorytype;

CUresult cuInit(unsigned int flags);
/* As the driver: memory the device never saw answers type 0 and CUDA_SUCCESS. */
CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes, void **data,
                                CUdeviceptr ptr);

#ifdef __cplusplus
}
#endif

#endif
