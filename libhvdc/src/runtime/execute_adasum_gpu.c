/*
 * execute_adasum_gpu.c - the Adasum all-reduce of device tensors across nodes, as Horovod
 * 0.28's AdasumGpuAllreduceOp::NcclHierarchical does it:
 *
 *   device (gpu.h, to_host)   pack (times prescale), zero padding, NCCL reduce-scatter inside
 *                             the node: local rank l holds shard l of the node's sum; to host
 *   host (here)               wait for it; the VHDD between nodes among the ranks with this
 *                             local rank, each level's dot products summed over the node's ranks
 *                             too, so they are the whole tensors' (collectives/adasum.h)
 *   device (gpu.h, from_host) to device, NCCL all-gather inside the node, unpack (times
 *                             postscale, which the caller divided by the ranks per node)
 *
 * So the result is Adasum over nodes of each node's sum, divided by its ranks: Adasum of the
 * nodes' averages. The host waits for the device here, once per response (Horovod does too);
 * the wait checks liveness, so a dead rank fails it instead of hanging it.
 *
 * Nodes are numbered by their lowest rank, so every local rank pairs the same nodes; Horovod's
 * conditions hold or every rank refuses the response before any data moved: the same number of
 * ranks on every node, and a power of 2 of nodes.
 * Background thread.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/fault.h"
#include "base/nodes.h"
#include "base/poll.h"
#include "base/status.h"
#include "collectives/adasum.h"
#include "gpu/gpu.h"
#include "runtime/execute.h"
#include "runtime/working_memory.h"

/* Where each node is, agreed once by every rank. */
typedef struct hvdc_adasum_nodes {
    MPI_Comm node_comm; /* this node's ranks */
    int *peer;          /* (count) rank in ex->comm of this local rank on node k */
    int node, count;    /* this rank's node, and how many */
    hvd_status refused; /* HVD_OK, or why every rank refuses (message in why) */
    char why[200];
} hvdc_adasum_nodes;

void hvdc__adasum_nodes_free(hvdc_adasum_nodes *nodes) {
    if (!nodes) return;
    if (nodes->node_comm != MPI_COMM_NULL) MPI_Comm_free(&nodes->node_comm);
    free(nodes->peer);
    free(nodes);
}

/* From every rank's {lowest rank on its node, local rank, ranks on its node}: the node numbers,
 * this rank's peers, and whether Horovod's conditions hold. The same table on every rank, so
 * the same verdict. leader: room for size ints. */
static void number_nodes(hvdc_adasum_nodes *nodes, const int *all, int *leader, int size, int rank) {
    int count = 0, uneven = 0;
    for (int r = 0; r < size; r++) { /* leaders appear in increasing order: r is one if all[3r] == r */
        if (all[3 * r] == r) leader[count++] = r;
        uneven |= all[3 * r + 2] != all[2];
    }
    int node_of_me = 0;
    for (int k = 0; k < count; k++) {
        if (leader[k] == all[3 * rank]) node_of_me = k;
        nodes->peer[k] = -1;
        for (int r = 0; r < size; r++)
            if (all[3 * r] == leader[k] && all[3 * r + 1] == all[3 * rank + 1]) nodes->peer[k] = r;
        uneven |= nodes->peer[k] < 0;
    }
    nodes->node = node_of_me;
    nodes->count = count;
    /* Horovod's words (horovod/torch/mpi_ops.py, _allreduce_async) */
    if (uneven) {
        nodes->refused = HVD_ERR_UNSUPPORTED;
        snprintf(nodes->why, sizeof nodes->why, "Running GPU Adasum on heterogeneous cluster is "
                 "not supported yet. (nodes run different numbers of ranks)");
    } else if (!hvdc__adasum_is_power_of_2(count)) {
        nodes->refused = HVD_ERR_UNSUPPORTED;
        snprintf(nodes->why, sizeof nodes->why, "Running GPU Adasum with non-power of 2 nodes "
                 "is not supported yet. (%d nodes)", count);
    }
}

/* ex->adasum_nodes, made by the first response that needs it (collective over ex->comm). The
 * memory comes first and every rank agrees it has it: a rank without it fails the response on
 * every rank alone (the next one tries again) instead of leaving the others in the gather. */
static hvdc_outcome ensure_nodes(hvdc_executor *ex) {
    hvd_status st = HVD_OK;
    if (ex->adasum_nodes) return hvdc__ran(HVD_OK);
    size_t size = (size_t)ex->topo->size;
    hvdc_adasum_nodes *nodes = calloc(1, sizeof *nodes);
    if (nodes) nodes->node_comm = MPI_COMM_NULL;
    int *all = malloc(3 * size * sizeof *all), *leader = malloc(size * sizeof *leader);
    int ok = nodes && all && leader && (nodes->peer = malloc(size * sizeof *nodes->peer)) != NULL &&
             !hvdc__fault("adasum_nodes"); /* tests: this rank lacks the memory */
    MPI_Request req;
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, ex->comm, &req));
    CHECK(hvdc__wait_requests(1, &req, ex->liveness));
    if (!ok) {
        free(all);
        free(leader);
        hvdc__adasum_nodes_free(nodes);
        return hvdc__refused(hvdc__fail(HVD_ERR_NO_MEMORY, "a device Adasum across nodes: a rank "
                                        "ran out of memory numbering the nodes (%zu ranks)", size));
    }
    CHECK(hvdc__split_node(ex->comm, &nodes->node_comm));
    int mine[3] = {ex->topo->rank, 0, 0};
    CHECK_MPI(MPI_Comm_rank(nodes->node_comm, &mine[1]));
    CHECK_MPI(MPI_Comm_size(nodes->node_comm, &mine[2]));
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &mine[0], 1, MPI_INT, MPI_MIN, nodes->node_comm, &req));
    CHECK(hvdc__wait_requests(1, &req, ex->liveness));
    CHECK_MPI(MPI_Iallgather(mine, 3, MPI_INT, all, 3, MPI_INT, ex->comm, &req));
    CHECK(hvdc__wait_requests(1, &req, ex->liveness));
    number_nodes(nodes, all, leader, ex->topo->size, ex->topo->rank);
    free(all);
    free(leader);
    ex->adasum_nodes = nodes;
    return hvdc__ran(HVD_OK);
fail:
    free(all);
    free(leader);
    hvdc__adasum_nodes_free(nodes);
    return hvdc__ran(st);
}

/* The host waits for the device's half, watching the other ranks meanwhile. */
static hvd_status wait_device(hvdc_executor *ex, hvdc_gpu_pending *pending) {
    hvdc_poll poll = hvdc__poll_begin(hvdc__liveness_poll_policy(ex->liveness));
    for (;;) {
        int done = 0;
        hvd_status st = hvdc__gpu_pending_poll(pending, &done);
        if (st != HVD_OK || done) return st;
        st = hvdc__liveness_check(ex->liveness);
        if (st != HVD_OK) return st;
        hvdc__poll_pause(&poll);
    }
}

/* The device Adasum's data path, once the backend, the node communicator and the nodes' table
 * are set up: the device half to host, the VHDD between nodes, the device half back. */
static hvdc_outcome adasum_gpu_data(hvdc_executor *ex, hvdc_op **ops, size_t n_ops, void *ready,
                                    hvdc_gpu_pending **pending) {
    hvd_status st = HVD_OK;
    hvdc_outcome out;
    hvdc_adasum_nodes *nodes = ex->adasum_nodes;
    hvdc_gpu_pending *staged = NULL;
    hvdc_gpu_tensor *tensors = NULL;
    size_t *counts = NULL, *offsets = NULL, *entries = NULL, n = 0;
    const hvdc_wire_request *d = &ops[0]->desc;
    hvd_dtype dtype = (hvd_dtype)d->dtype;
    for (size_t i = 0; i < n_ops; i++) n += ops[i]->n_tensors;
    tensors = malloc(n * sizeof *tensors);
    counts = malloc(n * sizeof *counts);
    offsets = malloc(n * sizeof *offsets);
    entries = malloc(2 * n * sizeof *entries);
    if (!tensors || !counts || !offsets || !entries) {
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory planning an Adasum of %zu tensors", n);
        goto fail;
    }
    n = 0;
    for (size_t i = 0; i < n_ops; i++)
        for (size_t k = 0; k < ops[i]->n_tensors; k++) {
            const hvdc_tensor *t = &ops[i]->tensors[k];
            counts[n] = t->count;
            tensors[n++] = (hvdc_gpu_tensor){t->send, t->recv, t->count};
        }
    hvdc_shard_plan shards;
    CHECK(hvdc__gpu_adasum_layout(counts, n, hvd_dtype_size(dtype), (size_t)ex->topo->local_size,
                                  (size_t)ex->topo->local_rank, offsets, entries, &shards));
    out = hvdc__reserve_agreed(ex, "allreduce", ops[0]->tensors[0].name, 0,
                               hvdc__adasum_scratch_bytes(shards.shard, 2 * n, dtype));
    if (out.status != HVD_OK) goto done;
    void *host = NULL;
    CHECK(hvdc__gpu_adasum_to_host(ex->gpu, tensors, n, offsets, shards.shard, dtype, d->prescale,
                                   ready, &host, &staged));
    CHECK(wait_device(ex, staged));
    CHECK(hvdc__adasum_mpi_nodes(ex->comm, nodes->node_comm, nodes->peer, nodes->node,
                                 nodes->count, host, entries, 2 * n, dtype, &ex->scratch,
                                 ex->liveness));
    /* Horovod divides by the ranks per node (mpi_ops.py): Adasum of the nodes' averages */
    CHECK(hvdc__gpu_adasum_from_host(ex->gpu, tensors, n, offsets, shards.shard, dtype,
                                     d->postscale / ex->topo->local_size, pending));
fail:
    out = hvdc__ran(st);
done:
    hvdc__gpu_pending_free(staged);
    free(tensors);
    free(counts);
    free(offsets);
    free(entries);
    return out;
}

hvdc_outcome hvdc__execute_adasum_gpu(hvdc_executor *ex, const hvdc_wire_response *response,
                                      hvdc_op **ops, size_t n_ops, hvdc_gpu_pending **pending) {
    *pending = NULL;
    hvdc_outcome out = ensure_nodes(ex);
    if (out.status != HVD_OK) return out;
    hvdc_adasum_nodes *nodes = ex->adasum_nodes;
    if (nodes->refused != HVD_OK) /* every rank read the same table */
        return hvdc__refused(hvdc__fail(nodes->refused, "allreduce '%s': %s", response->names[0],
                                        nodes->why));
    void *ready = NULL;
    out = hvdc__execute_gpu_prepare(ex, ops, n_ops, &ready);
    if (out.status != HVD_OK) return out;
    out = hvdc__execute_gpu_node_comm(ex);
    if (out.status != HVD_OK) return out;
    return adasum_gpu_data(ex, ops, n_ops, ready, pending);
}
