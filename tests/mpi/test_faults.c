/*
 * test_faults.c - hvd_init's error paths that a healthy machine never takes, driven by the
 * test-only switches of base/fault.h (HVDC_TEST_FAULTS). For each site: hvd_init fails with a
 * message, leaves the library uninitialized and MPI usable (the application initialized MPI, so
 * libhvdc must not finalize it), and a second hvd_init without the fault works. Under the
 * sanitizer stage's ASan build, LeakSanitizer checks at exit that the failed start freed
 * everything it had allocated.
 *
 * Under mpirun the switch is set on one rank only (ONLY_RANK, default every rank): the start
 * must still fail on every rank, none may hang.
 * Usage: test_faults SITE [ONLY_RANK]     (sites: timeline_writer, background_thread)
 * Main thread only.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpitest.h"

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_faults SITE [ONLY_RANK]\n");
        return 2;
    }
    const char *site = argv[1];
    int only_rank = argc == 3 ? atoi(argv[2]) : -1;
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mt_ctx t;
    mt_init(&t, rank, size);

    char timeline[64];
    snprintf(timeline, sizeof timeline, "/tmp/hvdc-faults-%d.json", (int)getpid());
    setenv("HVD_TIMELINE", timeline, 1); /* rank 0 opens it: the writer thread's site */
    if (only_rank < 0 || only_rank == rank) setenv("HVDC_TEST_FAULTS", site, 1);
    mt_begin(&t, "hvd_init with the '%s' fault (on %s) fails cleanly on every rank", site,
             only_rank < 0 ? "every rank" : argc == 3 ? argv[2] : "?");
    hvd_status s = hvd_init();
    MT_CHECK(&t, s != HVD_OK, "hvd_init succeeded although '%s' was switched to fail", site);
    MT_CHECK(&t, strlen(hvd_last_error()) > 0, "no message for the failed hvd_init");
    MT_CHECK(&t, hvd_is_initialized() == 0, "initialized after a failed hvd_init");
    if (rank == 0) printf("#   %s: %s\n", hvd_status_string(s), hvd_last_error());
    if (s == HVD_OK) hvd_shutdown();
    mt_end(&t);

    unsetenv("HVDC_TEST_FAULTS");
    mt_begin(&t, "after it, hvd_init works and so does an allreduce");
    if (MT_EXPECT(&t, hvd_init(), HVD_OK)) {
        int32_t x = rank + 1;
        if (MT_EXPECT(&t, hvd_allreduce("faults.after", &x, &x, 1, HVD_INT32, HVD_SUM), HVD_OK))
            MT_CHECK(&t, x == size * (size + 1) / 2, "allreduce gave %d", x);
        MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
    }
    mt_end(&t);
    unlink(timeline);
    int code = mt_exit_code(&t);
    MPI_Finalize();
    return code;
}
