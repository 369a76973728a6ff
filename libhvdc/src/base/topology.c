/*
 * topology.c - hvdc__topology_detect (topology.h).
 * Thread that calls hvd_init.
 */
#include "base/topology.h"

#include "base/nodes.h"
#include "base/status.h"

hvd_status hvdc__topology_detect(MPI_Comm comm, hvdc_topology *topo) {
    hvd_status st = HVD_OK;
    MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
    CHECK_MPI(MPI_Comm_rank(comm, &topo->rank));
    CHECK_MPI(MPI_Comm_size(comm, &topo->size));
    CHECK(hvdc__split_node(comm, &local));
    CHECK_MPI(MPI_Comm_rank(local, &topo->local_rank));
    CHECK_MPI(MPI_Comm_size(local, &topo->local_size));
    CHECK(hvdc__split_cross(comm, topo->local_rank, &cross));
    CHECK_MPI(MPI_Comm_rank(cross, &topo->cross_rank));
    CHECK_MPI(MPI_Comm_size(cross, &topo->cross_size));
fail:
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    if (cross != MPI_COMM_NULL) MPI_Comm_free(&cross);
    return st;
}
