/*
 * elastic.c - commit, restore and sync of hvd_elastic, the training state that survives a
 * restart of the job on another set of hosts (hvdcrun's elastic mode). What is in it was
 * registered with elastic_state.c: an optimizer (parameters, optimizer state and step count,
 * encoded by the checkpoint code), a sampler (epoch and position within it), tensors and
 * bytes by pointer, and owned blobs.
 *
 *   commit:   every rank: same layout?  --allreduce MAX-->  all agree
 *             rank 0: encode (elastic_format.h) -> DIR/commit.hvdc atomically (file_io.c)
 *                     DIR/stop.request there? -> rename it to DIR/stop.ack, stop = 1
 *             rank 0 --broadcast {status, stop, sequence, message}--> every rank returns it
 *   restore:  every rank: same layout?  --allreduce MAX-->  all agree
 *             rank 0: read DIR/commit.hvdc -> check it all against the registration
 *                     -> copy it in (the optimizer last: its decode validates before writing)
 *             rank 0 --broadcast {status, found, ...}-->   on failure nobody changed anything
 *             sync: rank 0 --broadcast every registered thing--> every rank
 *
 * Only rank 0 touches DIR, so after a restart rank 0 must see the directory the previous
 * rank 0 wrote: a filesystem every host shares (or a first host that never changes).
 * The launcher asks a running job to stop at its next commit (to restart it on more hosts) by
 * creating DIR/stop.request; the ack tells it the job stopped for that and not because it was
 * done.
 * Only public collectives; the caller's thread (one at a time per state).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/device_abort.h"
#include "base/dtype.h"
#include "base/hash.h"
#include "base/status.h"
#include "train/checkpoint.h"
#include "train/elastic.h"
#include "train/elastic_format.h"
#include "train/file_io.h"
#include "train/optimizer.h"
#include "train/sampler.h"

#define COMMIT_FILE "commit.hvdc"
#define STOP_REQUEST "stop.request"
#define STOP_ACK "stop.ack"

/* What rank 0 tells every rank at the end of a commit or a restore. */
typedef struct outcome {
    int32_t status;
    int32_t flag; // commit: stop; restore: a commit was found
    uint64_t sequence;
    uint64_t time_ms;
    uint32_t size;
    char message[HVDC_ERROR_MAX];
} outcome;

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void path_in(char *out, size_t cap, const hvd_elastic *st, const char *file) {
    snprintf(out, cap, "%s/%s", st->dir, file);
}

/* ---- agreement across ranks ---------------------------------------------------------------- */

/* A hash of what is registered (not the values): ranks must register the same things. Blobs
 * are left out: rank 0's are the ones that count. */
static int64_t layout_hash(const hvd_elastic *st) {
    uint64_t h = HVDC_FNV_OFFSET, v;
    v = st->opt != NULL ? (uint64_t)st->opt->n : UINT64_MAX;
    h = hvdc__fnv1a(h, &v, sizeof v);
    for (int i = 0; st->opt != NULL && i < st->opt->n; i++) {
        const hvd_param *p = &st->opt->params[i].p;
        h = hvdc__fnv1a_string(h, p->name, 1);
        v = (uint64_t)p->count * 16 + (uint64_t)p->dtype;
        h = hvdc__fnv1a(h, &v, sizeof v);
    }
    if (st->opt != NULL) h = hvdc__fnv1a(h, &st->opt->cfg.kind, sizeof st->opt->cfg.kind);
    v = st->sampler != NULL ? (uint64_t)st->sampler->dataset_size : UINT64_MAX;
    h = hvdc__fnv1a(h, &v, sizeof v);
    for (int i = 0; i < st->n; i++) {
        const hvdc__elastic_item *e = &st->entries[i];
        if (e->kind != HVDC_ELASTIC_TENSOR) continue;
        h = hvdc__fnv1a_string(h, e->name, 1);
        v = (uint64_t)e->count * 16 + (uint64_t)e->dtype;
        h = hvdc__fnv1a(h, &v, sizeof v);
    }
    return (int64_t)(h >> 2);
}

/* Collective: every rank's local check and layout; fails on every rank if any differs. */
static hvd_status agree(const char *fn, hvd_status local, const hvd_elastic *st) {
    char msg[HVDC_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", hvd_last_error());
    int64_t h = local == HVD_OK ? layout_hash(st) : 0;
    int64_t v[3] = {local != HVD_OK, h, -h};
    hvd_status s = hvd_allreduce("hvd.elastic.agree", v, v, 3, HVD_INT64, HVD_MAX);
    if (s != HVD_OK) return s;
    if (local != HVD_OK) return hvdc__fail(local, "%s", msg);
    if (v[0]) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: another rank passed bad arguments "
                                "(see its message); nothing was done", fn);
    if (v[1] != -v[2])
        return hvdc__fail(HVD_ERR_MISMATCH, "%s: the ranks registered different elastic state "
                          "(optimizer parameters, sampler or tensors: names, counts or dtypes "
                          "differ); register the same things in the same order on every rank",
                          fn);
    return HVD_OK;
}

static hvd_status check_state(const char *fn, const hvd_elastic *st) {
    if (st == NULL) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: state is NULL", fn);
    if (st->opt != NULL && st->opt->pass != 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: called between the backward passes of one "
                          "step (%d of %d done); call it after hvd_optimizer_step applied an "
                          "update", fn, st->opt->pass, st->opt->cfg.backward_passes_per_step);
    return HVD_OK;
}

/* Rank 0's outcome to every rank; each returns rank 0's status and message. */
static hvd_status share(outcome *o, hvd_status mine, int rank, const char *name) {
    o->status = (int32_t)mine;
    if (mine != HVD_OK) snprintf(o->message, sizeof o->message, "%s", hvd_last_error());
    hvd_status s = hvd_broadcast(name, o, sizeof *o, HVD_UINT8, 0);
    if (s != HVD_OK) return s;
    if (o->status == HVD_OK) return HVD_OK;
    if (rank == 0) return hvdc__fail((hvd_status)o->status, "%s", o->message);
    return hvdc__fail((hvd_status)o->status, "rank 0: %s", o->message);
}

/* ---- commit -------------------------------------------------------------------------------- */

/* Rank 0: the state as a commit file's bytes. */
static hvd_status encode(const hvd_elastic *st, uint64_t sequence, unsigned char **out,
                         size_t *nbytes) {
    int size = 1;
    hvd_size(&size);
    hvdc__elastic_image img = {.sequence = sequence, .size = (uint32_t)size, .time_ms = now_ms(),
                               .num_entries = (uint32_t)st->n};
    hvdc__elastic_entry *entries = calloc((size_t)st->n + 1, sizeof *entries);
    hvdc__ckpt_tensor *tensors = st->opt ? calloc((size_t)st->opt->n, sizeof *tensors) : NULL;
    unsigned char *ckpt = NULL;
    hvdc__opt_host_view view = {0};
    hvd_status s = HVD_OK;
    if (entries == NULL || (st->opt != NULL && tensors == NULL))
        s = hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_elastic_commit: out of memory");
    if (s == HVD_OK && st->opt != NULL) {
        /* device parameters: their values after the updates queued so far */
        s = hvdc__opt_view_open("hvd_elastic_commit", st->opt, 1, &view);
        hvdc__ckpt c;
        if (s == HVD_OK) {
            hvdc__ckpt_describe(&c, tensors, st->opt, &view, NULL);
            s = hvdc__ckpt_encode(&c, &ckpt, &img.ckpt_nbytes);
        }
        img.ckpt = ckpt;
        hvdc__opt_view_close(st->opt, &view);
    }
    if (s == HVD_OK && st->sampler != NULL) {
        const hvd_sampler *sp = st->sampler;
        size_t position = 0;
        hvd_sampler_position(sp, &position);
        img.has_sampler = 1;
        img.sampler = (hvdc__elastic_sampler){.dataset_size = sp->dataset_size, .seed = sp->seed,
                                              .epoch = sp->epoch, .position = position,
                                              .shuffle = (uint32_t)sp->shuffle,
                                              .drop_last = (uint32_t)sp->drop_last};
    }
    for (int i = 0; s == HVD_OK && i < st->n; i++) {
        const hvdc__elastic_item *e = &st->entries[i];
        memcpy(entries[i].name, e->name, sizeof e->name);
        entries[i].kind = e->kind;
        entries[i].dtype = e->dtype;
        entries[i].count = e->count;
        entries[i].data = e->data;
    }
    img.entries = entries;
    if (s == HVD_OK) s = hvdc__elastic_encode(&img, out, nbytes);
    free(ckpt);
    free(tensors);
    free(entries);
    return s;
}

hvd_status hvd_elastic_commit(hvd_elastic *st, int *stop) {
    const char *fn = "hvd_elastic_commit";
    int rank = 0;
    hvd_status s = hvd_rank(&rank);
    if (s != HVD_OK) return s;
    if (stop != NULL) *stop = 0;
    s = agree(fn, check_state(fn, st), st);
    if (s != HVD_OK) return s;
    outcome o = {.sequence = st->sequence + 1};
    hvd_status mine = HVD_OK;
    if (rank == 0) {
        char path[HVDC_ELASTIC_DIR_MAX + 64], req[HVDC_ELASTIC_DIR_MAX + 64], ack[HVDC_ELASTIC_DIR_MAX + 64];
        unsigned char *buf = NULL;
        size_t nbytes = 0;
        path_in(path, sizeof path, st, COMMIT_FILE);
        mine = encode(st, o.sequence, &buf, &nbytes);
        /* the blobs too may hold device data (hvdc.torch's state_dict) */
        if (mine == HVD_OK) mine = hvdc__device_results_trusted(fn);
        if (mine == HVD_OK) mine = hvdc__write_file_atomically(fn, path, buf, nbytes);
        free(buf);
        // A stop request is taken only by a caller that can act on it, and only once the
        // commit it stops at is on disk; the ack tells the launcher this commit is the one.
        path_in(req, sizeof req, st, STOP_REQUEST);
        path_in(ack, sizeof ack, st, STOP_ACK);
        if (mine == HVD_OK && stop != NULL && access(req, F_OK) == 0 && rename(req, ack) == 0)
            o.flag = 1;
    }
    s = share(&o, mine, rank, "hvd.elastic.commit");
    if (s != HVD_OK) return s;
    st->sequence = o.sequence;
    if (stop != NULL) *stop = o.flag;
    return HVD_OK;
}

/* ---- restore and sync ---------------------------------------------------------------------- */

/* Rank 0: checks a parsed commit against the registration. Nothing is written. */
static hvd_status match(const hvd_elastic *st, const hvdc__elastic_image *img,
                        const char *path) {
    if ((img->ckpt != NULL) != (st->opt != NULL))
        return hvdc__fail(HVD_ERR_MISMATCH, "elastic commit '%s' %s an optimizer but this state "
                          "%s one", path, img->ckpt ? "has" : "has no",
                          st->opt ? "has" : "has no");
    if (img->has_sampler != (st->sampler != NULL))
        return hvdc__fail(HVD_ERR_MISMATCH, "elastic commit '%s' %s a sampler but this state "
                          "%s one", path, img->has_sampler ? "has" : "has no",
                          st->sampler ? "has" : "has no");
    if (st->sampler != NULL) {
        const hvdc__elastic_sampler *f = &img->sampler;
        const hvd_sampler *sp = st->sampler;
        if (f->dataset_size != sp->dataset_size || f->shuffle != (uint32_t)sp->shuffle ||
            f->drop_last != (uint32_t)sp->drop_last || f->position > f->dataset_size)
            return hvdc__fail(HVD_ERR_MISMATCH, "elastic commit '%s' has a sampler over %llu "
                              "examples (shuffle %u, drop_last %u); this one is over %zu "
                              "(shuffle %d, drop_last %d)", path,
                              (unsigned long long)f->dataset_size, f->shuffle, f->drop_last,
                              sp->dataset_size, sp->shuffle, sp->drop_last);
    }
    int tensors_here = 0;
    for (int i = 0; i < st->n; i++) tensors_here += st->entries[i].kind == HVDC_ELASTIC_TENSOR;
    int tensors_there = 0;
    for (uint32_t i = 0; i < img->num_entries; i++) {
        const hvdc__elastic_entry *f = &img->entries[i];
        const hvdc__elastic_item *e = hvdc__elastic_find(st, f->name);
        if (f->kind == HVDC_ELASTIC_BLOB) {
            if (e != NULL && e->kind != HVDC_ELASTIC_BLOB)
                return hvdc__fail(HVD_ERR_MISMATCH, "elastic commit '%s' has a blob '%s', but "
                                  "'%s' is a registered tensor here", path, f->name, f->name);
            continue;
        }
        tensors_there++;
        if (e == NULL || e->kind != HVDC_ELASTIC_TENSOR)
            return hvdc__fail(HVD_ERR_MISMATCH, "elastic commit '%s' has a tensor '%s' that is "
                              "not registered here (hvd_elastic_add_tensor/_add_bytes)", path,
                              f->name);
        if (e->dtype != f->dtype || e->count != f->count)
            return hvdc__fail(HVD_ERR_MISMATCH, "elastic commit '%s': tensor '%s' is %s x %zu "
                              "there but %s x %zu here", path, f->name,
                              hvdc__dtype_name((int)f->dtype), f->count,
                              hvdc__dtype_name((int)e->dtype), e->count);
    }
    if (tensors_there != tensors_here) {
        for (int i = 0; i < st->n; i++) {
            const hvdc__elastic_item *e = &st->entries[i];
            int found = 0;
            for (uint32_t k = 0; k < img->num_entries && !found; k++)
                found = strcmp(img->entries[k].name, e->name) == 0;
            if (e->kind == HVDC_ELASTIC_TENSOR && !found)
                return hvdc__fail(HVD_ERR_MISMATCH, "elastic commit '%s' has no tensor '%s', "
                                  "which is registered here", path, e->name);
        }
    }
    return HVD_OK;
}

/* Rank 0: reads, checks and applies the commit. *found = 0 when there is none. On failure
 * nothing registered has changed. */
static hvd_status load(hvd_elastic *st, int *found, outcome *o) {
    const char *fn = "hvd_elastic_restore";
    char path[HVDC_ELASTIC_DIR_MAX + 64];
    path_in(path, sizeof path, st, COMMIT_FILE);
    unsigned char *buf = NULL;
    size_t nbytes = 0;
    int missing = 0;
    *found = 0;
    hvd_status s = hvdc__read_file(fn, "elastic commit", path, &buf, &nbytes, &missing);
    if (s != HVD_OK) {
        if (missing) hvdc__clear_error();
        return missing ? HVD_OK : s;
    }
    hvdc__elastic_image img;
    s = hvdc__elastic_parse(buf, nbytes, path, &img);
    if (s == HVD_OK) s = match(st, &img, path);
    // New blob buffers first, so nothing can fail after the optimizer has been written.
    void **blobs = calloc(img.num_entries + 1, sizeof *blobs);
    if (s == HVD_OK && blobs == NULL) s = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
    for (uint32_t i = 0; s == HVD_OK && i < img.num_entries; i++) {
        if (img.entries[i].kind != HVDC_ELASTIC_BLOB) continue;
        blobs[i] = malloc(img.entries[i].count > 0 ? img.entries[i].count : 1);
        if (blobs[i] == NULL) s = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
    }
    int grow = 0;
    for (uint32_t i = 0; i < img.num_entries; i++)
        grow += img.entries[i].kind == HVDC_ELASTIC_BLOB && hvdc__elastic_find(st, img.entries[i].name) == NULL;
    if (s == HVD_OK && grow > 0) {
        hvdc__elastic_item *grown = realloc(st->entries, (size_t)(st->n + grow) * sizeof *grown);
        if (grown == NULL) s = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
        else st->entries = grown;
    }
    hvdc__ckpt_tensor *tensors = st->opt ? calloc((size_t)st->opt->n, sizeof *tensors) : NULL;
    hvdc__opt_host_view view = {0};
    if (s == HVD_OK && st->opt != NULL) {
        if (tensors == NULL) s = hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
        if (s == HVD_OK) s = hvdc__opt_view_open(fn, st->opt, 0, &view);
        if (s == HVD_OK) {
            hvdc__ckpt c;
            hvdc__ckpt_describe(&c, tensors, st->opt, &view, NULL);
            char inner[HVDC_ELASTIC_DIR_MAX + 96];
            snprintf(inner, sizeof inner, "%s (its optimizer section)", path);
            s = hvdc__ckpt_decode(img.ckpt, img.ckpt_nbytes, inner, &c); // writes only if valid
            /* a device's parameters change only once the whole commit is known good; a copy
             * that fails there is a CUDA error, after which the device's values are unknown */
            if (s == HVD_OK) s = hvdc__opt_view_store(fn, st->opt, &view);
            if (s == HVD_OK) st->opt->steps = c.steps;
        }
        hvdc__opt_view_close(st->opt, &view);
    }
    if (s == HVD_OK) { // every check passed: copy in
        for (uint32_t i = 0; i < img.num_entries; i++) {
            const hvdc__elastic_entry *f = &img.entries[i];
            hvdc__elastic_item *e = hvdc__elastic_find(st, f->name);
            if (f->kind == HVDC_ELASTIC_TENSOR) {
                if (f->count > 0) memcpy(e->data, f->data, f->count * hvd_dtype_size(f->dtype));
                continue;
            }
            if (f->count > 0) memcpy(blobs[i], f->data, f->count);
            if (e == NULL) {
                e = &st->entries[st->n++];
                *e = (hvdc__elastic_item){.kind = HVDC_ELASTIC_BLOB, .dtype = HVD_UINT8};
                snprintf(e->name, sizeof e->name, "%s", f->name);
            } else {
                free(e->data);
            }
            e->data = blobs[i];
            e->count = f->count;
            blobs[i] = NULL;
        }
        if (st->sampler != NULL) {
            st->sampler->seed = img.sampler.seed;
            hvd_sampler_set_epoch(st->sampler, img.sampler.epoch);
            hvd_sampler_set_position(st->sampler, (size_t)img.sampler.position);
        }
        st->sequence = img.sequence;
        o->sequence = img.sequence;
        o->time_ms = img.time_ms;
        o->size = img.size;
        *found = 1;
    }
    for (uint32_t i = 0; blobs != NULL && i < img.num_entries; i++) free(blobs[i]);
    free(blobs);
    free(tensors);
    free(img.entries);
    free(buf);
    return s;
}

/* Collective: rank 0's registered state to every rank. */
static hvd_status sync_from_root(hvd_elastic *st, int rank) {
    hvd_status s = HVD_OK;
    char name[HVD_MAX_NAME_LEN + 1];
    if (st->opt != NULL) {
        s = hvdc__opt_broadcast_params(st->opt, 0); /* device parameters on the device */
        if (s == HVD_OK) s = hvd_broadcast_optimizer_state(st->opt, 0);
    }
    if (s == HVD_OK && st->sampler != NULL) {
        hvd_sampler *sp = st->sampler;
        size_t position = 0;
        hvd_sampler_position(sp, &position);
        int64_t v[3] = {(int64_t)sp->seed, (int64_t)sp->epoch, (int64_t)position};
        s = hvd_broadcast("hvd.elastic.sampler", v, 3, HVD_INT64, 0);
        if (s == HVD_OK) {
            sp->seed = (uint64_t)v[0];
            hvd_sampler_set_epoch(sp, (uint64_t)v[1]);
            s = hvd_sampler_set_position(sp, (size_t)v[2]);
        }
    }
    for (int i = 0; i < st->n && s == HVD_OK; i++) {
        hvdc__elastic_item *e = &st->entries[i];
        if (e->kind != HVDC_ELASTIC_TENSOR) continue;
        snprintf(name, sizeof name, "hvd.elastic.t.%s", e->name);
        s = hvd_broadcast(name, e->data, e->count, e->dtype, 0);
    }
    // Blobs: rank 0's set replaces the others' (names and sizes first, then the bytes).
    int64_t nblobs = 0;
    for (int i = 0; i < st->n; i++) nblobs += st->entries[i].kind == HVDC_ELASTIC_BLOB;
    if (s == HVD_OK) s = hvd_broadcast("hvd.elastic.blobs", &nblobs, 1, HVD_INT64, 0);
    for (int64_t k = 0, seen = 0; k < nblobs && s == HVD_OK; k++) {
        struct {
            uint64_t nbytes;
            char name[HVDC_ELASTIC_NAME_MAX + 1];
        } head = {0};
        hvdc__elastic_item *mine = NULL;
        if (rank == 0) {
            while (st->entries[seen].kind != HVDC_ELASTIC_BLOB) seen++;
            mine = &st->entries[seen++];
            head.nbytes = mine->count;
            memcpy(head.name, mine->name, sizeof head.name);
        }
        s = hvd_broadcast("hvd.elastic.blob.head", &head, sizeof head, HVD_UINT8, 0);
        if (s != HVD_OK) break;
        if (rank != 0) { // size the local blob like rank 0's, then receive into it
            void *zeros = calloc(head.nbytes > 0 ? head.nbytes : 1, 1);
            if (zeros == NULL) s = hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_elastic: out of memory");
            else s = hvd_elastic_set_blob(st, head.name, zeros, head.nbytes);
            free(zeros);
            mine = s == HVD_OK ? hvdc__elastic_find(st, head.name) : NULL;
        }
        // A failed allocation must not leave the others waiting in the broadcast: every rank
        // joins it, one with a scratch buffer.
        void *dst = mine != NULL ? mine->data : malloc(head.nbytes > 0 ? head.nbytes : 1);
        hvd_status b = hvd_broadcast("hvd.elastic.blob.data", dst, head.nbytes, HVD_UINT8, 0);
        if (mine == NULL) free(dst);
        if (s == HVD_OK) s = b;
    }
    return s;
}

hvd_status hvd_elastic_sync(hvd_elastic *st) {
    const char *fn = "hvd_elastic_sync";
    int rank = 0;
    hvd_status s = hvd_rank(&rank);
    if (s != HVD_OK) return s;
    s = agree(fn, check_state(fn, st), st);
    if (s != HVD_OK) return s;
    return sync_from_root(st, rank);
}

hvd_status hvd_elastic_restore(hvd_elastic *st, hvd_elastic_info *info) {
    const char *fn = "hvd_elastic_restore";
    int rank = 0;
    hvd_status s = hvd_rank(&rank);
    if (s != HVD_OK) return s;
    if (info != NULL) *info = (hvd_elastic_info){0};
    s = agree(fn, check_state(fn, st), st);
    if (s != HVD_OK) return s;
    outcome o = {0};
    hvd_status mine = HVD_OK;
    int found = 0;
    if (rank == 0) mine = load(st, &found, &o);
    o.flag = found;
    s = share(&o, mine, rank, "hvd.elastic.restore");
    if (s != HVD_OK) return s;
    if (o.flag) st->sequence = o.sequence;
    s = sync_from_root(st, rank);
    if (s != HVD_OK) return s;
    if (info != NULL) {
        uint64_t now = now_ms();
        *info = (hvd_elastic_info){.restored = o.flag, .sequence = o.sequence,
                                   .committed_size = (int)o.size,
                                   .age_s = o.flag && now > o.time_ms ?
                                            (double)(now - o.time_ms) / 1000.0 : 0.0};
    }
    return HVD_OK;
}
