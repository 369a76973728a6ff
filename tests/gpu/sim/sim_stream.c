/*
 * sim_stream.c - the simulated device's streams and events (see sim.h): each stream is a
 * worker thread that runs its queue in order, each item after a random delay.
 *
 *   cudaMemcpyAsync(s) ─┐        stream s's thread:
 *   cudaEventRecord(e,s) ├─ push ─> [copy][record r1][wait r7][host fn] ...
 *   cudaStreamWaitEvent ─┘          each item: wait for its records, sleep 0..max us, run,
 *                                   mark its record done, broadcast `changed`
 *   cudaEventQuery(e) / Synchronize: looks at / waits for e's latest record
 *
 * A record is one cudaEventRecord: an event points at its latest one, and a stream that waits
 * on the event holds the record current at the call, so re-recording the event later (libhvdc
 * pools its events) never moves what an earlier wait waits for, as in CUDA. Records are
 * counted references: an event, a queued item and a waiting thread may each hold one.
 *
 * The legacy stream of each device and the device's blocking streams (created without
 * cudaStreamNonBlocking) wait for each other: an item pushed on one first waits for a marker
 * pushed at the tail of the other(s), which is CUDA's implicit synchronization.
 *
 * One mutex guards every queue, record and event; `changed` is broadcast whenever a record
 * is done or an item finished. Streams destroyed with work queued finish it first.
 * Any thread (the workers are this file's own).
 */
#include <pthread.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

#define MAX_DEVICES 64
#define STREAM_MAGIC 0x5354524dU /* "STRM" */
#define EVENT_MAGIC 0x45564e54U  /* "EVNT" */

typedef struct sim_record {
    int refs; /* event, queued item, waiting threads */
    int done;
} sim_record;

typedef struct sim_item {
    struct sim_item *next;
    void (*run)(void *args); /* NULL: only orders */
    sim_record **waits;      /* (n_waits) held; done before this item runs */
    size_t n_waits;
    sim_record *completes;   /* held; done once run returned; may be NULL */
    alignas(max_align_t) unsigned char args[];
} sim_item;

struct CUstream_st {
    uint32_t magic;
    int device;
    int legacy;    /* the device's legacy default stream */
    int blocking;  /* orders with the legacy stream (not cudaStreamNonBlocking) */
    int destroyed; /* the worker exits, and frees this, once the queue is empty */
    sim_item *head, *tail;
    uint64_t rng;  /* the worker's delays */
    pthread_cond_t work;
    struct CUstream_st *next; /* the device's other live streams */
};

struct CUevent_st {
    uint32_t magic;
    sim_record *last; /* held; NULL until the first record */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct CUstream_st *streams[MAX_DEVICES]; /* every live stream of a device, legacy too */
static struct CUstream_st *legacy[MAX_DEVICES];
static uint64_t streams_made; /* seeds each stream's generator differently */

/* ---- records ------------------------------------------------------------------------- */

static sim_record *record_new(int refs) {
    sim_record *r = calloc(1, sizeof *r);
    if (r) r->refs = refs;
    return r;
}

/* With mu held. */
static void record_release(sim_record *r) {
    if (r && --r->refs == 0) free(r);
}

/* With mu held: until r is done. */
static void record_wait(sim_record *r) {
    while (!r->done) pthread_cond_wait(&changed, &mu);
}

/* ---- the worker ------------------------------------------------------------------------ */

static uint64_t next_random(uint64_t *state) { /* xorshift64* */
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void delay(struct CUstream_st *s) {
    unsigned max = sim_config()->max_delay_us;
    if (max == 0) return;
    uint64_t us = next_random(&s->rng) % ((uint64_t)max + 1);
    struct timespec t = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

static void *stream_main(void *arg) {
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!s->head && !s->destroyed) pthread_cond_wait(&s->work, &mu);
        sim_item *item = s->head;
        if (!item) break; /* destroyed and drained */
        for (size_t i = 0; i < item->n_waits; i++) record_wait(item->waits[i]);
        pthread_mutex_unlock(&mu);
        delay(s);
        if (item->run) item->run(item->args);
        pthread_mutex_lock(&mu);
        s->head = item->next;
        if (!s->head) s->tail = NULL;
        if (item->completes) {
            item->completes->done = 1;
            record_release(item->completes);
        }
        for (size_t i = 0; i < item->n_waits; i++) record_release(item->waits[i]);
        free(item->waits);
        free(item);
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&s->work);
    free(s);
    return NULL;
}

/* With mu held: a new stream with its worker running, on device's list. */
static struct CUstream_st *stream_new(int device, int is_legacy, int blocking) {
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->magic = STREAM_MAGIC;
    s->device = device;
    s->legacy = is_legacy;
    s->blocking = blocking;
    uint64_t seed = sim_config()->seed ^ ((uint64_t)sim_config()->rank << 40) ^ ++streams_made;
    seed = (seed ^ (seed >> 30)) * 0xbf58476d1ce4e5b9ULL; /* splitmix64's finish: spread it */
    seed = (seed ^ (seed >> 27)) * 0x94d049bb133111ebULL;
    s->rng = (seed ^ (seed >> 31)) | 1;
    pthread_cond_init(&s->work, NULL);
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&thread, &attr, stream_main, s);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        pthread_cond_destroy(&s->work);
        free(s);
        return NULL;
    }
    s->next = streams[device];
    streams[device] = s;
    return s;
}

/* With mu held. */
static struct CUstream_st *resolve(cudaStream_t handle) {
    if (handle == NULL || handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
        int d = sim_current_device();
        if (d < 0 || d >= MAX_DEVICES) return NULL;
        if (!legacy[d]) legacy[d] = stream_new(d, 1, 1);
        return legacy[d];
    }
    struct CUstream_st *s = handle;
    return s->magic == STREAM_MAGIC && !s->destroyed ? s : NULL;
}

struct CUstream_st *sim_stream_of(cudaStream_t stream) {
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = resolve(stream);
    pthread_mutex_unlock(&mu);
    return s;
}

int sim_stream_device(const struct CUstream_st *stream) { return stream->device; }

/* ---- pushing work ---------------------------------------------------------------------- */

/* With mu held: appends item to s and wakes its worker. */
static void append(struct CUstream_st *s, sim_item *item) {
    item->next = NULL;
    if (s->tail) s->tail->next = item;
    else s->head = item;
    s->tail = item;
    pthread_cond_signal(&s->work);
}

/* With mu held: a marker at s's tail; the returned record (held once for the caller) is done
 * when s reaches it. NULL when s is idle or out of memory (then nothing to wait for). */
static sim_record *mark_tail(struct CUstream_st *s) {
    if (!s->head) return NULL;
    sim_item *marker = calloc(1, sizeof *marker);
    sim_record *r = record_new(2);
    if (!marker || !r) {
        free(marker), free(r);
        return NULL;
    }
    marker->completes = r;
    append(s, marker);
    return r;
}

/* With mu held: adds r to item's waits (r's hold passes to item). */
static int add_wait(sim_item *item, sim_record *r) {
    sim_record **grown = realloc(item->waits, (item->n_waits + 1) * sizeof *grown);
    if (!grown) return 0;
    item->waits = grown;
    item->waits[item->n_waits++] = r;
    return 1;
}

/* With mu held: CUDA's implicit ordering of the legacy stream with the blocking streams. */
static void implicit_waits(struct CUstream_st *s, sim_item *item) {
    if (!s->blocking) return;
    for (struct CUstream_st *o = streams[s->device]; o; o = o->next) {
        if (o == s || !o->blocking || (!s->legacy && !o->legacy)) continue;
        sim_record *r = mark_tail(o);
        if (r && !add_wait(item, r)) record_release(r);
    }
}

/* With mu held: pushes a new item; completes (held for the item) and wait (likewise) may be
 * NULL. On failure releases both. */
static cudaError_t push(cudaStream_t handle, void (*run)(void *), const void *args,
                        size_t args_bytes, sim_record *completes, sim_record *wait) {
    struct CUstream_st *s = resolve(handle);
    sim_item *item = s ? calloc(1, sizeof *item + args_bytes) : NULL;
    if (!item) {
        record_release(completes);
        record_release(wait);
        return s ? cudaErrorMemoryAllocation : cudaErrorInvalidResourceHandle;
    }
    item->run = run;
    item->completes = completes;
    if (args_bytes) memcpy(item->args, args, args_bytes);
    if (wait && !add_wait(item, wait)) {
        record_release(wait);
        record_release(completes);
        free(item);
        return cudaErrorMemoryAllocation;
    }
    implicit_waits(s, item);
    append(s, item);
    return cudaSuccess;
}

cudaError_t sim_enqueue(cudaStream_t stream, void (*run)(void *), const void *args,
                        size_t args_bytes) {
    pthread_mutex_lock(&mu);
    cudaError_t err = push(stream, run, args, args_bytes, NULL, NULL);
    pthread_mutex_unlock(&mu);
    return sim_error(err);
}

/* With mu held: pushes an ordering item that completes a record, and waits for it. */
static cudaError_t push_and_wait(cudaStream_t stream, void (*run)(void *), const void *args,
                                 size_t args_bytes) {
    sim_record *r = record_new(2);
    if (!r) return cudaErrorMemoryAllocation;
    cudaError_t err = push(stream, run, args, args_bytes, r, NULL);
    if (err == cudaSuccess) record_wait(r); /* push released the item's hold on failure */
    record_release(r);
    return err;
}

cudaError_t sim_enqueue_wait(cudaStream_t stream, void (*run)(void *), const void *args,
                             size_t args_bytes) {
    pthread_mutex_lock(&mu);
    cudaError_t err = push_and_wait(stream, run, args, args_bytes);
    pthread_mutex_unlock(&mu);
    return sim_error(err);
}

void sim_device_drain(int device) {
    if (device < 0 || device >= MAX_DEVICES) return;
    pthread_mutex_lock(&mu);
    size_t n = 0;
    for (struct CUstream_st *s = streams[device]; s; s = s->next) n++;
    sim_record **marks = calloc(n ? n : 1, sizeof *marks);
    n = 0;
    for (struct CUstream_st *s = streams[device]; marks && s; s = s->next) marks[n++] = mark_tail(s);
    for (size_t i = 0; i < n; i++)
        if (marks[i]) record_wait(marks[i]), record_release(marks[i]);
    pthread_mutex_unlock(&mu);
    free(marks);
}

/* ---- the CUDA stream calls --------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    if (!stream || (flags & ~(unsigned)cudaStreamNonBlocking)) return sim_error(cudaErrorInvalidValue);
    int d = sim_current_device();
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = stream_new(d, 0, !(flags & cudaStreamNonBlocking));
    pthread_mutex_unlock(&mu);
    *stream = s;
    return sim_error(s ? cudaSuccess : cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = stream ? resolve(stream) : NULL;
    if (!s || s->legacy) {
        pthread_mutex_unlock(&mu);
        return sim_error(cudaErrorInvalidResourceHandle);
    }
    for (struct CUstream_st **p = &streams[s->device]; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    s->destroyed = 1;
    s->magic = 0;
    pthread_cond_signal(&s->work); /* its worker finishes the queue, then frees it */
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = resolve(stream);
    cudaError_t err = !s ? cudaErrorInvalidResourceHandle : s->head ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&mu);
    return sim_error(err);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    return sim_enqueue_wait(stream, NULL, NULL, 0);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    if (!event || event->magic != EVENT_MAGIC || flags != 0)
        return sim_error(event ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    sim_record *r = event->last;
    cudaError_t err;
    if (!r || r->done) { /* nothing to wait for, but the stream must still exist */
        err = resolve(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
    } else {
        r->refs++;
        err = push(stream, NULL, NULL, 0, NULL, r);
    }
    pthread_mutex_unlock(&mu);
    return sim_error(err);
}

typedef struct host_fn_args {
    cudaHostFn_t fn;
    void *data;
} host_fn_args;

static void run_host_fn(void *args) {
    host_fn_args *a = args;
    a->fn(a->data);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
    if (!fn) return sim_error(cudaErrorInvalidValue);
    host_fn_args a = {fn, userData};
    return sim_enqueue(stream, run_host_fn, &a, sizeof a);
}

/* ---- events ------------------------------------------------------------------------------ */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    if (!event || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming)))
        return sim_error(cudaErrorInvalidValue);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return sim_error(cudaErrorMemoryAllocation);
    e->magic = EVENT_MAGIC; /* its flags change nothing here: no timing, host waits block */
    *event = e;
    return cudaSuccess;
}

static int event_valid(cudaEvent_t event) { return event && event->magic == EVENT_MAGIC; }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event_valid(event)) return sim_error(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    record_release(event->last); /* a queued record still completes, for its waiters */
    event->magic = 0;
    pthread_mutex_unlock(&mu);
    free(event);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event_valid(event)) return sim_error(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    sim_record *r = record_new(2); /* the event's and the item's */
    cudaError_t err = cudaErrorMemoryAllocation;
    if (r) {
        err = push(stream, NULL, NULL, 0, r, NULL); /* releases the item's hold if it fails */
        if (err == cudaSuccess) {
            record_release(event->last);
            event->last = r;
        } else {
            record_release(r);
        }
    }
    pthread_mutex_unlock(&mu);
    return sim_error(err);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event_valid(event)) return sim_error(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    int done = !event->last || event->last->done;
    pthread_mutex_unlock(&mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event_valid(event)) return sim_error(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    sim_record *r = event->last;
    if (r) {
        r->refs++;
        record_wait(r);
        record_release(r);
    }
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}
