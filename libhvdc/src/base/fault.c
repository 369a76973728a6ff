/*
 * fault.c - the test-only failure switches of fault.h. The variable is read on every call: the
 * switched sites are error paths taken at most a few times per run, never hot loops.
 * Any thread.
 */
#include "base/fault.h"

#include <stdlib.h>
#include <string.h>

int hvdc__fault(const char *site) {
    const char *list = getenv("HVDC_TEST_FAULTS");
    if (!list || !*list) return 0;
    size_t n = strlen(site);
    for (const char *p = list; (p = strstr(p, site)) != NULL; p += n) {
        int starts = p == list || p[-1] == ',';
        int ends = p[n] == '\0' || p[n] == ',';
        if (starts && ends) return 1;
    }
    return 0;
}

int hvdc__fault_device_count(int real) {
    const char *v = getenv("HVDC_TEST_GPU_COUNT");
    if (!v || !*v) return real;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return *end == '\0' && n >= 0 && n <= 64 ? (int)n : real;
}

int hvdc__fault_node_size(void) {
    const char *v = getenv("HVDC_TEST_NODE_SIZE");
    if (!v || !*v) return 0;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return *end == '\0' && n >= 1 && n <= 1024 ? (int)n : 0;
}
