/*
 * test_kill.c - one rank dies by SIGKILL while every rank is busy all-reducing; the others
 * must notice, get a named error from libhvdc, and exit instead of hanging.
 *
 * Every rank runs steps of a 1M-float all-reduce (checked) until one fails. After --after-s
 * seconds of steps the victim rank (--victim, default the last rank: on node2 under
 * `-H node1:2,node2:2`) sends itself SIGKILL, which it cannot catch: to its peers this is a
 * crashed host process, the same as an external `kill -9` or the OOM killer. The loop and the
 * KILLTEST lines each rank prints are kill_loop.h's; a survivor exits 0 once it has reported
 * an error. The time bound itself is the caller's: tests/two_hosts.sh runs mpirun under
 * `timeout` and checks that node1's ranks printed their exit lines (see --kill there),
 * tests/mpi/check_kill.py likewise. A rank killed by the launcher prints nothing, which the
 * stage reports as "no named error".
 *
 * Usage: test_kill [--victim R] [--after-s T] [--max-s M]
 * Runs on the main thread only.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kill_loop.h"
#include "mpitest.h"

#define COUNT (1u << 20) /* floats per step: 4 MiB, a few ms across two hosts */

typedef struct host_step {
    float *buf;
    int rank, size;
} host_step;

static hvd_status step(void *ctx, const char *name, int *wrong) {
    host_step *h = ctx;
    for (size_t i = 0; i < COUNT; i++) h->buf[i] = (float)((h->rank + 1) * (int)(i % 7));
    hvd_status s = hvd_allreduce(name, h->buf, h->buf, COUNT, HVD_FLOAT32, HVD_SUM);
    /* sum over ranks of (r+1)*(i%7) = (i%7) * size*(size+1)/2, exact in float */
    for (size_t i = 0; s == HVD_OK && i < COUNT && !*wrong; i++)
        *wrong = h->buf[i] != (float)((int)(i % 7) * h->size * (h->size + 1) / 2);
    return s;
}

int main(int argc, char **argv) {
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    host_step h = {malloc(COUNT * sizeof(float)), 0, 1};
    if (!h.buf) {
        fprintf(stderr, "test_kill: out of memory\n");
        return 1;
    }
    hvd_rank(&h.rank);
    hvd_size(&h.size);
    kill_test k = {step, NULL, &h, "1048576-float all-reduces", ""};
    int code = kill_loop(argc, argv, &k);
    free(h.buf);
    return code;
}
