/*
 * build_info.c - hvd_build_info: what this build of libhvdc contains, as "key: value" lines,
 * for `hvdcrun --check-build` and for programs that want to know before they ask for
 * something. Built once, on the first call (pthread_once); any thread, before hvd_init too
 * (MPI_Get_library_version needs no initialized MPI).
 *
 *   version: 0.1.0
 *   cpu_ring: yes                         the host all-reduces (allreduce.h), flat and two-level
 *   shm_allreduce: yes, ...               the shared-memory all-reduce inside a node
 *   mpi: yes, Open MPI v4.1.4, ...        the MPI libhvdc was built and runs with
 *   cuda: yes, CUDA 13.0 | no: <why>      the GPU backend (device tensors)
 *   nccl: yes, NCCL 2.28.9 | no
 *   autotune: yes, ...                    HVD_AUTOTUNE / horovodrun --autotune
 *   environment: HVD_FUSION_THRESHOLD HOROVOD_FUSION_THRESHOLD ...   every variable read
 *   horovod_not_used: HOROVOD_NUM_NCCL_STREAMS ...   Horovod's that rank 0 names as unused
 *
 * A feature added later changes its own line here (and the --check-build example in docs/running.md).
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/build_config.h"
#include "runtime/config.h"
#include "runtime/horovod_env.h"

#define INFO_MAX 4096

static char info[INFO_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Appends to info; quietly stops at its end (the text is far shorter). */
static void add(size_t *off, const char *fmt, const char *value) {
    if (*off >= sizeof info) return;
    int n = snprintf(info + *off, sizeof info - *off, fmt, value);
    if (n > 0) *off += (size_t)n;
}

static void build(void) {
    size_t off = 0;
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "unknown";
    int len = 0;
    if (MPI_Get_library_version(mpi, &len) == MPI_SUCCESS) {
        mpi[strcspn(mpi, "\n")] = '\0'; // its first line: name and version
        mpi[strcspn(mpi, ",")] = '\0';
    }
    add(&off, "version: %s\n", hvd_version());
    add(&off, "cpu_ring: %s\n", "yes, one-step exchange, direct reduce-scatter + ring all-gather, two-level, over MPI");
    add(&off, "shm_allreduce: %s\n", "yes, POSIX shared memory among a node's ranks "
        "(HVD_CPU_ALLREDUCE=auto or shm)");
    add(&off, "mpi: yes, %s\n", mpi);
#ifdef HVDC_SIM_DEVICE /* the GPU backend built against tests/gpu/sim, not CUDA */
    add(&off, "cuda: %s\n", "simulated device (tests/gpu/sim)");
    add(&off, "nccl: %s\n", "simulated, over MPI (tests/gpu/sim)");
#else
    add(&off, "cuda: %s\n", HVDC_BUILD_CUDA);
    add(&off, "nccl: %s\n", HVDC_BUILD_NCCL);
#endif
    add(&off, "autotune: %s\n", "yes, fusion threshold, cycle time and shared-memory step, scored "
                                 "on the live workload");
    add(&off, "%s", "environment:");
    for (size_t i = 0; i < hvdc__n_settings; i++) {
        add(&off, " %s", hvdc__settings[i].name);
        if (hvdc__settings[i].alias != NULL) add(&off, " %s", hvdc__settings[i].alias);
    }
    add(&off, " %s\n", "HVD_ELASTIC_DIR");
    add(&off, "%s", "horovod_not_used:"); /* named by rank 0 at hvd_init when set */
    for (size_t i = 0; i < hvdc__n_horovod_unused; i++)
        add(&off, " %s", hvdc__horovod_unused[i].name);
    add(&off, "%s", "\n");
}

const char *hvd_build_info(void) {
    pthread_once(&once, build);
    return info;
}
