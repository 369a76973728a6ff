/*
 * test_gpu_absent.c - a device request where the GPU path cannot run (no CUDA device, or a
 * build without the GPU backend) fails cleanly on every rank with HVD_ERR_UNSUPPORTED or
 * HVD_ERR_CUDA and a message, and the next CPU request works. Where a GPU is there and the
 * request succeeds, its result must be right instead. The same for the distributed optimizer:
 * device parameters are refused with a clear message, and a host optimizer then trains.
 * Built and run in every build.
 */
#include <stdio.h>
#include <string.h>

#include "hvdc.h"
#include "mpitest.h"

int main(void) {
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
    hvd_options o = HVD_OPTIONS_DEFAULT;
    o.device = local;
    hvd_handle h = HVD_HANDLE_NULL;
    /* host memory on purpose: where the request is refused, nothing may touch it */
    hvd_status st = hvd_allreduce_async("absent.dev", host, host, 16, HVD_FLOAT32, HVD_SUM, &o, &h);
    if (st == HVD_OK) st = hvd_wait(&h);
    if (st == HVD_OK) {
        printf("[rank %d] device request accepted: a GPU path is available here\n", rank);
    } else {
        MT_CHECK(&t, st == HVD_ERR_UNSUPPORTED || st == HVD_ERR_CUDA,
                 "device request failed with %s, expected unsupported or CUDA error",
                 hvd_status_string(st));
        MT_CHECK(&t, strlen(hvd_last_error()) > 0, "no message for the failed device request");
        if (rank == 0) printf("device request refused as expected: %s\n", hvd_last_error());
    }
    mt_end(&t);

    mt_begin(&t, "CPU request after it");
    int32_t v[8], want[8];
    for (int i = 0; i < 8; i++) {
        v[i] = rank * 10 + i;
        want[i] = 10 * size * (size - 1) / 2 + size * i;
    }
    if (MT_EXPECT(&t, hvd_allreduce("absent.cpu", v, v, 8, HVD_INT32, HVD_SUM), HVD_OK))
        for (int i = 0; i < 8; i++) MT_CHECK(&t, v[i] == want[i], "v[%d] = %d, want %d", i, v[i], want[i]);
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
