/*
 * sim_device.c - the simulated device's settings (read from the environment once, see sim.h),
 * its devices (count, the thread's current one, attributes, synchronizing) and CUDA's error
 * calls (per-thread last error, names and strings).
 * Any thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

static sim_settings settings;
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;
static _Thread_local int current_device;
static _Thread_local cudaError_t last_error = cudaSuccess;

static long env_long(const char *name, long dflt, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "[sim] %s=%s is not a number in [%ld, %ld]; using %ld\n", name, v, lo,
                hi, dflt);
        return dflt;
    }
    return x;
}

static void read_settings(void) {
    const char *seed = getenv("HVDC_SIM_SEED");
    if (seed && *seed) {
        settings.seed = strtoull(seed, NULL, 10);
    } else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        settings.seed = ((uint64_t)now.tv_nsec ^ (uint64_t)now.tv_sec * 1000003u) % 1000000007u;
    }
    settings.max_delay_us = (unsigned)env_long("HVDC_SIM_DELAY_US", 50, 0, 1000000);
    settings.devices = (int)env_long("HVDC_SIM_DEVICES", 8, 0, 64);
    settings.sms = (int)env_long("HVDC_SIM_SMS", 4, 1, 1024);
    settings.pools = (int)env_long("HVDC_SIM_POOLS", 1, 0, 1);
    settings.abort_lag_ms = env_long("HVDC_SIM_ABORT_LAG_MS", 0, 0, 60000);
    settings.remote_errors = (int)env_long("HVDC_SIM_REMOTE_ERRORS", 0, 0, 1);
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    settings.rank = rank ? atoi(rank) : 0;
    const char *nccl_error = getenv("HVDC_SIM_NCCL_ERROR");
    if (nccl_error && *nccl_error) {
        int at_rank = -1;
        long nth = 0;
        char end = 0;
        if (sscanf(nccl_error, "%d:%ld%c", &at_rank, &nth, &end) != 2 || at_rank < 0 || nth < 1)
            fprintf(stderr, "[sim] HVDC_SIM_NCCL_ERROR=%s is not RANK:N (N >= 1); no error "
                    "injected\n", nccl_error);
        else if (at_rank == settings.rank)
            settings.nccl_error_at = nth;
    }
    /* once per process, so a failing test's log holds what replays it */
    fprintf(stderr, "[sim rank %d pid %d] simulated device: HVDC_SIM_SEED=%llu "
            "HVDC_SIM_DELAY_US=%u HVDC_SIM_DEVICES=%d\n", settings.rank, (int)getpid(),
            (unsigned long long)settings.seed, settings.max_delay_us, settings.devices);
}

const sim_settings *sim_config(void) {
    pthread_once(&settings_once, read_settings);
    return &settings;
}

cudaError_t sim_error(cudaError_t err) {
    if (err != cudaSuccess && err != cudaErrorNotReady) last_error = err;
    return err;
}

int sim_current_device(void) { return current_device; }

/* ---- errors ------------------------------------------------------------------------------ */

static const struct {
    cudaError_t code;
    const char *name, *text;
} errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
};

const char *cudaGetErrorName(cudaError_t error) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error) return errors[i].name;
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t error) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error) return errors[i].text;
    return "unknown error";
}

cudaError_t cudaGetLastError(void) {
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

/* ---- devices ------------------------------------------------------------------------------ */

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return sim_error(cudaErrorInvalidValue);
    *count = sim_config()->devices;
    return *count > 0 ? cudaSuccess : sim_error(cudaErrorNoDevice);
}

static int valid_device(int device) { return device >= 0 && device < sim_config()->devices; }

cudaError_t cudaSetDevice(int device) {
    if (!valid_device(device)) return sim_error(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    if (!device) return sim_error(cudaErrorInvalidValue);
    if (sim_config()->devices == 0) return sim_error(cudaErrorNoDevice);
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (!value) return sim_error(cudaErrorInvalidValue);
    if (!valid_device(device)) return sim_error(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = sim_config()->sms; return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported: *value = sim_config()->pools; return cudaSuccess;
    }
    return sim_error(cudaErrorInvalidValue);
}

cudaError_t cudaDeviceSynchronize(void) {
    if (sim_config()->devices == 0) return sim_error(cudaErrorNoDevice);
    sim_device_drain(current_device);
    return cudaSuccess;
}
