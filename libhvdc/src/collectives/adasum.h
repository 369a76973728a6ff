/*
 * adasum.h - Adasum: the all-reduce that adds gradients where they are orthogonal and averages
 * them where they agree, with Horovod 0.28's pairing and arithmetic (horovod/common/ops/adasum/
 * adasum.h, FusedAllreduce and FusedPairwiseReduceWithComm), so results agree with Horovod's to
 * rounding.
 *
 * The pairwise combine of two vectors a and b (one tensor each, the WHOLE tensor):
 *
 *     a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b      (a coefficient is 1 when its
 *                                          norm^2 is below sqrt(DBL_MIN) = 1.49e-154)
 *
 * N ranks (N a power of 2) combine in a binary tree: the lower half of the ranks against the
 * upper half, recursively, so at N = 4 the result is combine(combine(x0, x1), combine(x2, x3)).
 * It runs as recursive vector-halving, distance-doubling (VHDD), N = 4, one K-element buffer:
 *
 *   level 1 (peer rank^1):  rank 0 [x0 | x0]  rank 1 [x1 | x1]   0 keeps the first half,
 *                                 keep  send        send  keep     1 the second; each combines
 *                                                                  its half with the peer's copy
 *   level 2 (peer rank^2):  rank 0 keeps the first quarter of the pair's vector, rank 2 the
 *                           second (rank 1 and 3 split the second half the same way)
 *   then the halves travel back in reverse order (level 2, then 1): every rank ends with all
 *   K elements.
 *
 * At level L a rank "left" of its peer (rank & L == 0) keeps the first floor(m/2) of its m
 * elements and the right one the rest. The combine needs each tensor's dot product and norms
 * over the whole tensor, but a rank holds only a slice: each rank computes them over its
 * slice of each tensor and the 2L ranks that hold the pair's two vectors sum them (a butterfly
 * over peers rank^1, rank^2 .. rank^L; addition is commutative, so all 2L get the same bits).
 * Fused tensors keep their own dot products: counts[] says where each tensor ends.
 *
 * Arithmetic, per Horovod's ComputeDotAndNormSqrds / ScaledAdd:
 *   float32: products and sums in double, in index order (so values near FLT_MIN or FLT_MAX
 *            neither underflow nor overflow); a' computed in double, rounded to float32 once.
 *   float64: all in double.
 *   float16, bfloat16: dot and norms in double, in four lanes (element i to lane i % 4, summed
 *            (l0 + l2) + (l1 + l3): Horovod's AVX code); a' = fmaf(bc, b, ac * a) in float32
 *            with the coefficients rounded to float32, then rounded to nearest-even.
 *            (Horovod has no bfloat16 Adasum; ours treats it like float16.)
 * Each element of the result is computed by exactly one rank and copied to the others, so
 * every rank gets the same bits.
 *
 * Cost, K bytes over N ranks: each rank sends and receives K(N-1)/N bytes in each of the two
 * phases (like a ring all-reduce), in 2 log2(N) messages, plus log2(N)(log2(N)+1)/2 small
 * exchanges of 24 bytes per tensor for the dot products.
 *
 * The algorithm talks to its peers only through hvdc_adasum_link (one exchange with one peer),
 * so it runs on MPI (hvdc__adasum_mpi) or on threads standing in for ranks (tests/unit).
 *
 * defines: hvdc_adasum_link, hvdc__adasum, hvdc__adasum_mpi, hvdc__adasum_scratch_bytes,
 *          hvdc__adasum_dots, hvdc__adasum_coefficient, hvdc__adasum_scaled_add,
 *          hvdc__adasum_is_power_of_2, HVDC_ADASUM_POW2_MESSAGE, HVDC_ADASUM_MIN_NORMSQ,
 *          hvdc__adasum_mpi_nodes
 * Background thread (and tests).
 */
#ifndef HVDC_ADASUM_H
#define HVDC_ADASUM_H

#include <mpi.h>
#include <stddef.h>

#include "base/buffer.h"
#include "base/liveness.h"
#include "hvdc.h"

/* Horovod's words (horovod/torch/mpi_ops.py), for the refusal of other sizes. */
/* Below this norm^2 a vector keeps coefficient 1: sqrt(DBL_MIN), Horovod's sqrt_double_min. */
#define HVDC_ADASUM_MIN_NORMSQ 1.4916681462400413e-154
#define HVDC_ADASUM_POW2_MESSAGE "Running Adasum with non-power of 2 ranks is not supported yet."

/* How a rank reaches its peers: sends send_bytes to peer and receives recv_bytes from it
 * (both may be 0), returning when both are done. */
typedef struct hvdc_adasum_link {
    int rank, size;
    hvd_status (*exchange)(void *ctx, int peer, const void *send, size_t send_bytes, void *recv,
                           size_t recv_bytes);
    void *ctx;
    /* NULL, or: each link rank is a node whose ranks each hold one slice of every tensor
     * (the device Adasum across nodes). Called after each level's butterfly: sums[count]
     * becomes the sum over the node's ranks, the same bits on each of them. */
    hvd_status (*sum_node)(void *ctx, double *sums, size_t count);
} hvdc_adasum_link;

int hvdc__adasum_is_power_of_2(int n);

/* Scratch hvdc__adasum reserves for total elements of dtype in n tensors. */
size_t hvdc__adasum_scratch_bytes(size_t total, size_t n, hvd_dtype dtype);

/* buf (sum of counts[n] elements, the tensors back to back) becomes the Adasum of every
 * rank's buf. dtype is float16, bfloat16, float32 or float64; link->size a power of 2 (else
 * HVD_ERR_UNSUPPORTED); every rank passes the same counts. One rank: buf is left as it is. */
hvd_status hvdc__adasum(const hvdc_adasum_link *link, void *buf, const size_t *counts, size_t n,
                        hvd_dtype dtype, hvdc_buffer *scratch);

/* hvdc__adasum over comm; every wait checks watch (a dead peer fails it, never hangs it). */
hvd_status hvdc__adasum_mpi(MPI_Comm comm, void *buf, const size_t *counts, size_t n,
                            hvd_dtype dtype, hvdc_buffer *scratch, hvdc_liveness *watch);

/* Adasum across nodes, Horovod's device Adasum between nodes: every node holds one vector
 * per tensor (its ranks' sum), cut into one slice per rank of the node; the ranks with the same
 * local rank run the VHDD over the nodes on their slices (node_peer[k] is the rank in comm of
 * this local rank on node k; node is this rank's node, nodes a power of 2), and each level's
 * dot products are summed over the node's ranks (node_comm) as well, so they are the whole
 * tensors'. counts are this rank's slice of each tensor (those of the same local rank on every
 * node are equal). */
hvd_status hvdc__adasum_mpi_nodes(MPI_Comm comm, MPI_Comm node_comm, const int *node_peer,
                                  int node, int nodes, void *buf, const size_t *counts, size_t n,
                                  hvd_dtype dtype, hvdc_buffer *scratch, hvdc_liveness *watch);

/* The pieces of the combine, exposed for tests. out = {a.b, |a|^2, |b|^2} over count
 * elements, with the arithmetic above. */
void hvdc__adasum_dots(const void *a, const void *b, size_t count, hvd_dtype dtype, double out[3]);

/* 1 - dot / normsq * 0.5, or 1 when normsq < HVDC_ADASUM_MIN_NORMSQ (Horovod's order of
 * operations). */
double hvdc__adasum_coefficient(double dot, double normsq);

/* a[i] = acoeff * a[i] + bcoeff * b[i], with the arithmetic above. */
void hvdc__adasum_scaled_add(void *a, double acoeff, const void *b, double bcoeff, size_t count,
                             hvd_dtype dtype);

#endif
