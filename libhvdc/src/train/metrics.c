/*
 * metrics.c - hvd_metrics_reduce: a set of metrics (loss, accuracy, ...) averaged or summed
 * across ranks in one all-reduce, so rank 0 can report global figures.
 *
 *   every rank sends  [x_0 .. x_{c-1} | w, weighted, averaged, bad]   and all are summed:
 *     HVD_SUM:             x = v, w = 0               -> values = sum(x)
 *     HVD_AVERAGE:         x = w*v, w = weight or 1   -> values = sum(x) / sum(w)
 *
 * The four trailing counts make every rank see the same verdict: if some ranks pass a weight
 * and others do not, some ask for HVD_SUM and others HVD_AVERAGE, or any rank passes an invalid
 * weight (NaN, infinite, with HVD_SUM), every rank fails with the same message instead of one
 * rank returning early and leaving the others in the all-reduce.
 *
 * Only public collectives; the caller's thread.
 */
#include <math.h>
#include <stdlib.h>

#include "base/status.h"
#include "hvdc.h"

enum { TRAILER = 4 }; /* w, weighted, averaged, bad */

hvd_status hvd_metrics_reduce(const char *name, double *values, size_t count,
                              hvd_reduce_op op, double weight) {
    const char *fn = "hvd_metrics_reduce";
    int size = 0;
    if (name == NULL || values == NULL || count == 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: needs a name, values and count > 0", fn);
    if (op != HVD_SUM && op != HVD_AVERAGE)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': op must be HVD_SUM or HVD_AVERAGE", fn, name);
    hvd_status st = hvd_size(&size);
    if (st != HVD_OK) return st;
    double *buf = malloc((count + TRAILER) * sizeof *buf);
    if (buf == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory", fn, name);
    int weighted = !(weight < 0.0) || isnan(weight); /* NaN is a weight, and an invalid one */
    int bad = isnan(weight) || isinf(weight) || (weighted && op == HVD_SUM);
    double w = bad ? 0.0 : op == HVD_SUM ? 0.0 : weighted ? weight : 1.0;
    for (size_t i = 0; i < count; i++) buf[i] = bad ? 0.0 : op == HVD_SUM ? values[i] : w * values[i];
    buf[count] = w;
    buf[count + 1] = weighted;
    buf[count + 2] = op == HVD_AVERAGE;
    buf[count + 3] = bad;
    st = hvd_allreduce(name, buf, buf, count + TRAILER, HVD_FLOAT64, HVD_SUM);
    if (st != HVD_OK) goto done;
    double n_weighted = buf[count + 1], n_averaged = buf[count + 2], n_bad = buf[count + 3];
    if (n_bad > 0) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': %.0f rank(s) passed an invalid weight "
                        "(this rank: %g with %s); a weight must be finite and needs HVD_AVERAGE; "
                        "pass a negative weight for an unweighted mean or sum", fn, name, n_bad,
                        weight, op == HVD_SUM ? "HVD_SUM" : "HVD_AVERAGE");
    } else if (n_averaged > 0 && n_averaged < size) {
        st = hvdc__fail(HVD_ERR_MISMATCH, "%s '%s': %.0f of %d ranks asked for HVD_AVERAGE and "
                        "the others for HVD_SUM; every rank must pass the same op", fn, name,
                        n_averaged, size);
    } else if (n_weighted > 0 && n_weighted < size) {
        st = hvdc__fail(HVD_ERR_MISMATCH, "%s '%s': %.0f of %d ranks passed a weight (>= 0) and "
                        "the others none (a negative weight); weight on every rank or on none",
                        fn, name, n_weighted, size);
    } else {
        for (size_t i = 0; i < count; i++)
            values[i] = op == HVD_SUM ? buf[i] : buf[count] > 0.0 ? buf[i] / buf[count] : 0.0;
    }
done:
    free(buf);
    return st;
}
