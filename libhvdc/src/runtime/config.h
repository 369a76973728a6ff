/*
 * config.h - the runtime's knobs, read from the environment once by hvd_init.
 * defines: hvdc_config, hvdc_cpu_allreduce, hvdc__config_default, hvdc__config_from_env
 * Runs on the thread that calls hvd_init.
 */
#ifndef HVDC_CONFIG_H
#define HVDC_CONFIG_H

#include <stddef.h>

#include "base/log.h"
#include "hvdc.h"

typedef enum hvdc_cpu_allreduce {
    HVDC_CPU_ALLREDUCE_RING = 0, /* our ring over MPI point-to-point */
    HVDC_CPU_ALLREDUCE_MPI = 1,  /* MPI_Allreduce (the baseline) */
} hvdc_cpu_allreduce;

typedef struct hvdc_config {
    size_t fusion_threshold_bytes;     /* HVD_FUSION_THRESHOLD for host tensors; 0 = off */
    size_t gpu_fusion_threshold_bytes; /* the same for device tensors (HVD_FUSION_THRESHOLD if set) */
    double cycle_time_ms;          /* HVD_CYCLE_TIME: pacing of rounds that made no progress */
    hvdc_cpu_allreduce cpu_allreduce; /* HVD_CPU_ALLREDUCE */
    hvdc_log_level log_level;         /* HVD_LOG_LEVEL */
    double stall_check_s;    /* HVD_STALL_CHECK_TIME: report names waiting this long; 0 = off */
    double stall_shutdown_s; /* HVD_STALL_SHUTDOWN_TIME: stop the job after this long; 0 = never */
    char timeline_path[1024]; /* HVD_TIMELINE: Chrome-trace file written by rank 0; "" = off */
    int timeline_mark_cycles; /* HVD_TIMELINE_MARK_CYCLES: 1 = an instant event per round */
    int hierarchical_allreduce; /* HVD_HIERARCHICAL_ALLREDUCE: 1 = two-level CPU all-reduce */
} hvdc_config;

/* Looks a variable up; getenv in the library, a table in the tests. */
typedef const char *(*hvdc_env_lookup)(const char *name, void *ctx);

void hvdc__config_default(hvdc_config *config);

/* Fills config from the environment (HVD_ names, else their HOROVOD_ aliases, else defaults).
 * @return HVD_OK, or HVD_ERR_CONFIG naming the variable, its value and what is accepted. */
hvd_status hvdc__config_from_env(hvdc_config *config, hvdc_env_lookup lookup, void *ctx);

#endif
