/*
 * train.c - trains an image classifier on Fashion-MNIST, data-parallel over libhvdc ranks.
 *
 *   build/hvdcrun -np 2 build/examples/train --epochs 5 --min-accuracy 0.85
 *   build/hvdcrun -np 2 build/examples/train --model cnn --checkpoint ck.bin   (then add --resume)
 *   build/hvdcrun -np 4 --min-np 2 --host-discovery-script hosts.sh build/examples/train --elastic
 *
 * Every rank loads the whole data set and holds a full copy of the model. Each step:
 *
 *   hvd_sampler (same shuffle on every rank for each epoch, like PyTorch's DistributedSampler):
 *   rank r's k-th batch is positions (k*b + j)*size + r, j < b = B/size, of the epoch's order
 *        |
 *   forward + backward on its b examples (B = --batch, the global batch)
 *        |  backward goes last layer first; each gradient tensor is announced with
 *        |  hvd_optimizer_grad_ready the moment it is final, which starts its averaging
 *        |  all-reduce, so the reduction of layer L overlaps the backward of layers L-1 .. 1
 *   hvd_optimizer_step: waits for the all-reduces, then SGD (or Adam) identically on every
 *   rank, so the replicas never drift apart.
 *
 * The ranks together see exactly the global batch a single process would see, so np = 1 and
 * np = 2 follow the same trajectory up to rounding. Creating the optimizer broadcasts rank 0's
 * initial parameters. After each epoch the test set is split across the ranks and the loss and
 * accuracy are averaged with hvd_metrics_reduce, weighted by each rank's share; rank 0 prints
 * the global figures. With --checkpoint, rank 0 saves parameters, optimizer state, sampler
 * and position after every epoch (and every --checkpoint-every steps); --resume continues.
 *
 * --device gpu (builds with libhvdc's GPU backend and cuBLAS): each rank runs the MLP on the
 * CUDA device of its local rank (model_gpu.h): parameters, gradients and activations live
 * there, the optimizer's all-reduces go through NCCL and its updates are CUDA kernels, all
 * queued on the model's stream; the host reads the loss and accuracy once per epoch.
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
#include "elastic.h"
#include "model.h"
#include "model_gpu.h"

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
    double lr; // < 0: the optimizer's default
    int cosine; // lr follows a half cosine from lr to 0 over all steps of the run
    double momentum;
    double weight_decay;
    hvd_optimizer_kind optimizer;
    hvd_compression compression;
    uint64_t seed;
    const char *data_dir;
    const char *fusion_threshold; // NULL: libhvdc's default
    const char *checkpoint;       // NULL: no checkpoints
    int resume;
    long checkpoint_every;        // steps; 0: only at the end of each epoch
    long stop_after;              // steps; 0: run all epochs
    double min_accuracy;          // < 0: no check
    int elastic;                  // --elastic: hvd_elastic state, commits (elastic.c)
    const char *elastic_dir;      // NULL: HVD_ELASTIC_DIR (hvdcrun sets it)
    long commit_every;            // steps between elastic commits
    long log_every;               // rank 0 prints "# step N" every N steps; 0: never
    model_kind kind;
    int gpu;                      // --device gpu
} config;

static void usage(FILE *f) {
    fprintf(f,
            "usage: train [options]   (run under hvdcrun -np N for N data-parallel ranks)\n"
            "  --epochs N               passes over the training set (default 5)\n"
            "  --batch B                global batch, split B/N per rank (default 128)\n"
            "  --lr X                   learning rate (default 0.05 for sgd, 0.001 for adam)\n"
            "  --lr-schedule cosine|constant  cosine: lr * (1 + cos(pi * step/steps))/2 over the\n"
            "                           whole run (default cosine)\n"
            "  --momentum X             SGD momentum (default 0.9)\n"
            "  --weight-decay X         L2 for sgd/adam, decoupled for adamw (default 0)\n"
            "  --optimizer sgd|adam|adamw  inner optimizer (default sgd)\n"
            "  --compression none|fp16|bf16  gradients on the wire (default none)\n"
            "  --seed S                 seed for initialization and shuffling (default 1)\n"
            "  --model mlp|cnn          784-256-128-10 MLP, or a 2-conv CNN (default mlp)\n"
            "  --device cpu|gpu         gpu: the mlp on CUDA device <local rank> (cuBLAS), one\n"
            "                           rank per GPU; needs a CUDA build (default cpu)\n"
            "  --data DIR               directory of the Fashion-MNIST .gz files\n"
            "                           (default " DEFAULT_DATA_DIR ")\n"
            "  --fusion-threshold BYTES sets HVD_FUSION_THRESHOLD for libhvdc (e.g. 67108864,\n"
            "                           64M; 0 turns fusion off)\n"
            "  --checkpoint PATH        rank 0 saves a checkpoint there after every epoch\n"
            "  --checkpoint-every N     ... and every N steps (default 0: epochs only)\n"
            "  --resume                 continue from --checkpoint PATH\n"
            "  --stop-after N           stop after N steps in all (saving a checkpoint first\n"
            "                           with --checkpoint), as if interrupted\n"
            "  --elastic                keep the training state in an elastic commit (run under\n"
            "                           hvdcrun --min-np/--max-np/--host-discovery-script): after\n"
            "                           a restart on other hosts, continue from the last commit\n"
            "  --elastic-dir DIR        where the commits go (default: $HVD_ELASTIC_DIR)\n"
            "  --commit-every N         --elastic: commit every N steps (default 50) and after\n"
            "                           every epoch; a failure loses at most N steps\n"
            "  --log-every N            rank 0 prints '# step S epoch E batch B' every N steps\n"
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
    *c = (config){.epochs = 5, .batch = 128, .lr = -1.0, .cosine = 1, .momentum = 0.9, .seed = 1,
                  .optimizer = HVD_OPT_SGD, .compression = HVD_COMPRESS_NONE,
                  .data_dir = DEFAULT_DATA_DIR, .min_accuracy = -1.0, .kind = MODEL_MLP,
                  .commit_every = 50};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) return 1;
        if (strcmp(flag, "--resume") == 0) {
            c->resume = 1;
            continue;
        }
        if (strcmp(flag, "--elastic") == 0) {
            c->elastic = 1;
            continue;
        }
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
            c->lr = x;
        } else if (strcmp(flag, "--lr-schedule") == 0) {
            if (strcmp(val, "cosine") == 0) c->cosine = 1;
            else if (strcmp(val, "constant") == 0) c->cosine = 0;
            else bad = 1;
        } else if (strcmp(flag, "--momentum") == 0) {
            bad = parse_double(val, 0.0, 0.999999, &x);
            c->momentum = x;
        } else if (strcmp(flag, "--weight-decay") == 0) {
            bad = parse_double(val, 0.0, 1.0, &x);
            c->weight_decay = x;
        } else if (strcmp(flag, "--optimizer") == 0) {
            if (strcmp(val, "sgd") == 0) c->optimizer = HVD_OPT_SGD;
            else if (strcmp(val, "adam") == 0) c->optimizer = HVD_OPT_ADAM;
            else if (strcmp(val, "adamw") == 0) c->optimizer = HVD_OPT_ADAMW;
            else bad = 1;
        } else if (strcmp(flag, "--compression") == 0) {
            if (strcmp(val, "none") == 0) c->compression = HVD_COMPRESS_NONE;
            else if (strcmp(val, "fp16") == 0) c->compression = HVD_COMPRESS_FP16;
            else if (strcmp(val, "bf16") == 0) c->compression = HVD_COMPRESS_BF16;
            else bad = 1;
        } else if (strcmp(flag, "--seed") == 0) {
            bad = parse_int(val, 0, 2147483647L, &n);
            c->seed = (uint64_t)n;
        } else if (strcmp(flag, "--model") == 0) {
            bad = model_kind_parse(val, &c->kind);
        } else if (strcmp(flag, "--device") == 0) {
            bad = strcmp(val, "cpu") != 0 && strcmp(val, "gpu") != 0;
            c->gpu = strcmp(val, "gpu") == 0;
        } else if (strcmp(flag, "--data") == 0) {
            c->data_dir = val;
        } else if (strcmp(flag, "--fusion-threshold") == 0) {
            c->fusion_threshold = val; // hvd_init validates it and says what it accepts
        } else if (strcmp(flag, "--checkpoint") == 0) {
            c->checkpoint = val;
        } else if (strcmp(flag, "--checkpoint-every") == 0) {
            bad = parse_int(val, 0, 1L << 40, &n);
            c->checkpoint_every = n;
        } else if (strcmp(flag, "--stop-after") == 0) {
            bad = parse_int(val, 1, 1L << 40, &n);
            c->stop_after = n;
        } else if (strcmp(flag, "--elastic-dir") == 0) {
            c->elastic_dir = val;
            c->elastic = 1;
        } else if (strcmp(flag, "--commit-every") == 0) {
            bad = parse_int(val, 0, 1L << 40, &n);
            c->commit_every = n;
        } else if (strcmp(flag, "--log-every") == 0) {
            bad = parse_int(val, 0, 1L << 40, &n);
            c->log_every = n;
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
    if ((c->resume || c->checkpoint_every > 0) && c->checkpoint == NULL) {
        fprintf(stderr, "train: --resume and --checkpoint-every need --checkpoint PATH\n");
        return -1;
    }
    if (c->elastic && (c->checkpoint != NULL || c->stop_after > 0)) {
        fprintf(stderr, "train: --elastic keeps its own commits: drop --checkpoint, --resume and "
                "--stop-after\n");
        return -1;
    }
    if (c->lr < 0.0) c->lr = c->optimizer == HVD_OPT_SGD ? 0.05 : 0.001;
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
static void batch_gather(float *x, uint8_t *y, const idx_dataset *ds, const size_t *idx,
                         int B) {
    const float scale = 1.0f / (255.0f * NORM_STD), shift = NORM_MEAN / NORM_STD;
    for (int b = 0; b < B; b++) {
        const uint8_t *img = ds->images + (size_t)idx[b] * MODEL_IMAGE_SIZE;
        float *row = x + (size_t)b * MODEL_IMAGE_SIZE;
        for (int k = 0; k < MODEL_IMAGE_SIZE; k++) row[k] = (float)img[k] * scale - shift;
        y[b] = ds->labels[idx[b]];
    }
}

/* model_backward's callback: tensor i's gradient is final; start averaging it. */
static void grad_ready(void *ctx, int i) {
    HVD_CHECK(hvd_optimizer_grad_ready((hvd_optimizer *)ctx, i));
}

/* A failed device call in the example: say what failed and stop this rank (the launcher then
 * ends the others). */
#define GPU_CHECK(mg, call)                                                                  \
    do {                                                                                     \
        if ((call) != 0) {                                                                   \
            fprintf(stderr, "train: %s: %s\n", #call, model_gpu_error(mg));                  \
            exit(EXIT_FAILURE);                                                              \
        }                                                                                    \
    } while (0)

/* Mean loss and accuracy over the whole of ds, each rank evaluating a contiguous share and
 * hvd_metrics_reduce weighting the shares by their sizes (on the device when mg is not NULL).
 * Collective. */
static void evaluate(model *m, model_gpu *mg, const idx_dataset *ds, float *x, uint8_t *y,
                     size_t *idx, int rank, int size, double metrics[2]) {
    int n = ds->count, per = n / size, extra = n % size;
    int begin = rank * per + (rank < extra ? rank : extra);
    int end = begin + per + (rank < extra ? 1 : 0);
    double loss = 0.0;
    long correct = 0;
    for (int s = begin; s < end; s += m->max_batch) {
        int B = end - s < m->max_batch ? end - s : m->max_batch;
        for (int b = 0; b < B; b++) idx[b] = (size_t)(s + b);
        batch_gather(x, y, ds, idx, B);
        if (mg != NULL) GPU_CHECK(mg, model_gpu_forward(mg, x, y, B));
        else loss += model_forward(m, x, y, B, &correct);
    }
    if (mg != NULL) GPU_CHECK(mg, model_gpu_take_metrics(mg, &loss, &correct));
    int local = end - begin;
    metrics[0] = local > 0 ? loss / local : 0.0;
    metrics[1] = local > 0 ? (double)correct / local : 0.0;
    HVD_CHECK(hvd_metrics_reduce("eval.metrics", metrics, 2, HVD_AVERAGE, (double)local));
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

static void checkpoint_save(const config *cfg, const hvd_optimizer *opt, const hvd_sampler *s,
                            int epoch, int step, int rank) {
    hvd_checkpoint_info info = {.epoch = (uint64_t)epoch, .step = (uint64_t)step};
    HVD_CHECK(hvd_checkpoint_save(cfg->checkpoint, opt, s, &info));
    if (rank == 0) {
        printf("# checkpoint %s saved (next: epoch %d, step %d)\n", cfg->checkpoint, epoch, step);
        fflush(stdout);
    }
}

static const char *optimizer_name(hvd_optimizer_kind k) {
    return k == HVD_OPT_SGD ? "sgd" : k == HVD_OPT_ADAM ? "adam" : "adamw";
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
    float *x = NULL;
    uint8_t *y = NULL;
    size_t *idx = NULL;
    hvd_optimizer *opt = NULL;
    hvd_sampler *sampler = NULL;
    train_elastic el = {0}; // --elastic only
    model_gpu *mg = NULL;
    if (ok) {
        ok = model_init(&m, cfg.kind, local_batch) == 0;
        x = malloc((size_t)local_batch * MODEL_IMAGE_SIZE * sizeof(float));
        y = malloc((size_t)local_batch);
        idx = malloc((size_t)local_batch * sizeof(size_t));
        ok = ok && x && y && idx;
        if (!ok) fprintf(stderr, "train: rank %d: out of memory\n", rank);
        HVD_CHECK(hvd_allreduce("setup.mem_ok", &ok, &ok, 1, HVD_INT32, HVD_MIN));
    }
    int rc = EXIT_FAILURE;
    if (!ok) {
        if (rank == 0) fprintf(stderr, "train: giving up (see the messages above)\n");
        goto done;
    }
    // Each epoch every rank gets floor(N/size) shuffled examples (drop_last), in whole batches.
    HVD_CHECK(hvd_sampler_create((size_t)train.count, size, rank, 1, cfg.seed, 1, &sampler));
    size_t per_rank;
    HVD_CHECK(hvd_sampler_num_samples(sampler, &per_rank, NULL));
    int steps = (int)(per_rank / (size_t)local_batch); // an incomplete last batch is dropped
    if (steps < 1) {
        if (rank == 0) {
            fprintf(stderr, "train: --batch %d is larger than the %d training images; use a "
                    "smaller batch\n", cfg.batch, train.count);
        }
        goto done;
    }

    // Rank 0's initial parameters win (creating the optimizer broadcasts them); the others
    // draw different ones to show that.
    model_init_params(&m, cfg.seed + 7919u * (uint64_t)rank);
    int device = HVD_DEVICE_CPU;
    if (cfg.gpu) { // one rank per GPU: the local rank picks the device; all ranks agree first
        char why[512] = "";
        HVD_CHECK(hvd_local_rank(&device));
        int32_t gpu_ok = 1;
        if (cfg.compression != HVD_COMPRESS_NONE) {
            snprintf(why, sizeof why, "--compression is not supported there yet (the "
                     "optimizer compresses host gradients only); drop it or use --device cpu");
            gpu_ok = 0;
        } else if (model_gpu_create(&mg, &m, device, why, sizeof why) != 0) {
            gpu_ok = 0;
        }
        if (!gpu_ok) fprintf(stderr, "train: rank %d: --device gpu: %s\n", rank, why);
        HVD_CHECK(hvd_allreduce("setup.gpu_ok", &gpu_ok, &gpu_ok, 1, HVD_INT32, HVD_MIN));
        if (!gpu_ok) {
            if (rank == 0) fprintf(stderr, "train: giving up (see the messages above)\n");
            goto done;
        }
    }
    hvd_param params[MODEL_MAX_TENSORS];
    for (int i = 0; i < m.num_tensors; i++) {
        params[i] = (hvd_param){.name = m.tensors[i].name, .data = m.tensors[i].param,
                                .grad = m.tensors[i].grad, .count = m.tensors[i].count,
                                .dtype = HVD_FLOAT32, .device = HVD_DEVICE_CPU};
        if (mg != NULL) {
            params[i].data = model_gpu_param(mg, i);
            params[i].grad = model_gpu_grad(mg, i);
            params[i].device = device;
        }
    }
    hvd_optimizer_config ocfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    ocfg.kind = cfg.optimizer;
    ocfg.lr = cfg.lr;
    ocfg.momentum = cfg.optimizer == HVD_OPT_SGD ? cfg.momentum : 0.0;
    ocfg.weight_decay = cfg.weight_decay;
    ocfg.compression = cfg.compression;
    ocfg.stream = mg != NULL ? model_gpu_stream(mg) : NULL;
    HVD_CHECK(hvd_optimizer_create(params, m.num_tensors, &ocfg, &opt));

    int start_epoch = 1, start_step = 0;
    if (cfg.elastic)
        train_elastic_start(&el, cfg.elastic_dir, cfg.commit_every, opt, sampler, rank, &start_epoch);
    if (cfg.resume) {
        hvd_checkpoint_info info;
        hvd_status st = hvd_checkpoint_load(cfg.checkpoint, opt, sampler, &info);
        if (st != HVD_OK) {
            if (rank == 0) fprintf(stderr, "train: cannot resume: %s\n", hvd_last_error());
            goto done;
        }
        start_epoch = (int)info.epoch;
        start_step = (int)info.step;
        if (rank == 0) {
            printf("# resumed from %s: epoch %d, step %d\n", cfg.checkpoint, start_epoch,
                   start_step);
        }
    }

    if (rank == 0) {
        const char *ft = getenv("HVD_FUSION_THRESHOLD");
        const char *comp[] = {"none", "fp16", "bf16"};
        printf("# fashion-mnist: %d train, %d test images from %s\n", train.count, test.count,
               cfg.data_dir);
        printf("# model %s, %zu parameters in %d tensors; ranks %d; global batch %d (%d per "
               "rank), %d steps per epoch\n", model_kind_name(cfg.kind), m.num_params,
               m.num_tensors, size, cfg.batch, local_batch, steps);
        printf("# %s lr %g (%s) momentum %g weight decay %g, compression %s, seed %llu, "
               "HVD_FUSION_THRESHOLD %s\n", optimizer_name(cfg.optimizer), cfg.lr,
               cfg.cosine ? "cosine to 0" : "constant", ocfg.momentum, cfg.weight_decay, comp[cfg.compression],
               (unsigned long long)cfg.seed, ft ? ft : "(default)");
        printf("# loss, train_acc: over the epoch's training batches; test_acc: the 10 000 "
               "held-out images; all averaged across ranks\n"
               "# samples/s: training images per second, all ranks together; train_s: the "
               "training steps; total_s: with evaluation\n"
               "# step_s: the part of train_s spent in hvd_optimizer_step (waiting for the "
               "all-reduces not overlapped with backward, and the update)\n");
        printf("%5s %10s %9s %9s %10s %9s %8s %8s\n", "epoch", "loss", "train_acc",
               "test_acc", "samples/s", "train_s", "step_s", "total_s");
        fflush(stdout);
    }

    double test_acc = 0.0, t_start = now_s();
    long global_step = 0;
    int stopped = 0;
    for (int epoch = start_epoch; epoch <= cfg.epochs && !stopped; epoch++) {
        double t0 = now_s(), t_step = 0.0, loss = 0.0;
        long correct = 0, seen = 0;
        // step: global batches of this epoch done; the sampler counts from `base` (an elastic
        // run resumes inside an epoch, with the rest dealt over this run's ranks)
        int first = epoch == start_epoch ? start_step : 0, last = steps, base = 0;
        if (cfg.elastic) { // the sampler is at the committed (or the next) epoch's position
            train_elastic_epoch(&el, local_batch, &first, &last);
            base = first;
        } else {
            HVD_CHECK(hvd_sampler_set_epoch(sampler, (uint64_t)epoch));
        }
        for (int step = first; step < last; step++) {
            if (cfg.cosine) { // from the position alone, so a resumed run follows the same curve
                double done = (double)(epoch - 1) * steps + step, all = (double)cfg.epochs * steps;
                HVD_CHECK(hvd_optimizer_set_lr(opt, cfg.lr * 0.5 * (1.0 + cos(M_PI * done / all))));
            }
            HVD_CHECK(hvd_sampler_indices(sampler, (size_t)(step - base) * local_batch, local_batch,
                                          idx));
            batch_gather(x, y, &train, idx, local_batch);
            if (mg != NULL) {
                GPU_CHECK(mg, model_gpu_forward(mg, x, y, local_batch));
                GPU_CHECK(mg, model_gpu_backward(mg, grad_ready, opt));
            } else {
                loss += model_forward(&m, x, y, local_batch, &correct);
                model_backward(&m, grad_ready, opt);
            }
            seen += local_batch;
            double ts = now_s();
            HVD_CHECK(hvd_optimizer_step(opt, NULL));
            t_step += now_s() - ts;
            global_step++;
            if (cfg.log_every > 0 && rank == 0) {
                uint64_t done = 0;
                HVD_CHECK(hvd_optimizer_steps(opt, &done));
                if (done % (uint64_t)cfg.log_every == 0) {
                    printf("# step %llu epoch %d batch %d\n", (unsigned long long)done, epoch,
                           step + 1);
                    fflush(stdout);
                }
            }
            if (cfg.elastic && train_elastic_step(&el, (size_t)local_batch)) {
                stopped = 2; // hvdcrun asked for a stop at this commit
                break;
            }
            if (cfg.stop_after > 0 && global_step == cfg.stop_after) {
                if (cfg.checkpoint != NULL) checkpoint_save(&cfg, opt, sampler, epoch, step + 1, rank);
                stopped = 1;
                break;
            }
            if (cfg.checkpoint_every > 0 && global_step % cfg.checkpoint_every == 0)
                checkpoint_save(&cfg, opt, sampler, epoch, step + 1, rank);
        }
        if (stopped) break;
        if (mg != NULL) GPU_CHECK(mg, model_gpu_take_metrics(mg, &loss, &correct));
        double t_train = now_s() - t0;
        double tr[2] = {seen ? loss / seen : 0.0, seen ? (double)correct / seen : 0.0};
        HVD_CHECK(hvd_metrics_reduce("train.metrics", tr, 2, HVD_AVERAGE, (double)seen));
        double te[2];
        evaluate(&m, mg, &test, x, y, idx, rank, size, te);
        test_acc = te[1];
        if (rank == 0) {
            printf("%5d %10.4f %9.4f %9.4f %10.0f %9.2f %8.2f %8.2f\n", epoch, tr[0], tr[1],
                   test_acc, (double)seen * size / t_train, t_train, t_step, now_s() - t0);
            fflush(stdout);
        }
        if (cfg.checkpoint != NULL) checkpoint_save(&cfg, opt, sampler, epoch + 1, 0, rank);
        if (cfg.elastic && train_elastic_epoch_end(&el, epoch + 1)) stopped = 2;
    }
    if (!stopped && start_epoch > cfg.epochs) { // resumed a finished run: just evaluate
        double te[2];
        evaluate(&m, mg, &test, x, y, idx, rank, size, te);
        test_acc = te[1];
    }
    if (mg != NULL) GPU_CHECK(mg, model_gpu_download(mg, &m));
    int agree = params_agree(&m);
    if (rank == 0) {
        printf("# %.1f s in all; parameters identical on all ranks: %s; hash %016llx\n",
               now_s() - t_start, agree ? "yes" : "NO", (unsigned long long)params_hash(&m));
        if (stopped == 1) printf("stopped after %ld steps, as asked (--stop-after)\n", global_step);
        else if (stopped == 2) printf("stopped at an elastic commit, as hvdcrun asked\n");
        else printf("final test accuracy: %.4f\n", test_acc);
        fflush(stdout);
    }

    rc = EXIT_SUCCESS;
    if (!agree) {
        if (rank == 0) fprintf(stderr, "train: the ranks' parameters diverged\n");
        rc = EXIT_FAILURE;
    } else if (!stopped && cfg.min_accuracy >= 0.0 && test_acc < cfg.min_accuracy) {
        if (rank == 0) {
            fprintf(stderr, "train: final test accuracy %.4f is below --min-accuracy %.4f\n",
                    test_acc, cfg.min_accuracy);
        }
        rc = EXIT_FAILURE;
    }
done:
    train_elastic_free(&el);
    HVD_CHECK(hvd_optimizer_destroy(opt));
    model_gpu_free(mg);
    HVD_CHECK(hvd_sampler_destroy(sampler));
    free(x);
    free(y);
    free(idx);
    model_free(&m);
    idx_dataset_free(&train);
    idx_dataset_free(&test);
    HVD_CHECK(hvd_shutdown());
    return rc;
}
