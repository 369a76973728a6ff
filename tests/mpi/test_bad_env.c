/*
 * test_bad_env.c - hvd_init and the environment. meson runs it once per case, with the case's
 * variables set, as a single process and under mpirun.
 *
 * Usage:
 *   test_bad_env fail VAR VALUE   expects hvd_init to return HVD_ERR_CONFIG with a message
 *                                 naming VAR and VALUE, the library to stay uninitialized, and
 *                                 the process to end normally (exit status 0);
 *   test_bad_env ok [VAR VALUE]   expects hvd_init to succeed, an allreduce to work, and
 *                                 hvd_shutdown to succeed.
 *   test_bad_env fail-somewhere VAR   VAR may be set differently per rank (mpirun's MPMD form:
 *                                 -x VAR=a prog : -x VAR=b prog); some rank's start fails
 *                                 because of it: hvd_init must fail on EVERY rank with
 *                                 HVD_ERR_CONFIG naming VAR, and nobody may hang;
 *   test_bad_env disagree VAR     VAR is valid on every rank but differs: every rank fails with
 *                                 HVD_ERR_CONFIG naming VAR and saying it differs;
 *   test_bad_env ok-differ VAR    VAR differs harmlessly: hvd_init and an allreduce work.
 * VAR VALUE are also checked against the environment, so a wrong meson entry cannot pass.
 * Runs on the main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"

static int env_is(const char *var, const char *value) {
    const char *v = getenv(var);
    if (v && strcmp(v, value) == 0) return 1;
    printf("test setup error: expected %s=%s in the environment, found %s\nFAIL\n", var, value,
           v ? v : "(unset)");
    return 0;
}

int main(int argc, char **argv) {
    /* before init the rank is unknown; Open MPI's launcher tells us for the output */
    const char *launcher_rank = getenv("OMPI_COMM_WORLD_RANK");
    int rank = launcher_rank ? atoi(launcher_rank) : 0;
    mt_ctx t;
    mt_init(&t, rank, 1);
    if (argc == 4 && strcmp(argv[1], "fail") == 0) {
        const char *var = argv[2], *value = argv[3];
        if (!env_is(var, value)) return 1;
        mt_begin(&t, "hvd_init with %s=%s -> HVD_ERR_CONFIG naming both", var, value);
        hvd_status s = hvd_init();
        if (MT_EXPECT(&t, s, HVD_ERR_CONFIG)) {
            const char *e = hvd_last_error();
            MT_CHECK(&t, e && strstr(e, var), "message \"%s\" does not name %s", e ? e : "", var);
            MT_CHECK(&t, e && strstr(e, value), "message \"%s\" does not show the value \"%s\"",
                     e ? e : "", value);
            if (rank == 0) printf("#   message: %s\n", e ? e : "(null)");
        }
        if (s == HVD_OK) {
            hvd_shutdown();
        } else {
            int r = 0;
            MT_CHECK(&t, hvd_is_initialized() == 0, "initialized after a failed hvd_init");
            MT_EXPECT(&t, hvd_rank(&r), HVD_ERR_NOT_INITIALIZED);
            MT_EXPECT(&t, hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);
        }
        mt_end(&t);
        return mt_exit_code(&t);
    }
    if (argc == 3 && (strcmp(argv[1], "fail-somewhere") == 0 || strcmp(argv[1], "disagree") == 0)) {
        const char *var = argv[2];
        int disagree = strcmp(argv[1], "disagree") == 0;
        mt_begin(&t, "%s=%s on this rank: hvd_init fails on every rank, naming %s", var,
                 getenv(var) ? getenv(var) : "(unset)", var);
        hvd_status s = hvd_init();
        if (MT_EXPECT(&t, s, HVD_ERR_CONFIG)) {
            const char *e = hvd_last_error();
            MT_CHECK(&t, strstr(e, var) != NULL, "message \"%s\" does not name %s", e, var);
            if (disagree)
                MT_CHECK(&t, strstr(e, "differs across ranks") != NULL,
                         "message \"%s\" does not say the ranks differ", e);
            if (rank == 0) printf("#   message: %s\n", e);
        }
        if (s == HVD_OK) hvd_shutdown();
        MT_CHECK(&t, hvd_is_initialized() == 0, "initialized after a failed hvd_init");
        mt_end(&t);
        return mt_exit_code(&t);
    }
    if (argc == 3 && strcmp(argv[1], "ok-differ") == 0) {
        argc = 2; /* the same checks as "ok" */
    }
    if ((argc == 2 || argc == 4) && (strcmp(argv[1], "ok") == 0 || strcmp(argv[1], "ok-differ") == 0)) {
        if (argc == 4 && !env_is(argv[2], argv[3])) return 1;
        mt_begin(&t, "hvd_init with %s%s%s -> OK", argc == 4 ? argv[2] : "default environment",
                 argc == 4 ? "=" : "", argc == 4 ? argv[3] : "");
        if (MT_EXPECT(&t, hvd_init(), HVD_OK)) {
            int size = 0;
            hvd_rank(&t.rank);
            hvd_size(&size);
            int32_t x[3] = {1, 2, 3};
            if (MT_EXPECT(&t, hvd_allreduce("env.ok", x, x, 3, HVD_INT32, HVD_SUM), HVD_OK))
                MT_CHECK(&t, x[0] == size && x[1] == 2 * size && x[2] == 3 * size,
                         "allreduce gave %d %d %d with %d ranks", x[0], x[1], x[2], size);
            MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
        }
        mt_end(&t);
        return mt_exit_code(&t);
    }
    fprintf(stderr, "usage: test_bad_env fail VAR VALUE | ok [VAR VALUE] | fail-somewhere VAR | "
                    "disagree VAR | ok-differ VAR\n");
    return 2;
}
