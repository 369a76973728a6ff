/*
 * Unit test: hvd_build_info (libhvdc/src/runtime/build_info.c), which `hvdcrun --check-build`
 * prints and reads: every key is there once, in order, and "environment" names every setting
 * of the settings table with its Horovod alias, so the launcher can tell which variables this
 * library reads. Also callable before hvd_init, and the same text every time.
 */
#include <string.h>

#include "check.h"
#include "hvdc.h"
#include "runtime/config.h"

/* The value of "key: value" in text, copied into out; 0 if the key is not there. */
static int value_of(const char *text, const char *key, char *out, size_t cap) {
    size_t klen = strlen(key);
    for (const char *line = text; *line; ) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > klen + 1 && strncmp(line, key, klen) == 0 && line[klen] == ':') {
            size_t n = len - klen - 2 < cap - 1 ? len - klen - 2 : cap - 1;
            memcpy(out, line + klen + 2, n);
            out[n] = '\0';
            return 1;
        }
        line += len + (end != NULL);
    }
    return 0;
}

int main(void) {
    const char *info = hvd_build_info();
    CHECK_TRUE(info != NULL && info == hvd_build_info(), "the same text every call");
    const char *keys[] = {"version", "cpu_ring", "shm_allreduce", "mpi", "cuda", "nccl",
                          "autotune", "environment"};
    char value[4096];
    const char *last = info;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        CHECK_TRUE(value_of(info, keys[i], value, sizeof value), "no '%s:' line in:\n%s", keys[i],
                   info);
        const char *at = strstr(info, keys[i]);
        CHECK_TRUE(at != NULL && at >= last, "'%s' out of order", keys[i]);
        if (at) last = at;
    }
    value_of(info, "version", value, sizeof value);
    CHECK_TRUE(strcmp(value, hvd_version()) == 0, "version '%s' is not hvd_version()", value);
    value_of(info, "mpi", value, sizeof value);
    CHECK_TRUE(strncmp(value, "yes, ", 5) == 0 && strlen(value) > 8, "mpi: '%s'", value);
    value_of(info, "cuda", value, sizeof value);
    CHECK_TRUE(strncmp(value, "yes, CUDA ", 10) == 0 || strncmp(value, "no: ", 4) == 0,
               "cuda: '%s' (want 'yes, CUDA x' or 'no: why')", value);
    /* nccl_built as Horovod's: the version code built against, 0 without NCCL */
    value_of(info, "nccl", value, sizeof value);
    int major = 0, minor = 0, patch = 0;
    if (hvd_gpu_built()) {
        CHECK_TRUE(hvd_nccl_built() >= 20000, "hvd_nccl_built() = %d in a GPU build",
                   hvd_nccl_built());
        if (sscanf(value, "yes, NCCL %d.%d.%d", &major, &minor, &patch) == 3)
            CHECK_TRUE(hvd_nccl_built() == major * 10000 + minor * 100 + patch,
                       "hvd_nccl_built() = %d, build info says %d.%d.%d", hvd_nccl_built(),
                       major, minor, patch);
    } else {
        CHECK_TRUE(hvd_nccl_built() == 0, "hvd_nccl_built() = %d without the GPU backend",
                   hvd_nccl_built());
    }
    value_of(info, "environment", value, sizeof value);
    for (size_t i = 0; i < hvdc__n_settings; i++) {
        const hvdc_setting *s = &hvdc__settings[i];
        char word[128];
        snprintf(word, sizeof word, " %s ", s->name);
        char padded[4200];
        snprintf(padded, sizeof padded, " %s ", value);
        CHECK_TRUE(strstr(padded, word) != NULL, "environment does not name %s", s->name);
        if (s->alias != NULL) {
            snprintf(word, sizeof word, " %s ", s->alias);
            CHECK_TRUE(strstr(padded, word) != NULL, "environment does not name %s", s->alias);
        }
    }
    return check_verdict("test_build_info");
}
