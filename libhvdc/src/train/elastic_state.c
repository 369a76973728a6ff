/*
 * elastic_state.c - registering what hvd_elastic commits: create/destroy, the optimizer, the
 * sampler, tensors and bytes by pointer, and blobs the state owns (elastic.c commits and
 * restores them). Local, nothing is sent; the caller's thread (one at a time per state).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"
#include "gpu/gpu.h"
#include "train/elastic.h"
#include "train/optimizer.h"

hvd_status hvd_elastic_create(const char *dir, hvd_elastic **out) {
    const char *fn = "hvd_elastic_create";
    if (out == NULL) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (dir == NULL) dir = getenv("HVD_ELASTIC_DIR");
    if (dir == NULL || dir[0] == '\0')
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: no directory for the commits: pass one, or "
                          "set HVD_ELASTIC_DIR (hvdcrun sets it in elastic mode: --min-np, "
                          "--max-np or --host-discovery-script)", fn);
    if (strlen(dir) > HVDC_ELASTIC_DIR_MAX)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: directory name longer than %d bytes", fn,
                          HVDC_ELASTIC_DIR_MAX);
    hvd_elastic *st = calloc(1, sizeof *st);
    if (st == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
    snprintf(st->dir, sizeof st->dir, "%s", dir);
    *out = st;
    return HVD_OK;
}

hvd_status hvd_elastic_destroy(hvd_elastic *st) {
    if (st == NULL) return HVD_OK;
    for (int i = 0; i < st->n; i++)
        if (st->entries[i].kind == HVDC_ELASTIC_BLOB) free(st->entries[i].data);
    free(st->entries);
    free(st);
    return HVD_OK;
}

hvdc__elastic_item *hvdc__elastic_find(const hvd_elastic *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->entries[i].name, name) == 0) return &st->entries[i];
    return NULL;
}

static hvd_status check_name(const char *fn, const hvd_elastic *st, const char *name) {
    if (st == NULL || name == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: NULL state or name", fn);
    size_t len = strlen(name);
    if (len == 0 || len > HVDC_ELASTIC_NAME_MAX)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: name '%.40s' must have 1 to %d bytes", fn,
                          name, HVDC_ELASTIC_NAME_MAX);
    return HVD_OK;
}

static hvd_status add_entry(hvd_elastic *st, const hvdc__elastic_item *e) {
    hvdc__elastic_item *grown = realloc(st->entries, (size_t)(st->n + 1) * sizeof *grown);
    if (grown == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_elastic: out of memory");
    st->entries = grown;
    st->entries[st->n++] = *e;
    return HVD_OK;
}

hvd_status hvd_elastic_add_optimizer(hvd_elastic *st, hvd_optimizer *opt) {
    const char *fn = "hvd_elastic_add_optimizer";
    if (st == NULL || opt == NULL) return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (st->opt != NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: the state already has an optimizer (one "
                          "per state)", fn);
    st->opt = opt;
    return HVD_OK;
}

hvd_status hvd_elastic_add_sampler(hvd_elastic *st, hvd_sampler *sampler) {
    const char *fn = "hvd_elastic_add_sampler";
    if (st == NULL || sampler == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: NULL argument", fn);
    if (st->sampler != NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: the state already has a sampler (one per "
                          "state)", fn);
    st->sampler = sampler;
    return HVD_OK;
}

hvd_status hvd_elastic_add_tensor(hvd_elastic *st, const char *name, void *data, size_t count,
                                  hvd_dtype dtype) {
    const char *fn = "hvd_elastic_add_tensor";
    hvd_status s = check_name(fn, st, name);
    if (s != HVD_OK) return s;
    if (!hvdc__dtype_valid((int)dtype))
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: '%s': unknown dtype %d", fn, name, (int)dtype);
    if (data == NULL && count > 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: '%s': data is NULL", fn, name);
    int device = count > 0 ? hvdc__gpu_pointer_device(data) : HVDC_GPU_PTR_HOST;
    if (device >= 0) /* commits copy these bytes on the host: a device pointer would crash it */
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: '%s' is memory of CUDA device %d; register "
                          "host memory (device parameters belong to the optimizer: "
                          "hvd_elastic_add_optimizer)", fn, name, device);
    if (hvdc__elastic_find(st, name) != NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: '%s' is registered already", fn, name);
    hvdc__elastic_item e = {.kind = HVDC_ELASTIC_TENSOR, .dtype = dtype, .count = count, .data = data};
    snprintf(e.name, sizeof e.name, "%s", name);
    return add_entry(st, &e);
}

hvd_status hvd_elastic_add_bytes(hvd_elastic *st, const char *name, void *data, size_t nbytes) {
    return hvd_elastic_add_tensor(st, name, data, nbytes, HVD_UINT8);
}

hvd_status hvd_elastic_set_blob(hvd_elastic *st, const char *name, const void *data,
                                size_t nbytes) {
    const char *fn = "hvd_elastic_set_blob";
    hvd_status s = check_name(fn, st, name);
    if (s != HVD_OK) return s;
    if (data == NULL && nbytes > 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: '%s': data is NULL", fn, name);
    hvdc__elastic_item *e = hvdc__elastic_find(st, name);
    if (e != NULL && e->kind != HVDC_ELASTIC_BLOB)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: '%s' is a registered tensor, not a blob", fn,
                          name);
    void *copy = malloc(nbytes > 0 ? nbytes : 1);
    if (copy == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", fn,
                                        nbytes);
    if (nbytes > 0) memcpy(copy, data, nbytes);
    if (e != NULL) {
        free(e->data);
        e->data = copy;
        e->count = nbytes;
        return HVD_OK;
    }
    hvdc__elastic_item ne = {.kind = HVDC_ELASTIC_BLOB, .dtype = HVD_UINT8, .count = nbytes, .data = copy};
    snprintf(ne.name, sizeof ne.name, "%s", name);
    s = add_entry(st, &ne);
    if (s != HVD_OK) free(copy);
    return s;
}

hvd_status hvd_elastic_get_blob(const hvd_elastic *st, const char *name, const void **data,
                                size_t *nbytes) {
    const char *fn = "hvd_elastic_get_blob";
    hvd_status s = check_name(fn, st, name);
    if (s != HVD_OK) return s;
    if (data == NULL || nbytes == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: NULL out-parameter", fn);
    const hvdc__elastic_item *e = hvdc__elastic_find(st, name);
    if (e == NULL || e->kind != HVDC_ELASTIC_BLOB)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "%s: no blob named '%s' (set it with "
                          "hvd_elastic_set_blob, or restore a commit that has it)", fn, name);
    *data = e->data;
    *nbytes = e->count;
    return HVD_OK;
}

