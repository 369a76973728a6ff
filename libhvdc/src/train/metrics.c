/*
 * metrics.c - hvd_metrics_reduce: a set of metrics (loss, accuracy, ...) averaged or summed
 * across ranks in one all-reduce, so rank 0 can report global figures.
 *
 *   equal weights:  values -> mean or sum over ranks            (one all-reduce of count)
 *   weight w_r:     [w*v_0 .. w*v_{c-1}, w]  --sum-->  divide by sum(w)   (count + 1)
 *
 * Only public collectives; the caller's thread.
 */
#include <math.h>
#include <stdlib.h>

#include "base/status.h"
#include "hvdc.h"

hvd_status hvd_metrics_reduce(const char *name, double *values, size_t count,
                              hvd_reduce_op op, double weight) {
    const char *fn = "hvd_metrics_reduce";
    if (name == NULL || values == NULL || count == 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: needs a name, values and count > 0", fn);
    if (op != HVD_SUM && op != HVD_AVERAGE)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: op must be HVD_SUM or HVD_AVERAGE", fn);
    if (weight < 0.0 || isnan(weight))
        return hvd_allreduce(name, values, values, count, HVD_FLOAT64, op);
    if (op != HVD_AVERAGE || !isfinite(weight))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: a weight (%g) needs HVD_AVERAGE and must be "
                          "finite; pass a negative weight to sum", fn, weight);
    double *buf = malloc((count + 1) * sizeof *buf);
    if (buf == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
    for (size_t i = 0; i < count; i++) buf[i] = weight * values[i];
    buf[count] = weight;
    hvd_status st = hvd_allreduce(name, buf, buf, count + 1, HVD_FLOAT64, HVD_SUM);
    if (st == HVD_OK) {
        for (size_t i = 0; i < count; i++) values[i] = buf[count] > 0.0 ? buf[i] / buf[count] : 0.0;
    }
    free(buf);
    return st;
}
