/*
 * bench_common.c - the benchmarks' shared harness (see bench_common.h). Main thread.
 */
#include "bench_common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static int world_rank(void) {
    int initialized = 0, rank = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

void bench_fail_hvd(const char *file, int line, const char *call, hvd_status st) {
    fprintf(stderr, "[rank %d] %s:%d: %s failed: %s (%s)\n", world_rank(), file, line, call,
            hvd_status_string(st), hvd_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

void bench_fail_mpi(const char *file, int line, const char *call, int err) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, text, &len);
    fprintf(stderr, "[rank %d] %s:%d: %s failed: %s\n", world_rank(), file, line, call, text);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

double bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *v, size_t n, double p) {
    if (n == 0) return 0.0;
    qsort(v, n, sizeof *v, compare_doubles);
    size_t k = (size_t)ceil(p / 100.0 * (double)n);
    return v[k == 0 ? 0 : (k > n ? n - 1 : k - 1)];
}

double bench_median(double *v, size_t n) {
    if (n == 0) return 0.0;
    qsort(v, n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench_max_over_ranks(double *v, size_t n, MPI_Comm comm) {
    if (n == 0) return;
    BENCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_MAX, comm));
}

int bench_parse_bytes(const char *text, size_t *out) {
    if (!text || !isdigit((unsigned char)text[0])) return 0;
    errno = 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0) return 0;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (toupper((unsigned char)*end) == 'I') end++; /* KiB, MiB */
    if (toupper((unsigned char)*end) == 'B') end++;
    if (*end != '\0' || value > (SIZE_MAX >> shift)) return 0;
    *out = (size_t)(value << shift);
    return 1;
}

const char *bench_format_bytes(size_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    size_t v = bytes;
    while (u < 3 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%zu %s", v, units[u]);
    return buf;
}

static const struct {
    const char *name;
    hvd_dtype dtype;
} dtype_names[] = {
    {"float", HVD_FLOAT32},   {"float32", HVD_FLOAT32}, {"half", HVD_FLOAT16},
    {"float16", HVD_FLOAT16}, {"bfloat16", HVD_BFLOAT16}, {"bf16", HVD_BFLOAT16},
    {"double", HVD_FLOAT64},  {"float64", HVD_FLOAT64}, {"int32", HVD_INT32},
    {"int", HVD_INT32},       {"int64", HVD_INT64},     {"int8", HVD_INT8},
    {"uint8", HVD_UINT8},     {"int16", HVD_INT16},     {"uint16", HVD_UINT16},
    {"bool", HVD_BOOL},
};

int bench_dtype_from_name(const char *name) {
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (strcasecmp(name, dtype_names[i].name) == 0) return (int)dtype_names[i].dtype;
    return -1;
}

const char *bench_dtype_name(hvd_dtype dtype) {
    switch (dtype) {
    case HVD_UINT8: return "uint8";
    case HVD_INT8: return "int8";
    case HVD_INT32: return "int32";
    case HVD_INT64: return "int64";
    case HVD_FLOAT16: return "half";
    case HVD_BFLOAT16: return "bfloat16";
    case HVD_FLOAT32: return "float";
    case HVD_FLOAT64: return "double";
    case HVD_INT16: return "int16";
    case HVD_UINT16: return "uint16";
    case HVD_BOOL: return "bool";
    }
    return "?";
}

static const char *const op_names[HVD_REDUCE_OP_COUNT] = {"sum", "avg", "min", "max", "prod"};

int bench_op_from_name(const char *name) {
    for (int i = 0; i < HVD_REDUCE_OP_COUNT; i++)
        if (strcasecmp(name, op_names[i]) == 0) return i;
    if (strcasecmp(name, "average") == 0) return HVD_AVERAGE;
    if (strcasecmp(name, "product") == 0) return HVD_PRODUCT;
    return -1;
}

const char *bench_op_name(hvd_reduce_op op) {
    return (unsigned)op < HVD_REDUCE_OP_COUNT ? op_names[op] : "?";
}

MPI_Datatype bench_mpi_type(hvd_dtype dtype) {
    switch (dtype) {
    case HVD_UINT8: return MPI_UINT8_T;
    case HVD_INT8: return MPI_INT8_T;
    case HVD_INT32: return MPI_INT32_T;
    case HVD_INT64: return MPI_INT64_T;
    case HVD_INT16: return MPI_INT16_T;
    case HVD_UINT16: return MPI_UINT16_T;
    case HVD_FLOAT32: return MPI_FLOAT;
    case HVD_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

MPI_Op bench_mpi_op(hvd_reduce_op op) {
    switch (op) {
    case HVD_MIN: return MPI_MIN;
    case HVD_MAX: return MPI_MAX;
    case HVD_PRODUCT: return MPI_PROD;
    default: return MPI_SUM;
    }
}

/* binary16 <-> float32, written out here so the check does not share code with the library. */
static float f32_from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float magnitude;
    if (exp == 0) magnitude = ldexpf((float)man, -24);
    else if (exp == 31) magnitude = man ? NAN : INFINITY;
    else magnitude = ldexpf((float)(man | 0x400), (int)exp - 25);
    return sign ? -magnitude : magnitude;
}

static uint16_t f16_from_f32(float f) { /* exact for the small integers the benchmarks use */
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    f = fabsf(f);
    if (f == 0.0f) return sign;
    int e = 0;
    float m = frexpf(f, &e); /* f = m * 2^e, m in [0.5, 1) */
    if (e > 16) return sign | 0x7c00;
    uint16_t man = (uint16_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
    return sign | (uint16_t)((e + 14) << 10) | man;
}

void bench_set_value(void *buf, hvd_dtype dtype, size_t i, double v) {
    switch (dtype) {
    case HVD_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case HVD_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case HVD_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case HVD_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case HVD_FLOAT16: ((uint16_t *)buf)[i] = f16_from_f32((float)v); break;
    case HVD_BFLOAT16: {
        float f = (float)v;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16);
        break;
    }
    case HVD_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case HVD_FLOAT64: ((double *)buf)[i] = v; break;
    case HVD_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case HVD_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case HVD_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    }
}

double bench_get_value(const void *buf, hvd_dtype dtype, size_t i) {
    switch (dtype) {
    case HVD_UINT8: return ((const uint8_t *)buf)[i];
    case HVD_INT8: return ((const int8_t *)buf)[i];
    case HVD_INT32: return ((const int32_t *)buf)[i];
    case HVD_INT64: return (double)((const int64_t *)buf)[i];
    case HVD_INT16: return ((const int16_t *)buf)[i];
    case HVD_UINT16: return ((const uint16_t *)buf)[i];
    case HVD_BOOL: return ((const uint8_t *)buf)[i];
    case HVD_FLOAT16: return f32_from_f16(((const uint16_t *)buf)[i]);
    case HVD_BFLOAT16: {
        uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    case HVD_FLOAT32: return ((const float *)buf)[i];
    case HVD_FLOAT64: return ((const double *)buf)[i];
    }
    return NAN;
}

void bench_print_settings(FILE *out, const char *program, int size) {
    char host[256] = "?", library[MPI_MAX_LIBRARY_VERSION_STRING] = "?";
    int len = 0;
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    MPI_Get_library_version(library, &len);
    char *newline = strchr(library, '\n');
    if (newline) *newline = '\0';
    char date[64] = "?";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &tm);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(out, "# %s, libhvdc %s, %d ranks, host %s (%ld cores), %s\n", program, hvd_version(),
            size, host, cores, date);
    fprintf(out, "# MPI: %s\n", library);
    static const char *const vars[] = {"HVD_FUSION_THRESHOLD", "HVD_CYCLE_TIME",
                                       "HVD_CPU_ALLREDUCE", "HVD_LOG_LEVEL"};
    fprintf(out, "# env:");
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        fprintf(out, " %s=%s", vars[i], v ? v : "(unset)");
    }
    fprintf(out, "\n");
}

int bench_start(int *argc, char ***argv, const char *program, bench_parse_fn parse,
                void *options, int *rank, int *size) {
    int provided = 0;
    BENCH_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (*rank == 0) fprintf(stderr, "%s: MPI lacks MPI_THREAD_MULTIPLE\n", program);
        MPI_Finalize();
        return 2;
    }
    int parsed = parse(*argc, *argv, options, *rank);
    if (parsed == 0) return 0;
    MPI_Finalize();
    return parsed > 0 ? -1 : 2; /* --help: done, exit 0 (see bench_exit_status) */
}

int bench_parse_options(int argc, char **argv, int rank, const char *program,
                        void (*usage)(FILE *out), bench_option_fn one, void *options) {
    for (int i = 1; i < argc; i += 2) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
            if (rank == 0) usage(stdout);
            return 1;
        }
        if (value && one(options, flag, value)) continue;
        if (rank == 0) {
            fprintf(stderr, "%s: bad option '%s%s%s'%s\n", program, flag, value ? " " : "",
                    value ? value : "", value ? "" : " (it needs a value)");
            usage(stderr);
        }
        return -1;
    }
    return 0;
}
