/*
 * timeline.c - the Chrome-trace writer behind HVD_TIMELINE and hvd_start_timeline (see
 * timeline.h).
 *
 * The background thread formats events into `pending` under a mutex and signals the writer
 * when enough has gathered; the writer swaps buffers and writes them at the end of the events
 * so far, followed by "\n]", in one pwrite. So the file always ends with a closing bracket.
 * A recording (a file and its writer thread) lives from start to stop; the object lives from
 * hvd_init to hvd_shutdown, so the background thread never sees it freed. Recorders check an
 * atomic flag first, so a timeline that is not recording costs one load per event.
 * Background thread (records), the writer thread (writes), user threads (start, stop).
 */
#include "runtime/timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "base/fault.h"
#include "base/name_table.h"
#include "base/status.h"

#define FLUSH_BYTES (64 * 1024)
#define FLUSH_MS 200

typedef struct row {
    char name[HVD_MAX_NAME_LEN + 1];
    int id;
} row;

struct hvdc_timeline {
    int rank;
    int64_t origin_us;    /* hvdc__now_us() at creation: events are stamped from here */
    atomic_int recording; /* set and cleared under mutex; read without it first by recorders */
    pthread_mutex_t control; /* serializes start, stop and close */
    pthread_mutex_t mutex;   /* everything below, while a writer runs */
    pthread_cond_t wake;
    /* the current recording */
    char *path;
    int fd, mark_cycles;
    off_t end_of_events; /* where the next events go (over the closing bracket); writer only */
    int wrote_any;       /* writer only */
    hvdc_bytes pending;  /* formatted, not yet written */
    int stopping;
    pthread_t writer;
    hvdc_name_table rows; /* tensor name -> row in this file */
    int n_rows;
};

/* Writes buf as the next events and re-closes the array, in one pwrite. */
static void write_events(hvdc_timeline *tl, hvdc_bytes *buf) {
    if (buf->len == 0) return;
    if (hvdc__bytes_append(buf, "\n]\n", 3)) { /* out of memory: drop the batch, the file stays valid */
        buf->len = 0;
        return;
    }
    /* events are written as ",\n{...}": the very first one must not start with a comma */
    const char *data = (const char *)buf->data;
    size_t len = buf->len;
    if (!tl->wrote_any) {
        data += 1;
        len -= 1;
    }
    ssize_t done = pwrite(tl->fd, data, len, tl->end_of_events);
    if (done == (ssize_t)len) {
        tl->end_of_events += (off_t)len - 3;
        tl->wrote_any = 1;
    }
    buf->len = 0;
}

static void *writer_main(void *arg) {
    hvdc_timeline *tl = arg;
    hvdc_bytes batch = {0};
    pthread_mutex_lock(&tl->mutex);
    for (;;) {
        while (!tl->stopping && tl->pending.len < FLUSH_BYTES) {
            struct timespec deadline = hvdc__deadline_in(FLUSH_MS * 1e-3);
            if (pthread_cond_timedwait(&tl->wake, &tl->mutex, &deadline) == ETIMEDOUT) break;
        }
        hvdc_bytes swap = tl->pending;
        tl->pending = batch;
        batch = swap;
        int stopping = tl->stopping;
        pthread_mutex_unlock(&tl->mutex);
        write_events(tl, &batch);
        pthread_mutex_lock(&tl->mutex);
        if (stopping && tl->pending.len == 0) break;
    }
    pthread_mutex_unlock(&tl->mutex);
    hvdc__bytes_free(&batch);
    return NULL;
}

/* Appends one formatted event; the caller holds tl->mutex. */
static void record_locked(hvdc_timeline *tl, const char *event, size_t n) {
    (void)hvdc__bytes_append(&tl->pending, event, n); /* out of memory: drop the event, not the job */
    if (tl->pending.len >= FLUSH_BYTES) pthread_cond_signal(&tl->wake);
}

static void free_row(void *value, void *ctx) {
    (void)ctx;
    free(value);
}

static void clear_rows(hvdc_timeline *tl) {
    hvdc__name_table_each(&tl->rows, free_row, NULL);
    hvdc__name_table_free(&tl->rows);
    hvdc__name_table_init(&tl->rows);
    tl->n_rows = 0;
}

hvd_status hvdc__timeline_open(const char *path, int rank, int mark_cycles, hvdc_timeline **out) {
    *out = NULL;
    hvdc_timeline *tl = calloc(1, sizeof *tl);
    if (!tl) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the timeline");
    tl->rank = rank;
    tl->fd = -1;
    tl->origin_us = hvdc__now_us();
    atomic_init(&tl->recording, 0);
    hvdc__name_table_init(&tl->rows);
    pthread_mutex_init(&tl->control, NULL);
    pthread_mutex_init(&tl->mutex, NULL);
    pthread_cond_init(&tl->wake, NULL);
    if (path && path[0] && hvdc__timeline_start(tl, path, mark_cycles) != HVD_OK) {
        char why[HVDC_ERROR_MAX];
        snprintf(why, sizeof why, "%s", hvd_last_error());
        hvdc__timeline_close(tl);
        return hvdc__fail(HVD_ERR_CONFIG, "HVD_TIMELINE: %s", why);
    }
    *out = tl;
    return HVD_OK;
}

hvd_status hvdc__timeline_start(hvdc_timeline *tl, const char *path, int mark_cycles) {
    hvd_status st = HVD_OK;
    pthread_mutex_lock(&tl->control);
    if (atomic_load(&tl->recording)) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "a timeline is already being written to '%s'; stop it first", tl->path);
        goto done;
    }
    static const char empty[] = "[\n]\n";
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "timeline file '%s': cannot open it for writing: %s", path, strerror(errno));
        goto done;
    }
    if (pwrite(fd, empty, sizeof empty - 1, 0) != (ssize_t)(sizeof empty - 1)) {
        st = hvdc__fail(HVD_ERR_INVALID_ARG, "timeline file '%s': cannot write: %s", path, strerror(errno));
        close(fd);
        goto done;
    }
    char *copy = strdup(path);
    if (!copy) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for the timeline");
        close(fd);
        goto done;
    }
    /* no writer runs now: set up the recording, then start one */
    pthread_mutex_lock(&tl->mutex);
    free(tl->path);
    tl->path = copy;
    tl->fd = fd;
    tl->mark_cycles = mark_cycles;
    tl->end_of_events = 2; /* after "[\n" */
    tl->wrote_any = 0;
    tl->pending.len = 0;
    tl->stopping = 0;
    clear_rows(tl);
    char meta[160];
    int n = snprintf(meta, sizeof meta,
                     ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"libhvdc rank %d\"}}",
                     tl->rank, tl->rank);
    record_locked(tl, meta, (size_t)n);
    if (hvdc__fault("timeline_writer") || pthread_create(&tl->writer, NULL, writer_main, tl) != 0) {
        close(fd);
        tl->fd = -1;
        st = hvdc__fail(HVD_ERR_INTERNAL, "could not start the timeline writer thread");
    } else {
        atomic_store(&tl->recording, 1);
    }
    pthread_mutex_unlock(&tl->mutex);
done:
    pthread_mutex_unlock(&tl->control);
    return st;
}

void hvdc__timeline_stop(hvdc_timeline *tl) {
    if (!tl) return;
    pthread_mutex_lock(&tl->control);
    if (atomic_load(&tl->recording)) {
        pthread_mutex_lock(&tl->mutex);
        atomic_store(&tl->recording, 0); /* no event is added after this */
        tl->stopping = 1;
        pthread_cond_signal(&tl->wake);
        pthread_mutex_unlock(&tl->mutex);
        pthread_join(tl->writer, NULL); /* it writes what is pending, then exits */
        close(tl->fd);
        tl->fd = -1;
    }
    pthread_mutex_unlock(&tl->control);
}

void hvdc__timeline_close(hvdc_timeline *tl) {
    if (!tl) return;
    hvdc__timeline_stop(tl);
    clear_rows(tl);
    hvdc__name_table_free(&tl->rows);
    hvdc__bytes_free(&tl->pending);
    free(tl->path);
    pthread_mutex_destroy(&tl->control);
    pthread_mutex_destroy(&tl->mutex);
    pthread_cond_destroy(&tl->wake);
    free(tl);
}

int64_t hvdc__timeline_now_us(const hvdc_timeline *tl) {
    return tl ? hvdc__timeline_us_at(tl, hvdc__now_ns()) : 0; /* no clock read without one */
}

int64_t hvdc__timeline_us_at(const hvdc_timeline *tl, int64_t now_ns) {
    return tl ? now_ns / 1000 - tl->origin_us : 0; /* hvdc__now_us's clock */
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if the bytes there are not one (stray
 * continuation bytes, overlong forms, surrogates, values past U+10FFFF). */
static size_t utf8_length(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (n == 0 || p[0] > 0xf4) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) return 0;
    if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
    return n;
}

/* Writes name as the body of a JSON string, valid whatever bytes the name holds: quotes and
 * backslashes escaped, control bytes as \u00XX, valid UTF-8 kept, and any other byte b as
 * \u00XX too (read as Latin-1), so the file always parses. out holds len >= 1 bytes. */
static void json_escape(char *out, size_t len, const char *name) {
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p;) {
        size_t n = utf8_length(p);
        char piece[8];
        size_t plen;
        if (*p == '"' || *p == '\\') {
            piece[0] = '\\', piece[1] = (char)*p, plen = 2, n = 1;
        } else if (n == 0 || *p < 0x20 || *p == 0x7f) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\u%04x", *p), n = 1;
        } else {
            memcpy(piece, p, n), plen = n;
        }
        if (k + plen + 1 > len) break; /* never a cut escape or sequence */
        memcpy(out + k, piece, plen);
        k += plen;
        p += n;
    }
    out[k] = '\0';
}

/* The row of name in the current file: created on first use with a label. Holds tl->mutex. */
static int row_locked(hvdc_timeline *tl, const char *name) {
    row *r = hvdc__name_table_get(&tl->rows, name);
    if (r) return r->id;
    r = calloc(1, sizeof *r);
    if (!r) return 0;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->id = ++tl->n_rows;
    if (hvdc__name_table_put(&tl->rows, r->name, r) != 0) {
        free(r);
        return 0;
    }
    char escaped[6 * HVD_MAX_NAME_LEN + 1], event[6 * HVD_MAX_NAME_LEN + 160];
    json_escape(escaped, sizeof escaped, name);
    int n = snprintf(event, sizeof event,
                     ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                     tl->rank, r->id, escaped);
    record_locked(tl, event, (size_t)n);
    return r->id;
}

int hvdc__timeline_recording(const hvdc_timeline *tl) {
    return tl && atomic_load_explicit(&tl->recording, memory_order_relaxed);
}

/* Locks tl->mutex if tl is recording: then the caller records and unlocks. */
static int lock_if_recording(hvdc_timeline *tl) {
    if (!tl || !atomic_load_explicit(&tl->recording, memory_order_relaxed)) return 0;
    pthread_mutex_lock(&tl->mutex);
    if (atomic_load_explicit(&tl->recording, memory_order_relaxed)) return 1;
    pthread_mutex_unlock(&tl->mutex);
    return 0;
}

/* A complete event on name's row; args: the JSON object's members after "group". */
static void span(hvdc_timeline *tl, const char *name, const char *phase, int64_t start_us,
                 int64_t end_us, int64_t group, const char *args) {
    if (!lock_if_recording(tl)) return;
    int id = row_locked(tl, name);
    char event[256];
    int n = snprintf(event, sizeof event,
                     ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%lld,\"dur\":%lld,"
                     "\"args\":{\"group\":%lld%s}}",
                     phase, tl->rank, id, (long long)start_us,
                     (long long)(end_us > start_us ? end_us - start_us : 0), (long long)group,
                     args);
    record_locked(tl, event, (size_t)n);
    pthread_mutex_unlock(&tl->mutex);
}

void hvdc__timeline_span(hvdc_timeline *tl, const char *name, const char *phase, int64_t start_us,
                         int64_t end_us, int64_t group) {
    span(tl, name, phase, start_us, end_us, group, "");
}

void hvdc__timeline_wait_span(hvdc_timeline *tl, const char *name, const char *phase,
                              int64_t start_us, int64_t end_us, int64_t group, int last_rank) {
    char args[40] = "";
    if (last_rank >= 0) snprintf(args, sizeof args, ",\"last_rank\":%d", last_rank);
    span(tl, name, phase, start_us, end_us, group, args);
}

void hvdc__timeline_cycle(hvdc_timeline *tl, int64_t at_us, uint64_t round) {
    if (!lock_if_recording(tl)) return;
    if (tl->mark_cycles) {
        char event[200];
        int n = snprintf(event, sizeof event,
                         ",\n{\"name\":\"round %llu\",\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"tid\":0,\"ts\":%lld}",
                         (unsigned long long)round, tl->rank, (long long)at_us);
        record_locked(tl, event, (size_t)n);
    }
    pthread_mutex_unlock(&tl->mutex);
}
