/*
 * optimizer.h - the distributed optimizer's insides, shared by optimizer.c (registration, the
 * gradient hook, the step), update.c (the inner update rules), checkpoint.c (which saves and
 * restores parameters and state) and opt_check.c (the replica check).
 *
 * defines: hvdc__opt_param, struct hvd_optimizer, hvdc__opt_state_slots, hvdc__opt_on_device,
 *          hvdc__opt_broadcast_params, hvdc__opt_check_replicas,
 *          hvdc__sgd_update, hvdc__adam_update
 * Whatever thread the caller uses for this optimizer (one at a time).
 */
#ifndef HVDC_OPTIMIZER_H
#define HVDC_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"

#define HVDC_OPT_PREFIX_MAX 64

typedef struct hvdc__opt_param {
    hvd_param p;       // the caller's registration; p.name points to name below
    char *name;        // owned copy of the parameter name
    char *grad_op;     // "<prefix>.grad.<name>": the all-reduce's name, the same on every rank
    double *state;     // (slots, count) float64: SGD momentum buffer, or Adam's m then v;
                       // device memory on p.device when p.device >= 0
    void *accum;       // (count) in p.dtype: the sum of earlier passes; bpps > 1 only
                       // (device memory for a device parameter)
    uint16_t *wire;    // (count) the gradient as float16/bfloat16; with compression only
    void *event;       // device parameters: cudaEvent_t recorded on cfg.stream before the
                       // gradient's all-reduce (NCCL's stream waits on it); else NULL
    hvd_handle handle; // the gradient's all-reduce in flight, or HVD_HANDLE_NULL
    int ready;         // grad_ready was called for it in the current pass
} hvdc__opt_param;

struct hvd_optimizer {
    hvd_optimizer_config cfg; // cfg.name_prefix points to prefix below
    char prefix[HVDC_OPT_PREFIX_MAX + 1];
    int n;                    // parameters
    hvdc__opt_param *params;  // (n)
    int slots;                // state arrays per parameter: 0, 1 (SGD momentum) or 2 (Adam)
    int pass;                 // backward passes done in the current step, 0 .. bpps-1
    uint64_t steps;           // updates applied
    int check_every;          // HVD_CHECK_CONSISTENCY: compare the replicas after every this
                              // many updates (opt_check.c); 0: never
};

/* Broadcasts root's values of every parameter, all in flight at once, and waits for them (a
 * device parameter's by cfg.stream, on the device). Collective. @return a collective's status. */
hvd_status hvdc__opt_broadcast_params(hvd_optimizer *opt, int root);

/* Compares every parameter and state array across ranks (hvd_check_consistency); rank 0 logs
 * what differs. Collective. @return HVD_OK whether or not they differ; a collective's status,
 * HVD_ERR_NO_MEMORY, or a device copy's error. */
hvd_status hvdc__opt_check_replicas(hvd_optimizer *opt);

/* 1 if any parameter of opt lives on a CUDA device (its state is then device memory). */
int hvdc__opt_on_device(const hvd_optimizer *opt);

/* State arrays per parameter that kind (with this momentum) keeps. */
int hvdc__opt_state_slots(hvd_optimizer_kind kind, double momentum);

/* One SGD step over count elements of data/grad (dtype HVD_FLOAT32 or HVD_FLOAT64), as
 * torch.optim.SGD without dampening; buf (count) is the momentum buffer, NULL if momentum 0. */
void hvdc__sgd_update(void *data, const void *grad, double *buf, size_t count, hvd_dtype dtype,
                      double lr, double momentum, int nesterov, double weight_decay);

/* One Adam step (decoupled = 1: AdamW) at step t >= 1; m and v (count) are the moments. */
void hvdc__adam_update(void *data, const void *grad, double *m, double *v, size_t count,
                       hvd_dtype dtype, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int decoupled, uint64_t t);

#endif
