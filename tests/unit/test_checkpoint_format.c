/*
 * Unit test: the checkpoint format (ckpt_format.c) in memory. A round trip restores every
 * byte; every truncation and every single-byte corruption of a whole file is refused with
 * HVD_ERR_INVALID_ARG and leaves the destination untouched; a file from a different model,
 * optimizer or sampler is refused with HVD_ERR_MISMATCH and a message naming the difference.
 * The CRC-32 is checked against its standard check value and against zlib's crc32.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "train/ckpt_format.h"

enum { A = 5, B = 3, C = 4 }; // element counts of the three tensors

typedef struct fixture {
    float a[A];
    double b[B];
    float c[C];
    double state[3][2 * A]; // slots = 2
    hvdc__ckpt_tensor t[3];
    hvdc__ckpt ck;
} fixture;

/* A model of three tensors; values depend on salt so source and destination differ. */
static void fixture_init(fixture *f, int salt) {
    for (int i = 0; i < A; i++) f->a[i] = (float)(salt * 100 + i);
    for (int i = 0; i < B; i++) f->b[i] = salt * 1000.0 + i + 0.5;
    for (int i = 0; i < C; i++) f->c[i] = (float)(-salt - i);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2 * A; i++) f->state[k][i] = salt + 0.25 * i + k;
    f->t[0] = (hvdc__ckpt_tensor){"fc1.weight", HVD_FLOAT32, A, f->a, f->state[0]};
    f->t[1] = (hvdc__ckpt_tensor){"fc1.bias", HVD_FLOAT64, B, f->b, f->state[1]};
    f->t[2] = (hvdc__ckpt_tensor){"out", HVD_FLOAT32, C, f->c, f->state[2]};
    f->ck = (hvdc__ckpt){.num_tensors = 3, .tensors = f->t, .kind = HVD_OPT_ADAM, .slots = 2,
                         .steps = (uint64_t)salt * 7, .has_sampler = 1, .sampler_shuffle = 1,
                         .sampler_drop_last = 0, .sampler_size = 60000,
                         .sampler_seed = (uint64_t)salt, .sampler_epoch = (uint64_t)salt + 1,
                         .info = {.epoch = 3, .step = (uint64_t)salt, .user = {1, 2, 3, 4}}};
}

/* Nothing the decoder may write has changed since fixture_init(f, salt). */
static int untouched(const fixture *f, int salt) {
    fixture ref;
    fixture_init(&ref, salt);
    return memcmp(f->a, ref.a, sizeof f->a) == 0 && memcmp(f->b, ref.b, sizeof f->b) == 0 &&
           memcmp(f->c, ref.c, sizeof f->c) == 0 && memcmp(f->state, ref.state, sizeof f->state) == 0 &&
           f->ck.steps == ref.ck.steps && f->ck.sampler_seed == ref.ck.sampler_seed &&
           f->ck.info.step == ref.ck.info.step;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int main(void) {
    // CRC-32: the standard check value, and zlib's on a few lengths and offsets.
    CHECK_TRUE(hvdc__crc32(0, "123456789", 9) == 0xCBF43926u, "crc32 check value");
    unsigned char data[4099];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 131u + (i >> 7));
    for (size_t n = 0; n < sizeof data; n += 373) {
        uint32_t ours = hvdc__crc32(0, data + 3, n - (n > 3 ? 3 : n));
        uint32_t theirs = (uint32_t)crc32(0L, data + 3, (uInt)(n - (n > 3 ? 3 : n)));
        CHECK_TRUE(ours == theirs, "crc32 of %zu bytes: %08x, zlib %08x", n, ours, theirs);
    }
    CHECK_TRUE(hvdc__crc32(hvdc__crc32(0, data, 1000), data + 1000, 3099) ==
               hvdc__crc32(0, data, 4099), "crc32 continues across calls");

    // Round trip.
    fixture src, dst;
    fixture_init(&src, 1);
    fixture_init(&dst, 2);
    unsigned char *buf = NULL;
    size_t n = 0;
    CHECK_TRUE(hvdc__ckpt_encode(&src.ck, &buf, &n) == HVD_OK, "encode");
    CHECK_TRUE(n > HVDC_CKPT_HEADER_NBYTES && memcmp(buf, "HVDCCKPT", 8) == 0 && buf[8] == 1 &&
               buf[12] == 64, "header starts with the magic, version 1, header size 64");
    dst.ck.sampler_size = 60000;
    hvd_status st = hvdc__ckpt_decode(buf, n, "ok.ckpt", &dst.ck);
    CHECK_TRUE(st == HVD_OK, "decode: %s", hvd_last_error());
    CHECK_TRUE(memcmp(src.a, dst.a, sizeof src.a) == 0 && memcmp(src.b, dst.b, sizeof src.b) == 0 &&
               memcmp(src.c, dst.c, sizeof src.c) == 0 &&
               memcmp(src.state[0], dst.state[0], 2 * A * sizeof(double)) == 0 &&
               memcmp(src.state[1], dst.state[1], 2 * B * sizeof(double)) == 0 &&
               memcmp(src.state[2], dst.state[2], 2 * C * sizeof(double)) == 0,
               "values and state restored");
    CHECK_TRUE(dst.ck.steps == 7 && dst.ck.sampler_seed == 1 && dst.ck.sampler_epoch == 2 &&
               dst.ck.info.epoch == 3 && dst.ck.info.step == 1 && dst.ck.info.user[3] == 4,
               "steps, sampler and info restored");

    // Every truncation is refused and changes nothing.
    int bad_trunc = 0;
    for (size_t len = 0; len < n; len++) {
        fixture_init(&dst, 2);
        if (hvdc__ckpt_decode(buf, len, "cut.ckpt", &dst.ck) != HVD_ERR_INVALID_ARG ||
            !untouched(&dst, 2))
            bad_trunc++;
    }
    CHECK_TRUE(bad_trunc == 0, "%d of %zu truncations were not refused cleanly", bad_trunc, n);
    fixture_init(&dst, 2);
    hvdc__ckpt_decode(buf, n - 1, "cut.ckpt", &dst.ck);
    CHECK_TRUE(strstr(hvd_last_error(), "truncated") && strstr(hvd_last_error(), "cut.ckpt"),
               "truncation message: %s", hvd_last_error());

    // Every single-byte corruption is refused and changes nothing.
    int bad_flip = 0;
    for (size_t i = 0; i < n; i++) {
        buf[i] ^= 0x20;
        fixture_init(&dst, 2);
        if (hvdc__ckpt_decode(buf, n, "flip.ckpt", &dst.ck) != HVD_ERR_INVALID_ARG ||
            !untouched(&dst, 2))
            bad_flip++;
        buf[i] ^= 0x20;
    }
    CHECK_TRUE(bad_flip == 0, "%d of %zu byte flips were not refused cleanly", bad_flip, n);
    buf[n - 3] ^= 1;
    hvdc__ckpt_decode(buf, n, "flip.ckpt", &dst.ck);
    CHECK_TRUE(strstr(hvd_last_error(), "corrupted") != NULL, "corruption message: %s",
               hvd_last_error());
    buf[n - 3] ^= 1;

    // Another version (with a valid header CRC) is refused by name.
    put32(buf + 8, 2);
    put32(buf + 60, hvdc__crc32(0, buf, 60));
    fixture_init(&dst, 2);
    st = hvdc__ckpt_decode(buf, n, "v2.ckpt", &dst.ck);
    CHECK_TRUE(st == HVD_ERR_INVALID_ARG && strstr(hvd_last_error(), "version 2") &&
               untouched(&dst, 2), "version 2: %s", hvd_last_error());
    put32(buf + 8, 1);
    put32(buf + 60, hvdc__crc32(0, buf, 60));

    // A different model: each kind of difference is a mismatch that names it.
    struct {
        const char *what, *expect;
    } cases[] = {{"count", "'out' (float32, 4 elements) in the file but 'out' (float32, 3"},
                 {"name", "'fc1.bias' (float64, 3 elements) in the file but 'fc2.bias'"},
                 {"dtype", "(float64, 3 elements) in the file but 'fc1.bias' (float32"},
                 {"tensors", "3 parameter tensors, this optimizer 2"},
                 {"kind", "optimizer kind 1"},
                 {"sampler", "sampler over 60000 examples"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fixture_init(&dst, 2);
        hvdc__ckpt_tensor *t = dst.t;
        if (k == 0) t[2].count = 3;
        if (k == 1) t[1].name = "fc2.bias";
        if (k == 2) t[1].dtype = HVD_FLOAT32;
        if (k == 3) dst.ck.num_tensors = 2;
        if (k == 4) dst.ck.kind = HVD_OPT_SGD, dst.ck.slots = 1;
        if (k == 5) dst.ck.sampler_size = 50000;
        st = hvdc__ckpt_decode(buf, n, "other.ckpt", &dst.ck);
        CHECK_TRUE(st == HVD_ERR_MISMATCH && strstr(hvd_last_error(), cases[k].expect) &&
                   untouched(&dst, 2), "different %s: %s: %s", cases[k].what,
                   hvd_status_string(st), hvd_last_error());
    }
    // A file that is no checkpoint at all.
    st = hvdc__ckpt_decode((const unsigned char *)"\x1f\x8b hello", 8, "x.gz", &dst.ck);
    CHECK_TRUE(st == HVD_ERR_INVALID_ARG && strstr(hvd_last_error(), "not a libhvdc checkpoint"),
               "foreign file: %s", hvd_last_error());
    free(buf);
    return check_verdict("test_checkpoint_format");
}
