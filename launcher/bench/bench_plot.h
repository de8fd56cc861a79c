/* numallm bench's plot: an SVG file written by hand (no dependencies), for people who would
 * rather look than read. One column per test (pp512, tg128, ...): above, t/s against the rank
 * count, with each configuration's ideal (ranks x its 1-rank t/s) dashed; below, the scaling
 * efficiency against the rank count, with 1.0 marked. One colour per configuration (model,
 * threads per rank, -ngl, batch sizes, KV type: whichever vary), named in the legend. Every
 * point carries a tooltip with its figures. */
#ifndef NM_BENCH_PLOT_H
#define NM_BENCH_PLOT_H

#include <stddef.h>

#include "base.h"
#include "bench_report.h"

/* Write the plot of rows[0..n) to path. subtitle: one line under the title (the machine);
 * notes: lines under the plot (skipped rows), may be NULL. NM_ERR_IO when the file cannot be
 * written. */
enum nm_status bench_plot_write(const char *path, const struct bench_row *rows, int n, const char *subtitle,
                                const char *notes, char *err, size_t errlen);

#endif
