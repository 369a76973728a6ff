/*
 * opt_check.c - the optimizer's replica check (HVD_CHECK_CONSISTENCY=N): after every N-th
 * update, hvd_check_consistency over every parameter and each of its state arrays, named as
 * torch names them ("fc.w", "fc.w.momentum_buffer", "fc.w.exp_avg", "fc.w.exp_avg_sq"), seen
 * through the host view (device parameters are copied to the host for it). Rank 0 logs what
 * differs; a difference does not fail the step: the run goes on, and the log says what to do.
 * The optimizer's caller thread; collective (every rank steps alike).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "train/opt_host_view.h"
#include "train/optimizer.h"

#define FN "hvd_optimizer_step"

/* torch.optim's names for the state arrays (update_rules.h's slots, in order). */
static const char *slot_name(hvd_optimizer_kind kind, int slot) {
    if (kind == HVD_OPT_SGD) return "momentum_buffer";
    if (kind == HVD_OPT_ADAM || kind == HVD_OPT_ADAMW) return slot == 0 ? "exp_avg" : "exp_avg_sq";
    return "state";
}

/* The buffers to compare: each parameter, then its state arrays; names in one allocation. */
static hvd_status list_buffers(const hvd_optimizer *opt, const hvdc__opt_host_view *view,
                               hvd_named_buffer *b, char **names) {
    size_t nbytes = 1;
    for (int i = 0; i < opt->n; i++)
        for (int s = 0; s < opt->slots; s++)
            nbytes += strlen(opt->params[i].name) + strlen(slot_name(opt->cfg.kind, s)) + 2;
    char *at = *names = malloc(nbytes);
    if (at == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
    for (int i = 0, k = 0; i < opt->n; i++) {
        const hvdc__opt_param *q = &opt->params[i];
        b[k++] = (hvd_named_buffer){q->name, view->data[i],
                                    q->p.count * hvd_dtype_size(q->p.dtype)};
        for (int s = 0; s < opt->slots; s++) {
            int len = sprintf(at, "%s.%s", q->name, slot_name(opt->cfg.kind, s));
            b[k++] = (hvd_named_buffer){at, view->state[i] + (size_t)s * q->p.count,
                                        q->p.count * sizeof(double)};
            at += len + 1;
        }
    }
    return HVD_OK;
}

hvd_status hvdc__opt_check_replicas(hvd_optimizer *opt) {
    hvdc__opt_host_view view = {0};
    int n = opt->n * (opt->slots + 1), differ = 0, rank = 0;
    char *names = NULL;
    hvd_named_buffer *b = calloc((size_t)n, sizeof *b);
    hvd_status st = b ? HVD_OK : hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
    if (st == HVD_OK) st = hvdc__opt_view_open(FN, opt, 1, &view);
    if (st == HVD_OK) st = list_buffers(opt, &view, b, &names);
    if (st == HVD_OK) {
        st = hvd_check_consistency(b, n, 1, NULL, &differ);
    } else { /* the others must not wait for this rank: a refused check tells them */
        char msg[HVDC_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", hvd_last_error());
        hvd_check_consistency(NULL, -1, 0, NULL, &differ);
        st = hvdc__fail(st, "%s", msg);
    }
    if (st == HVD_OK && differ > 0 && hvd_rank(&rank) == HVD_OK && rank == 0)
        hvdc__log(HVDC_LOG_ERROR, FN ": replica check after update %llu (HVD_CHECK_CONSISTENCY="
                  "%d): %d of %d parameters and state arrays differ across ranks (named above). "
                  "The replicas have diverged: something wrote a parameter on some ranks only, "
                  "or loaded state on one rank (use hvd_checkpoint_load or "
                  "hvd_broadcast_optimizer_state, which reach every rank)",
                  (unsigned long long)opt->steps, opt->check_every, differ, n);
    hvdc__opt_view_close(opt, &view);
    free(names);
    free(b);
    return st;
}
