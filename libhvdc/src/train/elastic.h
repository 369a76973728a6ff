/*
 * elastic.h - the insides of hvd_elastic, shared by elastic_state.c (registration: create,
 * add, blobs) and elastic.c (commit, restore, sync).
 * defines: hvdc__elastic_item, struct hvd_elastic, hvdc__elastic_find, HVDC_ELASTIC_DIR_MAX
 * The caller's thread (one at a time per state).
 */
#ifndef HVDC_ELASTIC_H
#define HVDC_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "hvdc.h"
#include "train/elastic_format.h"

#define HVDC_ELASTIC_DIR_MAX 3900

typedef struct hvdc__elastic_item {
    char name[HVDC_ELASTIC_NAME_MAX + 1];
    uint32_t kind;   // HVDC_ELASTIC_TENSOR (data is the caller's) or _BLOB (owned)
    hvd_dtype dtype; // HVD_UINT8 for blobs
    size_t count;
    void *data;
} hvdc__elastic_item;

struct hvd_elastic {
    char dir[HVDC_ELASTIC_DIR_MAX + 1];
    hvd_optimizer *opt;          // or NULL
    hvd_sampler *sampler;        // or NULL
    int n;                       // entries
    hvdc__elastic_item *entries; // (n) tensors and blobs, in registration order
    uint64_t sequence;           // the last commit written or restored (0: none)
};

/* The entry called name, or NULL. */
hvdc__elastic_item *hvdc__elastic_find(const hvd_elastic *st, const char *name);

#endif
