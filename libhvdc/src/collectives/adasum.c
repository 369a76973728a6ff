/*
 * adasum.c - Adasum's VHDD and its pairwise combine (adasum.h has the picture, the pairing,
 * the arithmetic and the cost), and the MPI link it runs on in the runtime.
 *
 * State while halving: `data` points at this rank's slice of buf, `mine` is its length, and
 * kept[i] how much of tensor i the slice holds (a slice starts and ends inside tensors, so
 * each tensor's dot products come from the slices that hold part of it). given[level] is what
 * went to the peer at each level: the halves come back in reverse order.
 * Background thread (and tests).
 */
#include "collectives/adasum.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/half.h"
#include "base/status.h"
#include "base/tags.h"

/* Levels a size_t rank count can have. */
#define MAX_LEVELS 64
/* MPI counts are ints: larger exchanges go in pieces this big. */
#define PIECE_BYTES ((size_t)1 << 30)

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

int hvdc__adasum_is_power_of_2(int n) { return n > 0 && (n & (n - 1)) == 0; }

/* ---- the pairwise combine ---- */

static float half_get(const uint16_t *h, size_t i, hvd_dtype dtype) {
    return dtype == HVD_FLOAT16 ? hvdc__half_to_float(h[i]) : hvdc__bf16_to_float(h[i]);
}

void hvdc__adasum_dots(const void *a, const void *b, size_t count, hvd_dtype dtype, double out[3]) {
    double dot = 0, aa = 0, bb = 0;
    if (dtype == HVD_FLOAT32) {
        const float *x = a, *y = b;
        for (size_t i = 0; i < count; i++) {
            /* products and sums in double, as Horovod's ComputeDotAndNormSqrds: float
             * products of values near 1e-38 underflow to 0, near 1e38 overflow */
            double xd = x[i], yd = y[i];
            dot += xd * yd;
            aa += xd * xd;
            bb += yd * yd;
        }
    } else if (dtype == HVD_FLOAT64) {
        const double *x = a, *y = b;
        for (size_t i = 0; i < count; i++) {
            dot += x[i] * y[i];
            aa += x[i] * x[i];
            bb += y[i] * y[i];
        }
    } else { /* 16-bit: Horovod's four double lanes, so the sums round as its AVX code does */
        double d[4] = {0}, p[4] = {0}, q[4] = {0};
        for (size_t i = 0; i < count; i++) {
            double x = half_get(a, i, dtype), y = half_get(b, i, dtype);
            d[i % 4] += x * y; /* exact: 16-bit products fit a double */
            p[i % 4] += x * x;
            q[i % 4] += y * y;
        }
        dot = (d[0] + d[2]) + (d[1] + d[3]);
        aa = (p[0] + p[2]) + (p[1] + p[3]);
        bb = (q[0] + q[2]) + (q[1] + q[3]);
    }
    out[0] = dot;
    out[1] = aa;
    out[2] = bb;
}

double hvdc__adasum_coefficient(double dot, double normsq) {
    /* Horovod's threshold, sqrt(DBL_MIN): only a vector whose norm^2 vanishes in double keeps
     * coefficient 1, so tiny gradients are averaged like any others */
    return normsq >= HVDC_ADASUM_MIN_NORMSQ ? 1.0 - dot / normsq * 0.5 : 1.0;
}

void hvdc__adasum_scaled_add(void *a, double acoeff, const void *b, double bcoeff, size_t count,
                             hvd_dtype dtype) {
    if (dtype == HVD_FLOAT32) {
        float *x = a;
        const float *y = b;
        for (size_t i = 0; i < count; i++) x[i] = (float)(acoeff * x[i] + bcoeff * y[i]);
    } else if (dtype == HVD_FLOAT64) {
        double *x = a;
        const double *y = b;
        for (size_t i = 0; i < count; i++) x[i] = acoeff * x[i] + bcoeff * y[i];
    } else { /* Horovod: a * ac in float, then one fused multiply-add of b * bc */
        uint16_t *x = a;
        float ac = (float)acoeff, bc = (float)bcoeff;
        for (size_t i = 0; i < count; i++) {
            float r = fmaf(bc, half_get(b, i, dtype), ac * half_get(x, i, dtype));
            x[i] = dtype == HVD_FLOAT16 ? hvdc__float_to_half(r) : hvdc__float_to_bf16(r);
        }
    }
}

/* ---- VHDD ---- */

typedef struct vhdd {
    const hvdc_adasum_link *link;
    hvd_dtype dtype;
    size_t elem, n;
    char *recv;     /* (ceil(total/2)) the peer's copy of this rank's half */
    size_t *kept;   /* (n) elements of each tensor in this rank's slice */
    double *sums;   /* (3n) per tensor: a.b, |left|^2, |right|^2 */
    double *peer;   /* (3n) a peer's sums */
} vhdd;

size_t hvdc__adasum_scratch_bytes(size_t total, size_t n, hvd_dtype dtype) {
    return round64((total / 2 + 1) * hvd_dtype_size(dtype)) + round64(n * sizeof(size_t)) +
           2 * round64(3 * n * sizeof(double));
}

/* Sums v->sums over the 2*level ranks that share this rank's bits above `level` (and over
 * each of their nodes' ranks, when the link ranks are nodes). */
static hvd_status sum_group(vhdd *v, int level) {
    hvd_status st = HVD_OK;
    size_t bytes = 3 * v->n * sizeof(double);
    for (int d = 1; d <= level; d <<= 1) {
        CHECK(v->link->exchange(v->link->ctx, v->link->rank ^ d, v->sums, bytes, v->peer, bytes));
        for (size_t k = 0; k < 3 * v->n; k++) v->sums[k] += v->peer[k];
    }
    if (v->link->sum_node) CHECK(v->link->sum_node(v->link->ctx, v->sums, 3 * v->n));
fail:
    return st;
}

/* Combines this rank's slice (a) with the peer's copy of it (b, in v->recv), tensor by tensor. */
static hvd_status combine(vhdd *v, char *data, int level, int left) {
    hvd_status st = HVD_OK;
    size_t at = 0;
    for (size_t i = 0; i < v->n; i++) {
        double d[3];
        hvdc__adasum_dots(data + at * v->elem, v->recv + at * v->elem, v->kept[i], v->dtype, d);
        v->sums[3 * i] = d[0];
        v->sums[3 * i + 1] = left ? d[1] : d[2]; /* the left vector's norm first on both sides */
        v->sums[3 * i + 2] = left ? d[2] : d[1];
        at += v->kept[i];
    }
    CHECK(sum_group(v, level));
    at = 0;
    for (size_t i = 0; i < v->n; i++) {
        double dot = v->sums[3 * i];
        double mine = v->sums[3 * i + (left ? 1 : 2)], theirs = v->sums[3 * i + (left ? 2 : 1)];
        hvdc__adasum_scaled_add(data + at * v->elem, hvdc__adasum_coefficient(dot, mine),
                                v->recv + at * v->elem, hvdc__adasum_coefficient(dot, theirs),
                                v->kept[i], v->dtype);
        at += v->kept[i];
    }
fail:
    return st;
}

hvd_status hvdc__adasum(const hvdc_adasum_link *link, void *buf, const size_t *counts, size_t n,
                        hvd_dtype dtype, hvdc_buffer *scratch) {
    hvd_status st = HVD_OK;
    int rank = link->rank, size = link->size;
    if (!hvdc__adasum_is_power_of_2(size))
        return hvdc__fail(HVD_ERR_UNSUPPORTED, "%s (%d ranks)", HVDC_ADASUM_POW2_MESSAGE, size);
    if (size == 1) return HVD_OK;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += counts[i];
    vhdd v = {.link = link, .dtype = dtype, .elem = hvd_dtype_size(dtype), .n = n};
    CHECK(hvdc__buffer_reserve(scratch, hvdc__adasum_scratch_bytes(total, n, dtype)));
    v.recv = scratch->data;
    v.kept = (size_t *)(v.recv + round64((total / 2 + 1) * v.elem));
    v.sums = (double *)((char *)v.kept + round64(n * sizeof(size_t)));
    v.peer = (double *)((char *)v.sums + round64(3 * n * sizeof(double)));
    memcpy(v.kept, counts, n * sizeof *counts);

    char *data = buf;
    size_t mine = total, given[MAX_LEVELS];
    int levels = 0;
    for (int level = 1; level < size; level <<= 1, levels++) {
        int left = (rank & level) == 0;
        size_t first = mine / 2;        /* the left rank keeps [0, first), the right the rest */
        size_t keep = left ? first : mine - first;
        size_t send_at = left ? first : 0;
        given[levels] = mine - keep;
        CHECK(link->exchange(link->ctx, rank ^ level, data + send_at * v.elem, given[levels] * v.elem,
                             v.recv, keep * v.elem));
        size_t before = 0; /* elements of the slice before tensor i */
        for (size_t i = 0; i < n; i++) {
            size_t c = v.kept[i];
            size_t in_left = before >= first ? 0 : first - before < c ? first - before : c;
            v.kept[i] = left ? in_left : c - in_left;
            before += c;
        }
        if (!left) data += first * v.elem;
        mine = keep;
        CHECK(combine(&v, data, level, left));
    }
    for (int level = size >> 1; level > 0; level >>= 1) {
        int left = (rank & level) == 0;
        size_t back = given[--levels];
        char *at = left ? data + mine * v.elem : data - back * v.elem;
        CHECK(link->exchange(link->ctx, rank ^ level, data, mine * v.elem, at, back * v.elem));
        if (!left) data = at;
        mine += back;
    }
fail:
    return st;
}

/* ---- the MPI link ---- */

typedef struct mpi_link {
    MPI_Comm comm;
    hvdc_liveness *watch;
    const int *peer_rank;   /* NULL, or link rank -> rank in comm (link ranks are nodes) */
    MPI_Comm node_comm;     /* with peer_rank: the ranks of this node */
    double *gathered;       /* with peer_rank: room for every node rank's sums */
} mpi_link;

/* Both sides know both lengths, so they cut the same pieces. */
static hvd_status mpi_exchange(void *ctx, int peer, const void *send, size_t send_bytes,
                               void *recv, size_t recv_bytes) {
    hvd_status st = HVD_OK;
    mpi_link *l = ctx;
    if (l->peer_rank) peer = l->peer_rank[peer];
    size_t longest = send_bytes > recv_bytes ? send_bytes : recv_bytes;
    for (size_t at = 0; at < longest; at += PIECE_BYTES) {
        MPI_Request req[2];
        int n = 0;
        if (at < recv_bytes) {
            size_t len = recv_bytes - at < PIECE_BYTES ? recv_bytes - at : PIECE_BYTES;
            CHECK_MPI(MPI_Irecv((char *)recv + at, (int)len, MPI_BYTE, peer, HVDC_TAG_ADASUM,
                                l->comm, &req[n++]));
        }
        if (at < send_bytes) {
            size_t len = send_bytes - at < PIECE_BYTES ? send_bytes - at : PIECE_BYTES;
            CHECK_MPI(MPI_Isend((const char *)send + at, (int)len, MPI_BYTE, peer, HVDC_TAG_ADASUM,
                                l->comm, &req[n++]));
        }
        CHECK(hvdc__wait_requests(n, req, l->watch));
    }
fail:
    return st;
}

hvd_status hvdc__adasum_mpi(MPI_Comm comm, void *buf, const size_t *counts, size_t n,
                            hvd_dtype dtype, hvdc_buffer *scratch, hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    mpi_link l = {comm, watch, NULL, MPI_COMM_NULL, NULL};
    hvdc_adasum_link link = {.exchange = mpi_exchange, .ctx = &l};
    CHECK_MPI(MPI_Comm_rank(comm, &link.rank));
    CHECK_MPI(MPI_Comm_size(comm, &link.size));
    CHECK(hvdc__adasum(&link, buf, counts, n, dtype, scratch));
fail:
    return st;
}

/* Every node rank's sums, added in local-rank order: the same bits on each of them. */
static hvd_status mpi_sum_node(void *ctx, double *sums, size_t count) {
    hvd_status st = HVD_OK;
    mpi_link *l = ctx;
    int ranks = 1;
    CHECK_MPI(MPI_Comm_size(l->node_comm, &ranks));
    if (ranks == 1) return HVD_OK;
    MPI_Request req;
    CHECK_MPI(MPI_Iallgather(sums, (int)count, MPI_DOUBLE, l->gathered, (int)count, MPI_DOUBLE,
                             l->node_comm, &req));
    CHECK(hvdc__wait_requests(1, &req, l->watch));
    for (size_t k = 0; k < count; k++) {
        double s = l->gathered[k];
        for (int r = 1; r < ranks; r++) s += l->gathered[(size_t)r * count + k];
        sums[k] = s;
    }
fail:
    return st;
}

hvd_status hvdc__adasum_mpi_nodes(MPI_Comm comm, MPI_Comm node_comm, const int *node_peer,
                                  int node, int nodes, void *buf, const size_t *counts, size_t n,
                                  hvd_dtype dtype, hvdc_buffer *scratch, hvdc_liveness *watch) {
    hvd_status st = HVD_OK;
    int ranks = 1;
    CHECK_MPI(MPI_Comm_size(node_comm, &ranks));
    if (3 * n > (size_t)INT_MAX / (size_t)ranks)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "Adasum across nodes: %zu tensors in one "
                          "response are too many to sum their dot products over MPI", n);
    double *gathered = malloc((size_t)ranks * 3 * (n ? n : 1) * sizeof *gathered);
    if (!gathered) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for Adasum's dot products");
    mpi_link l = {comm, watch, node_peer, node_comm, gathered};
    hvdc_adasum_link link = {.rank = node, .size = nodes, .exchange = mpi_exchange, .ctx = &l,
                             .sum_node = mpi_sum_node};
    st = hvdc__adasum(&link, buf, counts, n, dtype, scratch);
    free(gathered);
fail:
    return st;
}
