/*
 * kill_loop.h - the loop of the rank-killed tests (tests/mpi/test_kill.c on host memory,
 * tests/gpu/test_gpu_kill.c on a device): every rank runs steps of a checked all-reduce, each
 * under a new name, until one fails; after --after-s seconds the victim (--victim, default the
 * last rank) kills itself with SIGKILL. Each rank prints the lines tests/mpi/check_kill.py and
 * tests/two_hosts.sh parse:
 *   KILLTEST rank=R host=H victim step=N: SIGKILL<how>
 *   KILLTEST rank=R host=H failed step=N status="TEXT" after_s=T message="..."
 *   KILLTEST rank=R host=H exit status="TEXT" after_s=T      (after hvd_shutdown)
 *   KILLTEST rank=R host=H no error after S s (N steps)      (--max-s passed: exit status 1)
 * T: seconds since the rank's last good step; H: $HVDC_NETNS, else the host name.
 * defines: kill_test, kill_loop
 * The test's main thread.
 */
#ifndef HVDC_KILL_LOOP_H
#define HVDC_KILL_LOOP_H

#include "hvdc.h"

typedef struct kill_test {
    /* One step's all-reduce named name, blocking: its status; *wrong = 1 on a wrong result. */
    hvd_status (*step)(void *ctx, const char *name, int *wrong);
    /* The victim, at its last step, before SIGKILL (name: that step's); NULL: nothing. */
    void (*before_kill)(void *ctx, const char *name);
    void *ctx;
    const char *what; /* the all-reduces, for the header line ("1048576-float all-reduces") */
    const char *how;  /* after "SIGKILL" on the victim's line ("" or " inside ...") */
} kill_test;

/* Runs the loop on an initialized libhvdc, shuts it down. argv: --victim R --after-s T
 * --max-s M. Survivors shut down and exit as soon as they fail, as a job's ranks do: a
 * neighbour that has not yet taken the death notice must still name the dead rank, not the
 * survivor that exited. @return the exit status: 0 when this rank reported an error and saw
 * no wrong result, else 1. */
int kill_loop(int argc, char **argv, const kill_test *k);

#endif
