/*
 * init.c - hvd_init / hvd_init_comm / hvd_shutdown and the topology getters: starting MPI
 * (or adopting the application's), reading the configuration, creating the private
 * communicators, and starting and stopping the background thread; and the same for the
 * runtime of a process set (hvdc__runtime_start_child / _stop_child, used by process_sets.c,
 * which registers how hvd_shutdown stops the sets: hvdc__runtime_on_shutdown).
 * Runs on the thread that calls hvd_init and hvd_shutdown (getters: any thread).
 */
/* mpi.h before hvdc.h, so hvdc.h declares (and exports) hvd_init_comm */
#include <limits.h>
#include <errno.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/affinity.h"
#include "base/clock.h"
#include "base/device_abort.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/nodes.h"
#include "base/peers.h"
#include "base/status.h"
#include "runtime/agree.h"
#include "runtime/autotune.h"
#include "runtime/caller_path.h"
#include "runtime/complete.h"
#include "runtime/dump.h"
#include "runtime/horovod_env.h"
#include "runtime/report.h"
#include "runtime/runtime.h"
#include "runtime/watch.h"
#include "runtime/whereabouts.h"

hvdc_runtime *hvdc__runtime = NULL;

/* The gate: every public call that uses the runtime enters and leaves it, and hvd_shutdown
 * frees the runtime only once no call is inside (a thread blocked in hvd_wait included).
 * Entering and leaving take no lock (two of each a tensor, on hvd_allreduce_async and hvd_wait):
 * a call counts itself in, then looks whether the gate is open; hvd_shutdown closes the gate,
 * then waits for the count to reach zero. Both sides store before they load (sequentially
 * consistent atomics), so either the call sees the gate closed and backs out, or hvd_shutdown
 * sees the call and waits for it. The last call out of a closed gate wakes hvd_shutdown under
 * gate_mutex, which hvd_shutdown holds while it looks at the count, so the wake-up is never lost.
 * gate_open's store after hvdc__runtime's (in hvd_init) publishes the runtime to the calls. */
static pthread_mutex_t gate_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_idle = PTHREAD_COND_INITIALIZER;
static atomic_int calls_inside = 0;
static atomic_int gate_open = 0; /* hvdc__runtime is live and hvd_shutdown has not begun */

hvd_status hvdc__enter(const char *fn) {
    hvdc__clear_error();
    atomic_fetch_add(&calls_inside, 1);
    if (atomic_load(&gate_open)) return HVD_OK;
    hvdc__leave();
    return hvdc__fail(HVD_ERR_NOT_INITIALIZED,
                      "%s: libhvdc is not initialized (call hvd_init() first; after "
                      "hvd_shutdown() nothing may be called)", fn);
}

void hvdc__leave(void) {
    if (atomic_fetch_sub(&calls_inside, 1) == 1 && !atomic_load(&gate_open)) {
        pthread_mutex_lock(&gate_mutex);
        pthread_cond_broadcast(&gate_idle);
        pthread_mutex_unlock(&gate_mutex);
    }
}

static const char *env_lookup(const char *name, void *ctx) {
    (void)ctx;
    return getenv(name);
}

static const char *thread_level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
    }
}

/* Makes sure MPI runs with a thread level that allows a background thread. */
static hvd_status start_mpi(int *we_initialized) {
    hvd_status st = HVD_OK;
    int initialized = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    *we_initialized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return hvdc__fail(HVD_ERR_MPI, "MPI has already been finalized; libhvdc cannot start");
    MPI_Initialized(&initialized);
    if (!initialized) {
        CHECK_MPI(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided));
        *we_initialized = 1;
    } else {
        CHECK_MPI(MPI_Query_thread(&provided));
    }
    /* the background thread calls MPI while the application's threads may too */
    if (provided < MPI_THREAD_MULTIPLE) {
        st = hvdc__fail(HVD_ERR_MPI,
                        "MPI provides %s, but libhvdc's background thread calls MPI while the "
                        "application may, which needs MPI_THREAD_MULTIPLE; initialize MPI with "
                        "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let hvd_init do it",
                        thread_level_name(provided));
        goto fail;
    }
    return HVD_OK;
fail:
    if (*we_initialized) MPI_Finalize();
    *we_initialized = 0;
    return st;
}

/* A communicator of libhvdc's own over the same ranks as base. MPI errors on it come back as
 * codes we turn into statuses instead of aborting the job. */
static hvd_status private_comm(MPI_Comm base, MPI_Comm *out) {
    hvd_status st = HVD_OK;
    CHECK_MPI(MPI_Comm_dup(base, out));
    CHECK_MPI(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
fail:
    return st;
}

/* hvd_init_comm's communicator: refused if it cannot carry a job. An invalid handle raises its
 * error on MPI_COMM_WORLD's handler, fatal by default: while checking, errors return instead. */
static hvd_status check_user_comm(MPI_Comm comm) {
    if (comm == MPI_COMM_NULL)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_init_comm: the communicator is MPI_COMM_NULL; "
                          "pass the (intra)communicator of the ranks that train together");
    MPI_Errhandler previous;
    if (MPI_Comm_get_errhandler(MPI_COMM_WORLD, &previous) != MPI_SUCCESS)
        return hvdc__fail(HVD_ERR_MPI, "hvd_init_comm: MPI_Comm_get_errhandler failed");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int inter = 0, size = 0;
    int err = MPI_Comm_test_inter(comm, &inter);
    if (err == MPI_SUCCESS) err = MPI_Comm_size(comm, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, previous);
    MPI_Errhandler_free(&previous);
    if (err != MPI_SUCCESS)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_init_comm: the communicator is not a valid "
                          "MPI communicator (MPI_Comm_test_inter failed)");
    if (inter)
        return hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_init_comm: the communicator is an "
                          "intercommunicator; pass an intracommunicator");
    return HVD_OK;
}

/* Wakes the background thread from the SIGUSR1 watcher. */
static void wake_background(void *ctx) {
    hvdc_runtime *rt = ctx;
    pthread_mutex_lock(&rt->queue_mutex);
    pthread_cond_signal(&rt->queue_cond);
    pthread_mutex_unlock(&rt->queue_mutex);
}

/* HVD_HIERARCHICAL_ALLREDUCE: node and cross-node communicators, if every node runs the same
 * number of ranks (else the two levels would not line up: stay flat and say so). */
static hvd_status setup_hierarchical(hvdc_runtime *rt) {
    hvd_status st = HVD_OK;
    hvdc_executor *ex = &rt->executor;
    int sizes[2] = {rt->topo.local_size, -rt->topo.local_size};
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, ex->comm));
    if (sizes[0] != -sizes[1]) {
        if (rt->topo.rank == 0)
            HVDC_LOG(HVDC_LOG_WARNING, "HVD_HIERARCHICAL_ALLREDUCE=1 ignored: nodes run between %d "
                     "and %d ranks; the two-level all-reduce needs the same number on every node",
                     sizes[0], -sizes[1]);
        return HVD_OK;
    }
    CHECK(hvdc__split_node(ex->comm, &ex->local_comm));
    CHECK(hvdc__split_cross(ex->comm, rt->topo.local_rank, &ex->cross_comm));
    ex->hierarchical = 1;
fail:
    return st;
}

/* HVD_CPU_ALLREDUCE=auto|shm: the ranks of a node share one segment when they all run the same
 * all-reduce through it: every rank on one node, or the inside-node stage of the two-level
 * all-reduce. (Both conditions read the same on every rank.) */
static int wants_shm(const hvdc_runtime *rt) {
    int choice = rt->config.cpu_allreduce;
    if (choice != HVDC_CPU_ALLREDUCE_AUTO && choice != HVDC_CPU_ALLREDUCE_SHM) return 0;
    if (rt->topo.local_size < 2) return 0;
    return rt->topo.local_size == rt->topo.size || rt->executor.hierarchical;
}

static hvd_status setup_shm(hvdc_runtime *rt) {
    hvd_status st = HVD_OK;
    hvdc_executor *ex = &rt->executor;
    if (ex->local_comm == MPI_COMM_NULL) CHECK(hvdc__split_node(ex->comm, &ex->local_comm));
    CHECK(hvdc__shm_create(ex->local_comm, &ex->shm));
    hvdc__shm_set_step(ex->shm, rt->config.shm_step_bytes); /* HVD_SHM_STEP (at most the slot) */
fail:
    return st;
}

/* Warns once, on rank 0, when some rank may run on only one CPU: the background thread then
 * competes with the training loop for it (base/affinity.h). Collective over comm. */
static hvd_status warn_single_cpu(MPI_Comm comm, int rank) {
    hvd_status st = HVD_OK;
    int cpus = hvdc__cpus_allowed();
    int v[2] = {cpus > 0 ? cpus : INT_MAX, cpus == 1 ? rank : INT_MAX}; /* fewest CPUs, first rank with one */
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, comm));
    if (v[0] == 1 && rank == 0)
        HVDC_LOG(HVDC_LOG_WARNING, "rank %d (and maybe others) may run on only one CPU, so "
                 "libhvdc's background thread shares it with your training loop and "
                 "communication stops overlapping compute. Open MPI binds each rank to one core "
                 "by default at np <= 2, and with --bind-to core: start with --bind-to none (as "
                 "hvdcrun does), or give each rank two cores (--map-by slot:PE=2)", v[1]);
fail:
    return st;
}

/* Background waits may spin where the node has a CPU for every rank (base/poll.h): with more
 * ranks than CPUs, the rank a wait is for may need the waiter's core. Hand-offs between a
 * rank's two threads may spin where it has two per rank. Collective over comm. */
static hvd_status choose_poll(hvdc_runtime *rt) {
    int cpus = 0;
    hvd_status st = hvdc__node_cpus(rt->control_comm, &cpus);
    int known = st == HVD_OK;
    rt->poll.spin_ns = known && cpus >= rt->topo.local_size ? HVDC_SPIN_NS : 0;
    rt->poll.handoff_spin_ns = known && cpus >= 2 * rt->topo.local_size ? HVDC_SPIN_NS : 0;
    return st;
}

/* Where hand-offs spin (two CPUs per rank), the locks the application's threads share with the
 * background thread spin briefly before sleeping too (glibc's adaptive mutex): each side then
 * takes them from its own CPU, where sleeping on a held lock costs a system call and a wake-up
 * from idle. With a CPU per rank the holder may be waiting for the spinner's CPU: plain locks.
 * Before any other thread can touch them. */
static void choose_lock_kind(hvdc_runtime *rt) {
    if (rt->poll.handoff_spin_ns <= 0) return;
    pthread_mutexattr_t adaptive;
    pthread_mutexattr_init(&adaptive);
    pthread_mutexattr_settype(&adaptive, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_destroy(&rt->queue_mutex);
    pthread_mutex_init(&rt->queue_mutex, &adaptive);
    pthread_mutex_destroy(&rt->completion_mutex);
    pthread_mutex_init(&rt->completion_mutex, &adaptive);
    pthread_mutexattr_destroy(&adaptive);
}

/* The segment, agreed: every rank uses it or none does. Where it cannot be had, `auto` goes on
 * with the ring (and says so once); `shm`, asked for by name, fails hvd_init. */
static hvd_status agree_shm(hvdc_runtime *rt) {
    hvdc_executor *ex = &rt->executor;
    hvd_status st = hvdc__agree(rt->control_comm, setup_shm(rt));
    if (st == HVD_OK || rt->config.cpu_allreduce == HVDC_CPU_ALLREDUCE_SHM) return st;
    if (rt->topo.rank == 0)
        HVDC_LOG(HVDC_LOG_WARNING, "HVD_CPU_ALLREDUCE=auto: no shared-memory all-reduce (%s); "
                 "using the ring", hvd_last_error());
    hvdc__shm_destroy(ex->shm);
    ex->shm = NULL;
    hvdc__clear_error();
    return HVD_OK;
}

static const char *cpu_allreduce_name(const hvdc_runtime *rt) {
    if (rt->config.cpu_allreduce == HVDC_CPU_ALLREDUCE_MPI) return "mpi";
    return rt->executor.shm ? "shm" : "ring";
}

static void runtime_free(hvdc_runtime *rt) {
    if (!rt || rt->left_behind) return; /* its thread may still be inside MPI, using it */
    hvdc__watch_stop(rt->watch); /* says goodbye: this rank's silence is no loss */
    hvdc__report_destroy(rt->report);
    hvdc__peers_destroy(rt->peers);
    if (rt->sets_comm != MPI_COMM_NULL) MPI_Comm_free(&rt->sets_comm);
    if (rt->control_comm != MPI_COMM_NULL) MPI_Comm_free(&rt->control_comm);
    if (rt->autotune_log) fclose(rt->autotune_log);
    /* a thread that read a done event before its op completed may still be waiting on it */
    pthread_mutex_lock(&rt->completion_mutex);
    while (rt->device_waiters > 0) pthread_cond_wait(&rt->completion_cond, &rt->completion_mutex);
    pthread_mutex_unlock(&rt->completion_mutex);
    hvdc__executor_free(&rt->executor);
    hvdc__name_table_free(&rt->in_flight);
    hvdc__handles_free(&rt->handles);
    pthread_mutex_destroy(&rt->queue_mutex);
    pthread_cond_destroy(&rt->queue_cond);
    pthread_mutex_destroy(&rt->completion_mutex);
    pthread_cond_destroy(&rt->completion_cond);
    pthread_mutex_destroy(&rt->executor_token);
    hvdc__caller_path_free(rt);
    free(rt);
}

/* The watchdog's on_death: a rank died while the background thread was inside MPI_Allreduce.
 * Device work queued before may wait for that rank too, and its waiters sit in CUDA waits that
 * only aborting the NCCL communicators ends: the background thread, which would abort them, may
 * never leave the call. It cannot leave while this runs (watchdog.h), so the backend is this
 * thread's meanwhile. */
static void fail_all_ops(void *ctx, const char *why) {
    hvdc_runtime *rt = ctx;
    hvdc__gpu_abort(rt->executor.gpu, why); /* NULL-safe; every later device call fails */
    hvdc__fail_everything(rt, HVD_ERR_RANK_FAILED, why);
}

/* HVD_CPU_ALLREDUCE=mpi blocks in MPI_Allreduce: the watchdog checks liveness meanwhile. */
static hvd_status start_watchdog(hvdc_runtime *rt) {
    if (rt->executor.cpu_allreduce != HVDC_CPU_ALLREDUCE_MPI) return HVD_OK;
    return hvdc__watchdog_start(rt->executor.liveness, fail_all_ops, rt, &rt->executor.watchdog);
}

static void describe_rank(void *ctx, const char *indent, char *out, size_t len) {
    hvdc__whereabouts_write(ctx, indent, out, len);
}

/* Every rank's host and pid; the host watch (watch.h), which needs a peer to watch and is off
 * with HVD_HOST_TIMEOUT=0; HVD_REPORT's figures on rank 0 (after the collective steps: it can
 * fail on rank 0 alone). */
static hvd_status start_watch(hvdc_runtime *rt) {
    hvd_status st = hvdc__peers_create(rt->control_comm, &rt->peers);
    if (st == HVD_OK && rt->topo.size > 1 && rt->config.host_timeout_s > 0)
        st = hvdc__watch_start(rt->control_comm, rt->peers, rt->config.host_timeout_s,
                               describe_rank, rt, &rt->watch);
    if (st == HVD_OK && rt->config.report_s > 0 && rt->topo.rank == 0 &&
        !(rt->report = hvdc__report_create(rt->config.report_s, rt->topo.size, rt->peers)))
        st = hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for HVD_REPORT's figures");
    return st;
}

/* How long hvd_shutdown waits for a background thread that the watchdog gave up on. */
#define STUCK_JOIN_S 2

/* Joins the background thread. One that a rank's death left inside MPI_Allreduce may never
 * come back: after STUCK_JOIN_S it is left behind, detached, with its runtime (never freed). */
static void join_background(hvdc_runtime *rt) {
    if (!hvdc__watchdog_fired(rt->executor.watchdog)) {
        pthread_join(rt->thread, NULL);
        return;
    }
    struct timespec at = hvdc__deadline_in(STUCK_JOIN_S);
    if (pthread_timedjoin_np(rt->thread, NULL, &at) == 0) return;
    pthread_detach(rt->thread);
    rt->left_behind = 1;
    HVDC_LOG(HVDC_LOG_WARNING, "the background thread is still inside MPI_Allreduce with a peer "
             "that died or stopped; left behind (exit the process)");
}

/* Starts the background thread held at its gate (it touches no MPI until released), so a
 * start that fails on another rank can still be abandoned everywhere. */
static hvd_status start_thread(hvdc_runtime *rt) {
    if (hvdc__fault("background_thread") ||
        pthread_create(&rt->thread, NULL, hvdc__background_main, rt) != 0)
        return hvdc__fail(HVD_ERR_INTERNAL, "could not start the background thread");
    rt->thread_started = 1;
    return HVD_OK;
}

/* Opens the thread's gate: run (1) or abandon the start (-1). */
static void release_thread(hvdc_runtime *rt, int decision) {
    pthread_mutex_lock(&rt->queue_mutex);
    rt->start_decision = decision;
    pthread_cond_broadcast(&rt->queue_cond);
    pthread_mutex_unlock(&rt->queue_mutex);
}

/* The file rank 0 records into from hvd_init on, or NULL. HVD_TIMELINE=DYNAMIC is Horovod's
 * "record nothing until hvd_start_timeline", not a file named DYNAMIC. */
static const char *timeline_from_start(const hvdc_config *config) {
    return strcmp(config->timeline_path, "DYNAMIC") == 0 ? NULL : config->timeline_path;
}

/* HVD_AUTOTUNE_LOG on rank 0: created now, so a path that cannot be written fails hvd_init on
 * every rank instead of a log that silently never appears. */
static hvd_status open_autotune_log(hvdc_runtime *rt) {
    const char *path = rt->config.autotune_log;
    if (!rt->config.autotune || !path[0] || rt->topo.rank != 0) return HVD_OK;
    rt->autotune_log = fopen(path, "we");
    if (!rt->autotune_log || hvdc__autotune_write_header(rt->autotune_log) != 0)
        return hvdc__fail(HVD_ERR_CONFIG, "HVD_AUTOTUNE_LOG='%s': cannot write it: %s", path,
                          strerror(errno));
    return HVD_OK;
}

/* A runtime with its locks and tables set up and no communicator yet; NULL: out of memory. */
static hvdc_runtime *runtime_alloc(void) {
    hvdc_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return NULL;
    rt->control_comm = rt->sets_comm = MPI_COMM_NULL;
    atomic_init(&rt->rank_device, -1);
    hvdc__executor_init(&rt->executor, &rt->topo, &rt->rank_device);
    pthread_mutex_init(&rt->queue_mutex, NULL);
    pthread_cond_init(&rt->queue_cond, NULL);
    pthread_mutex_init(&rt->completion_mutex, NULL);
    pthread_cond_init(&rt->completion_cond, NULL);
    pthread_mutex_init(&rt->executor_token, NULL);
    rt->device_event_finished = hvdc__gpu_event_finished;
    rt->device_stream_wait = hvdc__gpu_stream_wait_on;
    hvdc__name_table_init(&rt->in_flight);
    hvdc__handles_init(&rt->handles);
    rt->fault_add_handle = hvdc__fault("add_handle"); /* read once, off the hot path */
    return rt;
}

/* HVD_THREAD_AFFINITY: the background thread on its local rank's CPU; a list Horovod would
 * ignore is ignored here too, with a warning. */
static void pin_background(hvdc_runtime *rt) {
    char why[256];
    if (rt->config.thread_affinity[0] &&
        hvdc__pin_thread(rt->thread, rt->config.thread_affinity, rt->topo.local_size,
                         rt->topo.local_rank, why, sizeof why) != 0)
        HVDC_LOG(HVDC_LOG_WARNING, "%s", why);
}

/* Every step that can fail on one rank alone is followed by hvdc__agree, so hvd_init fails on
 * every rank together, with the first failing rank's message, instead of leaving the others
 * waiting in their first collective. */
static hvd_status init_on(MPI_Comm comm, int adopt_mpi_only) {
    hvd_status st = HVD_OK;
    hvdc__clear_error();
    if (hvdc__runtime) return hvdc__fail(HVD_ERR_ALREADY_INITIALIZED, "hvd_init was already called; call hvd_shutdown first");
    hvdc_runtime *rt = runtime_alloc();
    if (!rt) return hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory starting libhvdc");
    hvdc__device_abort_reset(); /* a new start's device results owe nothing to an old abort */
    hvdc__liveness_forget_declared(); /* nor its waits to an old job's lost host */

    /* a malformed setting is reported once every rank can hear about it */
    char parse_message[HVDC_ERROR_MAX] = "";
    hvdc_notes notes; /* what rank 0 says of the Horovod variables it found */
    notes.n = 0;
    hvd_status parsed = hvdc__config_from_env(&rt->config, env_lookup, NULL, &notes);
    hvdc__horovod_unused_notes(env_lookup, NULL, &notes);
    if (parsed != HVD_OK) snprintf(parse_message, sizeof parse_message, "%s", hvd_last_error());
    if (adopt_mpi_only) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized) {
            st = hvdc__fail(HVD_ERR_MPI, "hvd_init_comm needs MPI initialized; call MPI_Init_thread first or use hvd_init");
            goto fail;
        }
        CHECK(check_user_comm(comm));
    }
    CHECK(start_mpi(&rt->we_initialized_mpi));
    CHECK(private_comm(comm, &rt->control_comm));
    CHECK(private_comm(comm, &rt->executor.comm));
    CHECK(private_comm(comm, &rt->sets_comm));

    if (parsed != HVD_OK) hvdc__fail(parsed, "%s", parse_message);
    CHECK(hvdc__agree(rt->control_comm, parsed));
    CHECK(hvdc__agree_settings(rt->control_comm, &rt->config));
    CHECK(hvdc__topology_detect(rt->control_comm, &rt->topo));
    hvdc__log_init((hvdc_log_level)rt->config.log_level, rt->topo.rank);
    hvdc__log_show_time(!rt->config.log_hide_time);
    for (int i = 0; rt->topo.rank == 0 && i < notes.n; i++)
        HVDC_LOG(HVDC_LOG_WARNING, "%s", notes.text[i]);
    CHECK(warn_single_cpu(rt->control_comm, rt->topo.rank));
    CHECK(hvdc__agree(rt->control_comm, choose_poll(rt)));
    choose_lock_kind(rt);
    hvdc__executor_configure(&rt->executor, &rt->config);
    /* HVD_CPU_ALLREDUCE=shm across nodes means the two-level all-reduce, shared memory inside */
    if (rt->config.hierarchical_allreduce ||
        (rt->config.cpu_allreduce == HVDC_CPU_ALLREDUCE_SHM && rt->topo.local_size != rt->topo.size))
        CHECK(hvdc__agree(rt->control_comm, setup_hierarchical(rt)));
    rt->executor.gpu_hierarchical = rt->executor.hierarchical && rt->config.hierarchical_allreduce;
    if (wants_shm(rt)) CHECK(agree_shm(rt));
    CHECK(hvdc__agree(rt->control_comm,
                      hvdc__liveness_create(rt->control_comm, &rt->executor.liveness)));
    hvdc__liveness_set_poll(rt->executor.liveness, &rt->poll);
    CHECK(hvdc__caller_path_start(rt));
    CHECK(hvdc__agree(rt->control_comm, start_watchdog(rt)));
    CHECK(hvdc__agree(rt->control_comm, start_watch(rt)));
    st = HVD_OK;
    if (rt->topo.rank == 0) /* recording from the start only with HVD_TIMELINE */
        st = hvdc__timeline_open(timeline_from_start(&rt->config), rt->topo.rank,
                                 rt->config.timeline_mark_cycles, &rt->executor.timeline);
    CHECK(hvdc__agree(rt->control_comm, st));
    CHECK(hvdc__agree(rt->control_comm, open_autotune_log(rt)));
    CHECK(hvdc__agree(rt->control_comm, start_thread(rt)));
    pin_background(rt);
    release_thread(rt, 1);
    char step[48] = "";
    if (rt->executor.shm)
        snprintf(step, sizeof step, ", shared-memory step %zu bytes", hvdc__shm_step(rt->executor.shm));
    HVDC_LOG(HVDC_LOG_INFO, "started: size %d, local %d/%d, cross %d/%d, fusion threshold %zu bytes, cycle %.3g ms, cpu allreduce %s%s%s, background waits %s, hand-offs %s",
             rt->topo.size, rt->topo.local_rank, rt->topo.local_size, rt->topo.cross_rank,
             rt->topo.cross_size, rt->config.fusion_threshold_bytes, rt->config.cycle_time_ms,
             cpu_allreduce_name(rt),
             rt->executor.hierarchical ? " (hierarchical)" : "", step,
             rt->poll.spin_ns ? "spin while the application waits"
                             : "yield (ranks outnumber the CPUs, or the CPUs are unknown)",
             rt->poll.handoff_spin_ns ? "spin before sleeping (two CPUs per rank)"
                                      : "sleep at once (fewer than two CPUs per rank, or unknown)");
    if (rt->config.sigusr1_dump) hvdc__dump_install(&rt->dump_requested, wake_background, rt);
    pthread_mutex_lock(&gate_mutex);
    hvdc__runtime = rt;
    atomic_store(&gate_open, 1);
    pthread_mutex_unlock(&gate_mutex);
    return HVD_OK;
fail: {
    /* every rank agreed to fail (or MPI itself failed): abandon the held thread, free, and
     * finalize MPI if we started it, which is collective but reached by every rank alike */
    if (rt->thread_started) {
        release_thread(rt, -1);
        pthread_join(rt->thread, NULL);
    }
    int we_initialized = rt->we_initialized_mpi;
    char message[HVDC_ERROR_MAX];
    snprintf(message, sizeof message, "%s", hvd_last_error());
    runtime_free(rt);
    if (we_initialized) MPI_Finalize();
    return hvdc__fail(st, "%s", message);
}
}

hvd_status hvd_init(void) { return init_on(MPI_COMM_WORLD, 0); }

/* A process set's runtime (process_sets.c): the parent's settings without the timeline, the
 * state dump or the hierarchical all-reduce (so across nodes a set runs the ring, and inside
 * one node the shared-memory all-reduce on a segment of its own); the rest as init_on, on comm (collective over
 * the set's members, who agree on the outcome). */
hvd_status hvdc__runtime_start_child(const hvdc_runtime *parent, MPI_Comm comm,
                                     hvdc_runtime **out) {
    hvd_status st = HVD_OK;
    *out = NULL;
    hvdc_runtime *rt = runtime_alloc();
    CHECK(hvdc__agree(comm, rt ? HVD_OK : hvdc__fail(HVD_ERR_NO_MEMORY, "out of memory for a process set")));
    rt->executor.rank_device = parent->executor.rank_device; /* one device per rank */
    rt->config = parent->config;
    rt->config.hierarchical_allreduce = 0;
    rt->config.timeline_path[0] = '\0';
    CHECK(private_comm(comm, &rt->control_comm));
    CHECK(private_comm(comm, &rt->executor.comm));
    CHECK(hvdc__topology_detect(rt->control_comm, &rt->topo));
    hvdc__executor_configure(&rt->executor, &rt->config);
    if (wants_shm(rt)) CHECK(agree_shm(rt)); /* a set inside one node: its own segment */
    CHECK(hvdc__agree(rt->control_comm,
                      hvdc__liveness_create(rt->control_comm, &rt->executor.liveness)));
    rt->poll.spin_ns = parent->poll.spin_ns; /* the node's ranks are the parent's */
    rt->poll.handoff_spin_ns = parent->poll.handoff_spin_ns;
    choose_lock_kind(rt);
    hvdc__liveness_set_poll(rt->executor.liveness, &rt->poll);
    CHECK(hvdc__agree(rt->control_comm, start_watchdog(rt)));
    CHECK(hvdc__agree(rt->control_comm, start_thread(rt)));
    pin_background(rt);
    release_thread(rt, 1);
    *out = rt;
    return HVD_OK;
fail:
    if (rt && rt->thread_started) {
        release_thread(rt, -1);
        pthread_join(rt->thread, NULL);
    }
    runtime_free(rt);
    return st;
}

void hvdc__runtime_stop_child(hvdc_runtime *rt) {
    if (!rt) return;
    pthread_mutex_lock(&rt->queue_mutex);
    rt->shutdown_requested = 1;
    pthread_cond_signal(&rt->queue_cond);
    pthread_mutex_unlock(&rt->queue_mutex);
    join_background(rt); /* its last round completes every op it still had */
}

void hvdc__runtime_free_child(hvdc_runtime *rt) { runtime_free(rt); }

/* A hook, not a call to process_sets.c: that file starts children here, so init.c calling it
 * would close a circle (tests/layout/check_cycles.py). Called inside the gate. */
void hvdc__runtime_on_shutdown(void (*stop)(void)) {
    pthread_mutex_lock(&gate_mutex);
    hvdc__runtime->stop_process_sets = stop;
    pthread_mutex_unlock(&gate_mutex);
}

hvd_status hvd_init_comm(MPI_Comm comm) { return init_on(comm, 1); }

int hvd_is_initialized(void) { return atomic_load(&gate_open); }

hvd_status hvd_shutdown(void) {
    hvdc__clear_error();
    pthread_mutex_lock(&gate_mutex);
    hvdc_runtime *rt = atomic_load(&gate_open) ? hvdc__runtime : NULL;
    if (rt) atomic_store(&gate_open, 0); /* no call enters from now on */
    void (*stop_process_sets)(void) = rt ? rt->stop_process_sets : NULL;
    pthread_mutex_unlock(&gate_mutex);
    if (!rt) return hvdc__fail(HVD_ERR_NOT_INITIALIZED, "hvd_shutdown: libhvdc is not initialized (hvd_init was not called, or hvd_shutdown was called already)");
    if (stop_process_sets) stop_process_sets(); /* each set's members stop its thread together */
    pthread_mutex_lock(&rt->queue_mutex);
    rt->shutdown_requested = 1;
    pthread_cond_signal(&rt->queue_cond);
    pthread_mutex_unlock(&rt->queue_mutex);
    /* the background thread completes every op before it exits, which wakes every waiter */
    join_background(rt);
    hvdc__dump_uninstall();
    pthread_mutex_lock(&gate_mutex);
    while (atomic_load(&calls_inside) > 0) pthread_cond_wait(&gate_idle, &gate_mutex);
    hvdc__runtime = NULL;
    pthread_mutex_unlock(&gate_mutex);
    int we_initialized = rt->we_initialized_mpi;
    /* finalizing waits for every process, which a dead rank never answers: leave MPI as is;
     * so do the others after this rank told them it stopped (they count it as dead), and after
     * a stall stopped the job (the stalled rank may never get to finalizing) */
    hvd_status stop_status;
    char stop_message[sizeof rt->stop_message];
    int told;
    hvdc__stop_reason(rt, &stop_status, stop_message, sizeof stop_message, &told);
    int peer_died = stop_status == HVD_ERR_RANK_FAILED;
    int stalled = stop_status == HVD_ERR_STALLED;
    runtime_free(rt);
    if (we_initialized && !peer_died && !told && !stalled) MPI_Finalize();
    if (stalled)
        return hvdc__fail(HVD_ERR_STALLED, "hvd_shutdown: the job stopped on a stall (%s)%s",
                          stop_message, we_initialized ? "; MPI was not finalized, as the stalled "
                          "rank may never get there: exit the process with a non-zero status" : "");
    if (peer_died)
        return hvdc__fail(HVD_ERR_RANK_FAILED, "hvd_shutdown: a rank died or stopped (%s), so MPI "
                          "was not finalized; exit the process with a non-zero status",
                          stop_message);
    if (told)
        return hvdc__fail(stop_status, "hvd_shutdown: libhvdc stopped on this rank (%s) and the other "
                          "ranks stopped with it, so MPI was not finalized; exit the process with a "
                          "non-zero status", stop_message);
    return HVD_OK;
}

hvd_status hvdc__negotiation_stats(uint64_t *rounds, uint64_t *bytes_sent, uint64_t *bytes_received) {
    hvd_status st = hvdc__enter("hvdc__negotiation_stats");
    if (st != HVD_OK) return st;
    *rounds = atomic_load(&hvdc__runtime->stat_rounds);
    *bytes_sent = atomic_load(&hvdc__runtime->stat_bytes_sent);
    *bytes_received = atomic_load(&hvdc__runtime->stat_bytes_received);
    hvdc__leave();
    return HVD_OK;
}

hvd_status hvd_report_get(hvd_report *out) {
    hvd_status st = hvdc__enter("hvd_report_get");
    if (st != HVD_OK) return st;
    if (out) hvdc__report_copy(hvdc__runtime->report, out);
    else st = hvdc__fail(HVD_ERR_INVALID_ARG, "hvd_report_get: out is NULL");
    hvdc__leave();
    return st;
}

static hvd_status topology_value(const char *what, int *out, size_t offset) {
    hvd_status st = hvdc__enter(what);
    if (st != HVD_OK) return st;
    if (out) *out = *(const int *)((const char *)&hvdc__runtime->topo + offset);
    else st = hvdc__fail(HVD_ERR_INVALID_ARG, "%s: the output pointer is NULL", what);
    hvdc__leave();
    return st;
}

hvd_status hvd_rank(int *v) { return topology_value("hvd_rank", v, offsetof(hvdc_topology, rank)); }
hvd_status hvd_size(int *v) { return topology_value("hvd_size", v, offsetof(hvdc_topology, size)); }
hvd_status hvd_local_rank(int *v) { return topology_value("hvd_local_rank", v, offsetof(hvdc_topology, local_rank)); }
hvd_status hvd_local_size(int *v) { return topology_value("hvd_local_size", v, offsetof(hvdc_topology, local_size)); }
hvd_status hvd_cross_rank(int *v) { return topology_value("hvd_cross_rank", v, offsetof(hvdc_topology, cross_rank)); }
hvd_status hvd_cross_size(int *v) { return topology_value("hvd_cross_size", v, offsetof(hvdc_topology, cross_size)); }

#define HVDC_STRINGIFY_(x) #x
#define HVDC_STRINGIFY(x) HVDC_STRINGIFY_(x)
const char *hvd_version(void) {
    return HVDC_STRINGIFY(HVD_VERSION_MAJOR) "." HVDC_STRINGIFY(HVD_VERSION_MINOR) "."
        HVDC_STRINGIFY(HVD_VERSION_PATCH);
}
