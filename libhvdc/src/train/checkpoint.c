/*
 * checkpoint.c - hvd_checkpoint_save and hvd_checkpoint_load: rank 0 writes or reads the file
 * (format in ckpt_format.h); the others learn the outcome, and on load the contents, by
 * broadcast.
 *
 *   save:  every rank: args ok?  --allreduce MAX-->  all agree
 *          rank 0: encode -> write path.tmp.<pid> -> fsync -> rename over path -> fsync dir
 *          rank 0 --broadcast {status, message}--> everyone returns the same status
 *   load:  every rank: args ok?  --allreduce MAX-->  all agree
 *          rank 0: read whole file -> validate everything -> copy into its optimizer
 *          rank 0 --broadcast {status, message}-->  on failure nobody has changed anything
 *          rank 0 --broadcast parameters, optimizer state, {info, sampler seed, epoch}--> all
 *
 * A crash at any point of save leaves path either as it was or as the new whole file: rename
 * is atomic, and the data is on disk (fsync) before the rename makes it visible (file_io.c).
 * Only public collectives; the caller's thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "train/checkpoint.h"
#include "train/file_io.h"
#include "train/local_check.h"
#include "train/optimizer.h"
#include "train/sampler.h"

/* What rank 0 tells the others: its status and its message. */
typedef struct outcome {
    int32_t status;
    char message[HVDC_ERROR_MAX];
} outcome;

/* Rank 0's status and message to every rank. */
static hvd_status share_outcome(hvd_status mine, int rank) {
    outcome o = {.status = (int32_t)mine};
    if (mine != HVD_OK) snprintf(o.message, sizeof o.message, "%s", hvd_last_error());
    hvd_status st = hvd_broadcast("hvd.checkpoint.outcome", &o, sizeof o, HVD_UINT8, 0);
    /* rank 0 also says why it wrote nothing (the file is as it was) */
    if (st != HVD_OK && rank == 0 && mine != HVD_OK)
        return hvdc__fail(st, "%s (%s)", hvd_last_error(), o.message);
    if (st != HVD_OK) return st;
    if (o.status == HVD_OK) return HVD_OK;
    if (rank == 0) return hvdc__fail((hvd_status)o.status, "%s", o.message);
    return hvdc__fail((hvd_status)o.status, "rank 0: %s", o.message);
}

static hvd_status check_common(const char *fn, const char *path, const hvd_optimizer *opt) {
    if (path == NULL || path[0] == '\0' || opt == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: needs a path and an optimizer", fn);
    if (strlen(path) > 4000)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: path is longer than 4000 bytes", fn);
    if (opt->pass != 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: called between the backward passes of one "
                          "step (%d of %d done); call it after hvd_optimizer_step applied an "
                          "update", fn, opt->pass, opt->cfg.backward_passes_per_step);
    return HVD_OK;
}

void hvdc__ckpt_describe(hvdc__ckpt *c, hvdc__ckpt_tensor *tensors, const hvd_optimizer *opt,
                         const hvdc__opt_host_view *view, const hvd_sampler *sampler) {
    *c = (hvdc__ckpt){.num_tensors = (uint32_t)opt->n, .tensors = tensors,
                      .kind = (uint32_t)opt->cfg.kind, .slots = (uint32_t)opt->slots,
                      .steps = opt->steps};
    for (int i = 0; i < opt->n; i++) {
        const hvdc__opt_param *q = &opt->params[i];
        tensors[i] = (hvdc__ckpt_tensor){.name = q->name, .dtype = q->p.dtype,
                                         .count = q->p.count, .data = view->data[i],
                                         .state = view->state[i]};
    }
    if (sampler != NULL) {
        c->has_sampler = 1;
        c->sampler_shuffle = (uint32_t)sampler->shuffle;
        c->sampler_drop_last = (uint32_t)sampler->drop_last;
        c->sampler_size = sampler->dataset_size;
        c->sampler_seed = sampler->seed;
        c->sampler_epoch = sampler->epoch;
    }
}

hvd_status hvd_checkpoint_save(const char *path, const hvd_optimizer *opt,
                               const hvd_sampler *sampler, const hvd_checkpoint_info *info) {
    const char *fn = "hvd_checkpoint_save";
    int rank = 0;
    hvd_status st = hvd_rank(&rank);
    if (st != HVD_OK) return st;
    st = hvdc__agree_local_check(fn, "hvd.checkpoint.args", check_common(fn, path, opt));
    if (st != HVD_OK) return st;
    hvd_status mine = HVD_OK;
    if (rank == 0) {
        hvdc__ckpt_tensor *tensors = calloc((size_t)opt->n, sizeof *tensors);
        unsigned char *buf = NULL;
        size_t nbytes = 0;
        hvdc__opt_host_view view = {0};
        if (tensors == NULL) mine = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
        /* device parameters: their values after the updates queued so far */
        if (mine == HVD_OK) mine = hvdc__opt_view_open(fn, opt, 1, &view);
        if (mine == HVD_OK) {
            hvdc__ckpt c;
            hvdc__ckpt_describe(&c, tensors, opt, &view, sampler);
            if (info != NULL) c.info = *info;
            mine = hvdc__ckpt_encode(&c, &buf, &nbytes);
            if (mine == HVD_OK) mine = hvdc__write_file_atomically(fn, path, buf, nbytes);
        }
        hvdc__opt_view_close(opt, &view);
        free(buf);
        free(tensors);
    }
    return share_outcome(mine, rank);
}

hvd_status hvd_checkpoint_load(const char *path, hvd_optimizer *opt, hvd_sampler *sampler,
                               hvd_checkpoint_info *info) {
    const char *fn = "hvd_checkpoint_load";
    int rank = 0;
    hvd_status st = hvd_rank(&rank);
    if (st != HVD_OK) return st;
    st = hvdc__agree_local_check(fn, "hvd.checkpoint.args", check_common(fn, path, opt));
    if (st != HVD_OK) return st;

    hvdc__ckpt c = {0};
    hvd_status mine = HVD_OK;
    if (rank == 0) {
        hvdc__ckpt_tensor *tensors = calloc((size_t)opt->n, sizeof *tensors);
        unsigned char *buf = NULL;
        size_t nbytes = 0;
        hvdc__opt_host_view view = {0};
        if (tensors == NULL) mine = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
        if (mine == HVD_OK) mine = hvdc__read_file(fn, "checkpoint", path, &buf, &nbytes, NULL);
        if (mine == HVD_OK) mine = hvdc__opt_view_open(fn, opt, 0, &view);
        if (mine == HVD_OK) {
            hvdc__ckpt_describe(&c, tensors, opt, &view, sampler);
            mine = hvdc__ckpt_decode(buf, nbytes, path, &c); // writes into the view only if valid
            /* the device's parameters change only now, once the whole file is known good */
            if (mine == HVD_OK) mine = hvdc__opt_view_store(fn, opt, &view);
        }
        hvdc__opt_view_close(opt, &view);
        free(buf);
        free(tensors);
        c.tensors = NULL;
    }
    st = share_outcome(mine, rank);
    if (st != HVD_OK) return st;

    // Rank 0 holds the checkpoint; give it to everyone (device parameters on the device).
    st = hvdc__opt_broadcast_params(opt, 0);
    if (rank == 0) opt->steps = c.steps;
    if (st == HVD_OK) st = hvd_broadcast_optimizer_state(opt, 0);
    uint64_t rest[8] = {c.info.epoch, c.info.step, c.info.user[0], c.info.user[1],
                        c.info.user[2], c.info.user[3], c.sampler_seed, c.sampler_epoch};
    if (st == HVD_OK) st = hvd_broadcast("hvd.checkpoint.info", rest, 8, HVD_INT64, 0);
    if (st != HVD_OK) return st;
    if (info != NULL) {
        *info = (hvd_checkpoint_info){.epoch = rest[0], .step = rest[1],
                                      .user = {rest[2], rest[3], rest[4], rest[5]}};
    }
    if (sampler != NULL) {
        sampler->seed = rest[6];
        st = hvd_sampler_set_epoch(sampler, rest[7]);
    }
    return st;
}
