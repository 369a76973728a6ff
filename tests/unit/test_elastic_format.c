/*
 * Unit test: the elastic commit format (libhvdc/src/train/elastic_format.c). A commit with an
 * optimizer section, a sampler and tensors and blobs of every dtype round-trips exactly; every
 * truncation is refused, and so is every single flipped byte (each is caught by a CRC-32 or a
 * structural check); zlib's crc32 is the independent reference for the header's checksums.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "hvdc.h"
#include "train/elastic_format.h"

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int main(void) {
    unsigned char ckpt[37];
    for (size_t i = 0; i < sizeof ckpt; i++) ckpt[i] = (unsigned char)(i * 13 + 1);
    double f64[5] = {1.5, -2.25, 3e100, 0.0, -0.0};
    int32_t i32[3] = {7, -8, 1 << 30};
    uint8_t blob[11] = "hello blob";
    hvdc__elastic_entry entries[4] = {
        {.name = "weights", .kind = HVDC_ELASTIC_TENSOR, .dtype = HVD_FLOAT64, .count = 5, .data = f64},
        {.name = "progress", .kind = HVDC_ELASTIC_TENSOR, .dtype = HVD_INT32, .count = 3, .data = i32},
        {.name = "torch.state_dict", .kind = HVDC_ELASTIC_BLOB, .dtype = HVD_UINT8, .count = 11, .data = blob},
        {.name = "empty", .kind = HVDC_ELASTIC_BLOB, .dtype = HVD_UINT8, .count = 0, .data = NULL},
    };
    hvdc__elastic_image img = {
        .sequence = 42, .size = 3, .time_ms = 1700000000123ull, .ckpt = ckpt,
        .ckpt_nbytes = sizeof ckpt, .has_sampler = 1,
        .sampler = {.dataset_size = 60000, .seed = 9, .epoch = 2, .position = 1280, .shuffle = 1,
                    .drop_last = 1},
        .num_entries = 4, .entries = entries};
    unsigned char *buf = NULL;
    size_t n = 0;
    CHECK_TRUE(hvdc__elastic_encode(&img, &buf, &n) == HVD_OK, "encode: %s", hvd_last_error());
    CHECK_TRUE(memcmp(buf, HVDC_ELASTIC_MAGIC, 8) == 0, "magic");
    CHECK_TRUE(le32(buf + 60) == (uint32_t)crc32(0, buf, 60), "header CRC is zlib's crc32");
    CHECK_TRUE(le32(buf + 24) == (uint32_t)crc32(0, buf + 64, (uInt)(n - 64)),
               "body CRC is zlib's crc32");

    hvdc__elastic_image got;
    CHECK_TRUE(hvdc__elastic_parse(buf, n, "x", &got) == HVD_OK, "parse: %s", hvd_last_error());
    CHECK_TRUE(got.sequence == 42 && got.size == 3 && got.time_ms == img.time_ms, "header fields");
    CHECK_TRUE(got.ckpt_nbytes == sizeof ckpt && memcmp(got.ckpt, ckpt, sizeof ckpt) == 0,
               "optimizer section");
    CHECK_TRUE(got.has_sampler && memcmp(&got.sampler, &img.sampler, sizeof img.sampler) == 0,
               "sampler");
    CHECK_TRUE(got.num_entries == 4, "entries %u", got.num_entries);
    for (uint32_t i = 0; i < got.num_entries && i < 4; i++) {
        const hvdc__elastic_entry *a = &entries[i], *b = &got.entries[i];
        size_t nb = a->count * hvd_dtype_size(a->dtype);
        CHECK_TRUE(strcmp(a->name, b->name) == 0 && a->kind == b->kind && a->dtype == b->dtype &&
                   a->count == b->count && (nb == 0 || memcmp(a->data, b->data, nb) == 0),
                   "entry %u ('%s') differs after the round trip", i, a->name);
    }
    free(got.entries);

    // Every truncation and every flipped byte is refused (and leaves *img zeroed).
    int truncs = 0, flips = 0;
    for (size_t len = 0; len < n; len++) {
        hvdc__elastic_image x;
        truncs += hvdc__elastic_parse(buf, len, "x", &x) == HVD_ERR_INVALID_ARG &&
                  x.entries == NULL;
    }
    CHECK_TRUE(truncs == (int)n, "%zu truncations, %d refused", n, truncs);
    for (size_t i = 0; i < n; i++) {
        hvdc__elastic_image x;
        buf[i] ^= 0x10;
        flips += hvdc__elastic_parse(buf, n, "x", &x) == HVD_ERR_INVALID_ARG;
        buf[i] ^= 0x10;
    }
    CHECK_TRUE(flips == (int)n, "%zu flipped bytes, %d refused", n, flips);
    hvdc__elastic_image x;
    buf[8] = 2; // another version: refused by name, not as corruption
    CHECK_TRUE(hvdc__elastic_parse(buf, n, "x", &x) == HVD_ERR_INVALID_ARG &&
               strstr(hvd_last_error(), "version 2") != NULL, "version: %s", hvd_last_error());
    free(buf);

    // Nothing but a header: no optimizer, sampler or entries.
    hvdc__elastic_image none = {.sequence = 1, .size = 1};
    CHECK_TRUE(hvdc__elastic_encode(&none, &buf, &n) == HVD_OK && n == HVDC_ELASTIC_HEADER_NBYTES,
               "empty commit is %zu bytes", n);
    CHECK_TRUE(hvdc__elastic_parse(buf, n, "x", &got) == HVD_OK && got.ckpt == NULL &&
               !got.has_sampler && got.num_entries == 0, "empty commit parses");
    free(got.entries);
    free(buf);
    return check_verdict("test_elastic_format");
}
