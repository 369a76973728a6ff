/*
 * arrivals.c - last arrivals and their lateness (see arrivals.h). The medians come from a ring
 * of the last SAMPLES names, so a period of any length costs fixed memory.
 */
#include "negotiation/arrivals.h"

#include <stdlib.h>
#include <string.h>

enum { SAMPLES = 4096 };

typedef struct sample {
    int rank;
    float lateness_s, wait_s;
} sample;

struct hvdc_arrivals {
    int size;
    uint64_t names;
    uint64_t *last_count; /* (size) names each rank completed */
    sample ring[SAMPLES]; /* the last min(names, SAMPLES) */
    float scratch[SAMPLES];
};

hvdc_arrivals *hvdc__arrivals_create(int size) {
    hvdc_arrivals *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->size = size;
    if (!(a->last_count = calloc((size_t)size, sizeof *a->last_count))) {
        free(a);
        return NULL;
    }
    return a;
}

void hvdc__arrivals_destroy(hvdc_arrivals *a) {
    if (!a) return;
    free(a->last_count);
    free(a);
}

void hvdc__arrivals_note(hvdc_arrivals *a, int rank, double lateness_s, double wait_s) {
    if (rank < 0 || rank >= a->size) return;
    a->ring[a->names % SAMPLES] = (sample){rank, (float)lateness_s, (float)wait_s};
    a->names++;
    a->last_count[rank]++;
}

static int compare_floats(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* The median of the n values in v (sorted in place); 0 when n is 0. */
static double median(float *v, size_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, compare_floats);
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

void hvdc__arrivals_summary(hvdc_arrivals *a, hvdc_arrival_summary *out) {
    *out = (hvdc_arrival_summary){.names = a->names, .last_rank = -1};
    for (int r = 0; r < a->size; r++)
        if (a->last_count[r] > out->last_count) {
            out->last_count = a->last_count[r];
            out->last_rank = r;
        }
    size_t kept = a->names < SAMPLES ? (size_t)a->names : SAMPLES, n = 0;
    for (size_t i = 0; i < kept; i++) a->scratch[i] = a->ring[i].wait_s;
    out->wait_median_s = median(a->scratch, kept);
    for (size_t i = 0; i < kept; i++)
        if (a->ring[i].rank == out->last_rank) a->scratch[n++] = a->ring[i].lateness_s;
    out->last_median_s = median(a->scratch, n);
}

void hvdc__arrivals_reset(hvdc_arrivals *a) {
    a->names = 0;
    memset(a->last_count, 0, (size_t)a->size * sizeof *a->last_count);
}
