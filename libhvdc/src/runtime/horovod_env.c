/*
 * horovod_env.c - the variables Horovod 0.28 reads that libhvdc does not use, each with why.
 * A job script written for Horovod may set any of them; hvd_init has rank 0 name each one that
 * is set, once, so nobody believes a setting took effect when it did not. The variables
 * libhvdc honours are its settings' aliases (config.c's table); hvdcrun reads the launcher's
 * own (HOROVOD_START_TIMEOUT, HOROVOD_ELASTIC_TIMEOUT). Where a value is what libhvdc does
 * anyway (HOROVOD_CONTROLLER=mpi), nothing is said.
 * Runs on the thread that calls hvd_init (the table: any thread, read-only).
 */
#include "runtime/horovod_env.h"

#include <stddef.h>
#include <strings.h>

#define GLOO "libhvdc runs on MPI, not Gloo"
#define AUTOTUNE "libhvdc's autotuning is a grid search with its own warm-up and trial length " \
                 "(docs/configuration.md#autotuning), not Bayesian optimization"
#define GLOO_LAUNCH "horovodrun --gloo sets it for its workers; libhvdc takes ranks from MPI"

const hvdc_unused_variable hvdc__horovod_unused[] = {
    {"HOROVOD_HIERARCHICAL_ALLGATHER", NULL,
     "libhvdc's allgather is one exchange among all ranks; it has no two-level form"},
    {"HOROVOD_TORUS_ALLREDUCE", NULL,
     "libhvdc has no torus all-reduce; HVD_HIERARCHICAL_ALLREDUCE=1 is its two-level one"},
    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", NULL, AUTOTUNE},
    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", NULL, AUTOTUNE},
    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", NULL, AUTOTUNE},
    {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", NULL, AUTOTUNE},
    {"HOROVOD_MPI_THREADS_DISABLE", NULL,
     "libhvdc needs MPI_THREAD_MULTIPLE (its background thread calls MPI while the "
     "application may)"},
    {"HOROVOD_NUM_NCCL_STREAMS", NULL, "libhvdc runs NCCL on one stream per device"},
    {"HOROVOD_BATCH_D2D_MEMCOPIES", NULL,
     "libhvdc always packs fused device tensors with its own kernels"},
    {"HOROVOD_DISABLE_GROUP_FUSION", NULL,
     "libhvdc fuses a grouped all-reduce's tensors as it fuses any others"},
    {"HOROVOD_ENABLE_ASYNC_COMPLETION", NULL,
     "libhvdc completes device operations asynchronously always (hvdc.torch makes the "
     "stream wait, not the host)"},
    {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", NULL,
     "libhvdc's Adasum sends each level's half in one exchange"},
    {"HOROVOD_CPU_OPERATIONS", "mpi",
     "libhvdc's host collectives run over MPI (HVD_CPU_ALLREDUCE chooses the all-reduce)"},
    {"HOROVOD_CONTROLLER", "mpi", "libhvdc negotiates over MPI"},
    {"HOROVOD_GLOO_IFACE", NULL, GLOO},
    {"HOROVOD_GLOO_TIMEOUT_SECONDS", NULL, GLOO},
    {"HOROVOD_GLOO_RENDEZVOUS_ADDR", NULL, GLOO},
    {"HOROVOD_GLOO_RENDEZVOUS_PORT", NULL, GLOO},
    {"HOROVOD_GLOO_GLOBAL_PREFIX", NULL, GLOO},
    {"HOROVOD_GLOO_LOCAL_PREFIX", NULL, GLOO},
    {"HOROVOD_GLOO_CROSS_PREFIX", NULL, GLOO},
    {"HOROVOD_HOSTNAME", NULL, GLOO_LAUNCH},
    {"HOROVOD_RANK", NULL, GLOO_LAUNCH},
    {"HOROVOD_SIZE", NULL, GLOO_LAUNCH},
    {"HOROVOD_LOCAL_RANK", NULL, GLOO_LAUNCH},
    {"HOROVOD_LOCAL_SIZE", NULL, GLOO_LAUNCH},
    {"HOROVOD_CROSS_RANK", NULL, GLOO_LAUNCH},
    {"HOROVOD_CROSS_SIZE", NULL, GLOO_LAUNCH},
    {"HOROVOD_ELASTIC", NULL,
     "libhvdc's elastic mode is hvdcrun's restart of the job (HVD_ELASTIC_DIR, "
     "docs/elastic.md)"},
    {"HOROVOD_CCL_CACHE", NULL, "libhvdc does not use oneCCL"},
    {"HOROVOD_CCL_BGT_AFFINITY", NULL, "libhvdc does not use oneCCL"},
    {"HOROVOD_DISABLE_NVTX_RANGES", NULL, "libhvdc marks no NVTX ranges"},
    {"HOROVOD_ENABLE_XLA_OPS", NULL, "XLA ops are TensorFlow's; libhvdc binds PyTorch and C"},
};
const size_t hvdc__n_horovod_unused = sizeof hvdc__horovod_unused / sizeof hvdc__horovod_unused[0];

void hvdc__horovod_unused_notes(hvdc_env_lookup lookup, void *ctx, hvdc_notes *notes) {
    for (size_t i = 0; i < hvdc__n_horovod_unused; i++) {
        const hvdc_unused_variable *u = &hvdc__horovod_unused[i];
        const char *value = lookup(u->name, ctx);
        if (!value || (u->honoured && strcasecmp(value, u->honoured) == 0)) continue;
        hvdc__notes_add(notes, "%s='%.64s' is not used by libhvdc: %s", u->name, value, u->why);
    }
}
