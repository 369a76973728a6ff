/*
 * optimizer.c - the distributed optimizer: Horovod's DistributedOptimizer for a C model.
 *
 *   create:  check every rank registered the same parameters (allgather of a signature hash),
 *            then broadcast root's parameter values, so the replicas start equal
 *   backward (last layer first):
 *      grad_ready(i) ---> hvd_allreduce_async("<prefix>.grad.<name_i>", AVERAGE)   in flight
 *      grad_ready(j) ---> ...                                                      in flight
 *   step:    submit what was not announced, wait for every handle (device parameters under a
 *            built-in rule: on cfg.stream, not on the host), apply the inner rule (update.c)
 *            identically on every rank
 *
 * With backward_passes_per_step = k, passes 1 .. k-1 only add each gradient into a local
 * accumulator; on pass k the gradient becomes (accumulator + gradient) / k and is reduced.
 * With compression the gradient is rounded into a 16-bit staging buffer (wire), the staging
 * buffer is averaged, and the result is widened back into grad.
 *
 * Device parameters (p.device >= 0, GPU builds): state and accumulator are device memory; the
 * gradient's all-reduce is submitted with options.device and a ready event recorded on
 * cfg.stream (NCCL's stream waits on it, the host does not), and the update is queued on
 * cfg.stream as CUDA kernels (optim_gpu.h) computing update_rules.h's formulas, like the host.
 *
 * Only the public collectives are used. Runs on the caller's thread (one at a time per
 * optimizer); the all-reduces run on libhvdc's background thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/hash.h"
#include "base/half.h"
#include "base/status.h"
#include "gpu/gpu.h"
#include "train/local_check.h"
#include "train/optim_gpu.h"
#include "train/optimizer.h"

#define DEFAULT_PREFIX "hvd.opt"

/* "<prefix>.<what>.<name>" into out (HVD_MAX_NAME_LEN + 1 bytes); -1 if it does not fit. */
static int op_name(char *out, const char *prefix, const char *what, const char *name) {
    int len = snprintf(out, HVD_MAX_NAME_LEN + 1, "%s.%s.%s", prefix, what, name);
    return len < 0 || len > HVD_MAX_NAME_LEN ? -1 : 0;
}

/* A hash of everything the ranks must agree on: the parameter table and the configuration. */
static int64_t signature(const hvd_optimizer *opt) {
    const hvd_optimizer_config *c = &opt->cfg;
    uint64_t h = HVDC_FNV_OFFSET;
    h = hvdc__fnv1a(h, &opt->n, sizeof opt->n);
    for (int i = 0; i < opt->n; i++) {
        const hvd_param *p = &opt->params[i].p;
        uint64_t count = p->count;
        int32_t dtype = (int32_t)p->dtype;
        h = hvdc__fnv1a(h, p->name, strlen(p->name) + 1);
        h = hvdc__fnv1a(h, &count, sizeof count);
        h = hvdc__fnv1a(h, &dtype, sizeof dtype);
    }
    int32_t ints[5] = {(int32_t)c->kind, c->nesterov, c->backward_passes_per_step,
                       (int32_t)c->compression, c->root};
    double reals[7] = {c->lr, c->momentum, c->weight_decay, c->beta1, c->beta2, c->eps, 0.0};
    h = hvdc__fnv1a(h, ints, sizeof ints);
    h = hvdc__fnv1a(h, reals, sizeof reals);
    h = hvdc__fnv1a(h, opt->prefix, strlen(opt->prefix));
    return (int64_t)(h >> 1);
}

static hvd_status check_config(const hvd_optimizer_config *c) {
    const char *fn = "hvd_optimizer_create";
    if (c->kind < HVD_OPT_SGD || c->kind > HVD_OPT_CUSTOM)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: unknown optimizer kind %d", fn, (int)c->kind);
    if (!isfinite(c->lr) || c->lr < 0.0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: lr must be finite and >= 0, not %g", fn, c->lr);
    if (!isfinite(c->momentum) || c->momentum < 0.0 || c->momentum >= 1.0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: momentum must be in [0, 1), not %g", fn,
                          c->momentum);
    if (c->nesterov && (c->kind != HVD_OPT_SGD || c->momentum == 0.0))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: nesterov needs HVD_OPT_SGD with momentum > 0",
                          fn);
    if (!isfinite(c->weight_decay) || c->weight_decay < 0.0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: weight_decay must be finite and >= 0, not %g",
                          fn, c->weight_decay);
    if ((c->kind == HVD_OPT_ADAM || c->kind == HVD_OPT_ADAMW) &&
        !(c->beta1 >= 0.0 && c->beta1 < 1.0 && c->beta2 >= 0.0 && c->beta2 < 1.0 && c->eps > 0.0))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: Adam needs 0 <= beta1, beta2 < 1 and eps > 0 "
                          "(got %g, %g, %g)", fn, c->beta1, c->beta2, c->eps);
    if (c->kind == HVD_OPT_CUSTOM && c->step_fn == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: HVD_OPT_CUSTOM needs a step_fn", fn);
    if (c->backward_passes_per_step < 1)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: backward_passes_per_step must be >= 1, not %d",
                          fn, c->backward_passes_per_step);
    if (c->compression < HVD_COMPRESS_NONE || c->compression > HVD_COMPRESS_BF16)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: unknown compression %d", fn,
                          (int)c->compression);
    const char *prefix = c->name_prefix ? c->name_prefix : DEFAULT_PREFIX;
    if (prefix[0] == '\0' || strlen(prefix) > HVDC_OPT_PREFIX_MAX)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: name_prefix must have 1 to %d bytes", fn,
                          HVDC_OPT_PREFIX_MAX);
    return HVD_OK;
}

static hvd_status check_param(const hvd_param *p, int i, const hvd_optimizer_config *c) {
    const char *fn = "hvd_optimizer_create";
    if (p->name == NULL || p->name[0] == '\0')
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: params[%d] has no name", fn, i);
    if (p->device < HVD_DEVICE_CPU)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: parameter '%s' has device %d; use "
                          "HVD_DEVICE_CPU (-1) or a CUDA ordinal", fn, p->name, p->device);
    if (p->device != HVD_DEVICE_CPU) {
        hvd_status st = hvdc__gpu_optim_check(fn, p->device);
        if (st != HVD_OK) return st;
        if (c->compression != HVD_COMPRESS_NONE)
            return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s: parameter '%s' is on device %d; "
                              "gradient compression is implemented for host parameters only "
                              "(use HVD_COMPRESS_NONE)", fn, p->name, p->device);
    }
    if (p->dtype != HVD_FLOAT32 && p->dtype != HVD_FLOAT64)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: parameter '%s' is %s; the optimizer updates "
                          "float32 or float64 parameters", fn, p->name,
                          hvdc__dtype_name((int)p->dtype));
    if (p->data == NULL || p->grad == NULL || p->count == 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: parameter '%s' needs data, grad and count > 0",
                          fn, p->name);
    /* the memory must be where .device says: the host's update would crash on device memory,
     * a kernel would fault on host memory (pinned memory, or no driver: cannot tell, allowed) */
    for (int k = 0; k < 2; k++) {
        int where = hvdc__gpu_pointer_device(k ? p->grad : p->data);
        if (where == HVDC_GPU_PTR_UNKNOWN || where == p->device) continue;
        char is[48], says[48];
        if (where == HVDC_GPU_PTR_HOST) snprintf(is, sizeof is, "host memory");
        else snprintf(is, sizeof is, "memory of CUDA device %d", where);
        if (p->device == HVD_DEVICE_CPU) snprintf(says, sizeof says, "HVD_DEVICE_CPU");
        else snprintf(says, sizeof says, "device %d", p->device);
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: parameter '%s': its %s is %s, but its "
                          ".device is %s; set .device to where the memory is", fn, p->name,
                          k ? "grad" : "data", is, says);
    }
    return HVD_OK;
}

/* Every rank's signature against rank 0's; HVD_ERR_MISMATCH on every rank if any differs. */
static hvd_status agree_across_ranks(const hvd_optimizer *opt) {
    int size = 0;
    hvd_status st = hvd_size(&size);
    if (st != HVD_OK) return st;
    int64_t mine = signature(opt), *all = calloc((size_t)size, sizeof *all);
    if (all == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_optimizer_create: out of memory");
    char name[HVD_MAX_NAME_LEN + 1];
    op_name(name, opt->prefix, "create", "signature");
    st = hvd_allgather(name, &mine, 1, all, (size_t)size, HVD_INT64, NULL, NULL);
    if (st == HVD_OK) {
        char ranks[256] = "";
        size_t used = 0;
        for (int r = 1; r < size; r++) {
            if (all[r] == all[0] || used + 12 >= sizeof ranks) continue;
            used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%d", used ? ", " : "", r);
        }
        if (used > 0)
            st = hvdc__fail(HVD_ERR_MISMATCH, "hvd_optimizer_create: rank(s) %s registered "
                            "different parameters (names, counts, dtypes, order) or settings "
                            "than rank 0; every rank must register the same model with the same "
                            "configuration", ranks);
    }
    free(all);
    return st;
}

/* Keeps the first failure's status and message. */
static void keep_first(hvd_status st, hvd_status *first, char *msg) {
    if (st == HVD_OK || *first != HVD_OK) return;
    *first = st;
    snprintf(msg, HVDC_ERROR_MAX, "%s", hvd_last_error());
}

/* Waits for every handle in flight and releases it; returns the first failure (its message
 * kept). on_stream: a device parameter's collective is waited for by cfg.stream, on the device
 * (what is queued there next, the update, sees its result), not by the host; where the stream
 * cannot wait (hvd_wait_on_stream leaves the handle live), the host waits instead. The wait
 * makes the parameter's device current: a NULL cfg.stream is that device's legacy stream. */
static hvd_status wait_all(hvd_optimizer *opt, int on_stream) {
    hvd_status first = HVD_OK;
    char msg[HVDC_ERROR_MAX] = "";
    for (int i = 0; i < opt->n; i++) {
        hvd_handle *h = &opt->params[i].handle;
        if (*h != HVD_HANDLE_NULL && on_stream && opt->params[i].p.device >= 0)
            keep_first(hvdc__gpu_optim_wait_on_stream(opt->params[i].p.device, h,
                                                      opt->cfg.stream), &first, msg);
        if (*h != HVD_HANDLE_NULL) keep_first(hvd_wait(h), &first, msg);
        *h = HVD_HANDLE_NULL;
    }
    return first == HVD_OK ? HVD_OK : hvdc__fail(first, "%s", msg);
}

hvd_status hvd_optimizer_destroy(hvd_optimizer *opt) {
    if (opt == NULL) return HVD_OK;
    hvd_status st = opt->params ? wait_all(opt, 0) : HVD_OK; /* before freeing device state */
    for (int i = 0; opt->params && i < opt->n; i++) {
        hvdc__opt_param *q = &opt->params[i];
        free(q->name);
        free(q->grad_op);
        if (q->p.device >= 0) {
            hvdc__gpu_optim_free(q->p.device, q->state); // waits for queued updates
            hvdc__gpu_optim_free(q->p.device, q->accum);
            hvdc__gpu_optim_event_destroy(q->p.device, q->event);
        } else {
            free(q->state);
            free(q->accum);
        }
        free(q->wire);
    }
    free(opt->params);
    free(opt);
    return st;
}

/* Copies and allocates everything for params[i]. */
static hvd_status param_init(hvd_optimizer *opt, int i, const hvd_param *p) {
    hvdc__opt_param *q = &opt->params[i];
    char name[HVD_MAX_NAME_LEN + 1];
    if (op_name(name, opt->prefix, "state", p->name) != 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_create: parameter name '%s' is too "
                          "long: '%s.state.<name>' must fit in %d bytes", p->name, opt->prefix,
                          HVD_MAX_NAME_LEN);
    for (int j = 0; j < i; j++) {
        if (strcmp(opt->params[j].name, p->name) == 0)
            return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_create: parameters %d and %d "
                              "are both named '%s'; names must be unique", j, i, p->name);
    }
    op_name(name, opt->prefix, "grad", p->name);
    q->p = *p;
    q->name = strdup(p->name);
    q->grad_op = strdup(name);
    q->p.name = q->name;
    size_t esize = hvd_dtype_size(p->dtype);
    int ok = q->name && q->grad_op;
    if (ok && p->device >= 0) {
        hvd_status st = hvdc__gpu_optim_event_create(p->device, &q->event);
        void *mem = NULL;
        if (st == HVD_OK && opt->slots > 0) {
            st = hvdc__gpu_optim_alloc(p->device, p->count * (size_t)opt->slots * sizeof(double),
                                       &mem);
            q->state = mem;
        }
        if (st == HVD_OK && opt->cfg.backward_passes_per_step > 1) {
            st = hvdc__gpu_optim_alloc(p->device, p->count * esize, &mem);
            q->accum = mem;
        }
        return st;
    }
    if (opt->slots > 0) ok = ok && (q->state = calloc(p->count * (size_t)opt->slots, sizeof(double)));
    if (opt->cfg.backward_passes_per_step > 1) ok = ok && (q->accum = calloc(p->count, esize));
    if (opt->cfg.compression != HVD_COMPRESS_NONE) ok = ok && (q->wire = calloc(p->count, 2));
    return ok ? HVD_OK : hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_optimizer_create: out of memory");
}

/* The options for a collective on q's memory: a device parameter's request names its device
 * and waits (on the device) for what the caller queued on cfg.stream so far. */
static hvd_status device_options(const hvd_optimizer *opt, hvdc__opt_param *q, hvd_options *o) {
    *o = (hvd_options)HVD_OPTIONS_INIT;
    if (q->p.device < 0) return HVD_OK;
    o->device = q->p.device;
    o->ready_event = q->event;
    return hvdc__gpu_optim_event_record(q->p.device, q->event, opt->cfg.stream);
}

/* At creation, and after a checkpoint or elastic restore (optimizer.h). */
hvd_status hvdc__opt_broadcast_params(hvd_optimizer *opt, int root) {
    hvd_status st = HVD_OK;
    for (int i = 0; i < opt->n && st == HVD_OK; i++) {
        char name[HVD_MAX_NAME_LEN + 1];
        op_name(name, opt->prefix, "init", opt->params[i].name);
        hvd_param *p = &opt->params[i].p;
        hvd_options o;
        st = device_options(opt, &opt->params[i], &o);
        if (st == HVD_OK)
            st = hvd_broadcast_async(name, p->data, p->count, p->dtype, root, &o,
                                     &opt->params[i].handle);
    }
    hvd_status waited = wait_all(opt, 1);
    return st != HVD_OK ? st : waited;
}

/* This rank's arguments, checked; nothing is sent. */
static hvd_status check_args(const hvd_param *params, int n, const hvd_optimizer_config *cfg,
                             hvd_optimizer **out) {
    hvd_status st;
    if (params == NULL || cfg == NULL || out == NULL || n < 1)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_create: needs params, n >= 1, cfg "
                          "and out (got %p, %d, %p, %p)", (const void *)params, n,
                          (const void *)cfg, (void *)out);
    CHECK(check_config(cfg));
    int size = 0;
    CHECK(hvd_size(&size));
    if (cfg->root < 0 || cfg->root >= size)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_create: root %d is not a rank "
                          "(0 .. %d)", cfg->root, size - 1);
    for (int i = 0; i < n; i++) CHECK(check_param(&params[i], i, cfg));
    return HVD_OK;
fail:
    return st;
}

/* This rank's optimizer, its memory allocated (state, events; device memory for device
 * parameters); nothing is sent. On failure *out is NULL. */
static hvd_status build(const hvd_param *params, int n, const hvd_optimizer_config *cfg,
                        hvd_optimizer **out) {
    *out = NULL;
    hvd_optimizer *opt = calloc(1, sizeof *opt);
    if (opt == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_optimizer_create: out of memory");
    opt->cfg = *cfg;
    snprintf(opt->prefix, sizeof opt->prefix, "%s", cfg->name_prefix ? cfg->name_prefix
                                                                      : DEFAULT_PREFIX);
    opt->cfg.name_prefix = opt->prefix;
    opt->slots = hvdc__opt_state_slots(cfg->kind, cfg->momentum);
    hvd_check_consistency_every(&opt->check_every); /* initialized: 0 on failure */
    opt->params = calloc((size_t)n, sizeof *opt->params);
    if (opt->params == NULL) {
        free(opt);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_optimizer_create: out of memory");
    }
    for (int i = 0; i < n; i++) {
        opt->n = i + 1; // so destroy frees what param_init allocated
        hvd_status st = param_init(opt, i, &params[i]);
        if (st != HVD_OK) {
            char msg[HVDC_ERROR_MAX];
            snprintf(msg, sizeof msg, "%s", hvd_last_error());
            hvd_optimizer_destroy(opt);
            return hvdc__fail(st, "%s", msg);
        }
    }
    *out = opt;
    return HVD_OK;
}

hvd_status hvd_optimizer_create(const hvd_param *params, int n,
                                const hvd_optimizer_config *cfg, hvd_optimizer **out) {
    hvd_status st;
    hvd_optimizer *opt = NULL;
    if (out != NULL) *out = NULL;
    if (!hvd_is_initialized())
        return hvdc__fail(HVD_ERR_NOT_INITIALIZED, "hvd_optimizer_create: libhvdc is not "
                          "initialized; call hvd_init() first");
    /* a rank that refuses (bad arguments, memory not where .device says, no memory) tells the
     * others before anything else is sent, so no rank waits for it in the first collective */
    st = check_args(params, n, cfg, out);
    if (st == HVD_OK) st = build(params, n, cfg, &opt);
    st = hvdc__agree_local_check("hvd_optimizer_create", "hvd.optimizer.create.args", st);
    if (st != HVD_OK) goto fail_opt;
    st = agree_across_ranks(opt);
    if (st == HVD_OK) st = hvdc__opt_broadcast_params(opt, cfg->root);
    if (st != HVD_OK) goto fail_opt;
    *out = opt;
    return HVD_OK;
fail_opt: {
    char msg[HVDC_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", hvd_last_error());
    hvd_optimizer_destroy(opt);
    return hvdc__fail(st, "%s", msg);
}
}

/* accum += grad (an accumulating pass); on the device, queued on cfg.stream. */
static hvd_status accumulate(const hvd_optimizer *opt, hvdc__opt_param *q) {
    if (q->p.device >= 0)
        return hvdc__gpu_accumulate(q->p.device, opt->cfg.stream, q->accum, q->p.grad,
                                    q->p.count, q->p.dtype, 0, 1);
    if (q->p.dtype == HVD_FLOAT64) {
        double *a = q->accum;
        const double *g = q->p.grad;
        for (size_t k = 0; k < q->p.count; k++) a[k] += g[k];
    } else {
        float *a = q->accum;
        const float *g = q->p.grad;
        for (size_t k = 0; k < q->p.count; k++) a[k] += g[k];
    }
    return HVD_OK;
}

/* The last pass: grad = (accum + grad) / passes, accum = 0; compress; start the all-reduce. */
static hvd_status submit(hvd_optimizer *opt, hvdc__opt_param *q) {
    size_t count = q->p.count;
    int passes = opt->cfg.backward_passes_per_step;
    if (q->p.device >= 0) {
        hvd_status st = HVD_OK;
        hvd_options o;
        if (passes > 1)
            st = hvdc__gpu_accumulate(q->p.device, opt->cfg.stream, q->accum, q->p.grad, count,
                                      q->p.dtype, 1, passes);
        if (st == HVD_OK) st = device_options(opt, q, &o);
        if (st == HVD_OK)
            st = hvd_allreduce_async(q->grad_op, q->p.grad, q->p.grad, count, q->p.dtype,
                                     HVD_AVERAGE, &o, &q->handle);
        return st;
    }
    if (passes > 1) {
        if (q->p.dtype == HVD_FLOAT64) {
            double *a = q->accum, *g = q->p.grad;
            for (size_t k = 0; k < count; k++) g[k] = (a[k] + g[k]) / passes;
        } else {
            float *a = q->accum, *g = q->p.grad;
            for (size_t k = 0; k < count; k++) g[k] = (a[k] + g[k]) / (float)passes;
        }
        memset(q->accum, 0, count * hvd_dtype_size(q->p.dtype));
    }
    if (opt->cfg.compression == HVD_COMPRESS_NONE)
        return hvd_allreduce_async(q->grad_op, q->p.grad, q->p.grad, count, q->p.dtype,
                                   HVD_AVERAGE, NULL, &q->handle);
    int fp16 = opt->cfg.compression == HVD_COMPRESS_FP16;
    for (size_t k = 0; k < count; k++) {
        float g = q->p.dtype == HVD_FLOAT64 ? (float)((const double *)q->p.grad)[k]
                                            : ((const float *)q->p.grad)[k];
        q->wire[k] = fp16 ? hvdc__float_to_half(g) : hvdc__float_to_bf16(g);
    }
    return hvd_allreduce_async(q->grad_op, q->wire, q->wire, count,
                               fp16 ? HVD_FLOAT16 : HVD_BFLOAT16, HVD_AVERAGE, NULL, &q->handle);
}

/* grad = widen(wire), after the compressed all-reduce completed. */
static void decompress(const hvd_optimizer *opt, hvdc__opt_param *q) {
    int fp16 = opt->cfg.compression == HVD_COMPRESS_FP16;
    for (size_t k = 0; k < q->p.count; k++) {
        float g = fp16 ? hvdc__half_to_float(q->wire[k]) : hvdc__bf16_to_float(q->wire[k]);
        if (q->p.dtype == HVD_FLOAT64) ((double *)q->p.grad)[k] = g;
        else ((float *)q->p.grad)[k] = g;
    }
}

hvd_status hvd_optimizer_grad_ready(hvd_optimizer *opt, int index) {
    if (opt == NULL || index < 0 || index >= opt->n)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_grad_ready: no parameter %d (the "
                          "optimizer has %d)", index, opt ? opt->n : 0);
    hvdc__opt_param *q = &opt->params[index];
    if (q->ready)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_grad_ready: '%s' was already "
                          "announced in this backward pass; call hvd_optimizer_step to end the "
                          "pass", q->name);
    q->ready = 1;
    if (opt->pass + 1 < opt->cfg.backward_passes_per_step) return accumulate(opt, q);
    return submit(opt, q);
}

static hvd_status apply(hvd_optimizer *opt) {
    const hvd_optimizer_config *c = &opt->cfg;
    uint64_t t = opt->steps + 1;
    for (int i = 0; i < opt->n; i++) {
        hvdc__opt_param *q = &opt->params[i];
        size_t count = q->p.count;
        if (q->p.device >= 0 && c->kind != HVD_OPT_CUSTOM) {
            hvd_status st;
            if (c->kind == HVD_OPT_SGD)
                st = hvdc__gpu_sgd_step(q->p.device, c->stream, q->p.data, q->p.grad, q->state,
                                        count, q->p.dtype, c->lr, c->momentum, c->nesterov,
                                        c->weight_decay);
            else
                st = hvdc__gpu_adam_step(q->p.device, c->stream, q->p.data, q->p.grad, q->state,
                                         q->state + count, count, q->p.dtype, c->lr, c->beta1,
                                         c->beta2, c->eps, c->weight_decay,
                                         c->kind == HVD_OPT_ADAMW, t);
            if (st != HVD_OK) return st; // message recorded, with file:line
            continue;
        }
        switch (c->kind) {
        case HVD_OPT_SGD:
            hvdc__sgd_update(q->p.data, q->p.grad, q->state, count, q->p.dtype, c->lr,
                             c->momentum, c->nesterov, c->weight_decay);
            break;
        case HVD_OPT_ADAM:
        case HVD_OPT_ADAMW:
            hvdc__adam_update(q->p.data, q->p.grad, q->state, q->state + count, count,
                              q->p.dtype, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay,
                              c->kind == HVD_OPT_ADAMW, t);
            break;
        case HVD_OPT_CUSTOM: {
            hvd_status st = c->step_fn(c->step_ctx, &q->p, i, t);
            if (st != HVD_OK) {
                const char *detail = hvd_last_error();
                char msg[HVDC_ERROR_MAX];
                snprintf(msg, sizeof msg, "%s", detail);
                return hvdc__fail(st, "hvd_optimizer_step: step_fn failed on '%s' (%s)%s%s",
                                  q->name, hvd_status_string(st), msg[0] ? ": " : "", msg);
            }
            break;
        }
        }
    }
    opt->steps = t;
    return HVD_OK;
}

hvd_status hvd_optimizer_step(hvd_optimizer *opt, int *applied) {
    if (applied != NULL) *applied = 0;
    if (opt == NULL) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_step: opt is NULL");
    int last = opt->pass + 1 >= opt->cfg.backward_passes_per_step;
    hvd_status st = HVD_OK;
    for (int i = 0; i < opt->n; i++) {
        hvdc__opt_param *q = &opt->params[i];
        if (!q->ready && st == HVD_OK) st = last ? submit(opt, q) : accumulate(opt, q);
        q->ready = 0;
    }
    if (!last) {
        opt->pass++;
        return st;
    }
    opt->pass = 0;
    /* the built-in rules are queued on cfg.stream, which waits for the gradients on the device;
     * a step_fn is promised averaged gradients (hvdc.h) wherever it reads them: the host waits */
    hvd_status waited = wait_all(opt, opt->cfg.kind != HVD_OPT_CUSTOM);
    if (st != HVD_OK) return st;
    if (waited != HVD_OK) return waited;
    if (opt->cfg.compression != HVD_COMPRESS_NONE) {
        for (int i = 0; i < opt->n; i++) decompress(opt, &opt->params[i]);
    }
    st = apply(opt);
    if (st == HVD_OK && applied != NULL) *applied = 1;
    if (st == HVD_OK && opt->check_every > 0 && opt->steps % (uint64_t)opt->check_every == 0)
        st = hvdc__opt_check_replicas(opt);
    return st;
}

hvd_status hvd_optimizer_set_lr(hvd_optimizer *opt, double lr) {
    if (opt == NULL || !isfinite(lr) || lr < 0.0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_set_lr: needs an optimizer and a "
                          "finite lr >= 0 (got %g)", lr);
    opt->cfg.lr = lr;
    return HVD_OK;
}

hvd_status hvd_optimizer_steps(const hvd_optimizer *opt, uint64_t *steps) {
    if (opt == NULL || steps == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_optimizer_steps: opt and steps must not be "
                          "NULL");
    *steps = opt->steps;
    return HVD_OK;
}

hvd_status hvd_broadcast_optimizer_state(hvd_optimizer *opt, int root) {
    int size = 0;
    hvd_status st;
    if (opt == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_broadcast_optimizer_state: opt is NULL");
    CHECK(hvd_size(&size));
    if (root < 0 || root >= size)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_broadcast_optimizer_state: root %d is not a "
                          "rank (0 .. %d)", root, size - 1);
    if (opt->pass != 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_broadcast_optimizer_state: called between "
                          "the backward passes of one step (%d of %d done); call it after "
                          "hvd_optimizer_step applied an update", opt->pass,
                          opt->cfg.backward_passes_per_step);
    CHECK(wait_all(opt, 1));
    for (int i = 0; i < opt->n && st == HVD_OK && opt->slots > 0; i++) {
        char name[HVD_MAX_NAME_LEN + 1];
        hvdc__opt_param *q = &opt->params[i];
        op_name(name, opt->prefix, "state", q->name);
        hvd_options o;
        st = device_options(opt, q, &o);
        if (st == HVD_OK)
            st = hvd_broadcast_async(name, q->state, q->p.count * (size_t)opt->slots,
                                     HVD_FLOAT64, root, &o, &q->handle);
    }
    hvd_status waited = wait_all(opt, 1);
    CHECK(st);
    CHECK(waited);
    char name[HVD_MAX_NAME_LEN + 1];
    op_name(name, opt->prefix, "steps", "count"); // cannot clash with "<prefix>.state.<name>"
    int64_t steps = (int64_t)opt->steps;
    CHECK(hvd_broadcast(name, &steps, 1, HVD_INT64, root));
    opt->steps = (uint64_t)steps;
    return HVD_OK;
fail:
    return st;
}
