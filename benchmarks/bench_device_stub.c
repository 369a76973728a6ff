/*
 * bench_device_stub.c - bench_device.h where libhvdc has no GPU backend: --device gpu is
 * refused with why; nothing else is reached. Main thread.
 */
#include "bench_device.h"

#include <stdio.h>

int bench_device_open(MPI_Comm comm, const char *program) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0)
        fprintf(stderr, "%s: --device gpu: this build has no GPU backend (configure with "
                "-Dcuda=enabled where CUDA and NCCL are installed)\n", program);
    return -1;
}
void bench_device_close(void) {}
void *bench_device_alloc(size_t nbytes) { (void)nbytes; return NULL; }
void bench_device_free(void *p) { (void)p; }
int bench_device_upload(void *dst, const void *src, size_t nbytes) { (void)dst, (void)src, (void)nbytes; return -1; }
int bench_device_download(void *dst, const void *src, size_t nbytes) { (void)dst, (void)src, (void)nbytes; return -1; }
int bench_device_memset(void *dst, int byte, size_t nbytes) { (void)dst, (void)byte, (void)nbytes; return -1; }
int bench_nccl_allreduce(const void *send, void *recv, size_t count, hvd_dtype dtype, hvd_reduce_op op) {
    (void)send, (void)recv, (void)count, (void)dtype, (void)op;
    return -1;
}
int bench_nccl_allreduce_group(const void *send, void *recv, const size_t *offsets,
                               const size_t *counts, size_t n, hvd_dtype dtype, hvd_reduce_op op) {
    (void)send, (void)recv, (void)offsets, (void)counts, (void)n, (void)dtype, (void)op;
    return -1;
}
