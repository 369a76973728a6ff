/*
 * nodes.h - splitting a communicator by node, the one way libhvdc does it: ranks that share
 * memory (MPI_COMM_TYPE_SHARED) form a node; ranks with the same local rank, one per node,
 * form a cross-node group. Topology, the hierarchical all-reduce and the liveness watch all use
 * these, so they always agree on who is where. Both keep the order of ranks in comm and return
 * errors instead of aborting (MPI_ERRORS_RETURN on the new communicator).
 * defines: hvdc__split_node, hvdc__split_cross
 * Collective over comm; the thread that calls hvd_init.
 */
#ifndef HVDC_NODES_H
#define HVDC_NODES_H

#include <mpi.h>

#include "hvdc.h"

/* *node = the ranks of comm on this node. @return HVD_OK or HVD_ERR_MPI. */
hvd_status hvdc__split_node(MPI_Comm comm, MPI_Comm *node);

/* *cross = the ranks of comm whose local rank is local_rank. @return HVD_OK or HVD_ERR_MPI. */
hvd_status hvdc__split_cross(MPI_Comm comm, int local_rank, MPI_Comm *cross);

#endif
