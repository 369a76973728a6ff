/*
 * layers.c - the layers declared in layers.h. Matrix products go to cblas_sgemm (OpenBLAS);
 * the rest are plain loops. Single-threaded unless BLAS itself uses threads.
 */
#include "layers.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* ---- linear ------------------------------------------------------------------------------ */

void linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                    int B, int C, int OC) {
    // out (B, OC) starts as the bias in every row, then += inp (B, C) @ weight^T (C, OC)
    for (int b = 0; b < B; b++) memcpy(out + (size_t)b * OC, bias, (size_t)OC * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, weight, C,
                1.0f, out, OC);
}

void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int B, int C, int OC) {
    // dweight (OC, C) = dout^T (OC, B) @ inp (B, C)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC, inp, C,
                0.0f, dweight, C);
    // dbias (OC) = column sums of dout
    memset(dbias, 0, (size_t)OC * sizeof(float));
    for (int b = 0; b < B; b++) {
        const float *row = dout + (size_t)b * OC;
        for (int o = 0; o < OC; o++) dbias[o] += row[o];
    }
    // dinp (B, C) = dout (B, OC) @ weight (OC, C)
    if (dinp != NULL) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC,
                    weight, C, 0.0f, dinp, C);
    }
}

/* ---- ReLU -------------------------------------------------------------------------------- */

void relu_forward(float *out, const float *inp, int N) {
    for (int i = 0; i < N; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float *dinp, const float *dout, const float *out, int N) {
    for (int i = 0; i < N; i++) {
        float d = dout[i]; // loaded unconditionally, so the compiler can vectorize the select
        dinp[i] = out[i] > 0.0f ? d : 0.0f;
    }
}

/* ---- softmax + cross-entropy ------------------------------------------------------------- */

double softmax_xent_forward(float *probs, const float *logits, const uint8_t *targets, int B,
                            int V) {
    double loss = 0.0;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * V;
        float *p = probs + (size_t)b * V;
        float maxz = -FLT_MAX;
        for (int v = 0; v < V; v++) maxz = z[v] > maxz ? z[v] : maxz;
        double sum = 0.0;
        for (int v = 0; v < V; v++) {
            p[v] = expf(z[v] - maxz);
            sum += p[v];
        }
        for (int v = 0; v < V; v++) p[v] = (float)(p[v] / sum);
        // -log softmax(z)[t] = log(sum exp(z - maxz)) - (z[t] - maxz), exact even when p[t] ~ 0
        loss += log(sum) - (double)(z[targets[b]] - maxz);
    }
    return loss;
}

void softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *targets,
                           float scale, int B, int V) {
    for (int b = 0; b < B; b++) {
        const float *p = probs + (size_t)b * V;
        float *d = dlogits + (size_t)b * V;
        for (int v = 0; v < V; v++) d[v] = scale * p[v];
        d[targets[b]] -= scale;
    }
}

/* ---- 3x3 convolution by im2col ------------------------------------------------------------
 * col row (c*9 + ky*3 + kx), column (y*W + x) holds inp[c][y+ky-1][x+kx-1], or 0 outside.
 * For a tap (dy, dx) = (ky-1, kx-1), output column x reads input column x+dx, which exists for
 * x in [x0, x1) = [max(0, -dx), min(W, W - dx)); the one column outside is padding. */

static void im2col3x3(float *col, const float *img, int C, int H, int W) {
    for (int c = 0; c < C; c++) {
        for (int k = 0; k < 9; k++) {
            int dy = k / 3 - 1, dx = k % 3 - 1;
            int x0 = dx < 0 ? 1 : 0, x1 = dx > 0 ? W - 1 : W;
            float *row = col + ((size_t)c * 9 + k) * H * W;
            const float *src = img + (size_t)c * H * W;
            for (int y = 0; y < H; y++) {
                float *dst = row + (size_t)y * W;
                int sy = y + dy;
                if (sy < 0 || sy >= H) {
                    memset(dst, 0, (size_t)W * sizeof(float));
                    continue;
                }
                if (x0 > 0) dst[0] = 0.0f;
                memcpy(dst + x0, src + (size_t)sy * W + x0 + dx, (size_t)(x1 - x0) * sizeof(float));
                if (x1 < W) dst[W - 1] = 0.0f;
            }
        }
    }
}

/* The adjoint of im2col3x3: img (C, H, W) = sum of each col entry into the pixel it came from. */
static void col2im3x3(float *img, const float *col, int C, int H, int W) {
    memset(img, 0, (size_t)C * H * W * sizeof(float));
    for (int c = 0; c < C; c++) {
        for (int k = 0; k < 9; k++) {
            int dy = k / 3 - 1, dx = k % 3 - 1;
            int x0 = dx < 0 ? 1 : 0, x1 = dx > 0 ? W - 1 : W;
            const float *row = col + ((size_t)c * 9 + k) * H * W;
            float *dst = img + (size_t)c * H * W;
            for (int y = 0; y < H; y++) {
                int sy = y + dy;
                if (sy < 0 || sy >= H) continue;
                const float *s = row + (size_t)y * W;
                float *d = dst + (size_t)sy * W;
                for (int x = x0; x < x1; x++) d[x + dx] += s[x];
            }
        }
    }
}

void conv3x3_forward(float *out, float *col, const float *inp, const float *weight,
                     const float *bias, int B, int C, int H, int W, int OC) {
    int HW = H * W, K = C * 9;
    for (int b = 0; b < B; b++) {
        float *col_b = col + (size_t)b * K * HW;
        float *out_b = out + (size_t)b * OC * HW;
        im2col3x3(col_b, inp + (size_t)b * C * HW, C, H, W);
        for (int o = 0; o < OC; o++) {
            for (int i = 0; i < HW; i++) out_b[(size_t)o * HW + i] = bias[o];
        }
        // out_b (OC, HW) += weight (OC, K) @ col_b (K, HW)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, HW, K, 1.0f, weight, K,
                    col_b, HW, 1.0f, out_b, HW);
    }
}

void conv3x3_backward(float *dinp, float *dweight, float *dbias, float *dcol,
                      const float *dout, const float *col, const float *weight, int B, int C,
                      int H, int W, int OC) {
    int HW = H * W, K = C * 9;
    memset(dbias, 0, (size_t)OC * sizeof(float));
    for (int b = 0; b < B; b++) {
        const float *dout_b = dout + (size_t)b * OC * HW;
        const float *col_b = col + (size_t)b * K * HW;
        // dweight (OC, K) (+)= dout_b (OC, HW) @ col_b^T (HW, K)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, K, HW, 1.0f, dout_b, HW,
                    col_b, HW, b == 0 ? 0.0f : 1.0f, dweight, K);
        for (int o = 0; o < OC; o++) {
            const float *row = dout_b + (size_t)o * HW;
            float s = 0.0f;
            for (int i = 0; i < HW; i++) s += row[i];
            dbias[o] += s;
        }
        if (dinp != NULL) {
            // dcol (K, HW) = weight^T (K, OC) @ dout_b (OC, HW), then back to image layout
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, HW, OC, 1.0f, weight, K,
                        dout_b, HW, 0.0f, dcol, HW);
            col2im3x3(dinp + (size_t)b * C * HW, dcol, C, H, W);
        }
    }
}

/* ---- 2x2 max pooling --------------------------------------------------------------------- */

void maxpool2_forward(float *out, int32_t *argmax, const float *inp, int B, int C, int H,
                      int W) {
    int OH = H / 2, OW = W / 2;
    for (int bc = 0; bc < B * C; bc++) {
        const float *src = inp + (size_t)bc * H * W;
        for (int y = 0; y < OH; y++) {
            for (int x = 0; x < OW; x++) {
                int best = (2 * y) * W + 2 * x;
                int cand[3] = {best + 1, best + W, best + W + 1};
                for (int k = 0; k < 3; k++) best = src[cand[k]] > src[best] ? cand[k] : best;
                size_t o = (size_t)bc * OH * OW + (size_t)y * OW + x;
                out[o] = src[best];
                argmax[o] = (int32_t)((size_t)bc * H * W + (size_t)best);
            }
        }
    }
}

void maxpool2_backward(float *dinp, const float *dout, const int32_t *argmax, int B, int C,
                       int H, int W) {
    size_t n_in = (size_t)B * C * H * W, n_out = n_in / 4;
    memset(dinp, 0, n_in * sizeof(float));
    for (size_t o = 0; o < n_out; o++) dinp[argmax[o]] += dout[o];
}
