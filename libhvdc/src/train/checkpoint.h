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
#include "train/opt_host_view.h"

/* Describes opt (and sampler, which may be NULL) in c for hvdc__ckpt_encode/_decode, its
 * values and state as view holds them in host memory (opt_host_view.h); tensors (opt->n
 * entries) is the caller's and c points into it, into opt and into view. */
void hvdc__ckpt_describe(hvdc__ckpt *c, hvdc__ckpt_tensor *tensors, const hvd_optimizer *opt,
                         const hvdc__opt_host_view *view, const hvd_sampler *sampler);

#endif
