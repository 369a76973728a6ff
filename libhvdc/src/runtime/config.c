/*
 * config.c - the settings table and its parser. HVD_* environment variables, with Horovod's
 * HOROVOD_* names as aliases so existing job scripts keep working (the HVD_ name wins when both
 * are set). A malformed value fails hvd_init with a message that names the variable, shows the
 * value and says what is accepted: a typo in a job script must not silently run with defaults.
 * A Horovod name's value that Horovod accepts is read as Horovod reads it, and said (config.h).
 * Runs on the thread that calls hvd_init.
 */
#include "runtime/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"
#include "collectives/shm.h" /* HVD_SHM_STEP's unit and largest value */

/* Host: chosen with benchmarks/fusion_bench (docs/performance.md): 16 MiB was best or within
 * noise of best for resnet50, bert-base and tiny at np = 2. Device: Horovod's 128 MiB, which
 * suits NCCL's large-message bandwidth. */
#define DEFAULT_FUSION_THRESHOLD ((size_t)16 << 20)
#define DEFAULT_GPU_FUSION_THRESHOLD ((size_t)128 << 20)
#define MAX_BYTES ((double)((size_t)1 << 40))
#define WEEK_S (7 * 24 * 3600.0)

#define FIELD(f) offsetof(hvdc_config, f)

static const char *const cpu_allreduce_choices[] = {"ring", "mpi", "shm", "auto", NULL};
static const char *const flag_choices[] = {"0", "1", NULL};
static const char *const level_choices[] = {"trace", "debug", "info", "warning", "error", "fatal",
                                            "warn", NULL};
static const int level_values[] = {HVDC_LOG_TRACE, HVDC_LOG_DEBUG, HVDC_LOG_INFO,
                                   HVDC_LOG_WARNING, HVDC_LOG_ERROR, HVDC_LOG_FATAL,
                                   HVDC_LOG_WARNING};

/* name, alias, type, field, min, max, choices, values, default, help, must agree, multiple,
 * Horovod's reading of the alias */
const hvdc_setting hvdc__settings[] = {
    {"HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", HVDC_SETTING_BYTES,
     FIELD(fusion_threshold_bytes), 0, MAX_BYTES, NULL, NULL, "16M host, 128M device",
     "most bytes of all-reduces fused into one response; `0` turns fusion off; accepts `K`, "
     "`M`, `G` suffixes; when set, it applies to host and device tensors alike. The host "
     "default comes from `benchmarks/fusion_bench` (see [Performance](performance.md)); the "
     "device default is Horovod's", 1, 0, HVDC_READ_INT},
    {"HVD_CYCLE_TIME", "HOROVOD_CYCLE_TIME", HVDC_SETTING_MS, FIELD(cycle_time_ms), 0, 10000,
     NULL, NULL, "1", "ms to wait for new submissions after a round that made no progress", 0, 0, HVDC_READ_FLOAT},
    {"HVD_CPU_ALLREDUCE", "HOROVOD_CPU_ALLREDUCE", HVDC_SETTING_CHOICE, FIELD(cpu_allreduce), 0,
     0, cpu_allreduce_choices, NULL, "`auto`",
     "`auto`: `shm` when every rank is on one node, or for the inside-node stage of "
     "`HVD_HIERARCHICAL_ALLREDUCE=1`; else `ring`. `shm`: the ranks of a node reduce in one "
     "shared memory segment (across nodes: the two-level all-reduce, shared memory inside each "
     "node). `ring`: libhvdc's all-reduce over MPI point-to-point messages. All three are "
     "bitwise reproducible and give the same bits (see [Reproducibility](reproducibility.md)). "
     "`mpi`: `MPI_Allreduce` (`MPI_Iallreduce` from 32 MiB; a watchdog thread looks for dead "
     "ranks meanwhile), whose order is MPI's (float16/bfloat16 always use libhvdc's)",
     1, 0, HVDC_READ_STRICT},
    {"HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL", HVDC_SETTING_CHOICE, FIELD(log_level), 0, 0,
     level_choices, level_values, "`warning`",
     "`trace`, `debug`, `info`, `warning`, `error`, `fatal` (libhvdc has no fatal messages: "
     "its errors are returned, so `fatal` logs nothing)",
     0, 0, HVDC_READ_LOG_LEVEL},
    {"HVD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", HVDC_SETTING_CHOICE,
     FIELD(hierarchical_allreduce), 0, 0, flag_choices, NULL, "`0`",
     "`1`: two-level all-reduce (inside each node, then across nodes; see [Hierarchical "
     "all-reduce](running.md#hierarchical-all-reduce))", 1, 0, HVDC_READ_FLAG},
    {"HVD_STALL_CHECK_TIME", "HOROVOD_STALL_CHECK_TIME_SECONDS", HVDC_SETTING_SECONDS,
     FIELD(stall_check_s), 0, WEEK_S, NULL, NULL, "60",
     "seconds a name may wait for other ranks before rank 0 logs it; `0` turns the check off",
     1, 0, HVDC_READ_INT},
    {"HVD_STALL_SHUTDOWN_TIME", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", HVDC_SETTING_SECONDS,
     FIELD(stall_shutdown_s), 0, WEEK_S, NULL, NULL, "0",
     "seconds of stall after which every rank's operations fail with `HVD_ERR_STALLED`; `0` "
     "waits forever", 1, 0, HVDC_READ_INT},
    {"HVD_TIMELINE", "HOROVOD_TIMELINE", HVDC_SETTING_PATH, FIELD(timeline_path), 0, 0, NULL,
     NULL, "unset", "path of a Chrome-trace JSON timeline written by rank 0; `DYNAMIC`: none "
     "until `hvd_start_timeline` (as Horovod)", 0, 0, HVDC_READ_STRICT},
    {"HVD_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", HVDC_SETTING_CHOICE,
     FIELD(timeline_mark_cycles), 0, 0, flag_choices, NULL, "`0`",
     "`1`: mark every negotiation round in the timeline", 0, 0, HVDC_READ_FLAG},
    {"HVD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", HVDC_SETTING_COUNT, FIELD(cache_capacity), 0,
     1 << 20, NULL, NULL, "1024",
     "all-reduces remembered by the response cache: a tensor negotiated before is announced by "
     "its slot number instead of its whole request; a full cache keeps the names it has "
     "(rank 0 warns once: unnamed all-reduces, a new name each call, fill it); `0` turns the "
     "cache off", 1, 0, HVDC_READ_INT},
    {"HVD_AUTOTUNE", "HOROVOD_AUTOTUNE", HVDC_SETTING_CHOICE, FIELD(autotune), 0, 0, flag_choices,
     NULL, "`0`",
     "`1`: during the first steps rank 0 tries fusion thresholds (host tensors), cycle times "
     "and the shared-memory all-reduce's step on the running workload, scores each by bytes "
     "all-reduced per second and keeps the best (see [Autotuning](#autotuning)); "
     "`HVD_FUSION_THRESHOLD`, `HVD_CYCLE_TIME` and `HVD_SHM_STEP` are where it starts", 1, 0, HVDC_READ_FLAG},
    {"HVD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", HVDC_SETTING_PATH, FIELD(autotune_log), 0, 0,
     NULL, NULL, "unset",
     "path of a CSV file where rank 0 logs every autotuning trial and the setting chosen "
     "(with `HVD_AUTOTUNE=1`)", 0, 0, HVDC_READ_STRICT},
    {"HVD_SHM_STEP", NULL, HVDC_SETTING_BYTES, FIELD(shm_step_bytes), HVDC_SHM_STEP_ALIGN,
     HVDC_SHM_SLOT_BYTES, NULL, NULL, "1M",
     "bytes per rank and step of the shared-memory all-reduce (`HVD_CPU_ALLREDUCE`): a multiple "
     "of 4K from 4K to 1M (with more than 15 ranks on a node, at most 16M / (ranks + 1)); "
     "`HVD_AUTOTUNE=1` tries smaller ones from here, and its log's `shm_step` column can be set "
     "here to keep its choice", 1, HVDC_SHM_STEP_ALIGN, HVDC_READ_STRICT},
    {"HVD_CHECK_CONSISTENCY", NULL, HVDC_SETTING_COUNT, FIELD(check_consistency_steps), 0,
     1 << 30, NULL, NULL, "0",
     "every this many updates the DistributedOptimizer (C and Python) compares a hash of every "
     "parameter and its optimizer state across ranks, and rank 0 logs those that differ (see "
     "[Troubleshooting](troubleshooting.md)); `0` turns it off", 1, 0, HVDC_READ_STRICT},
    {"HVD_CALLER_THREAD", NULL, HVDC_SETTING_CHOICE, FIELD(caller_thread), 0, 0, flag_choices,
     NULL, "`1`",
     "`0`: every all-reduce goes through the background thread and a negotiation round; with "
     "`1`, a blocking `hvd_allreduce` (or `hvd.allreduce` in Python) of a host tensor that "
     "every rank of a one-node job submitted next, as before, runs on the caller's own thread "
     "(see [The caller's path](performance.md#the-callers-path))", 1, 0, HVDC_READ_STRICT},
    {"HVD_SIGUSR1_DUMP", NULL, HVDC_SETTING_CHOICE, FIELD(sigusr1_dump), 0, 0, flag_choices,
     NULL, "`1`",
     "`0`: do not install the SIGUSR1 state dump (it is never installed over an "
     "application's own handler)", 0, 0, HVDC_READ_STRICT},
    {"HVD_HOST_TIMEOUT", NULL, HVDC_SETTING_SECONDS, FIELD(host_timeout_s), 0, WEEK_S, NULL,
     NULL, "30",
     "seconds without a heartbeat after which a rank's host counts as lost (down, frozen or cut "
     "off from the network): every rank's operations fail with `HVD_ERR_RANK_FAILED` naming "
     "the host and its ranks; `0` turns the watch off (for a debugger that pauses a rank; the "
     "stall verdict then cannot ask the ranks where they are)",
     0, 0, HVDC_READ_STRICT},
    {"HVD_REPORT", NULL, HVDC_SETTING_SECONDS, FIELD(report_s), 0, WEEK_S, NULL, NULL, "0",
     "every this many seconds rank 0 prints a report: steps and rounds per second, the time "
     "ranks waited for each other, the rank that arrived last most often (its host, its median "
     "lateness), bytes reduced and bus bandwidth, tensors per fused operation; `0`: none",
     0, 0, HVDC_READ_STRICT},
    {"HVD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", HVDC_SETTING_CHOICE,
     FIELD(stall_check_disable), 0, 0, flag_choices, NULL, "`0`",
     "`1`: no stall check at all: neither the report (`HVD_STALL_CHECK_TIME`) nor the stop "
     "(`HVD_STALL_SHUTDOWN_TIME`), as Horovod's", 1, 0, HVDC_READ_FLAG},
    {"HVD_LOG_HIDE_TIME", "HOROVOD_LOG_HIDE_TIME", HVDC_SETTING_CHOICE, FIELD(log_hide_time), 0,
     0, flag_choices, NULL, "`1`",
     "`0`: each log line carries the local time to the microsecond (Horovod's lines do unless "
     "this is set above 0; libhvdc's do not unless it is `0`)", 0, 0, HVDC_READ_FLAG},
    {"HVD_THREAD_AFFINITY", "HOROVOD_THREAD_AFFINITY", HVDC_SETTING_PATH,
     FIELD(thread_affinity), 0, 0, NULL, NULL, "unset",
     "CPUs for the background threads, one per local rank (`0,2` on a node of 2 ranks): local "
     "rank i's runs on the i-th; a list shorter than the node's ranks is ignored with a "
     "warning, as Horovod ignores it", 0, 0, HVDC_READ_STRICT},
};
const size_t hvdc__n_settings = sizeof hvdc__settings / sizeof hvdc__settings[0];

void hvdc__config_default(hvdc_config *config) {
    *config = (hvdc_config){
        .fusion_threshold_bytes = DEFAULT_FUSION_THRESHOLD,
        .gpu_fusion_threshold_bytes = DEFAULT_GPU_FUSION_THRESHOLD,
        .cycle_time_ms = 1.0,
        .cpu_allreduce = HVDC_CPU_ALLREDUCE_AUTO,
        .log_level = HVDC_LOG_WARNING,
        .stall_check_s = 60.0,
        .stall_shutdown_s = 0.0,
        .sigusr1_dump = 1,
        .host_timeout_s = 30.0,
        .cache_capacity = 1024,
        .shm_step_bytes = HVDC_SHM_SLOT_BYTES,
        .log_hide_time = 1,
        .caller_thread = 1,
    };
}

/* Bytes with an optional binary suffix: 1048576, 1024K, 64M, 1G (a trailing B is allowed),
 * from min to max. */
static int parse_bytes(const char *text, double min, double max, size_t *out) {
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
    if (value > (SIZE_MAX >> shift) || (double)(value << shift) > max ||
        (double)(value << shift) < min)
        return 0;
    *out = (size_t)(value << shift);
    return 1;
}

/* A finite number; min is exclusive when open_min. */
static int parse_number(const char *text, double min, double max, int open_min, double *out) {
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(value)) return 0;
    if (value < min || (open_min && value == min) || value > max) return 0;
    *out = value;
    return 1;
}

static int parse_choice(const hvdc_setting *s, const char *text, int *out) {
    for (int i = 0; s->choices[i]; i++) {
        if (strcasecmp(text, s->choices[i]) == 0) {
            *out = s->values ? s->values[i] : i;
            return 1;
        }
    }
    return 0;
}

/* What a setting accepts, for the error message. */
static void describe_expected(const hvdc_setting *s, char *out, size_t len) {
    switch (s->type) {
    case HVDC_SETTING_BYTES:
        if (s->multiple) {
            snprintf(out, len, "a size in bytes, a multiple of %zuK from %.0fK to %.0fK, with an "
                     "optional K or M suffix (e.g. %zu or %zuK)", s->multiple >> 10, s->min / 1024,
                     s->max / 1024, s->multiple * 64, s->multiple * 64 >> 10);
            return;
        }
        snprintf(out, len, "a size in bytes: a whole number with an optional K, M or G suffix, "
                 "at most 1T (e.g. 67108864 or 64M)");
        return;
    case HVDC_SETTING_MS:
        snprintf(out, len, "milliseconds, a number greater than %g and at most %g (e.g. 1 or 0.5)",
                 s->min, s->max);
        return;
    case HVDC_SETTING_SECONDS:
        snprintf(out, len, "seconds, a number from %g to %g", s->min, s->max);
        return;
    case HVDC_SETTING_CHOICE: {
        size_t k = (size_t)snprintf(out, len, "one of");
        for (int i = 0; s->choices[i] && k < len; i++)
            k += (size_t)snprintf(out + k, len - k, "%s '%s'", i ? "," : "", s->choices[i]);
        return;
    }
    case HVDC_SETTING_PATH:
        snprintf(out, len, "a path shorter than %d bytes", HVDC_PATH_MAX);
        return;
    case HVDC_SETTING_COUNT:
        snprintf(out, len, "a whole number from %.0f to %.0f", s->min, s->max);
        return;
    }
}

/* Parses text into s's field of config. @return 1 if it was valid. */
static int parse_setting(const hvdc_setting *s, const char *text, hvdc_config *config) {
    char *field = (char *)config + s->offset;
    switch (s->type) {
    case HVDC_SETTING_BYTES:
        if (!parse_bytes(text, s->min, s->max, (size_t *)(void *)field)) return 0;
        /* refused rather than rounded where the user would not see it */
        return !s->multiple || *(size_t *)(void *)field % s->multiple == 0;
    case HVDC_SETTING_MS: return parse_number(text, s->min, s->max, 1, (double *)(void *)field);
    case HVDC_SETTING_SECONDS: return parse_number(text, s->min, s->max, 0, (double *)(void *)field);
    case HVDC_SETTING_CHOICE: return parse_choice(s, text, (int *)(void *)field);
    case HVDC_SETTING_PATH:
        if (strlen(text) >= HVDC_PATH_MAX) return 0;
        snprintf(field, HVDC_PATH_MAX, "%s", text);
        return 1;
    case HVDC_SETTING_COUNT: {
        errno = 0;
        char *end = NULL;
        if (!isdigit((unsigned char)text[0])) return 0;
        unsigned long long value = strtoull(text, &end, 10);
        if (errno != 0 || *end != '\0' || (double)value < s->min || (double)value > s->max) return 0;
        *(size_t *)(void *)field = (size_t)value;
        return 1;
    }
    }
    return 0;
}

void hvdc__notes_add(hvdc_notes *notes, const char *fmt, ...) {
    if (!notes || notes->n >= HVDC_NOTES_MAX) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes->text[notes->n++], sizeof notes->text[0], fmt, ap);
    va_end(ap);
}

/* The value Horovod's core would take from text (strtol, strtof or its log-level parser, none
 * of which refuses anything), written as libhvdc reads it, kept within s's range. */
static void horovod_text(const hvdc_setting *s, const char *text, char *out, size_t len) {
    switch (s->horovod) {
    case HVDC_READ_FLAG: snprintf(out, len, "%d", strtol(text, NULL, 10) > 0); return;
    case HVDC_READ_INT: {
        double v = (double)strtoll(text, NULL, 10);
        snprintf(out, len, "%.0f", fmin(fmax(v, s->min), s->max));
        return;
    }
    case HVDC_READ_FLOAT: {
        double v = strtod(text, NULL);
        if (!isfinite(v) || v < s->min) v = s->min;
        if (v <= s->min && s->type == HVDC_SETTING_MS) v = 0.001; /* the smallest pause */
        snprintf(out, len, "%.17g", fmin(v, s->max));
        return;
    }
    case HVDC_READ_LOG_LEVEL: snprintf(out, len, "warning"); return;
    case HVDC_READ_STRICT: break;
    }
    snprintf(out, len, "%s", text);
}

/* s's alias held text, which libhvdc's own reading refused: Horovod's reading, said in a note.
 * @return 1 if that reading parsed. */
static int read_as_horovod(const hvdc_setting *s, const char *text, hvdc_config *config,
                           hvdc_notes *notes) {
    if (s->horovod == HVDC_READ_STRICT) return 0;
    char horovod[64], expected[256];
    horovod_text(s, text, horovod, sizeof horovod);
    if (!parse_setting(s, horovod, config)) return 0;
    describe_expected(s, expected, sizeof expected);
    hvdc__notes_add(notes, "%s='%.64s' is not %s; read as Horovod reads it: %s", s->alias, text,
                    expected, horovod);
    return 1;
}

hvd_status hvdc__config_from_env(hvdc_config *config, hvdc_env_lookup lookup, void *ctx,
                                 hvdc_notes *notes) {
    hvdc__config_default(config);
    for (size_t i = 0; i < hvdc__n_settings; i++) {
        const hvdc_setting *s = &hvdc__settings[i];
        const char *name = s->name, *value = lookup(s->name, ctx);
        if (!value && s->alias) value = lookup(name = s->alias, ctx);
        if (!value) continue;
        if (!parse_setting(s, value, config) &&
            !(name == s->alias && read_as_horovod(s, value, config, notes))) {
            char expected[256];
            describe_expected(s, expected, sizeof expected);
            int long_path = s->type == HVDC_SETTING_PATH;
            return hvdc__fail(HVD_ERR_CONFIG, "%s='%.*s%s' is not valid: expected %s (%s: %s)",
                              name, long_path ? 64 : 512, value,
                              long_path && strlen(value) > 64 ? "..." : "", expected, s->name,
                              s->help);
        }
        /* one threshold for both kinds of memory once the user has chosen one */
        if (s->offset == FIELD(fusion_threshold_bytes))
            config->gpu_fusion_threshold_bytes = config->fusion_threshold_bytes;
    }
    if (config->stall_check_disable) /* Horovod's: the inspector is off, report and stop */
        config->stall_check_s = config->stall_shutdown_s = 0;
    return HVD_OK;
}

int hvdc__setting_format(const hvdc_setting *s, const hvdc_config *config, char *out, size_t len) {
    const char *field = (const char *)config + s->offset;
    switch (s->type) {
    case HVDC_SETTING_BYTES:
    case HVDC_SETTING_COUNT: return snprintf(out, len, "%zu", *(const size_t *)(const void *)field);
    case HVDC_SETTING_MS:
    case HVDC_SETTING_SECONDS: return snprintf(out, len, "%.17g", *(const double *)(const void *)field);
    case HVDC_SETTING_CHOICE: {
        int value = *(const int *)(const void *)field;
        for (int i = 0; s->choices[i]; i++)
            if ((s->values ? s->values[i] : i) == value) return snprintf(out, len, "%s", s->choices[i]);
        return snprintf(out, len, "%d", value);
    }
    case HVDC_SETTING_PATH: return snprintf(out, len, "%s", field);
    }
    return snprintf(out, len, "?");
}

int hvdc__setting_doc_row(const hvdc_setting *s, char *out, size_t len) {
    char alias[96] = "";
    if (s->alias) snprintf(alias, sizeof alias, " (`%s`)", s->alias);
    return snprintf(out, len, "| `%s`%s | %s | %s | %s |", s->name, alias, s->default_text,
                    s->must_agree ? "must agree" : "may differ", s->help);
}
