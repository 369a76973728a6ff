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
 * is atomic, and the data is on disk (fsync) before the rename makes it visible.
 * Only public collectives; the caller's thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "train/ckpt_format.h"
#include "train/optimizer.h"
#include "train/sampler.h"

/* What rank 0 tells the others: its status and its message. */
typedef struct outcome {
    int32_t status;
    char message[HVDC_ERROR_MAX];
} outcome;

/* Every rank's local argument check; HVD_ERR_INVALID_ARG everywhere if any rank failed. */
static hvd_status agree_args(const char *fn, hvd_status local) {
    int32_t bad = local != HVD_OK;
    char msg[HVDC_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", hvd_last_error());
    hvd_status st = hvd_allreduce("hvd.checkpoint.args", &bad, &bad, 1, HVD_INT32, HVD_MAX);
    if (st != HVD_OK) return st;
    if (local != HVD_OK) return hvdc__fail(local, "%s", msg);
    if (bad) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: another rank passed bad arguments (see "
                               "its message); nothing was done", fn);
    return HVD_OK;
}

/* Rank 0's status and message to every rank. */
static hvd_status share_outcome(hvd_status mine, int rank) {
    outcome o = {.status = (int32_t)mine};
    if (mine != HVD_OK) snprintf(o.message, sizeof o.message, "%s", hvd_last_error());
    hvd_status st = hvd_broadcast("hvd.checkpoint.outcome", &o, sizeof o, HVD_UINT8, 0);
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
    if (hvdc__opt_on_device(opt))
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s: the optimizer has parameters on a CUDA "
                          "device; checkpoints are implemented for host parameters only (copy "
                          "the model to host memory and use a host optimizer to save)", fn);
    return HVD_OK;
}

/* Describes opt (and sampler) in c; tensors (opt->n entries) is the caller's. */
static void describe(hvdc__ckpt *c, hvdc__ckpt_tensor *tensors, const hvd_optimizer *opt,
                     const hvd_sampler *sampler) {
    *c = (hvdc__ckpt){.num_tensors = (uint32_t)opt->n, .tensors = tensors,
                      .kind = (uint32_t)opt->cfg.kind, .slots = (uint32_t)opt->slots,
                      .steps = opt->steps};
    for (int i = 0; i < opt->n; i++) {
        const hvdc__opt_param *q = &opt->params[i];
        tensors[i] = (hvdc__ckpt_tensor){.name = q->name, .dtype = q->p.dtype,
                                         .count = q->p.count, .data = q->p.data,
                                         .state = q->state};
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

static hvd_status sys_fail(const char *what, const char *path, int err) {
    return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_checkpoint_save: cannot %s '%s': %s; the "
                      "previous checkpoint, if any, is untouched", what, path, strerror(err));
}

/* buf to path through a temporary file, fsync and rename (rank 0). */
static hvd_status write_atomically(const char *path, const unsigned char *buf, size_t nbytes) {
    char tmp[4096 + 32], dir[4096 + 2];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return sys_fail("create", tmp, errno);
    size_t done = 0;
    while (done < nbytes) {
        ssize_t w = write(fd, buf + done, nbytes - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return sys_fail("write", tmp, err);
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int err = errno;
        unlink(tmp);
        return sys_fail("flush to disk", tmp, err);
    }
    if (rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return sys_fail("rename a temporary file onto", path, err);
    }
    // Make the rename itself durable: fsync the directory that holds path.
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return sys_fail("open the directory of", path, errno);
    int rc = fsync(dfd), err = errno;
    close(dfd);
    if (rc != 0 && err != EINVAL) return sys_fail("flush the directory of", path, err);
    return HVD_OK;
}

hvd_status hvd_checkpoint_save(const char *path, const hvd_optimizer *opt,
                               const hvd_sampler *sampler, const hvd_checkpoint_info *info) {
    const char *fn = "hvd_checkpoint_save";
    int rank = 0;
    hvd_status st = hvd_rank(&rank);
    if (st != HVD_OK) return st;
    st = agree_args(fn, check_common(fn, path, opt));
    if (st != HVD_OK) return st;
    hvd_status mine = HVD_OK;
    if (rank == 0) {
        hvdc__ckpt_tensor *tensors = calloc((size_t)opt->n, sizeof *tensors);
        unsigned char *buf = NULL;
        size_t nbytes = 0;
        if (tensors == NULL) {
            mine = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
        } else {
            hvdc__ckpt c;
            describe(&c, tensors, opt, sampler);
            if (info != NULL) c.info = *info;
            mine = hvdc__ckpt_encode(&c, &buf, &nbytes);
            if (mine == HVD_OK) mine = write_atomically(path, buf, nbytes);
        }
        free(buf);
        free(tensors);
    }
    return share_outcome(mine, rank);
}

/* The whole of path into *buf (rank 0). */
static hvd_status read_all(const char *path, unsigned char **buf, size_t *nbytes) {
    const char *fn = "hvd_checkpoint_load";
    *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: cannot open checkpoint '%s': %s", fn, path,
                          strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: checkpoint '%s' is not a regular file", fn,
                          path);
    }
    size_t size = (size_t)sb.st_size, done = 0;
    unsigned char *b = malloc(size > 0 ? size : 1);
    if (b == NULL) {
        close(fd);
        return hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", fn, size);
    }
    while (done < size) {
        ssize_t r = read(fd, b + done, size - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        done += (size_t)r;
    }
    int err = errno;
    close(fd);
    if (done < size) {
        free(b);
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: cannot read checkpoint '%s': %s", fn, path,
                          strerror(err));
    }
    *buf = b;
    *nbytes = size;
    return HVD_OK;
}

hvd_status hvd_checkpoint_load(const char *path, hvd_optimizer *opt, hvd_sampler *sampler,
                               hvd_checkpoint_info *info) {
    const char *fn = "hvd_checkpoint_load";
    int rank = 0;
    hvd_status st = hvd_rank(&rank);
    if (st != HVD_OK) return st;
    st = agree_args(fn, check_common(fn, path, opt));
    if (st != HVD_OK) return st;

    hvdc__ckpt c = {0};
    hvd_status mine = HVD_OK;
    if (rank == 0) {
        hvdc__ckpt_tensor *tensors = calloc((size_t)opt->n, sizeof *tensors);
        unsigned char *buf = NULL;
        size_t nbytes = 0;
        if (tensors == NULL) mine = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
        if (mine == HVD_OK) mine = read_all(path, &buf, &nbytes);
        if (mine == HVD_OK) {
            describe(&c, tensors, opt, sampler);
            mine = hvdc__ckpt_decode(buf, nbytes, path, &c); // writes into opt only if valid
        }
        free(buf);
        free(tensors);
        c.tensors = NULL;
    }
    st = share_outcome(mine, rank);
    if (st != HVD_OK) return st;

    // Rank 0 holds the checkpoint; give it to everyone.
    for (int i = 0; i < opt->n && st == HVD_OK; i++) {
        char name[HVD_MAX_NAME_LEN + 1];
        snprintf(name, sizeof name, "%s.load.%s", opt->prefix, opt->params[i].name);
        hvd_param *p = &opt->params[i].p;
        st = hvd_broadcast(name, p->data, p->count, p->dtype, 0);
    }
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
