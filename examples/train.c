/*
 * train.c - trains an image classifier on Fashion-MNIST, data-parallel over libhvdc ranks.
 *
 *   mpirun -np 2 build/examples/train --epochs 5 --min-accuracy 0.85
 *
 * Every rank loads the whole data set and holds a full copy of the model. Each step:
 *
 *   epoch permutation (same seed on every rank, reshuffled per epoch, like PyTorch's
 *   DistributedSampler): rank r takes perm[r], perm[r+size], perm[r+2*size], ...
 *        |
 *   forward + backward on its B/size examples (B = --batch, the global batch)
 *        |  backward goes last layer first; each gradient tensor is handed to
 *        |  hvd_allreduce_async(HVD_AVERAGE) the moment it is final, so the reduction of
 *        |  layer L overlaps the backward pass of layers L-1 .. 1
 *   hvd_wait on every handle  ->  every rank holds the same average gradient
 *        |
 *   SGD with momentum, identical on every rank, so the replicas never drift apart.
 *
 * Because rank r's k-th batch is perm[k*B + r + size*j], j < B/size, the ranks together see exactly the
 * global batch a single process would see, so np = 1 and np = 2 follow the same trajectory up
 * to rounding. Rank 0 draws the initial parameters and hvd_broadcast gives them to the others.
 * After each epoch the test set is split across the ranks and the loss and correct counts are
 * summed with hvd_allreduce; rank 0 prints the global figures.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "hvdc.h"
#include "idx_reader.h"
#include "model.h"
#include "rng.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define NORM_MEAN 0.2860f /* Fashion-MNIST training-set pixel mean, after scaling to [0, 1] */
#define NORM_STD 0.3530f  /* and standard deviation */

/* Examples may exit; on failure print where, the status and libhvdc's detail message. */
#define HVD_CHECK(call)                                                                     \
    do {                                                                                    \
        hvd_status st_ = (call);                                                            \
        if (st_ != HVD_OK) {                                                                \
            fprintf(stderr, "train: %s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, \
                    hvd_status_string(st_), hvd_last_error());                              \
            exit(EXIT_FAILURE);                                                             \
        }                                                                                   \
    } while (0)

typedef struct config {
    int epochs;
    int batch; // global batch B, split as B/size per rank
    float lr;
    float momentum;
    uint64_t seed;
    const char *data_dir;
    const char *fusion_threshold; // NULL: libhvdc's default
    double min_accuracy;          // < 0: no check
    model_kind kind;
} config;

static void usage(FILE *f) {
    fprintf(f,
            "usage: train [options]   (run under mpirun -np N for N data-parallel ranks)\n"
            "  --epochs N               passes over the training set (default 5)\n"
            "  --batch B                global batch, split B/N per rank (default 128)\n"
            "  --lr X                   SGD learning rate (default 0.05)\n"
            "  --momentum X             SGD momentum (default 0.9)\n"
            "  --seed S                 seed for initialization and shuffling (default 1)\n"
            "  --model mlp|cnn          784-256-128-10 MLP, or a 2-conv CNN (default mlp)\n"
            "  --data DIR               directory of the Fashion-MNIST .gz files\n"
            "                           (default " DEFAULT_DATA_DIR ")\n"
            "  --fusion-threshold BYTES sets HVD_FUSION_THRESHOLD for libhvdc (e.g. 67108864,\n"
            "                           64M; 0 turns fusion off)\n"
            "  --min-accuracy X         exit with status 1 if the final test accuracy is below X\n"
            "  --help                   this text\n"
            "Set OPENBLAS_NUM_THREADS to let BLAS use more than 1 thread per rank.\n");
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* Returns 0, 1 for --help, -1 on a bad command line (message printed). */
static int config_parse(config *c, int argc, char **argv) {
    *c = (config){.epochs = 5, .batch = 128, .lr = 0.05f, .momentum = 0.9f, .seed = 1,
                  .data_dir = DEFAULT_DATA_DIR, .min_accuracy = -1.0, .kind = MODEL_MLP};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) return 1;
        if (i + 1 >= argc) {
            fprintf(stderr, "train: %s needs a value (or unknown option); see --help\n", flag);
            return -1;
        }
        const char *val = argv[++i];
        long n = 0;
        double x = 0.0;
        int bad = 0;
        if (strcmp(flag, "--epochs") == 0) {
            bad = parse_int(val, 1, 10000, &n);
            c->epochs = (int)n;
        } else if (strcmp(flag, "--batch") == 0) {
            bad = parse_int(val, 1, 1 << 20, &n);
            c->batch = (int)n;
        } else if (strcmp(flag, "--lr") == 0) {
            bad = parse_double(val, 0.0, 100.0, &x);
            c->lr = (float)x;
        } else if (strcmp(flag, "--momentum") == 0) {
            bad = parse_double(val, 0.0, 0.999999, &x);
            c->momentum = (float)x;
        } else if (strcmp(flag, "--seed") == 0) {
            bad = parse_int(val, 0, 2147483647L, &n);
            c->seed = (uint64_t)n;
        } else if (strcmp(flag, "--model") == 0) {
            bad = model_kind_parse(val, &c->kind);
        } else if (strcmp(flag, "--data") == 0) {
            c->data_dir = val;
        } else if (strcmp(flag, "--fusion-threshold") == 0) {
            c->fusion_threshold = val; // hvd_init validates it and says what it accepts
        } else if (strcmp(flag, "--min-accuracy") == 0) {
            bad = parse_double(val, 0.0, 1.0, &x);
            c->min_accuracy = x;
        } else {
            fprintf(stderr, "train: unknown option %s; see --help\n", flag);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "train: bad value '%s' for %s; see --help\n", val, flag);
            return -1;
        }
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Loads DIR/{prefix}-images-idx3-ubyte.gz and its labels. Returns 0 or -1 (message printed). */
static int dataset_load(idx_dataset *ds, const char *dir, const char *prefix, int rank) {
    char images[4096], labels[4096], err[1024];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    idx_status st = idx_dataset_load(ds, images, labels, 28, 28, MODEL_NUM_CLASSES, err,
                                     sizeof err);
    if (st != IDX_OK) {
        fprintf(stderr, "train: rank %d: %s: %s\n", rank, idx_status_string(st), err);
        return -1;
    }
    return 0;
}

/* Copies examples idx[0..B) of ds into x (B, 784), scaled and normalized, and y (B). */
static void batch_gather(float *x, uint8_t *y, const idx_dataset *ds, const uint32_t *idx,
                         int B) {
    const float scale = 1.0f / (255.0f * NORM_STD), shift = NORM_MEAN / NORM_STD;
    for (int b = 0; b < B; b++) {
        const uint8_t *img = ds->images + (size_t)idx[b] * MODEL_IMAGE_SIZE;
        float *row = x + (size_t)b * MODEL_IMAGE_SIZE;
        for (int k = 0; k < MODEL_IMAGE_SIZE; k++) row[k] = (float)img[k] * scale - shift;
        y[b] = ds->labels[idx[b]];
    }
}

/* The same permutation of 0..n-1 on every rank for a given (seed, epoch): Fisher-Yates. */
static void permutation_fill(uint32_t *perm, uint32_t n, uint64_t seed, int epoch) {
    rng r;
    rng_init(&r, seed, (uint64_t)epoch + 1);
    for (uint32_t i = 0; i < n; i++) perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = rng_below(&r, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ---- gradient all-reduce, overlapped with the backward pass ---------------------------- */

typedef struct grad_sync {
    model *m;
    hvd_handle handles[MODEL_MAX_TENSORS];
    char names[MODEL_MAX_TENSORS][48]; // "grad.fc1.weight", the same on every rank
} grad_sync;

/* model_backward's callback: tensor i's gradient is final, start averaging it in place. */
static void grad_sync_submit(void *ctx, int i) {
    grad_sync *g = ctx;
    model_tensor *t = &g->m->tensors[i];
    HVD_CHECK(hvd_allreduce_async(g->names[i], t->grad, t->grad, t->count, HVD_FLOAT32,
                                  HVD_AVERAGE, NULL, &g->handles[i]));
}

static void grad_sync_wait(grad_sync *g) {
    for (int i = 0; i < g->m->num_tensors; i++) HVD_CHECK(hvd_wait(&g->handles[i]));
}

/* v = momentum * v + g; w -= lr * v */
static void sgd_update(float *params, float *velocity, const float *grads, size_t n, float lr,
                       float momentum) {
    for (size_t i = 0; i < n; i++) {
        velocity[i] = momentum * velocity[i] + grads[i];
        params[i] -= lr * velocity[i];
    }
}

/* Loss and accuracy over this rank's contiguous share of ds, summed over ranks:
 * stats = {loss sum, correct, examples}, identical on every rank on return. */
static void evaluate(model *m, const idx_dataset *ds, float *x, uint8_t *y, uint32_t *idx,
                     int rank, int size, double stats[3]) {
    int n = ds->count, per = n / size, extra = n % size;
    int begin = rank * per + (rank < extra ? rank : extra);
    int end = begin + per + (rank < extra ? 1 : 0);
    double loss = 0.0;
    long correct = 0;
    for (int s = begin; s < end; s += m->max_batch) {
        int B = end - s < m->max_batch ? end - s : m->max_batch;
        for (int b = 0; b < B; b++) idx[b] = (uint32_t)(s + b);
        batch_gather(x, y, ds, idx, B);
        loss += model_forward(m, x, y, B, &correct);
    }
    stats[0] = loss;
    stats[1] = (double)correct;
    stats[2] = (double)(end - begin);
    HVD_CHECK(hvd_allreduce("eval.stats", stats, stats, 3, HVD_FLOAT64, HVD_SUM));
}

/* A hash of the parameter bytes; equal on all ranks iff the replicas agree (whp). */
static int64_t params_hash(const model *m) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)m->params;
    for (size_t i = 0; i < m->num_params * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ull;
    return (int64_t)(h >> 1);
}

/* 1 if every rank holds the same parameters; collective. */
static int params_agree(const model *m) {
    int64_t lo = params_hash(m), hi = lo;
    HVD_CHECK(hvd_allreduce("check.params.min", &lo, &lo, 1, HVD_INT64, HVD_MIN));
    HVD_CHECK(hvd_allreduce("check.params.max", &hi, &hi, 1, HVD_INT64, HVD_MAX));
    return lo == hi;
}

int main(int argc, char **argv) {
    config cfg;
    int pr = config_parse(&cfg, argc, argv);
    if (pr > 0) usage(stdout);
    if (pr != 0) return pr > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
    // The ranks share the machine's cores: one BLAS thread each unless the user says otherwise.
    // OpenBLAS reads OPENBLAS_NUM_THREADS when it is loaded, before main, so set it directly too.
    if (getenv("OPENBLAS_NUM_THREADS") == NULL) {
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        openblas_set_num_threads(1);
    }
    if (cfg.fusion_threshold != NULL) setenv("HVD_FUSION_THRESHOLD", cfg.fusion_threshold, 1);

    HVD_CHECK(hvd_init());
    int rank, size;
    HVD_CHECK(hvd_rank(&rank));
    HVD_CHECK(hvd_size(&size));
    if (cfg.batch % size != 0) {
        if (rank == 0) {
            fprintf(stderr, "train: --batch %d is not divisible by the %d ranks; use a multiple "
                    "of %d\n", cfg.batch, size, size);
        }
        hvd_shutdown();
        return EXIT_FAILURE;
    }
    int local_batch = cfg.batch / size;

    // Every rank reads the data; they agree on success before anyone goes on.
    idx_dataset train = {0}, test = {0};
    int32_t ok = dataset_load(&train, cfg.data_dir, "train", rank) == 0 &&
                 dataset_load(&test, cfg.data_dir, "t10k", rank) == 0;
    HVD_CHECK(hvd_allreduce("setup.data_ok", &ok, &ok, 1, HVD_INT32, HVD_MIN));
    model m = {0};
    float *velocity = NULL, *x = NULL;
    uint8_t *y = NULL;
    uint32_t *perm = NULL, *idx = NULL;
    if (ok) {
        ok = model_init(&m, cfg.kind, local_batch) == 0;
        velocity = calloc(m.num_params, sizeof(float));
        x = malloc((size_t)local_batch * MODEL_IMAGE_SIZE * sizeof(float));
        y = malloc((size_t)local_batch);
        perm = malloc((size_t)train.count * sizeof(uint32_t));
        idx = malloc((size_t)local_batch * sizeof(uint32_t));
        ok = ok && velocity && x && y && perm && idx;
        if (!ok) fprintf(stderr, "train: rank %d: out of memory\n", rank);
        HVD_CHECK(hvd_allreduce("setup.mem_ok", &ok, &ok, 1, HVD_INT32, HVD_MIN));
    }
    int rc = EXIT_FAILURE;
    if (!ok) {
        if (rank == 0) fprintf(stderr, "train: giving up (see the messages above)\n");
        goto done;
    }
    int per_rank = train.count / size;  // examples in this rank's share of an epoch
    int steps = per_rank / local_batch; // the rest of the share is dropped (drop_last)
    if (steps < 1) {
        if (rank == 0) {
            fprintf(stderr, "train: --batch %d is larger than the %d training images; use a "
                    "smaller batch\n", cfg.batch, train.count);
        }
        goto done;
    }

    // Rank 0's initial parameters win; the others draw different ones to show the broadcast.
    model_init_params(&m, cfg.seed + 7919u * (uint64_t)rank);
    for (int i = 0; i < m.num_tensors; i++) {
        char name[64];
        snprintf(name, sizeof name, "init.%s", m.tensors[i].name);
        HVD_CHECK(hvd_broadcast(name, m.tensors[i].param, m.tensors[i].count, HVD_FLOAT32, 0));
    }
    grad_sync sync = {.m = &m};
    for (int i = 0; i < m.num_tensors; i++) {
        snprintf(sync.names[i], sizeof sync.names[i], "grad.%s", m.tensors[i].name);
    }

    if (rank == 0) {
        const char *ft = getenv("HVD_FUSION_THRESHOLD");
        printf("# fashion-mnist: %d train, %d test images from %s\n", train.count, test.count,
               cfg.data_dir);
        printf("# model %s, %zu parameters in %d tensors; ranks %d; global batch %d (%d per "
               "rank), %d steps per epoch\n", model_kind_name(cfg.kind), m.num_params,
               m.num_tensors, size, cfg.batch, local_batch, steps);
        printf("# sgd lr %g momentum %g, seed %llu, HVD_FUSION_THRESHOLD %s\n", cfg.lr,
               cfg.momentum, (unsigned long long)cfg.seed, ft ? ft : "(default)");
        printf("# samples/s: training images per second, all ranks together; train_s: the "
               "training steps; total_s: with evaluation\n"
               "# wait_s: the part of train_s spent in hvd_wait after the backward pass "
               "(communication not overlapped)\n");
        printf("%5s %10s %9s %9s %10s %9s %8s %8s\n", "epoch", "loss", "train_acc",
               "test_acc", "samples/s", "train_s", "wait_s", "total_s");
        fflush(stdout);
    }

    double test_acc = 0.0, t_start = now_s();
    for (int epoch = 1; epoch <= cfg.epochs; epoch++) {
        double t0 = now_s(), t_wait = 0.0, loss = 0.0;
        long correct = 0;
        permutation_fill(perm, (uint32_t)train.count, cfg.seed, epoch);
        for (int step = 0; step < steps; step++) {
            // this rank's batch: perm[rank + size*j] for j in [step*b, (step+1)*b)
            for (int b = 0; b < local_batch; b++) {
                idx[b] = perm[rank + (size_t)size * ((size_t)step * local_batch + b)];
            }
            batch_gather(x, y, &train, idx, local_batch);
            loss += model_forward(&m, x, y, local_batch, &correct);
            model_backward(&m, grad_sync_submit, &sync);
            double tw = now_s();
            grad_sync_wait(&sync);
            t_wait += now_s() - tw;
            sgd_update(m.params, velocity, m.grads, m.num_params, cfg.lr, cfg.momentum);
        }
        double t_train = now_s() - t0;
        double tr[3] = {loss, (double)correct, (double)steps * local_batch};
        HVD_CHECK(hvd_allreduce("train.stats", tr, tr, 3, HVD_FLOAT64, HVD_SUM));
        double te[3];
        evaluate(&m, &test, x, y, idx, rank, size, te);
        if ((long)te[2] != test.count) { // the ranks' shares must tile the test set exactly
            fprintf(stderr, "train: rank %d: evaluated %.0f test images, expected %d\n", rank,
                    te[2], test.count);
            goto done;
        }
        test_acc = te[1] / te[2];
        if (rank == 0) {
            printf("%5d %10.4f %9.4f %9.4f %10.0f %9.2f %8.2f %8.2f\n", epoch, tr[0] / tr[2],
                   tr[1] / tr[2], test_acc, tr[2] / t_train, t_train, t_wait, now_s() - t0);
            fflush(stdout);
        }
    }
    int agree = params_agree(&m);
    if (rank == 0) {
        printf("# %.1f s in all; parameters identical on all ranks: %s\n", now_s() - t_start,
               agree ? "yes" : "NO");
        printf("final test accuracy: %.4f\n", test_acc);
        fflush(stdout);
    }

    rc = EXIT_SUCCESS;
    if (!agree) {
        if (rank == 0) fprintf(stderr, "train: the ranks' parameters diverged\n");
        rc = EXIT_FAILURE;
    } else if (cfg.min_accuracy >= 0.0 && test_acc < cfg.min_accuracy) {
        if (rank == 0) {
            fprintf(stderr, "train: final test accuracy %.4f is below --min-accuracy %.4f\n",
                    test_acc, cfg.min_accuracy);
        }
        rc = EXIT_FAILURE;
    }
done:
    free(velocity);
    free(x);
    free(y);
    free(perm);
    free(idx);
    model_free(&m);
    idx_dataset_free(&train);
    idx_dataset_free(&test);
    HVD_CHECK(hvd_shutdown());
    return rc;
}
