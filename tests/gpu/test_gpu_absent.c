/*
 * test_gpu_absent.c - a device request where the GPU path cannot run (no CUDA device, or a
 * build without the GPU backend) fails cleanly on every rank with HVD_ERR_UNSUPPORTED or
 * HVD_ERR_CUDA and a message (HVD_ERR_INVALID_ARG where a GPU is there: the buffer is host
 * memory on purpose), and the next CPU request works. The same for the distributed optimizer:
 * device parameters are refused with a clear message, and a host optimizer then trains.
 *
 * `test_gpu_absent refused` (np >= 2, run with HVDC_TEST_GPU_COUNT=1, base/fault.h): every
 * rank asks for the device of its local rank, which rank 1 does not have; the GPU setup fails
 * on every rank together, naming rank 1 and its device, and the runtime goes on: a CPU
 * all-reduce works, a later request for a device every rank has is set up again (and works, or
 * fails cleanly where that device is pretended or shared), and CPU work still goes on.
 * Identical on a one-GPU machine and on one without a GPU (issue 17: that fault killed the
 * runtime on every rank). Built and run in every build.
 */
#include <stdio.h>
#include <string.h>

#include "hvdc.h"
#include "mpitest.h"

/* A CPU all-reduce of rank-dependent integers, checked. */
static void cpu_allreduce_works(mt_ctx *t, const char *name) {
    int32_t v[8], want[8];
    for (int i = 0; i < 8; i++) {
        v[i] = t->rank * 10 + i;
        want[i] = 10 * t->size * (t->size - 1) / 2 + t->size * i;
    }
    if (MT_EXPECT(t, hvd_allreduce(name, v, v, 8, HVD_INT32, HVD_SUM), HVD_OK))
        for (int i = 0; i < 8; i++) MT_CHECK(t, v[i] == want[i], "v[%d] = %d, want %d", i, v[i], want[i]);
}

/* An empty device all-reduce (no buffer to allocate, so every rank can ask for any device). */
static hvd_status device_request(const char *name, int device) {
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = device;
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status st = hvd_allreduce_async(name, NULL, NULL, 0, HVD_FLOAT32, HVD_SUM, &o, &h);
    return st == HVD_OK ? hvd_wait(&h) : st;
}

static int refused(void) {
    mt_ctx t;
    int local = 0;
    if (mt_start(&t) != 0) return 1;
    hvd_local_rank(&local);
    if (t.size < 2) {
        printf("SKIPPED: needs 2 ranks or more\n");
        hvd_shutdown();
        return 77;
    }
    mt_begin(&t, "device request for a device rank 1 does not have");
    hvd_status st = device_request("refused.dev", local);
    const char *msg = hvd_last_error();
    MT_CHECK(&t, st == HVD_ERR_CUDA, "status %s, want HVD_ERR_CUDA on every rank (%s)",
             hvd_status_string(st), msg);
    MT_CHECK(&t, strstr(msg, "failed on rank 1") && strstr(msg, "device 1 is not visible"),
             "the message names rank 1 and its device: %s", msg);
    if (t.rank == 0) printf("refused on every rank: %s\n", msg);
    mt_end(&t);

    mt_begin(&t, "CPU all-reduce after the refusal");
    cpu_allreduce_works(&t, "refused.cpu1");
    mt_end(&t);

    mt_begin(&t, "a later device request is set up again");
    st = device_request("refused.dev0", 0);
    msg = hvd_last_error();
    MT_CHECK(&t, st == HVD_OK || st == HVD_ERR_CUDA || st == HVD_ERR_NCCL ||
                 st == HVD_ERR_UNSUPPORTED, "status %s (%s)", hvd_status_string(st), msg);
    MT_CHECK(&t, st == HVD_OK || !strstr(msg, "device 1 is not visible"),
             "the old refusal was remembered instead of trying again: %s", msg);
    if (t.rank == 0) printf("device 0 on every rank: %s\n", st == HVD_OK ? "ran" : msg);
    mt_end(&t);

    mt_begin(&t, "CPU all-reduce after that");
    cpu_allreduce_works(&t, "refused.cpu2");
    mt_end(&t);

    mt_combine(&t);
    int code = mt_exit_code(&t);
    MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
    return code;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "refused") == 0) return refused();
    mt_ctx t;
    int rank = 0, size = 1, local = 0;
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init failed: %s\n", hvd_last_error());
        return 1;
    }
    hvd_rank(&rank), hvd_size(&size), hvd_local_rank(&local);
    mt_init(&t, rank, size);

    mt_begin(&t, "device request without a usable GPU");
    float host[16] = {0};
    hvd_options o = HVD_OPTIONS_INIT;
    o.device = local;
    hvd_handle h = HVD_HANDLE_NULL;
    /* host memory on purpose: where the request is refused, nothing may touch it */
    hvd_status st = hvd_allreduce_async("absent.dev", host, host, 16, HVD_FLOAT32, HVD_SUM, &o, &h);
    if (st == HVD_OK) st = hvd_wait(&h);
    if (st == HVD_OK) {
        printf("[rank %d] device request accepted: a GPU path is available here\n", rank);
    } else {
        MT_CHECK(&t, st == HVD_ERR_UNSUPPORTED || st == HVD_ERR_CUDA ||
                     (st == HVD_ERR_INVALID_ARG && strstr(hvd_last_error(), "host memory")),
                 "device request failed with %s, expected unsupported, CUDA error or host "
                 "memory refused: %s", hvd_status_string(st), hvd_last_error());
        MT_CHECK(&t, strlen(hvd_last_error()) > 0, "no message for the failed device request");
        if (rank == 0) printf("device request refused as expected: %s\n", hvd_last_error());
    }
    mt_end(&t);

    mt_begin(&t, "CPU request after it");
    cpu_allreduce_works(&t, "absent.cpu");
    mt_end(&t);

    mt_begin(&t, "optimizer with device parameters without a usable GPU");
    float w[4] = {1, 2, 3, 4}, gw[4] = {0};
    hvd_param prm = {.name = "w", .data = w, .grad = gw, .count = 4, .dtype = HVD_FLOAT32,
                     .device = local};
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    cfg.name_prefix = "absent.opt";
    hvd_optimizer *opt = NULL;
    st = hvd_optimizer_create(&prm, 1, &cfg, &opt);
    if (st == HVD_OK) {
        printf("[rank %d] device optimizer accepted: a GPU path is available here\n", rank);
        hvd_optimizer_destroy(opt);
    } else {
        const char *msg = hvd_last_error();
        MT_CHECK(&t, st == HVD_ERR_UNSUPPORTED || st == HVD_ERR_CUDA,
                 "device optimizer failed with %s, expected unsupported or CUDA error",
                 hvd_status_string(st));
        MT_CHECK(&t, opt == NULL, "a failed create left *out set");
        MT_CHECK(&t, strstr(msg, "no CUDA device visible") || strstr(msg, "without the GPU backend") ||
                     strstr(msg, "is not visible"), "unclear message: %s", msg);
        if (rank == 0) printf("device optimizer refused as expected: %s\n", msg);
    }
    mt_end(&t);

    mt_begin(&t, "host optimizer after it");
    float hp[4] = {1, 2, 3, 4}, gh[4];
    prm = (hvd_param){.name = "h", .data = hp, .grad = gh, .count = 4, .dtype = HVD_FLOAT32,
                      .device = HVD_DEVICE_CPU};
    cfg.lr = 0.5;
    cfg.name_prefix = "absent.host";
    opt = NULL;
    if (MT_EXPECT(&t, hvd_optimizer_create(&prm, 1, &cfg, &opt), HVD_OK)) {
        for (int i = 0; i < 4; i++) gh[i] = (float)(rank + 1); // average (size + 1) / 2
        if (MT_EXPECT(&t, hvd_optimizer_step(opt, NULL), HVD_OK))
            for (int i = 0; i < 4; i++) {
                float want_h = (float)(i + 1) - 0.5f * (float)(size + 1) / 2.0f;
                MT_CHECK(&t, hp[i] == want_h, "hp[%d] = %g, want %g", i, (double)hp[i], (double)want_h);
            }
        MT_EXPECT(&t, hvd_optimizer_destroy(opt), HVD_OK);
    }
    mt_end(&t);

    mt_combine(&t);
    int code = mt_exit_code(&t);
    hvd_shutdown();
    return code;
}
