/*
 * consistency.c - hvd_check_consistency: do the replicas still hold the same values? Every
 * rank hashes each of its named host buffers, the ranks agree that they hold the same list of
 * names, then all-gather the hashes; every rank finds the same differences and rank 0 logs
 * them.
 *
 *   rank r:  names ─ FNV-1a ─> (n, H(names))        buffers ─ XXH64 ─> v_r[0 .. n-1]
 *     1. all-gather (n, H(names)): a rank whose pair is not rank 0's holds other names; the
 *        name lists are all-gathered (only then) and every rank fails with HVD_ERR_MISMATCH
 *        naming the ranks and the first name that differs
 *     2. all-gather v_r into V[size][n]: buffer i differs when V[r][i] != V[0][i] for some r;
 *        the ranks that hold one value form a group ("ranks 0-1 hold 5d1c..., rank 2 holds ...")
 *
 * Host results are bitwise identical on every rank (every all-reduce combines in rank order:
 * docs/reproducibility.md), so replicas that were kept in step hash equally and a differing
 * hash is a real difference. Built on the public collectives only.
 * The caller's thread; collective.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/name_table.h"
#include "base/status.h"
#include "base/xxh64.h"
#include "gpu/gpu.h"
#include "train/local_check.h"

#define FN "hvd_check_consistency"
#define LOGGED_MAX 20 /* differing buffers rank 0 logs one line each for; then a count */
#define GROUPS_MAX 8  /* values named per buffer; then a count */

static hvd_status check_buffer(const hvd_named_buffer *b, int i, hvdc_name_table *seen) {
    if (b->name == NULL || b->name[0] == '\0')
        return hvdc__fail(HVD_ERR_INVALID_ARG, FN ": buffers[%d] has no name", i);
    if (b->data == NULL && b->nbytes > 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, FN ": buffer '%s' has %zu bytes at NULL", b->name,
                          b->nbytes);
    int where = b->nbytes > 0 ? hvdc__gpu_pointer_device(b->data) : HVDC_GPU_PTR_HOST;
    if (where >= 0)
        return hvdc__fail(HVD_ERR_INVALID_ARG, FN ": buffer '%s' is memory of CUDA device %d; "
                          "it hashes host memory: copy the buffer to the host first", b->name,
                          where);
    int put = hvdc__name_table_put(seen, b->name, (void *)b);
    if (put == -1)
        return hvdc__fail(HVD_ERR_INVALID_ARG, FN ": two buffers are named '%s'; names must be "
                          "unique (they are how a difference is reported)", b->name);
    return put == 0 ? HVD_OK : hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
}

/* This rank's arguments; nothing is sent. */
static hvd_status check_args(const hvd_named_buffer *buffers, int n, int *n_differ) {
    if (n < 0 || (n > 0 && buffers == NULL) || n_differ == NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, FN ": needs n >= 0 buffers (not NULL when n > 0) "
                          "and n_differ (got %p, %d, %p)", (const void *)buffers, n,
                          (void *)n_differ);
    hvdc_name_table seen;
    hvdc__name_table_init(&seen);
    hvd_status st = HVD_OK;
    for (int i = 0; i < n && st == HVD_OK; i++) st = check_buffer(&buffers[i], i, &seen);
    hvdc__name_table_free(&seen);
    return st;
}

/* Appends to out (len bytes, already a string) as snprintf would, never past the end. */
static void append(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *out, size_t len, const char *fmt, ...) {
    size_t used = strlen(out);
    if (used + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + used, len - used, fmt, ap);
    va_end(ap);
}

/* Appends the ranks r with member[r] set as compact ranges ("rank 2", "ranks 0-1,3"). */
static void append_ranks(char *out, size_t len, const unsigned char *member, int size) {
    int count = 0;
    for (int r = 0; r < size; r++) count += member[r] != 0;
    append(out, len, count == 1 ? "rank " : "ranks ");
    for (int r = 0, first = 1; r < size; r++) {
        if (!member[r]) continue;
        int end = r;
        while (end + 1 < size && member[end + 1]) end++;
        append(out, len, end > r ? "%s%d-%d" : "%s%d", first ? "" : ",", r, end);
        first = 0;
        r = end;
    }
}

/* ---- 1. the same names on every rank ------------------------------------------------- */

/* How a list of names (NUL-terminated, nr of them) first differs from rank 0's (n0), appended
 * to msg. */
static void describe_list(char *msg, size_t len, const char *l0, size_t n0, const char *lr,
                          size_t nr) {
    for (size_t k = 0; k < n0 && k < nr; k++, l0 += strlen(l0) + 1, lr += strlen(lr) + 1) {
        if (strcmp(l0, lr) == 0) continue;
        append(msg, len, " name #%zu of %zu is '%s' where rank 0 has '%s'", k + 1, nr, lr, l0);
        return;
    }
    if (n0 != nr) {
        append(msg, len, " %zu names where rank 0 has %zu (the first %s: '%s')", nr, n0,
               nr > n0 ? "extra" : "missing", nr > n0 ? lr : l0);
        return;
    }
    append(msg, len, " the same names, whose hashes collided"); /* never seen */
}

/* The ranks hold different lists (pairs: every rank's (n, H(names))): all-gather the names and
 * fail with HVD_ERR_MISMATCH on every rank, naming each group of ranks whose list is not rank
 * 0's and its first difference. */
static hvd_status explain_names(const hvd_named_buffer *buffers, int n, const int64_t *pairs,
                                int size) {
    size_t nbytes = 0;
    for (int i = 0; i < n; i++) nbytes += strlen(buffers[i].name) + 1;
    char *mine = calloc(nbytes + 1, 1), *all = NULL;
    size_t *counts = calloc((size_t)size, sizeof *counts), at = 0;
    hvd_handle h = HVD_HANDLE_NULL;
    hvd_status st = HVD_OK;
    if (mine == NULL || counts == NULL) st = hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
    for (int i = 0; st == HVD_OK && i < n; i++) {
        size_t l = strlen(buffers[i].name) + 1;
        memcpy(mine + at, buffers[i].name, l);
        at += l;
    }
    /* every rank takes part, even one out of memory, so none waits: it sends nothing */
    hvd_status gathered = hvd_allgather_alloc_async("hvd.consistency.name_lists", mine,
                                                    st == HVD_OK ? nbytes : 0, HVD_UINT8, NULL,
                                                    (void **)&all, NULL, counts, &h);
    if (gathered == HVD_OK) gathered = hvd_wait(&h);
    if (st == HVD_OK) st = gathered;
    if (st == HVD_OK) {
        char msg[HVDC_ERROR_MAX] = FN ": the ranks hold different lists of names, so their "
                                      "values cannot be compared:";
        size_t *offsets = calloc((size_t)size, sizeof *offsets);
        for (int r = 1; offsets && r < size; r++) offsets[r] = offsets[r - 1] + counts[r - 1];
        unsigned char *group = calloc((size_t)size, 1), *done = calloc((size_t)size, 1);
        for (int r = 1; offsets && group && done && r < size; r++) {
            if (done[r] || (pairs[2 * r] == pairs[0] && pairs[2 * r + 1] == pairs[1])) continue;
            for (int s = r; s < size; s++)
                group[s] = done[s] = pairs[2 * s] == pairs[2 * r] &&
                                     pairs[2 * s + 1] == pairs[2 * r + 1];
            append(msg, sizeof msg, " ");
            append_ranks(msg, sizeof msg, group, size);
            append(msg, sizeof msg, ":");
            describe_list(msg, sizeof msg, all, (size_t)pairs[0], all + offsets[r],
                          (size_t)pairs[2 * r]);
            append(msg, sizeof msg, ";");
            memset(group, 0, (size_t)size);
        }
        append(msg, sizeof msg, " every rank must pass the same names in the same order");
        st = offsets && group && done ? hvdc__fail(HVD_ERR_MISMATCH, "%s", msg)
                                      : hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
        free(offsets);
        free(group);
        free(done);
    }
    hvd_free(all);
    free(mine);
    free(counts);
    return st;
}

/* Every rank's (n, H(names)) against rank 0's; HVD_ERR_MISMATCH on every rank if any differs. */
static hvd_status agree_on_names(const hvd_named_buffer *buffers, int n, int size) {
    uint64_t h = HVDC_FNV_OFFSET;
    for (int i = 0; i < n; i++) h = hvdc__fnv1a_string(h, buffers[i].name, 1);
    int64_t mine[2] = {n, (int64_t)h}, *pairs = calloc((size_t)size * 2, sizeof *pairs);
    if (pairs == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
    hvd_status st = hvd_allgather("hvd.consistency.names", mine, 2, pairs, (size_t)size * 2,
                                  HVD_INT64, NULL, NULL);
    int same = 1;
    for (int r = 1; st == HVD_OK && r < size; r++)
        same = same && pairs[2 * r] == pairs[0] && pairs[2 * r + 1] == pairs[1];
    if (st == HVD_OK && !same) st = explain_names(buffers, n, pairs, size);
    free(pairs);
    return st;
}

/* ---- 2. the values -------------------------------------------------------------------- */

/* One line for buffer i, whose values V (size x n) differ: each value and the ranks that
 * hold it, in the order of their lowest rank. */
static void log_difference(const hvd_named_buffer *b, const uint64_t *V, int n, int i, int size,
                           unsigned char *group, unsigned char *done) {
    char line[900] = "";
    int groups = 0;
    memset(done, 0, (size_t)size);
    for (int r = 0; r < size; r++) {
        if (done[r]) continue;
        if (++groups > GROUPS_MAX) continue;
        for (int s = 0; s < size; s++)
            group[s] = s >= r && V[(size_t)s * n + i] == V[(size_t)r * n + i];
        for (int s = r; s < size; s++) done[s] |= group[s];
        append(line, sizeof line, "%s", groups > 1 ? "; " : "");
        append_ranks(line, sizeof line, group, size);
        append(line, sizeof line, " %016llx", (unsigned long long)V[(size_t)r * n + i]);
    }
    if (groups > GROUPS_MAX) append(line, sizeof line, "; and %d more values", groups - GROUPS_MAX);
    hvdc__log(HVDC_LOG_WARNING, FN ": '%s' (%zu bytes) differs across ranks: %s", b->name,
              b->nbytes, line);
}

/* Counts the buffers that differ; on rank 0 with log, logs them. */
static hvd_status compare(const hvd_named_buffer *buffers, const uint64_t *V, int n, int size,
                          int rank, int log, int *n_differ) {
    unsigned char *group = calloc((size_t)size, 1), *done = calloc((size_t)size, 1);
    hvd_status st = group && done ? HVD_OK : hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
    int differ = 0;
    for (int i = 0; st == HVD_OK && i < n; i++) {
        int same = 1;
        for (int r = 1; r < size && same; r++) same = V[(size_t)r * n + i] == V[i];
        if (same) continue;
        if (log && rank == 0 && differ < LOGGED_MAX)
            log_difference(&buffers[i], V, n, i, size, group, done);
        differ++;
    }
    if (st == HVD_OK && log && rank == 0 && differ > 0)
        hvdc__log(HVDC_LOG_WARNING, FN ": %d of %d buffers differ across %d ranks%s", differ, n,
                  size, differ > LOGGED_MAX ? " (the first 20 are named above)" : "");
    *n_differ = differ;
    free(group);
    free(done);
    return st;
}

/* Hashes this rank's buffers and all-gathers the hashes into V (size x n). */
static hvd_status gather_hashes(const hvd_named_buffer *buffers, int n, int size, uint64_t *V) {
    uint64_t *mine = malloc((size_t)n * sizeof *mine);
    if (mine == NULL) return hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory");
    for (int i = 0; i < n; i++) mine[i] = hvdc__xxh64(buffers[i].data, buffers[i].nbytes, 0);
    hvd_status st = hvd_allgather("hvd.consistency.hashes", mine, (size_t)n, V,
                                  (size_t)size * (size_t)n, HVD_INT64, NULL, NULL);
    free(mine);
    return st;
}

hvd_status hvd_check_consistency(const hvd_named_buffer *buffers, int n, int log,
                                 uint64_t *hashes, int *n_differ) {
    int size = 0, rank = 0;
    uint64_t *V = NULL;
    if (!hvd_is_initialized())
        return hvdc__fail(HVD_ERR_NOT_INITIALIZED, FN ": libhvdc is not initialized; call "
                          "hvd_init() first");
    if (n_differ != NULL) *n_differ = 0;
    hvd_status st = check_args(buffers, n, n_differ);
    if (st == HVD_OK) st = hvd_size(&size);
    if (st == HVD_OK) st = hvd_rank(&rank);
    if (st == HVD_OK && n > 0 && (V = malloc((size_t)size * (size_t)n * sizeof *V)) == NULL)
        st = hvdc__fail(HVD_ERR_NO_MEMORY, FN ": out of memory for %d ranks' hashes of %d "
                        "buffers", size, n);
    /* a rank that refuses tells the others before anything else is sent */
    st = hvdc__agree_local_check(FN, "hvd.consistency.args", st);
    if (st == HVD_OK) st = agree_on_names(buffers, n, size);
    if (st == HVD_OK && n > 0) st = gather_hashes(buffers, n, size, V);
    if (st == HVD_OK) st = compare(buffers, V, n, size, rank, log, n_differ);
    if (st == HVD_OK && hashes != NULL && n > 0)
        memcpy(hashes, V, (size_t)size * (size_t)n * sizeof *V);
    free(V);
    return st;
}
