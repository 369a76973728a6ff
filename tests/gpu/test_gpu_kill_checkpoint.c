/*
 * test_gpu_kill_checkpoint.c - a rank dies while rank 0 saves device parameters whose last
 * all-reduce it never joined; the checkpoint on disk must stay the last good one. Saved with
 * hvd_checkpoint_save, or with --elastic as hvdc.torch's elastic commit does: the values
 * copied to the host on the stream, as a blob, then hvd_elastic_commit.
 *
 * The optimizer's device step does not wait on the host (hvd_optimizer_step queues the update
 * on cfg.stream behind the all-reduces), so hvd_checkpoint_save's copy of the parameters waits
 * for the device there. When a rank has died inside that all-reduce, the copy returns once the
 * survivors abort their communicators: the aborted collective's partial sums, and the update
 * made from them. Rank 0 must not write those over the last good checkpoint (or commit).
 *
 * Every rank (np 3) trains one float32 parameter on its device with SGD on a stream of the
 * test's: a step, a save (the good file, which rank 0 keeps a copy of), then a second step in
 * which the victim (the last rank) holds its gradient off the device (gt_hold_stream before
 * its grad_ready), and a second save. The victim joins the save's first agreement and dies
 * --after-s seconds later, while rank 0 copies the parameters. Each survivor must fail the
 * save with HVD_ERR_RANK_FAILED naming the victim (tests/mpi/check_kill.py judges the
 * KILLTEST lines); rank 0 must find the file as the first save left it. (With --elastic rank
 * 0's copy comes before the commit's first collective, which the death fails anyway; the
 * checkpoint's copy comes after its first agreement, where only the abort can tell.)
 * Usage: test_gpu_kill_checkpoint [--elastic] [--after-s T]   (one simulated device per rank)
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_test.h"

#define COUNT 4096u

typedef struct model {
    float *param, *grad; /* device */
    float host[COUNT];
    cudaStream_t stream;
    hvd_optimizer *opt;
    hvd_elastic *elastic; /* --elastic: commits a blob of the values instead */
    int rank;
} model;

/* One step: this rank's gradient written on the stream, announced, the update queued. */
static hvd_status step(model *m, int step_no, int hold) {
    for (size_t i = 0; i < COUNT; i++) m->host[i] = (float)((m->rank + 1) * (step_no + 1) + (int)(i % 5));
    if (cudaMemcpyAsync(m->grad, m->host, sizeof m->host, cudaMemcpyHostToDevice, m->stream) !=
        cudaSuccess)
        return HVD_ERR_CUDA;
    if (cudaStreamSynchronize(m->stream) != cudaSuccess) return HVD_ERR_CUDA; /* m->host is reused */
    if (hold && gt_hold_stream(m->stream) != 0) return HVD_ERR_CUDA;
    hvd_status s = hvd_optimizer_grad_ready(m->opt, 0);
    return s != HVD_OK ? s : hvd_optimizer_step(m->opt, NULL);
}

/* Saves the state to path (a checkpoint) or commits it (--elastic). Collective. */
static hvd_status save(model *m, const char *path) {
    if (!m->elastic) return hvd_checkpoint_save(path, m->opt, NULL, NULL);
    /* as hvdc.torch's commit: rank 0 serializes the device values, which waits for them */
    if (m->rank == 0 &&
        (cudaMemcpyAsync(m->host, m->param, sizeof m->host, cudaMemcpyDeviceToHost, m->stream) !=
             cudaSuccess ||
         cudaStreamSynchronize(m->stream) != cudaSuccess))
        return HVD_ERR_CUDA;
    hvd_status s = hvd_elastic_set_blob(m->elastic, "w", m->host, sizeof m->host);
    return s != HVD_OK ? s : hvd_elastic_commit(m->elastic, NULL);
}

/* The file's bytes (malloc'd) and length; NULL when it cannot be read. */
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            unsigned char *bigger = realloc(buf, cap = cap ? 2 * cap : 65536);
            if (!bigger) break;
            buf = bigger;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

static double after_s;

static void *die_later(void *arg) {
    int rank = *(const int *)arg;
    usleep((useconds_t)(after_s * 1e6));
    printf("KILLTEST rank=%d host=? victim step=1: SIGKILL while rank 0 saves\n", rank);
    fflush(stdout);
    kill(getpid(), SIGKILL);
    return NULL;
}

int main(int argc, char **argv) {
    hvd_status s = hvd_init();
    if (s != HVD_OK) {
        printf("hvd_init failed: %s: %s\nFAIL\n", hvd_status_string(s), hvd_last_error());
        return 1;
    }
    model m = {0};
    int size = 1, local = 0;
    hvd_rank(&m.rank);
    hvd_size(&size);
    hvd_local_rank(&local);
    int victim = size - 1;
    after_s = mt_arg_double(argc, argv, "--after-s", 1.0);
    int elastic = 0;
    for (int i = 1; i < argc; i++) elastic |= strcmp(argv[i], "--elastic") == 0;
    char dir[128] = {0}, path[256] = {0};
    if (m.rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/hvdc-kill-ckpt-%d", (int)getpid());
        if (mkdir(dir, 0700) != 0) dir[0] = '\0';
        snprintf(path, sizeof path, "%s/%s", dir, elastic ? "commit.hvdc" : "ckpt.bin");
    }
    if (cudaSetDevice(local) != cudaSuccess ||
        cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&m.param, COUNT * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&m.grad, COUNT * sizeof(float)) != cudaSuccess ||
        cudaMemset(m.param, 0, COUNT * sizeof(float)) != cudaSuccess) {
        printf("[rank %d] no device for the test\nFAIL\n", m.rank);
        return 1;
    }
    hvd_param p = {"w", m.param, m.grad, COUNT, HVD_FLOAT32, local};
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    cfg.stream = m.stream;
    s = hvd_broadcast("dir", dir, sizeof dir, HVD_UINT8, 0);
    if (s == HVD_OK) s = hvd_broadcast("path", path, sizeof path, HVD_UINT8, 0);
    if (s == HVD_OK && !dir[0]) s = HVD_ERR_INVALID_ARG; /* rank 0 could not make it */
    if (s == HVD_OK) s = hvd_optimizer_create(&p, 1, &cfg, &m.opt);
    if (s == HVD_OK && elastic) s = hvd_elastic_create(dir, &m.elastic);
    if (s == HVD_OK) s = step(&m, 0, 0);
    if (s == HVD_OK) s = save(&m, path);
    size_t good_len = 0;
    unsigned char *good = m.rank == 0 && s == HVD_OK ? read_all(path, &good_len) : NULL;
    if (s != HVD_OK || (m.rank == 0 && !good)) {
        printf("[rank %d] the first step and save failed: %s: %s\nFAIL\n", m.rank,
               hvd_status_string(s), hvd_last_error());
        return 1;
    }
    if (m.rank == 0)
        printf("# %s: %d ranks; rank %d dies while rank 0 saves its second step\n", argv[0],
               size, victim);
    fflush(stdout);

    /* the victim's gradient never reaches its device: the others' all-reduce waits for it */
    s = step(&m, 1, m.rank == victim);
    pthread_t killer;
    if (s == HVD_OK && m.rank == victim) pthread_create(&killer, NULL, die_later, &m.rank);
    double started = mt_now();
    if (s == HVD_OK) s = save(&m, path);
    if (m.rank == victim) {
        printf("[rank %d] the save ended (%s) before the SIGKILL\nFAIL\n", m.rank,
               hvd_status_string(s));
        return 1;
    }
    double died_at = started + after_s;
    int failed = 0;
    if (s == HVD_OK) {
        printf("[rank %d] the second save succeeded although rank %d never joined its step\n"
               "FAIL\n", m.rank, victim);
        failed = 1;
    } else {
        printf("KILLTEST rank=%d host=? failed step=1 status=\"%s\" after_s=%.2f message=\"%s\"\n",
               m.rank, hvd_status_string(s), mt_now() - died_at, hvd_last_error());
        /* the writer says it wrote nothing, not only that a rank died */
        if (m.rank == 0 && !elastic && !strstr(hvd_last_error(), "nothing written")) {
            printf("[rank 0] the failed save does not say that nothing was written\nFAIL\n");
            failed = 1;
        }
    }
    if (m.rank == 0) {
        size_t len = 0;
        unsigned char *now = read_all(path, &len);
        if (!now || len != good_len || memcmp(now, good, len) != 0) {
            printf("[rank 0] %s no longer holds the first save's checkpoint (%zu bytes, was "
                   "%zu): the aborted step's parameters were written over it\nFAIL\n", path,
                   now ? len : 0, good_len);
            failed = 1;
        }
        free(now);
        free(good);
        unlink(path);
        rmdir(dir);
    }
    fflush(stdout);
    if (m.elastic) hvd_elastic_destroy(m.elastic);
    hvd_optimizer_destroy(m.opt);
    cudaFree(m.param);
    cudaFree(m.grad);
    hvd_status down = hvd_shutdown();
    printf("KILLTEST rank=%d host=? exit status=\"%s\"\n", m.rank, hvd_status_string(down));
    return failed;
}
