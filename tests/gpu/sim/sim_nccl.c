/*
 * sim_nccl.c - NCCL on the simulated device (see sim.h): each NCCL communicator is an MPI
 * communicator of the same ranks, and each collective is an item on its stream whose thread
 * moves the bytes with nonblocking MPI and reduces them in rank order.
 *
 *   ncclGetUniqueId      the creating process's world rank and a serial number
 *   ncclCommInitRank     members tell the creator their world ranks (MPI_COMM_WORLD, a tag of
 *                        the serial's), it answers the table, all make the group's communicator
 *                        (MPI_Comm_create_group: collective over the members alone)
 *   ncclAllReduce & co   checked at the call (communicator, stream's device, buffers inside
 *                        device allocations of the communicator's device, dtype, op); queued
 *                        on the stream, or, between ncclGroupStart/End, gathered and queued
 *                        together at the End: one item per stream posts every operation of
 *                        the group before waiting for any (sends and receives pair up)
 *   on the stream        read the inputs, post MPI_Iallgather / Ibcast / Isend / Irecv into
 *                        buffers of its own, wait (MPI_Testall, pausing up to 100 us) until
 *                        done or the communicator is aborted, then fold and write the outputs;
 *                        those buffers and the stream's MPI calls are out of TSan's sight
 *                        (sim_unseen.c says why)
 *
 * Reductions: every rank's input is gathered and folded in rank order (sim_reduce.c), each
 * step rounded to the dtype; ncclAvg is that sum divided by the ranks. As NCCL does on one
 * node, a collective whose peer never comes waits without end (no timeout, no asynchronous
 * error): only ncclCommAbort ends it. As NCCL across nodes, with HVDC_SIM_REMOTE_ERRORS=1 a
 * collective whose peer's process is gone reports ncclRemoteError (and still waits until
 * aborted). As NCCL's, ncclCommAbort returns once the communicator's collectives have
 * stopped: none of them calls MPI after it (the caller may then call MPI_Finalize). An aborted collective leaves its
 * outputs as they were, and its buffers and MPI communicator to MPI (kept reachable, never
 * freed: freeing a communicator that has requests that never end, or that peers' aborted
 * collectives still send to, let Open MPI destroy its matching lock while another thread's
 * MPI call held it, or match a message on it after).
 * HVDC_SIM_ABORT_LAG_MS makes each aborted collective linger that long before it stops, as a
 * kernel that notices the abort late does: ncclCommAbort then waits that long.
 * HVDC_SIM_NCCL_ERROR (sim.h) fails one launch as a broken connection would: an asynchronous
 * ncclRemoteError, and a launch that sends nothing and waits for the abort.
 * Any thread (the collectives run on the streams' threads).
 */
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "sim.h"

#define COMM_MAGIC 0x4e43434cU /* "NCCL" */
#define ID_MAGIC "hvdcsim"
#define INIT_TAG_BASE 27000    /* + serial % 4096: inside every MPI's tag range (>= 32767) */
#define MAX_PAUSE_NS 100000L

struct ncclComm {
    atomic_uint magic;
    MPI_Comm comm;
    int rank, size, device;
    atomic_int aborted;
    atomic_int async_error; /* an ncclResult_t: an MPI failure on a stream */
    atomic_int refs;        /* the owner (until destroy/abort) and each queued operation */
    atomic_int in_mpi;      /* launches between their first and last MPI call on it */
    atomic_int abandoned;   /* aborted: never MPI_Comm_free it (requests left, messages due) */
    pid_t *pids;            /* (size) the members' processes, for HVDC_SIM_REMOTE_ERRORS */
};

typedef struct sim_id {
    char magic[8];
    int creator; /* world rank */
    uint32_t serial;
} sim_id;

typedef enum { ALLREDUCE, BROADCAST, ALLGATHER, REDUCESCATTER, SEND, RECV } coll_kind;

typedef struct coll {
    coll_kind kind;
    const void *send;
    void *recv;
    size_t count;        /* NCCL's count: per rank for allgather/reducescatter */
    size_t elem;
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int peer;            /* broadcast root, send/recv peer */
    ncclComm_t comm;     /* held */
    cudaStream_t stream;
    void *out, *in;      /* the item's own buffers: what MPI writes, what it reads */
    MPI_Request request;
} coll;

typedef struct launch {
    coll *ops;
    size_t n;
} launch;

static _Thread_local char last_error[512];
static _Thread_local struct {
    int depth;
    coll *ops;
    size_t n, cap;
} group;
static atomic_uint serials;
static atomic_long launches; /* run so far in this process: HVDC_SIM_NCCL_ERROR counts them */

/* Buffers of abandoned collectives, which MPI may still write: kept reachable, never freed. */
static pthread_mutex_t abandoned_mu = PTHREAD_MUTEX_INITIALIZER;
static coll **abandoned;
static size_t n_abandoned;

static ncclResult_t fail(ncclResult_t res, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return res;
}

/* Often on a stream thread, so unseen (sim.h). An abandoned communicator's MPI communicator
 * is never freed: peers' messages for it may still arrive, and Open MPI would free it under a
 * thread matching them. Open MPI's own table of communicators keeps it reachable. */
static void comm_release(ncclComm_t comm) {
    if (atomic_fetch_sub(&comm->refs, 1) != 1) return;
    if (!atomic_load(&comm->abandoned)) {
        sim_unseen_begin();
        MPI_Comm_free(&comm->comm);
        sim_unseen_end();
    }
    free(comm->pids);
    free(comm);
}

/* ---- versions, errors, communicators ------------------------------------------------------ */

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return last_error;
}

static int comm_valid(ncclComm_t comm) {
    return comm && atomic_load(&comm->magic) == COMM_MAGIC && !atomic_load(&comm->aborted);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *unique_id) {
    int initialized = 0, world = 0;
    if (!unique_id) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    MPI_Initialized(&initialized);
    if (!initialized) return fail(ncclSystemError, "the simulated NCCL needs MPI initialized");
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    sim_id id = {ID_MAGIC, world, atomic_fetch_add(&serials, 1)};
    memset(unique_id, 0, sizeof *unique_id);
    memcpy(unique_id->internal, &id, sizeof id);
    return ncclSuccess;
}

/* The world ranks and process ids of the members, in their NCCL rank order (world_of: 2 *
 * nranks, the pids after the ranks), agreed through the creator. The messages travel in
 * buffers of the simulator's (sim.h). */
static ncclResult_t exchange_members(const sim_id *id, int nranks, int rank, int *world_of) {
    int me = 0, tag = INIT_TAG_BASE + (int)(id->serial % 4096), member[3];
    size_t table_bytes = 2 * (size_t)nranks * sizeof *world_of;
    int *wire_member = sim_mpi_buffer(sizeof member), *wire_table = sim_mpi_buffer(table_bytes);
    ncclResult_t res = ncclSuccess;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (!wire_member || !wire_table) {
        res = fail(ncclSystemError, "ncclCommInitRank: out of memory");
    } else if (me != id->creator) {
        member[0] = rank, member[1] = me, member[2] = (int)getpid();
        sim_mpi_fill(wire_member, member, sizeof member);
        if (MPI_Send(wire_member, 3, MPI_INT, id->creator, tag, MPI_COMM_WORLD) != MPI_SUCCESS ||
            MPI_Recv(wire_table, 2 * nranks, MPI_INT, id->creator, tag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            res = fail(ncclSystemError, "ncclCommInitRank: no answer from the id's creator");
        else
            sim_mpi_drain(world_of, wire_table, table_bytes);
    } else {
        for (int i = 0; i < nranks; i++) world_of[i] = -1;
        world_of[rank] = me;
        world_of[nranks + rank] = (int)getpid();
        for (int i = 1; i < nranks && res == ncclSuccess; i++) {
            if (MPI_Recv(wire_member, 3, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                res = fail(ncclSystemError, "ncclCommInitRank: a member's message failed");
                break;
            }
            sim_mpi_drain(member, wire_member, sizeof member);
            if (member[0] < 0 || member[0] >= nranks || world_of[member[0]] != -1)
                res = fail(ncclInvalidUsage, "ncclCommInitRank: rank %d claimed twice", member[0]);
            else
                world_of[member[0]] = member[1], world_of[nranks + member[0]] = member[2];
        }
        if (res == ncclSuccess) sim_mpi_fill(wire_table, world_of, table_bytes);
        for (int r = 0; r < nranks && res == ncclSuccess; r++)
            if (world_of[r] != me &&
                MPI_Send(wire_table, 2 * nranks, MPI_INT, world_of[r], tag, MPI_COMM_WORLD) != MPI_SUCCESS)
                res = fail(ncclSystemError, "ncclCommInitRank: cannot answer rank %d", r);
    }
    sim_mpi_buffer_free(wire_member);
    sim_mpi_buffer_free(wire_table);
    return res;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId unique_id, int rank) {
    sim_id id;
    memcpy(&id, unique_id.internal, sizeof id);
    if (!out) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *out = NULL;
    if (memcmp(id.magic, ID_MAGIC, sizeof id.magic) != 0)
        return fail(ncclInvalidArgument, "ncclCommInitRank: not a unique id of ncclGetUniqueId");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    int *world_of = malloc(2 * (size_t)nranks * sizeof *world_of);
    ncclComm_t comm = calloc(1, sizeof *comm);
    MPI_Group world_group = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
    ncclResult_t res = ncclSystemError;
    if (!world_of || !comm || !(comm->pids = malloc((size_t)nranks * sizeof *comm->pids))) {
        res = fail(ncclSystemError, "ncclCommInitRank: out of memory");
        goto done;
    }
    if ((res = exchange_members(&id, nranks, rank, world_of)) != ncclSuccess) goto done;
    res = ncclSystemError;
    if (MPI_Comm_group(MPI_COMM_WORLD, &world_group) != MPI_SUCCESS ||
        MPI_Group_incl(world_group, nranks, world_of, &members) != MPI_SUCCESS ||
        MPI_Comm_create_group(MPI_COMM_WORLD, members, INIT_TAG_BASE + (int)(id.serial % 4096),
                              &comm->comm) != MPI_SUCCESS) {
        fail(res, "ncclCommInitRank: the members' MPI communicator could not be made");
        goto done;
    }
    MPI_Comm_set_errhandler(comm->comm, MPI_ERRORS_RETURN);
    for (int r = 0; r < nranks; r++) comm->pids[r] = (pid_t)world_of[nranks + r];
    comm->rank = rank;
    comm->size = nranks;
    comm->device = sim_current_device();
    atomic_store(&comm->refs, 1);
    atomic_store(&comm->magic, COMM_MAGIC);
    *out = comm;
    comm = NULL;
    res = ncclSuccess;
done:
    if (members != MPI_GROUP_NULL) MPI_Group_free(&members);
    if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
    free(world_of);
    if (comm) free(comm->pids);
    free(comm);
    return res;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm || atomic_load(&comm->magic) != COMM_MAGIC)
        return fail(ncclInvalidArgument, "ncclCommDestroy: not a live communicator");
    atomic_store(&comm->magic, 0);
    comm_release(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (atomic_load(&comm->magic) != COMM_MAGIC)
        return fail(ncclInvalidArgument, "ncclCommAbort: not a live communicator");
    atomic_store(&comm->aborted, 1); /* collectives waiting on its streams give up */
    atomic_store(&comm->abandoned, 1); /* peers' messages for it may still arrive */
    while (atomic_load(&comm->in_mpi) > 0) { /* each sees it within MAX_PAUSE_NS (+ lag) */
        struct timespec t = {0, 20000};
        nanosleep(&t, NULL);
    }
    atomic_store(&comm->magic, 0);
    comm_release(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
    if (!comm_valid(comm) || !async_error)
        return fail(ncclInvalidArgument, "ncclCommGetAsyncError: not a live communicator");
    *async_error = (ncclResult_t)atomic_load(&comm->async_error);
    return ncclSuccess;
}

/* ---- running a launch on its stream --------------------------------------------------------- */

/* out[0..n) = op over ranks of gathered[r][first .. first + n) (each rank's block `stride`
 * elements long), folded in rank order. `gathered` is MPI's buffer: read unseen (sim.h). */
static void reduce_gathered(void *out, const char *gathered, size_t first, size_t n,
                            size_t stride, const coll *c) {
    int ranks = c->comm->size;
    sim_unseen_begin();
    memcpy(out, gathered + first * c->elem, n * c->elem);
    for (int r = 1; r < ranks; r++)
        sim_fold(out, gathered + ((size_t)r * stride + first) * c->elem, n, c->dtype, c->op);
    if (c->op == ncclAvg) sim_divide(out, n, c->dtype, ranks);
    sim_unseen_end();
    sim_seen_write(out, n * c->elem);
}

/* Reads c's inputs into buffers of its own and posts its messages on them; the MPI call
 * unseen, as every MPI call of a stream thread (sim.h). */
static int post(coll *c) {
    MPI_Comm mc = c->comm->comm;
    int ranks = c->comm->size, rc = MPI_SUCCESS;
    size_t bytes = c->count * c->elem;
    size_t mine = c->kind == REDUCESCATTER ? bytes * (size_t)ranks : bytes; /* gathered */
    switch (c->kind) {
    case ALLREDUCE:
    case ALLGATHER:
    case REDUCESCATTER:
        c->in = sim_mpi_buffer(mine);
        c->out = sim_mpi_buffer(mine * (size_t)ranks);
        if (!c->in || !c->out) return MPI_ERR_NO_MEM;
        sim_mpi_fill(c->in, c->send, mine);
        break;
    case BROADCAST:
        c->out = sim_mpi_buffer(bytes);
        if (!c->out) return MPI_ERR_NO_MEM;
        if (c->comm->rank == c->peer) sim_mpi_fill(c->out, c->send, bytes);
        break;
    case SEND:
        c->in = sim_mpi_buffer(bytes);
        if (!c->in) return MPI_ERR_NO_MEM;
        sim_mpi_fill(c->in, c->send, bytes);
        break;
    case RECV:
        c->out = sim_mpi_buffer(bytes);
        if (!c->out) return MPI_ERR_NO_MEM;
        break;
    }
    sim_unseen_begin();
    switch (c->kind) {
    case ALLREDUCE:
    case ALLGATHER:
    case REDUCESCATTER:
        rc = MPI_Iallgather(c->in, (int)mine, MPI_BYTE, c->out, (int)mine, MPI_BYTE, mc, &c->request);
        break;
    case BROADCAST: rc = MPI_Ibcast(c->out, (int)bytes, MPI_BYTE, c->peer, mc, &c->request); break;
    case SEND: rc = MPI_Isend(c->in, (int)bytes, MPI_BYTE, c->peer, 1, mc, &c->request); break;
    case RECV: rc = MPI_Irecv(c->out, (int)bytes, MPI_BYTE, c->peer, 1, mc, &c->request); break;
    }
    sim_unseen_end();
    return rc;
}

/* Writes c's outputs from what arrived. */
static void finish(coll *c) {
    size_t bytes = c->count * c->elem;
    switch (c->kind) {
    case ALLREDUCE: reduce_gathered(c->recv, c->out, 0, c->count, c->count, c); break;
    case REDUCESCATTER:
        reduce_gathered(c->recv, c->out, (size_t)c->comm->rank * c->count, c->count,
                        c->count * (size_t)c->comm->size, c);
        break;
    case ALLGATHER: sim_mpi_drain(c->recv, c->out, bytes * (size_t)c->comm->size); break;
    case BROADCAST:
    case RECV: sim_mpi_drain(c->recv, c->out, bytes); break;
    case SEND: break;
    }
}

static int any_aborted(const launch *l) {
    for (size_t i = 0; i < l->n; i++)
        if (atomic_load(&l->ops[i].comm->aborted)) return 1;
    return 0;
}

/* HVDC_SIM_REMOTE_ERRORS: once a member of one of the launch's communicators is gone (its
 * process reaped), NCCL's proxy would see the connection close: ncclRemoteError on them. */
static void notice_dead_peer(const launch *l) {
    for (size_t i = 0; i < l->n; i++) {
        ncclComm_t comm = l->ops[i].comm;
        for (int r = 0; r < comm->size; r++) {
            if (r == comm->rank || atomic_load(&comm->async_error) != ncclSuccess) continue;
            if (kill(comm->pids[r], 0) != 0 && errno == ESRCH) {
                fprintf(stderr, "[sim rank %d] HVDC_SIM_REMOTE_ERRORS: NCCL rank %d's process "
                        "is gone: ncclRemoteError\n", sim_config()->rank, r);
                atomic_store(&comm->async_error, ncclRemoteError);
            }
        }
    }
}

/* Until every request is done (1), or a communicator was aborted (0). */
static int wait_all(const launch *l, MPI_Request *requests, int *mpi_error) {
    long pause = 1000;
    for (;;) {
        int flag = 0;
        sim_unseen_begin();
        *mpi_error = MPI_Testall((int)l->n, requests, &flag, MPI_STATUSES_IGNORE);
        sim_unseen_end();
        if (*mpi_error != MPI_SUCCESS) return 0;
        if (flag) return 1;
        if (any_aborted(l)) return 0;
        if (sim_config()->remote_errors) notice_dead_peer(l);
        struct timespec t = {0, pause};
        nanosleep(&t, NULL);
        pause = pause * 2 > MAX_PAUSE_NS ? MAX_PAUSE_NS : pause * 2;
    }
}

static void keep_abandoned(coll *ops) {
    pthread_mutex_lock(&abandoned_mu);
    coll **grown = realloc(abandoned, (n_abandoned + 1) * sizeof *grown);
    if (grown) {
        abandoned = grown;
        abandoned[n_abandoned++] = ops;
    }
    pthread_mutex_unlock(&abandoned_mu);
}

/* HVDC_SIM_NCCL_ERROR's launch: reports the error on its communicators as NCCL's proxy
 * would, sends nothing, and stays on the stream until a communicator is aborted. */
static void break_connection(const launch *l) {
    fprintf(stderr, "[sim rank %d] HVDC_SIM_NCCL_ERROR: NCCL launch %ld fails with an "
            "asynchronous ncclRemoteError\n", sim_config()->rank, sim_config()->nccl_error_at);
    for (size_t i = 0; i < l->n; i++)
        atomic_store(&l->ops[i].comm->async_error, ncclRemoteError);
    while (!any_aborted(l)) {
        struct timespec t = {0, MAX_PAUSE_NS};
        nanosleep(&t, NULL);
    }
}

/* The launch's MPI calls lie between these: an abort of any of its communicators waits
 * until it left (entered first, then the abort checked: one of the two sees the other). */
static void enter_mpi(const launch *l) {
    for (size_t i = 0; i < l->n; i++) atomic_fetch_add(&l->ops[i].comm->in_mpi, 1);
}

static void leave_mpi(const launch *l) {
    for (size_t i = 0; i < l->n; i++) atomic_fetch_sub(&l->ops[i].comm->in_mpi, 1);
}

/* HVDC_SIM_ABORT_LAG_MS: an abandoned collective (aborted, or failed in MPI) lingers, still
 * inside the window an abort waits out. */
static void abandon_lag(void) {
    long ms = sim_config()->abort_lag_ms;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    if (ms > 0) nanosleep(&t, NULL);
}

static void run_launch(void *args) {
    launch l;
    memcpy(&l, args, sizeof l);
    MPI_Request *requests = calloc(l.n, sizeof *requests);
    int mpi_error = MPI_SUCCESS, posted = 0, ok = 0;
    long failing = sim_config()->nccl_error_at;
    if (failing > 0 && atomic_fetch_add(&launches, 1) + 1 == failing) {
        break_connection(&l);
    } else if (requests) {
        enter_mpi(&l);
        for (; posted < (int)l.n && !any_aborted(&l); posted++) {
            l.ops[posted].request = MPI_REQUEST_NULL;
            if ((mpi_error = post(&l.ops[posted])) != MPI_SUCCESS) break;
            requests[posted] = l.ops[posted].request;
        }
        for (int i = posted; i < (int)l.n; i++) requests[i] = MPI_REQUEST_NULL;
        ok = posted == (int)l.n && wait_all(&l, requests, &mpi_error);
        if (!ok && mpi_error != MPI_SUCCESS) { /* a failure NCCL would report asynchronously */
            for (size_t i = 0; i < l.n; i++)
                atomic_store(&l.ops[i].comm->async_error, ncclSystemError);
            char text[MPI_MAX_ERROR_STRING] = "";
            int len = 0;
            MPI_Error_string(mpi_error, text, &len);
            fprintf(stderr, "[sim] an NCCL collective failed in MPI: %s\n", text);
        }
        if (!ok && posted > 0) { /* requests left behind: MPI may still write and match */
            /* ncclCommAbort marks its own; a failure in MPI may come with no abort */
            for (size_t i = 0; i < l.n; i++) atomic_store(&l.ops[i].comm->abandoned, 1);
            abandon_lag();
        }
        leave_mpi(&l);
    }
    if (ok)
        for (size_t i = 0; i < l.n; i++) finish(&l.ops[i]);
    if (!ok && posted > 0) { /* MPI may still write them: never freed */
        keep_abandoned(l.ops);
    } else {
        for (size_t i = 0; i < l.n; i++)
            sim_mpi_buffer_free(l.ops[i].in), sim_mpi_buffer_free(l.ops[i].out);
    }
    for (size_t i = 0; i < l.n; i++) comm_release(l.ops[i].comm);
    if (ok || posted == 0) free(l.ops);
    free(requests);
}

/* ---- calls -------------------------------------------------------------------------------- */

/* Whether [p, p + bytes) is memory of comm's device. */
static int on_device(ncclComm_t comm, const void *p, size_t bytes) {
    int device = -1;
    if (bytes == 0) return 1;
    return sim_memory_find(p, &device) == SIM_MEM_DEVICE && device == comm->device &&
           sim_device_range(p, bytes);
}

/* Queues ops[n] (owned from here) on their streams: one launch per stream, each holding that
 * stream's operations in call order. */
static ncclResult_t queue(coll *ops, size_t n) {
    ncclResult_t res = ncclSuccess;
    size_t left = n; /* ops[0 .. left) are not queued yet, in call order */
    while (left > 0) {
        cudaStream_t stream = ops[0].stream;
        coll *mine = calloc(left, sizeof *mine);
        size_t k = 0, rest = 0;
        if (!mine) {
            for (size_t i = 0; i < left; i++) comm_release(ops[i].comm);
            res = fail(ncclSystemError, "out of memory queueing a collective");
            break;
        }
        for (size_t i = 0; i < left; i++) {
            if (ops[i].stream == stream) mine[k++] = ops[i];
            else ops[rest++] = ops[i];
        }
        left = rest;
        launch l = {mine, k};
        if (sim_enqueue(stream, run_launch, &l, sizeof l) != cudaSuccess) {
            for (size_t i = 0; i < k; i++) comm_release(mine[i].comm);
            free(mine);
            res = fail(ncclUnhandledCudaError, "a collective could not be queued on its stream");
        }
    }
    free(ops);
    return res;
}

/* Checks one call and queues it, or adds it to the open group. */
static ncclResult_t call(coll c, const char *fn, size_t send_bytes, size_t recv_bytes) {
    if (!comm_valid(c.comm)) return fail(ncclInvalidArgument, "%s: not a live communicator", fn);
    c.elem = sim_dtype_size(c.dtype);
    if (c.elem == 0) return fail(ncclInvalidArgument, "%s: datatype %d", fn, (int)c.dtype);
    if ((int)c.op < 0 || c.op >= ncclNumOps) return fail(ncclInvalidArgument, "%s: op %d", fn, (int)c.op);
    if (c.count > (size_t)INT32_MAX / c.elem / (size_t)c.comm->size)
        return fail(ncclInvalidArgument, "%s: the simulated NCCL moves at most 2 GiB per call", fn);
    send_bytes *= c.count * c.elem;
    recv_bytes *= c.count * c.elem;
    struct CUstream_st *s = sim_stream_of(c.stream);
    if (!s) return fail(ncclInvalidArgument, "%s: not a live CUDA stream", fn);
    if (sim_stream_device(s) != c.comm->device)
        return fail(ncclInvalidArgument, "%s: a stream of device %d for a communicator of device %d",
                    fn, sim_stream_device(s), c.comm->device);
    if (!on_device(c.comm, c.send, send_bytes) || !on_device(c.comm, c.recv, recv_bytes))
        return fail(ncclInvalidArgument, "%s: a buffer is not %zu/%zu bytes of device %d's memory",
                    fn, send_bytes, recv_bytes, c.comm->device);
    if ((c.kind == BROADCAST || c.kind == SEND || c.kind == RECV) &&
        (c.peer < 0 || c.peer >= c.comm->size))
        return fail(ncclInvalidArgument, "%s: rank %d of %d", fn, c.peer, c.comm->size);
    if (c.count == 0) return ncclSuccess; /* NCCL does nothing, on no rank */
    atomic_fetch_add(&c.comm->refs, 1);
    if (group.n == group.cap) {
        size_t cap = group.cap ? 2 * group.cap : 16;
        coll *grown = realloc(group.ops, cap * sizeof *grown);
        if (!grown) {
            comm_release(c.comm);
            return fail(ncclSystemError, "%s: out of memory", fn);
        }
        group.ops = grown;
        group.cap = cap;
    }
    group.ops[group.n++] = c;
    return group.depth > 0 ? ncclSuccess : ncclGroupEnd();
}

ncclResult_t ncclGroupStart(void) {
    group.depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group.depth > 0) group.depth--;
    if (group.depth > 0 || group.n == 0) return ncclSuccess;
    coll *ops = group.ops;
    size_t n = group.n;
    group.ops = NULL;
    group.n = group.cap = 0;
    return queue(ops, n);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    coll c = {.kind = ALLREDUCE, .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .op = op, .comm = comm, .stream = stream};
    return call(c, "ncclAllReduce", 1, 1);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    coll c = {.kind = BROADCAST, .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .peer = root, .comm = comm, .stream = stream};
    int is_root = comm_valid(comm) && comm->rank == root; /* others' sendbuff is not read */
    return call(c, "ncclBroadcast", (size_t)is_root, 1);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    coll c = {.kind = ALLGATHER, .send = sendbuff, .recv = recvbuff, .count = sendcount,
              .dtype = datatype, .comm = comm, .stream = stream};
    return call(c, "ncclAllGather", 1, comm_valid(comm) ? (size_t)comm->size : 1);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
    coll c = {.kind = REDUCESCATTER, .send = sendbuff, .recv = recvbuff, .count = recvcount,
              .dtype = datatype, .op = op, .comm = comm, .stream = stream};
    return call(c, "ncclReduceScatter", comm_valid(comm) ? (size_t)comm->size : 1, 1);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    coll c = {.kind = SEND, .send = sendbuff, .count = count, .dtype = datatype, .peer = peer,
              .comm = comm, .stream = stream};
    return call(c, "ncclSend", 1, 0);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    coll c = {.kind = RECV, .recv = recvbuff, .count = count, .dtype = datatype, .peer = peer,
              .comm = comm, .stream = stream};
    return call(c, "ncclRecv", 0, 1);
}
