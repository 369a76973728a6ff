/*
 * update_rules.h - the per-element arithmetic of the inner optimizers, shared by the host loops
 * (update.c) and the CUDA kernels (optim_kernels.cu), so both compute the same formulas
 * (see hvdc.h, hvd_optimizer_kind). Everything is float64; the caller loads the parameter and
 * gradient, widens them, and rounds the returned parameter once to its dtype.
 *
 * defines: HVDC_HD, hvdc__sgd_rule, hvdc__adam_rule
 *
 * Compiled by nvcc the functions are __host__ __device__. The kernels are built with
 * --fmad=false so that a*b + c is not contracted to an FMA: on the same inputs the device then
 * rounds like the host (x86-64 without -ffp-contract FMA). Pure functions; any thread.
 */
#ifndef HVDC_UPDATE_RULES_H
#define HVDC_UPDATE_RULES_H

#if defined(__CUDACC__)
#define HVDC_HD __host__ __device__
#else
#include <math.h>
#define HVDC_HD
#endif

/* One SGD element (torch.optim.SGD, no dampening): returns the new p; *buf is the momentum
 * buffer, NULL when momentum is 0. */
static inline HVDC_HD double hvdc__sgd_rule(double p, double g, double *buf, double lr,
                                            double momentum, int nesterov,
                                            double weight_decay) {
    g += weight_decay * p;
    if (buf != NULL) {
        *buf = momentum * *buf + g;
        g = nesterov ? g + momentum * *buf : *buf;
    }
    return p - lr * g;
}

/* One Adam element: returns the new p; *m, *v are the moments; c1 = 1 - beta1^t and
 * c2 = 1 - beta2^t are computed once per step by the caller (on the host, so every element
 * and both builds use the same bias corrections); decoupled = 1: AdamW's decay. */
static inline HVDC_HD double hvdc__adam_rule(double p, double g, double *m, double *v,
                                             double lr, double beta1, double beta2, double eps,
                                             double weight_decay, int decoupled, double c1,
                                             double c2) {
    if (decoupled) p *= 1.0 - lr * weight_decay;
    else g += weight_decay * p;
    *m = beta1 * *m + (1.0 - beta1) * g;
    *v = beta2 * *v + (1.0 - beta2) * g * g;
    return p - lr * (*m / c1) / (sqrt(*v / c2) + eps);
}

#endif
