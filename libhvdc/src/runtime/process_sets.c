/*
 * process_sets.c - process sets: hvd_add_process_set / hvd_remove_process_set, and stopping
 * every set at shutdown. The table of the sets, and which runtime an operation of a set goes
 * to, is set_table.c's.
 *
 * Each set is a runtime of its own (init.c's hvdc__runtime_start_child) on a communicator of its
 * members split from the global runtime's sets_comm: its own queue, negotiation round, executor
 * and background thread. So a set's operations are negotiated among its members only, and sets
 * never wait for each other (nor for the global set):
 *
 *   global runtime   ranks 0 1 2 3   thread, control/exec communicators over all four
 *   set 1 {0, 2}     ranks 0 . 2 .   thread, communicators over ranks 0 and 2
 *   set 2 {1, 3}     ranks . 1 . 3   thread, communicators over ranks 1 and 3
 *
 * Every rank keeps the same table: add and remove are collective over every rank and called
 * in the same order everywhere; members also hold the set's runtime. The checks that need every
 * rank's view (same ranks everywhere; nothing in flight before removing) are all-gathers of the
 * global runtime, so they fail instead of hanging if a rank died or never came. They are queued
 * through submit.c's internal call, not the public hvd_allgather: this file sits below api.c.
 * hvd_shutdown stops the sets through a hook this file registers with init.c, so init.c never
 * calls up into it.
 * Add and remove: the user threads that call them (one at a time per process: change_lock).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/status.h"
#include "runtime/runtime.h"
#include "runtime/set_table.h"

static pthread_mutex_t change_lock = PTHREAD_MUTEX_INITIALIZER;
static int next_id = 1;

/* Stops slot i's runtime, frees it once no call uses it, and frees the slot. Members of the
 * set call this together (the runtime's last round is collective over them). */
static void drop(int i) {
    hvdc_runtime *rt = hvdc__set_table_close(i);  /* no new users */
    hvdc__runtime_stop_child(rt); /* fails what is left: waiters wake and leave */
    hvdc__set_table_clear(i);     /* once they left */
    hvdc__runtime_free_child(rt); /* lookups need not wait */
}

/* Stops every process set's runtime: hvd_shutdown's hook, before it stops the global one. */
static void stop_all(void) {
    pthread_mutex_lock(&change_lock);
    for (int i = hvdc__set_table_used(1); i >= 0; i = hvdc__set_table_used(i + 1)) drop(i);
    next_id = 1;
    pthread_mutex_unlock(&change_lock);
}

/* Every rank's k values into all (rank r's at all[r * k]): an all-gather of the global runtime,
 * queued and negotiated like a user's. Collective over every rank. */
static hvd_status gather(const char *fn, const char *name, const int64_t *mine, size_t k,
                         int64_t *all) {
    hvdc_op *op = hvdc__op_create(1);
    if (!op) return hvdc__fail(HVD_ERR_NO_MEMORY, "%s: out of memory", fn);
    hvdc__op_set_counts(op, &k, 1); /* fits the op's own room: cannot fail */
    snprintf(op->desc.name, sizeof op->desc.name, "%s", name);
    op->desc.kind = HVDC_KIND_ALLGATHER;
    op->desc.dtype = HVD_INT64;
    op->desc.capacity = k * (size_t)hvdc__runtime->topo.size;
    op->tensors[0] = (hvdc_tensor){op->desc.name, mine, all, k, 0};
    return hvdc__submit_wait(fn, HVD_PROCESS_SET_GLOBAL, op);
}

static int compare_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Every rank learns whether every rank passed the same valid set: a rank whose own list was
 * refused (local != HVD_OK, its message set) sends n = -1 instead of its ranks, so the others
 * fail too rather than wait for it; the others compare (n, hash of the ranks) with rank 0's.
 * Collective over every rank. */
static hvd_status agree_on_ranks(const int *sorted, int n, int id, hvd_status local) {
    char own[HVDC_ERROR_MAX];
    snprintf(own, sizeof own, "%s", hvd_last_error());
    uint64_t h = HVDC_FNV_OFFSET;
    for (int i = 0; local == HVD_OK && i < n; i++) {
        uint32_t r = (uint32_t)sorted[i]; /* little-endian bytes: the same hash on every host */
        const unsigned char le[4] = {(unsigned char)r, (unsigned char)(r >> 8),
                                     (unsigned char)(r >> 16), (unsigned char)(r >> 24)};
        h = hvdc__fnv1a(h, le, sizeof le);
    }
    int size = hvdc__runtime->topo.size;
    int64_t mine[2] = {local == HVD_OK ? n : -1, (int64_t)h}, *all = malloc((size_t)size * sizeof mine);
    if (!all) return hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_add_process_set: out of memory");
    char name[64];
    snprintf(name, sizeof name, "hvd.process_set.add.%d", id);
    hvd_status st = gather("hvd_add_process_set", name, mine, 2, all);
    if (st == HVD_OK) {
        char invalid[256], differ[256];
        int n_invalid = 0, n_differ = 0;
        for (int r = 0; r < size; r++) {
            if (all[2 * r] < 0) hvdc__set_list_rank(invalid, sizeof invalid, &n_invalid, r);
            else if (r > 0 && (all[2 * r] != all[0] || all[2 * r + 1] != all[1]))
                hvdc__set_list_rank(differ, sizeof differ, &n_differ, r);
        }
        if (local != HVD_OK)
            st = hvdc__fail(local, "%s", own);
        else if (n_invalid)
            st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: rank(s) %s passed an invalid "
                            "set of ranks (their message says why); no set was added", invalid);
        else if (n_differ)
            st = hvdc__fail(HVD_ERR_MISMATCH, "hvd_add_process_set: rank(s) %s passed other ranks "
                            "than rank 0 did; every rank must pass the same set", differ);
    } else if (local != HVD_OK) {
        st = hvdc__fail(local, "%s", own);
    }
    free(all);
    return st;
}

/* This rank's list, checked and sorted into *out (NULL when refused: the message says why). */
static hvd_status check_ranks(const int *ranks, int n, int **out) {
    *out = NULL;
    int size = hvdc__runtime->topo.size;
    if (!ranks || n < 1)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: expected ranks, n >= 1 (got %d) and process_set not NULL", n);
    int *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_add_process_set: out of memory");
    memcpy(sorted, ranks, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_int);
    for (int i = 0; i < n; i++) {
        int r = sorted[i]; /* the messages below are written after sorted is freed */
        if (r < 0 || r >= size) {
            free(sorted);
            return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: rank %d is out of range; expected 0..%d", r, size - 1);
        }
        if (i > 0 && r == sorted[i - 1]) {
            free(sorted);
            return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: rank %d is given twice", r);
        }
    }
    *out = sorted;
    return HVD_OK;
}

static hvd_status add_entered(const int *ranks, int n, int *out) {
    hvd_status st = HVD_OK;
    int me = hvdc__runtime->topo.rank;
    int *sorted = NULL;
    hvd_status local = out ? check_ranks(ranks, n, &sorted)
                           : hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: process_set (where the id goes) is NULL");
    pthread_mutex_lock(&change_lock);
    hvdc__runtime_on_shutdown(stop_all); /* this call may add the first set */
    int id = next_id, free_slot = -1;
    CHECK(agree_on_ranks(sorted, n, id, local));
    /* every rank has the same table and the same ranks now: these checks agree everywhere */
    int same = hvdc__set_table_has_ranks(sorted, n, &free_slot);
    if (n == hvdc__runtime->topo.size) { /* distinct ranks of the world (check_ranks): all */
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: a duplicate process set: these "
                        "are every rank, the global process set's (%d); use that one", HVD_PROCESS_SET_GLOBAL);
        goto fail;
    }
    if (same) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: a duplicate process set: process set %d has these ranks already", same);
        goto fail;
    }
    if (free_slot < 0) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_add_process_set: %d process sets exist, the most "
                        "libhvdc holds; remove one first", HVDC_SET_SLOTS - 1);
        goto fail;
    }
    int position = -1;
    for (int i = 0; i < n; i++)
        if (sorted[i] == me) position = i;
    MPI_Comm comm = MPI_COMM_NULL;
    CHECK_MPI(MPI_Comm_split(hvdc__runtime->sets_comm, position >= 0 ? 0 : MPI_UNDEFINED, me, &comm));
    hvdc_runtime *child = NULL;
    hvd_status started = HVD_OK;
    if (position >= 0) {
        started = hvdc__runtime_start_child(hvdc__runtime, comm, &child);
        MPI_Comm_free(&comm); /* the child keeps duplicates of it */
    }
    /* members may fail to start (and have agreed among themselves): every rank must know */
    int64_t failed = started != HVD_OK, *all = malloc((size_t)hvdc__runtime->topo.size * sizeof *all);
    int any = 0;
    char message[HVDC_ERROR_MAX];
    snprintf(message, sizeof message, "%s", hvd_last_error());
    char name[64];
    snprintf(name, sizeof name, "hvd.process_set.started.%d", id);
    st = all ? gather("hvd_add_process_set", name, &failed, 1, all)
             : hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_add_process_set: out of memory");
    for (int r = 0; st == HVD_OK && r < hvdc__runtime->topo.size; r++) any |= all[r] != 0;
    free(all);
    if (st == HVD_OK && any) {
        st = started != HVD_OK ? hvdc__fail(started, "hvd_add_process_set: %s", message)
                               : hvdc__fail(HVD_ERR_MPI, "hvd_add_process_set: process set %d could not start on its members", id);
    }
    if (st != HVD_OK) {
        hvdc__runtime_stop_child(child); /* never published: nobody else uses it */
        hvdc__runtime_free_child(child);
        goto fail;
    }
    hvdc__set_table_publish(free_slot, id, sorted, n, position, child);
    sorted = NULL;
    next_id++;
    *out = id;
fail:
    pthread_mutex_unlock(&change_lock);
    free(sorted);
    return st;
}

hvd_status hvd_add_process_set(const int *ranks, int n, int *process_set) {
    HVDC_GATED("hvd_add_process_set", add_entered(ranks, n, process_set));
}

static hvd_status remove_entered(int id) {
    hvd_status st = HVD_OK;
    pthread_mutex_lock(&change_lock);
    hvdc_runtime *rt = NULL;
    int i = hvdc__set_table_find(id, &rt);
    int size = hvdc__runtime->topo.size;
    int64_t mine[2] = {id, 0}, *all = NULL; /* the id; 0 ok, 1 busy, 2 unknown, 3 global */
    if (id == HVD_PROCESS_SET_GLOBAL) {
        mine[1] = 3;
    } else if (i < 0) {
        mine[1] = 2;
    } else if (rt) {
        pthread_mutex_lock(&rt->queue_mutex);
        mine[1] = rt->in_flight.count > 0 || rt->queue_head != NULL;
        pthread_mutex_unlock(&rt->queue_mutex);
    }
    /* every rank decides from every rank's answer, so they refuse or remove together (a rank
     * that passed another id, or one its table lacks, fails the others instead of leaving
     * them waiting); removing while any member still waits for the others would strand that
     * work */
    all = malloc((size_t)size * sizeof mine);
    if (!all) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_remove_process_set: out of memory");
        goto fail;
    }
    CHECK(gather("hvd_remove_process_set", "hvd.process_set.remove", mine, 2, all));
    char other[256], busy[256];
    int n_other = 0, n_unknown = 0, n_busy = 0, n_global = 0;
    for (int r = 0; r < size; r++) {
        if (all[2 * r] != id) hvdc__set_list_rank(other, sizeof other, &n_other, r);
        else if (all[2 * r + 1] == 3) n_global++;
        else if (all[2 * r + 1] == 2) n_unknown++;
        else if (all[2 * r + 1] == 1) hvdc__set_list_rank(busy, sizeof busy, &n_busy, r);
    }
    if (n_other) {
        st = hvdc__fail(HVD_ERR_MISMATCH, "hvd_remove_process_set: rank(s) %s passed another "
                        "process set than %d; every rank must remove the same set", other, id);
    } else if (n_global) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_remove_process_set: the global process set cannot be removed");
    } else if (n_unknown) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_remove_process_set: process set %d does not exist (never added, or removed)", id);
    } else if (n_busy) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_remove_process_set: process set %d has operations in "
                        "flight on rank(s) %s; wait for them (every member must submit them) "
                        "before removing the set", id, busy);
    } else {
        drop(i);
    }
fail:
    pthread_mutex_unlock(&change_lock);
    free(all);
    return st;
}

hvd_status hvd_remove_process_set(int process_set) {
    HVDC_GATED("hvd_remove_process_set", remove_entered(process_set));
}

static hvd_status shape_entered(int id, int *size, int *rank) {
    int s = 0, r = -1;
    hvd_status st = hvdc__set_shape(id, "hvd_process_set_size", &s, &r);
    if (st != HVD_OK) return st;
    if (size) *size = s;
    if (rank) *rank = r;
    return HVD_OK;
}

hvd_status hvd_process_set_rank(int process_set, int *rank) {
    if (!rank) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_process_set_rank: rank is NULL");
    HVDC_GATED("hvd_process_set_rank", shape_entered(process_set, NULL, rank));
}

hvd_status hvd_process_set_size(int process_set, int *size) {
    if (!size) return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_process_set_size: size is NULL");
    HVDC_GATED("hvd_process_set_size", shape_entered(process_set, size, NULL));
}
