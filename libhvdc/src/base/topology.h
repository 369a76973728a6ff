/*
 * topology.h - who is where: rank and size in libhvdc's communicator, local rank and size
 * among the processes that share a node (base/nodes.h), cross rank and size among those with
 * the same local rank (one per node when every node runs the same number of ranks). Detected
 * once by hvd_init and stored once, in the runtime; the executor and the GPU backend read it
 * through a pointer.
 * defines: hvdc_topology, hvdc__topology_detect
 * Thread that calls hvd_init (detect); read-only afterwards, any thread.
 */
#ifndef HVDC_TOPOLOGY_H
#define HVDC_TOPOLOGY_H

#include <mpi.h>

#include "hvdc.h"

typedef struct hvdc_topology {
    int rank, size;             /* in the communicator libhvdc was started on */
    int local_rank, local_size; /* among processes sharing this node's memory */
    int cross_rank, cross_size; /* among processes with the same local rank (one per node) */
} hvdc_topology;

/* Fills topo from comm. Collective over comm. */
hvd_status hvdc__topology_detect(MPI_Comm comm, hvdc_topology *topo);

#endif
