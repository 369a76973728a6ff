/*
 * update.c - the inner optimizers' update rules (SGD with momentum, Nesterov and weight decay;
 * Adam and AdamW), applied by hvd_optimizer_step to each parameter once its gradient has been
 * averaged over the ranks. They follow torch.optim's formulas (see hvdc.h, hvd_optimizer_kind).
 *
 * Arithmetic is in float64 whatever the parameter dtype, with state kept in float64, and the
 * result rounded once to the parameter's dtype. Every rank runs the same operations on the
 * same inputs, so the replicas stay bitwise identical. The per-element formulas are in
 * update_rules.h, shared with the GPU kernels (optim_kernels.cu). Pure functions; any thread.
 */
#include <math.h>

#include "train/optimizer.h"
#include "train/update_rules.h"

int hvdc__opt_state_slots(hvd_optimizer_kind kind, double momentum) {
    switch (kind) {
    case HVD_OPT_SGD:
        return momentum != 0.0 ? 1 : 0;
    case HVD_OPT_ADAM:
    case HVD_OPT_ADAMW:
        return 2;
    case HVD_OPT_CUSTOM:
        return 0;
    }
    return 0;
}

int hvdc__opt_on_device(const hvd_optimizer *opt) {
    for (int i = 0; i < opt->n; i++)
        if (opt->params[i].p.device >= 0) return 1;
    return 0;
}

static inline double load(const void *a, hvd_dtype dtype, size_t i) {
    return dtype == HVD_FLOAT64 ? ((const double *)a)[i] : (double)((const float *)a)[i];
}

static inline void store(void *a, hvd_dtype dtype, size_t i, double x) {
    if (dtype == HVD_FLOAT64) ((double *)a)[i] = x;
    else ((float *)a)[i] = (float)x;
}

void hvdc__sgd_update(void *data, const void *grad, double *buf, size_t count, hvd_dtype dtype,
                      double lr, double momentum, int nesterov, double weight_decay) {
    for (size_t i = 0; i < count; i++) {
        double p = hvdc__sgd_rule(load(data, dtype, i), load(grad, dtype, i),
                                  buf != NULL ? &buf[i] : NULL, lr, momentum, nesterov,
                                  weight_decay);
        store(data, dtype, i, p);
    }
}

void hvdc__adam_update(void *data, const void *grad, double *m, double *v, size_t count,
                       hvd_dtype dtype, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int decoupled, uint64_t t) {
    double c1 = 1.0 - pow(beta1, (double)t), c2 = 1.0 - pow(beta2, (double)t);
    for (size_t i = 0; i < count; i++) {
        double p = hvdc__adam_rule(load(data, dtype, i), load(grad, dtype, i), &m[i], &v[i], lr,
                                   beta1, beta2, eps, weight_decay, decoupled, c1, c2);
        store(data, dtype, i, p);
    }
}
