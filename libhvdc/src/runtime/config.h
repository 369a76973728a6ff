/*
 * config.h - the runtime's settings, read from the environment once by hvd_init.
 *
 * One table (hvdc__settings, config.c) says everything about each setting: its HVD_ name and
 * Horovod alias, how it is parsed, where it goes in hvdc_config, its range, its default as
 * docs/configuration.md shows it, a one-line help and whether every rank must use the same
 * value. The parser, the error messages, the list in hvdc.h's hvd_init comment and
 * docs/configuration.md's table all come from it (tests/unit/test_settings_doc.c checks the last two against it), so a new setting is
 * one line of the table plus its field.
 *
 * Horovod's names are read as Horovod 0.28 reads them when libhvdc's own reading refuses the
 * value: its C++ core parses with strtol/strtof and never refuses one ("true" is 0, "banana"
 * is 0, an unknown log level is warning), so a job script that ran under Horovod starts here
 * too; each such reading is one note (hvdc_notes) that rank 0 prints at hvd_init. HVD_ names
 * stay strict: a typo there fails hvd_init, naming the variable and what is accepted.
 *
 * defines: hvdc_config, hvdc_cpu_allreduce, hvdc_setting, hvdc_setting_type,
 *          hvdc_horovod_reading, hvdc_notes, hvdc__notes_add, hvdc__settings,
 *          hvdc__n_settings, hvdc__config_default, hvdc__config_from_env,
 *          hvdc__setting_format, hvdc__setting_doc_row
 * Runs on the thread that calls hvd_init (the table: any thread, read-only).
 */
#ifndef HVDC_CONFIG_H
#define HVDC_CONFIG_H

#include <stddef.h>

#include "base/log.h"
#include "hvdc.h"

typedef enum hvdc_cpu_allreduce {
    HVDC_CPU_ALLREDUCE_RING = 0, /* our all-reduces over MPI point-to-point (allreduce.h) */
    HVDC_CPU_ALLREDUCE_MPI = 1,  /* MPI_Allreduce (the baseline) */
    HVDC_CPU_ALLREDUCE_SHM = 2,  /* shared memory inside a node (shm.h); across nodes, two-level */
    HVDC_CPU_ALLREDUCE_AUTO = 3, /* shm where the node's ranks can share it, else ring */
} hvdc_cpu_allreduce;

#define HVDC_PATH_MAX 1024

typedef struct hvdc_config {
    size_t fusion_threshold_bytes;     /* HVD_FUSION_THRESHOLD for host tensors; 0 = off */
    size_t gpu_fusion_threshold_bytes; /* the same for device tensors (HVD_FUSION_THRESHOLD if set) */
    double cycle_time_ms;              /* HVD_CYCLE_TIME: pacing of rounds that made no progress */
    int cpu_allreduce;                 /* HVD_CPU_ALLREDUCE: an hvdc_cpu_allreduce */
    int log_level;                     /* HVD_LOG_LEVEL: an hvdc_log_level */
    double stall_check_s;    /* HVD_STALL_CHECK_TIME: report names waiting this long; 0 = off */
    double stall_shutdown_s; /* HVD_STALL_SHUTDOWN_TIME: stop the job after this long; 0 = never */
    char timeline_path[HVDC_PATH_MAX]; /* HVD_TIMELINE: Chrome-trace file written by rank 0 */
    int timeline_mark_cycles;   /* HVD_TIMELINE_MARK_CYCLES: 1 = an instant event per round */
    int hierarchical_allreduce; /* HVD_HIERARCHICAL_ALLREDUCE: 1 = two-level CPU all-reduce */
    int sigusr1_dump;           /* HVD_SIGUSR1_DUMP: 1 = install the SIGUSR1 state dump */
    int caller_thread;          /* HVD_CALLER_THREAD: 1 = a blocking all-reduce every rank of
                                   the node submitted next runs on its caller's thread */
    double host_timeout_s;      /* HVD_HOST_TIMEOUT: a rank silent this long is lost; 0 = never */
    double report_s;            /* HVD_REPORT: rank 0 prints a report this often; 0 = never */
    size_t cache_capacity;      /* HVD_CACHE_CAPACITY: response cache slots; 0 = off */
    int autotune;               /* HVD_AUTOTUNE: 1 = rank 0 tunes threshold, cycle time and
                                   the shared-memory step */
    char autotune_log[HVDC_PATH_MAX]; /* HVD_AUTOTUNE_LOG: CSV of every trial (rank 0) */
    size_t shm_step_bytes;      /* HVD_SHM_STEP: the shared-memory all-reduce's bytes per rank
                                   and step (at most the slot: collectives/shm.h) */
    size_t check_consistency_steps; /* HVD_CHECK_CONSISTENCY: the optimizers compare the
                                   replicas every this many updates; 0 = off */
    int stall_check_disable;    /* HVD_STALL_CHECK_DISABLE: 1 = no stall warning, no stall stop */
    int log_hide_time;          /* HVD_LOG_HIDE_TIME: 0 = log lines carry the time */
    char thread_affinity[HVDC_PATH_MAX]; /* HVD_THREAD_AFFINITY: CPU of each local rank's
                                            background thread, "0,8,16,..." */
} hvdc_config;

typedef enum hvdc_setting_type {
    HVDC_SETTING_BYTES,   /* size_t: a whole number with an optional K, M or G suffix */
    HVDC_SETTING_MS,      /* double: milliseconds, min < value <= max */
    HVDC_SETTING_SECONDS, /* double: seconds, min <= value <= max */
    HVDC_SETTING_CHOICE,  /* int: the index of one of choices[] (case-insensitive) */
    HVDC_SETTING_PATH,    /* char[HVDC_PATH_MAX] */
    HVDC_SETTING_COUNT,   /* size_t: a whole number, min <= value <= max */
} hvdc_setting_type;

/* How Horovod 0.28's core reads its name for the setting, when libhvdc's reading refuses it. */
typedef enum hvdc_horovod_reading {
    HVDC_READ_STRICT = 0,   /* as the HVD_ name (a name Horovod does not have, or a path) */
    HVDC_READ_FLAG,         /* strtol(value) > 0: 1, else 0 */
    HVDC_READ_INT,          /* strtol(value): its leading integer, 0 if none; kept in range */
    HVDC_READ_FLOAT,        /* strtof(value): its leading number, 0 if none; kept in range */
    HVDC_READ_LOG_LEVEL,    /* an unknown level is warning */
} hvdc_horovod_reading;

typedef struct hvdc_setting {
    const char *name;        /* HVD_... */
    const char *alias;       /* Horovod's name, or NULL */
    hvdc_setting_type type;
    size_t offset;           /* of the field in hvdc_config */
    double min, max;         /* BYTES, MS, SECONDS */
    const char *const *choices; /* CHOICE: NULL-terminated; "warn"-style synonyms via values */
    const int *values;       /* CHOICE: the field's value for each choice (NULL: its index) */
    const char *default_text; /* the default as users write it */
    const char *help;        /* one line: what it does */
    int must_agree;          /* 1: it changes what a rank sends, so every rank must agree */
    size_t multiple;         /* BYTES: the value must be a multiple of this (0: any) */
    hvdc_horovod_reading horovod; /* how Horovod reads the alias (when ours refuses it) */
} hvdc_setting;

/* What rank 0 says at hvd_init about the Horovod variables it found: each line names one and
 * how libhvdc read it, or why it does not use it. */
#define HVDC_NOTES_MAX 48
typedef struct hvdc_notes {
    int n;
    char text[HVDC_NOTES_MAX][320];
} hvdc_notes;

/* Appends a printf-formatted note (dropped once HVDC_NOTES_MAX are held). NULL-safe. */
void hvdc__notes_add(hvdc_notes *notes, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

extern const hvdc_setting hvdc__settings[];
extern const size_t hvdc__n_settings;

/* Looks a variable up; getenv in the library, a table in the tests. */
typedef const char *(*hvdc_env_lookup)(const char *name, void *ctx);

void hvdc__config_default(hvdc_config *config);

/* Fills config from the environment (HVD_ names, else their HOROVOD_ aliases, else defaults).
 * A HOROVOD_ value libhvdc refuses is read as Horovod reads it, with a note (notes may be NULL).
 * @return HVD_OK, or HVD_ERR_CONFIG naming the variable, its value and what is accepted. */
hvd_status hvdc__config_from_env(hvdc_config *config, hvdc_env_lookup lookup, void *ctx,
                                 hvdc_notes *notes);

/* Writes setting s's value in config as users write it (e.g. "16777216", "ring", "0.5").
 * @return the length written (snprintf's). */
int hvdc__setting_format(const hvdc_setting *s, const hvdc_config *config, char *out, size_t len);

/* Writes docs/configuration.md's table row for s ("| `NAME` (`ALIAS`) | default | must agree | help |"). */
int hvdc__setting_doc_row(const hvdc_setting *s, char *out, size_t len);

#endif
