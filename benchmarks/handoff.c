/*
 * handoff.c - the hand-off to a helper thread (see handoff.h): one mutex and two condition
 * variables, each signalled after unlocking, as libhvdc's submission and completion do.
 */
#include "handoff.h"

#include <pthread.h>
#include <stdlib.h>

struct bench_handoff {
    MPI_Comm comm;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t to_helper, to_caller;
    int posted, done, quit; /* under mutex */
    const void *send;       /* the posted call */
    void *recv;
    int count, status;
    MPI_Datatype type;
    MPI_Op op;
};

static void *helper_main(void *arg) {
    bench_handoff *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->mutex);
        while (!h->posted && !h->quit) pthread_cond_wait(&h->to_helper, &h->mutex);
        int quit = h->quit;
        h->posted = 0;
        pthread_mutex_unlock(&h->mutex);
        if (quit) return NULL;
        /* the call's fields stay as posted until the caller sees done */
        int status = MPI_Allreduce(h->send, h->recv, h->count, h->type, h->op, h->comm);
        pthread_mutex_lock(&h->mutex);
        h->status = status;
        h->done = 1;
        pthread_mutex_unlock(&h->mutex);
        pthread_cond_signal(&h->to_caller);
    }
}

bench_handoff *bench_handoff_start(MPI_Comm comm) {
    bench_handoff *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    if (MPI_Comm_dup(comm, &h->comm) != MPI_SUCCESS) {
        free(h);
        return NULL;
    }
    pthread_mutex_init(&h->mutex, NULL);
    pthread_cond_init(&h->to_helper, NULL);
    pthread_cond_init(&h->to_caller, NULL);
    if (pthread_create(&h->thread, NULL, helper_main, h) != 0) {
        MPI_Comm_free(&h->comm);
        free(h);
        return NULL;
    }
    return h;
}

int bench_handoff_allreduce(bench_handoff *h, const void *send, void *recv, int count,
                            MPI_Datatype type, MPI_Op op) {
    pthread_mutex_lock(&h->mutex);
    h->send = send;
    h->recv = recv;
    h->count = count;
    h->type = type;
    h->op = op;
    h->posted = 1;
    pthread_mutex_unlock(&h->mutex);
    pthread_cond_signal(&h->to_helper);
    pthread_mutex_lock(&h->mutex);
    while (!h->done) pthread_cond_wait(&h->to_caller, &h->mutex);
    h->done = 0;
    int status = h->status;
    pthread_mutex_unlock(&h->mutex);
    return status;
}

void bench_handoff_stop(bench_handoff *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mutex);
    h->quit = 1;
    pthread_mutex_unlock(&h->mutex);
    pthread_cond_signal(&h->to_helper);
    pthread_join(h->thread, NULL);
    MPI_Comm_free(&h->comm);
    pthread_mutex_destroy(&h->mutex);
    pthread_cond_destroy(&h->to_helper);
    pthread_cond_destroy(&h->to_caller);
    free(h);
}
