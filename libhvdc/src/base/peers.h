/*
 * peers.h - who every rank is: its host name and pid, learned once at start, so a message about
 * a rank can say where it runs ("rank 3 (host 'node2', pid 4711)") and which ranks share its host
 * ("host 'node2' (ranks 2-3)"): a lost host, a slow rank, a stalled one.
 * defines: hvdc_peers, hvdc__peers_create, _destroy, _host, _pid, _say_rank, _say_host
 * Creation: the thread that calls hvd_init (collective); then any thread (read-only).
 */
#ifndef HVDC_PEERS_H
#define HVDC_PEERS_H

#include <mpi.h>
#include <stddef.h>

#include "hvdc.h"

typedef struct hvdc_peers hvdc_peers;

/* Collective over comm: every rank's host name (gethostname) and pid.
 * @return HVD_OK and *out, or HVD_ERR_MPI / HVD_ERR_NO_MEMORY. */
hvd_status hvdc__peers_create(MPI_Comm comm, hvdc_peers **out);
void hvdc__peers_destroy(hvdc_peers *peers); /* NULL-safe */

/* Rank's host name ("?" when peers is NULL or rank is out of range) and pid (0 likewise). */
const char *hvdc__peers_host(const hvdc_peers *peers, int rank);
int hvdc__peers_pid(const hvdc_peers *peers, int rank);

/* Writes "rank R (host 'H', pid P)" into out. @return out. */
char *hvdc__peers_say_rank(const hvdc_peers *peers, int rank, char *out, size_t len);

/* Writes "host 'H' (ranks 2-3,6)": rank's host and every rank on it, as compact ranges.
 * @return out. */
char *hvdc__peers_say_host(const hvdc_peers *peers, int rank, char *out, size_t len);

#endif
