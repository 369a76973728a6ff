/* Unit test: environment parsing, aliases, precedence and the messages for bad values; Horovod's
 * names read as Horovod reads them, and the notes rank 0 prints about them. */
#include <stddef.h>
#include <string.h>

#include "check.h"
#include "runtime/config.h"
#include "runtime/horovod_env.h"

typedef struct env { const char *const *pairs; } env; /* name, value, name, value, ..., NULL */

static const char *lookup(const char *name, void *ctx) {
    const env *e = ctx;
    for (const char *const *p = e->pairs; *p; p += 2)
        if (strcmp(p[0], name) == 0) return p[1];
    return NULL;
}

static hvd_status parse(hvdc_config *c, const char *const *pairs) {
    env e = {pairs};
    return hvdc__config_from_env(c, lookup, &e, NULL);
}

static hvdc_notes notes;

/* Parses pairs with notes, as hvd_init does: the settings, then the unused variables. */
static hvd_status parse_noting(hvdc_config *c, const char *const *pairs) {
    env e = {pairs};
    notes.n = 0;
    hvd_status st = hvdc__config_from_env(c, lookup, &e, &notes);
    hvdc__horovod_unused_notes(lookup, &e, &notes);
    return st;
}

static int noted(const char *a, const char *b) {
    for (int i = 0; i < notes.n; i++)
        if (strstr(notes.text[i], a) && (!b || strstr(notes.text[i], b))) return 1;
    return 0;
}

/* Every value Horovod 0.28 accepts for its names is accepted, read as Horovod reads it (strtol,
 * strtof, an unknown log level is warning), each with a note; HVD_ names stay strict. */
static void test_horovod_readings(void) {
    hvdc_config c;
    const char *fatal[] = {"HOROVOD_LOG_LEVEL", "FATAL", NULL};
    CHECK_TRUE(parse_noting(&c, fatal) == HVD_OK && c.log_level == HVDC_LOG_FATAL && notes.n == 0,
               "HOROVOD_LOG_LEVEL=FATAL: %s", hvd_last_error());
    const char *loud[] = {"HOROVOD_LOG_LEVEL", "loud", NULL};
    CHECK_TRUE(parse_noting(&c, loud) == HVD_OK && c.log_level == HVDC_LOG_WARNING &&
                   noted("HOROVOD_LOG_LEVEL='loud'", "read as Horovod reads it: warning"),
               "an unknown Horovod log level is warning, said: %s", notes.n ? notes.text[0] : "");
    struct { const char *name, *value; size_t offset; double want; const char *said; } horovod[] = {
        {"HOROVOD_HIERARCHICAL_ALLREDUCE", "2", offsetof(hvdc_config, hierarchical_allreduce), 1, "1"},
        {"HOROVOD_HIERARCHICAL_ALLREDUCE", "true", offsetof(hvdc_config, hierarchical_allreduce), 0, "0"},
        {"HOROVOD_HIERARCHICAL_ALLREDUCE", "-1", offsetof(hvdc_config, hierarchical_allreduce), 0, "0"},
        {"HOROVOD_AUTOTUNE", "yes", offsetof(hvdc_config, autotune), 0, "0"},
        {"HOROVOD_TIMELINE_MARK_CYCLES", "7", offsetof(hvdc_config, timeline_mark_cycles), 1, "1"},
        {"HOROVOD_STALL_CHECK_DISABLE", "3", offsetof(hvdc_config, stall_check_disable), 1, "1"},
        {"HOROVOD_LOG_HIDE_TIME", "0x1", offsetof(hvdc_config, log_hide_time), 0, "0"},
    };
    for (size_t i = 0; i < sizeof horovod / sizeof horovod[0]; i++) {
        const char *pairs[] = {horovod[i].name, horovod[i].value, NULL};
        hvd_status st = parse_noting(&c, pairs);
        int got = *(const int *)(const void *)((const char *)&c + horovod[i].offset);
        char said[64];
        snprintf(said, sizeof said, "read as Horovod reads it: %s", horovod[i].said);
        CHECK_TRUE(st == HVD_OK && got == horovod[i].want && noted(horovod[i].name, said),
                   "%s=%s: %s, got %d, note: %s", horovod[i].name, horovod[i].value,
                   hvd_status_string(st), got, notes.n ? notes.text[0] : "(none)");
        char strict[64];
        snprintf(strict, sizeof strict, "HVD_%s", horovod[i].name + strlen("HOROVOD_"));
        const char *hvd[] = {strict, horovod[i].value, NULL};
        if (strcmp(strict, "HVD_STALL_CHECK_DISABLE") && strcmp(strict, "HVD_LOG_HIDE_TIME") &&
            strcmp(strict, "HVD_HIERARCHICAL_ALLREDUCE") && strcmp(strict, "HVD_AUTOTUNE") &&
            strcmp(strict, "HVD_TIMELINE_MARK_CYCLES"))
            continue;
        CHECK_TRUE(parse(&c, hvd) == HVD_ERR_CONFIG, "%s=%s stays refused", strict, horovod[i].value);
    }
    const char *banana[] = {"HOROVOD_FUSION_THRESHOLD", "banana", NULL};
    CHECK_TRUE(parse_noting(&c, banana) == HVD_OK && c.fusion_threshold_bytes == 0 &&
                   noted("HOROVOD_FUSION_THRESHOLD='banana'", "read as Horovod reads it: 0"),
               "HOROVOD_FUSION_THRESHOLD=banana is Horovod's 0: fusion off");
    const char *cycle[] = {"HOROVOD_CYCLE_TIME", "0", NULL};
    CHECK_TRUE(parse_noting(&c, cycle) == HVD_OK && c.cycle_time_ms == 0.001 && notes.n == 1,
               "HOROVOD_CYCLE_TIME=0: the smallest pause, said (%g)", c.cycle_time_ms);
    const char *negative[] = {"HOROVOD_CYCLE_TIME", "-1", NULL};
    CHECK_TRUE(parse_noting(&c, negative) == HVD_OK && c.cycle_time_ms == 0.001, "cycle -1");
    const char *cache[] = {"HOROVOD_CACHE_CAPACITY", "5000000", NULL};
    CHECK_TRUE(parse_noting(&c, cache) == HVD_OK && c.cache_capacity == 1u << 20 &&
                   noted("HOROVOD_CACHE_CAPACITY", "1048576"), "a cache above 1M slots: 1M");
    const char *stall[] = {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30",
                           "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90",
                           "HOROVOD_STALL_CHECK_DISABLE", "1", NULL};
    CHECK_TRUE(parse_noting(&c, stall) == HVD_OK && c.stall_check_s == 0 &&
                   c.stall_shutdown_s == 0 && notes.n == 0,
               "HOROVOD_STALL_CHECK_DISABLE=1 turns off the report and the stop");
    /* variables libhvdc does not use: one note each, naming it and why; a value that is what
     * libhvdc does anyway says nothing */
    const char *unused[] = {"HOROVOD_NUM_NCCL_STREAMS", "2", "HOROVOD_CONTROLLER", "mpi",
                            "HOROVOD_CPU_OPERATIONS", "gloo", "HOROVOD_GLOO_IFACE", "eth0", NULL};
    CHECK_TRUE(parse_noting(&c, unused) == HVD_OK && notes.n == 3 &&
                   noted("HOROVOD_NUM_NCCL_STREAMS='2' is not used by libhvdc", "one stream per device") &&
                   noted("HOROVOD_CPU_OPERATIONS='gloo'", "over MPI") &&
                   noted("HOROVOD_GLOO_IFACE", "not Gloo") && !noted("HOROVOD_CONTROLLER", NULL),
               "unused variables: %d notes", notes.n);
}

int main(void) {
    hvdc_config c;
    const char *none[] = {NULL};
    CHECK_TRUE(parse(&c, none) == HVD_OK, "defaults parse");
    CHECK_TRUE(c.cpu_allreduce == HVDC_CPU_ALLREDUCE_AUTO && c.cycle_time_ms > 0, "defaults");

    const char *good[] = {"HVD_FUSION_THRESHOLD", "64M", "HVD_CYCLE_TIME", "0.5",
                          "HVD_CPU_ALLREDUCE", "mpi", "HVD_LOG_LEVEL", "debug", NULL};
    CHECK_TRUE(parse(&c, good) == HVD_OK, "good values: %s", hvd_last_error());
    CHECK_TRUE(c.fusion_threshold_bytes == 64u << 20, "64M = %zu", c.fusion_threshold_bytes);
    CHECK_TRUE(c.cycle_time_ms == 0.5 && c.cpu_allreduce == HVDC_CPU_ALLREDUCE_MPI &&
               c.log_level == HVDC_LOG_DEBUG, "parsed values");

    const char *step[] = {"HVD_SHM_STEP", "256K", NULL};
    CHECK_TRUE(parse(&c, step) == HVD_OK && c.shm_step_bytes == 256u << 10, "HVD_SHM_STEP=256K: %zu",
               c.shm_step_bytes);
    const char *odd_step[] = {"HVD_SHM_STEP", "100000", NULL};
    CHECK_TRUE(parse(&c, odd_step) == HVD_ERR_CONFIG && strstr(hvd_last_error(), "multiple of 4K"),
               "a step that is not whole pages is refused, saying why: %s", hvd_last_error());

    const char *alias[] = {"HOROVOD_FUSION_THRESHOLD", "1024", NULL};
    CHECK_TRUE(parse(&c, alias) == HVD_OK && c.fusion_threshold_bytes == 1024, "HOROVOD_ alias");
    const char *both[] = {"HOROVOD_FUSION_THRESHOLD", "banana", "HVD_FUSION_THRESHOLD", "0", NULL};
    CHECK_TRUE(parse(&c, both) == HVD_OK && c.fusion_threshold_bytes == 0, "HVD_ wins over HOROVOD_");

    struct { const char *name, *value; } bad[] = {
        {"HVD_FUSION_THRESHOLD", "banana"}, {"HVD_FUSION_THRESHOLD", "-5"},
        {"HVD_FUSION_THRESHOLD", "12Q"},    {"HVD_FUSION_THRESHOLD", "99999999999999G"},
        {"HVD_CYCLE_TIME", "abc"},          {"HVD_CYCLE_TIME", "0"},
        {"HVD_CYCLE_TIME", "nan"},          {"HVD_CPU_ALLREDUCE", "gloo"},
        {"HVD_LOG_LEVEL", "loud"},          {"HVD_HIERARCHICAL_ALLREDUCE", "2"},
        {"HVD_SHM_STEP", "100000"},         {"HVD_SHM_STEP", "2M"},
        {"HVD_SHM_STEP", "0"},              {"HVD_SHM_STEP", "2K"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *pairs[] = {bad[i].name, bad[i].value, NULL};
        hvd_status st = parse(&c, pairs);
        CHECK_TRUE(st == HVD_ERR_CONFIG, "%s=%s should fail", bad[i].name, bad[i].value);
        CHECK_TRUE(strstr(hvd_last_error(), bad[i].name) && strstr(hvd_last_error(), bad[i].value),
                   "message names variable and value: %s", hvd_last_error());
    }
    /* the table: every setting refuses a value that fits no type, naming itself; every setting
     * formats its default as a value that parses back to the default */
    hvdc_config defaults, round;
    hvdc__config_default(&defaults);
    for (size_t i = 0; i < hvdc__n_settings; i++) {
        const hvdc_setting *s = &hvdc__settings[i];
        if (s->type != HVDC_SETTING_PATH) {
            const char *pairs[] = {s->name, "not-a-value", NULL};
            CHECK_TRUE(parse(&c, pairs) == HVD_ERR_CONFIG && strstr(hvd_last_error(), s->name) &&
                           strstr(hvd_last_error(), "expected"),
                       "%s=not-a-value: %s", s->name, hvd_last_error());
        }
        char text[HVDC_PATH_MAX];
        hvdc__setting_format(s, &defaults, text, sizeof text);
        const char *again[] = {s->name, text, NULL};
        if (s->type == HVDC_SETTING_PATH) continue; /* unset by default: nothing to round-trip */
        CHECK_TRUE(parse(&round, again) == HVD_OK, "%s=%s (its default) parses: %s", s->name,
                   text, hvd_last_error());
        if (s->offset != offsetof(hvdc_config, fusion_threshold_bytes))
            CHECK_TRUE(memcmp(&round, &defaults, sizeof round) == 0,
                       "%s=%s gives the default config", s->name, text);
    }
    const char *bad_flag[] = {"HVD_SIGUSR1_DUMP", "bogus", NULL};
    CHECK_TRUE(parse(&c, bad_flag) == HVD_ERR_CONFIG, "HVD_SIGUSR1_DUMP=bogus refused");
    const char *no_dump[] = {"HVD_SIGUSR1_DUMP", "0", NULL};
    CHECK_TRUE(parse(&c, no_dump) == HVD_OK && c.sigusr1_dump == 0, "HVD_SIGUSR1_DUMP=0");
    const char *warn[] = {"HOROVOD_LOG_LEVEL", "WARN", NULL};
    CHECK_TRUE(parse(&c, warn) == HVD_OK && c.log_level == HVDC_LOG_WARNING, "WARN is warning");
    const char *gpu[] = {"HVD_FUSION_THRESHOLD", "1K", NULL};
    CHECK_TRUE(parse(&c, gpu) == HVD_OK && c.gpu_fusion_threshold_bytes == 1024,
               "HVD_FUSION_THRESHOLD sets the device threshold too");
    test_horovod_readings();
    return check_verdict("configuration");
}
