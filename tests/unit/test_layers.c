/*
 * test_layers.c - checks every layer of examples/train/layers.c against an independent reference.
 *
 * For each layer the test has a naive double-precision forward written here (plain loops, no
 * BLAS). The float layer's forward must match it, and the float layer's backward, given a
 * random upstream gradient R, must match central finite differences of the scalar
 * L = sum(forward_ref(...) * R) taken in double precision with respect to every input and
 * parameter element. Inputs are random floats, so the float and double code see identical
 * values. Prints "layer NAME forward|backward OK, maxdiff = ..." per check; the exit code is
 * the verdict (0 only if every check passed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

#define FD_EPS 1e-5     /* finite-difference step, in double precision */
#define TOL_FORWARD 1e-5 /* float vs double forward, relative to max(1, |value|) */
#define TOL_BACKWARD 1e-4 /* float analytic gradient vs double finite differences */

static int failures = 0;

static void report(const char *layer, const char *pass, double maxdiff, double tol) {
    int ok = maxdiff <= tol; // NaN fails
    printf("layer %s %s %s, maxdiff = %.3e%s\n", layer, pass, ok ? "OK" : "FAILED", maxdiff,
           ok ? "" : " (above the tolerance)");
    if (!ok) failures++;
}

/* ---- random data ------------------------------------------------------------------------- */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float rand_float(float lo, float hi) { // xorshift64*, deterministic
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * (float)(r >> 40) * (1.0f / 16777216.0f);
}

/* Fills a float array and its exact double copy. Values are kept at least `gap` away from 0
 * so ReLU's kink is never inside the finite-difference step. */
static void fill(float *f, double *d, int n, float gap) {
    for (int i = 0; i < n; i++) {
        float v = rand_float(-1.0f, 1.0f);
        if (fabsf(v) < gap) v = v < 0 ? v - gap : v + gap;
        f[i] = v;
        d[i] = v;
    }
}

static double max_rel_diff(const float *a, const double *ref, int n) {
    double m = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(d <= m)) m = d; // keeps NaN
    }
    return m;
}

/* Central differences of loss(ctx) with respect to each x[i], compared with analytic[i]. */
typedef double (*loss_fn)(const void *ctx);
static double fd_maxdiff(loss_fn loss, const void *ctx, double *x, const float *analytic,
                         int n) {
    double m = 0.0;
    for (int i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + FD_EPS;
        double lp = loss(ctx);
        x[i] = saved - FD_EPS;
        double lm = loss(ctx);
        x[i] = saved;
        double fd = (lp - lm) / (2.0 * FD_EPS);
        double d = fabs(fd - (double)analytic[i]) / fmax(1.0, fabs(fd));
        if (!(d <= m)) m = d;
    }
    return m;
}

static double dot(const double *a, const double *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- linear ------------------------------------------------------------------------------ */

enum { LB = 3, LC = 7, LOC = 5 };
typedef struct {
    double inp[LB * LC], w[LOC * LC], b[LOC], r[LB * LOC];
} linear_ctx;

static void linear_ref(double *out, const linear_ctx *c) {
    for (int b = 0; b < LB; b++)
        for (int o = 0; o < LOC; o++) {
            double s = c->b[o];
            for (int k = 0; k < LC; k++) s += c->inp[b * LC + k] * c->w[o * LC + k];
            out[b * LOC + o] = s;
        }
}

static double linear_loss(const void *ctx) {
    const linear_ctx *c = ctx;
    double out[LB * LOC];
    linear_ref(out, c);
    return dot(out, c->r, LB * LOC);
}

static void test_linear(void) {
    linear_ctx c;
    float inp[LB * LC], w[LOC * LC], b[LOC], r[LB * LOC], out[LB * LOC];
    float dinp[LB * LC], dw[LOC * LC], db[LOC];
    fill(inp, c.inp, LB * LC, 0);
    fill(w, c.w, LOC * LC, 0);
    fill(b, c.b, LOC, 0);
    fill(r, c.r, LB * LOC, 0);
    double ref[LB * LOC];
    linear_ref(ref, &c);
    linear_forward(out, inp, w, b, LB, LC, LOC);
    report("linear", "forward", max_rel_diff(out, ref, LB * LOC), TOL_FORWARD);
    memset(dw, 0xff, sizeof dw); // NaN: backward must overwrite, not accumulate
    memset(db, 0xff, sizeof db);
    linear_backward(dinp, dw, db, r, inp, w, LB, LC, LOC);
    double m = fd_maxdiff(linear_loss, &c, c.inp, dinp, LB * LC);
    m = fmax(m, fd_maxdiff(linear_loss, &c, c.w, dw, LOC * LC));
    m = fmax(m, fd_maxdiff(linear_loss, &c, c.b, db, LOC));
    report("linear", "backward", m, TOL_BACKWARD);
}

/* ---- ReLU -------------------------------------------------------------------------------- */

enum { RN = 40 };
typedef struct {
    double inp[RN], r[RN];
} relu_ctx;

static double relu_loss(const void *ctx) {
    const relu_ctx *c = ctx;
    double s = 0.0;
    for (int i = 0; i < RN; i++) s += (c->inp[i] > 0 ? c->inp[i] : 0.0) * c->r[i];
    return s;
}

static void test_relu(void) {
    relu_ctx c;
    float inp[RN], r[RN], out[RN], dinp[RN];
    double ref[RN];
    fill(inp, c.inp, RN, 0.01f);
    fill(r, c.r, RN, 0);
    for (int i = 0; i < RN; i++) ref[i] = c.inp[i] > 0 ? c.inp[i] : 0.0;
    relu_forward(out, inp, RN);
    report("relu", "forward", max_rel_diff(out, ref, RN), TOL_FORWARD);
    relu_backward(dinp, r, out, RN);
    report("relu", "backward", fd_maxdiff(relu_loss, &c, c.inp, dinp, RN), TOL_BACKWARD);
}

/* ---- softmax + cross-entropy (mean over the batch) ---------------------------------------- */

enum { SB = 4, SV = 10 };
typedef struct {
    double logits[SB * SV];
    uint8_t targets[SB];
} xent_ctx;

static double xent_loss(const void *ctx) { // mean over b of logsumexp(z_b) - z_b[t_b]
    const xent_ctx *c = ctx;
    double total = 0.0;
    for (int b = 0; b < SB; b++) {
        const double *z = c->logits + b * SV;
        double s = 0.0;
        for (int v = 0; v < SV; v++) s += exp(z[v]);
        total += log(s) - z[c->targets[b]];
    }
    return total / SB;
}

static void test_softmax_xent(void) {
    xent_ctx c;
    float logits[SB * SV], probs[SB * SV], dlogits[SB * SV];
    fill(logits, c.logits, SB * SV, 0);
    for (int i = 0; i < SB * SV; i++) { // a wider range than [-1, 1]
        logits[i] *= 4.0f;
        c.logits[i] = logits[i];
    }
    for (int b = 0; b < SB; b++) c.targets[b] = (uint8_t)((3 * b + 1) % SV);
    double loss = softmax_xent_forward(probs, logits, c.targets, SB, SV) / SB;
    double ref = xent_loss(&c);
    report("softmax_xent", "forward", fabs(loss - ref) / fmax(1.0, fabs(ref)), TOL_FORWARD);
    softmax_xent_backward(dlogits, probs, c.targets, 1.0f / SB, SB, SV);
    report("softmax_xent", "backward", fd_maxdiff(xent_loss, &c, c.logits, dlogits, SB * SV),
           TOL_BACKWARD);
}

/* ---- conv 3x3, padding 1 ------------------------------------------------------------------ */

enum { CB = 2, CC = 3, CH = 5, CW = 6, COC = 4, CK = CC * 9 };
typedef struct {
    double inp[CB * CC * CH * CW], w[COC * CK], b[COC], r[CB * COC * CH * CW];
} conv_ctx;

static void conv_ref(double *out, const conv_ctx *c) {
    for (int b = 0; b < CB; b++)
        for (int o = 0; o < COC; o++)
            for (int y = 0; y < CH; y++)
                for (int x = 0; x < CW; x++) {
                    double s = c->b[o];
                    for (int ch = 0; ch < CC; ch++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int sy = y + ky - 1, sx = x + kx - 1;
                                if (sy < 0 || sy >= CH || sx < 0 || sx >= CW) continue;
                                s += c->w[((o * CC + ch) * 3 + ky) * 3 + kx] *
                                     c->inp[((b * CC + ch) * CH + sy) * CW + sx];
                            }
                    out[((b * COC + o) * CH + y) * CW + x] = s;
                }
}

static double conv_loss(const void *ctx) {
    const conv_ctx *c = ctx;
    static double out[CB * COC * CH * CW];
    conv_ref(out, c);
    return dot(out, c->r, CB * COC * CH * CW);
}

static void test_conv3x3(void) {
    static conv_ctx c;
    enum { NI = CB * CC * CH * CW, NO = CB * COC * CH * CW };
    static float inp[NI], w[COC * CK], b[COC], r[NO], out[NO], col[CB * CK * CH * CW];
    static float dinp[NI], dw[COC * CK], db[COC], dcol[CK * CH * CW];
    static double ref[NO];
    fill(inp, c.inp, NI, 0);
    fill(w, c.w, COC * CK, 0);
    fill(b, c.b, COC, 0);
    fill(r, c.r, NO, 0);
    conv_ref(ref, &c);
    conv3x3_forward(out, col, inp, w, b, CB, CC, CH, CW, COC);
    report("conv3x3", "forward", max_rel_diff(out, ref, NO), TOL_FORWARD);
    memset(dw, 0xff, sizeof dw);
    memset(db, 0xff, sizeof db);
    conv3x3_backward(dinp, dw, db, dcol, r, col, w, CB, CC, CH, CW, COC);
    double m = fd_maxdiff(conv_loss, &c, c.inp, dinp, NI);
    m = fmax(m, fd_maxdiff(conv_loss, &c, c.w, dw, COC * CK));
    m = fmax(m, fd_maxdiff(conv_loss, &c, c.b, db, COC));
    report("conv3x3", "backward", m, TOL_BACKWARD);
}

/* ---- max pooling 2x2 ---------------------------------------------------------------------- */

enum { PB = 2, PC = 3, PH = 6, PW = 4, PN = PB * PC * PH * PW, PNO = PN / 4 };
typedef struct {
    double inp[PN], r[PNO];
} pool_ctx;

static void pool_ref(double *out, const double *inp) {
    for (int bc = 0; bc < PB * PC; bc++)
        for (int y = 0; y < PH / 2; y++)
            for (int x = 0; x < PW / 2; x++) {
                const double *p = inp + (bc * PH + 2 * y) * PW + 2 * x;
                out[(bc * (PH / 2) + y) * (PW / 2) + x] =
                    fmax(fmax(p[0], p[1]), fmax(p[PW], p[PW + 1]));
            }
}

static double pool_loss(const void *ctx) {
    const pool_ctx *c = ctx;
    double out[PNO];
    pool_ref(out, c->inp);
    return dot(out, c->r, PNO);
}

static void test_maxpool2(void) {
    pool_ctx c;
    float inp[PN], r[PNO], out[PNO], dinp[PN];
    int32_t argmax[PNO];
    double ref[PNO];
    fill(inp, c.inp, PN, 0);
    fill(r, c.r, PNO, 0);
    pool_ref(ref, c.inp);
    maxpool2_forward(out, argmax, inp, PB, PC, PH, PW);
    report("maxpool2", "forward", max_rel_diff(out, ref, PNO), TOL_FORWARD);
    maxpool2_backward(dinp, r, argmax, PB, PC, PH, PW);
    report("maxpool2", "backward", fd_maxdiff(pool_loss, &c, c.inp, dinp, PN), TOL_BACKWARD);
}

int main(void) {
    test_linear();
    test_relu();
    test_softmax_xent();
    test_conv3x3();
    test_maxpool2();
    if (failures > 0) {
        printf("%d layer check(s) FAILED\n", failures);
        return EXIT_FAILURE;
    }
    printf("all layer checks passed\n");
    return EXIT_SUCCESS;
}
