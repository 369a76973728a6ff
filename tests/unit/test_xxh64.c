/* Unit test: XXH64 (base/xxh64.h) against the reference implementation: the vectors below
 * were computed with libxxhash 0.8.1 (Debian's libxxhash0, XXH64) over the bytes of pattern(),
 * at lengths that take every path (under 4, 4-7 and 8-31 bytes; whole stripes of 32 with each
 * kind of tail) and two seeds; plus the specification's "abc". */
#include <stdint.h>
#include <string.h>

#include "base/xxh64.h"
#include "check.h"

static const struct {
    size_t nbytes;
    uint64_t seed0, seed_2654435761;
} vectors[] = {
    {0, 0xef46db3751d8e999ull, 0xac75fda2929b17efull},
    {1, 0x8a4127811b21e730ull, 0x211ae13247ce135full},
    {3, 0x8cba1380c478af03ull, 0x01acef0900008d95ull},
    {4, 0xb08e888306b1d25full, 0x938247b51981d60aull},
    {5, 0xe6cd5e64fd785de4ull, 0xc6692b7809dff9cfull},
    {7, 0x46821d11f56d47edull, 0x26b11875a337ce72ull},
    {8, 0x88a4da93ff303357ull, 0x4ba8df99d5e352d3ull},
    {9, 0x505223c628c2d6a1ull, 0xed669aabe37e1f32ull},
    {12, 0x449cdcebedf06c63ull, 0x364ccb77a69b7ce3ull},
    {31, 0x5e8929b5f615b97dull, 0x9f1676298b313bb7ull},
    {32, 0x4d604c2f05f019ebull, 0xabfaff783233a0d7ull},
    {33, 0xd5c4f7375ef619d7ull, 0x9f67024145741c2cull},
    {35, 0x373a188c5e24c4b6ull, 0x3197924ddac216eaull},
    {63, 0x932ca19af43f9ad3ull, 0x5e8a6c4bd310e061ull},
    {64, 0xd373d11968a3f069ull, 0x36173330e30d2fe6ull},
    {100, 0x5410905d6b6a0d45ull, 0x953ddfbf0e8a779dull},
    {1000, 0xe18868a96fa5b163ull, 0xb9c47d00f6811584ull},
    {4099, 0xf297bd61264c9719ull, 0xf5cafe0204a146b1ull},
};

int main(void) {
    static unsigned char pattern[5000];
    for (int i = 0; i < 5000; i++) pattern[i] = (unsigned char)(((i * 7919 + 13) >> 3) & 255);
    for (size_t k = 0; k < sizeof vectors / sizeof vectors[0]; k++) {
        size_t n = vectors[k].nbytes;
        uint64_t h0 = hvdc__xxh64(pattern, n, 0), h1 = hvdc__xxh64(pattern, n, 2654435761u);
        CHECK_TRUE(h0 == vectors[k].seed0, "%zu bytes, seed 0: %016llx, reference %016llx", n,
                   (unsigned long long)h0, (unsigned long long)vectors[k].seed0);
        CHECK_TRUE(h1 == vectors[k].seed_2654435761, "%zu bytes, seed 2654435761: %016llx, "
                   "reference %016llx", n, (unsigned long long)h1,
                   (unsigned long long)vectors[k].seed_2654435761);
    }
    CHECK_TRUE(hvdc__xxh64("abc", 3, 0) == 0x44bc2cf5ad770999ull, "\"abc\"");
    CHECK_TRUE(hvdc__xxh64(NULL, 0, 0) == 0xef46db3751d8e999ull, "NULL, 0 bytes");
    /* the input's alignment does not matter */
    static unsigned char shifted[1001];
    memcpy(shifted + 1, pattern, 1000);
    CHECK_TRUE(hvdc__xxh64(shifted + 1, 1000, 0) == 0xe18868a96fa5b163ull, "unaligned input");
    return check_verdict("xxh64");
}
