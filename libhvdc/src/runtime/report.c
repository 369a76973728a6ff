/*
 * report.c - HVD_REPORT's figures, added up over a period and printed by rank 0 (see report.h).
 */
#include "runtime/report.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

struct hvdc_report {
    double period_s, started;
    int size;
    const hvdc_peers *peers;
    hvdc_arrivals *arrivals;
    uint64_t rounds, tensors, ops, bytes;
    uint64_t host_bytes;               /* of bytes, those of host all-reduces, timed: */
    double allreduce_s;                /* their time (device work runs on: not timed) */
    char marker[HVD_MAX_NAME_LEN + 1]; /* the period's first all-reduced name: a step each run */
    uint64_t marker_runs;
    pthread_mutex_t mutex;
    hvd_report last; /* under mutex: what hvd_report_get copies */
};

hvdc_report *hvdc__report_create(double period_s, int size, const hvdc_peers *peers) {
    hvdc_report *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->period_s = period_s;
    r->started = hvdc__now_seconds();
    r->size = size;
    r->peers = peers;
    r->last.last_rank = -1;
    pthread_mutex_init(&r->mutex, NULL);
    return r;
}

void hvdc__report_destroy(hvdc_report *r) {
    if (!r) return;
    pthread_mutex_destroy(&r->mutex);
    free(r);
}

void hvdc__report_attach(hvdc_report *r, hvdc_arrivals *arrivals) { r->arrivals = arrivals; }

void hvdc__report_round(hvdc_report *r) { r->rounds++; }

/* libhvdc's and its bindings' own collectives ("hvdc.init.local_sizes", "hvd.consistency.*")
 * run once, not every step: they never mark a step. */
static int own_name(const char *name) {
    return strncmp(name, "hvdc.", 5) == 0 || strncmp(name, "hvd.", 4) == 0;
}

/* Counts the runs of the period's first all-reduced name of the application's. */
static void count_steps(hvdc_report *r, const hvdc_wire_response *resp, const hvdc_cache *cache) {
    for (uint32_t i = 0; i < resp->n_names; i++) {
        const char *name = resp->slots ? hvdc__cache_name(cache, resp->slots[i]) : resp->names[i];
        if (!name || !name[0]) continue;
        if (!r->marker[0] && !own_name(name)) snprintf(r->marker, sizeof r->marker, "%s", name);
        if (strcmp(name, r->marker) == 0) r->marker_runs++;
    }
}

void hvdc__report_response(hvdc_report *r, const hvdc_wire_response *resp, const hvdc_cache *cache,
                           size_t tensors, uint64_t bytes, double seconds) {
    r->tensors += tensors;
    r->ops++;
    if (resp->kind != HVDC_KIND_ALLREDUCE) return;
    r->bytes += bytes;
    if (seconds > 0) {
        r->host_bytes += bytes;
        r->allreduce_s += seconds;
    }
    count_steps(r, resp, cache);
}

/* The period's figures from the counters and the arrivals; *arrived: how many names the
 * arrivals cover (last_share's denominator). */
static void figures(hvdc_report *r, double seconds, hvd_report *out, uint64_t *arrived) {
    hvdc_arrival_summary a = {.last_rank = -1};
    if (r->arrivals) hvdc__arrivals_summary(r->arrivals, &a);
    *out = (hvd_report){
        .period_s = seconds,
        .steps_per_s = (double)r->marker_runs / seconds,
        .rounds_per_s = (double)r->rounds / seconds,
        .wait_ms = a.wait_median_s * 1e3,
        .last_rank = a.last_rank,
        .last_share = a.names ? (double)a.last_count / (double)a.names : 0,
        .last_lateness_ms = a.last_median_s * 1e3,
        .bytes = r->bytes,
        .busbw_gbs = r->allreduce_s > 0 ? (double)r->host_bytes * 2.0 * (r->size - 1) / r->size /
                                              r->allreduce_s * 1e-9 : 0,
        .tensors = r->tensors,
        .ops = r->ops,
    };
    snprintf(out->last_host, sizeof out->last_host, "%s",
             a.last_rank >= 0 ? hvdc__peers_host(r->peers, a.last_rank) : "");
    *arrived = a.names;
}

static void print(const hvdc_report *r, const hvd_report *f, uint64_t arrived) {
    char who[160] = "nobody (no tensor waited for another rank)";
    if (f->last_rank >= 0)
        snprintf(who, sizeof who, "rank %d (host '%s'), for %.0f %% of %llu tensors, median "
                 "%.1f ms after the rank before it", f->last_rank, f->last_host,
                 100 * f->last_share, (unsigned long long)arrived, f->last_lateness_ms);
    char marker[HVD_MAX_NAME_LEN + 40] = "no all-reduce of the application's yet";
    if (r->marker[0])
        snprintf(marker, sizeof marker, "'%s' ran %llu times", r->marker,
                 (unsigned long long)r->marker_runs);
    fprintf(stderr,
            "[hvdc report rank 0] last %.1f s (np %d): %.1f steps/s (%s), "
            "%.1f rounds/s\n"
            "[hvdc report rank 0]   waiting for each other: a tensor waited %.1f ms (median) "
            "from the first rank ready to the last\n"
            "[hvdc report rank 0]   arrived last most often: %s\n"
            "[hvdc report rank 0]   all-reduced %.3g MB per rank; bus bandwidth %.3g GB/s inside "
            "the all-reduces (%.2f s of %.1f)\n"
            "[hvdc report rank 0]   %.1f tensors per operation (%llu tensors in %llu operations)\n",
            f->period_s, r->size, f->steps_per_s, marker, f->rounds_per_s, f->wait_ms, who,
            (double)f->bytes * 1e-6, f->busbw_gbs, r->allreduce_s, f->period_s,
            f->ops ? (double)f->tensors / (double)f->ops : 0, (unsigned long long)f->tensors,
            (unsigned long long)f->ops);
}

void hvdc__report_tick(hvdc_report *r, double now) {
    double seconds = now - r->started;
    if (seconds < r->period_s) return;
    hvd_report f;
    uint64_t arrived = 0;
    figures(r, seconds, &f, &arrived);
    print(r, &f, arrived);
    pthread_mutex_lock(&r->mutex);
    r->last = f;
    pthread_mutex_unlock(&r->mutex);
    if (r->arrivals) hvdc__arrivals_reset(r->arrivals);
    r->rounds = r->tensors = r->ops = r->bytes = r->host_bytes = r->marker_runs = 0;
    r->allreduce_s = 0;
    r->marker[0] = '\0';
    r->started = now;
}

void hvdc__report_copy(hvdc_report *r, hvd_report *out) {
    if (!r) {
        *out = (hvd_report){.last_rank = -1};
        return;
    }
    pthread_mutex_lock(&r->mutex);
    *out = r->last;
    pthread_mutex_unlock(&r->mutex);
}
