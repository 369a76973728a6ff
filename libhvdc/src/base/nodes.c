/*
 * nodes.c - the node and cross-node communicators of nodes.h.
 * The thread that calls hvd_init.
 */
#include "base/nodes.h"

#include "base/fault.h"
#include "base/status.h"

static hvd_status returning_errors(MPI_Comm comm) {
    hvd_status st = HVD_OK;
    CHECK_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
fail:
    return st;
}

hvd_status hvdc__split_node(MPI_Comm comm, MPI_Comm *node) {
    hvd_status st = HVD_OK;
    int rank = 0;
    *node = MPI_COMM_NULL;
    CHECK_MPI(MPI_Comm_rank(comm, &rank));
    int pretend = hvdc__fault_node_size(); /* tests: nodes of k consecutive ranks (fault.h) */
    if (pretend > 0)
        CHECK_MPI(MPI_Comm_split(comm, rank / pretend, rank, node));
    else
        CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, node));
    CHECK(returning_errors(*node));
fail:
    return st;
}

hvd_status hvdc__split_cross(MPI_Comm comm, int local_rank, MPI_Comm *cross) {
    hvd_status st = HVD_OK;
    int rank = 0;
    *cross = MPI_COMM_NULL;
    CHECK_MPI(MPI_Comm_rank(comm, &rank));
    CHECK_MPI(MPI_Comm_split(comm, local_rank, rank, cross));
    CHECK(returning_errors(*cross));
fail:
    return st;
}
