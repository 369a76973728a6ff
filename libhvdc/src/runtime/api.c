/*
 * api.c - the collective entry points. Each checks what it can check on
 * this rank alone (names, buffers, dtypes, ops, roots, sizes) and returns at once if something is
 * wrong; otherwise it builds an op and hands it to hvdc__submit (submit.c), which queues it for
 * the background thread of its process set's runtime (the global one by default).
 * Any user thread. Touches only the queue (queue_mutex) and the handles (completion_mutex).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/hash.h"
#include "base/status.h"
#include "collectives/adasum.h"
#include "gpu/gpu.h"
#include "runtime/aliasing.h"
#include "runtime/runtime.h"
#include "runtime/set_table.h"

static const hvd_options default_options = HVD_OPTIONS_INIT;

/* The caller's options as this library reads them, copied into *o: NULL is HVD_OPTIONS_INIT;
 * struct_size 0 is this header's size. A caller built with a newer hvdc.h may pass a larger
 * struct: accepted when every field this library does not know is zero (unset). */
static hvd_status take_options(const char *fn, const char *name, const hvd_options *given,
                               hvd_options *o) {
    *o = default_options;
    if (!given) return HVD_OK;
    size_t size = given->struct_size ? given->struct_size : sizeof *o;
    if (size < sizeof *o)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': options->struct_size is %zu, smaller than "
                          "any hvd_options (%zu bytes); start from HVD_OPTIONS_INIT", fn, name,
                          size, sizeof *o);
    for (size_t k = sizeof *o; k < size; k++)
        if (((const unsigned char *)given)[k] != 0)
            return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s '%s': the options set fields this libhvdc "
                              "(%s) does not know (struct_size %zu, it knows %zu bytes); run with "
                              "the libhvdc whose hvdc.h the program was built with", fn, name,
                              hvd_version(), size, sizeof *o);
    memcpy(o, given, sizeof *o);
    o->struct_size = sizeof *o;
    return HVD_OK;
}

/* ---- local validation ---- */

/* The public entry points below run their _entered body between hvdc__enter and hvdc__leave,
 * so hvd_shutdown cannot free the runtime under them; inside, the runtime is live. */

static hvd_status check_name(const char *fn, const char *name) {
    if (!name) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: name is NULL; give every operation a name that is the same on all ranks", fn);
    size_t len = strnlen(name, HVD_MAX_NAME_LEN + 1);
    if (len == 0) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: name is empty; expected 1 to %d bytes", fn, HVD_MAX_NAME_LEN);
    if (len > HVD_MAX_NAME_LEN)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: name '%.40s...' is longer than %d bytes", fn, name, HVD_MAX_NAME_LEN);
    return HVD_OK;
}

static hvd_status check_dtype(const char *fn, const char *name, int dtype) {
    if (!hvdc__dtype_valid(dtype))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': dtype %d is unknown; expected one of HVD_UINT8, HVD_INT8, HVD_INT16, HVD_UINT16, HVD_INT32, HVD_INT64, HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL", fn, name, dtype);
    return HVD_OK;
}

/* A reduce op that is known and defined on dtype (checked after check_dtype). */
static hvd_status check_op(const char *fn, const char *name, int op, hvd_dtype dtype) {
    if (!hvdc__op_valid(op))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': reduce op %d is unknown; expected HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT or HVD_ADASUM", fn, name, op);
    if (dtype == HVD_BOOL && op == HVD_AVERAGE)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': HVD_AVERAGE of bool is undefined; use HVD_SUM or HVD_MAX (logical or), or HVD_MIN or HVD_PRODUCT (logical and)", fn, name);
    return HVD_OK;
}

/* Ops that only all-reduce defines. */
static hvd_status check_not_adasum(const char *fn, const char *name, hvd_reduce_op op) {
    if (op == HVD_ADASUM)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': HVD_ADASUM applies to hvd_allreduce and hvd_grouped_allreduce only", fn, name);
    return HVD_OK;
}

/* The refusal of a count of dtype (what says which, "count N is", "sendcounts add up to")
 * that no buffer of this process can hold (base/dtype.h, HVDC_MAX_BUFFER_BYTES). Refused at
 * submission, on this rank's own arguments, before anything is sent. */
static hvd_status refuse_count(const char *fn, const char *name, const char *what, hvd_dtype dtype) {
    return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': %s more than one buffer can hold; expected "
                      "at most %zu elements of %s (%zu bytes: no process can address more; counts "
                      "are elements, not bytes)", fn, name, what, hvdc__dtype_max_count(dtype),
                      hvdc__dtype_name(dtype), (size_t)HVDC_MAX_BUFFER_BYTES);
}

/* A buffer of count elements: not NULL unless count is 0, and no more than a buffer can hold. */
static hvd_status check_buffer(const char *fn, const char *name, const char *which, const void *buf,
                               size_t count, hvd_dtype dtype) {
    if (count > hvdc__dtype_max_count(dtype)) {
        char what[64];
        snprintf(what, sizeof what, "count %zu is", count);
        return refuse_count(fn, name, what, dtype);
    }
    if (!buf && count > 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': %s is NULL but count is %zu", fn, name, which, count);
    return HVD_OK;
}

static hvd_status check_options(const char *fn, const char *name, const hvd_options *o, hvd_dtype dtype) {
    if (!isfinite(o->prescale) || !isfinite(o->postscale))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': prescale and postscale must be finite numbers", fn, name);
    if ((o->prescale != 1.0 || o->postscale != 1.0) && dtype == HVD_BOOL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': prescale/postscale need a numeric dtype, not bool", fn, name);
    if (o->device < HVD_DEVICE_CPU)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': device %d; expected HVD_DEVICE_CPU (-1) or a CUDA device ordinal", fn, name, o->device);
    if (o->shape && (o->ndim < 0 || o->ndim > HVDC_MAX_DIMS))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': shape has %d dimensions; expected 0..%d", fn, name, o->ndim, HVDC_MAX_DIMS);
    for (int d = 0; o->shape && d < o->ndim; d++)
        if (o->shape[d] < 0)
            return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': dimension %d of shape is %lld; expected >= 0", fn, name, d, (long long)o->shape[d]);
    /* the device this rank's backend runs on needs no probe: it was set up (a per-request
     * probe asked CUDA and the environment for every tensor) */
    if (o->device != HVD_DEVICE_CPU && o->device != atomic_load(&hvdc__runtime->rank_device)) {
        char why[256];
        hvd_status probe = hvdc__gpu_probe(why, sizeof why);
        if (probe != HVD_OK)
            return hvdc__fail(probe, "%s '%s': device %d requested, but %s", fn, name, o->device, why);
    }
    return HVD_OK;
}

/* Where a tensor lives: the device asked for, else wherever its memory is. */
static int tensor_device(const hvd_options *o, const void *buf) {
    if (o->device != HVD_DEVICE_CPU) return o->device;
    int d = hvdc__gpu_pointer_device(buf);
    return d >= 0 ? d : HVD_DEVICE_CPU;
}

/* Adasum's limits (hvdc.h), as Horovod words them. Each depends only on the op, the dtype, the
 * process set, the job's size and where the tensor lives, which negotiation makes every rank
 * agree on: so every rank refuses alike, before anything is sent. Device tensors: the executor
 * runs them on one node and refuses them across nodes (execute_adasum.c). */
static hvd_status check_adasum(const char *fn, const char *name, hvd_reduce_op op,
                               hvd_dtype dtype, const hvd_options *o, const void *buf) {
    if (op != HVD_ADASUM) return HVD_OK;
    int device = tensor_device(o, buf); /* only now: a driver query in GPU builds */
    if (!hvdc__dtype_is_float(dtype))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': HVD_ADASUM needs a floating dtype (float16, bfloat16, float32 or float64), not %s", fn, name, hvdc__dtype_name(dtype));
    if (o->process_set != HVD_PROCESS_SET_GLOBAL)
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s '%s': Adasum does not support non-global process sets yet. (process set %d)", fn, name, o->process_set);
    int size = hvdc__runtime->topo.size;
    if (device == HVD_DEVICE_CPU && !hvdc__adasum_is_power_of_2(size))
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s '%s': %s (%d ranks; use 1, 2, 4, 8, ... ranks, or another op)", fn, name, HVDC_ADASUM_POW2_MESSAGE, size);
    return HVD_OK;
}

/* A device request's checks on this rank alone: once this rank's GPU backend exists, the
 * request is for its device; and buf (named which), where the CUDA driver can tell, is memory
 * of that device. Refusing these here keeps NCCL from ever touching the wrong memory. */
static hvd_status check_device_buffer(const char *fn, const char *name, int device,
                                      const char *which, const void *buf) {
    if (device == HVD_DEVICE_CPU) return HVD_OK;
    int in_use = atomic_load(&hvdc__runtime->rank_device); /* also a process set's */
    if (in_use >= 0 && device != in_use)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': device %d requested, but this rank's "
                          "collectives run on CUDA device %d (chosen by its first device "
                          "request); use one device per rank", fn, name, device, in_use);
    if (!buf) return HVD_OK;
    int holder = hvdc__gpu_pointer_device(buf);
    if (holder == HVDC_GPU_PTR_HOST)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': %s is host memory, not memory of CUDA "
                          "device %d; pass device buffers (cudaMalloc) with options.device, or "
                          "host buffers with HVD_DEVICE_CPU", fn, name, which, device);
    if (holder >= 0 && holder != device)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': %s is memory of CUDA device %d, but "
                          "the request is for device %d", fn, name, which, holder, device);
    return HVD_OK;
}

/* check_device_buffer for a send and a receive buffer. */
static hvd_status check_device_buffers(const char *fn, const char *name, int device,
                                       const void *send, const void *recv) {
    hvd_status st = check_device_buffer(fn, name, device, "sendbuf", send);
    /* in place (a gradient's usual case): one pointer query, a CUDA call, per tensor */
    if (st != HVD_OK || recv == send) return st;
    return check_device_buffer(fn, name, device, "recvbuf", recv);
}

/* A reduction on a device: NCCL has no 16-bit integers (hvdc.h). */
static hvd_status check_device_reduce(const char *fn, const char *name, int device, hvd_dtype dtype) {
    if (device != HVD_DEVICE_CPU && (dtype == HVD_INT16 || dtype == HVD_UINT16))
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s '%s': %s on CUDA device %d cannot be reduced (NCCL has no 16-bit integer type); use int32, or host memory", fn, name, hvdc__dtype_name(dtype), device);
    return HVD_OK;
}

/* An op with one tensor, named name. */
static hvd_status single_op(const char *fn, hvdc_kind kind, const char *name, const void *send,
                            void *recv, size_t count, hvd_dtype dtype, hvdc_op **out) {
    hvdc_op *op = hvdc__op_create(1);
    if (!op) return hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory", fn, name);
    hvdc__op_set_counts(op, &count, 1); /* fits the op's own room: cannot fail */
    memcpy(op->desc.name, name, strlen(name) + 1); /* check_name kept it to the room */
    op->desc.kind = (uint8_t)kind;
    op->desc.dtype = (uint8_t)dtype;
    op->tensors[0] = (hvdc_tensor){op->desc.name, send, recv, count, 0};
    *out = op;
    return HVD_OK;
}

/* options->shape (checked by check_options) copied into what req announces, so negotiation
 * compares it across ranks. It is the caller's description of its tensor and is not checked
 * against the count: a binding may pack the tensor first (hvdc.torch pads a reducescatter's
 * rows). On failure frees req. */
static hvd_status attach_shape(const char *fn, const char *name, hvdc_op *req, const hvd_options *o) {
    if (!o->shape) return HVD_OK;
    if (o->ndim > 0 && !(req->desc.shape = malloc((size_t)o->ndim * sizeof *req->desc.shape))) {
        hvdc__op_free(req);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory", fn, name);
    }
    for (int d = 0; d < o->ndim; d++) req->desc.shape[d] = (uint64_t)o->shape[d];
    req->desc.ndim = (uint32_t)o->ndim;
    req->desc.has_shape = 1;
    return HVD_OK;
}

/* Takes the handle's address: it is read only after the submission has set it. */
static hvd_status wait_for(hvd_status submitted, hvd_handle *handle) {
    if (submitted != HVD_OK) return submitted;
    return hvd_wait(handle);
}

/* ---- reductions: allreduce, reducescatter ---- */

/* What every submission of one named tensor checks first: the name, a handle to fill, the dtype. */
static hvd_status check_call(const char *fn, const char *name, const hvd_handle *handle,
                             hvd_dtype dtype) {
    hvd_status st;
    CHECK(check_name(fn, name));
    if (!handle) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': handle is NULL", fn, name);
    CHECK(check_dtype(fn, name, (int)dtype));
fail:
    return st;
}

/* What every reducing submission checks: name, handle, dtype, op, send buffer, options.
 * *send_device: where sendbuf lives (tensor_device), for the caller to reuse: in a CUDA build
 * each tensor_device of host memory is a driver query. */
static hvd_status check_reduction(const char *fn, const char *name, const hvd_handle *handle,
                                  hvd_dtype dtype, hvd_reduce_op op, const void *sendbuf,
                                  size_t count, const hvd_options *o, int *send_device) {
    hvd_status st;
    CHECK(check_call(fn, name, handle, dtype));
    CHECK(check_op(fn, name, (int)op, dtype));
    CHECK(check_buffer(fn, name, "sendbuf", sendbuf, count, dtype));
    CHECK(check_options(fn, name, o, dtype));
    *send_device = tensor_device(o, sendbuf);
    CHECK(check_device_reduce(fn, name, *send_device, dtype));
fail:
    return st;
}

/* The reduction's fields of what req announces, for a tensor on device (tensor_device). */
static void set_reduction(hvdc_op *req, hvd_reduce_op op, const hvd_options *o, int device) {
    req->desc.op = (uint8_t)op;
    req->desc.prescale = o->prescale;
    req->desc.postscale = o->postscale;
    req->desc.device = device;
    req->ready_event = o->ready_event;
}

/* hvd_allreduce's checked op into *out, and its process set into *set; handle: where the
 * caller wants it (the blocking call: one of its own, for the checks). */
static hvd_status allreduce_request(const char *name, const void *sendbuf, void *recvbuf,
                                    size_t count, hvd_dtype dtype, hvd_reduce_op op,
                                    const hvd_options *options, const hvd_handle *handle,
                                    hvdc_op **out, int *set) {
    const char *fn = "hvd_allreduce";
    hvd_options o_;
    hvd_status st = take_options(fn, name ? name : "", options, &o_);
    if (st != HVD_OK) return st;
    const hvd_options *o = &o_;
    hvdc_op *req = NULL;
    int send_device;
    CHECK(check_reduction(fn, name, handle, dtype, op, sendbuf, count, o, &send_device));
    CHECK(check_adasum(fn, name, op, dtype, o, recvbuf));
    CHECK(check_buffer(fn, name, "recvbuf", recvbuf, count, dtype));
    size_t nbytes = count * hvd_dtype_size(dtype);
    CHECK(hvdc__check_overlap(fn, name, sendbuf, nbytes, recvbuf, nbytes, 1));
    /* in place (a gradient's usual case): the same memory, asked about once */
    int device = recvbuf == sendbuf ? send_device : tensor_device(o, recvbuf);
    CHECK(check_device_buffers(fn, name, device, sendbuf, recvbuf));
    CHECK(single_op(fn, HVDC_KIND_ALLREDUCE, name, sendbuf, recvbuf, count, dtype, &req));
    CHECK(attach_shape(fn, name, req, o));
    set_reduction(req, op, o, device);
    *out = req;
    *set = o->process_set;
    return HVD_OK;
fail:
    return st;
}

static hvd_status allreduce_async_entered(const char *name, const void *sendbuf, void *recvbuf,
                                          size_t count, hvd_dtype dtype, hvd_reduce_op op,
                                          const hvd_options *options, hvd_handle *handle) {
    hvdc_op *req = NULL;
    int set = HVD_PROCESS_SET_GLOBAL;
    hvd_status st = allreduce_request(name, sendbuf, recvbuf, count, dtype, op, options, handle,
                                      &req, &set);
    return st == HVD_OK ? hvdc__submit("hvd_allreduce", set, req, handle) : st;
}

/* Submitted and waited for in one call, so that it may run on this thread (caller_path.h). */
static hvd_status allreduce_entered(const char *name, const void *sendbuf, void *recvbuf,
                                    size_t count, hvd_dtype dtype, hvd_reduce_op op,
                                    const hvd_options *options) {
    hvdc_op *req = NULL;
    int set = HVD_PROCESS_SET_GLOBAL;
    hvd_handle own = HVD_HANDLE_NULL;
    hvd_status st = allreduce_request(name, sendbuf, recvbuf, count, dtype, op, options, &own,
                                      &req, &set);
    return st == HVD_OK ? hvdc__submit_wait("hvd_allreduce", set, req) : st;
}

hvd_status hvd_allreduce(const char *name, const void *sendbuf, void *recvbuf, size_t count,
                         hvd_dtype dtype, hvd_reduce_op op) {
    HVDC_GATED("hvd_allreduce", allreduce_entered(name, sendbuf, recvbuf, count, dtype, op, NULL));
}

hvd_status hvd_allreduce_with_options(const char *name, const void *sendbuf, void *recvbuf,
                                      size_t count, hvd_dtype dtype, hvd_reduce_op op,
                                      const hvd_options *options) {
    HVDC_GATED("hvd_allreduce",
               allreduce_entered(name, sendbuf, recvbuf, count, dtype, op, options));
}

static uint64_t hash_names(int n, const char *const names[]) {
    uint64_t h = HVDC_FNV_OFFSET;
    for (int i = 0; i < n; i++) h = hvdc__fnv1a_string(h, names[i], 1); /* the NUL separates names */
    return h;
}

static hvd_status grouped_allreduce_async_entered(int n, const char *const names[], const void *const sendbufs[],
                                       void *const recvbufs[], const size_t counts[], hvd_dtype dtype,
                                       hvd_reduce_op op, const hvd_options *options, hvd_handle *handle) {
    const char *fn = "hvd_grouped_allreduce";
    hvd_options o_;
    hvd_status st = take_options(fn, names && n > 0 && names[0] ? names[0] : "", options, &o_);
    if (st != HVD_OK) return st;
    const hvd_options *o = &o_;
    if (n <= 0 || !names || !sendbufs || !recvbufs || !counts || !handle)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: expected n > 0 (got %d) and non-NULL names, sendbufs, recvbufs, counts and handle", fn, n);
    size_t names_bytes = 0;
    for (int i = 0; i < n; i++) {
        CHECK(check_name(fn, names[i]));
        names_bytes += strlen(names[i]) + 1;
    }
    CHECK(check_dtype(fn, names[0], (int)dtype));
    CHECK(check_op(fn, names[0], (int)op, dtype));
    size_t total = 0, most = hvdc__dtype_max_count(dtype);
    for (int i = 0; i < n; i++) {
        CHECK(check_buffer(fn, names[i], "sendbufs[i]", sendbufs[i], counts[i], dtype));
        CHECK(check_buffer(fn, names[i], "recvbufs[i]", recvbufs[i], counts[i], dtype));
        /* the group is fused into one buffer: its sum must fit one too */
        if (counts[i] > most - total)
            return refuse_count(fn, names[i], "the group's counts up to this tensor add up to", dtype);
        total += counts[i];
    }
    CHECK(hvdc__check_group(fn, n, names, sendbufs, recvbufs, counts, hvd_dtype_size(dtype)));
    CHECK(check_options(fn, names[0], o, dtype));
    if (o->shape)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': options->shape describes one tensor; a grouped all-reduce compares its tensors' counts (pass shape NULL)", fn, names[0]);
    int device = tensor_device(o, recvbufs[0]);
    CHECK(check_device_reduce(fn, names[0], device, dtype));
    CHECK(check_adasum(fn, names[0], op, dtype, o, recvbufs[0]));
    for (int i = 0; i < n; i++)
        CHECK(check_device_buffers(fn, names[i], device, sendbufs[i], recvbufs[i]));
    hvdc_op *req = hvdc__op_create((size_t)n);
    if (req) req->member_names = malloc(names_bytes);
    if (!req || !req->member_names) {
        hvdc__op_free(req);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory", fn, names[0]);
    }
    memcpy(req->desc.name, names[0], strlen(names[0]) + 1); /* checked like every name */
    req->desc.kind = HVDC_KIND_ALLREDUCE;
    req->desc.dtype = (uint8_t)dtype;
    req->desc.op = (uint8_t)op;
    req->desc.prescale = o->prescale;
    req->desc.postscale = o->postscale;
    hvdc__op_set_counts(req, counts, (size_t)n); /* fits the op's own room */
    req->desc.members_hash = hash_names(n, names);
    req->desc.device = device;
    req->ready_event = o->ready_event;
    char *at = req->member_names;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]) + 1;
        memcpy(at, names[i], len);
        req->tensors[i] = (hvdc_tensor){at, sendbufs[i], recvbufs[i], counts[i], 0};
        at += len;
    }
    return hvdc__submit(fn, o->process_set, req, handle);
fail:
    return st;
}

hvd_status hvd_grouped_allreduce(int n, const char *const names[], const void *const sendbufs[],
                                 void *const recvbufs[], const size_t counts[], hvd_dtype dtype,
                                 hvd_reduce_op op) {
    hvd_handle h = HVD_HANDLE_NULL;
    return wait_for(hvd_grouped_allreduce_async(n, names, sendbufs, recvbufs, counts, dtype, op, NULL, &h), &h);
}

/* ---- broadcast, allgather, reducescatter, alltoall, barrier ---- */

/* The options of a collective that does not reduce: no scaling; the device as check_options. */
static hvd_status check_plain_options(const char *fn, const char *name, const hvd_options *o) {
    if (o->prescale != 1.0 || o->postscale != 1.0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': prescale/postscale apply to reductions only", fn, name);
    return check_options(fn, name, o, HVD_UINT8);
}

static hvd_status broadcast_async_entered(const char *name, void *buf, size_t count, hvd_dtype dtype, int root,
                               const hvd_options *options, hvd_handle *handle) {
    const char *fn = "hvd_broadcast";
    hvd_options o_;
    hvd_status st = take_options(fn, name ? name : "", options, &o_);
    if (st != HVD_OK) return st;
    const hvd_options *o = &o_;
    hvdc_op *req = NULL;
    CHECK(check_call(fn, name, handle, dtype));
    CHECK(check_buffer(fn, name, "buf", buf, count, dtype));
    /* root is a global rank; the set's runtime numbers it by its position in the set */
    int in_set = hvdc__set_position(o->process_set, root);
    if (in_set < 0 && o->process_set == HVD_PROCESS_SET_GLOBAL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': root %d is out of range; expected 0..%d", fn, name, root, hvdc__runtime->topo.size - 1);
    if (in_set < 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': root %d is not a rank of process set %d (or the set does not exist)", fn, name, root, o->process_set);
    CHECK(check_plain_options(fn, name, o));
    int device = tensor_device(o, buf);
    CHECK(check_device_buffer(fn, name, device, "buf", buf));
    CHECK(single_op(fn, HVDC_KIND_BROADCAST, name, buf, buf, count, dtype, &req));
    CHECK(attach_shape(fn, name, req, o));
    req->desc.root = in_set;
    req->desc.device = device;
    req->ready_event = o->ready_event;
    return hvdc__submit(fn, o->process_set, req, handle);
fail:
    return st;
}

hvd_status hvd_broadcast(const char *name, void *buf, size_t count, hvd_dtype dtype, int root) {
    hvd_handle h = HVD_HANDLE_NULL;
    return wait_for(hvd_broadcast_async(name, buf, count, dtype, root, NULL, &h), &h);
}

/* The _alloc variants: libhvdc allocates the output once negotiation knows its size. Only host
 * memory (the buffer is malloc'ed); the options may not scale (nothing is reduced). */
static hvd_status check_alloc(const char *fn, const char *name, void **alloc_out,
                              const void *sendbuf, const hvd_options *o) {
    if (!alloc_out) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': recvbuf (where the allocated result goes) is NULL", fn, name);
    *alloc_out = NULL;
    if (o && (o->prescale != 1.0 || o->postscale != 1.0))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': prescale/postscale apply to reductions only", fn, name);
    if ((o && o->device != HVD_DEVICE_CPU) || hvdc__gpu_pointer_device(sendbuf) >= 0)
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s '%s': libhvdc allocates results in host memory only; for device tensors allocate the output and use the call without _alloc", fn, name);
    return HVD_OK;
}

/* The output of an allgather or alltoall that sends send_count elements: allocated by libhvdc
 * (recv_capacity SIZE_MAX, the _alloc variants) or the caller's recvbuf, which must hold
 * recv_capacity elements apart from sendbuf; no scaling; *device is where the tensors live. */
static hvd_status check_output(const char *fn, const char *name, const void *sendbuf,
                               size_t send_count, void *recvbuf, size_t recv_capacity,
                               hvd_dtype dtype, void **alloc_out, const hvd_options *o,
                               int *device) {
    hvd_status st;
    if (recv_capacity == SIZE_MAX) {
        CHECK(check_alloc(fn, name, alloc_out, sendbuf, o));
    } else {
        CHECK(check_buffer(fn, name, "recvbuf", recvbuf, recv_capacity, dtype));
        CHECK(hvdc__check_overlap(fn, name, sendbuf, send_count * hvd_dtype_size(dtype), recvbuf,
                                  recv_capacity * hvd_dtype_size(dtype), 0));
    }
    CHECK(check_plain_options(fn, name, o));
    *device = alloc_out ? HVD_DEVICE_CPU : tensor_device(o, recvbuf);
    CHECK(check_device_buffers(fn, name, *device, sendbuf, recvbuf));
fail:
    return st;
}

static hvd_status allgather_async_entered(const char *name, const void *sendbuf, size_t count, void *recvbuf,
                               size_t recv_capacity, hvd_dtype dtype, size_t *recv_count,
                               size_t *rank_counts, hvd_handle *handle, void **alloc_out,
                               const hvd_options *options) {
    const char *fn = alloc_out ? "hvd_allgather_alloc" : "hvd_allgather";
    hvd_options o_;
    hvd_status st = take_options(fn, name ? name : "", options, &o_);
    if (st != HVD_OK) return st;
    const hvd_options *o = &o_;
    hvdc_op *req = NULL;
    CHECK(check_call(fn, name, handle, dtype));
    CHECK(check_buffer(fn, name, "sendbuf", sendbuf, count, dtype));
    int device = HVD_DEVICE_CPU;
    CHECK(check_output(fn, name, sendbuf, count, recvbuf, recv_capacity, dtype, alloc_out, o, &device));
    CHECK(single_op(fn, HVDC_KIND_ALLGATHER, name, sendbuf, recvbuf, count, dtype, &req));
    CHECK(attach_shape(fn, name, req, o));
    req->alloc_out = alloc_out;
    req->desc.capacity = recv_capacity == SIZE_MAX ? UINT64_MAX : recv_capacity;
    req->recv_count_out = recv_count;
    req->rank_counts_out = rank_counts;
    req->desc.device = device;
    req->ready_event = o->ready_event;
    return hvdc__submit(fn, o->process_set, req, handle);
fail:
    return st;
}

hvd_status hvd_allgather(const char *name, const void *sendbuf, size_t count, void *recvbuf,
                         size_t recv_capacity, hvd_dtype dtype, size_t *recv_count, size_t *rank_counts) {
    hvd_handle h = HVD_HANDLE_NULL;
    return wait_for(hvd_allgather_async(name, sendbuf, count, recvbuf, recv_capacity, dtype, recv_count, rank_counts, NULL, &h), &h);
}

static hvd_status reducescatter_async_entered(const char *name, const void *sendbuf, void *recvbuf, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op, const hvd_options *options,
                                   size_t *recv_count, hvd_handle *handle) {
    const char *fn = "hvd_reducescatter";
    hvd_options o_;
    hvd_status st = take_options(fn, name ? name : "", options, &o_);
    if (st != HVD_OK) return st;
    const hvd_options *o = &o_;
    hvdc_op *req = NULL;
    int device;
    CHECK(check_reduction(fn, name, handle, dtype, op, sendbuf, count, o, &device));
    CHECK(check_not_adasum(fn, name, op));
    int size = 1, rank = 0; /* in the set; a rank outside it is refused by submit */
    CHECK(hvdc__set_shape(o->process_set, fn, &size, &rank));
    size_t block = rank < 0 ? 0 : count / (size_t)size + ((size_t)rank < count % (size_t)size ? 1 : 0);
    CHECK(check_buffer(fn, name, "recvbuf", recvbuf, block, dtype));
    CHECK(hvdc__check_overlap(fn, name, sendbuf, count * hvd_dtype_size(dtype), recvbuf,
                              block * hvd_dtype_size(dtype), 1));
    CHECK(check_device_buffers(fn, name, device, sendbuf, recvbuf));
    CHECK(single_op(fn, HVDC_KIND_REDUCESCATTER, name, sendbuf, recvbuf, count, dtype, &req));
    CHECK(attach_shape(fn, name, req, o));
    set_reduction(req, op, o, device);
    req->recv_count_out = recv_count;
    return hvdc__submit(fn, o->process_set, req, handle);
fail:
    return st;
}

hvd_status hvd_reducescatter(const char *name, const void *sendbuf, void *recvbuf, size_t count,
                             hvd_dtype dtype, hvd_reduce_op op, size_t *recv_count) {
    hvd_handle h = HVD_HANDLE_NULL;
    return wait_for(hvd_reducescatter_async(name, sendbuf, recvbuf, count, dtype, op, NULL, recv_count, &h), &h);
}

static hvd_status alltoall_async_entered(const char *name, const void *sendbuf, const size_t sendcounts[],
                              void *recvbuf, size_t recv_capacity, hvd_dtype dtype, size_t *recv_count,
                              size_t recvcounts[], hvd_handle *handle, void **alloc_out,
                              const hvd_options *options) {
    const char *fn = alloc_out ? "hvd_alltoall_alloc" : "hvd_alltoall";
    hvd_options o_;
    hvd_status st = take_options(fn, name ? name : "", options, &o_);
    if (st != HVD_OK) return st;
    const hvd_options *o = &o_;
    hvdc_op *req = NULL;
    CHECK(check_name(fn, name));
    if (!handle || !sendcounts)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s '%s': handle and sendcounts must not be NULL", fn, name);
    CHECK(check_dtype(fn, name, (int)dtype));
    int set = o->process_set, set_size = 1, set_rank = 0;
    CHECK(hvdc__set_shape(set, fn, &set_size, &set_rank)); /* sendcounts: one per set rank */
    size_t size = (size_t)set_size, total = 0, most = hvdc__dtype_max_count(dtype);
    for (size_t d = 0; d < size; d++) {
        if (sendcounts[d] > most - total)
            return refuse_count(fn, name, "sendcounts add up to", dtype);
        total += sendcounts[d];
    }
    CHECK(check_buffer(fn, name, "sendbuf", sendbuf, total, dtype));
    int device = HVD_DEVICE_CPU;
    CHECK(check_output(fn, name, sendbuf, total, recvbuf, recv_capacity, dtype, alloc_out, o, &device));
    CHECK(single_op(fn, HVDC_KIND_ALLTOALL, name, sendbuf, recvbuf, total, dtype, &req));
    CHECK(attach_shape(fn, name, req, o));
    req->alloc_out = alloc_out;
    if (hvdc__op_set_counts(req, sendcounts, size) != 0) {
        hvdc__op_free(req);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "%s '%s': out of memory", fn, name);
    }
    req->desc.capacity = recv_capacity == SIZE_MAX ? UINT64_MAX : recv_capacity;
    req->recv_count_out = recv_count;
    req->rank_counts_out = recvcounts;
    req->desc.device = device;
    req->ready_event = o->ready_event;
    return hvdc__submit(fn, set, req, handle);
fail:
    return st;
}

hvd_status hvd_alltoall(const char *name, const void *sendbuf, const size_t sendcounts[], void *recvbuf,
                        size_t recv_capacity, hvd_dtype dtype, size_t *recv_count, size_t recvcounts[]) {
    hvd_handle h = HVD_HANDLE_NULL;
    return wait_for(hvd_alltoall_async(name, sendbuf, sendcounts, recvbuf, recv_capacity, dtype, recv_count, recvcounts, NULL, &h), &h);
}

/* Barriers are named by their count in their set's runtime. */
static hvd_status barrier_async_entered(const hvd_options *options, hvd_handle *handle) {
    const char *fn = "hvd_barrier";
    hvd_options o;
    hvd_status st = take_options(fn, "", options, &o);
    if (st != HVD_OK) return st;
    int set = o.process_set, slot = 0;
    hvdc_op *req = NULL;
    hvdc_runtime *rt = NULL;
    if (!handle) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: handle is NULL", fn);
    st = hvdc__set_acquire(set, fn, &rt, &slot);
    if (st != HVD_OK) return st;
    char name[64];
    pthread_mutex_lock(&rt->queue_mutex);
    unsigned long long n = rt->barrier_count++;
    pthread_mutex_unlock(&rt->queue_mutex);
    hvdc__set_release(slot);
    snprintf(name, sizeof name, HVDC_BARRIER_PREFIX "%llu", n);
    CHECK(single_op(fn, HVDC_KIND_BARRIER, name, NULL, NULL, 0, HVD_UINT8, &req));
    return hvdc__submit(fn, set, req, handle);
fail:
    return st;
}

static hvd_status join_entered(int *last_joined_rank) {
    hvdc_op *req = NULL;
    hvd_status st = single_op("hvd_join", HVDC_KIND_JOIN, HVDC_JOIN_NAME, NULL, NULL, 0, HVD_UINT8, &req);
    if (st != HVD_OK) return st;
    size_t last = 0;
    req->recv_count_out = &last;
    hvd_handle h = HVD_HANDLE_NULL;
    st = wait_for(hvdc__submit("hvd_join", HVD_PROCESS_SET_GLOBAL, req, &h), &h);
    if (st == HVD_OK && last_joined_rank) *last_joined_rank = (int)last;
    return st;
}

/* ---- public entry points: enter, run, leave ---- */

hvd_status hvd_join(int *last_joined_rank) {
    HVDC_GATED("hvd_join", join_entered(last_joined_rank));
}

hvd_status hvd_allreduce_async(const char *name, const void *sendbuf, void *recvbuf, size_t count,
                               hvd_dtype dtype, hvd_reduce_op op, const hvd_options *options,
                               hvd_handle *handle) {
    HVDC_GATED("hvd_allreduce", allreduce_async_entered(name, sendbuf, recvbuf, count, dtype, op, options, handle));
}

hvd_status hvd_grouped_allreduce_async(int n, const char *const names[], const void *const sendbufs[],
                                       void *const recvbufs[], const size_t counts[], hvd_dtype dtype,
                                       hvd_reduce_op op, const hvd_options *options, hvd_handle *handle) {
    HVDC_GATED("hvd_grouped_allreduce", grouped_allreduce_async_entered(n, names, sendbufs, recvbufs, counts, dtype, op, options, handle));
}

hvd_status hvd_broadcast_async(const char *name, void *buf, size_t count, hvd_dtype dtype, int root,
                               const hvd_options *options, hvd_handle *handle) {
    HVDC_GATED("hvd_broadcast", broadcast_async_entered(name, buf, count, dtype, root, options, handle));
}

hvd_status hvd_allgather_async(const char *name, const void *sendbuf, size_t count, void *recvbuf,
                               size_t recv_capacity, hvd_dtype dtype, size_t *recv_count,
                               size_t *rank_counts, const hvd_options *options, hvd_handle *handle) {
    /* SIZE_MAX is the _alloc variant's marker: no caller's buffer holds that many elements */
    if (recv_capacity == SIZE_MAX) recv_capacity = SIZE_MAX - 1;
    HVDC_GATED("hvd_allgather", allgather_async_entered(name, sendbuf, count, recvbuf, recv_capacity, dtype, recv_count, rank_counts, handle, NULL, options));
}

hvd_status hvd_allgather_alloc_async(const char *name, const void *sendbuf, size_t count,
                                     hvd_dtype dtype, const hvd_options *options, void **recvbuf,
                                     size_t *recv_count, size_t *rank_counts, hvd_handle *handle) {
    HVDC_GATED("hvd_allgather_alloc", allgather_async_entered(name, sendbuf, count, NULL, SIZE_MAX, dtype, recv_count, rank_counts, handle, recvbuf, options));
}

hvd_status hvd_reducescatter_async(const char *name, const void *sendbuf, void *recvbuf, size_t count,
                                   hvd_dtype dtype, hvd_reduce_op op, const hvd_options *options,
                                   size_t *recv_count, hvd_handle *handle) {
    HVDC_GATED("hvd_reducescatter", reducescatter_async_entered(name, sendbuf, recvbuf, count, dtype, op, options, recv_count, handle));
}

hvd_status hvd_alltoall_async(const char *name, const void *sendbuf, const size_t sendcounts[],
                              void *recvbuf, size_t recv_capacity, hvd_dtype dtype, size_t *recv_count,
                              size_t recvcounts[], const hvd_options *options, hvd_handle *handle) {
    if (recv_capacity == SIZE_MAX) recv_capacity = SIZE_MAX - 1;
    HVDC_GATED("hvd_alltoall", alltoall_async_entered(name, sendbuf, sendcounts, recvbuf, recv_capacity, dtype, recv_count, recvcounts, handle, NULL, options));
}

hvd_status hvd_alltoall_alloc_async(const char *name, const void *sendbuf,
                                    const size_t sendcounts[], hvd_dtype dtype,
                                    const hvd_options *options, void **recvbuf,
                                    size_t *recv_count, size_t recvcounts[], hvd_handle *handle) {
    HVDC_GATED("hvd_alltoall_alloc", alltoall_async_entered(name, sendbuf, sendcounts, NULL, SIZE_MAX, dtype, recv_count, recvcounts, handle, recvbuf, options));
}

void hvd_free(void *buf) { free(buf); }

hvd_status hvd_barrier_async(const hvd_options *options, hvd_handle *handle) {
    HVDC_GATED("hvd_barrier", barrier_async_entered(options, handle));
}

hvd_status hvd_barrier(void) {
    hvd_handle h = HVD_HANDLE_NULL;
    return wait_for(hvd_barrier_async(NULL, &h), &h);
}
