/* The SVG plot of numallm bench (see bench_plot.h). */
#include "bench_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_KEYS = 64 };

/* Layout, in SVG pixels. */
enum {
    PANEL_W = 360, TS_H = 230, EFF_H = 150, GAP_Y = 62, MARGIN_L = 72, MARGIN_R = 24, CELL_GAP_X = 40,
    TITLE_H = 80, COLS_MAX = 3,
};

static const char *const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* A configuration: what identifies a line (everything but the rank count and the test). */
static bool same_config(const struct bench_row *a, const struct bench_row *b) {
    return !strcmp(a->model_filename, b->model_filename) && a->n_threads == b->n_threads &&
           a->n_gpu_layers == b->n_gpu_layers && a->n_batch == b->n_batch && a->n_ubatch == b->n_ubatch &&
           !strcmp(a->type_k, b->type_k);
}

struct plot {
    const struct bench_row *rows;
    int n;
    int n_cfg, cfg_of_row[4096];
    int cfg_first[MAX_KEYS];        /* a row of each configuration */
    int n_test;
    char tests[MAX_KEYS][48];
    int test_of_row[4096];
    int n_ranks;
    int ranks[32];                  /* distinct rank counts, ascending */
};

/* Ticks: a step of 1, 2 or 5 times a power of ten giving about 5 intervals up to top. */
static double nice_step(double top) {
    if (top <= 0) return 1;
    const double raw = top / 5, p = pow(10, floor(log10(raw)));
    const double m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static void fmt_tick(double v, double step, char *buf, size_t len) {
    if (step >= 1) snprintf(buf, len, "%.0f", v);
    else if (step >= 0.1) snprintf(buf, len, "%.1f", v);
    else snprintf(buf, len, "%.2f", v);
}

/* One panel's axes: frame, grid, ticks and labels. x positions are the rank counts. */
static void axes(FILE *f, const struct plot *p, double x0, double y0, double w, double h, double ymax, double step,
                 const char *ylabel, const char *title) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\" stroke=\"#444\"/>\n", x0,
            y0, w, h);
    for (double v = 0; v <= ymax * 1.0001; v += step) {
        const double y = y0 + h - v / ymax * h;
        char lab[32];
        fmt_tick(v, step, lab, sizeof lab);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", x0, y, x0 + w, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">%s</text>\n", x0 - 6, y + 4, lab);
    }
    for (int i = 0; i < p->n_ranks; i++) {
        const double x = x0 + (i + 0.5) * w / p->n_ranks;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x, y0 + h, x, y0 + h + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"tick\">%d</text>\n", x, y0 + h + 18,
                p->ranks[i]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"axis\">ranks</text>\n", x0 + w / 2,
            y0 + h + 34);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"axis\" transform=\"rotate(-90 %.1f %.1f)\">"
            "%s</text>\n",
            x0 - 46, y0 + h / 2, x0 - 46, y0 + h / 2, ylabel);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"ptitle\">", x0 + w / 2, y0 - 8);
    put_text(f, title);
    fprintf(f, "</text>\n");
}

static void config_label(const struct plot *p, int cfg, char *buf, size_t len) {
    const struct bench_row *r = &p->rows[p->cfg_first[cfg]];
    bool models = false, ngl = false, batch = false, kv = false;
    for (int c = 0; c < p->n_cfg; c++) {
        const struct bench_row *o = &p->rows[p->cfg_first[c]];
        models |= strcmp(o->model_filename, r->model_filename) != 0;
        ngl |= o->n_gpu_layers != r->n_gpu_layers;
        batch |= o->n_batch != r->n_batch || o->n_ubatch != r->n_ubatch;
        kv |= strcmp(o->type_k, r->type_k) != 0;
    }
    /* The model's description, and its file when two models share one. */
    size_t n = (size_t)snprintf(buf, len, "%s", r->model_type);
#define ADD(...) (n += n < len ? (size_t)snprintf(buf + n, len - n, __VA_ARGS__) : 0)
    for (int c = 0; models && c < p->n_cfg; c++) {
        const struct bench_row *o = &p->rows[p->cfg_first[c]];
        if (!strcmp(o->model_type, r->model_type) && strcmp(o->model_filename, r->model_filename)) {
            const char *base = strrchr(r->model_filename, '/');
            ADD(" (%s)", base ? base + 1 : r->model_filename);
            break;
        }
    }
    ADD(", %d thread%s per rank", r->n_threads, r->n_threads == 1 ? "" : "s");
    if (ngl) ADD(", ngl %d", r->n_gpu_layers);
    if (batch) ADD(", b %d/ub %d", r->n_batch, r->n_ubatch);
    if (kv) ADD(", kv %s", r->type_k);
#undef ADD
}

static void series(FILE *f, const struct plot *p, int test, int cfg, bool eff, double x0, double y0, double w,
                   double h, double ymax) {
    const char *color = k_colors[cfg % (int)NM_ARRAY_LEN(k_colors)];
    double xs[32], ys[32], ideal[32];
    int idx[32], m = 0;
    double base = -1;
    for (int pos = 0; pos < p->n_ranks; pos++)
        for (int i = 0; i < p->n; i++) {
            const struct bench_row *r = &p->rows[i];
            if (p->test_of_row[i] != test || p->cfg_of_row[i] != cfg || r->n_ranks != p->ranks[pos]) continue;
            const double v = eff ? r->scaling_eff : bench_row_avg_ts(r);
            if (r->n_ranks == 1) base = bench_row_avg_ts(r);
            if (v < 0 || m == 32) break;
            xs[m] = x0 + (pos + 0.5) * w / p->n_ranks;
            ys[m] = y0 + h - NM_MIN(v, ymax) / ymax * h;
            ideal[m] = r->n_ranks;
            idx[m++] = i;
            break;
        }
    if (m == 0) return;
    if (!eff && base > 0 && m > 1) { /* the ideal: ranks x the 1-rank figure */
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1\" stroke-dasharray=\"4 4\" "
                   "stroke-opacity=\"0.6\" points=\"",
                color);
        for (int k = 0; k < m; k++)
            fprintf(f, "%.1f,%.1f ", xs[k], y0 + h - NM_MIN(base * ideal[k], ymax) / ymax * h);
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
    for (int k = 0; k < m; k++) fprintf(f, "%.1f,%.1f ", xs[k], ys[k]);
    fprintf(f, "\"/>\n");
    for (int k = 0; k < m; k++) {
        const struct bench_row *r = &p->rows[idx[k]];
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%d rank%s, %d threads per rank: "
                   "%.2f ± %.2f t/s, %.2f GB/s",
                xs[k], ys[k], color, r->n_ranks, r->n_ranks == 1 ? "" : "s", r->n_threads, bench_row_avg_ts(r),
                bench_row_sd_ts(r), bench_row_avg_gbs(r));
        if (r->scaling_eff >= 0) fprintf(f, ", efficiency %.2f", r->scaling_eff);
        fprintf(f, "</title></circle>\n");
    }
}

enum nm_status bench_plot_write(const char *path, const struct bench_row *rows, int n, const char *subtitle,
                                const char *notes, char *err, size_t errlen) {
    struct plot *p = calloc(1, sizeof *p);
    NM_ASSERT(p);
    p->rows = rows;
    p->n = NM_MIN(n, 4096);
    for (int i = 0; i < p->n; i++) {
        const struct bench_row *r = &rows[i];
        int c = 0;
        while (c < p->n_cfg && !same_config(&rows[p->cfg_first[c]], r)) c++;
        if (c == p->n_cfg && p->n_cfg < MAX_KEYS) p->cfg_first[p->n_cfg++] = i;
        p->cfg_of_row[i] = c < p->n_cfg ? c : p->n_cfg - 1;
        char name[48];
        bench_row_test_name(r, name, sizeof name);
        int t = 0;
        while (t < p->n_test && strcmp(p->tests[t], name)) t++;
        if (t == p->n_test && p->n_test < MAX_KEYS) snprintf(p->tests[p->n_test++], sizeof p->tests[0], "%s", name);
        p->test_of_row[i] = t < p->n_test ? t : p->n_test - 1;
        int k = 0;
        while (k < p->n_ranks && p->ranks[k] != r->n_ranks) k++;
        if (k == p->n_ranks && p->n_ranks < 32) {
            int j = p->n_ranks++;
            while (j > 0 && p->ranks[j - 1] > r->n_ranks) { p->ranks[j] = p->ranks[j - 1]; j--; }
            p->ranks[j] = r->n_ranks;
        }
    }
    const int cols = NM_MAX(1, NM_MIN(p->n_test, COLS_MAX)), grid_rows = NM_MAX(1, (p->n_test + cols - 1) / cols);
    const double cell_w = MARGIN_L + PANEL_W + CELL_GAP_X, cell_h = TS_H + GAP_Y + EFF_H + GAP_Y + 20;
    int n_notes = 0;
    for (const char *s = notes; s && *s; s++) n_notes += *s == '\n' || s[1] == 0;
    const double legend_y = TITLE_H + grid_rows * cell_h + 10;
    const double width = NM_MAX(cols * cell_w + MARGIN_R, 640), height = legend_y + 22 * p->n_cfg + 40 + 18 * n_notes;

    FILE *f = fopen(path, "w");
    if (!f) {
        free(p);
        return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot write the plot: %s", path, strerror(errno));
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            width, height, width, height);
    fprintf(f, "<style>.tick{font-size:11px;fill:#333}.axis{font-size:12px;fill:#222}"
               ".ptitle{font-size:13px;font-weight:bold;fill:#222}.title{font-size:16px;font-weight:bold}"
               ".sub{font-size:11px;fill:#444}.leg{font-size:12px}</style>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n");
    fprintf(f, "<text x=\"16\" y=\"26\" class=\"title\">numallm bench: tokens per second and scaling efficiency "
               "against ranks</text>\n");
    fprintf(f, "<text x=\"16\" y=\"46\" class=\"sub\">");
    put_text(f, subtitle ? subtitle : "");
    fprintf(f, "</text>\n<text x=\"16\" y=\"62\" class=\"sub\">dashed: ideal (ranks x the 1-rank t/s); efficiency = "
               "t/s / (ranks x 1-rank t/s) at equal threads per rank</text>\n");
    for (int t = 0; t < p->n_test; t++) {
        const double x0 = MARGIN_L + (t % cols) * cell_w, y0 = TITLE_H + 14 + (t / cols) * cell_h;
        double ts_max = 0, eff_max = 1.1;
        for (int i = 0; i < p->n; i++) {
            if (p->test_of_row[i] != t) continue;
            ts_max = NM_MAX(ts_max, bench_row_avg_ts(&rows[i]) + bench_row_sd_ts(&rows[i]));
            eff_max = NM_MAX(eff_max, rows[i].scaling_eff * 1.05);
            /* leave room for the ideal line too */
            for (int j = 0; j < p->n; j++)
                if (p->test_of_row[j] == t && p->cfg_of_row[j] == p->cfg_of_row[i] && rows[j].n_ranks == 1)
                    ts_max = NM_MAX(ts_max, bench_row_avg_ts(&rows[j]) * rows[i].n_ranks);
        }
        const double ts_step = nice_step(ts_max * 1.05), ts_top = NM_MAX(ts_step, ceil(ts_max * 1.05 / ts_step) * ts_step);
        const double eff_step = eff_max > 2 ? 0.5 : 0.2, eff_top = ceil(eff_max / eff_step) * eff_step;
        char title[96];
        snprintf(title, sizeof title, "%s: tokens per second", p->tests[t]);
        axes(f, p, x0, y0, PANEL_W, TS_H, ts_top, ts_step, "t/s", title);
        for (int c = 0; c < p->n_cfg; c++) series(f, p, t, c, false, x0, y0, PANEL_W, TS_H, ts_top);
        const double ey0 = y0 + TS_H + GAP_Y;
        snprintf(title, sizeof title, "%s: scaling efficiency", p->tests[t]);
        axes(f, p, x0, ey0, PANEL_W, EFF_H, eff_top, eff_step, "efficiency", title);
        const double y1 = ey0 + EFF_H - 1.0 / eff_top * EFF_H;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"6 3\"/>\n",
                (int)x0, y1, (int)x0 + PANEL_W, y1);
        for (int c = 0; c < p->n_cfg; c++) series(f, p, t, c, true, x0, ey0, PANEL_W, EFF_H, eff_top);
    }
    for (int c = 0; c < p->n_cfg; c++) {
        char label[256];
        config_label(p, c, label, sizeof label);
        const double y = legend_y + 22 * c;
        fprintf(f, "<line x1=\"20\" y1=\"%.1f\" x2=\"48\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n", y, y,
                k_colors[c % (int)NM_ARRAY_LEN(k_colors)]);
        fprintf(f, "<text x=\"56\" y=\"%.1f\" class=\"leg\">", y + 4);
        put_text(f, label);
        fprintf(f, "</text>\n");
    }
    double y = legend_y + 22 * p->n_cfg + 10;
    for (const char *s = notes; s && *s;) {
        const char *e = strchr(s, '\n');
        const size_t len = e ? (size_t)(e - s) : strlen(s);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)NM_MIN(len, sizeof line - 1), s);
        fprintf(f, "<text x=\"20\" y=\"%.1f\" class=\"sub\">", y);
        put_text(f, line);
        fprintf(f, "</text>\n");
        y += 18;
        s = e ? e + 1 : s + len;
    }
    if (p->n == 0) fprintf(f, "<text x=\"20\" y=\"%d\" class=\"leg\">no results</text>\n", TITLE_H + 30);
    fprintf(f, "</svg>\n");
    free(p);
    if (fclose(f) != 0) return nm_errf(err, errlen, NM_ERR_IO, "%s: cannot write the plot: %s", path, strerror(errno));
    return NM_OK;
}
