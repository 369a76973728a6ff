/*
 * test_gpu_optimizer.c - the distributed optimizer's device path (train/optim_gpu.c and the
 * runtime's device completion under it) against its host path, step by step, across ranks.
 *
 * Two optimizers over the same three parameters (float32 x 1000, float64 x 37, float32 x 513),
 * one with them in device memory and one in host memory, get the same integer gradients (each
 * rank's own, changing every step) and must end every step bitwise equal: both sum in rank order
 * and scale by 1/size in the dtype, and both apply update_rules.h. The device optimizer is used
 * as a training loop uses it: the gradients are written on cfg.stream (the legacy default
 * stream, or a non-blocking stream of the test's), hvd_optimizer_grad_ready is called for each,
 * last parameter first, and hvd_optimizer_step queues the update on the stream without waiting
 * for the device; the host copies a step's gradients in while the previous step may still be
 * running there (stream order keeps them apart), and reuses the all-reduces' names at once.
 * Settings: SGD with momentum, Nesterov and weight decay; Adam; AdamW; SGD summing two
 * backward passes per step. Every rank prints its verdict; rank 0 the table of settings.
 * On the test's own stream one step runs with the device held: a host function queued before
 * its gradients are announced blocks the stream until the step has returned, so a step that
 * waited for its all-reduces or its update on the host would never return (a watchdog opens
 * the gate after GATE_LIMIT_S and the check fails).
 *
 * Memory that is not where a parameter's .device says is refused at creation, also when one
 * rank alone gets it wrong (every rank returns at once).
 * Where it cannot run (no CUDA device, or fewer devices on a node than ranks) every rank prints
 * "SKIPPED: ..." and exits 77.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpu_test.h"
#include "hvdc.h"
#include "mpitest.h"

#define N_PARAMS 3
#define STEPS 6

static const size_t counts[N_PARAMS] = {1000, 37, 513};
static const hvd_dtype dtypes[N_PARAMS] = {HVD_FLOAT32, HVD_FLOAT64, HVD_FLOAT32};
static const char *const names[N_PARAMS] = {"fc.weight", "fc.bias", "out.weight"};

#define GATE_LIMIT_S 60

static mt_ctx T;
static int local_rank;
static int opt_passes; /* backward passes per step of the setting running */

typedef struct model {
    void *data[N_PARAMS], *grad[N_PARAMS]; /* device or host memory */
    hvd_param params[N_PARAMS];
} model;

/* A value of parameter p at element i, the same on every rank (rank 0's is broadcast anyway). */
static double start_value(int p, size_t i) { return (double)((int)((i * 7 + (size_t)p) % 19) - 9) / 8.0; }

/* This rank's gradient for step s (pass k of it): small integers, exact in any sum. */
static double grad_value(int p, size_t i, int s, int k) {
    return (double)((int)((i * 5 + (size_t)(T.rank * 3 + s * 11 + k * 7 + p)) % 13) - 6);
}

static void fill(void *buf, hvd_dtype dt, size_t n, int p, int s, int k, int start) {
    for (size_t i = 0; i < n; i++) {
        double v = start ? start_value(p, i) : grad_value(p, i, s, k);
        if (dt == HVD_FLOAT32) ((float *)buf)[i] = (float)v;
        else ((double *)buf)[i] = v;
    }
}

static void model_init(model *m, int device) {
    for (int p = 0; p < N_PARAMS; p++) {
        size_t bytes = counts[p] * hvd_dtype_size(dtypes[p]);
        void *start = malloc(bytes);
        fill(start, dtypes[p], counts[p], p, 0, 0, 1);
        if (device) {
            m->data[p] = gt_alloc(bytes);
            m->grad[p] = gt_alloc(bytes);
            cudaMemcpy(m->data[p], start, bytes, cudaMemcpyHostToDevice);
            free(start);
        } else {
            m->data[p] = start;
            m->grad[p] = malloc(bytes);
        }
        m->params[p] = (hvd_param){names[p], m->data[p], m->grad[p], counts[p], dtypes[p],
                                   device ? local_rank : HVD_DEVICE_CPU};
    }
}

static void model_free(model *m, int device) {
    for (int p = 0; p < N_PARAMS; p++) {
        if (device) cudaFree(m->data[p]), cudaFree(m->grad[p]);
        else free(m->data[p]), free(m->grad[p]);
    }
}

/* Writes pass k of step s's gradients: on the host, or on stream (from pageable memory, which
 * the copy takes at the call). */
static void write_grads(model *m, int device, cudaStream_t stream, int s, int k) {
    for (int p = 0; p < N_PARAMS; p++) {
        size_t bytes = counts[p] * hvd_dtype_size(dtypes[p]);
        if (!device) {
            fill(m->grad[p], dtypes[p], counts[p], p, s, k, 0);
            continue;
        }
        void *g = malloc(bytes);
        fill(g, dtypes[p], counts[p], p, s, k, 0);
        cudaMemcpyAsync(m->grad[p], g, bytes, cudaMemcpyHostToDevice, stream);
        free(g);
    }
}

/* What holds a stream: a host function queued on it that returns once the gate opens. */
typedef struct gate {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int open, opened_by_watchdog;
} gate;

static void gate_hold(void *arg) {
    gate *g = arg;
    pthread_mutex_lock(&g->mutex);
    while (!g->open) pthread_cond_wait(&g->cond, &g->mutex);
    pthread_mutex_unlock(&g->mutex);
}

static void gate_open(gate *g, int by_watchdog) {
    pthread_mutex_lock(&g->mutex);
    if (!g->open) g->opened_by_watchdog = by_watchdog;
    g->open = 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->mutex);
}

/* Opens the gate after GATE_LIMIT_S unless the step returned first. */
static void *gate_watchdog(void *arg) {
    gate *g = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += GATE_LIMIT_S;
    pthread_mutex_lock(&g->mutex);
    while (!g->open && pthread_cond_timedwait(&g->cond, &g->mutex, &until) == 0) {}
    pthread_mutex_unlock(&g->mutex);
    gate_open(g, 1);
    return NULL;
}

/* Keeps the stream busy for SLOW_MS: what is queued behind it (a step's update) runs late. */
#define SLOW_MS 200
static void slow_host(void *unused) {
    (void)unused;
    struct timespec ms = {0, SLOW_MS * 1000000L};
    nanosleep(&ms, NULL);
}

/* One backward pass: gradients written, announced last parameter first, the pass ended.
 * held: the stream is held (a gate) from before the announcements until the step returned.
 * slow: the stream is kept busy for SLOW_MS first, so the update still waits to run when the
 * step returns. */
static int pass(hvd_optimizer *opt, model *m, int device, cudaStream_t stream, int s, int k,
                int held, int slow) {
    if (slow) MT_CHECK(&T, cudaLaunchHostFunc(stream, slow_host, NULL) == cudaSuccess, "slow");
    write_grads(m, device, stream, s, k);
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    pthread_t watchdog;
    if (held) {
        MT_CHECK(&T, cudaLaunchHostFunc(stream, gate_hold, &g) == cudaSuccess, "the gate");
        pthread_create(&watchdog, NULL, gate_watchdog, &g);
    }
    int ok = 1, applied = -1;
    for (int p = N_PARAMS - 1; p >= 0 && ok; p--)
        ok = MT_EXPECT(&T, hvd_optimizer_grad_ready(opt, p), HVD_OK);
    ok = ok && MT_EXPECT(&T, hvd_optimizer_step(opt, &applied), HVD_OK);
    if (held) {
        gate_open(&g, 0);
        pthread_join(watchdog, NULL);
        MT_CHECK(&T, !g.opened_by_watchdog, "step %d: hvd_optimizer_step did not return while "
                 "the device was held for %d s: it waited on the host for work queued on the "
                 "device (the all-reduces or the update)", s, GATE_LIMIT_S);
        cudaStreamSynchronize(stream); /* the gate's host function has run: g may go */
    }
    if (!ok) return 0;
    MT_CHECK(&T, applied == (k == opt_passes - 1), "pass %d of step %d: applied %d", k, s, applied);
    return 1;
}

/* Device parameters against host ones after step s: every element, bitwise. */
static void compare(const model *dev, const model *host, cudaStream_t stream, int s,
                    const char *what) {
    for (int p = 0; p < N_PARAMS; p++) {
        size_t bytes = counts[p] * hvd_dtype_size(dtypes[p]), bad = 0, first = 0;
        unsigned char *got = malloc(bytes);
        cudaMemcpyAsync(got, dev->data[p], bytes, cudaMemcpyDeviceToHost, stream);
        cudaStreamSynchronize(stream);
        const unsigned char *want = host->data[p];
        size_t es = hvd_dtype_size(dtypes[p]);
        for (size_t i = 0; i < counts[p]; i++)
            if (memcmp(got + i * es, want + i * es, es) != 0 && bad++ == 0) first = i;
        if (bad)
            mt_fail(&T, __FILE__, __LINE__, "%s, step %d: %s differs in %zu of %zu elements "
                    "(first %zu: device %.17g, host %.17g)", what, s, names[p], bad, counts[p],
                    first, mt_get_f64(got, dtypes[p], first), mt_get_f64(want, dtypes[p], first));
        free(got);
    }
}

/* 1 if the files at a and b hold the same bytes. */
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa != NULL && fb != NULL;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Rank 0's files (the other ranks' paths are never used): two checkpoints and the elastic
 * commit directory. */
static void ckpt_paths(int tag, char *dev_file, char *host_file, char *elastic_dir, size_t size) {
    snprintf(dev_file, size, "/tmp/hvdc-gpu-optimizer-%d-%d-dev.ckpt", (int)getpid(), tag);
    snprintf(host_file, size, "/tmp/hvdc-gpu-optimizer-%d-%d-host.ckpt", (int)getpid(), tag);
    snprintf(elastic_dir, size, "/tmp/hvdc-gpu-optimizer-%d-%d-elastic", (int)getpid(), tag);
}

/* Right after the last step returned, its update still queued behind a slow stream: both
 * optimizers' checkpoints, then the device one's elastic commit. */
static int save_both(hvd_optimizer *dopt, hvd_optimizer *hopt, int tag) {
    char dev_file[128], host_file[128], dir[128];
    ckpt_paths(tag, dev_file, host_file, dir, sizeof dev_file);
    if (T.rank == 0) mkdir(dir, 0700);
    hvd_elastic *es = NULL;
    int ok = MT_EXPECT(&T, hvd_checkpoint_save(dev_file, dopt, NULL, NULL), HVD_OK) &&
             MT_EXPECT(&T, hvd_checkpoint_save(host_file, hopt, NULL, NULL), HVD_OK) &&
             MT_EXPECT(&T, hvd_elastic_create(dir, &es), HVD_OK) &&
             MT_EXPECT(&T, hvd_elastic_add_optimizer(es, dopt), HVD_OK) &&
             MT_EXPECT(&T, hvd_elastic_commit(es, NULL), HVD_OK);
    hvd_elastic_destroy(es);
    return ok;
}

/* Checkpoints of device parameters (checkpoint.c through opt_host_view.c), saved by save_both
 * after the steps: the device optimizer's file must be byte for byte the host one's (the values
 * after the last update, still queued when the save began, and the state); a new device
 * optimizer loaded from the host file, at every rank, must then go on bitwise equal to the
 * host optimizer. */
static void checkpoints(model *host, hvd_optimizer *hopt, hvd_optimizer_config dev_cfg,
                        cudaStream_t stream, int tag, const char *what) {
    char dev_file[128], host_file[128], dir[128], commit[160], prefix[2][32];
    ckpt_paths(tag, dev_file, host_file, dir, sizeof dev_file);
    snprintf(prefix[0], sizeof prefix[0], "loaded%d", tag);
    snprintf(prefix[1], sizeof prefix[1], "restored%d", tag);
    if (T.rank == 0)
        MT_CHECK(&T, same_file(dev_file, host_file), "%s: the device optimizer's checkpoint "
                 "differs from the host one's (%s, %s)", what, dev_file, host_file);
    /* new device optimizers at the start values and zero state: the host optimizer's
     * checkpoint loaded into one, the device one's elastic commit restored into the other */
    model fresh[2];
    hvd_optimizer *opts[2] = {NULL, NULL};
    hvd_elastic *es = NULL;
    hvd_elastic_info info = {0};
    int ok = 1;
    for (int j = 0; j < 2 && ok; j++) {
        model_init(&fresh[j], 1);
        dev_cfg.name_prefix = prefix[j];
        ok = MT_EXPECT(&T, hvd_optimizer_create(fresh[j].params, N_PARAMS, &dev_cfg, &opts[j]),
                       HVD_OK);
    }
    ok = ok && MT_EXPECT(&T, hvd_checkpoint_load(host_file, opts[0], NULL, NULL), HVD_OK) &&
         MT_EXPECT(&T, hvd_elastic_create(dir, &es), HVD_OK) &&
         MT_EXPECT(&T, hvd_elastic_add_optimizer(es, opts[1]), HVD_OK) &&
         /* a device buffer registered by pointer is refused: commits memcpy those */
         MT_EXPECT(&T, hvd_elastic_add_tensor(es, "on.device", fresh[0].data[0], counts[0],
                                              dtypes[0]), HVD_ERR_INVALID_ARG) &&
         MT_EXPECT(&T, hvd_elastic_restore(es, &info), HVD_OK);
    if (ok && info.restored != 1) {
        mt_fail(&T, __FILE__, __LINE__, "%s: the elastic commit was not found", what);
        ok = 0;
    }
    for (int s = STEPS; s < STEPS + 2 && ok; s++) {
        for (int k = 0; k < opt_passes && ok; k++)
            ok = pass(opts[0], &fresh[0], 1, stream, s, k, 0, 0) &&
                 pass(opts[1], &fresh[1], 1, stream, s, k, 0, 0) &&
                 pass(hopt, host, 0, NULL, s, k, 0, 0);
        if (ok) compare(&fresh[0], host, stream, s, "loaded from a checkpoint");
        if (ok) compare(&fresh[1], host, stream, s, "restored from an elastic commit");
    }
    hvd_elastic_destroy(es);
    for (int j = 0; j < 2; j++) MT_EXPECT(&T, hvd_optimizer_destroy(opts[j]), HVD_OK);
    cudaDeviceSynchronize();
    for (int j = 0; j < 2; j++) model_free(&fresh[j], 1);
    if (T.rank == 0) {
        snprintf(commit, sizeof commit, "%s/commit.hvdc", dir);
        unlink(dev_file), unlink(host_file), unlink(commit), rmdir(dir);
    }
}

static void run_setting(const char *what, hvd_optimizer_config cfg, int own_stream, int tag) {
    mt_begin(&T, "gpu.optimizer %s, %s stream", what, own_stream ? "non-blocking" : "legacy");
    cudaStream_t stream = NULL;
    if (own_stream) cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    model dev, host;
    model_init(&dev, 1);
    model_init(&host, 0);
    char dev_prefix[32], host_prefix[32];
    snprintf(dev_prefix, sizeof dev_prefix, "dev%d", tag);
    snprintf(host_prefix, sizeof host_prefix, "host%d", tag);
    hvd_optimizer_config dev_cfg = cfg, host_cfg = cfg;
    dev_cfg.name_prefix = dev_prefix;
    dev_cfg.stream = stream;
    host_cfg.name_prefix = host_prefix;
    hvd_optimizer *dopt = NULL, *hopt = NULL;
    opt_passes = cfg.backward_passes_per_step;
    if (MT_EXPECT(&T, hvd_optimizer_create(dev.params, N_PARAMS, &dev_cfg, &dopt), HVD_OK) &&
        MT_EXPECT(&T, hvd_optimizer_create(host.params, N_PARAMS, &host_cfg, &hopt), HVD_OK)) {
        int ok = 1, saved = 0;
        for (int s = 0; s < STEPS && ok; s++) {
            int last = s == STEPS - 1;
            for (int k = 0; k < cfg.backward_passes_per_step && ok; k++)
                ok = pass(dopt, &dev, 1, stream, s, k, own_stream && s == 2 && k == 0,
                          last && k == cfg.backward_passes_per_step - 1) &&
                     pass(hopt, &host, 0, NULL, s, k, 0, 0);
            if (ok && last) saved = save_both(dopt, hopt, tag);
            if (ok && (s % 2 == 1 || last)) compare(&dev, &host, stream, s, what);
        }
        uint64_t steps = 0;
        MT_EXPECT(&T, hvd_optimizer_steps(dopt, &steps), HVD_OK);
        MT_CHECK(&T, steps == STEPS, "%s: %llu steps applied, want %d", what,
                 (unsigned long long)steps, STEPS);
        if (saved) checkpoints(&host, hopt, dev_cfg, stream, tag, what);
    }
    MT_EXPECT(&T, hvd_optimizer_destroy(dopt), HVD_OK);
    MT_EXPECT(&T, hvd_optimizer_destroy(hopt), HVD_OK);
    cudaDeviceSynchronize();
    model_free(&dev, 1);
    model_free(&host, 0);
    if (own_stream) cudaStreamDestroy(stream);
    mt_end(&T);
}

/* Memory that is not where hvd_param.device says is refused at creation, naming it: a host
 * update would crash on device memory, a kernel fault on host memory. */
static void test_misplaced(void) {
    mt_begin(&T, "gpu.optimizer misplaced memory");
    float *on_device = gt_alloc(16 * sizeof(float)), on_host[16] = {0};
    hvd_param says_cpu = {"misplaced", on_device, on_device, 16, HVD_FLOAT32, HVD_DEVICE_CPU};
    hvd_param says_gpu = {"misplaced", on_host, on_host, 16, HVD_FLOAT32, local_rank};
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    hvd_optimizer *opt = NULL;
    const hvd_param *cases[2] = {&says_cpu, &says_gpu};
    for (int c = 0; c < 2; c++) {
        if (MT_EXPECT(&T, hvd_optimizer_create(cases[c], 1, &cfg, &opt), HVD_ERR_INVALID_ARG))
            MT_CHECK(&T, strstr(hvd_last_error(), "'misplaced': its data is") != NULL && opt == NULL,
                     "the message names the parameter and its memory: %s", hvd_last_error());
        hvd_optimizer_destroy(opt);
        opt = NULL;
    }
    /* the last rank alone gets it wrong (the others register their device memory right): it
     * refuses, and the others learn so at once instead of waiting for it in a collective */
    int wrong = T.rank == T.size - 1;
    hvd_param right = says_cpu;
    right.device = local_rank;
    hvd_status st = hvd_optimizer_create(wrong ? &says_cpu : &right, 1, &cfg, &opt);
    if (MT_EXPECT(&T, st, HVD_ERR_INVALID_ARG))
        MT_CHECK(&T, strstr(hvd_last_error(), wrong ? "its data is" : "another rank") != NULL &&
                     opt == NULL, "rank %d of %d: %s", T.rank, T.size, hvd_last_error());
    hvd_optimizer_destroy(opt);
    cudaFree(on_device);
    mt_end(&T);
}

int main(int argc, char **argv) {
    int started = gt_start(&argc, &argv, &T, &local_rank, 1);
    if (started != 0) return started;
    hvd_optimizer_config sgd = HVD_OPTIMIZER_CONFIG_DEFAULT;
    sgd.lr = 0.05, sgd.momentum = 0.9, sgd.nesterov = 1, sgd.weight_decay = 0.01;
    hvd_optimizer_config adam = HVD_OPTIMIZER_CONFIG_DEFAULT;
    adam.kind = HVD_OPT_ADAM, adam.lr = 0.01, adam.weight_decay = 0.001;
    hvd_optimizer_config adamw = adam;
    adamw.kind = HVD_OPT_ADAMW;
    hvd_optimizer_config two_passes = sgd;
    two_passes.backward_passes_per_step = 2;
    test_misplaced();
    int tag = 0;
    for (int own_stream = 0; own_stream < 2; own_stream++) {
        run_setting("SGD momentum Nesterov decay", sgd, own_stream, tag++);
        run_setting("Adam", adam, own_stream, tag++);
        run_setting("AdamW", adamw, own_stream, tag++);
        run_setting("SGD two passes per step", two_passes, own_stream, tag++);
    }
    return gt_finish(&T);
}
