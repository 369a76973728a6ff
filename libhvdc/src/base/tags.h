/*
 * tags.h - every MPI tag libhvdc sends with, in one table, so two subsystems can never reuse
 * one. Each communicator libhvdc creates is private to it (MPI_Comm_dup), so these never meet
 * the application's own messages; the values are still distinct across communicators, so a tag
 * alone says which subsystem a message belongs to when debugging.
 * defines: hvdc_tag
 * Pure.
 */
#ifndef HVDC_TAGS_H
#define HVDC_TAGS_H

typedef enum hvdc_tag {
    /* control communicator */
    HVDC_TAG_ANNOUNCE = 1,        /* negotiation: a rank's announcements to rank 0 */
    HVDC_TAG_ANSWER = 2,          /* negotiation: rank 0's response list */
    HVDC_TAG_FAILURE = 3,         /* liveness: "rank r died" / "rank r stopped" notices */
    /* executor communicators (and the hierarchical node / cross-node ones) */
    HVDC_TAG_REDUCE_SCATTER = 10, /* the direct reduce-scatter in rank order */
    HVDC_TAG_ALLGATHER = 11,      /* the ring's all-gather */
    HVDC_TAG_SMALL = 12,          /* the one-step all-reduce of small buffers */
    HVDC_TAG_ADASUM = 13,         /* Adasum's halves and dot products (adasum.h) */
    /* the host watch's communicator (runtime/watch.h) */
    HVDC_TAG_HEARTBEAT = 20,      /* "still here", to the next rank of the ring */
    HVDC_TAG_BYE = 21,            /* "stopping: expect no more heartbeats", likewise */
    HVDC_TAG_LOST = 22,           /* "rank r stopped answering": every rank declares it too */
    HVDC_TAG_WHERE_ASK = 23,      /* rank 0 asks a stalled rank for its whereabouts */
    HVDC_TAG_WHERE_TELL = 24,     /* the answer */
} hvdc_tag;

#endif
