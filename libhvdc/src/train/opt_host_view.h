/*
 * opt_host_view.h - an optimizer's parameter values and state as host memory, for what reads
 * or writes them byte by byte (checkpoint.c, elastic.c): a host parameter's own arrays, and for
 * a device parameter copies that the view owns.
 *
 *   save:  open(fetch = 1)  the device's values copied in, behind the updates queued on
 *                           cfg.stream (optim_gpu.h: the host waits for them)
 *          ... read view.data / view.state ...                  close
 *   load:  open(fetch = 0)  ... write view.data / view.state ...  store  close
 *                           store copies them out to the device, on cfg.stream, and waits
 *
 * Host parameters cost nothing: their view is the optimizer's own memory, so a load writes
 * them directly and store has nothing to copy for them.
 *
 * defines: hvdc__opt_host_view, hvdc__opt_view_open, hvdc__opt_view_store, hvdc__opt_view_close
 * The optimizer's caller thread.
 */
#ifndef HVDC_OPT_HOST_VIEW_H
#define HVDC_OPT_HOST_VIEW_H

#include "hvdc.h"

typedef struct hvdc__opt_host_view {
    int n;          /* the optimizer's parameters */
    void **data;    /* (n) parameter i's count values, in host memory */
    double **state; /* (n) its slots * count state values, in host memory; NULL at 0 slots */
} hvdc__opt_host_view;

/* Makes view for opt. fetch: device parameters' values and state are copied in now (else the
 * copies are left uninitialized, to be written and stored), and refused if the GPU
 * communicators were aborted (base/device_abort.h: the values may hold an aborted all-reduce's
 * partial sums). On failure view holds nothing.
 * @return HVD_OK; HVD_ERR_NO_MEMORY, HVD_ERR_CUDA or HVD_ERR_NCCL, naming fn. */
hvd_status hvdc__opt_view_open(const char *fn, const hvd_optimizer *opt, int fetch,
                               hvdc__opt_host_view *view);

/* Copies the view's device parameters' values and state to the device.
 * @return HVD_OK; HVD_ERR_CUDA naming fn (the device may then hold some of them). */
hvd_status hvdc__opt_view_store(const char *fn, const hvd_optimizer *opt,
                                const hvdc__opt_host_view *view);

/* Frees what the view owns; the optimizer's memory stays. NULL-safe, idempotent. */
void hvdc__opt_view_close(const hvd_optimizer *opt, hvdc__opt_host_view *view);

#endif
