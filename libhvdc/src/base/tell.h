/*
 * tell.h - telling every other rank something they must hear wherever they wait (a death, a
 * stop, rank 0's abort): eager sends that are never waited for, because the receivers may be
 * blocked anywhere and the sender is about to stop. Their bytes must outlive the sender's
 * runtime, so each message is copied into a ring of process-lifetime buffers, each reused only
 * after TELL_KEPT later messages. The buffers are static: the sender is often stopping because
 * memory ran out, and telling the others must not need any.
 * defines: HVDC_TELL_MAX, hvdc__tell_others
 * Any thread (each call takes its own buffer).
 */
#ifndef HVDC_TELL_H
#define HVDC_TELL_H

#include <mpi.h>
#include <stddef.h>

/* The longest message: a stop notice, or rank 0's abort answer (its reason is at most
 * HVDC_ERROR_MAX bytes). */
#define HVDC_TELL_MAX 2048

/* Sends len bytes to every rank of comm but this one, with tag; best effort (a send MPI
 * refuses is skipped: the job is stopping anyway). @return 0, or -1 if len > HVDC_TELL_MAX
 * (nothing sent). */
int hvdc__tell_others(MPI_Comm comm, int tag, const void *bytes, size_t len);

#endif
