/*
 * fusion_plot.h - fusion_bench's rows (one per setting) and its --plot: median step time
 * against the fusion threshold as an SVG, one line per model (and cycle time), each with its
 * baseline's mean as a dashed line of the same colour.
 * defines: fusion_result, fusion_threshold_text, fusion_plot_svg
 * Main thread (rank 0 writes the plot).
 */
#ifndef HVDC_FUSION_PLOT_H
#define HVDC_FUSION_PLOT_H

#include <stddef.h>

/* One setting's row of fusion_bench's table. */
typedef struct fusion_result {
    const char *model;
    long threshold; /* -1: library default */
    double cycle;   /* 0: library default */
    double step_ms, mpi_ms; /* mpi_ms: the baseline's (the NCCL group with --device gpu) */
    long min_fused;
    long wrong;          /* hvd steps, and the MPI steps on the host */
    long nccl_wrong[2];  /* --device gpu: the nccl and nccl-fused steps (their own rows) */
    size_t n_tensors, bytes;
    double phases[5];    /* rank 0's mean us per hvd op in each phase (runtime/phases.h) */
    double split_us[2];  /* rank 0's median us from an hvd step's start until its submissions
                            were done, and until its first hvd_wait returned */
    double rounds;       /* negotiation rounds per timed step (each queues its own device work) */
} fusion_result;

/* "default" for a threshold < 0 (HVD_FUSION_THRESHOLD unset), else its bytes ("16 MiB"), into
 * buf[n]; returns buf. */
const char *fusion_threshold_text(long threshold, char *buf, size_t n);

/* Writes path: res[n] in runs of n_thresholds (one run per model and cycle time, in the order
 * of thresholds[], placed evenly along x); gpu names the dashed baseline raw NCCL, else the
 * MPI_Allreduce loop. @return 0, or non-zero if the file could not be written. */
int fusion_plot_svg(const char *path, const fusion_result *res, int n, const long *thresholds,
                    int n_thresholds, int n_cycles, int gpu);

#endif
