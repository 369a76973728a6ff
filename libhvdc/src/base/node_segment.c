/*
 * node_segment.c - the node's shared segment of node_segment.h.
 * The thread that calls hvd_init.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* posix_fallocate and shm_open under -std=c11 */
#endif
#include "base/node_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

enum { NAME_BYTES = 64 };

/* Local rank 0: creates the segment under a fresh name (why: empty) or says why not. */
static int create_named(char *name, size_t bytes, const char *what, char *why, size_t why_len) {
    static _Atomic unsigned made; /* several runtimes (process sets) in one process */
    snprintf(name, NAME_BYTES, "/hvdc-seg-%ld-%u", (long)getpid(), atomic_fetch_add(&made, 1));
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    int err = fd < 0 ? errno : 0;
    if (!err && ftruncate(fd, (off_t)bytes) != 0) err = errno;
    if (!err) err = posix_fallocate(fd, 0, (off_t)bytes); /* no SIGBUS later on a full /dev/shm */
    if (err) {
        snprintf(why, why_len, "could not create the %zu-byte shared memory segment of %s in "
                 "/dev/shm: %s", bytes, what, strerror(err));
        if (fd >= 0) {
            close(fd);
            shm_unlink(name);
        }
        name[0] = '\0';
        return -1;
    }
    return fd;
}

hvd_status hvdc__node_segment_map(MPI_Comm local, size_t bytes, const char *what, void **base) {
    hvd_status st = HVD_OK;
    char name[NAME_BYTES] = "", why[200] = "";
    int rank = 0, fd = -1;
    void *map = MAP_FAILED;
    *base = NULL;
    CHECK_MPI(MPI_Comm_rank(local, &rank));
    if (rank == 0) fd = create_named(name, bytes, what, why, sizeof why);
    CHECK_MPI(MPI_Bcast(name, NAME_BYTES, MPI_CHAR, 0, local));
    if (name[0] && rank != 0 && (fd = shm_open(name, O_RDWR, 0)) < 0)
        snprintf(why, sizeof why, "could not open the shared memory segment of %s (%s): %s",
                 what, name, strerror(errno));
    if (fd >= 0) {
        map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
            snprintf(why, sizeof why, "could not map the shared memory segment of %s: %s", what,
                     strerror(errno));
        close(fd);
    }
    CHECK_MPI(MPI_Barrier(local)); /* every rank has mapped it (or failed): the name can go */
    if (rank == 0 && name[0]) shm_unlink(name);
    if (!name[0] && !why[0])
        snprintf(why, sizeof why, "local rank 0 could not create the shared memory segment of %s",
                 what);
    if (why[0]) {
        st = hvdc__fail(HVD_ERR_INTERNAL, "%s", why);
        goto fail;
    }
    *base = map;
    return HVD_OK;
fail:
    if (map != MAP_FAILED) munmap(map, bytes);
    return st;
}

void hvdc__node_segment_unmap(void *base, size_t bytes) {
    if (base) munmap(base, bytes);
}
