/*
 * checkpoint.h - what checkpoint.c shares with elastic.c, which embeds a checkpoint of the
 * optimizer in every elastic commit.
 * defines: hvdc__ckpt_describe
 * The caller's thread.
 */
#ifndef HVDC_CHECKPOINT_H
#define HVDC_CHECKPOINT_H

#include "hvdc.h"
#include "train/ckpt_format.h"

/* Describes opt (and sampler, which may be NULL) in c for hvdc__ckpt_encode/_decode;
 * tensors (opt->n entries) is the caller's and c points into it and into opt. */
void hvdc__ckpt_describe(hvdc__ckpt *c, hvdc__ckpt_tensor *tensors, const hvd_optimizer *opt,
                         const hvd_sampler *sampler);

#endif
