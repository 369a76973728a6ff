/*
 * fusion_steps.h - one model's gradient buffers for fusion_bench, on the host or on a CUDA
 * device, and the steps it times over them: every tensor's all-reduce through libhvdc, or
 * through a baseline.
 * defines: fusion_model, fusion_model_make, fusion_model_free, fusion_model_clear,
 *          fusion_model_check, fusion_step_hvd, fusion_step_mpi, fusion_step_nccl,
 *          fusion_step_nccl_fused, fusion_min_fused
 *
 * Inputs: x_r[t][i] = 1 + (i + 7t + 3r + parity) mod 1009, exact in float for any order.
 * A step starts with an MPI_Barrier and returns this rank's time (us) for all of the model's
 * tensors; hvd and MPI steps submit them in backward order (the reverse of the parameter
 * order, as backpropagation produces gradients).
 * Main thread (libhvdc's background thread does the hvd work).
 */
#ifndef HVDC_FUSION_STEPS_H
#define HVDC_FUSION_STEPS_H

#include <stddef.h>

#include "hvdc.h"
#include "tensor_sets.h"

typedef struct fusion_model {
    tensor_set set;
    size_t *offsets; /* (n) element offset of each tensor in the buffers (64-byte aligned) */
    size_t padded;   /* floats in each buffer: the tensors, each rounded up to 16 floats */
    int device;      /* the CUDA device holding send and recv, or -1: host memory */
    float *send[2];  /* (padded) parity 0 and 1 inputs; the padding is 0 */
    float *recv;     /* (padded) results */
    float *host;     /* (padded) the results on the host: recv itself, or the copy checked */
} fusion_model;

/* Builds the set called model and its buffers with this rank's inputs, on device (>= 0, the
 * device bench_device_open selected) or on the host (-1).
 * @return 0, or -1 for an unknown model or no memory (*m then holds what fusion_model_free
 * releases). */
int fusion_model_make(fusion_model *m, const char *model, int rank, int device);
/* NULL-safe parts; leaves *m zeroed. */
void fusion_model_free(fusion_model *m);

/* Sets every result to NaN (all bits set), so that an element a step does not write counts
 * as wrong. */
void fusion_model_clear(const fusion_model *m);
/* Mismatches among three elements per tensor of recv (first, last, and one that moves with
 * step) against the exact sum over size ranks of the parity's inputs; device results are
 * copied back first. */
long fusion_model_check(const fusion_model *m, int size, int parity, int step);

/* hvd_allreduce_async of every tensor (names from the set; options.device for device
 * buffers), then hvd_wait on each; in_place (host buffers): each on its recv, the inputs copied
 * there before the step's clock starts, as fusion_step_mpi's. split (NULL: not wanted): when
 * the submissions were done and when the first hvd_wait returned (us from the step's start),
 * which tell the submitting thread's share of the step from the wait for the work. */
double fusion_step_hvd(const fusion_model *m, int parity, int in_place, hvd_handle *handles,
                       double split[2]);
/* Host buffers: one blocking MPI_Allreduce per tensor; in_place: each on its recv with
 * MPI_IN_PLACE, the inputs copied there before the step's clock starts (gradients that are
 * reduced where they lie). */
double fusion_step_mpi(const fusion_model *m, int parity, int in_place);
/* Device buffers: one ncclAllReduce per tensor inside one ncclGroupStart/End, then one stream
 * synchronize (a framework that does not fuse; issued in parameter order, which matters
 * little: the group launches them together at ncclGroupEnd). */
double fusion_step_nccl(const fusion_model *m, int parity);
/* Device buffers: one ncclAllReduce over all padded floats of the model at once, then a
 * stream synchronize: what perfect fusion with no copies would cost, the lower bound. */
double fusion_step_nccl_fused(const fusion_model *m, int parity);

/* The coordinator's fusion rule (first fit in ready order, negotiate.c) replayed with every
 * tensor ready in one round: the fused all-reduces the threshold (bytes) allows, a lower bound
 * on the number run. -1 without memory. */
long fusion_min_fused(const tensor_set *s, long threshold);

#endif
