/*
 * set_table.c - the table of process sets (set_table.h): one slot per set this process knows,
 * the same on every rank, with the set's ranks, this rank's position in it and, on members,
 * the set's runtime. A call that uses a runtime holds its slot (users); removing a set closes
 * the slot to new users and frees it once the last one left.
 * Any thread: table_lock guards every slot.
 */
#include "runtime/set_table.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "runtime/runtime.h"

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
static set_slot slots[HVDC_SET_SLOTS];

/* The slot of id, or -1. Holds table_lock. */
static int find(int id) {
    for (int i = 1; i < HVDC_SET_SLOTS; i++)
        if (slots[i].id == id && id != 0) return i;
    return -1;
}

void hvdc__set_list_rank(char *buf, size_t len, int *count, int r) {
    if (*count == 0) buf[0] = '\0';
    size_t at = strlen(buf);
    if (at + 16 < len) snprintf(buf + at, len - at, "%s%d", *count ? ", " : "", r);
    (*count)++;
}

/* "0, 2, 5" into buf. */
static const char *list_ranks(char *buf, size_t len, const int *ranks, int n) {
    int count = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) hvdc__set_list_rank(buf, len, &count, ranks[i]);
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
    if (slot > 0 && slot < HVDC_SET_SLOTS && slots[slot].id != 0 && slots[slot].rt) {
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

int hvdc__set_table_find(int id, hvdc_runtime **rt) {
    pthread_mutex_lock(&table_lock);
    int i = id == HVD_PROCESS_SET_GLOBAL ? -1 : find(id);
    *rt = i >= 0 ? slots[i].rt : NULL;
    pthread_mutex_unlock(&table_lock);
    return i;
}

int hvdc__set_table_has_ranks(const int *sorted, int n, int *free_slot) {
    int same = 0;
    *free_slot = -1;
    pthread_mutex_lock(&table_lock);
    for (int i = HVDC_SET_SLOTS - 1; i >= 1; i--) {
        if (slots[i].id == 0) *free_slot = i;
        else if (slots[i].n == n && memcmp(slots[i].ranks, sorted, (size_t)n * sizeof *sorted) == 0)
            same = slots[i].id;
    }
    pthread_mutex_unlock(&table_lock);
    return same;
}

void hvdc__set_table_publish(int slot, int id, int *ranks, int n, int position, hvdc_runtime *rt) {
    pthread_mutex_lock(&table_lock);
    slots[slot] = (set_slot){.id = id, .n = n, .ranks = ranks, .position = position, .rt = rt};
    pthread_mutex_unlock(&table_lock);
}

hvdc_runtime *hvdc__set_table_close(int slot) {
    pthread_mutex_lock(&table_lock);
    slots[slot].closing = 1;
    hvdc_runtime *rt = slots[slot].rt;
    pthread_mutex_unlock(&table_lock);
    return rt;
}

void hvdc__set_table_clear(int slot) {
    pthread_mutex_lock(&table_lock);
    while (slots[slot].users > 0) pthread_cond_wait(&table_idle, &table_lock);
    free(slots[slot].ranks);
    memset(&slots[slot], 0, sizeof slots[slot]); /* id 0: no call can acquire it again */
    pthread_mutex_unlock(&table_lock);
}

int hvdc__set_table_used(int from) {
    int found = -1;
    pthread_mutex_lock(&table_lock);
    for (int i = from > 1 ? from : 1; i < HVDC_SET_SLOTS && found < 0; i++)
        if (slots[i].id != 0) found = i;
    pthread_mutex_unlock(&table_lock);
    return found;
}
