/*
 * local_check.c - agreeing on each rank's argument check (see local_check.h).
 * The caller's thread.
 */
#include "train/local_check.h"

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

hvd_status hvdc__agree_local_check(const char *fn, const char *op_name, hvd_status local) {
    int32_t bad = local != HVD_OK;
    char msg[HVDC_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", hvd_last_error()); /* the all-reduce may overwrite it */
    hvd_status st = hvd_allreduce(op_name, &bad, &bad, 1, HVD_INT32, HVD_MAX);
    if (st != HVD_OK) return st;
    if (local != HVD_OK) return hvdc__fail(local, "%s", msg);
    if (bad) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: another rank passed bad arguments (see "
                               "its message); nothing was done", fn);
    return HVD_OK;
}
