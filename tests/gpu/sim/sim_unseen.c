/*
 * sim_unseen.c - the simulated NCCL's MPI traffic, kept out of ThreadSanitizer's sight (sim.h).
 *
 * Open MPI is not built for TSan. Whichever thread is inside MPI moves the bytes of any pending
 * request: libhvdc's background thread, negotiating, progresses a stream thread's collective,
 * and a stream thread's MPI_Testall progresses the background thread's own receives. Only the
 * request's completion (Open MPI's atomics) orders those copies before their owner reads the
 * bytes, and TSan cannot see it. It reported the fold reading what the background thread's
 * opal_convertor_unpack wrote; a suppression hid that only when TSan could restore the writer's
 * stack, so about one run in five of `gpu sim optimizer np=3` failed.
 * So under TSan:
 *   - the buffers the simulator hands MPI are allocated, filled, read and freed unseen, and
 *     the user's memory they are filled from or drained into is declared read or written;
 *   - a stream thread's MPI calls are unseen: what MPI copies there on another thread's behalf
 *     is that thread's hand-off, not the stream's.
 * libhvdc's own accesses, its background thread's MPI calls included, stay in TSan's sight.
 * Without TSan: malloc, memcpy, free.
 * The stream threads, and the thread creating a communicator.
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#if defined(__SANITIZE_THREAD__)
#define SIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIM_TSAN 1
#endif
#endif

#ifdef SIM_TSAN
/* TSan's runtime interface (compiler-rt's tsan_interface.h, in gcc's libtsan too) */
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
void __tsan_read_range(void *addr, unsigned long size);
void __tsan_write_range(void *addr, unsigned long size);

void sim_unseen_begin(void) { __tsan_ignore_thread_begin(); }
void sim_unseen_end(void) { __tsan_ignore_thread_end(); }
static void seen_read(const void *p, size_t bytes) { __tsan_read_range((void *)p, bytes); }
void sim_seen_write(void *p, size_t bytes) { __tsan_write_range(p, bytes); }
#else
void sim_unseen_begin(void) {}
void sim_unseen_end(void) {}
static void seen_read(const void *p, size_t bytes) { (void)p, (void)bytes; }
void sim_seen_write(void *p, size_t bytes) { (void)p, (void)bytes; }
#endif

void *sim_mpi_buffer(size_t bytes) {
    sim_unseen_begin(); /* allocated unseen: TSan forgets what the block held before */
    void *buffer = malloc(bytes ? bytes : 1);
    sim_unseen_end();
    return buffer;
}

void sim_mpi_buffer_free(void *buffer) {
    sim_unseen_begin();
    free(buffer);
    sim_unseen_end();
}

void sim_mpi_fill(void *buffer, const void *from, size_t bytes) {
    seen_read(from, bytes);
    sim_unseen_begin();
    memcpy(buffer, from, bytes);
    sim_unseen_end();
}

void sim_mpi_drain(void *to, const void *buffer, size_t bytes) {
    sim_unseen_begin();
    memcpy(to, buffer, bytes);
    sim_unseen_end();
    sim_seen_write(to, bytes);
}
