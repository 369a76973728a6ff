/*
 * process_sets.c - process sets: hvd_add_process_set / hvd_remove_process_set, the table of
 * the sets this process knows, and which runtime an operation of a set goes to.
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
 * rank's view (same ranks everywhere; nothing in flight before removing) are collectives of the
 * global runtime, so they fail instead of hanging if a rank died or never came.
 * Add and remove: the user threads that call them (one at a time per process: change_lock).
 * Lookups: any thread (table_lock; a runtime in use by a call is never freed under it).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "runtime/runtime.h"

#define MAX_SLOTS 64 /* slot 0 is the global runtime; the handle has 8 bits for it */

typedef struct set_slot {
    int id;           /* 0: the slot is free */
    int n;            /* members */
    int *ranks;       /* (n) their global ranks, increasing */
    int position;     /* this rank's index in ranks, -1 if it is not a member */
    hvdc_runtime *rt; /* members only */
    int users;        /* calls using rt right now */
    int closing;      /* being removed: no new users */
} set_slot;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t table_idle = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t change_lock = PTHREAD_MUTEX_INITIALIZER;
static set_slot slots[MAX_SLOTS];
static int next_id = 1;

/* The slot of id, or -1. Holds table_lock. */
static int find(int id) {
    for (int i = 1; i < MAX_SLOTS; i++)
        if (slots[i].id == id && id != 0) return i;
    return -1;
}

/* Appends rank r to the list "0, 2, 5" in buf (*count entries so far; buf is set on the first). */
static void list_rank(char *buf, size_t len, int *count, int r) {
    if (*count == 0) buf[0] = '\0';
    size_t at = strlen(buf);
    if (at + 16 < len) snprintf(buf + at, len - at, "%s%d", *count ? ", " : "", r);
    (*count)++;
}

/* "0, 2, 5" into buf. */
static const char *list_ranks(char *buf, size_t len, const int *ranks, int n) {
    int count = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) list_rank(buf, len, &count, ranks[i]);
    return buf;
}

hvd_status hvdc__set_acquire(int id, const char *fn, hvdc_runtime **rt, int *slot) {
    if (id == HVD_PROCESS_SET_GLOBAL) {
        *rt = hvdc__runtime;
        *slot = 0;
        return HVD_OK;
    }
    char list[256];
    hvd_status st = HVD_OK;
    pthread_mutex_lock(&table_lock);
    int i = find(id);
    if (i < 0 || slots[i].closing) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "%s: process set %d does not exist (never added, or removed); "
                        "create it with hvd_add_process_set on every rank", fn, id);
    } else if (slots[i].position < 0) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "%s: rank %d is not in process set %d (ranks %s); only "
                        "its members may submit to it", fn, hvdc__runtime->topo.rank, id,
                        list_ranks(list, sizeof list, slots[i].ranks, slots[i].n));
    } else {
        slots[i].users++;
        *rt = slots[i].rt;
        *slot = i;
    }
    pthread_mutex_unlock(&table_lock);
    return st;
}

hvd_status hvdc__set_acquire_slot(int slot, hvdc_runtime **rt) {
    if (slot == 0) {
        *rt = hvdc__runtime;
        return HVD_OK;
    }
    hvd_status st = HVD_ERR_INVALID_ARG;
    pthread_mutex_lock(&table_lock);
    /* also while closing: the stopped runtime is freed only after its users left, so a wait
     * still finds its op, failed, and returns that status */
    if (slot > 0 && slot < MAX_SLOTS && slots[slot].id != 0 && slots[slot].rt) {
        slots[slot].users++;
        *rt = slots[slot].rt;
        st = HVD_OK;
    }
    pthread_mutex_unlock(&table_lock);
    return st;
}

void hvdc__set_release(int slot) {
    if (slot <= 0) return;
    pthread_mutex_lock(&table_lock);
    if (--slots[slot].users == 0) pthread_cond_broadcast(&table_idle);
    pthread_mutex_unlock(&table_lock);
}

hvd_status hvdc__set_shape(int id, const char *fn, int *size, int *rank) {
    if (id == HVD_PROCESS_SET_GLOBAL) {
        *size = hvdc__runtime->topo.size;
        *rank = hvdc__runtime->topo.rank;
        return HVD_OK;
    }
    hvd_status st = HVD_OK;
    pthread_mutex_lock(&table_lock);
    int i = find(id);
    if (i < 0) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "%s: process set %d does not exist (never added, or removed)", fn, id);
    } else {
        *size = slots[i].n;
        *rank = slots[i].position;
    }
    pthread_mutex_unlock(&table_lock);
    return st;
}

int hvdc__set_position(int id, int global_rank) {
    if (id == HVD_PROCESS_SET_GLOBAL)
        return global_rank >= 0 && global_rank < hvdc__runtime->topo.size ? global_rank : -1;
    int pos = -1;
    pthread_mutex_lock(&table_lock);
    int i = find(id);
    for (int k = 0; i >= 0 && k < slots[i].n; k++)
        if (slots[i].ranks[k] == global_rank) pos = k;
    pthread_mutex_unlock(&table_lock);
    return pos;
}

/* Stops slot i's runtime, frees it once no call uses it, and frees the slot. Members of the
 * set call this together (the runtime's last round is collective over them). */
static void drop(int i) {
    pthread_mutex_lock(&table_lock);
    slots[i].closing = 1; /* no new users */
    pthread_mutex_unlock(&table_lock);
    hvdc__runtime_stop_child(slots[i].rt); /* fails what is left: waiters wake and leave */
    pthread_mutex_lock(&table_lock);
    while (slots[i].users > 0) pthread_cond_wait(&table_idle, &table_lock);
    hvdc_runtime *rt = slots[i].rt;
    free(slots[i].ranks);
    memset(&slots[i], 0, sizeof slots[i]); /* id 0: no call can acquire it again */
    pthread_mutex_unlock(&table_lock);
    hvdc__runtime_free_child(rt); /* the woken waiters have left it; lookups need not wait */
}

void hvdc__process_sets_stop_all(void) {
    pthread_mutex_lock(&change_lock);
    for (int i = 1; i < MAX_SLOTS; i++)
        if (slots[i].id != 0) drop(i);
    next_id = 1;
    pthread_mutex_unlock(&change_lock);
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
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; local == HVD_OK && i < n; i++) h = (h ^ (uint64_t)(uint32_t)sorted[i]) * 1099511628211ull;
    int size = hvdc__runtime->topo.size;
    int64_t mine[2] = {local == HVD_OK ? n : -1, (int64_t)h}, *all = malloc((size_t)size * sizeof mine);
    if (!all) return hvdc__fail(HVD_ERR_NO_MEMORY, "hvd_add_process_set: out of memory");
    char name[64];
    snprintf(name, sizeof name, "hvd.process_set.add.%d", id);
    hvd_status st = hvd_allgather(name, mine, 2, all, 2 * (size_t)size, HVD_INT64, NULL, NULL);
    if (st == HVD_OK) {
        char invalid[256], differ[256];
        int n_invalid = 0, n_differ = 0;
        for (int r = 0; r < size; r++) {
            if (all[2 * r] < 0) list_rank(invalid, sizeof invalid, &n_invalid, r);
            else if (r > 0 && (all[2 * r] != all[0] || all[2 * r + 1] != all[1]))
                list_rank(differ, sizeof differ, &n_differ, r);
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
    int id = next_id, free_slot = -1, same = 0;
    CHECK(agree_on_ranks(sorted, n, id, local));
    /* every rank has the same table and the same ranks now: these checks agree everywhere */
    pthread_mutex_lock(&table_lock);
    for (int i = MAX_SLOTS - 1; i >= 1; i--) {
        if (slots[i].id == 0) free_slot = i;
        else if (slots[i].n == n && memcmp(slots[i].ranks, sorted, (size_t)n * sizeof *sorted) == 0)
            same = slots[i].id;
    }
    pthread_mutex_unlock(&table_lock);
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
                        "libhvdc holds; remove one first", MAX_SLOTS - 1);
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
    int32_t failed = started != HVD_OK, any = 0;
    char message[HVDC_ERROR_MAX];
    snprintf(message, sizeof message, "%s", hvd_last_error());
    char name[64];
    snprintf(name, sizeof name, "hvd.process_set.started.%d", id);
    st = hvd_allreduce(name, &failed, &any, 1, HVD_INT32, HVD_MAX);
    if (st == HVD_OK && any) {
        st = started != HVD_OK ? hvdc__fail(started, "hvd_add_process_set: %s", message)
                               : hvdc__fail(HVD_ERR_MPI, "hvd_add_process_set: process set %d could not start on its members", id);
    }
    if (st != HVD_OK) {
        hvdc__runtime_stop_child(child); /* never published: nobody else uses it */
        hvdc__runtime_free_child(child);
        goto fail;
    }
    pthread_mutex_lock(&table_lock);
    slots[free_slot] = (set_slot){.id = id, .n = n, .ranks = sorted, .position = position, .rt = child};
    pthread_mutex_unlock(&table_lock);
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
    pthread_mutex_lock(&table_lock);
    int i = id == HVD_PROCESS_SET_GLOBAL ? -1 : find(id);
    hvdc_runtime *rt = i >= 0 ? slots[i].rt : NULL;
    pthread_mutex_unlock(&table_lock);
    int size = hvdc__runtime->topo.size;
    int32_t mine[2] = {id, 0}, *all = NULL; /* the id; 0 ok, 1 busy, 2 unknown, 3 global */
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
    CHECK(hvd_allgather("hvd.process_set.remove", mine, 2, all, 2 * (size_t)size, HVD_INT32, NULL, NULL));
    char other[256], busy[256];
    int n_other = 0, n_unknown = 0, n_busy = 0, n_global = 0;
    for (int r = 0; r < size; r++) {
        if (all[2 * r] != id) list_rank(other, sizeof other, &n_other, r);
        else if (all[2 * r + 1] == 3) n_global++;
        else if (all[2 * r + 1] == 2) n_unknown++;
        else if (all[2 * r + 1] == 1) list_rank(busy, sizeof busy, &n_busy, r);
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
