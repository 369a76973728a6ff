/*
 * test_stop.c - libhvdc stops on one rank alone, with an error of that rank's own (out of
 * memory, forced by the test-only switches of base/fault.h); every rank must stop, none may
 * hang, and the ranks must agree on what happened:
 *   negotiate_respond on rank 0: rank 0 cannot answer a negotiation round. It answers with an
 *     abort instead, so every rank fails with its status (HVD_ERR_NO_MEMORY) and the very same
 *     message.
 *   negotiator_add on rank 0: rank 0 cannot record the announcements; the same abort, whose
 *     message says it ran out of memory (it used to call every failure a name announced twice).
 *   encode_requests on rank R (rank 0 too): R cannot announce its operations; it tells the others,
 *     which fail with HVD_ERR_RANK_FAILED and a message naming rank R and its reason (one and
 *     the same on each of them), while R fails with its own HVD_ERR_NO_MEMORY.
 *   run_response on rank R: R cannot run the all-reduce every rank was told to run; the others
 *     are inside it, waiting for R's data, when they hear, and fail the same way.
 * Every rank's operation must end within BOUND_S, later operations fail at once with the same
 * status, and hvd_shutdown returns (HVD_OK after an abort; after a notice the stopped rank's
 * error or HVD_ERR_RANK_FAILED, MPI left unfinalized). The test initializes MPI itself, so the
 * ranks still compare their statuses and messages over MPI_COMM_WORLD after libhvdc stopped.
 * Last, libhvdc starts again in the same process (as an elastic reset would) and its all-reduces
 * are exact: nothing the stop left behind reaches the new runtime.
 * Usage: test_stop SITE RANK [ALGO]   (the switch is set on RANK only; ALGO: HVD_CPU_ALLREDUCE
 *                                      on every rank, e.g. ring, whose data messages travel
 *                                      over MPI where shm's do not)
 * Main thread only.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

#define BOUND_S 2.0 /* liveness looks every 50 ms; an abort answer arrives at once */
#define TEXT_MAX 1024

/* Whether every rank but `skip` has the text rank `ref` has, over MPI (libhvdc has stopped);
 * prints the differences. Collective. */
static int agree_with(int ref, int skip, const char *mine, int rank) {
    char theirs[TEXT_MAX];
    snprintf(theirs, sizeof theirs, "%s", mine);
    MPI_Bcast(theirs, TEXT_MAX, MPI_CHAR, ref, MPI_COMM_WORLD);
    int same = rank == skip || strcmp(theirs, mine) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!same) printf("[rank %d] says \"%s\" where rank %d says \"%s\"\n", rank, mine, ref, theirs);
    return all;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: test_stop SITE RANK [ALGO]\n");
        return 2;
    }
    if (argc == 4) setenv("HVD_CPU_ALLREDUCE", argv[3], 1);
    const char *site = argv[1];
    int stopper = atoi(argv[2]), provided = 0, rank = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* rank 0 answers a round it cannot finish with an abort; any other stop sends a notice */
    int aborts = strcmp(site, "negotiate_respond") == 0 || strcmp(site, "negotiator_add") == 0;
    hvd_status own = HVD_ERR_NO_MEMORY, expected = rank == stopper || aborts ? own : HVD_ERR_RANK_FAILED;
    mt_ctx t;
    mt_init(&t, rank, size);
    if (rank == stopper) setenv("HVDC_TEST_FAULTS", site, 1);
    if (hvd_init() != HVD_OK) {
        printf("hvd_init failed: %s\nFAIL\n", hvd_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    mt_begin(&t, "%s on rank %d: every rank's operation fails within %.0f s, as expected", site,
             stopper, BOUND_S);
    float x = (float)rank;
    double start = mt_now();
    hvd_status got = hvd_allreduce("stop.x", &x, &x, 1, HVD_FLOAT32, HVD_SUM);
    double took = mt_now() - start;
    char message[TEXT_MAX - 128]; /* room for the status in front of it, below */
    snprintf(message, sizeof message, "%s", hvd_last_error());
    MT_CHECK(&t, got == expected, "got %s (%s), expected %s", hvd_status_string(got), message,
             hvd_status_string(expected));
    MT_CHECK(&t, took < BOUND_S, "took %.2f s to fail (bound %.0f s)", took, BOUND_S);
    char named[32];
    snprintf(named, sizeof named, "rank %d", stopper);
    if (rank == stopper || aborts)
        MT_CHECK(&t, strstr(message, "out of memory") && strstr(message, site),
                 "the message says what failed: %s", message);
    else
        MT_CHECK(&t, strstr(message, named) && strstr(message, "stopped") && strstr(message, "out of memory"),
                 "the message names %s and why it stopped: %s", named, message);
    if (rank == 0) printf("#   rank 0 after %.3f s: %s: %s\n", took, hvd_status_string(got), message);
    mt_end(&t);

    mt_begin(&t, "the ranks agree: %s", aborts ? "one status and message everywhere"
                                               : "the others' status and message are one");
    char mine[TEXT_MAX];
    snprintf(mine, sizeof mine, "%s: %s", hvd_status_string(got), message);
    /* after a notice the stopper's own words differ from the others': compare those */
    int agree = aborts ? agree_with(0, -1, mine, rank) : agree_with(stopper == 0 ? 1 : 0, stopper, mine, rank);
    MT_CHECK(&t, agree, "the ranks' statuses or messages differ (above)");
    mt_end(&t);

    mt_begin(&t, "after the stop, a later operation fails at once with the same status");
    start = mt_now();
    hvd_status later = hvd_allreduce("stop.later", &x, &x, 1, HVD_FLOAT32, HVD_SUM);
    MT_CHECK(&t, later == expected, "got %s: %s", hvd_status_string(later), hvd_last_error());
    MT_CHECK(&t, mt_now() - start < 0.5, "took %.2f s", mt_now() - start);
    mt_end(&t);

    mt_begin(&t, "hvd_shutdown returns, with what stopped libhvdc when MPI cannot be finalized");
    start = mt_now();
    hvd_status down = hvd_shutdown();
    hvd_status want = aborts ? HVD_OK : expected;
    MT_CHECK(&t, down == want, "hvd_shutdown gave %s (%s), expected %s", hvd_status_string(down),
             hvd_last_error(), hvd_status_string(want));
    MT_CHECK(&t, mt_now() - start < BOUND_S, "hvd_shutdown took %.2f s", mt_now() - start);
    MT_CHECK(&t, hvd_is_initialized() == 0, "still initialized after hvd_shutdown");
    mt_end(&t);

    mt_begin(&t, "hvd_init works again in this process, and its all-reduces are exact");
    unsetenv("HVDC_TEST_FAULTS");
    hvd_status again = hvd_init();
    MT_CHECK(&t, again == HVD_OK, "hvd_init gave %s: %s", hvd_status_string(again), hvd_last_error());
    for (int k = 0; again == HVD_OK && k < 20; k++) { /* integers: exact in any order */
        float v[2] = {(float)(rank + k), 1.0f};
        hvd_status s = hvd_allreduce("again.v", v, v, 2, HVD_FLOAT32, HVD_SUM);
        float want = (float)(size * (size - 1) / 2 + size * k);
        MT_CHECK(&t, s == HVD_OK && v[0] == want && v[1] == (float)size,
                 "all-reduce %d: %s, got %g and %g, expected %g and %d", k, hvd_status_string(s),
                 v[0], v[1], want, size);
    }
    if (again == HVD_OK) MT_CHECK(&t, hvd_shutdown() == HVD_OK, "hvd_shutdown: %s", hvd_last_error());
    mt_end(&t);

    int code = mt_exit_code(&t);
    MPI_Finalize(); /* every rank is alive: the application's MPI still works */
    return code;
}
