/*
 * node_segment.h - a small POSIX shared-memory segment that every rank of one node maps: local
 * rank 0 creates it, the others open it by name, and the name is removed at once, so nothing
 * is left in /dev/shm even after a crash. POSIX shm rather than MPI_Win_allocate_shared:
 * unmapping needs no collective, so a runtime whose peer died can still free it.
 *
 * defines: hvdc__node_segment_map, hvdc__node_segment_unmap
 * The thread that calls hvd_init.
 */
#ifndef HVDC_NODE_SEGMENT_H
#define HVDC_NODE_SEGMENT_H

#include <mpi.h>
#include <stddef.h>

#include "hvdc.h"

/* Collective over local (the ranks of one node): maps the node's zero-filled segment of bytes
 * at *base. what names it in messages. A failure is returned on the rank that met it only
 * (*base NULL): the caller agrees on the outcome. */
hvd_status hvdc__node_segment_map(MPI_Comm local, size_t bytes, const char *what, void **base);

/* Not collective (safe after a peer died). NULL-safe. */
void hvdc__node_segment_unmap(void *base, size_t bytes);

#endif
