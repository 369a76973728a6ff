/*
 * bench_device_stub.c - bench_device.h where libhvdc has no GPU backend: --device gpu is
 * refused with why; nothing else is reached. Main thread.
 */
#include "bench_device.h"

#include <stdio.h>

int bench_device_open(MPI_Comm comm, int local_rank, char *why, size_t len) {
    (void)comm, (void)local_rank;
    snprintf(why, len, "--device gpu: this build has no GPU backend (configure with "
             "-Dcuda=enabled where CUDA and NCCL are installed)");
    return -1;
}
void bench_device_close(void) {}
void *bench_device_alloc(size_t nbytes) { (void)nbytes; return NULL; }
void bench_device_free(void *p) { (void)p; }
int bench_device_upload(void *dst, const void *src, size_t nbytes) { (void)dst, (void)src, (void)nbytes; return -1; }
int bench_device_download(void *dst, const void *src, size_t nbytes) { (void)dst, (void)src, (void)nbytes; return -1; }
int bench_nccl_allreduce(const void *send, void *recv, size_t count, hvd_dtype dtype, hvd_reduce_op op) {
    (void)send, (void)recv, (void)count, (void)dtype, (void)op;
    return -1;
}
