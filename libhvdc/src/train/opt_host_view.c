/*
 * opt_host_view.c - an optimizer's values and state as host memory (see opt_host_view.h).
 * The optimizer's caller thread.
 */
#include "train/opt_host_view.h"

#include <stdlib.h>

#include "base/device_abort.h"
#include "base/status.h"
#include "train/optim_gpu.h"
#include "train/optimizer.h"

static size_t data_bytes(const hvdc__opt_param *q) {
    return q->p.count * hvd_dtype_size(q->p.dtype);
}

static size_t state_bytes(const hvd_optimizer *opt, const hvdc__opt_param *q) {
    return q->p.count * (size_t)opt->slots * sizeof(double);
}

/* Device parameter q's values and state between the device and data/state (to_host: from
 * the device), on cfg.stream, waited for. */
static hvd_status copy_param(const hvd_optimizer *opt, const hvdc__opt_param *q, void *data,
                             double *state, int to_host) {
    hvd_status st = hvdc__gpu_optim_copy(q->p.device, opt->cfg.stream, data, q->p.data,
                                         data_bytes(q), to_host);
    if (st == HVD_OK && opt->slots > 0)
        st = hvdc__gpu_optim_copy(q->p.device, opt->cfg.stream, state, q->state,
                                  state_bytes(opt, q), to_host);
    return st;
}

hvd_status hvdc__opt_view_open(const char *fn, const hvd_optimizer *opt, int fetch,
                               hvdc__opt_host_view *view) {
    hvd_status st = HVD_OK;
    int fetched = 0;
    *view = (hvdc__opt_host_view){.n = opt->n};
    view->data = calloc((size_t)opt->n, sizeof *view->data);
    view->state = calloc((size_t)opt->n, sizeof *view->state);
    if (view->data == NULL || view->state == NULL) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
        goto fail;
    }
    for (int i = 0; i < opt->n; i++) {
        const hvdc__opt_param *q = &opt->params[i];
        if (q->p.device < 0) { /* the optimizer's own memory */
            view->data[i] = q->p.data;
            view->state[i] = q->state;
            continue;
        }
        /* both sizes > 0: creation refused count 0 */
        view->data[i] = malloc(data_bytes(q));
        view->state[i] = opt->slots > 0 ? malloc(state_bytes(opt, q)) : NULL;
        if (view->data[i] == NULL || (opt->slots > 0 && view->state[i] == NULL)) {
            st = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory for a host copy of device "
                            "parameter '%s' (%zu bytes)", fn, q->name,
                            data_bytes(q) + state_bytes(opt, q));
            goto fail;
        }
        if (!fetch) continue;
        /* behind the update queued on cfg.stream, so the copy holds the values after it */
        st = copy_param(opt, q, view->data[i], view->state[i], 1);
        if (st != HVD_OK) {
            st = hvdc__fail(st, "%s: copying device parameter '%s' to the host: %s", fn,
                            q->name, hvd_last_error());
            goto fail;
        }
        fetched = 1;
    }
    /* the copies waited for the updates, which waited for the all-reduces: aborted ones
     * (a rank died in them) end early, and the values copied are then not the step's */
    if (fetched && (st = hvdc__device_results_trusted(fn)) != HVD_OK) goto fail;
    return HVD_OK;
fail:
    hvdc__opt_view_close(opt, view);
    return st;
}

hvd_status hvdc__opt_view_store(const char *fn, const hvd_optimizer *opt,
                                const hvdc__opt_host_view *view) {
    hvd_status st = HVD_OK;
    for (int i = 0; i < opt->n && st == HVD_OK; i++) {
        const hvdc__opt_param *q = &opt->params[i];
        if (q->p.device < 0) continue; /* the view is its memory: already written */
        st = copy_param(opt, q, view->data[i], view->state[i], 0);
        if (st != HVD_OK)
            st = hvdc__fail(st, "%s: copying parameter '%s' to device %d: %s", fn, q->name,
                            q->p.device, hvd_last_error());
    }
    return st;
}

void hvdc__opt_view_close(const hvd_optimizer *opt, hvdc__opt_host_view *view) {
    for (int i = 0; i < view->n; i++) {
        if (opt->params[i].p.device < 0) continue;
        if (view->data) free(view->data[i]);
        if (view->state) free(view->state[i]);
    }
    free(view->data);
    free(view->state);
    *view = (hvdc__opt_host_view){0};
}
