/*
 * config.c - parses HVD_* environment variables (and the HOROVOD_* aliases, so existing job
 * scripts keep working; the HVD_ name wins when both are set). A malformed value fails hvd_init
 * with a message that names the variable, shows the value and says what is accepted: a typo in a
 * job script must not silently run with defaults.
 * Runs on the thread that calls hvd_init.
 */
#include "runtime/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"

/* Host: chosen with benchmarks/fusion_bench (README, Performance): 16 MiB was best or within
 * noise of best for resnet50, bert-base and tiny at np = 2. Device: Horovod's 128 MiB, which
 * suits NCCL's large-message bandwidth (not measured here: no GPU). */
#define DEFAULT_FUSION_THRESHOLD ((size_t)16 << 20)
#define DEFAULT_GPU_FUSION_THRESHOLD ((size_t)128 << 20)
#define DEFAULT_CYCLE_TIME_MS 1.0
#define MAX_CYCLE_TIME_MS 10000.0
#define DEFAULT_STALL_CHECK_S 60.0
#define MAX_SECONDS (7 * 24 * 3600.0)

void hvdc__config_default(hvdc_config *config) {
    config->fusion_threshold_bytes = DEFAULT_FUSION_THRESHOLD;
    config->gpu_fusion_threshold_bytes = DEFAULT_GPU_FUSION_THRESHOLD;
    config->cycle_time_ms = DEFAULT_CYCLE_TIME_MS;
    config->cpu_allreduce = HVDC_CPU_ALLREDUCE_RING;
    config->log_level = HVDC_LOG_WARNING;
    config->stall_check_s = DEFAULT_STALL_CHECK_S;
    config->stall_shutdown_s = 0.0;
}

/* The value of the first of names[] that is set, and which name that was. */
static const char *lookup_first(const char *const names[2], hvdc_env_lookup lookup, void *ctx,
                                const char **found_name) {
    for (int i = 0; i < 2; i++) {
        const char *value = lookup(names[i], ctx);
        if (value != NULL) {
            *found_name = names[i];
            return value;
        }
    }
    return NULL;
}

/* Bytes with an optional binary suffix: 1048576, 1024K, 64M, 1G. */
static int parse_bytes(const char *text, size_t *out) {
    errno = 0;
    char *end = NULL;
    if (!isdigit((unsigned char)text[0])) return 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0) return 0;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (toupper((unsigned char)*end) == 'B') end++;
    if (*end != '\0') return 0;
    if (value > (SIZE_MAX >> shift) || (value << shift) > ((size_t)1 << 40)) return 0;
    *out = (size_t)(value << shift);
    return 1;
}

static int parse_milliseconds(const char *text, double *out) {
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(value)) return 0;
    if (value <= 0.0 || value > MAX_CYCLE_TIME_MS) return 0;
    *out = value;
    return 1;
}

/* Seconds: a number from 0 (off) to a week. */
static int parse_seconds(const char *text, double *out) {
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(value)) return 0;
    if (value < 0.0 || value > MAX_SECONDS) return 0;
    *out = value;
    return 1;
}

static int parse_choice(const char *text, const char *const choices[], int n, int *out) {
    for (int i = 0; i < n; i++) {
        if (strcasecmp(text, choices[i]) == 0) {
            *out = i;
            return 1;
        }
    }
    return 0;
}

hvd_status hvdc__config_from_env(hvdc_config *config, hvdc_env_lookup lookup, void *ctx) {
    hvdc__config_default(config);
    const char *name = NULL, *value = NULL;

    static const char *const fusion_names[2] = {"HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"};
    if ((value = lookup_first(fusion_names, lookup, ctx, &name)) != NULL &&
        !parse_bytes(value, &config->fusion_threshold_bytes)) {
        return hvdc__fail(HVD_ERR_CONFIG,
                          "%s='%s' is not a valid size: expected bytes as a non-negative integer "
                          "with an optional K, M or G suffix, at most 1T (e.g. 67108864 or 64M; 0 "
                          "turns fusion off)",
                          name, value);
    }
    if (value) config->gpu_fusion_threshold_bytes = config->fusion_threshold_bytes;

    static const char *const cycle_names[2] = {"HVD_CYCLE_TIME", "HOROVOD_CYCLE_TIME"};
    if ((value = lookup_first(cycle_names, lookup, ctx, &name)) != NULL &&
        !parse_milliseconds(value, &config->cycle_time_ms)) {
        return hvdc__fail(HVD_ERR_CONFIG,
                          "%s='%s' is not a valid cycle time: expected milliseconds, a number "
                          "greater than 0 and at most %.0f (e.g. 1 or 0.5)",
                          name, value, MAX_CYCLE_TIME_MS);
    }

    static const char *const allreduce_names[2] = {"HVD_CPU_ALLREDUCE", "HOROVOD_CPU_ALLREDUCE"};
    static const char *const allreduce_choices[] = {"ring", "mpi"};
    int choice = 0;
    if ((value = lookup_first(allreduce_names, lookup, ctx, &name)) != NULL) {
        if (!parse_choice(value, allreduce_choices, 2, &choice)) {
            return hvdc__fail(HVD_ERR_CONFIG,
                              "%s='%s' is not a CPU all-reduce: expected 'ring' (libhvdc's ring) "
                              "or 'mpi' (MPI_Allreduce)",
                              name, value);
        }
        config->cpu_allreduce = (hvdc_cpu_allreduce)choice;
    }

    static const char *const stall_names[2] = {"HVD_STALL_CHECK_TIME", "HOROVOD_STALL_CHECK_TIME_SECONDS"};
    if ((value = lookup_first(stall_names, lookup, ctx, &name)) != NULL &&
        !parse_seconds(value, &config->stall_check_s)) {
        return hvdc__fail(HVD_ERR_CONFIG,
                          "%s='%s' is not a valid stall check time: expected seconds from 0 (off) "
                          "to %.0f (e.g. 60)",
                          name, value, MAX_SECONDS);
    }
    static const char *const stop_names[2] = {"HVD_STALL_SHUTDOWN_TIME", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"};
    if ((value = lookup_first(stop_names, lookup, ctx, &name)) != NULL &&
        !parse_seconds(value, &config->stall_shutdown_s)) {
        return hvdc__fail(HVD_ERR_CONFIG,
                          "%s='%s' is not a valid stall shutdown time: expected seconds from 0 "
                          "(never) to %.0f (e.g. 600)",
                          name, value, MAX_SECONDS);
    }

    static const char *const timeline_names[2] = {"HVD_TIMELINE", "HOROVOD_TIMELINE"};
    if ((value = lookup_first(timeline_names, lookup, ctx, &name)) != NULL) {
        if (strlen(value) >= sizeof config->timeline_path)
            return hvdc__fail(HVD_ERR_CONFIG, "%s is %zu bytes long; expected a path shorter than %zu bytes",
                              name, strlen(value), sizeof config->timeline_path);
        snprintf(config->timeline_path, sizeof config->timeline_path, "%s", value);
    }
    static const char *const mark_names[2] = {"HVD_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES"};
    static const char *const flag_choices[] = {"0", "1"};
    if ((value = lookup_first(mark_names, lookup, ctx, &name)) != NULL &&
        !parse_choice(value, flag_choices, 2, &config->timeline_mark_cycles)) {
        return hvdc__fail(HVD_ERR_CONFIG, "%s='%s' is not a flag: expected 0 or 1", name, value);
    }

    static const char *const hier_names[2] = {"HVD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE"};
    if ((value = lookup_first(hier_names, lookup, ctx, &name)) != NULL &&
        !parse_choice(value, flag_choices, 2, &config->hierarchical_allreduce)) {
        return hvdc__fail(HVD_ERR_CONFIG, "%s='%s' is not a flag: expected 0 or 1", name, value);
    }

    static const char *const level_names[2] = {"HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL"};
    static const char *const level_choices[] = {"trace", "debug", "info", "warning", "error"};
    if ((value = lookup_first(level_names, lookup, ctx, &name)) != NULL) {
        if (!parse_choice(value, level_choices, 5, &choice)) {
            if (strcasecmp(value, "warn") == 0) {
                choice = HVDC_LOG_WARNING;
            } else {
                return hvdc__fail(HVD_ERR_CONFIG,
                                  "%s='%s' is not a log level: expected one of trace, debug, "
                                  "info, warning, error",
                                  name, value);
            }
        }
        config->log_level = (hvdc_log_level)choice;
    }
    return HVD_OK;
}
