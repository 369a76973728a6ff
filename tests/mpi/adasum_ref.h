/*
 * adasum_ref.h - a direct reference of Horovod 0.28's Adasum for the tests (test_adasum.c here,
 * tests/unit/test_adasum.c), written plainly from the definition, not from libhvdc's VHDD:
 *
 *     adasum(ranks lo .. lo+n-1) = combine(adasum(lo .. lo+n/2-1), adasum(lo+n/2 .. lo+n-1))
 *     combine(a, b) = (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b   per tensor, whole tensor
 *
 * (a coefficient is 1 when its norm^2 is below sqrt(DBL_MIN)), lower ranks on the left, as
 * Horovod's VHDD pairs them. Values are doubles holding numbers of the dtype; round_to rounds
 * to it. Arithmetic as Horovod's ScaledAdd/ComputeDotAndNormSqrds: float32 products and sums in
 * double, the combine in double rounded once; float16/bfloat16 products and sums in double,
 * the combine as fmaf(bc, b, ac * a) in float. The dot products here are summed from index 0
 * up on one rank, where the VHDD sums partial ones across ranks: the two may differ in the
 * last bits of a coefficient (see the tests for the tolerance that follows).
 * defines: adasum_ref_round_fn, adasum_ref_combine, adasum_ref
 * Pure; test code only.
 */
#ifndef HVDC_ADASUM_REF_H
#define HVDC_ADASUM_REF_H

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hvdc.h"

typedef double (*adasum_ref_round_fn)(hvd_dtype dt, double v);

/* a = combine(a, b) for each of the n tensors laid out back to back (counts[n]). */
static void adasum_ref_combine(double *a, const double *b, const size_t *counts, size_t n,
                               hvd_dtype dt, adasum_ref_round_fn round_to) {
    size_t at = 0;
    for (size_t t = 0; t < n; t++) {
        double dot = 0, aa = 0, bb = 0;
        for (size_t i = at; i < at + counts[t]; i++) {
            dot += a[i] * b[i];
            aa += a[i] * a[i];
            bb += b[i] * b[i];
        }
        double ac = aa >= sqrt(DBL_MIN) ? 1.0 - dot / aa * 0.5 : 1.0;
        double bc = bb >= sqrt(DBL_MIN) ? 1.0 - dot / bb * 0.5 : 1.0;
        for (size_t i = at; i < at + counts[t]; i++) {
            if (dt == HVD_FLOAT16 || dt == HVD_BFLOAT16)
                a[i] = round_to(dt, fmaf((float)bc, (float)b[i], (float)ac * (float)a[i]));
            else
                a[i] = round_to(dt, ac * a[i] + bc * b[i]);
        }
        at += counts[t];
    }
}

/* out (total elements) = Adasum of inputs[lo .. lo+n-1] (n a power of 2). */
static void adasum_ref(double *out, double *const *inputs, int lo, int n, const size_t *counts,
                       size_t n_tensors, size_t total, hvd_dtype dt, adasum_ref_round_fn round_to) {
    if (n == 1) {
        memcpy(out, inputs[lo], total * sizeof *out);
        return;
    }
    double *right = malloc((total ? total : 1) * sizeof *right);
    adasum_ref(out, inputs, lo, n / 2, counts, n_tensors, total, dt, round_to);
    adasum_ref(right, inputs, lo + n / 2, n / 2, counts, n_tensors, total, dt, round_to);
    adasum_ref_combine(out, right, counts, n_tensors, dt, round_to);
    free(right);
}

#endif
