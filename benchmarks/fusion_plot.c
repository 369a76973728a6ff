/*
 * fusion_plot.c - fusion_bench's --plot (see fusion_plot.h): an SVG drawn with fprintf, no
 * library. Main thread, rank 0.
 */
#include "fusion_plot.h"

#include <math.h>
#include <stdio.h>

#include "bench_common.h"

const char *fusion_threshold_text(long threshold, char *buf, size_t n) {
    if (threshold < 0) return snprintf(buf, n, "default"), buf;
    return bench_format_bytes((size_t)threshold, buf, n);
}

typedef struct frame {
    double left, top, width, height, ymax;
    int nx;
} frame;

static double frame_x(const frame *f, int i) {
    return f->left + (f->nx > 1 ? f->width * i / (f->nx - 1) : f->width / 2);
}

static double frame_y(const frame *f, double v) { return f->top + f->height * (1 - v / f->ymax); }

int fusion_plot_svg(const char *path, const fusion_result *res, int n, const long *thresholds,
                    int n_thresholds, int n_cycles, int gpu) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
    const double W = 720, H = 440, L = 70, R = 190, T = 40, B = 60;
    double ymax = 0;
    for (int i = 0; i < n; i++) ymax = fmax(ymax, fmax(res[i].step_ms, res[i].mpi_ms));
    double step = pow(10, floor(log10(ymax > 0 ? ymax : 1))), top = ceil(ymax / step) * step;
    if (top / step < 4) step /= 2;
    int nx = n_thresholds;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%g\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">libhvdc fusion_bench: "
               "step time vs HVD_FUSION_THRESHOLD (dashed: %s)</text>\n", W / 2,
            gpu ? "raw NCCL, a call per tensor" : "MPI_Allreduce loop");
    double pw = W - L - R, ph = H - T - B;
    const frame fr = {L, T, pw, ph, top, nx};
    for (double v = 0; v <= top + 1e-9; v += step) {
        fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, frame_y(&fr, v), L + pw, frame_y(&fr, v), L - 6, frame_y(&fr, v) + 4, v);
    }
    for (int i = 0; i < nx; i++) {
        char thr[32];
        fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", frame_x(&fr, i), T + ph + 18,
                fusion_threshold_text(thresholds[i], thr, sizeof thr));
    }
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">fusion threshold</text>\n", L + pw / 2, H - 15);
    fprintf(f, "<text transform=\"translate(18,%g) rotate(-90)\" text-anchor=\"middle\">median step time (ms)</text>\n", T + ph / 2);
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n", L, T, pw, ph);
    int line = 0;
    for (int start = 0; start < n; start += nx, line++) { /* results come in runs of nx */
        const char *c = colours[line % 6];
        double mpi = 0;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
        for (int i = 0; i < nx && start + i < n; i++) {
            fprintf(f, "%.1f,%.1f ", frame_x(&fr, i), frame_y(&fr, res[start + i].step_ms));
            mpi += res[start + i].mpi_ms / nx;
        }
        fprintf(f, "\"/>\n");
        for (int i = 0; i < nx && start + i < n; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", frame_x(&fr, i), frame_y(&fr, res[start + i].step_ms), c);
        fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"6,4\"/>\n",
                L, frame_y(&fr, mpi), L + pw, frame_y(&fr, mpi), c);
        char cyc[32] = "";
        if (n_cycles > 1) snprintf(cyc, sizeof cyc, ", cycle %g", res[start].cycle);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"/>"
                   "<text x=\"%g\" y=\"%g\">%s%s</text>\n", L + pw + 12, T + 10 + 20.0 * line,
                L + pw + 32, T + 10 + 20.0 * line, c, L + pw + 38, T + 14 + 20.0 * line,
                res[start].model, cyc);
    }
    fprintf(f, "</svg>\n");
    return fclose(f);
}
