/*
 * fusion_steps.h - one model's gradient buffers for fusion_bench and the steps it times over
 * them: every tensor's all-reduce through libhvdc, or through the baseline.
 * defines: fusion_model, fusion_model_make, fusion_model_free, fusion_model_check,
 *          fusion_step_hvd, fusion_step_mpi, fusion_min_fused
 *
 * Inputs: x_r[t][i] = 1 + (i + 7t + 3r + parity) mod 1009, exact in float for any order.
 * A step starts with an MPI_Barrier and returns this rank's time for all of the model's
 * tensors, submitted in backward order (the reverse of the parameter order, as backpropagation
 * produces gradients).
 * Main thread (libhvdc's background thread does the hvd work).
 */
#ifndef HVDC_FUSION_STEPS_H
#define HVDC_FUSION_STEPS_H

#include <stddef.h>

#include "hvdc.h"
#include "tensor_sets.h"

typedef struct fusion_model {
    tensor_set set;
    size_t *offsets; /* (n) element offset of each tensor in the buffers */
    float *send[2];  /* parity 0 and 1 inputs */
    float *recv;
} fusion_model;

/* Builds the set called model and its buffers with this rank's inputs.
 * @return 0, or -1 for an unknown model or no memory (*m then holds what fusion_model_free
 * releases). */
int fusion_model_make(fusion_model *m, const char *model, int rank);
/* NULL-safe parts; leaves *m zeroed. */
void fusion_model_free(fusion_model *m);

/* Mismatches among three elements per tensor of recv (first, last, and one that moves with
 * step) against the exact sum over size ranks of the parity's inputs. */
long fusion_model_check(const fusion_model *m, int size, int parity, int step);

/* hvd_allreduce_async of every tensor (names from the set), then hvd_wait on each. */
double fusion_step_hvd(const fusion_model *m, int parity, hvd_handle *handles);
/* One blocking MPI_Allreduce per tensor. */
double fusion_step_mpi(const fusion_model *m, int parity);

/* The coordinator's fusion rule (first fit in ready order, negotiate.c) replayed with every
 * tensor ready in one round: the fused all-reduces the threshold (bytes) allows, a lower bound
 * on the number run. -1 without memory. */
long fusion_min_fused(const tensor_set *s, long threshold);

#endif
