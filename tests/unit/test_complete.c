/*
 * Unit test: how device ops complete (runtime/complete.h) on a fake device, so the logic runs
 * on machines without a GPU, under ASan (every op freed once, by its last holder) and TSan.
 * A fake done event fires when the test says so; the runtime is built by hand (its locks,
 * handle table and names in flight: all complete.c touches). Cases:
 *   - the waiter completes its op from the event before the background thread does; the
 *     background's later completion (even with an error) changes nothing, and frees the op
 *   - the background completes first (an error): the waiter returns it
 *   - the event fires after an abort: the waiter does not trust it, the background's error wins
 *   - a name resubmitted right after a waiter completed is not dropped by the late completion
 *   - hvd_wait_on_stream's part: the stream waits for the event (never the host), the name is
 *     free the moment it returns, before the event fired, and the late completion leaves the
 *     name's next op alone; a stream that cannot wait leaves the handle live and the name held
 *   - a fused response: the first waiter completes all of its ops, but one whose wait failed
 *   - two waiters on one op: one waits on the device, the other for it; polling
 *   - 2000 rounds of a background thread racing a waiter
 *   - the hand-off spin (base/poll.h): a waiter that spins first is answered whether the
 *     completion comes within its spin or long after it has gone to sleep; the race again with
 *     the spin on
 *   - a stop fails every op in flight once, grouped ones too, without allocating; its reason
 *     is read by another thread while it is written (TSan)
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "check.h"
#include "runtime/complete.h"

typedef struct fake_event {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int fired;
    int waits; /* calls that could block (block = 1) */
} fake_event;

static void event_init(fake_event *e) {
    memset(e, 0, sizeof *e);
    pthread_mutex_init(&e->mutex, NULL);
    pthread_cond_init(&e->cond, NULL);
}

static void event_destroy(fake_event *e) {
    pthread_mutex_destroy(&e->mutex);
    pthread_cond_destroy(&e->cond);
}

static void event_fire(fake_event *e) {
    pthread_mutex_lock(&e->mutex);
    e->fired = 1;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mutex);
}

/* hvdc__gpu_event_finished's contract, on the fake event. */
static int fake_finished(void *event, const atomic_int *aborted, int block) {
    fake_event *e = event;
    pthread_mutex_lock(&e->mutex);
    if (block) e->waits++;
    while (block && !e->fired) pthread_cond_wait(&e->cond, &e->mutex);
    int fired = e->fired;
    pthread_mutex_unlock(&e->mutex);
    return fired && !(aborted && atomic_load(aborted));
}

/* hvdc__gpu_stream_wait_on's contract: records which event the stream waits for. */
static void *stream_waited_for;
static hvd_status fake_stream_wait(void *stream, void *event) {
    if (stream == (void *)0xbad) return hvdc__fail(HVD_ERR_CUDA, "not a stream");
    stream_waited_for = event;
    return HVD_OK;
}

static hvdc_runtime *runtime_new(void) {
    hvdc_runtime *rt = calloc(1, sizeof *rt);
    pthread_mutex_init(&rt->queue_mutex, NULL);
    pthread_mutex_init(&rt->completion_mutex, NULL);
    pthread_cond_init(&rt->completion_cond, NULL);
    hvdc__name_table_init(&rt->in_flight);
    hvdc__handles_init(&rt->handles);
    rt->device_event_finished = fake_finished;
    rt->device_stream_wait = fake_stream_wait;
    return rt;
}

static void runtime_delete(hvdc_runtime *rt) {
    CHECK_TRUE(rt->device_waiters == 0, "%d waiters left", rt->device_waiters);
    hvdc__name_table_free(&rt->in_flight);
    hvdc__handles_free(&rt->handles);
    pthread_mutex_destroy(&rt->queue_mutex);
    pthread_mutex_destroy(&rt->completion_mutex);
    pthread_cond_destroy(&rt->completion_cond);
    free(rt);
}

/* What submission does: an op named name in flight, with a handle. */
static hvdc_op *submit(hvdc_runtime *rt, const char *name, hvd_handle *handle) {
    hvdc_op *op = hvdc__op_create(1);
    op->tensors[0].name = name;
    op->tensors[0].name_hash = hvdc__name_hash(name); /* as hvdc__submit takes it */
    pthread_mutex_lock(&rt->queue_mutex);
    hvdc__name_table_put_hashed(&rt->in_flight, name, op->tensors[0].name_hash, op);
    pthread_mutex_unlock(&rt->queue_mutex);
    pthread_mutex_lock(&rt->completion_mutex);
    *handle = hvdc__handles_add(&rt->handles, op);
    pthread_mutex_unlock(&rt->completion_mutex);
    return op;
}

static hvdc_op *in_flight(hvdc_runtime *rt, const char *name) {
    pthread_mutex_lock(&rt->queue_mutex);
    hvdc_op *op = hvdc__name_table_get(&rt->in_flight, name);
    pthread_mutex_unlock(&rt->queue_mutex);
    return op;
}

/* hvd_wait's part: the op's status (and message), the handle released. */
typedef struct waiter {
    hvdc_runtime *rt;
    hvd_handle handle;
    int release;       /* 0: only wait (several waiters on one handle) */
    hvd_status status;
    char error[64];
    int returned;
} waiter;

static void *wait_thread(void *arg) {
    waiter *w = arg;
    pthread_mutex_lock(&w->rt->completion_mutex);
    hvdc_op *op = hvdc__wait_for_op(w->rt, w->handle);
    w->status = op ? op->status : HVD_ERR_INVALID_ARG;
    snprintf(w->error, sizeof w->error, "%s", op && op->error ? op->error : "");
    if (op && w->release) {
        hvdc__handles_remove(&w->rt->handles, w->handle);
        hvdc__release_op(w->rt, op);
    }
    w->returned = 1;
    pthread_mutex_unlock(&w->rt->completion_mutex);
    return NULL;
}

static int returned(waiter *w) {
    pthread_mutex_lock(&w->rt->completion_mutex);
    int r = w->returned;
    pthread_mutex_unlock(&w->rt->completion_mutex);
    return r;
}

static void pause_ms(int ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

static void test_waiter_first(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h;
    hvdc_op *op = submit(rt, "a", &h);
    hvdc__publish_on_device(rt, &op, 1, &e);
    waiter w = {rt, h, 1, HVD_OK, "", 0};
    pthread_t t;
    pthread_create(&t, NULL, wait_thread, &w);
    pause_ms(20);
    CHECK_TRUE(!returned(&w), "the waiter returned before the event fired");
    event_fire(&e);
    pthread_join(t, NULL);
    CHECK_TRUE(w.status == HVD_OK, "waiter got %s", hvd_status_string(w.status));
    CHECK_TRUE(in_flight(rt, "a") == NULL, "the name stays in flight after the waiter completed");
    CHECK_TRUE(e.waits == 1, "%d device waits", e.waits);
    /* the background thread only now sees the work finish, with an error: too late to matter;
     * the op was released but is still held by the device work, so it is alive here */
    hvdc__complete_ops(rt, &op, 1, HVD_ERR_NCCL, "late");
    CHECK_TRUE(op->status == HVD_OK && op->error == NULL, "the late completion changed the op");
    CHECK_TRUE(op->released && op->on_device, "released %d on_device %d", op->released, op->on_device);
    hvdc__drop_device_hold(rt, &op, 1); /* frees it (ASan: exactly once) */
    event_destroy(&e);
    runtime_delete(rt);
}

static void test_background_first(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h;
    hvdc_op *op = submit(rt, "b", &h);
    hvdc__publish_on_device(rt, &op, 1, &e);
    hvdc__complete_ops(rt, &op, 1, HVD_ERR_NCCL, "boom");
    hvdc__drop_device_hold(rt, &op, 1); /* not freed: the handle still holds it */
    waiter w = {rt, h, 1, HVD_OK, "", 0};
    wait_thread(&w); /* returns at once: done, no device wait */
    CHECK_TRUE(w.status == HVD_ERR_NCCL && strcmp(w.error, "boom") == 0, "waiter got %s '%s'",
               hvd_status_string(w.status), w.error);
    CHECK_TRUE(e.waits == 0, "%d device waits on a completed op", e.waits);
    event_destroy(&e);
    runtime_delete(rt);
}

/* A fused response's ops share one done event: the first waiter that sees it fire completes
 * them all (their names free at once), so the others' waits find them done without asking the
 * device; an event published again, for newer work, is asked again. */
static void test_fused_waiters(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h[3];
    hvdc_op *ops[3];
    ops[0] = submit(rt, "f0", &h[0]);
    ops[1] = submit(rt, "f1", &h[1]);
    hvdc__publish_on_device(rt, ops, 2, &e);
    event_fire(&e);
    for (int i = 0; i < 2; i++) {
        waiter w = {rt, h[i], 1, HVD_OK, "", 0};
        wait_thread(&w);
        CHECK_TRUE(w.status == HVD_OK, "fused op %d: %s", i, hvd_status_string(w.status));
        if (i == 0)
            CHECK_TRUE(ops[1]->done && in_flight(rt, "f1") == NULL, "the first waiter that saw "
                       "the fused response's event left its other op %s",
                       ops[1]->done ? "with its name in flight" : "not done");
    }
    CHECK_TRUE(e.waits == 1, "%d device waits for one fused response (expected 1)", e.waits);
    CHECK_TRUE(in_flight(rt, "f0") == NULL && in_flight(rt, "f1") == NULL,
               "a fused op's name stays in flight after its waiter completed it");
    CHECK_TRUE(ops[1]->phase_at[HVDC_PHASE_WAKE] != 0, "the second op's wake-up was not timed");
    hvdc__drop_device_hold(rt, ops, 2); /* frees both */
    /* the same (pooled) event recorded again for a newer op: its waiter asks the device */
    ops[2] = submit(rt, "f2", &h[2]);
    hvdc__publish_on_device(rt, &ops[2], 1, &e);
    waiter w = {rt, h[2], 1, HVD_OK, "", 0};
    wait_thread(&w);
    CHECK_TRUE(e.waits == 2, "a re-published event was trusted without asking the device "
               "(%d device waits, expected 2)", e.waits);
    hvdc__drop_device_hold(rt, &ops[2], 1);
    event_destroy(&e);
    runtime_delete(rt);
}

/* A fused op whose waiter's device wait failed has let go of the event (complete.c): the
 * waiter that then sees the event fire completes the rest of the batch, not that op, which
 * the background thread completes with its error. */
static void test_fused_let_go(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h[2];
    hvdc_op *ops[2];
    ops[0] = submit(rt, "g0", &h[0]);
    ops[1] = submit(rt, "g1", &h[1]);
    hvdc__publish_on_device(rt, ops, 2, &e);
    pthread_mutex_lock(&rt->completion_mutex);
    ops[1]->device_done = NULL; /* what a failed blocking wait leaves */
    pthread_mutex_unlock(&rt->completion_mutex);
    event_fire(&e);
    waiter w = {rt, h[0], 1, HVD_OK, "", 0};
    wait_thread(&w);
    CHECK_TRUE(w.status == HVD_OK, "fused op: %s", hvd_status_string(w.status));
    CHECK_TRUE(!ops[1]->done && in_flight(rt, "g1") == ops[1], "an op whose wait failed was "
               "completed as the batch's (%s)", ops[1]->done ? "done" : "its name freed");
    hvdc__complete_ops(rt, &ops[1], 1, HVD_ERR_CUDA, "the wait failed");
    waiter w1 = {rt, h[1], 1, HVD_OK, "", 0};
    wait_thread(&w1);
    CHECK_TRUE(w1.status == HVD_ERR_CUDA, "the background's error was lost: %s",
               hvd_status_string(w1.status));
    hvdc__drop_device_hold(rt, ops, 2); /* frees both */
    event_destroy(&e);
    runtime_delete(rt);
}

static void test_aborted(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h;
    hvdc_op *op = submit(rt, "c", &h);
    hvdc__publish_on_device(rt, &op, 1, &e);
    waiter w = {rt, h, 1, HVD_OK, "", 0};
    pthread_t t;
    pthread_create(&t, NULL, wait_thread, &w);
    pause_ms(10);
    atomic_store(&rt->device_aborted, 1); /* the abort makes the kernels exit: the event fires */
    event_fire(&e);
    pause_ms(20);
    CHECK_TRUE(!returned(&w), "the waiter trusted an event that fired after an abort");
    hvdc__complete_ops(rt, &op, 1, HVD_ERR_NCCL, "aborted");
    pthread_join(t, NULL);
    CHECK_TRUE(w.status == HVD_ERR_NCCL && strcmp(w.error, "aborted") == 0, "waiter got %s '%s'",
               hvd_status_string(w.status), w.error);
    hvdc__drop_device_hold(rt, &op, 1);
    event_destroy(&e);
    runtime_delete(rt);
}

static void test_name_reused(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h1, h2;
    hvdc_op *first = submit(rt, "d", &h1);
    hvdc__publish_on_device(rt, &first, 1, &e);
    event_fire(&e);
    waiter w = {rt, h1, 1, HVD_OK, "", 0};
    wait_thread(&w);
    CHECK_TRUE(w.status == HVD_OK, "waiter got %s", hvd_status_string(w.status));
    hvdc_op *second = submit(rt, "d", &h2); /* the next step's tensor, same name */
    hvdc__complete_ops(rt, &first, 1, HVD_OK, NULL);
    hvdc__drop_device_hold(rt, &first, 1);
    CHECK_TRUE(in_flight(rt, "d") == second, "the late completion dropped the new op's name");
    hvdc__complete_ops(rt, &second, 1, HVD_ERR_SHUTDOWN, "end");
    CHECK_TRUE(in_flight(rt, "d") == NULL, "the name stays in flight");
    event_destroy(&e);
    runtime_delete(rt); /* frees the second op with the handle table */
}

/* hvd_wait_on_stream's part (submit.c): look up, stream-wait, release. */
static hvd_status stream_waiter(hvdc_runtime *rt, hvd_handle h, void *stream) {
    hvd_status waited = HVD_OK;
    pthread_mutex_lock(&rt->completion_mutex);
    hvdc_op *op = hvdc__stream_wait_for_op(rt, h, stream, &waited);
    if (op && waited == HVD_OK) {
        hvdc__handles_remove(&rt->handles, h);
        hvdc__release_op(rt, op);
    }
    pthread_mutex_unlock(&rt->completion_mutex);
    return op ? waited : HVD_ERR_INVALID_ARG;
}

static void test_stream_wait_frees_name(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h1, h2, h3;
    hvdc_op *first = submit(rt, "s", &h1);
    hvdc__publish_on_device(rt, &first, 1, &e);
    /* a stream that cannot wait: the handle stays live, the name held */
    CHECK_TRUE(stream_waiter(rt, h1, (void *)0xbad) == HVD_ERR_CUDA, "a bad stream was accepted");
    CHECK_TRUE(in_flight(rt, "s") == first, "a failed stream wait freed the name");
    /* the event has not fired: the stream waits on the device, the host does not */
    CHECK_TRUE(stream_waiter(rt, h1, (void *)0x5) == HVD_OK, "the stream wait failed");
    CHECK_TRUE(stream_waited_for == &e, "the stream waited for %p, not the done event", stream_waited_for);
    CHECK_TRUE(e.waits == 0, "the host waited on the device (%d)", e.waits);
    CHECK_TRUE(in_flight(rt, "s") == NULL, "the name stays in flight after hvd_wait_on_stream");
    CHECK_TRUE(stream_waiter(rt, h1, (void *)0x5) == HVD_ERR_INVALID_ARG, "the handle stayed live");
    hvdc_op *second = submit(rt, "s", &h2); /* the next step's all-reduce, same name, at once */
    CHECK_TRUE(in_flight(rt, "s") == second, "the name could not be reused");
    /* the first op's work finishes late, with an error no one can see any more */
    event_fire(&e);
    hvdc__complete_ops(rt, &first, 1, HVD_ERR_NCCL, "late");
    CHECK_TRUE(in_flight(rt, "s") == second, "the late completion dropped the new op's name");
    hvdc__drop_device_hold(rt, &first, 1); /* frees the first op (ASan: exactly once) */
    /* an op completed before it reached the device: its status, as hvd_wait */
    hvdc__complete_ops(rt, &second, 1, HVD_ERR_MISMATCH, "differs");
    hvd_status waited = HVD_OK;
    pthread_mutex_lock(&rt->completion_mutex);
    hvdc_op *op = hvdc__stream_wait_for_op(rt, h2, (void *)0x5, &waited);
    CHECK_TRUE(op == second && op->done && op->status == HVD_ERR_MISMATCH && waited == HVD_OK,
               "a completed op through the stream wait: %p done %d", (void *)op, op ? op->done : -1);
    pthread_mutex_unlock(&rt->completion_mutex);
    /* many times over: the name is free after every stream wait, before any event fires */
    fake_event ev[50];
    hvdc_op *ops[50];
    for (int i = 0; i < 50; i++) {
        event_init(&ev[i]);
        ops[i] = submit(rt, "loop", &h3);
        CHECK_TRUE(ops[i] != NULL && in_flight(rt, "loop") == ops[i], "round %d: not submitted", i);
        hvdc__publish_on_device(rt, &ops[i], 1, &ev[i]);
        CHECK_TRUE(stream_waiter(rt, h3, (void *)0x5) == HVD_OK, "round %d: stream wait", i);
    }
    for (int i = 0; i < 50; i++) { /* the device catches up; none of it touches the names */
        event_fire(&ev[i]);
        hvdc__complete_ops(rt, &ops[i], 1, HVD_OK, NULL);
        hvdc__drop_device_hold(rt, &ops[i], 1);
        event_destroy(&ev[i]);
    }
    CHECK_TRUE(in_flight(rt, "loop") == NULL, "a name stayed in flight");
    event_destroy(&e);
    runtime_delete(rt); /* frees the second op with the handle table */
}

static void test_two_waiters_and_poll(void) {
    hvdc_runtime *rt = runtime_new();
    fake_event e;
    event_init(&e);
    hvd_handle h;
    hvdc_op *op = submit(rt, "e", &h);
    hvdc__publish_on_device(rt, &op, 1, &e);
    pthread_mutex_lock(&rt->completion_mutex);
    hvdc_op *polled = hvdc__poll_op(rt, h);
    CHECK_TRUE(polled == op && !op->done && op->device_done == &e,
               "a poll before the event fired changed the op");
    pthread_mutex_unlock(&rt->completion_mutex);
    waiter a = {rt, h, 0, HVD_OK, "", 0}, b = {rt, h, 0, HVD_OK, "", 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, wait_thread, &a);
    pthread_create(&tb, NULL, wait_thread, &b);
    pause_ms(20);
    CHECK_TRUE(!returned(&a) && !returned(&b), "a waiter returned before the event fired");
    event_fire(&e);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_TRUE(a.status == HVD_OK && b.status == HVD_OK, "waiters got %s and %s",
               hvd_status_string(a.status), hvd_status_string(b.status));
    CHECK_TRUE(e.waits == 1, "%d device waits for one op (the second waiter waits for the first)",
               e.waits);
    hvdc__complete_ops(rt, &op, 1, HVD_OK, NULL);
    hvdc__drop_device_hold(rt, &op, 1);
    event_destroy(&e);

    /* polling completes an op whose event fired */
    fake_event f;
    event_init(&f);
    hvd_handle h2;
    hvdc_op *op2 = submit(rt, "f", &h2);
    hvdc__publish_on_device(rt, &op2, 1, &f);
    event_fire(&f);
    pthread_mutex_lock(&rt->completion_mutex);
    polled = hvdc__poll_op(rt, h2);
    CHECK_TRUE(polled == op2 && op2->done && op2->status == HVD_OK, "a poll after the event "
               "fired did not complete the op");
    pthread_mutex_unlock(&rt->completion_mutex);
    CHECK_TRUE(f.waits == 0, "polling blocked on the device");
    hvdc__drop_device_hold(rt, &op2, 1);
    event_destroy(&f);
    runtime_delete(rt);
}

/* The background thread of the race: queues, fires, completes and lets go, as background.c. */
typedef struct race {
    hvdc_runtime *rt;
    hvdc_op **ops;
    fake_event *events;
    int n;
} race;

/* Runs complete(arg) on a thread while this one waits for each of the n handles in order,
 * releasing it; returns how many completed OK. */
static int wait_each(hvdc_runtime *rt, const hvd_handle *handles, int n, void *(*complete)(void *),
                     void *arg) {
    pthread_t t;
    pthread_create(&t, NULL, complete, arg);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        waiter w = {rt, handles[i], 1, HVD_ERR_INTERNAL, "", 0};
        wait_thread(&w);
        ok += w.status == HVD_OK;
    }
    pthread_join(t, NULL);
    return ok;
}

static void *background_thread(void *arg) {
    race *r = arg;
    for (int i = 0; i < r->n; i++) {
        hvdc__publish_on_device(r->rt, &r->ops[i], 1, &r->events[i]);
        if (i % 3 == 0) sched_yield();
        event_fire(&r->events[i]);
        if (i % 5 == 0) sched_yield();
        hvdc__complete_ops(r->rt, &r->ops[i], 1, HVD_OK, NULL);
        hvdc__drop_device_hold(r->rt, &r->ops[i], 1);
    }
    return NULL;
}

static void test_race(int64_t handoff_spin_ns) {
    enum { N = 2000 };
    hvdc_runtime *rt = runtime_new();
    rt->poll.handoff_spin_ns = handoff_spin_ns; /* before any thread starts */
    hvdc_op **ops = calloc(N, sizeof *ops);
    hvd_handle *handles = calloc(N, sizeof *handles);
    fake_event *events = calloc(N, sizeof *events);
    char (*names)[16] = calloc(N, sizeof *names);
    for (int i = 0; i < N; i++) {
        event_init(&events[i]);
        snprintf(names[i], sizeof names[i], "race.%d", i);
        ops[i] = submit(rt, names[i], &handles[i]);
    }
    race r = {rt, ops, events, N};
    int ok = wait_each(rt, handles, N, background_thread, &r);
    CHECK_TRUE(ok == N, "%d of %d ops completed OK", ok, N);
    for (int i = 0; i < N; i++) event_destroy(&events[i]);
    free(events);
    free(names);
    free(handles);
    free(ops); /* the ops themselves were freed by their last holders (ASan checks) */
    runtime_delete(rt);
}

/* Completes host ops (no device) one by one, every other one after pause_ms: longer than any
 * hand-off spin, so the waiter has gone to sleep on completion_cond and must be woken. */
typedef struct host_completer {
    hvdc_runtime *rt;
    hvdc_op **ops;
    int n, pause_ms;
} host_completer;

static void *complete_host_ops(void *arg) {
    host_completer *c = arg;
    for (int i = 0; i < c->n; i++) {
        if (i % 2 == 1) pause_ms(c->pause_ms);
        hvdc__complete_ops(c->rt, &c->ops[i], 1, HVD_OK, NULL);
    }
    return NULL;
}

static void test_handoff_spin(void) {
    enum { N = 200 };
    hvdc_runtime *rt = runtime_new();
    rt->poll.handoff_spin_ns = HVDC_SPIN_NS;
    hvdc_op *ops[N];
    hvd_handle handles[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "spin.%d", i);
        ops[i] = submit(rt, names[i], &handles[i]);
    }
    unsigned long long seq_before = atomic_load(&rt->completion_seq);
    host_completer c = {rt, ops, N, 2}; /* 2 ms: a hundred times the spin */
    int ok = wait_each(rt, handles, N, complete_host_ops, &c);
    CHECK_TRUE(ok == N, "with the hand-off spin, %d of %d ops completed OK", ok, N);
    CHECK_TRUE(atomic_load(&rt->completion_seq) - seq_before == N,
               "%llu changes counted for %d completions", atomic_load(&rt->completion_seq) - seq_before, N);
    CHECK_TRUE(atomic_load(&rt->poll.app_waiting) == 0, "app_waiting %d after every wait returned",
               atomic_load(&rt->poll.app_waiting));
    runtime_delete(rt);
}

/* A stop fails every op in flight once, a grouped op (in the table once a member) included,
 * and allocates nothing to do it: a stop for want of memory must still wake every waiter
 * (HVDC_TEST_FAULTS=fail_everything switched the allocation it used to make). */
static void test_fail_everything(void) {
    hvdc_runtime *rt = runtime_new();
    hvd_handle h[2];
    hvdc_op *lone = submit(rt, "s0", &h[0]);
    hvdc_op *group = hvdc__op_create(3);
    const char *members[3] = {"s1.a", "s1.b", "s1.c"};
    pthread_mutex_lock(&rt->queue_mutex);
    for (size_t k = 0; k < 3; k++) {
        group->tensors[k].name = members[k];
        group->tensors[k].name_hash = hvdc__name_hash(members[k]);
        hvdc__name_table_put_hashed(&rt->in_flight, members[k], group->tensors[k].name_hash, group);
    }
    pthread_mutex_unlock(&rt->queue_mutex);
    pthread_mutex_lock(&rt->completion_mutex);
    h[1] = hvdc__handles_add(&rt->handles, group);
    pthread_mutex_unlock(&rt->completion_mutex);
    setenv("HVDC_TEST_FAULTS", "fail_everything", 1);
    hvdc__fail_everything(rt, HVD_ERR_NO_MEMORY, "out of memory");
    unsetenv("HVDC_TEST_FAULTS");
    CHECK_TRUE(lone->done && group->done, "a stop left ops undone (lone %d, grouped %d): their "
               "waiters would wait forever", lone->done, group->done);
    CHECK_TRUE(rt->in_flight.count == 0, "%zu names left in flight", (size_t)rt->in_flight.count);
    for (int i = 0; i < 2; i++) { /* each released once (ASan: freed once) */
        waiter w = {rt, h[i], 1, HVD_OK, "", 0};
        wait_thread(&w);
        CHECK_TRUE(w.status == HVD_ERR_NO_MEMORY, "op %d: %s", i, hvd_status_string(w.status));
    }
    runtime_delete(rt);
}

/* hvd_shutdown reads why the runtime stopped while a background thread it left behind (inside
 * MPI with a dead peer) may still be stopping it: both under queue_mutex (TSan). */
static void *stop_thread(void *arg) {
    hvdc_runtime *rt = arg;
    for (int i = 0; i < 200; i++) {
        hvdc__note_told(rt);
        hvdc__fail_everything(rt, HVD_ERR_RANK_FAILED, "rank 2 died");
    }
    return NULL;
}

static void test_stop_reason_race(void) {
    hvdc_runtime *rt = runtime_new();
    pthread_t t;
    pthread_create(&t, NULL, stop_thread, rt);
    int consistent = 1;
    for (int i = 0; i < 200; i++) {
        hvd_status status;
        char message[64];
        int told;
        hvdc__stop_reason(rt, &status, message, sizeof message, &told);
        consistent &= status == HVD_OK ? message[0] == '\0' : strcmp(message, "rank 2 died") == 0;
    }
    pthread_join(t, NULL);
    CHECK_TRUE(consistent, "a stop's status and message were read half-written");
    runtime_delete(rt);
}

int main(void) {
    test_waiter_first();
    test_background_first();
    test_fused_waiters();
    test_fused_let_go();
    test_aborted();
    test_name_reused();
    test_stream_wait_frees_name();
    test_two_waiters_and_poll();
    test_race(0);
    test_handoff_spin();
    test_race(HVDC_SPIN_NS);
    test_fail_everything();
    test_stop_reason_race();
    return check_verdict("test_complete");
}
