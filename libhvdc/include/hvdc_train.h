/*
 * hvdc_train.h - libhvdc's training API: a distributed optimizer, a sampler, metrics,
 * checkpoints and elastic state, written only against the collectives of hvdc.h, which includes
 * this header (a program needs only #include <hvdc.h>). The threading, error and memory rules of
 * hvdc.h hold here too.
 */
#ifndef HVDC_TRAIN_H
#define HVDC_TRAIN_H

#include "hvdc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Training: distributed optimizer, sampler, metrics, checkpoints ----------------------
 *
 * defines: hvd_optimizer_create, hvd_optimizer_destroy, hvd_optimizer_grad_ready,
 *          hvd_optimizer_step, hvd_optimizer_set_lr, hvd_optimizer_steps,
 *          hvd_broadcast_optimizer_state, hvd_sampler_create, hvd_sampler_destroy,
 *          hvd_sampler_set_epoch, hvd_sampler_num_samples, hvd_sampler_indices,
 *          hvd_sampler_record, hvd_sampler_position, hvd_sampler_set_position,
 *          hvd_metrics_reduce, hvd_checkpoint_save, hvd_checkpoint_load,
 *          hvd_check_consistency, hvd_check_consistency_every
 *
 * Built only on the collectives of hvdc.h. docs/training.md has a whole loop and
 * examples/train/train.c a whole program.
 *
 * Example (tests/docs/check_snippets.py compiles it): one epoch; params describes the model.
 *     hvd_status one_epoch(hvd_param *params, int n_params, size_t *idx, size_t b) {
 *         hvd_optimizer_config cfg = HVD_OPTIMIZER_CONFIG_DEFAULT;
 *         hvd_optimizer *opt;       // rank 0's parameters are broadcast to every rank
 *         hvd_sampler *s;           // same shuffle everywhere, disjoint shards
 *         size_t n_local;
 *         hvd_status st = hvd_optimizer_create(params, n_params, &cfg, &opt);
 *         if (st != HVD_OK) return st;
 *         st = hvd_sampler_create(60000, -1, -1, 1, 42, 1, &s);
 *         if (st == HVD_OK) st = hvd_sampler_num_samples(s, &n_local, NULL);
 *         for (size_t first = 0; st == HVD_OK && first + b <= n_local; first += b) {
 *             hvd_sampler_indices(s, first, b, idx);   // this rank's b examples
 *             // forward and backward here; after each gradient is final:
 *             for (int i = n_params - 1; i >= 0; i--) hvd_optimizer_grad_ready(opt, i);
 *             st = hvd_optimizer_step(opt, NULL);      // waits, then SGD on every rank alike
 *         }
 *         double loss = 0.5;        // global mean in one call, weighted by shard size
 *         if (st == HVD_OK) st = hvd_metrics_reduce("loss", &loss, 1, HVD_AVERAGE, (double)n_local);
 *         if (st == HVD_OK) st = hvd_checkpoint_save("ck.bin", opt, s, NULL); // rank 0, atomic
 *         hvd_sampler_destroy(s);
 *         hvd_optimizer_destroy(opt);
 *         return st;
 *     }
 *
 * Threads. An optimizer or sampler is not locked: call the functions for one object from one
 * thread at a time (any thread). Collective calls (marked so) must be made by every rank in the
 * same order, like the collectives they are made of.
 * Names. The optimizer names its operations "<prefix>.<kind>.<parameter name>", so two
 * optimizers alive at once need different prefixes. */

/* One parameter tensor of a model, with its gradient (same dtype, count and device). */
typedef struct hvd_param {
    const char *name; /* unique within the optimizer, the same on every rank, copied at create */
    void *data;       /* (count) the values the optimizer updates in place */
    void *grad;       /* (count) the gradient of the last backward pass; after
                       * hvd_optimizer_step it holds the gradient averaged over ranks */
    size_t count;     /* elements */
    hvd_dtype dtype;  /* HVD_FLOAT32 or HVD_FLOAT64 */
    int device;       /* HVD_DEVICE_CPU, or the CUDA ordinal holding data and grad (GPU
                       * builds with a visible device: NCCL averages the gradient and CUDA
                       * kernels apply the update; else HVD_ERR_UNSUPPORTED / HVD_ERR_CUDA) */
} hvd_param;

/* The rule applied by hvd_optimizer_step to each parameter p with averaged gradient g.
 * Optimizer state is kept in float64 whatever the parameter dtype; lr is cfg.lr.
 *   HVD_OPT_SGD:    g += weight_decay*p;  if momentum: b = momentum*b + g,
 *                   g = nesterov ? g + momentum*b : b;  p -= lr*g              (as torch.optim.SGD)
 *   HVD_OPT_ADAM:   g += weight_decay*p;  m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g^2;
 *                   p -= lr * (m/(1-beta1^t)) / (sqrt(v/(1-beta2^t)) + eps)    (t = step, from 1)
 *   HVD_OPT_ADAMW:  as Adam, but the decay is decoupled: p *= 1 - lr*weight_decay, g unchanged
 *   HVD_OPT_CUSTOM: cfg.step_fn(cfg.step_ctx, &param, i, t) for each parameter i, in order */
typedef enum hvd_optimizer_kind {
    HVD_OPT_SGD = 0,
    HVD_OPT_ADAM = 1,
    HVD_OPT_ADAMW = 2,
    HVD_OPT_CUSTOM = 3,
} hvd_optimizer_kind;

/* How gradients travel: as they are, or rounded to a 16-bit type for the all-reduce and widened
 * back afterwards (Horovod's Compression.fp16). Halves the bytes; costs precision. */
typedef enum hvd_compression {
    HVD_COMPRESS_NONE = 0,
    HVD_COMPRESS_FP16 = 1, /* IEEE binary16: 11-bit precision, |g| up to 65504 */
    HVD_COMPRESS_BF16 = 2, /* bfloat16: 8-bit precision, float32's range */
} hvd_compression;

/* A user update rule (HVD_OPT_CUSTOM): param->grad holds the averaged gradient; update
 * param->data. step counts applied steps from 1. Return HVD_OK, or a status that
 * hvd_optimizer_step then returns (it stops calling step_fn). Must do the same on every rank. */
typedef hvd_status (*hvd_optimizer_step_fn)(void *ctx, const hvd_param *param, int index,
                                            uint64_t step);

typedef struct hvd_optimizer_config {
    hvd_optimizer_kind kind;
    double lr;                    /* learning rate; change it with hvd_optimizer_set_lr */
    double momentum;              /* SGD; 0 keeps no state */
    int nesterov;                 /* SGD; needs momentum > 0 */
    double weight_decay;          /* SGD/Adam: L2 added to the gradient; AdamW: decoupled */
    double beta1, beta2, eps;     /* Adam/AdamW */
    int backward_passes_per_step; /* >= 1: gradients of this many backward passes are summed
                                   * locally (and divided by it) before one all-reduce */
    hvd_compression compression;
    int root;                     /* the rank whose parameters everyone starts from */
    const char *name_prefix;      /* prefix of operation names; NULL means "hvd.opt" */
    hvd_optimizer_step_fn step_fn; /* HVD_OPT_CUSTOM only */
    void *step_ctx;
    void *stream;                 /* device parameters: the cudaStream_t the model computes on
                                   * (NULL: the legacy default stream). grad_ready/step record
                                   * an event on it for each gradient's all-reduce, and the
                                   * update kernels are queued on it, so work queued there next
                                   * sees the new parameters without a host sync */
} hvd_optimizer_config;
#define HVD_OPTIMIZER_CONFIG_DEFAULT                                                        \
    {HVD_OPT_SGD, 0.01, 0.0, 0, 0.0, 0.9, 0.999, 1e-8, 1, HVD_COMPRESS_NONE, 0, NULL, NULL,   \
     NULL, NULL}

typedef struct hvd_optimizer hvd_optimizer;

/* Creates a distributed optimizer over n parameters (params[] is copied; the buffers it points
 * to stay the caller's and must outlive the optimizer). Collective: first checks that every
 * rank registered the same parameters (names, counts, dtypes) and configuration, then
 * broadcasts cfg->root's parameter values into every rank's data, so all replicas start equal.
 * @return HVD_OK and *out; HVD_ERR_INVALID_ARG for a bad argument on this rank (NULL, n < 1,
 *         empty or duplicate name, name too long with the prefix, a bad dtype, lr < 0, data
 *         or grad not where .device says: device memory under HVD_DEVICE_CPU, host memory
 *         or another device's under a device, ...), and then on every other rank too, saying
 *         another rank refused (all return at once; nothing is sent);
 *         for a parameter on a device: HVD_ERR_UNSUPPORTED in a build without the GPU
 *         backend, or with compression (device gradients travel uncompressed), HVD_ERR_CUDA
 *         "no CUDA device visible" / device not visible; HVD_ERR_MISMATCH on
 *         every rank when ranks registered different parameters or settings (nothing is
 *         broadcast); HVD_ERR_NO_MEMORY; a collective's status. Blocks. */
HVD_API hvd_status hvd_optimizer_create(const hvd_param *params, int n,
                                        const hvd_optimizer_config *cfg, hvd_optimizer **out);

/* Frees the optimizer after waiting for (and discarding) any all-reduce it still has in flight.
 * NULL-safe. @return HVD_OK, or the first failed wait's status (everything is freed anyway). */
HVD_API hvd_status hvd_optimizer_destroy(hvd_optimizer *opt);

/* The backward-pass hook: parameter index's gradient for this pass is final. On the last pass
 * of a step (see backward_passes_per_step) it starts the averaging all-reduce at once, so late
 * layers communicate while early ones are still being differentiated; on earlier passes it adds
 * the gradient to a local accumulator. grad must not change until hvd_optimizer_step returns
 * (or, on an accumulating pass, until this call returns). Calling it is optional: step
 * handles the parameters that were not announced.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for a bad index or a second call for it in one pass;
 *         the all-reduce's submission status. Never blocks on other ranks. */
HVD_API hvd_status hvd_optimizer_grad_ready(hvd_optimizer *opt, int index);

/* Ends a backward pass. On the last pass of a step: starts the all-reduces not started by
 * grad_ready, waits for all of them (each grad then holds the average over ranks), and applies
 * the update rule; *applied (if not NULL) is set to 1. On an accumulating pass it only
 * accumulates and sets *applied to 0. Collective (every rank calls it once per pass).
 * With HVD_CHECK_CONSISTENCY=N (hvd_check_consistency_every), every N-th update is followed by
 * hvd_check_consistency over each parameter and its state arrays ("<name>.momentum_buffer",
 * "<name>.exp_avg", "<name>.exp_avg_sq", as torch names them; device parameters are copied
 * to the host for it): rank 0 logs what differs, and the step still returns HVD_OK.
 * @return HVD_OK; the first failed all-reduce's status (parameters are then not updated);
 *         step_fn's status; the replica check's failure (a collective's status). Blocks
 *         until the all-reduces complete; for device parameters under SGD/Adam/AdamW only
 *         until they are queued: cfg.stream waits for them on the device and the update is
 *         queued there after them (hvd_wait_on_stream; a device failure after that fails
 *         later device operations instead). A step that checks the replicas waits for the
 *         device: the values are copied to the host behind the update. */
HVD_API hvd_status hvd_optimizer_step(hvd_optimizer *opt, int *applied);

/* Sets the learning rate used by later steps (same value on every rank). Never blocks.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL or lr not finite and >= 0. */
HVD_API hvd_status hvd_optimizer_set_lr(hvd_optimizer *opt, double lr);

/* The number of updates applied so far (restored by hvd_checkpoint_load). Never blocks.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL. */
HVD_API hvd_status hvd_optimizer_steps(const hvd_optimizer *opt, uint64_t *steps);

/* Copies root's optimizer state (momentum buffers, Adam moments, step count) to every rank,
 * e.g. after only rank 0 loaded it. Collective. Does not touch parameters.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL, a root out of range, or a call between the
 *         passes of one step; a broadcast's status. Blocks. */
HVD_API hvd_status hvd_broadcast_optimizer_state(hvd_optimizer *opt, int root);

/* A DistributedSampler, with the semantics of torch.utils.data.DistributedSampler:
 *   - each epoch the dataset indices 0..N-1 are permuted (if shuffle) by a generator seeded
 *     from (seed, epoch) alone, so every rank draws the same permutation; without shuffle
 *     they stay in order;
 *   - drop_last = 0: the list is padded by repeating its own beginning up to a multiple of
 *     the number of replicas R, so each rank gets ceil(N/R) indices (a few repeat);
 *     drop_last = 1: its tail is dropped down to a multiple of R, so each rank gets floor(N/R);
 *   - rank r takes positions r, r+R, r+2R, ... of that list: the shards are disjoint (apart
 *     from the padding) and together cover the dataset.
 * Call hvd_sampler_set_epoch at the start of every epoch, or every epoch repeats epoch 0's
 * order. The generator is libhvdc's (SplitMix64 + Fisher-Yates), not torch's: the order
 * differs from PyTorch's, the semantics do not. Pure local computation: nothing is sent. */
typedef struct hvd_sampler hvd_sampler;

/* num_replicas <= 0 means hvd_size() and rank < 0 means hvd_rank() (then libhvdc must be
 * initialized). The sampler starts at epoch 0.
 * @return HVD_OK and *out; HVD_ERR_INVALID_ARG for dataset_size 0, rank >= num_replicas, or
 *         drop_last with fewer examples than replicas; HVD_ERR_NOT_INITIALIZED; HVD_ERR_NO_MEMORY.
 *         Never blocks. */
HVD_API hvd_status hvd_sampler_create(size_t dataset_size, int num_replicas, int rank,
                                      int shuffle, uint64_t seed, int drop_last,
                                      hvd_sampler **out);

/* NULL-safe. @return HVD_OK. */
HVD_API hvd_status hvd_sampler_destroy(hvd_sampler *sampler);

/* Selects the epoch whose order hvd_sampler_indices returns, from its start (position 0).
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL. Never blocks; O(N). */
HVD_API hvd_status hvd_sampler_set_epoch(hvd_sampler *sampler, uint64_t epoch);

/* *num_samples = the indices this rank gets this epoch (from the current position on);
 * *epoch (if not NULL) = current epoch.
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL. Never blocks. */
HVD_API hvd_status hvd_sampler_num_samples(const hvd_sampler *sampler, size_t *num_samples,
                                           uint64_t *epoch);

/* Copies this rank's indices first .. first+n-1 for the current epoch into out (n entries),
 * e.g. one batch: first = batch*b, n = b. first counts from the current position (0 after
 * hvd_sampler_set_epoch or hvd_sampler_set_position).
 * @return HVD_OK; HVD_ERR_INVALID_ARG for NULL or first+n > num_samples. Never blocks. */
HVD_API hvd_status hvd_sampler_indices(const hvd_sampler *sampler, size_t first, size_t n,
                                       size_t *out);

/* Resuming inside an epoch, also with another number of ranks (elastic training).
 * The epoch's list (the permutation, padded or truncated) is consumed front to back: with R
 * ranks, this rank's k-th index is list position start + k*R + rank.
 * - record: this rank has consumed its next n indices (call it after each batch with n = the
 *   batch's size on this rank). @return HVD_OK; HVD_ERR_INVALID_ARG for NULL or more than are
 *   left this epoch.
 * - position: *position = positions of the epoch's list consumed by all ranks together
 *   (start + recorded * R, at most N); the same on every rank when the ranks record in step.
 *   @return HVD_OK; HVD_ERR_INVALID_ARG for NULL.
 * - set_position: the first `position` positions of this epoch are done; deal the rest out
 *   over this sampler's ranks from there on: no position is visited twice or skipped, whatever
 *   the number of ranks was before. num_samples becomes floor((N-position)/R) with drop_last,
 *   else ceil. @return HVD_OK; HVD_ERR_INVALID_ARG for NULL or position > N.
 * hvd_sampler_set_epoch resets the position to 0; hvd_elastic_add_sampler saves and restores
 * epoch and position. None of them blocks. */
HVD_API hvd_status hvd_sampler_record(hvd_sampler *sampler, size_t n);
HVD_API hvd_status hvd_sampler_position(const hvd_sampler *sampler, size_t *position);
HVD_API hvd_status hvd_sampler_set_position(hvd_sampler *sampler, size_t position);

/* Combines count metrics across ranks in one all-reduce, in place; name must be the same on
 * every rank. With weight < 0 every rank counts equally: values becomes the mean over ranks
 * (op = HVD_AVERAGE) or, with HVD_SUM, the sum. With weight >= 0 (HVD_AVERAGE only) it becomes
 * the weighted mean sum_r(w_r*v_r)/sum_r(w_r), e.g. w = this rank's number of examples, so
 * unequal shards give the exact global mean (all weights 0: values become 0).
 * Every rank must pass the same op, and a weight on every rank or on none.
 * Collective. @return HVD_OK; HVD_ERR_INVALID_ARG for NULL, count 0 or an op other than
 * SUM/AVERAGE (this rank alone, at once), and on every rank when any rank passed an invalid
 * weight (NaN, infinite, or a weight with HVD_SUM); HVD_ERR_MISMATCH on every rank when ranks
 * mix ops or weighted and unweighted calls, or pass different counts. Blocks. */
HVD_API hvd_status hvd_metrics_reduce(const char *name, double *values, size_t count,
                                      hvd_reduce_op op, double weight);

/* What a checkpoint records besides parameters, optimizer state and the sampler: the caller's
 * own position (e.g. the next epoch and step) and up to 4 free words (e.g. an RNG state). */
typedef struct hvd_checkpoint_info {
    uint64_t epoch;
    uint64_t step;
    uint64_t user[4];
} hvd_checkpoint_info;

/* Saves opt's parameters and state, sampler's seed and epoch (sampler may be NULL) and *info
 * (may be NULL: zeros) to path. Collective: rank 0 writes path.tmp.<pid>, fsyncs it, renames
 * it over path and fsyncs the directory, so path always holds either the previous checkpoint
 * or the new one, whole, even if the process dies mid-save. Other ranks write nothing and get
 * rank 0's result. The file (format version 1): a 64-byte header with magic "HVDCCKPT",
 * version and section sizes and its own CRC-32, then a body with its CRC-32: the parameter
 * table (name, dtype, count), optimizer kind, step and state, sampler and info, the values.
 * Must not be called between the passes of one step. Device parameters are saved as they are
 * after the updates queued on cfg.stream so far: rank 0 copies them, and their state, to host
 * memory there and waits for that copy (so does hvd_elastic_commit; the step never waits).
 * @return HVD_OK on every rank; HVD_ERR_INVALID_ARG (NULL, mid-step, path unusable: the
 *         message names the file and the system error; the previous file is untouched);
 *         HVD_ERR_NO_MEMORY; HVD_ERR_CUDA (a device copy failed; nothing was written);
 *         HVD_ERR_NCCL when device parameters were copied after the GPU communicators were
 *         aborted (a rank died in the step's all-reduce, or NCCL failed): they may hold its
 *         partial sums, so nothing was written; a collective's status (rank 0's message
 *         then also says why it wrote nothing, if it did not). Blocks. */
HVD_API hvd_status hvd_checkpoint_save(const char *path, const hvd_optimizer *opt,
                                       const hvd_sampler *sampler,
                                       const hvd_checkpoint_info *info);

/* Restores a checkpoint written by hvd_checkpoint_save into opt (parameters, state, step
 * count), sampler (seed and epoch; may be NULL) and *info (may be NULL). Collective: rank 0
 * reads and validates the whole file, then broadcasts it; on any error nothing changes on any
 * rank and the file is not modified (a device copy that fails, HVD_ERR_CUDA, may leave some of
 * rank 0's device parameters written). The number of ranks may differ from the saving run's.
 * Device parameters and their state are written on the device, ordered on cfg.stream: work
 * queued there afterwards sees them.
 * @return HVD_OK on every rank; HVD_ERR_INVALID_ARG for an unreadable, truncated or corrupted
 *         file, or an unknown version (the message says which check failed); HVD_ERR_MISMATCH
 *         when the file is from a different model or optimizer (the message names the first
 *         difference) or its sampler was over a different dataset size; HVD_ERR_NO_MEMORY;
 *         HVD_ERR_CUDA; a collective's status. Blocks. */
HVD_API hvd_status hvd_checkpoint_load(const char *path, hvd_optimizer *opt,
                                       hvd_sampler *sampler, hvd_checkpoint_info *info);

/* ---- Replicas that differ: named -----------------------------------------------------------
 * Data parallelism keeps one replica of the model per rank and assumes they stay equal. A
 * weight written on one rank only, a buffer the optimizer never averages (BatchNorm's running
 * statistics) or state loaded on rank 0 alone makes them drift apart, silently.
 * hvd_check_consistency compares them. Host results are bitwise identical on every rank (every
 * all-reduce combines in rank order: docs/reproducibility.md), so replicas kept in step hold
 * equal bytes, and equality of a hash is the right test: any difference, however small, is
 * real. */

/* One named host buffer whose replicas hvd_check_consistency compares. */
typedef struct hvd_named_buffer {
    const char *name; /* non-empty, unique in the list, the same on every rank */
    const void *data; /* (nbytes) host memory; NULL only when nbytes is 0 */
    size_t nbytes;
} hvd_named_buffer;

/* Compares n named host buffers across ranks: each rank hashes each buffer (XXH64 of its bytes),
 * the ranks first agree that they hold the same list of names (a hash of the list), then
 * all-gather the hashes, so every rank finds the same differences. *n_differ is the number of
 * buffers whose bytes are not the same on every rank (a size that differs counts). With log, rank
 * 0 logs (level warning) one line per differing buffer, up to 20, naming each value's hash and
 * the ranks that hold it ("'fc.weight' (400 bytes) differs across ranks: ranks 0-1 5d1c...;
 * rank 2 0b7e..."), then a count. hashes (NULL, or n * size entries) receives every rank's hash
 * of every buffer: hashes[r * n + i] is rank r's of buffers[i], for a caller that reports the
 * differences itself (hvdc.torch's check_consistency does). Costs one pass over the bytes
 * on each rank and three small collectives (figures: docs/performance.md).
 * Threads: any thread, one call at a time per process (its collectives are named
 * "hvd.consistency.*"). Collective over every rank (the global process set), in the same
 * order as the rank's other collectives; no rank may have joined (hvd_join).
 * @return HVD_OK (whether or not buffers differ); HVD_ERR_INVALID_ARG for a bad argument on
 *         this rank (n < 0, NULL, a buffer without a name, two with one name, data NULL with
 *         bytes, device memory: copy it to the host first), and then on every other rank too,
 *         saying another rank refused; HVD_ERR_MISMATCH on every rank when the ranks hold
 *         different lists of names (the message names the ranks and the first name that
 *         differs; nothing is compared); HVD_ERR_NOT_INITIALIZED; HVD_ERR_NO_MEMORY; a
 *         collective's status. Blocks until every rank has called it. */
HVD_API hvd_status hvd_check_consistency(const hvd_named_buffer *buffers, int n, int log,
                                         uint64_t *hashes, int *n_differ);

/* HVD_CHECK_CONSISTENCY as hvd_init read it: the DistributedOptimizer (hvd_optimizer_step, and
 * hvdc.torch's) compares the replicas' parameters and optimizer state every *steps updates and
 * rank 0 logs those that differ; 0: never (the default). The same on every rank (hvd_init
 * checks it). @return HVD_OK; HVD_ERR_NOT_INITIALIZED; HVD_ERR_INVALID_ARG for NULL. Never
 * blocks. */
HVD_API hvd_status hvd_check_consistency_every(int *steps);

/* ---- Elastic training: state that survives a restart on other hosts -----------------------
 *
 * defines: hvd_elastic_create, hvd_elastic_destroy, hvd_elastic_add_optimizer,
 *          hvd_elastic_add_sampler, hvd_elastic_add_tensor, hvd_elastic_add_bytes,
 *          hvd_elastic_set_blob, hvd_elastic_get_blob, hvd_elastic_commit,
 *          hvd_elastic_restore, hvd_elastic_sync
 *
 * Restart-based, like torchrun's elastic agent: when a rank dies, every rank fails quickly
 * (HVD_ERR_RANK_FAILED, or the launcher ends them), hvdcrun asks its host discovery script
 * which hosts are up and starts the job again on them; the program then restores its last
 * commit and continues. A commit holds what the program registered: an optimizer (parameters,
 * optimizer state, steps), a sampler (epoch and position in it), tensors and bytes by pointer
 * (e.g. the epoch and batch index), blobs.
 *
 * Example (tests/docs/check_snippets.py compiles it): the elastic part of a training loop.
 *     hvd_status elastic_epoch(hvd_optimizer *opt, hvd_sampler *s, size_t b, int every) {
 *         struct { uint64_t epoch, batch; } progress = {0, 0};
 *         hvd_elastic *es;
 *         hvd_elastic_info info;
 *         hvd_status st = hvd_elastic_create(NULL, &es);   // directory: HVD_ELASTIC_DIR
 *         if (st != HVD_OK) return st;
 *         hvd_elastic_add_optimizer(es, opt);               // parameters, state, steps
 *         hvd_elastic_add_sampler(es, s);                   // epoch and position
 *         hvd_elastic_add_bytes(es, "progress", &progress, sizeof progress);
 *         st = hvd_elastic_restore(es, &info);              // the last commit, on every rank
 *         size_t left = 0;
 *         if (st == HVD_OK) st = hvd_sampler_num_samples(s, &left, NULL);
 *         for (size_t first = 0; st == HVD_OK && first + b <= left; first += b) {
 *             // hvd_sampler_indices(s, first, b, idx); forward; backward; then:
 *             st = hvd_optimizer_step(opt, NULL);
 *             if (st == HVD_OK) st = hvd_sampler_record(s, b);
 *             progress.batch++;
 *             int stop = 0;
 *             if (st == HVD_OK && progress.batch % (uint64_t)every == 0)
 *                 st = hvd_elastic_commit(es, &stop);       // rank 0 writes, atomically
 *             if (stop) break;   // hvdcrun asked to stop here: exit 0, it restarts bigger
 *         }
 *         hvd_elastic_destroy(es);
 *         return st;
 *     }
 *
 * Only rank 0 reads and writes the directory (one file, DIR/commit.hvdc, replaced atomically
 * like a checkpoint), so rank 0 of the next run must see what rank 0 of the last one wrote: a
 * directory on a filesystem every host shares. Everything registered must be the same on
 * every rank (rank 0's values are the ones saved). The steps since the last commit are lost
 * on a failure: commit often enough, but not every step (docs/elastic.md says what a commit
 * costs). Threads: one thread at a time per state. Collective calls (marked so) are made by
 * every rank in the same order. */
typedef struct hvd_elastic hvd_elastic;

/* What hvd_elastic_restore found. */
typedef struct hvd_elastic_info {
    int restored;       /* 1: the state is the last commit's; 0: there was none, and every
                           rank now holds rank 0's state */
    uint64_t sequence;  /* the commit's number: commits of this job so far, from 1 */
    int committed_size; /* ranks of the run that wrote it */
    double age_s;       /* seconds since it was written */
} hvd_elastic_info;

/* A state whose commits live in directory dir (NULL: $HVD_ELASTIC_DIR, which hvdcrun sets in
 * elastic mode). Nothing is read or written yet. Never blocks.
 * @return HVD_OK and *out; HVD_ERR_INVALID_ARG for no directory (the message says how to give
 *         one) or a name longer than 3900 bytes; HVD_ERR_NO_MEMORY. */
HVD_API hvd_status hvd_elastic_create(const char *dir, hvd_elastic **out);

/* Frees the state (not what it points to: the optimizer, sampler and registered buffers stay
 * the caller's). NULL-safe. @return HVD_OK. */
HVD_API hvd_status hvd_elastic_destroy(hvd_elastic *st);

/* Registration; local, never blocks. Register the same things in the same order on every
 * rank. Buffers registered by pointer must outlive the state.
 *   add_optimizer: opt's parameters, state and step count (device parameters too, copied
 *                  as hvd_checkpoint_save and _load copy them); one per state.
 *   add_sampler:   its seed, epoch and position (hvd_sampler_record); one per state. After a
 *                  restore with another number of ranks it continues the epoch at the committed
 *                  position, dealt over the new ranks (hvd_sampler_set_position).
 *   add_tensor:    count elements of dtype at data, restored in place (size fixed); host
 *                  memory (device memory is refused: HVD_ERR_INVALID_ARG);
 *   add_bytes:     nbytes at data (add_tensor with HVD_UINT8), e.g. the epoch and batch index.
 * Names: 1 to 200 bytes, unique within the state.
 * @return HVD_OK; HVD_ERR_INVALID_ARG (NULL, a bad name or dtype, a name registered twice, a
 *         second optimizer or sampler); HVD_ERR_NO_MEMORY. */
HVD_API hvd_status hvd_elastic_add_optimizer(hvd_elastic *st, hvd_optimizer *opt);
HVD_API hvd_status hvd_elastic_add_sampler(hvd_elastic *st, hvd_sampler *sampler);
HVD_API hvd_status hvd_elastic_add_tensor(hvd_elastic *st, const char *name, void *data,
                                          size_t count, hvd_dtype dtype);
HVD_API hvd_status hvd_elastic_add_bytes(hvd_elastic *st, const char *name, void *data,
                                         size_t nbytes);

/* Blobs: bytes the state owns, of any size that may change between commits (e.g. a
 * serialized framework state_dict). set_blob copies nbytes from data (creating or replacing
 * the blob); get_blob gives the state's copy (valid until the next set_blob, restore, sync or
 * destroy). Only rank 0's blobs are committed; restore and sync give every rank rank 0's.
 * Local, never block. @return HVD_OK; HVD_ERR_INVALID_ARG (NULL, bad name, a name that is a
 * registered tensor, get_blob of a blob that does not exist); HVD_ERR_NO_MEMORY. */
HVD_API hvd_status hvd_elastic_set_blob(hvd_elastic *st, const char *name, const void *data,
                                        size_t nbytes);
HVD_API hvd_status hvd_elastic_get_blob(const hvd_elastic *st, const char *name,
                                        const void **data, size_t *nbytes);

/* Commits the registered state: rank 0 writes it to DIR/commit.hvdc (temporary file, fsync,
 * rename, fsync of the directory), so the file always holds the previous commit or this one,
 * whole. *stop (if stop is not NULL) is set to 1 on every rank when the launcher asked the job
 * to stop at this commit (hvdcrun --scale-up, to restart it on more hosts): the program should
 * then leave its loop, shut down and exit 0; hvdcrun restarts it and it restores this commit.
 * Pass stop on every rank, or on none. Collective; call it between steps (not between the
 * passes of one step).
 * @return HVD_OK on every rank; HVD_ERR_INVALID_ARG (NULL state, mid-step, a directory rank 0
 *         cannot write: the message names the file and the system error; the previous commit
 *         is untouched); HVD_ERR_MISMATCH when ranks registered different state;
 *         HVD_ERR_NCCL when this process's GPU communicators were aborted (a rank died or
 *         NCCL failed): device values may then hold an aborted all-reduce's partial sums, so
 *         nothing is written, also of blobs, which may hold them (hvdc.torch's state_dict);
 *         HVD_ERR_NO_MEMORY; a collective's status. Blocks. */
HVD_API hvd_status hvd_elastic_commit(hvd_elastic *st, int *stop);

/* Loads the last commit on rank 0, if there is one, and gives it to every rank; if there is
 * none, gives every rank rank 0's current state (as hvd_elastic_sync). Call it once after
 * registering, before training. Rank 0 checks the whole file against what is registered
 * before anything changes; on any error nothing changes on any rank. info (may be NULL) says
 * what was found. The number of ranks may differ from the committing run's.
 * Collective. @return HVD_OK on every rank; HVD_ERR_INVALID_ARG for an unreadable, truncated
 * or corrupted commit or an unknown format version (the message says which check failed);
 * HVD_ERR_MISMATCH for a commit of other state (another model, optimizer, sampler, or other
 * registered tensors: the message names the first difference) or ranks that registered
 * different state; HVD_ERR_NO_MEMORY; a collective's status. Blocks. */
HVD_API hvd_status hvd_elastic_restore(hvd_elastic *st, hvd_elastic_info *info);

/* Gives every rank rank 0's registered state (parameters, optimizer state, sampler position,
 * tensors, blobs), without touching the directory. Collective.
 * @return HVD_OK; HVD_ERR_INVALID_ARG; HVD_ERR_MISMATCH when ranks registered different state;
 *         a collective's status. Blocks. */
HVD_API hvd_status hvd_elastic_sync(hvd_elastic *st);

#ifdef __cplusplus
}
#endif

#endif /* HVDC_TRAIN_H */
