/*
 * executor.c - the executor's lifecycle (execute.h): what it is set up with, and what it frees.
 * Thread that calls hvd_init and hvd_shutdown.
 */
#include <stdatomic.h>
#include <string.h>

#include "base/fault.h"
#include "runtime/execute.h"

/* The CPU all-reduce's packing (fusion.h), chosen with benchmarks/fusion_bench. */
#define PACK_PIECE_BYTES ((size_t)4 << 20)
#define LARGE_TENSOR_BYTES ((size_t)1 << 20)
/* Up to this, the one-step exchange beats the direct reduce-scatter + ring all-gather
 * (allreduce_bench, np 2..4). Which runs never changes a result's bits (allreduce.h). */
#define SMALL_BUFFER_BYTES ((size_t)64 << 10)

void hvdc__executor_init(hvdc_executor *ex, const hvdc_topology *topo, atomic_int *rank_device) {
    memset(ex, 0, sizeof *ex);
    ex->comm = ex->local_comm = ex->cross_comm = MPI_COMM_NULL;
    ex->topo = topo;
    ex->rank_device = rank_device;
}

void hvdc__executor_configure(hvdc_executor *ex, const hvdc_config *config) {
    ex->cpu_allreduce = (hvdc_cpu_allreduce)config->cpu_allreduce;
    ex->die_in_mpi_allreduce = hvdc__fault("die_in_mpi_allreduce"); /* read once, off the hot path */
    /* with autotuning the threshold changes while running, on rank 0 alone: the packing stays
     * the one every rank set here (results never depend on either: allreduce.h) */
    ex->pack_piece_bytes = config->fusion_threshold_bytes < PACK_PIECE_BYTES && !config->autotune
                               ? config->fusion_threshold_bytes : PACK_PIECE_BYTES;
    ex->large_tensor_bytes = LARGE_TENSOR_BYTES;
    ex->small_bytes = SMALL_BUFFER_BYTES;
    ex->gpu_fusion_bytes = config->gpu_fusion_threshold_bytes;
}

static void comm_free(MPI_Comm *comm) {
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

void hvdc__executor_free(hvdc_executor *ex) {
    comm_free(&ex->local_comm);
    comm_free(&ex->cross_comm);
    hvdc__adasum_nodes_free(ex->adasum_nodes);
    comm_free(&ex->comm);
    hvdc__timeline_close(ex->timeline);
    hvdc__gpu_destroy(ex->gpu);
    hvdc__watchdog_stop(ex->watchdog); /* before the liveness it uses */
    hvdc__liveness_destroy(ex->liveness);
    hvdc__shm_destroy(ex->shm);
    hvdc__buffer_free(&ex->fusion);
    hvdc__buffer_free(&ex->scratch);
    hvdc__pack_plan_free(&ex->plan);
    hvdc__buffer_free(&ex->tensor_list);
}
