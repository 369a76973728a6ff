/*
 * fusion_steps.c - fusion_bench's model buffers and timed steps (see fusion_steps.h).
 * Main thread.
 */
#include "fusion_steps.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_device.h"

#define ALIGN_FLOATS 16 /* each tensor starts on a 64-byte boundary */

static float input_value(int rank, size_t t, size_t i, int parity) {
    return (float)(1 + (i + 7 * t + 3 * (size_t)rank + (size_t)parity) % 1009);
}

static void device_failed(const char *what) {
    fprintf(stderr, "fusion_bench: %s failed\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* The inputs and results on the device: send[] and recv replaced by device copies. */
static int model_to_device(fusion_model *m) {
    size_t nbytes = m->padded * sizeof(float);
    float *dev[3] = {bench_device_alloc(nbytes), bench_device_alloc(nbytes), bench_device_alloc(nbytes)};
    int ok = dev[0] && dev[1] && dev[2] && bench_device_upload(dev[0], m->send[0], nbytes) == 0 &&
             bench_device_upload(dev[1], m->send[1], nbytes) == 0 &&
             bench_device_memset(dev[2], 0, nbytes) == 0;
    free(m->send[0]);
    free(m->send[1]);
    m->send[0] = dev[0], m->send[1] = dev[1];
    m->recv = dev[2];
    return ok ? 0 : -1;
}

int fusion_model_make(fusion_model *m, const char *model, int rank, int device) {
    memset(m, 0, sizeof *m);
    m->device = -1; /* the buffers are on the host until model_to_device */
    if (tensor_set_make(&m->set, model) != 0) return -1;
    m->offsets = malloc(m->set.n * sizeof *m->offsets);
    size_t total = 0;
    for (size_t t = 0; m->offsets && t < m->set.n; t++) {
        m->offsets[t] = total;
        total += (m->set.counts[t] + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    }
    m->padded = total;
    for (int p = 0; p < 2; p++) m->send[p] = aligned_alloc(64, total * sizeof(float));
    m->host = aligned_alloc(64, total * sizeof(float));
    if (!m->offsets || !m->send[0] || !m->send[1] || !m->host) return -1;
    for (int p = 0; p < 2; p++) {
        memset(m->send[p], 0, total * sizeof(float)); /* the padding too: nccl-fused sums it */
        for (size_t t = 0; t < m->set.n; t++) {
            float *x = m->send[p] + m->offsets[t];
            for (size_t i = 0; i < m->set.counts[t]; i++) x[i] = input_value(rank, t, i, p);
        }
    }
    memset(m->host, 0, total * sizeof(float));
    if (device < 0) {
        m->recv = m->host;
        return 0;
    }
    m->device = device;
    return model_to_device(m);
}

void fusion_model_free(fusion_model *m) {
    tensor_set_free(&m->set);
    free(m->offsets);
    if (m->device >= 0) {
        bench_device_free(m->send[0]);
        bench_device_free(m->send[1]);
        bench_device_free(m->recv);
    } else {
        free(m->send[0]);
        free(m->send[1]);
    }
    free(m->host);
    memset(m, 0, sizeof *m);
}

void fusion_model_clear(const fusion_model *m) {
    if (m->device < 0) memset(m->recv, 0xff, m->padded * sizeof(float));
    else if (bench_device_memset(m->recv, 0xff, m->padded * sizeof(float)) != 0)
        device_failed("clearing the device results");
}

long fusion_model_check(const fusion_model *m, int size, int parity, int step) {
    if (m->device >= 0 && bench_device_download(m->host, m->recv, m->padded * sizeof(float)) != 0)
        device_failed("copying the results back");
    long wrong = 0;
    for (size_t t = 0; t < m->set.n; t++) {
        size_t n = m->set.counts[t];
        size_t probe[3] = {0, n - 1, ((size_t)step * 7919u + t * 31u) % n};
        for (int k = 0; k < 3; k++) {
            double want = 0.0;
            for (int r = 0; r < size; r++) want += input_value(r, t, probe[k], parity);
            wrong += m->host[m->offsets[t] + probe[k]] != (float)want;
        }
    }
    return wrong;
}

/* The buffer a step reads its inputs from: the parity's own, or, in place (host buffers), recv
 * with those inputs copied into it; the copy comes before the step's clock starts. */
static const float *step_inputs(const fusion_model *m, int parity, int in_place) {
    if (!in_place) return m->send[parity];
    memcpy(m->recv, m->send[parity], m->padded * sizeof *m->recv);
    return m->recv;
}

double fusion_step_hvd(const fusion_model *m, int parity, int in_place, hvd_handle *handles,
                       double split[2]) {
    hvd_options opts = HVD_OPTIONS_INIT;
    opts.device = m->device;
    const float *send = step_inputs(m, parity, in_place);
    BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = bench_now_us();
    for (size_t k = m->set.n; k-- > 0;)
        BENCH_CHECK_HVD(hvd_allreduce_async(m->set.names[k], send + m->offsets[k],
                                            m->recv + m->offsets[k], m->set.counts[k],
                                            HVD_FLOAT32, HVD_SUM, m->device >= 0 ? &opts : NULL,
                                            &handles[k]));
    double submitted = bench_now_us();
    for (size_t k = m->set.n; k-- > 0;) {
        BENCH_CHECK_HVD(hvd_wait(&handles[k]));
        if (split && k + 1 == m->set.n) split[1] = bench_now_us() - t0;
    }
    if (split) split[0] = submitted - t0;
    return bench_now_us() - t0;
}

double fusion_step_mpi(const fusion_model *m, int parity, int in_place) {
    const float *send = step_inputs(m, parity, in_place);
    BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = bench_now_us();
    for (size_t k = m->set.n; k-- > 0;)
        BENCH_CHECK_MPI(MPI_Allreduce(in_place ? MPI_IN_PLACE : send + m->offsets[k],
                                      m->recv + m->offsets[k], (int)m->set.counts[k], MPI_FLOAT,
                                      MPI_SUM, MPI_COMM_WORLD));
    return bench_now_us() - t0;
}

double fusion_step_nccl(const fusion_model *m, int parity) {
    BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = bench_now_us();
    if (bench_nccl_allreduce_group(m->send[parity], m->recv, m->offsets, m->set.counts, m->set.n,
                                   HVD_FLOAT32, HVD_SUM) != 0)
        device_failed("ncclAllReduce (one per tensor, in one group)");
    return bench_now_us() - t0;
}

double fusion_step_nccl_fused(const fusion_model *m, int parity) {
    BENCH_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = bench_now_us();
    if (bench_nccl_allreduce(m->send[parity], m->recv, m->padded, HVD_FLOAT32, HVD_SUM) != 0)
        device_failed("ncclAllReduce (all tensors at once)");
    return bench_now_us() - t0;
}

long fusion_min_fused(const tensor_set *s, long threshold) {
    size_t n = s->n;
    unsigned char *taken = calloc(n, 1);
    if (!taken) return -1;
    long responses = 0;
    for (size_t a = n; a-- > 0;) { /* backward order is the submission order */
        if (taken[a]) continue;
        taken[a] = 1;
        responses++;
        uint64_t bytes = s->counts[a] * sizeof(float);
        for (size_t b = a; b-- > 0 && bytes < (uint64_t)threshold;) {
            uint64_t more = s->counts[b] * sizeof(float);
            if (taken[b] || bytes + more > (uint64_t)threshold) continue;
            taken[b] = 1;
            bytes += more;
        }
    }
    free(taken);
    return responses;
}
