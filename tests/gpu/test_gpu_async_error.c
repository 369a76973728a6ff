/*
 * test_gpu_async_error.c - NCCL reports an asynchronous error on one rank, as a broken
 * connection does, in the middle of a device all-reduce its peers then wait for without end
 * (the simulated device's HVDC_SIM_NCCL_ERROR, tests/gpu/sim/sim.h; every rank is alive). Every
 * rank must fail that all-reduce within a bound, with a message naming the failing rank's
 * NCCL error, and every later call must fail on every rank alike: none may wait forever, and
 * no rank may go on alone.
 *
 * Every rank runs blocking all-reduces of COUNT floats on its device (checked), each a new
 * name, until one fails; the caller sets HVDC_SIM_NCCL_ERROR=R:3, so the third NCCL launch of
 * rank R (--victim R, default 1) fails and two steps pass first. Each waits in hvd_wait; with
 * --poll, polls with hvd_poll (the background thread then completes the ops); with --stream,
 * has the legacy stream wait with hvd_wait_on_stream and synchronizes it (as hvdc.torch does):
 * that wait cannot report the failure (hvdc.h), so the failing step's values go unchecked and
 * the next step must fail instead; with --shutdown, the failing step is submitted and not
 * waited for: hvd_shutdown drains it, and must return the failure instead of waiting; with
 * --round, rank R's background thread notices the error inside a negotiation round: with the
 * failing step in flight, rank R submits a host all-reduce at once and the others only
 * PEERS_LATE_S later, so R waits in that round (for rank 0's answer, or as rank 0 for the
 * others' announcements) when it looks at its device work; the host all-reduce must fail
 * everywhere too.
 * Usage: test_gpu_async_error [--victim R] [--poll | --stream | --shutdown | --round]
 *        (one simulated device per rank)
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test.h"

#define COUNT 4096u
#define MAX_STEPS 20
#define BOUND_S 10.0 /* the failing step, from submission to its answer */
#define HANG_S 60    /* then the process says so and exits */
#define PEERS_LATE_S 0.5 /* --round: the victim's round waits this long for the others */

static void hung(int sig) {
    (void)sig;
    static const char msg[] = "a rank waited more than 60 s for its failing all-reduce: FAIL\n";
    ssize_t ignored = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(1);
}

enum { WAIT, POLL, STREAM, SHUTDOWN, ROUND };

/* What stopped the runtime, as message tells it: a submission refused once the runtime has
 * stopped tells it after its own words (runtime/submit.c), an op the stop found in flight
 * alone. With --stream a peer's next step is either, as the stop reaches it before or after
 * that submission. */
static const char *cause_of(const char *message) {
    static const char refused[] =
        "has stopped and runs nothing more (call hvd_shutdown), because: ";
    const char *at = strstr(message, refused);
    return at ? at + sizeof refused - 1 : message;
}

/* One blocking device all-reduce of dev (COUNT floats), waited for as the mode says. */
static hvd_status step(const char *name, float *dev, const hvd_options *o, int mode) {
    hvd_handle h;
    hvd_status s = hvd_allreduce_async(name, dev, dev, COUNT, HVD_FLOAT32, HVD_SUM, o, &h);
    if (s != HVD_OK) return s;
    if (mode == STREAM) {
        s = hvd_wait_on_stream(&h, NULL);
        if (s == HVD_OK && cudaStreamSynchronize(NULL) != cudaSuccess) s = HVD_ERR_CUDA;
        return s;
    }
    int done = 0;
    while (mode == POLL && (s = hvd_poll(h, &done)) == HVD_OK && !done) usleep(100);
    return s == HVD_OK ? hvd_wait(&h) : s;
}

/* --round's failing step: the device all-reduce in flight, then a host all-reduce, at once on
 * the victim and PEERS_LATE_S later elsewhere; both must fail. @return the device one's status
 * (its message recorded last). */
static hvd_status step_in_round(const char *name, float *dev, const hvd_options *o, int victim,
                                mt_ctx *t) {
    hvd_handle on_device, on_host;
    int32_t one = 1, sum = 0;
    hvd_status s = hvd_allreduce_async(name, dev, dev, COUNT, HVD_FLOAT32, HVD_SUM, o, &on_device);
    if (s != HVD_OK) return s;
    if (!victim) usleep((useconds_t)(PEERS_LATE_S * 1e6));
    hvd_status host = hvd_allreduce_async("async.host", &one, &sum, 1, HVD_INT32, HVD_SUM, NULL,
                                          &on_host);
    if (host == HVD_OK) host = hvd_wait(&on_host);
    MT_CHECK(t, host != HVD_OK, "the host all-reduce submitted with the failing step succeeded");
    return hvd_wait(&on_device);
}

int main(int argc, char **argv) {
    mt_ctx t;
    int local = 0, victim = 1, mode = WAIT;
    int code = gt_start(&argc, &argv, &t, &local, 3);
    if (code != 0) return code;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc) victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--poll") == 0) mode = POLL;
        else if (strcmp(argv[i], "--stream") == 0) mode = STREAM;
        else if (strcmp(argv[i], "--shutdown") == 0) mode = SHUTDOWN;
        else if (strcmp(argv[i], "--round") == 0) mode = ROUND;
    }
    signal(SIGALRM, hung);
    alarm(HANG_S);
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local;
    float *dev = gt_alloc(COUNT * sizeof(float));
    float *host = malloc(COUNT * sizeof(float));
    if (!host) return 1;

    static const char *const waits[] = {"hvd_wait", "hvd_poll", "hvd_wait_on_stream",
                                        "hvd_shutdown", "a negotiation round"};
    mt_begin(&t, "an asynchronous NCCL error on rank %d (%s)", victim, waits[mode]);
    int failing = mode == STREAM ? 3 : 2; /* the step that fails */
    hvd_status failed = HVD_OK;
    char message[1024] = "";
    int steps = 0;
    double took = 0;
    for (; steps < MAX_STEPS && failed == HVD_OK; steps++) {
        char name[32];
        snprintf(name, sizeof name, "async.%d", steps);
        for (size_t i = 0; i < COUNT; i++) host[i] = (float)((t.rank + 1) * (int)(i % 5));
        cudaMemcpy(dev, host, COUNT * sizeof(float), cudaMemcpyHostToDevice);
        double start = mt_now();
        if (mode == SHUTDOWN && steps == failing) {
            hvd_handle dropped; /* hvd_shutdown reclaims it */
            failed = hvd_allreduce_async(name, dev, dev, COUNT, HVD_FLOAT32, HVD_SUM, &o, &dropped);
            if (failed == HVD_OK) failed = hvd_shutdown();
            if (failed == HVD_OK) snprintf(message, sizeof message, "hvd_shutdown returned HVD_OK");
        } else if (mode == ROUND && steps == failing) {
            failed = step_in_round(name, dev, &o, t.rank == victim, &t);
        } else {
            failed = step(name, dev, &o, mode == ROUND ? WAIT : mode);
        }
        took = mt_now() - start;
        if (failed != HVD_OK) {
            snprintf(message, sizeof message, "%s", hvd_last_error());
            break;
        }
        if (steps == failing - 1 && mode == STREAM) continue; /* the aborted one's partial sums */
        cudaMemcpy(host, dev, COUNT * sizeof(float), cudaMemcpyDeviceToHost);
        int wrong = 0;
        for (size_t i = 0; i < COUNT && !wrong; i++)
            wrong = host[i] != (float)((int)(i % 5) * t.size * (t.size + 1) / 2);
        MT_CHECK(&t, !wrong, "step %d: wrong all-reduce result", steps);
    }
    printf("[rank %d] step %d: %s in %.3f s: %s\n", t.rank, steps, hvd_status_string(failed),
           took, message);
    MT_CHECK(&t, steps == failing, "the all-reduce that failed was step %d, expected step %d",
             steps, failing);
    MT_CHECK(&t, failed == (t.rank == victim ? HVD_ERR_NCCL : HVD_ERR_RANK_FAILED),
             "the failing step returned %s, expected %s", hvd_status_string(failed),
             hvd_status_string(t.rank == victim ? HVD_ERR_NCCL : HVD_ERR_RANK_FAILED));
    MT_CHECK(&t, strstr(message, "asynchronous error") != NULL,
             "the message does not name NCCL's asynchronous error: %s", message);
    char who[32];
    snprintf(who, sizeof who, "on rank %d", victim);
    MT_CHECK(&t, strstr(message, who) != NULL, "the message does not name rank %d: %s", victim,
             message);
    MT_CHECK(&t, took < BOUND_S, "the failing step took %.1f s (bound %.0f s)", took, BOUND_S);

    /* the runtime stopped on every rank: a host all-reduce now fails at once, everywhere
     * (after --shutdown nothing is initialized: it could not succeed) */
    double start = mt_now();
    if (mode != SHUTDOWN) {
        int32_t one = 1, sum = 0;
        hvd_status later = hvd_allreduce("async.after", &one, &sum, 1, HVD_INT32, HVD_SUM);
        MT_CHECK(&t, later != HVD_OK, "an all-reduce after the failure succeeded on this rank");
        MT_CHECK(&t, mt_now() - start < BOUND_S, "an all-reduce after the failure took %.1f s",
                 mt_now() - start);
    }
    /* the ranks that heard of it heard the same cause, in the same words */
    char theirs[sizeof message];
    int other = victim == 0 ? 1 : 0;
    snprintf(theirs, sizeof theirs, "%s", message);
    MPI_Bcast(theirs, (int)sizeof theirs, MPI_CHAR, other, MPI_COMM_WORLD);
    MT_CHECK(&t, t.rank == victim || strcmp(cause_of(theirs), cause_of(message)) == 0,
             "rank %d heard \"%s\", rank %d \"%s\"", t.rank, message, other, theirs);

    /* libhvdc stopped and told the others: MPI is left unfinalized, and hvd_shutdown says why */
    start = mt_now();
    if (mode != SHUTDOWN) {
        hvd_status down = hvd_shutdown();
        MT_CHECK(&t, down == failed, "hvd_shutdown gave %s (%s), expected %s",
                 hvd_status_string(down), hvd_last_error(), hvd_status_string(failed));
        MT_CHECK(&t, mt_now() - start < BOUND_S, "hvd_shutdown took %.1f s", mt_now() - start);
    }
    mt_end(&t);

    /* the verdicts over MPI: libhvdc stopped (the test initialized MPI itself) */
    int mine = atomic_load(&t.failures), all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    t.remote_failures = all - mine;
    code = mt_exit_code(&t);
    cudaFree(dev);
    free(host);
    MPI_Finalize();
    return code;
}
