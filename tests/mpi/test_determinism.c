/*
 * test_determinism.c - an all-reduce's bits do not depend on fusion, timing or algorithm, and
 * are the same on every rank (issue 11). Run at np >= 3: at np = 2, a + b = b + a hides every
 * order bug.
 *
 * Tensors (all in one run, so fusion mixes them):
 *   order  float32/float64/float16/bfloat16 SUM, float32/bfloat16 PRODUCT, float32 AVERAGE;
 *          counts from 1 to past 1 MiB, so that alone, fused or in place they meet every
 *          algorithm (one-step exchange, direct reduce-scatter, in place). Values of very
 *          different magnitudes (random exponents), so a sum's bits depend on its order; the
 *          test checks that they do (rank order and another order differ in many elements).
 *   nan    MIN, MAX and SUM on the four float dtypes, small and large, with NaNs of different
 *          payloads and signs (quiet and signalling) on different ranks, +0 against -0, and
 *          +inf against -inf: element results whose bits depend on operand order.
 * Configurations: HVD_FUSION_THRESHOLD 0, 1K, 64K, the default and 128M, with different
 * HVD_CYCLE_TIMEs and HVD_CPU_ALLREDUCE ring, shm and the default; each is one hvd_init .. hvd_shutdown (the application keeps MPI up). In each,
 * three schedules: every tensor in order, out of place; a rank-dependent permutation with
 * rank-dependent pauses, in place; one grouped all-reduce per dtype and op.
 * Checks:
 *   - each SUM/PRODUCT result equals the reference computed here, in rank order, bit for bit
 *     (--hierarchical: rank order inside each node, then node order; HVD_HIERARCHICAL_ALLREDUCE);
 *   - every tensor's bits are the same in every configuration and schedule;
 *   - every tensor's bits are the same on every rank (hashes gathered with MPI, and the bytes
 *     of the first run compared with rank 0's).
 * Usage: test_determinism [--hierarchical]. Main thread only.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpitest.h"

enum { N_SCHEDULES = 3, MAX_CASES = 128 };

typedef struct config {
    const char *threshold; /* NULL: the default */
    const char *cycle_ms;  /* NULL: the default */
    const char *cpu;       /* HVD_CPU_ALLREDUCE; NULL: the default (auto: shm on one node) */
} config;

/* ring and shm (and auto, which picks one of them) must give the same bits */
static const config CONFIGS[] = {{"0", "0.2", "ring"}, {"1K", NULL, "shm"}, {"64K", "5", "ring"},
                                 {NULL, NULL, NULL}, {"128M", "2", "shm"}, {NULL, NULL, "ring"}};
enum { N_CONFIGS = sizeof CONFIGS / sizeof CONFIGS[0] };

typedef enum data_kind { DATA_ORDER, DATA_NAN } data_kind;

typedef struct tcase {
    char name[64];
    hvd_dtype dt;
    hvd_reduce_op op;
    size_t count;
    data_kind kind;
    int has_reference;
    unsigned char *input;     /* this rank's input */
    unsigned char *recv;      /* the result of the current run */
    unsigned char *reference; /* has_reference: the expected bits */
    uint64_t first_hash;      /* config 0, schedule 0 */
    hvd_handle handle;
} tcase;

static tcase cases[MAX_CASES];
static int n_cases = 0;

/* ---- data ----------------------------------------------------------------------------------- */

static void set_bits(void *buf, hvd_dtype dt, size_t i, uint64_t bits) {
    switch (mt_dtype_size(dt)) {
    case 2: ((uint16_t *)buf)[i] = (uint16_t)bits; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)bits; break;
    default: ((uint64_t *)buf)[i] = bits; break;
    }
}

static uint64_t get_bits(const void *buf, hvd_dtype dt, size_t i) {
    switch (mt_dtype_size(dt)) {
    case 2: return ((const uint16_t *)buf)[i];
    case 4: return ((const uint32_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
    }
}

/* A NaN of dt: quiet or signalling, with a non-zero payload taken from h, and a sign. */
static uint64_t nan_bits(hvd_dtype dt, int quiet, uint64_t h, int negative) {
    uint64_t exp_all, quiet_bit, payload_mask, sign;
    switch (dt) {
    case HVD_FLOAT16: exp_all = 0x7c00; quiet_bit = 0x200; payload_mask = 0x1ff; sign = 0x8000; break;
    case HVD_BFLOAT16: exp_all = 0x7f80; quiet_bit = 0x40; payload_mask = 0x3f; sign = 0x8000; break;
    case HVD_FLOAT32: exp_all = 0x7f800000; quiet_bit = 0x400000; payload_mask = 0x3fffff; sign = 0x80000000u; break;
    default: exp_all = 0x7ff0000000000000ull; quiet_bit = 1ull << 51; payload_mask = quiet_bit - 1; sign = 1ull << 63; break;
    }
    uint64_t payload = (h % payload_mask) + 1; /* never 0: a signalling NaN needs one */
    return exp_all | (quiet ? quiet_bit : 0) | payload | (negative ? sign : 0);
}

/* A random mantissa in [1, 2) (rounded to dt when stored) times 2^e with e in [-e_max, e_max],
 * random sign: terms of different magnitudes, whose sums round differently in each order. */
static double spread_value(uint64_t h, int e_max, int allow_negative) {
    double v = 1.0 + (double)(h >> 12) / 4503599627370496.0; /* 52 random bits */
    uint64_t g = mt_hash(h, 1, 2);
    int e = (int)(g % (uint64_t)(2 * e_max + 1)) - e_max;
    for (; e > 0; e--) v *= 2.0;
    for (; e < 0; e++) v /= 2.0;
    return allow_negative && (g >> 32) & 1 ? -v : v;
}

static int exponent_range(hvd_dtype dt) {
    return dt == HVD_FLOAT16 ? 6 : 12; /* float16 stays normal, and 8 terms stay below 65504 */
}

/* rank's input for case c at element i. */
static void input_element(const tcase *c, int ci, int rank, int size, size_t i, void *buf) {
    uint64_t h = mt_hash((uint64_t)rank, i, (uint64_t)ci * 7919u + 11u);
    if (c->kind == DATA_ORDER) {
        if (c->op == HVD_PRODUCT) /* near 1: a product of up to 8 stays in range */
            mt_set_f64(buf, c->dt, i, spread_value(h, 1, 1));
        else
            mt_set_f64(buf, c->dt, i, spread_value(h, exponent_range(c->dt), 1));
        return;
    }
    uint64_t g = mt_hash(i, (uint64_t)ci, 99); /* the same on every rank: picks the pattern */
    int special = (int)(g % (uint64_t)size);
    switch (i % 6) {
    case 0: /* NaN on every rank, each with its own payload and sign */
        set_bits(buf, c->dt, i, nan_bits(c->dt, 1, h, rank & 1));
        return;
    case 1: /* NaN on one rank, numbers on the others */
        if (rank == special) set_bits(buf, c->dt, i, nan_bits(c->dt, 1, h, 0));
        else mt_set_f64(buf, c->dt, i, spread_value(h, 3, 1));
        return;
    case 2: /* a signalling NaN on one rank, a quiet one on the next, numbers elsewhere */
        if (rank == special) set_bits(buf, c->dt, i, nan_bits(c->dt, 0, h, 1));
        else if (rank == (special + 1) % size) set_bits(buf, c->dt, i, nan_bits(c->dt, 1, h, 0));
        else mt_set_f64(buf, c->dt, i, spread_value(h, 3, 1));
        return;
    case 3: /* +0 and -0: MIN/MAX pick one by operand order */
        mt_set_f64(buf, c->dt, i, (rank + (int)g) & 1 ? -0.0 : 0.0);
        return;
    case 4: /* +inf on one rank, -inf on another: their sum is a NaN */
        if (rank == special) mt_set_f64(buf, c->dt, i, INFINITY);
        else if (rank == (special + 1) % size) mt_set_f64(buf, c->dt, i, -INFINITY);
        else mt_set_f64(buf, c->dt, i, spread_value(h, 3, 1));
        return;
    default:
        mt_set_f64(buf, c->dt, i, spread_value(h, 3, 1));
        return;
    }
}

/* ---- the reference: rank order (or node order), computed here ------------------------------- */

/* a = a op b in dt, rounding to dt after the op (half types combine in float32). */
static void combine(void *a, const void *b, hvd_dtype dt, hvd_reduce_op op, size_t i) {
    if (dt == HVD_FLOAT64) {
        double x = ((double *)a)[i], y = ((const double *)b)[i];
        ((double *)a)[i] = op == HVD_PRODUCT ? x * y : x + y;
        return;
    }
    float x = (float)mt_get_f64(a, dt, i), y = (float)mt_get_f64(b, dt, i);
    float r = op == HVD_PRODUCT ? x * y : x + y;
    mt_set_f64(a, dt, i, (double)r); /* rounds to nearest-even for the half types */
}

/* order[k] = the rank whose input is combined k-th; groups: node boundaries (group_size ranks
 * each, partial results combined in group order), or group_size = size for one flat order. */
static void make_reference(tcase *c, int ci, int size, const int *order, int group_size) {
    size_t elem = mt_dtype_size(c->dt), n = c->count;
    unsigned char *x = malloc(n * elem), *group = malloc(n * elem);
    for (int g = 0; g < size / group_size; g++) {
        for (int k = 0; k < group_size; k++) {
            int r = order[g * group_size + k];
            for (size_t i = 0; i < n; i++) input_element(c, ci, r, size, i, x);
            if (k == 0) memcpy(group, x, n * elem);
            else for (size_t i = 0; i < n; i++) combine(group, x, c->dt, c->op, i);
        }
        if (g == 0) memcpy(c->reference, group, n * elem);
        else for (size_t i = 0; i < n; i++) combine(c->reference, group, c->dt, c->op, i);
    }
    free(x);
    free(group);
}

/* ---- cases ------------------------------------------------------------------------------------ */

static void add_case(const char *what, hvd_dtype dt, hvd_reduce_op op, size_t count,
                     data_kind kind, int has_reference) {
    tcase *c = &cases[n_cases++];
    snprintf(c->name, sizeof c->name, "det.%s.%s.%s.%zu", what, mt_dtype_name(dt),
             mt_op_name(op), count);
    c->dt = dt;
    c->op = op;
    c->count = count;
    c->kind = kind;
    c->has_reference = has_reference;
}

static void make_cases(void) {
    static const hvd_dtype floats[] = {HVD_FLOAT32, HVD_FLOAT64, HVD_FLOAT16, HVD_BFLOAT16};
    /* 16384 float32 = 64 KiB (the one-step limit); 530000 x 2 bytes > 1 MiB (in place) */
    static const size_t counts[] = {1, 3, 17, 100, 1000, 4099, 16384, 20000, 70001, 530000};
    for (int d = 0; d < 4; d++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            add_case("order", floats[d], HVD_SUM, counts[k], DATA_ORDER, 1);
    static const size_t product_counts[] = {17, 4099, 70001};
    for (size_t k = 0; k < 3; k++) {
        add_case("order", HVD_FLOAT32, HVD_PRODUCT, product_counts[k], DATA_ORDER, 1);
        add_case("order", HVD_BFLOAT16, HVD_PRODUCT, product_counts[k], DATA_ORDER, 1);
    }
    add_case("order", HVD_FLOAT32, HVD_AVERAGE, 100, DATA_ORDER, 0);
    add_case("order", HVD_FLOAT32, HVD_AVERAGE, 70001, DATA_ORDER, 0);
    static const hvd_reduce_op nan_ops[] = {HVD_MIN, HVD_MAX, HVD_SUM};
    for (int d = 0; d < 4; d++)
        for (int o = 0; o < 3; o++) {
            add_case("nan", floats[d], nan_ops[o], 30, DATA_NAN, 0);     /* one-step */
            add_case("nan", floats[d], nan_ops[o], 40000, DATA_NAN, 0);  /* > 64 KiB */
        }
}

/* ---- runs ------------------------------------------------------------------------------------ */

static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

static void permute(int *p, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mt_hash(seed, (uint64_t)i, 5) % (uint64_t)(i + 1)), tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
}

static void pause_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Runs every case once with schedule s; results land in each case's recv. */
static void run_schedule(mt_ctx *t, int s, int cfg) {
    int order[MAX_CASES], waits[MAX_CASES];
    for (int i = 0; i < n_cases; i++) memset(cases[i].recv, 0xa5, cases[i].count * mt_dtype_size(cases[i].dt));
    if (s == 0 || s == 1) {
        if (s == 0) for (int i = 0; i < n_cases; i++) order[i] = i;
        else permute(order, n_cases, (uint64_t)t->rank * 131u + (uint64_t)cfg + 1u);
        for (int k = 0; k < n_cases; k++) {
            tcase *c = &cases[order[k]];
            const void *send = c->input;
            if (s == 1) { /* in place */
                memcpy(c->recv, c->input, c->count * mt_dtype_size(c->dt));
                send = c->recv;
                if (k % 7 == t->rank % 7) pause_us(50 + 150 * t->rank);
            }
            MT_EXPECT(t, hvd_allreduce_async(c->name, send, c->recv, c->count, c->dt, c->op, NULL,
                                             &c->handle), HVD_OK);
        }
        permute(waits, n_cases, (uint64_t)t->rank + 77u);
        for (int k = 0; k < n_cases; k++) MT_EXPECT(t, hvd_wait(&cases[waits[k]].handle), HVD_OK);
        return;
    }
    /* one grouped all-reduce per (dtype, op, kind), out of place */
    int done[MAX_CASES] = {0};
    const char *names[MAX_CASES];
    const void *sends[MAX_CASES];
    void *recvs[MAX_CASES];
    size_t counts[MAX_CASES];
    for (int i = 0; i < n_cases; i++) {
        if (done[i]) continue;
        int n = 0;
        for (int j = i; j < n_cases; j++) {
            if (done[j] || cases[j].dt != cases[i].dt || cases[j].op != cases[i].op ||
                cases[j].kind != cases[i].kind)
                continue;
            done[j] = 1;
            names[n] = cases[j].name;
            sends[n] = cases[j].input;
            recvs[n] = cases[j].recv;
            counts[n++] = cases[j].count;
        }
        MT_EXPECT(t, hvd_grouped_allreduce(n, names, sends, recvs, counts, cases[i].dt,
                                           cases[i].op), HVD_OK);
    }
}

/* Compares this run's bytes of every case with rank 0's (first run only: then hashes). */
static void compare_with_rank0(mt_ctx *t) {
    for (int i = 0; i < n_cases; i++) {
        tcase *c = &cases[i];
        size_t n = c->count, elem = mt_dtype_size(c->dt);
        unsigned char *theirs = malloc(n * elem);
        if (t->rank == 0) memcpy(theirs, c->recv, n * elem);
        MPI_Bcast(theirs, (int)(n * elem), MPI_BYTE, 0, MPI_COMM_WORLD);
        size_t bad = 0;
        for (size_t e = 0; e < n; e++) {
            uint64_t mine = get_bits(c->recv, c->dt, e), other = get_bits(theirs, c->dt, e);
            if (mine != other && bad++ < 3)
                MT_CHECK(t, 0, "%s[%zu]: bits %#" PRIx64 " here, %#" PRIx64 " on rank 0", c->name, e,
                         mine, other);
        }
        MT_CHECK(t, bad == 0, "%s: %zu of %zu elements differ from rank 0's", c->name, bad, n);
        free(theirs);
    }
}

static void check_reference(mt_ctx *t, const char *where) {
    for (int i = 0; i < n_cases; i++) {
        tcase *c = &cases[i];
        if (!c->has_reference) continue;
        size_t bad = 0, first = 0;
        for (size_t e = 0; e < c->count; e++)
            if (get_bits(c->recv, c->dt, e) != get_bits(c->reference, c->dt, e) && bad++ == 0) first = e;
        MT_CHECK(t, bad == 0, "%s %s: %zu of %zu elements differ from the reference; first [%zu] "
                 "%#" PRIx64 ", expected %#" PRIx64, where, c->name, bad, c->count, first,
                 get_bits(c->recv, c->dt, first), get_bits(c->reference, c->dt, first));
    }
}

static void set_env(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

int main(int argc, char **argv) {
    int hierarchical = argc > 1 && strcmp(argv[1], "--hierarchical") == 0;
    if (argc > 1 && !hierarchical) {
        fprintf(stderr, "usage: test_determinism [--hierarchical]\n");
        return 2;
    }
    int provided = 0, rank = 0, size = 1;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
        provided < MPI_THREAD_MULTIPLE) {
        printf("MPI_Init_thread did not give MPI_THREAD_MULTIPLE (%d)\nFAIL\n", provided);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mt_ctx t;
    mt_init(&t, rank, size);
    if (size < 3 && rank == 0)
        printf("note: np = %d; order bugs only show at np >= 3 (a + b = b + a)\n", size);

    /* The reference order: world rank order, or (hierarchical) nodes in cross-rank order, each
     * node's ranks in local-rank order. Where each rank sits comes from libhvdc itself. */
    int where[2] = {0, 0}, *all = malloc(2 * (size_t)size * sizeof *all), *order = malloc((size_t)size * sizeof *order);
    int *rotated = malloc((size_t)size * sizeof *rotated);
    int group_size = size, local_size = size;
    if (hvd_init() != HVD_OK) {
        printf("hvd_init failed: %s\nFAIL\n", hvd_last_error());
        return 1;
    }
    hvd_local_size(&local_size);
    if (hierarchical) {
        hvd_local_rank(&where[0]);
        hvd_cross_rank(&where[1]);
        group_size = local_size;
    }
    hvd_shutdown();
    /* HVD_CPU_ALLREDUCE=shm across nodes is the two-level all-reduce (node order): the flat
     * checks (rank order) take the ring there */
    int shm_is_flat = hierarchical || local_size == size;
    MPI_Allgather(where, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) order[hierarchical ? all[2 * r + 1] * group_size + all[2 * r] : r] = r;
    for (int k = 0; k < size; k++) rotated[k] = (k + 1) % size; /* flat, starting at rank 1 */

    make_cases();
    mt_begin(&t, "reference in %s order; data order-sensitive", hierarchical ? "node" : "rank");
    size_t sensitive = 0, elements = 0;
    for (int i = 0; i < n_cases; i++) {
        tcase *c = &cases[i];
        size_t bytes = c->count * mt_dtype_size(c->dt);
        c->input = malloc(bytes);
        c->recv = malloc(bytes);
        c->reference = c->has_reference ? malloc(bytes) : NULL;
        for (size_t e = 0; e < c->count; e++) input_element(c, i, rank, size, e, c->input);
        if (!c->has_reference) continue;
        if (c->op == HVD_SUM && c->count >= 100) { /* another order first, to count differences */
            make_reference(c, i, size, rotated, size);
            memcpy(c->recv, c->reference, bytes);
        }
        make_reference(c, i, size, order, group_size);
        if (c->op == HVD_SUM && c->count >= 100) {
            for (size_t e = 0; e < c->count; e++)
                sensitive += get_bits(c->recv, c->dt, e) != get_bits(c->reference, c->dt, e);
            elements += c->count;
        }
    }
    if (rank == 0)
        printf("%zu of %zu SUM elements differ between the expected order and ranks 1, 2, .., 0\n",
               sensitive, elements);
    if (size >= 3) MT_CHECK(&t, sensitive * 10 > elements, "test data is not order-sensitive enough");
    mt_end(&t);

    uint64_t *hashes = calloc((size_t)N_CONFIGS * N_SCHEDULES * (size_t)n_cases, sizeof *hashes);
    for (int cfg = 0; cfg < N_CONFIGS; cfg++) {
        set_env("HVD_FUSION_THRESHOLD", CONFIGS[cfg].threshold);
        set_env("HVD_CYCLE_TIME", CONFIGS[cfg].cycle_ms);
        const char *cpu = CONFIGS[cfg].cpu;
        set_env("HVD_CPU_ALLREDUCE", cpu && strcmp(cpu, "shm") == 0 && !shm_is_flat ? "ring" : cpu);
        hvd_status st = hvd_init();
        if (st != HVD_OK) {
            printf("[rank %d] hvd_init failed: %s\nFAIL\n", rank, hvd_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int s = 0; s < N_SCHEDULES; s++) {
            char where_s[160];
            snprintf(where_s, sizeof where_s,
                     "HVD_FUSION_THRESHOLD=%s HVD_CYCLE_TIME=%s HVD_CPU_ALLREDUCE=%s schedule %d",
                     CONFIGS[cfg].threshold ? CONFIGS[cfg].threshold : "(default)",
                     CONFIGS[cfg].cycle_ms ? CONFIGS[cfg].cycle_ms : "(default)",
                     CONFIGS[cfg].cpu ? CONFIGS[cfg].cpu : "(default)", s);
            mt_begin(&t, "%s: every tensor as in the reference and in the first run", where_s);
            run_schedule(&t, s, cfg);
            check_reference(&t, where_s);
            for (int i = 0; i < n_cases; i++) {
                uint64_t h = fnv(cases[i].recv, cases[i].count * mt_dtype_size(cases[i].dt));
                hashes[((size_t)cfg * N_SCHEDULES + (size_t)s) * (size_t)n_cases + (size_t)i] = h;
                if (cfg == 0 && s == 0) cases[i].first_hash = h;
                MT_CHECK(&t, h == cases[i].first_hash, "%s: bits differ from the first run", cases[i].name);
            }
            mt_end(&t);
            if (cfg == 0 && s == 0) {
                mt_begin(&t, "first run: every tensor's bytes equal rank 0's");
                compare_with_rank0(&t);
                mt_end(&t);
            }
        }
        hvd_shutdown();
    }

    mt_begin(&t, "every run's hashes equal on all ranks");
    size_t n_hashes = (size_t)N_CONFIGS * N_SCHEDULES * (size_t)n_cases;
    uint64_t *root = malloc(n_hashes * sizeof *root);
    if (rank == 0) memcpy(root, hashes, n_hashes * sizeof *root);
    MPI_Bcast(root, (int)n_hashes, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    for (size_t k = 0; k < n_hashes; k++)
        MT_CHECK(&t, hashes[k] == root[k], "config %zu schedule %zu %s: hash differs from rank 0's",
                 k / n_cases / N_SCHEDULES, k / n_cases % N_SCHEDULES, cases[k % n_cases].name);
    mt_end(&t);

    int mine = atomic_load(&t.failures), sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    t.remote_failures = sum - mine;
    int rc = mt_exit_code(&t);
    for (int i = 0; i < n_cases; i++) {
        free(cases[i].input);
        free(cases[i].recv);
        free(cases[i].reference);
    }
    free(hashes);
    free(root);
    free(all);
    free(order);
    free(rotated);
    MPI_Finalize();
    return rc;
}
