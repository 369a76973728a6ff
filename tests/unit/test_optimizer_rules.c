/*
 * Unit test: the inner update rules (update.c) against values worked out by hand from
 * torch.optim's formulas, in float32 and float64; and the shared per-element rules
 * (update_rules.h, which the GPU kernels run too) against the same formulas written out here.
 */
#include <math.h>

#include "check.h"
#include "train/optimizer.h"
#include "train/update_rules.h"

#define NEAR(a, b) (fabs((a) - (b)) <= 1e-9 * (1.0 + fabs(b))) /* eps = 1e-8 moves Adam steps */

/* Runs `steps` SGD steps with a constant gradient g from p = 1; returns p. */
static double sgd(hvd_dtype dtype, int steps, double g, double lr, double mom, int nesterov,
                  double wd) {
    float pf = 1.0f, gf = (float)g;
    double pd = 1.0, buf = 0.0;
    for (int t = 0; t < steps; t++) {
        if (dtype == HVD_FLOAT32)
            hvdc__sgd_update(&pf, &gf, mom > 0 ? &buf : NULL, 1, dtype, lr, mom, nesterov, wd);
        else hvdc__sgd_update(&pd, &g, mom > 0 ? &buf : NULL, 1, dtype, lr, mom, nesterov, wd);
    }
    return dtype == HVD_FLOAT32 ? (double)pf : pd;
}

static double adam(hvd_dtype dtype, int steps, double g, double lr, double wd, int decoupled) {
    float pf = 1.0f, gf = (float)g;
    double pd = 1.0, m = 0.0, v = 0.0;
    for (int t = 1; t <= steps; t++) {
        if (dtype == HVD_FLOAT32)
            hvdc__adam_update(&pf, &gf, &m, &v, 1, dtype, lr, 0.9, 0.999, 1e-8, wd, decoupled,
                              (uint64_t)t);
        else hvdc__adam_update(&pd, &g, &m, &v, 1, dtype, lr, 0.9, 0.999, 1e-8, wd, decoupled,
                               (uint64_t)t);
    }
    return dtype == HVD_FLOAT32 ? (double)pf : pd;
}

int main(void) {
    hvd_dtype dtypes[2] = {HVD_FLOAT32, HVD_FLOAT64};
    for (int k = 0; k < 2; k++) {
        hvd_dtype dt = dtypes[k];
        double tol = dt == HVD_FLOAT32 ? 1e-6 : 1e-12, r;
        double atol = dt == HVD_FLOAT32 ? 1e-6 : 1e-9; // where Adam's eps shows
        // plain: p = 1 - 3 * 0.1 * 1
        r = sgd(dt, 3, 1.0, 0.1, 0.0, 0, 0.0);
        CHECK_TRUE(fabs(r - 0.7) < tol, "sgd plain: %.9f", r);
        // momentum 0.9: buf = 1, 1.9, 2.71; p = 1 - 0.1*(1 + 1.9 + 2.71) = 0.439
        r = sgd(dt, 3, 1.0, 0.1, 0.9, 0, 0.0);
        CHECK_TRUE(fabs(r - 0.439) < tol, "sgd momentum: %.9f", r);
        // nesterov: g + 0.9*buf = 1.9, 2.71; p = 1 - 0.1*(1.9 + 2.71) = 0.539
        r = sgd(dt, 2, 1.0, 0.1, 0.9, 1, 0.0);
        CHECK_TRUE(fabs(r - 0.539) < tol, "sgd nesterov: %.9f", r);
        // weight decay with g = 0: p = 1 - 0.1 * 0.1 * 1 = 0.99, then 0.99 - 0.01*0.99 = 0.9801
        r = sgd(dt, 2, 0.0, 0.1, 0.0, 0, 0.1);
        CHECK_TRUE(fabs(r - 0.9801) < tol, "sgd weight decay: %.9f", r);
        // Adam with a constant gradient: m_hat = g, v_hat = g^2, so each step moves lr*g/(|g|+eps)
        r = adam(dt, 3, 2.0, 0.1, 0.0, 0);
        CHECK_TRUE(fabs(r - (1.0 - 3 * 0.1 * 2.0 / (2.0 + 1e-8))) < atol, "adam: %.9f", r);
        r = adam(dt, 1, -4.0, 0.01, 0.0, 0);
        CHECK_TRUE(fabs(r - 1.01) < atol, "adam negative gradient: %.9f", r);
        // Adam's L2 folds into g (still sign-like on step 1): 1 - 0.1
        r = adam(dt, 1, 2.0, 0.1, 0.5, 0);
        CHECK_TRUE(fabs(r - 0.9) < atol, "adam L2 step 1: %.9f", r);
        // AdamW decays first: 1 * (1 - 0.1*0.1) - 0.1 = 0.89
        r = adam(dt, 1, 2.0, 0.1, 0.1, 1);
        CHECK_TRUE(fabs(r - 0.89) < atol, "adamw: %.9f", r);
        // AdamW with g = 0: only the decay, p = 0.99^2 (m = v = 0 gives 0/(0+eps) = 0)
        r = adam(dt, 2, 0.0, 0.1, 0.1, 1);
        CHECK_TRUE(fabs(r - 0.9801) < tol, "adamw decay only: %.9f", r);
    }
    // Adam bias correction at step 2 with gradients 1 then 3 (by hand):
    // m1 = .1, v1 = .001; m2 = .09 + .3 = .39, v2 = .000999 + .009 = .009999
    // m_hat = .39/.19, v_hat = .009999/.001999; step 2 moves lr * m_hat / (sqrt(v_hat) + eps)
    double p = 1.0, m = 0.0, v = 0.0, g1 = 1.0, g2 = 3.0;
    hvdc__adam_update(&p, &g1, &m, &v, 1, HVD_FLOAT64, 0.01, 0.9, 0.999, 1e-8, 0.0, 0, 1);
    double p1 = p;
    hvdc__adam_update(&p, &g2, &m, &v, 1, HVD_FLOAT64, 0.01, 0.9, 0.999, 1e-8, 0.0, 0, 2);
    double want = p1 - 0.01 * (0.39 / 0.19) / (sqrt(0.009999 / 0.001999) + 1e-8);
    CHECK_TRUE(NEAR(p1, 0.99) && fabs(p - want) < 1e-12, "adam step 2: %.12f, want %.12f", p, want);
    // The element rules alone, on values that are not round: each equals the formula written
    // out independently, bit for bit (same operations in the same order).
    {
        double pp = 0.7312, gg = -0.2193, b = 0.0417, lr = 0.013, mo = 0.85, wd = 0.004;
        double b1 = b, r1 = hvdc__sgd_rule(pp, gg, &b1, lr, mo, 1, wd);
        double g0 = gg + wd * pp, bw = mo * b + g0, want1 = pp - lr * (g0 + mo * bw);
        CHECK_TRUE(r1 == want1 && b1 == bw, "sgd_rule nesterov: %.17g vs %.17g", r1, want1);
        double r0 = hvdc__sgd_rule(pp, gg, NULL, lr, 0.0, 0, wd);
        CHECK_TRUE(r0 == pp - lr * (gg + wd * pp), "sgd_rule plain: %.17g", r0);
        double mm = 0.02, vv = 0.003, c1 = 1.0 - pow(0.9, 5.0), c2 = 1.0 - pow(0.999, 5.0);
        double m1 = mm, v1 = vv;
        double r2 = hvdc__adam_rule(pp, gg, &m1, &v1, lr, 0.9, 0.999, 1e-8, wd, 1, c1, c2);
        double pd = pp * (1.0 - lr * wd), mw = 0.9 * mm + (1.0 - 0.9) * gg;
        double vw = 0.999 * vv + (1.0 - 0.999) * gg * gg;
        double want2 = pd - lr * (mw / c1) / (sqrt(vw / c2) + 1e-8);
        CHECK_TRUE(r2 == want2 && m1 == mw && v1 == vw, "adamw_rule: %.17g vs %.17g", r2, want2);
        // and the array update is the rule applied element by element
        float pa[3] = {0.5f, -1.25f, 2.0f}, ga[3] = {0.1f, 0.2f, -0.3f};
        double ma[3] = {0}, va[3] = {0};
        hvdc__adam_update(pa, ga, ma, va, 3, HVD_FLOAT32, lr, 0.9, 0.999, 1e-8, wd, 0, 1);
        double me = 0.0, ve = 0.0;
        float pe = (float)hvdc__adam_rule(-1.25, (double)0.2f, &me, &ve, lr, 0.9, 0.999, 1e-8, wd,
                                          0, 1.0 - 0.9, 1.0 - 0.999);
        CHECK_TRUE(pa[1] == pe && ma[1] == me && va[1] == ve, "adam array vs rule: %.9g vs %.9g",
                   (double)pa[1], (double)pe);
    }
    CHECK_TRUE(hvdc__opt_state_slots(HVD_OPT_SGD, 0.0) == 0 &&
               hvdc__opt_state_slots(HVD_OPT_SGD, 0.9) == 1 &&
               hvdc__opt_state_slots(HVD_OPT_ADAMW, 0.0) == 2, "state slots");
    return check_verdict("test_optimizer_rules");
}
