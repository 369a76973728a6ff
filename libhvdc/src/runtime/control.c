/*
 * control.c - public calls that change how the running runtime behaves, rather than submit
 * work: hvd_start_timeline / hvd_stop_timeline (the timeline at run time, as HVD_TIMELINE does
 * at hvd_init), the settings the training layer reads (hvd_check_consistency_every), and what
 * the build contains (hvd_gpu_built, hvd_nccl_built).
 * Any user thread, between hvd_init and hvd_shutdown (each call enters the runtime's gate).
 */
#include <stddef.h>

#include "base/status.h"
#include "gpu/gpu.h"
#include "runtime/runtime.h"

static hvd_status start_timeline_entered(const char *path, int mark_cycles) {
    if (!path || !path[0])
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_start_timeline: the path is %s; give the file to write the timeline to", path ? "empty" : "NULL");
    hvdc_timeline *tl = hvdc__runtime->executor.timeline; /* rank 0's, else NULL */
    return tl ? hvdc__timeline_start(tl, path, mark_cycles != 0) : HVD_OK;
}

hvd_status hvd_start_timeline(const char *path, int mark_cycles) {
    hvd_status st = hvdc__enter("hvd_start_timeline");
    if (st != HVD_OK) return st;
    st = start_timeline_entered(path, mark_cycles);
    hvdc__leave();
    return st;
}

hvd_status hvd_stop_timeline(void) {
    hvd_status st = hvdc__enter("hvd_stop_timeline");
    if (st != HVD_OK) return st;
    hvdc__timeline_stop(hvdc__runtime->executor.timeline);
    hvdc__leave();
    return HVD_OK;
}

hvd_status hvd_check_consistency_every(int *steps) {
    hvd_status st = hvdc__enter("hvd_check_consistency_every");
    if (st != HVD_OK) return st;
    if (steps) *steps = (int)hvdc__runtime->config.check_consistency_steps;
    else st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_check_consistency_every: steps is NULL");
    hvdc__leave();
    return st;
}

int hvd_nccl_built(void) {
    return hvdc__gpu_nccl_version_built();
}

int hvd_gpu_built(void) {
#ifdef HVDC_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}
