/*
 * test_gpu_absent.c - a device request where the GPU path cannot run (no CUDA device, or a
 * build without the GPU backend) fails cleanly on every rank with HVD_ERR_UNSUPPORTED or
 * HVD_ERR_CUDA and a message, and the next CPU request works. Where a GPU is there and the
 * request succeeds, its result must be right instead. Built and run in every build.
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

    mt_combine(&t);
    int code = mt_exit_code(&t);
    hvd_shutdown();
    return code;
}
