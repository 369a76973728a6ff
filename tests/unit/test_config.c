/* Unit test: environment parsing, aliases, precedence and the messages for bad values. */
#include <stddef.h>
#include <string.h>

#include "check.h"
#include "runtime/config.h"

typedef struct env { const char *const *pairs; } env; /* name, value, name, value, ..., NULL */

static const char *lookup(const char *name, void *ctx) {
    const env *e = ctx;
    for (const char *const *p = e->pairs; *p; p += 2)
        if (strcmp(p[0], name) == 0) return p[1];
    return NULL;
}

static hvd_status parse(hvdc_config *c, const char *const *pairs) {
    env e = {pairs};
    return hvdc__config_from_env(c, lookup, &e);
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
        {"HVD_LOG_LEVEL", "loud"},          {"HOROVOD_CYCLE_TIME", "-1"},
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
    return check_verdict("configuration");
}
