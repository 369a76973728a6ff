/*
 * test_two_level.c - the two-level all-reduce (collectives/allreduce.h) across several nodes on
 * one host: the world is cut into fake nodes of L consecutive ranks (the local communicator)
 * and the ranks with the same local rank (the cross communicator), as hvdc__split_node and
 * hvdc__split_cross would on real nodes. On one host HVD_HIERARCHICAL_ALLREDUCE only ever runs
 * a cross stage of one node, so this is where node order is checked without two hosts.
 *
 * Each result must equal, bit for bit, the reference computed here: inside each node in local
 * rank order, then the node sums in node order. Inputs have random exponents, so a sum's bits
 * depend on its order, and the test checks that this layout's order differs from plain rank
 * order in many elements (else it could not see an order bug). Run with L = 3 and with 3
 * nodes, so both levels fold three terms (at two, a + b = b + a hides the order).
 * Every case runs with the node stages through shared memory and through MPI messages, with
 * the one-step exchange and without (small_bytes), out of place and in place. The staged
 * shared-memory all-reduce (a fused piece packed straight into the segment) must give the bits
 * of hvdc__shm_allreduce on each node, and refuse more than one step.
 *
 * With STEP_BYTES, the shared-memory stages run in steps of that many bytes (HVD_SHM_STEP),
 * so the larger counts take many steps, with pieces that do not divide evenly.
 *
 * Usage: test_two_level L [STEP_BYTES]   (np a multiple of L). Main thread only; prints PASS
 * or FAIL.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buffer.h"
#include "collectives/allreduce.h"
#include "collectives/shm.h"
#include "hvdc.h"
#include "rank_check.h"

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* rank's element i: a mantissa in [1, 2) times 2^e, e in [-12, 12], either sign */
static double value(int rank, size_t i) {
    uint64_t h = mix((uint64_t)rank * 0x9e3779b97f4a7c15ull + i + 1), g = mix(h);
    double v = 1.0 + (double)(h >> 12) / 4503599627370496.0;
    int e = (int)(g % 25) - 12;
    for (; e > 0; e--) v *= 2.0;
    for (; e < 0; e++) v /= 2.0;
    return (g >> 40) & 1 ? -v : v;
}

static void fill(void *buf, hvd_dtype dt, int rank, size_t count) {
    for (size_t i = 0; i < count; i++) {
        if (dt == HVD_FLOAT32) ((float *)buf)[i] = (float)value(rank, i);
        else ((double *)buf)[i] = value(rank, i);
    }
}

/* ref = sum over groups g (in order) of the sum over the group's ranks (in order); with
 * group = size, plain rank order. Each op rounds to dt, as hvdc__reduce does. */
static void reference(void *ref, hvd_dtype dt, int size, int group, size_t count) {
    for (size_t i = 0; i < count; i++) {
        double total = 0, part = 0;
        float total_f = 0, part_f = 0;
        for (int r = 0; r < size; r++) {
            double x = value(r, i);
            if (dt == HVD_FLOAT32) part_f = r % group == 0 ? (float)x : part_f + (float)x;
            else part = r % group == 0 ? x : part + x;
            if (r % group == group - 1) {
                if (dt == HVD_FLOAT32) total_f = r < group ? part_f : total_f + part_f;
                else total = r < group ? part : total + part;
            }
        }
        if (dt == HVD_FLOAT32) ((float *)ref)[i] = total_f;
        else ((double *)ref)[i] = total;
    }
}

int main(int argc, char **argv) {
    int rank = 0, size = 1, group = argc > 1 ? atoi(argv[1]) : 0;
    long step = argc > 2 ? atol(argv[2]) : 0; /* bytes; 0: the slot */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (group < 1 || size % group != 0) {
        if (rank == 0)
            printf("usage: test_two_level L [STEP_BYTES], with np a multiple of L (np %d)\nFAIL\n", size);
        MPI_Finalize();
        return 1;
    }
    MPI_Comm local, cross;
    MPI_Comm_split(MPI_COMM_WORLD, rank / group, rank, &local);
    MPI_Comm_split(MPI_COMM_WORLD, rank % group, rank, &cross);
    hvdc_shm *shm = NULL;
    hvd_status st = hvdc__shm_create(local, &shm);
    CHECK_T(st == HVD_OK, "hvdc__shm_create: %s", hvd_last_error());
    if (shm && step > 0) { /* what HVD_SHM_STEP sets: many steps per buffer */
        hvdc__shm_set_step(shm, (size_t)step);
        CHECK_T(hvdc__shm_step(shm) == (size_t)step, "step %zu, set %ld", hvdc__shm_step(shm), step);
    }

    static const hvd_dtype dtypes[] = {HVD_FLOAT32, HVD_FLOAT64};
    static const size_t counts[] = {1, 2, 5, 100, 4099, 70001, 300001};
    static const size_t smalls[] = {0, 64 * 1024};
    size_t max = 300001 * 8, sensitive = 0, elements = 0;
    unsigned char *src = malloc(max), *dst = malloc(max), *ref = malloc(max), *flat = malloc(max);
    hvdc_buffer scratch = {0};
    for (size_t d = 0; d < 2; d++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            hvd_dtype dt = dtypes[d];
            size_t count = counts[c], bytes = count * hvd_dtype_size(dt);
            reference(ref, dt, size, group, count);
            reference(flat, dt, size, size, count);
            for (size_t i = 0; i < count; i++)
                sensitive += dt == HVD_FLOAT32 ? ((float *)ref)[i] != ((float *)flat)[i]
                                               : ((double *)ref)[i] != ((double *)flat)[i];
            elements += count;
            for (int use_shm = 0; use_shm < 2; use_shm++)
                for (size_t s = 0; s < 2; s++)
                    for (int in_place = 0; in_place < 2; in_place++) {
                        if (use_shm && !shm) continue;
                        fill(src, dt, rank, count);
                        memset(dst, 0xa5, bytes);
                        void *out = in_place ? (void *)src : (void *)dst;
                        st = hvdc__hierarchical_allreduce(local, cross, use_shm ? shm : NULL, src,
                                                          out, count, dt, HVD_SUM, smalls[s],
                                                          &scratch, NULL);
                        size_t bad = 0, first = 0;
                        for (size_t i = 0; st == HVD_OK && i < count; i++) {
                            size_t e = hvd_dtype_size(dt);
                            if (memcmp((char *)out + i * e, ref + i * e, e) != 0 && bad++ == 0) first = i;
                        }
                        CHECK_T(st == HVD_OK && bad == 0,
                                "%s count %zu %s small_bytes %zu %s: %s, %zu elements differ from "
                                "node order (first %zu)", dt == HVD_FLOAT32 ? "float32" : "float64",
                                count, use_shm ? "shm" : "messages", smalls[s],
                                in_place ? "in place" : "out of place",
                                st == HVD_OK ? "ok" : hvd_last_error(), bad, first);
                    }
        }
    for (size_t d = 0; shm && d < 2; d++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            hvd_dtype dt = dtypes[d];
            size_t count = counts[c], e = hvd_dtype_size(dt), bytes = count * e;
            if (bytes > hvdc__shm_step(shm)) continue;
            fill(src, dt, rank, count);
            st = hvdc__shm_allreduce(shm, src, ref, count, dt, HVD_SUM, NULL);
            CHECK_T(st == HVD_OK, "hvdc__shm_allreduce: %s", hvd_last_error());
            memcpy(hvdc__shm_staging(shm), src, bytes);
            const void *result = NULL;
            st = hvdc__shm_allreduce_staged(shm, count, dt, HVD_SUM, NULL, &result);
            CHECK_T(st == HVD_OK && memcmp(result, ref, bytes) == 0,
                    "staged %s count %zu: %s, differs from hvdc__shm_allreduce",
                    dt == HVD_FLOAT32 ? "float32" : "float64", count,
                    st == HVD_OK ? "ok" : hvd_last_error());
        }
    if (shm) {
        const void *result = NULL;
        size_t over = hvdc__shm_step(shm) / 4 + 1;
        st = hvdc__shm_allreduce_staged(shm, over, HVD_FLOAT32, HVD_SUM, NULL, &result);
        CHECK_T(st == HVD_ERR_INTERNAL && strstr(hvd_last_error(), "step"),
                "a staged piece one element over the step: %s", hvd_last_error());
        fill(src, HVD_FLOAT32, rank, 5); /* the segment still works: nothing arrived */
        memcpy(hvdc__shm_staging(shm), src, 5 * sizeof(float));
        st = hvdc__shm_allreduce_staged(shm, 5, HVD_FLOAT32, HVD_SUM, NULL, &result);
        CHECK_T(st == HVD_OK, "a staged piece after a refused one: %s", hvd_last_error());
    }
    /* the layout must make node order differ from rank order, or the test could not see it */
    CHECK_T(group == size || sensitive * 10 > elements,
            "node order and rank order differ in only %zu of %zu elements", sensitive, elements);
    size_t step_used = shm ? hvdc__shm_step(shm) : 0;
    hvdc__shm_destroy(shm);
    hvdc__buffer_free(&scratch);
    free(src);
    free(dst);
    free(ref);
    free(flat);
    MPI_Comm_free(&local);
    MPI_Comm_free(&cross);
    int total = rank_check_total(MPI_COMM_WORLD);
    if (rank == 0)
        printf("%d fake nodes of %d ranks, shared-memory step %zu bytes: %s\n", size / group, group,
               step_used, total ? "FAIL" : "PASS");
    MPI_Finalize();
    return total != 0;
}
