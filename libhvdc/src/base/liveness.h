/*
 * liveness.h - noticing that a rank died, so nobody waits for it forever.
 *
 * A process killed by SIGKILL sends nothing; over shared memory its peers would wait forever. So
 * every rank watches the processes of its own node (by pid: ended once kill(pid, 0) fails with
 * ESRCH, or, before the launcher reaps it, once /proc shows every thread exiting), and the rank
 * that sees a death tells every rank with a small eager message on the control communicator. Every
 * wait in libhvdc (negotiation, the ring, the collectives) calls hvdc__liveness_check, which looks
 * at most every HVDC_LIVENESS_PERIOD_S seconds, so survivors fail with HVD_ERR_RANK_FAILED about
 * that long after the process died. A rank whose runtime stops on an error of its own (out of
 * memory, say) is alive but will not answer either: it sends the same notice. A neighbour gone
 * after such a notice (a survivor that failed and exited) is not named dead: a notice that has come
 * is taken first, also once the gone process is seen.
 * A rank on another host that stops answering (the host is down, frozen or cut off) is noticed
 * by the host watch (runtime/watch.h), which declares it here for the whole process: every check
 * of every runtime in the process fails from then on.
 * Limits: a node running a single rank has no neighbour to watch its pid (the host watch still
 * notices it once it stops answering). Under mpirun's default policy the launcher itself tears
 * the whole job down first (see docs/troubleshooting.md).
 *
 * Its waits pause between polls as the runtime's poll policy says (base/poll.h).
 *
 * defines: hvdc_liveness, hvdc__liveness_create, _destroy, _check, _tell_stopped, _set_poll,
 *          _poll_policy, _declare, _declared, _forget_declared, hvdc__wait_requests
 * Thread that calls hvd_init (create), then the background thread, and _check also a caller
 * running its own op (runtime/caller_path.h: one check at a time); _declare and _declared:
 * any thread.
 */
#ifndef HVDC_LIVENESS_H
#define HVDC_LIVENESS_H

#include <mpi.h>

#include "base/poll.h"
#include "hvdc.h"

#define HVDC_LIVENESS_PERIOD_S 0.05

typedef struct hvdc_liveness hvdc_liveness;

/* Collective over comm (the runtime's control communicator): learns the pids of the ranks
 * on this node. @return HVD_OK and *out, or HVD_ERR_MPI / HVD_ERR_NO_MEMORY. */
hvd_status hvdc__liveness_create(MPI_Comm comm, hvdc_liveness **out);
void hvdc__liveness_destroy(hvdc_liveness *liveness); /* NULL-safe */

/* Cheap when called often. @return HVD_OK, or HVD_ERR_RANK_FAILED with a message naming the
 * dead rank (seen here, or reported by another rank); once failed, always failed. */
hvd_status hvdc__liveness_check(hvdc_liveness *liveness);

/* The policy every wait that watches liveness pauses by (NULL until set: always yield); it
 * must outlive liveness. Before the background thread starts. */
void hvdc__liveness_set_poll(hvdc_liveness *liveness, const hvdc_poll_policy *policy);
const hvdc_poll_policy *hvdc__liveness_poll_policy(const hvdc_liveness *liveness); /* NULL-safe */

/* Tells every other rank that this rank's runtime stopped on an error of its own (why), sent
 * like a death notice: a rank that stops answering is as good as dead to ranks waiting for
 * it, so their waits fail with HVD_ERR_RANK_FAILED naming it instead of waiting forever. Not
 * for failures every rank meets anyway (a death, rank 0's abort). */
void hvdc__liveness_tell_stopped(hvdc_liveness *liveness, const char *why); /* NULL-safe */

/* Declares, for every liveness watch of this process, that a rank stopped answering (why names
 * it): their checks fail with HVD_ERR_RANK_FAILED and why from now on. The first declaration
 * wins. */
void hvdc__liveness_declare(const char *why);
/* Whether a declaration was made; its text into why (when not NULL, at most len bytes). */
int hvdc__liveness_declared(char *why, size_t len);
/* hvd_init: a new start owes nothing to an earlier one's declaration. */
void hvdc__liveness_forget_declared(void);

/* Completes n requests like MPI_Waitall, but checks liveness while it waits (NULL: plain).
 * On a failure the requests are left incomplete (the job is stopping). */
hvd_status hvdc__wait_requests(int n, MPI_Request *requests, hvdc_liveness *liveness);

#endif
