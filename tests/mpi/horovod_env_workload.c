/*
 * horovod_env_workload.c - starts libhvdc, all-reduces once and prints, per rank, which of its
 * threads may run on a single CPU (HVD_THREAD_AFFINITY / HOROVOD_THREAD_AFFINITY pins the
 * background thread): "AFFINITY rank R pinned THREADS cpus LIST" from /proc/self/task. Run by
 * check_horovod_env.sh, which reads the output and rank 0's notes about Horovod's variables.
 * Main thread only.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvdc.h"

/* Appends the Cpus_allowed_list of each task allowed exactly one CPU ("1,0" style). */
static int single_cpu_tasks(char *out, size_t len) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    out[0] = '\0';
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f)) {
            if (strncmp(line, "Cpus_allowed_list:", 18) != 0) continue;
            char *cpus = line + 18 + strspn(line + 18, " \t");
            cpus[strcspn(cpus, "\n")] = '\0';
            if (strpbrk(cpus, ",-") == NULL) {
                size_t used = strlen(out);
                snprintf(out + used, len - used, "%s%s", n++ ? "," : "", cpus);
            }
        }
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}

int main(void) {
    if (hvd_init() != HVD_OK) {
        printf("hvd_init: %s\nFAIL\n", hvd_last_error());
        return 1;
    }
    int rank = -1, one = 1;
    hvd_rank(&rank);
    hvd_status st = hvd_allreduce("env.one", &one, &one, 1, HVD_INT32, HVD_SUM);
    char cpus[256];
    int pinned = single_cpu_tasks(cpus, sizeof cpus);
    printf("AFFINITY rank %d pinned %d cpus %s\n", rank, pinned, pinned ? cpus : "-");
    fflush(stdout);
    hvd_shutdown();
    return st == HVD_OK ? 0 : 1;
}
