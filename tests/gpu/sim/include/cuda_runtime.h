/*
 * cuda_runtime.h (simulated device) - CUDA's C++ runtime header includes the API one; the
 * simulator has nothing more to add (tests/gpu/sim). defines: nothing of its own.
 */
#ifndef HVDC_SIM_CUDA_RUNTIME_H
#define HVDC_SIM_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#endif
