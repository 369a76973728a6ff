/*
 * test_optimizer.c - the distributed optimizer, sampler, metrics and checkpoints across ranks,
 * on a tiny model whose gradients are computed exactly here (so no data set is needed).
 *
 *   model:  pred = W x + b, W (3, 5) float32, b (3) float64; loss = mean over the batch of
 *           0.5 * |pred - y|^2; x and y small integers that depend on the example index
 *
 * Usage (under mpirun, any np dividing 8):  test_optimizer MODE [DIR]
 *   identical  after every step, for each optimizer setting, every rank's parameters hash
 *              the same (allgather of the hashes); and they moved, from rank 0's start
 *   reference  the distributed run (global batch 8, split over ranks) matches a single-process
 *              reference computed here in float64 from the whole global batch, with its own
 *              SGD/Adam code, within 1e-5 after 12 steps: np = 2 and np = 1 agree
 *   resume     a run stopped after 5 steps and resumed from its checkpoint (new optimizer and
 *              sampler, parameters scrambled first) ends bitwise equal to an uninterrupted one
 *   corrupt    truncated, corrupted, foreign and different-model checkpoints are refused on
 *              every rank with a clear message, change nothing, and leave the good file intact
 * Uses only hvdc.h. The verdict is the exit status; any failing rank fails the run.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hvdc.h"

enum { IN = 5, OUT = 3, GLOBAL_BATCH = 8, DATASET = 40 };

static int rank, size, failures;

static void fail(int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] test_optimizer.c:%d: FAILED: ", rank, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}
#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) fail(__LINE__, __VA_ARGS__);                                            \
    } while (0)
#define MUST(call)                                                                           \
    do {                                                                                     \
        hvd_status st_ = (call);                                                             \
        if (st_ != HVD_OK) {                                                                 \
            fprintf(stderr, "[rank %d] %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__, #call, \
                    hvd_status_string(st_), hvd_last_error());                               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

typedef struct net {
    float w[OUT * IN], dw[OUT * IN];
    double b[OUT], db[OUT];
} net;

static double xval(int k, int i) { return (double)((k * 7 + i * 3) % 11) - 5.0; }
static double yval(int k, int o) { return (double)((k * 5 + o * 2) % 7) - 3.0; }

/* Gradient of the mean loss over examples ks[0..n) into dw/db (float64 into gw/gb). */
static void gradient(const float *w, const double *b, const int *ks, int n, double *gw,
                     double *gb) {
    memset(gw, 0, sizeof(double) * OUT * IN);
    memset(gb, 0, sizeof(double) * OUT);
    for (int e = 0; e < n; e++) {
        for (int o = 0; o < OUT; o++) {
            double pred = b[o];
            for (int i = 0; i < IN; i++) pred += (double)w[o * IN + i] * xval(ks[e], i);
            double d = (pred - yval(ks[e], o)) / n;
            gb[o] += d;
            for (int i = 0; i < IN; i++) gw[o * IN + i] += d * xval(ks[e], i);
        }
    }
}

static void net_backward(net *m, const int *ks, int n) {
    double gw[OUT * IN], gb[OUT];
    gradient(m->w, m->b, ks, n, gw, gb);
    for (int j = 0; j < OUT * IN; j++) m->dw[j] = (float)gw[j];
    memcpy(m->db, gb, sizeof gb);
}

static void net_scramble(net *m, int salt) {
    for (int j = 0; j < OUT * IN; j++) m->w[j] = (float)((j * 13 + salt * 29) % 17) / 17.0f - 0.5f;
    for (int o = 0; o < OUT; o++) m->b[o] = (double)(salt % 5) - o;
}

static uint64_t net_hash(const net *m) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)m->w;
    for (size_t i = 0; i < sizeof m->w; i++) h = (h ^ p[i]) * 1099511628211ull;
    p = (const unsigned char *)m->b;
    for (size_t i = 0; i < sizeof m->b; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* 1 if every rank's hash equals rank 0's. Collective. */
static int all_equal(const net *m, const char *name) {
    uint64_t mine = net_hash(m), all[64];
    MUST(hvd_allgather(name, &mine, 1, all, 64, HVD_INT64, NULL, NULL));
    for (int r = 1; r < size; r++)
        if (all[r] != all[0]) return 0;
    return 1;
}

static hvd_optimizer *make_opt(net *m, hvd_optimizer_config cfg) {
    hvd_param p[2] = {
        {"w", m->w, m->dw, OUT * IN, HVD_FLOAT32, HVD_DEVICE_CPU},
        {"b", m->b, m->db, OUT, HVD_FLOAT64, HVD_DEVICE_CPU},
    };
    hvd_optimizer *opt = NULL;
    MUST(hvd_optimizer_create(p, 2, &cfg, &opt));
    return opt;
}

/* This rank's slice of global batch t (examples t*8 .. t*8+7, mod DATASET). */
static int local_batch(int t, int *ks) {
    int lb = GLOBAL_BATCH / size;
    for (int j = 0; j < lb; j++) ks[j] = (t * GLOBAL_BATCH + rank * lb + j) % DATASET;
    return lb;
}

/* A user update rule for HVD_OPT_CUSTOM: plain SGD with lr in ctx. */
static hvd_status custom_sgd(void *ctx, const hvd_param *p, int index, uint64_t step) {
    double lr = *(const double *)ctx;
    (void)index;
    (void)step;
    for (size_t k = 0; k < p->count; k++) {
        if (p->dtype == HVD_FLOAT32) ((float *)p->data)[k] -= (float)(lr * ((float *)p->grad)[k]);
        else ((double *)p->data)[k] -= lr * ((double *)p->grad)[k];
    }
    return HVD_OK;
}

static hvd_optimizer_config config_named(const char *what, double *custom_lr) {
    hvd_optimizer_config c = HVD_OPTIMIZER_CONFIG_DEFAULT;
    c.lr = 0.01;
    if (strcmp(what, "sgd-momentum") == 0) c.momentum = 0.9;
    if (strcmp(what, "sgd-nesterov-wd") == 0) c.momentum = 0.9, c.nesterov = 1, c.weight_decay = 0.01;
    if (strcmp(what, "adam") == 0) c.kind = HVD_OPT_ADAM;
    if (strcmp(what, "adamw") == 0) c.kind = HVD_OPT_ADAMW, c.weight_decay = 0.1;
    if (strcmp(what, "fp16") == 0) c.momentum = 0.9, c.compression = HVD_COMPRESS_FP16;
    if (strcmp(what, "bf16") == 0) c.kind = HVD_OPT_ADAM, c.compression = HVD_COMPRESS_BF16;
    if (strcmp(what, "accumulate-3") == 0) c.momentum = 0.5, c.backward_passes_per_step = 3;
    if (strcmp(what, "custom") == 0) c.kind = HVD_OPT_CUSTOM, c.step_fn = custom_sgd, c.step_ctx = custom_lr;
    if (strcmp(what, "root-last") == 0) c.root = size - 1;
    return c;
}

static void mode_identical(void) {
    const char *settings[] = {"sgd", "sgd-momentum", "sgd-nesterov-wd", "adam", "adamw", "fp16",
                              "bf16", "accumulate-3", "custom", "root-last"};
    double custom_lr = 0.01;
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        int before = failures;
        net m;
        net_scramble(&m, rank + 1); // every rank starts elsewhere
        hvd_optimizer_config cfg = config_named(settings[s], &custom_lr);
        net root;
        net_scramble(&root, cfg.root + 1);
        hvd_optimizer *opt = make_opt(&m, cfg);
        EXPECT(memcmp(m.w, root.w, sizeof m.w) == 0 && memcmp(m.b, root.b, sizeof m.b) == 0,
               "%s: after create, parameters are not rank %d's", settings[s], cfg.root);
        uint64_t start = net_hash(&m);
        int ks[GLOBAL_BATCH], applied_total = 0;
        for (int t = 0; t < 9; t++) {
            net_backward(&m, ks, local_batch(t, ks));
            MUST(hvd_optimizer_grad_ready(opt, 1)); // b first, as a backward pass would
            if (t % 2 == 0) MUST(hvd_optimizer_grad_ready(opt, 0)); // odd steps: step submits w
            int applied = -1;
            MUST(hvd_optimizer_step(opt, &applied));
            applied_total += applied;
            char name[64];
            snprintf(name, sizeof name, "check.%s.%d", settings[s], t);
            EXPECT(all_equal(&m, name), "%s: parameters differ between ranks after step %d",
                   settings[s], t);
        }
        int passes = cfg.backward_passes_per_step;
        uint64_t steps = 0;
        MUST(hvd_optimizer_steps(opt, &steps));
        EXPECT(applied_total == 9 / passes && steps == (uint64_t)(9 / passes),
               "%s: %d updates applied (%llu counted), expected %d", settings[s], applied_total,
               (unsigned long long)steps, 9 / passes);
        EXPECT(net_hash(&m) != start, "%s: the parameters never changed", settings[s]);
        EXPECT(hvd_optimizer_grad_ready(opt, 2) == HVD_ERR_INVALID_ARG, "bad index accepted");
        MUST(hvd_optimizer_destroy(opt));
        if (rank == 0 && failures == before) printf("identical %s np=%d: OK\n", settings[s], size);
    }
    EXPECT(hvd_optimizer_destroy(NULL) == HVD_OK, "destroy(NULL)");
    // A device that is not there is refused clearly: HVD_ERR_UNSUPPORTED without the GPU
    // backend, HVD_ERR_CUDA ("no CUDA device visible" / "not visible") with it.
    net m;
    hvd_param gpu = {"w", m.w, m.dw, OUT * IN, HVD_FLOAT32, 1000};
    hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
    hvd_optimizer *opt = NULL;
    hvd_status gst = hvd_optimizer_create(&gpu, 1, &cfg, &opt);
    EXPECT((gst == HVD_ERR_UNSUPPORTED || gst == HVD_ERR_CUDA) && opt == NULL,
           "a device-1000 parameter must give HVD_ERR_UNSUPPORTED or HVD_ERR_CUDA: %s",
           hvd_last_error());
    // Ranks registering different models fail together, with the ranks named.
    hvd_param p[2] = {{"w", m.w, m.dw, OUT * IN, HVD_FLOAT32, HVD_DEVICE_CPU},
                      {"b", m.b, m.db, rank == size - 1 && size > 1 ? 2 : OUT, HVD_FLOAT64,
                       HVD_DEVICE_CPU}};
    cfg.name_prefix = "mismatch";
    hvd_status st = hvd_optimizer_create(p, 2, &cfg, &opt);
    if (size > 1)
        EXPECT(st == HVD_ERR_MISMATCH && strstr(hvd_last_error(), "registered different"),
               "different models on different ranks: %s: %s", hvd_status_string(st),
               hvd_last_error());
    else hvd_optimizer_destroy(opt);
}

/* hvd_metrics_reduce against sums worked out here: rank r contributes r+1 with weight r+1. */
static void check_metrics(void) {
    double r1 = rank + 1, n = size, v[2] = {r1, 2 * r1};
    MUST(hvd_metrics_reduce("metrics.mean", v, 2, HVD_AVERAGE, -1.0));
    EXPECT(v[0] == (n + 1) / 2 && v[1] == n + 1, "metrics mean: %g %g", v[0], v[1]);
    v[0] = r1;
    MUST(hvd_metrics_reduce("metrics.sum", v, 1, HVD_SUM, -1.0));
    EXPECT(v[0] == n * (n + 1) / 2, "metrics sum: %g", v[0]);
    v[0] = r1; // weighted: sum (r+1)^2 / sum (r+1) = (2n+1)/3
    MUST(hvd_metrics_reduce("metrics.weighted", v, 1, HVD_AVERAGE, r1));
    EXPECT(fabs(v[0] - (2 * n + 1) / 3) < 1e-12, "metrics weighted mean: %g", v[0]);
    EXPECT(hvd_metrics_reduce("metrics.bad", v, 1, HVD_SUM, 1.0) == HVD_ERR_INVALID_ARG,
           "a weight with HVD_SUM must be refused");
    if (rank == 0 && failures == 0) printf("metrics np=%d: OK\n", size);
}

/* Reference: SGD-momentum or Adam in float64 over the whole global batch, one process. */
static void mode_reference(void) {
    check_metrics();
    const char *settings[] = {"sgd-momentum", "adam", "accumulate-3"};
    for (size_t s = 0; s < 3; s++) {
        int before = failures;
        hvd_optimizer_config cfg = config_named(settings[s], NULL);
        net m;
        net_scramble(&m, 1);
        hvd_optimizer *opt = make_opt(&m, cfg);
        // the reference's own copy, in float64 (W kept as float for the gradient's input)
        double rw[OUT * IN], rb[OUT], m1[OUT * IN + OUT] = {0}, m2[OUT * IN + OUT] = {0};
        for (int j = 0; j < OUT * IN; j++) rw[j] = m.w[j];
        memcpy(rb, m.b, sizeof rb);
        int passes = cfg.backward_passes_per_step, updates = 0;
        double gsum[OUT * IN + OUT] = {0};
        for (int t = 0; t < 12 * passes; t++) {
            int ks[GLOBAL_BATCH];
            net_backward(&m, ks, local_batch(t, ks));
            MUST(hvd_optimizer_step(opt, NULL));
            // reference: the whole global batch t
            int all[GLOBAL_BATCH];
            float fw[OUT * IN];
            for (int j = 0; j < GLOBAL_BATCH; j++) all[j] = (t * GLOBAL_BATCH + j) % DATASET;
            for (int j = 0; j < OUT * IN; j++) fw[j] = (float)rw[j];
            double gw[OUT * IN], gb[OUT];
            gradient(fw, rb, all, GLOBAL_BATCH, gw, gb);
            for (int j = 0; j < OUT * IN + OUT; j++) gsum[j] += j < OUT * IN ? gw[j] : gb[j - OUT * IN];
            if ((t + 1) % passes != 0) continue;
            updates++;
            for (int j = 0; j < OUT * IN + OUT; j++) {
                double g = gsum[j] / passes, *p = j < OUT * IN ? &rw[j] : &rb[j - OUT * IN];
                gsum[j] = 0.0;
                if (cfg.kind == HVD_OPT_SGD) {
                    m1[j] = cfg.momentum * m1[j] + g;
                    *p -= cfg.lr * m1[j];
                } else {
                    m1[j] = 0.9 * m1[j] + 0.1 * g;
                    m2[j] = 0.999 * m2[j] + 0.001 * g * g;
                    double mh = m1[j] / (1 - pow(0.9, updates)), vh = m2[j] / (1 - pow(0.999, updates));
                    *p -= cfg.lr * mh / (sqrt(vh) + 1e-8);
                }
            }
        }
        double worst = 0.0;
        for (int j = 0; j < OUT * IN; j++) worst = fmax(worst, fabs(m.w[j] - rw[j]) / (1 + fabs(rw[j])));
        for (int o = 0; o < OUT; o++) worst = fmax(worst, fabs(m.b[o] - rb[o]) / (1 + fabs(rb[o])));
        EXPECT(worst < 1e-5, "%s np=%d: parameters differ from the single-process reference by "
               "%.3g (relative)", settings[s], size, worst);
        if (rank == 0 && failures == before)
            printf("reference %s np=%d: OK, maxdiff = %.3g\n", settings[s], size, worst);
        MUST(hvd_optimizer_destroy(opt));
    }
}

/* Trains `steps` steps from (epoch, step) with the sampler; saves at global step save_at. */
static void run(net *m, hvd_optimizer *opt, hvd_sampler *s, int epoch, int step, int steps,
                int save_at, const char *path) {
    int lb = GLOBAL_BATCH / size;
    size_t num = 0;
    MUST(hvd_sampler_num_samples(s, &num, NULL));
    int per_epoch = (int)num / lb;
    for (int done = 0; done < steps; done++) {
        if (step == per_epoch) epoch++, step = 0;
        if (step == 0 || done == 0) MUST(hvd_sampler_set_epoch(s, (uint64_t)epoch));
        size_t idx[GLOBAL_BATCH];
        int ks[GLOBAL_BATCH];
        MUST(hvd_sampler_indices(s, (size_t)step * lb, (size_t)lb, idx));
        for (int j = 0; j < lb; j++) ks[j] = (int)idx[j];
        net_backward(m, ks, lb);
        MUST(hvd_optimizer_grad_ready(opt, 0));
        MUST(hvd_optimizer_step(opt, NULL));
        step++;
        if (done + 1 == save_at) {
            hvd_checkpoint_info info = {.epoch = (uint64_t)epoch, .step = (uint64_t)step,
                                        .user = {42, 0, 0, 0}};
            MUST(hvd_checkpoint_save(path, opt, s, &info));
        }
    }
}

static void mode_resume(const char *path) {
    const char *settings[] = {"sgd-momentum", "adam"};
    const int total = 13, stop = 5; // 5 steps per epoch at 8 of 40: crosses two epochs
    for (int k = 0; k < 2; k++) {
        int before = failures;
        hvd_optimizer_config cfg = config_named(settings[k], NULL);
        net a, b;
        hvd_sampler *sa = NULL, *sb = NULL;
        // uninterrupted (saves at step `stop` on the way, to be resumed below)
        net_scramble(&a, 3);
        hvd_optimizer *oa = make_opt(&a, cfg);
        MUST(hvd_sampler_create(DATASET, size, rank, 1, 11, 1, &sa));
        run(&a, oa, sa, 0, 0, total, stop + 1, path);
        // "restart": new objects, other parameters, then resume
        net_scramble(&b, 50 + rank);
        hvd_optimizer *ob = make_opt(&b, cfg);
        MUST(hvd_sampler_create(DATASET, size, rank, 1, 999, 1, &sb)); // seed comes from the file
        hvd_checkpoint_info info;
        MUST(hvd_checkpoint_load(path, ob, sb, &info));
        uint64_t steps = 0;
        MUST(hvd_optimizer_steps(ob, &steps));
        EXPECT(steps == (uint64_t)stop + 1 && info.user[0] == 42,
               "%s: resumed at step count %llu, user word %llu", settings[k],
               (unsigned long long)steps, (unsigned long long)info.user[0]);
        run(&b, ob, sb, (int)info.epoch, (int)info.step, total - stop - 1, 0, path);
        EXPECT(net_hash(&a) == net_hash(&b), "%s: interrupted + resumed differs from the "
               "uninterrupted run", settings[k]);
        EXPECT(all_equal(&b, "check.resume"), "%s: ranks differ after resume", settings[k]);
        if (rank == 0 && failures == before)
            printf("resume %s np=%d: OK (bitwise equal after %d steps)\n", settings[k], size, total);
        MUST(hvd_optimizer_destroy(oa));
        MUST(hvd_optimizer_destroy(ob));
        hvd_sampler_destroy(sa);
        hvd_sampler_destroy(sb);
    }
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

static void spill(const char *path, const unsigned char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

/* Loading `path` must fail with want, a message containing text, and change nothing. */
static void expect_refused(const char *label, const char *path, hvd_optimizer *opt, net *m,
                           hvd_status want, const char *text) {
    uint64_t before = net_hash(m), steps0 = 0, steps1 = 0;
    MUST(hvd_optimizer_steps(opt, &steps0));
    hvd_status st = hvd_checkpoint_load(path, opt, NULL, NULL);
    MUST(hvd_optimizer_steps(opt, &steps1));
    EXPECT(st == want && strstr(hvd_last_error(), text) != NULL, "%s: got %s: '%s'; expected %s "
           "mentioning '%s'", label, hvd_status_string(st), hvd_last_error(),
           hvd_status_string(want), text);
    EXPECT(net_hash(m) == before && steps0 == steps1, "%s: a refused load changed the model",
           label);
    if (rank == 0 && st == want) printf("refused %s: %s\n", label, hvd_last_error());
}

static void mode_corrupt(const char *dir) {
    char good[600], bad[600];
    snprintf(good, sizeof good, "%s/good.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    hvd_optimizer_config cfg = config_named("sgd-momentum", NULL);
    net m;
    net_scramble(&m, 1);
    hvd_optimizer *opt = make_opt(&m, cfg);
    int ks[GLOBAL_BATCH];
    net_backward(&m, ks, local_batch(0, ks));
    MUST(hvd_optimizer_step(opt, NULL));
    MUST(hvd_checkpoint_save(good, opt, NULL, NULL));
    size_t n = 0;
    unsigned char *orig = slurp(good, &n);
    EXPECT(orig != NULL && n > 64, "the checkpoint was not written");
    if (orig == NULL) return;
    net_backward(&m, ks, local_batch(1, ks)); // move on, so a load would be visible
    MUST(hvd_optimizer_step(opt, NULL));

    unsigned char *copy = malloc(n);
    if (rank == 0) spill(bad, orig, n / 2);
    MUST(hvd_barrier());
    expect_refused("truncated", bad, opt, &m, HVD_ERR_INVALID_ARG, "truncated");
    memcpy(copy, orig, n);
    copy[n - 5] ^= 0x10;
    if (rank == 0) spill(bad, copy, n);
    MUST(hvd_barrier());
    expect_refused("corrupted", bad, opt, &m, HVD_ERR_INVALID_ARG, "corrupted");
    if (rank == 0) spill(bad, (const unsigned char *)"not a checkpoint at all\n", 24);
    MUST(hvd_barrier());
    expect_refused("foreign file", bad, opt, &m, HVD_ERR_INVALID_ARG, "not a libhvdc checkpoint");
    snprintf(bad, sizeof bad, "%s/missing.ckpt", dir);
    expect_refused("missing file", bad, opt, &m, HVD_ERR_INVALID_ARG, "cannot open");

    // A different model: b has 2 elements instead of 3.
    net other;
    net_scramble(&other, 1);
    hvd_param p[2] = {{"w", other.w, other.dw, OUT * IN, HVD_FLOAT32, HVD_DEVICE_CPU},
                      {"b", other.b, other.db, 2, HVD_FLOAT64, HVD_DEVICE_CPU}};
    hvd_optimizer_config ocfg = cfg;
    ocfg.name_prefix = "other";
    hvd_optimizer *o2 = NULL;
    MUST(hvd_optimizer_create(p, 2, &ocfg, &o2));
    expect_refused("different model", good, o2, &other, HVD_ERR_MISMATCH,
                   "different model: parameter 1 is 'b' (float64, 3 elements) in the file but "
                   "'b' (float64, 2 elements) here");
    MUST(hvd_optimizer_destroy(o2));
    // The same model under another optimizer (Adam keeps other state).
    ocfg = config_named("adam", NULL);
    ocfg.name_prefix = "other";
    MUST(hvd_optimizer_create((hvd_param[]){{"w", other.w, other.dw, OUT * IN, HVD_FLOAT32, -1},
                                            {"b", other.b, other.db, OUT, HVD_FLOAT64, -1}},
                              2, &ocfg, &o2));
    expect_refused("different optimizer", good, o2, &other, HVD_ERR_MISMATCH, "optimizer kind 0");
    MUST(hvd_optimizer_destroy(o2));

    // A save that cannot happen leaves the previous file alone.
    snprintf(bad, sizeof bad, "%s/no-such-dir/x.ckpt", dir);
    hvd_status st = hvd_checkpoint_save(bad, opt, NULL, NULL);
    EXPECT(st == HVD_ERR_INVALID_ARG && strstr(hvd_last_error(), "no-such-dir"),
           "save into a missing directory: %s: %s", hvd_status_string(st), hvd_last_error());
    // After all that, the good file is byte for byte what was saved, and still loads.
    size_t n2 = 0;
    unsigned char *now = slurp(good, &n2);
    EXPECT(now && n2 == n && memcmp(now, orig, n) == 0, "the good checkpoint was modified");
    net_scramble(&m, 77);
    MUST(hvd_checkpoint_load(good, opt, NULL, NULL));
    EXPECT(all_equal(&m, "check.reload"), "ranks differ after loading the good file");
    if (rank == 0 && failures == 0) printf("corrupt np=%d: OK (good file intact and loadable)\n", size);
    MUST(hvd_optimizer_destroy(opt));
    free(orig);
    free(copy);
    free(now);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_optimizer identical|reference|resume|corrupt [DIR]\n");
        return 2;
    }
    MUST(hvd_init());
    MUST(hvd_rank(&rank));
    MUST(hvd_size(&size));
    if (GLOBAL_BATCH % size != 0 || size > 64) {
        if (rank == 0) fprintf(stderr, "test_optimizer: np must divide %d\n", GLOBAL_BATCH);
        hvd_shutdown();
        return 2;
    }
    // Files go to DIR (default: the working directory), named after rank 0's pid.
    int64_t pid = (int64_t)getpid();
    MUST(hvd_broadcast("setup.pid", &pid, 1, HVD_INT64, 0));
    char path[512];
    snprintf(path, sizeof path, "%s/test_optimizer.%lld.ckpt", argc > 2 ? argv[2] : ".",
             (long long)pid);
    const char *mode = argv[1];
    if (strcmp(mode, "identical") == 0) mode_identical();
    else if (strcmp(mode, "reference") == 0) mode_reference();
    else if (strcmp(mode, "resume") == 0) mode_resume(path);
    else if (strcmp(mode, "corrupt") == 0) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/test_optimizer.%lld.d", argc > 2 ? argv[2] : ".",
                 (long long)pid);
        if (rank == 0) mkdir(dir, 0755);
        MUST(hvd_barrier());
        mode_corrupt(dir);
        MUST(hvd_barrier());
        if (rank == 0) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
        }
    } else {
        fprintf(stderr, "test_optimizer: unknown mode %s\n", mode);
        failures++;
    }
    if (rank == 0 && strcmp(mode, "resume") == 0) unlink(path);
    // metrics: the failure counts, summed with the library's own one-call reduction
    double total = failures;
    MUST(hvd_metrics_reduce("verdict", &total, 1, HVD_SUM, -1.0));
    if (rank == 0) printf("%s np=%d: %s (%g failed checks on all ranks)\n", mode, size,
                          total == 0 ? "PASS" : "FAIL", total);
    MUST(hvd_shutdown());
    return failures > 0 || total != 0;
}
