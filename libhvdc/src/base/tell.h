/*
 * tell.h - telling every other rank something they must hear wherever they wait (a death, a
 * stop, rank 0's abort): eager sends that are never waited for, because the receivers may be
 * blocked anywhere and the sender is about to stop. Their bytes must outlive the sender's
 * runtime, so each message is copied into a ring of process-lifetime buffers, each reused only
 * after TELL_KEPT later messages.
 * defines: hvdc__tell_others
 * Any thread (each call takes its own buffer).
 */
#ifndef HVDC_TELL_H
#define HVDC_TELL_H

#include <mpi.h>
#include <stddef.h>

/* Sends len bytes to every rank of comm but this one, with tag; best effort (a failed send or
 * copy is skipped: the job is stopping anyway). */
void hvdc__tell_others(MPI_Comm comm, int tag, const void *bytes, size_t len);

#endif
