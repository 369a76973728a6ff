/*
 * gpu_call_bench.c - what the CUDA and NCCL calls of libhvdc's device path cost on a real GPU,
 * one process, one device, a one-rank NCCL communicator (no MPI). Two tables:
 *   calls:  host time of each call the backend makes per collective (median of many)
 *   chains: a 4-byte all-reduce queued as the backend queues it, then waited for, over and over
 *           (median round trip), each row adding one piece to the one before, so the
 *           difference between rows is that piece's price, its effect on the device included
 * It answers where a lone op's time goes between "ncclAllReduce + cudaStreamSynchronize" and
 * libhvdc's latency_bench row (issue 34). Built with the GPU backend only.
 * Usage: gpu_call_bench [-n ITERATIONS]
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

#define OK(call)                                                                    \
    do {                                                                            \
        int err_ = (int)(call);                                                     \
        if (err_ != 0) {                                                            \
            fprintf(stderr, "gpu_call_bench: %s failed (%d) at line %d\n", #call,   \
                    err_, __LINE__);                                                \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static void noop_host(void *arg) { (void)arg; }

static cudaStream_t stream, side;
static cudaEvent_t ready, done;
static ncclComm_t comm;
static float *buf;

/* The pieces a chain is made of. */
enum {
    LEGACY_WAIT = 1,   /* record on the legacy default stream, our stream waits for it */
    EVENT_SYNC = 2,    /* record a done event and wait for it (else cudaStreamSynchronize) */
    HOST_FUNC = 4,     /* a host function after the done event, on our stream */
    SIDE_HOST = 8,     /* the host function on a side stream that waits for the done event */
    OUT_OF_PLACE = 16, /* ncclAllReduce from one buffer into another */
};

static void chain(int pieces) {
    if (pieces & LEGACY_WAIT) {
        OK(cudaEventRecord(ready, cudaStreamLegacy));
        OK(cudaStreamWaitEvent(stream, ready, 0));
    }
    OK(ncclAllReduce(buf, pieces & OUT_OF_PLACE ? buf + 8 : buf, 1, ncclFloat32, ncclSum, comm,
                     stream));
    if (!(pieces & EVENT_SYNC)) {
        OK(cudaStreamSynchronize(stream));
        return;
    }
    OK(cudaEventRecord(done, stream));
    if (pieces & HOST_FUNC) OK(cudaLaunchHostFunc(stream, noop_host, NULL));
    if (pieces & SIDE_HOST) {
        OK(cudaStreamWaitEvent(side, done, 0));
        OK(cudaLaunchHostFunc(side, noop_host, NULL));
    }
    OK(cudaEventSynchronize(done));
}

int main(int argc, char **argv) {
    int n = 5000;
    if (argc == 3 && strcmp(argv[1], "-n") == 0) n = atoi(argv[2]);
    if (n < 10) n = 10;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        printf("gpu_call_bench: skipped: no CUDA device\n");
        return 77;
    }
    OK(cudaSetDevice(0));
    OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    OK(cudaMalloc((void **)&buf, 64));
    int dev0 = 0;
    OK(ncclCommInitAll(&comm, 1, &dev0));
    double *t = malloc((size_t)n * sizeof *t);
    if (!t) return 1;
    struct cudaDeviceProp prop;
    OK(cudaGetDeviceProperties(&prop, 0));
    int nccl_version = 0, rt_version = 0;
    ncclGetVersion(&nccl_version);
    cudaRuntimeGetVersion(&rt_version);
    printf("# gpu_call_bench: %s, CUDA runtime %d, NCCL %d, %d iterations (+%d warm-up)\n",
           prop.name, rt_version, nccl_version, n, n / 10);

    printf("# calls: host time of one call, median (us); the stream drained between calls\n");
    const char *call_names[] = {"cudaSetDevice", "cudaEventRecord", "cudaEventRecord(legacy)",
                                "cudaStreamWaitEvent", "cudaLaunchHostFunc",
                                "ncclAllReduce(4 B, in place)", "ncclAllReduce(4 B, out of place)",
                                "cudaMemcpyAsync(4 B, D2D)", "cudaEventQuery(done)"};
    for (int c = 0; c < 9; c++) {
        for (int i = -n / 10; i < n; i++) {
            double t0 = now_us();
            switch (c) {
            case 0: OK(cudaSetDevice(0)); break;
            case 1: OK(cudaEventRecord(done, stream)); break;
            case 2: OK(cudaEventRecord(ready, cudaStreamLegacy)); break;
            case 3: OK(cudaStreamWaitEvent(stream, ready, 0)); break;
            case 4: OK(cudaLaunchHostFunc(stream, noop_host, NULL)); break;
            case 5: OK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream)); break;
            case 6: OK(ncclAllReduce(buf, buf + 8, 1, ncclFloat32, ncclSum, comm, stream)); break;
            case 7: OK(cudaMemcpyAsync(buf + 8, buf, 4, cudaMemcpyDeviceToDevice, stream)); break;
            case 8: (void)cudaEventQuery(done); break;
            }
            double t1 = now_us();
            if (i >= 0) t[i] = t1 - t0;
            OK(cudaDeviceSynchronize());
        }
        printf("%34s %8.2f\n", call_names[c], median(t, n));
    }

    printf("# chains: queue a 4-byte all-reduce, wait for it; median round trip (us)\n");
    struct { const char *name; int pieces; } chains[] = {
        {"nccl + cudaStreamSynchronize", 0},
        {"nccl + record + cudaEventSynchronize", EVENT_SYNC},
        {"legacy wait + nccl + record + sync", LEGACY_WAIT | EVENT_SYNC},
        {"... + host function on the stream", LEGACY_WAIT | EVENT_SYNC | HOST_FUNC},
        {"... + host function on a side stream", LEGACY_WAIT | EVENT_SYNC | SIDE_HOST},
        {"nccl + record + host function + sync", EVENT_SYNC | HOST_FUNC},
        {"nccl out of place + cudaStreamSynchronize", OUT_OF_PLACE},
    };
    for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
        for (int i = -n / 10; i < n; i++) {
            double t0 = now_us();
            chain(chains[c].pieces);
            double t1 = now_us();
            if (i >= 0) t[i] = t1 - t0;
        }
        OK(cudaDeviceSynchronize());
        printf("%44s %8.2f\n", chains[c].name, median(t, n));
    }
    free(t);
    ncclCommDestroy(comm);
    cudaFree(buf);
    return 0;
}
