/*
 * Unit test: the inner update rules (update.c) against values worked out by hand from
 * torch.optim's formulas, in float32 and float64.
 */
#include <math.h>

#include "check.h"
#include "optimizer.h"

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
    CHECK_TRUE(hvdc__opt_state_slots(HVD_OPT_SGD, 0.0) == 0 &&
               hvdc__opt_state_slots(HVD_OPT_SGD, 0.9) == 1 &&
               hvdc__opt_state_slots(HVD_OPT_ADAMW, 0.0) == 2, "state slots");
    return check_verdict("test_optimizer_rules");
}
