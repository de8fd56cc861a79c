/* The nearest-entry search that the IQ1/IQ2/IQ3 quantizers share (host only; the block files'
 * quantizers are the only users).
 *
 * A grid entry is a tuple of n_coord values (8 for IQ1/IQ2, 4 for IQ3), each one of n_level
 * values (IQ1: -1, 0, 1; IQ2: 8, 25, 43; IQ3_XXS: 4, 12, .., 52, 62; IQ3_S: 1, 3, .., 15). To
 * quantize a group of target values (already divided by the scale), each coordinate is rounded
 * to its nearest level, and the tuple of level numbers indexes a table that holds the grid entry
 * nearest to that tuple (least squares, computed once by brute force over the whole grid).
 * So a group costs a few comparisons per value and one load, not a search of the grid; the
 * answer is the entry nearest to the rounded tuple, which is not always the entry nearest to the
 * targets themselves (good enough for numallm's own quantizers: valid blocks, not best quality). */
#ifndef NM_BLOCK_IQ_QUANT_H
#define NM_BLOCK_IQ_QUANT_H

#include <stdint.h>

enum iq_grid {
    IQ_GRID_IQ2XXS,
    IQ_GRID_IQ2XS,
    IQ_GRID_IQ2S,
    IQ_GRID_IQ3XXS,
    IQ_GRID_IQ3S,
    IQ_GRID_IQ1S,
    IQ_GRID_COUNT,
};

struct iq_lut {
    int n_coord;             /* values per grid entry: 8 or 4 */
    int n_level;             /* distinct values per coordinate: 3 or 8 */
    int n_entry;             /* grid entries */
    float level[8];          /* the values a coordinate takes, ascending */
    float cut[8];            /* cut[k]: midpoint of level[k] and level[k + 1] */
    const int8_t *value;     /* [n_entry][n_coord]: the grid's values (IQ1 signed, else >= 0) */
    const uint16_t *nearest; /* [n_level ^ n_coord]: tuple (level number of coordinate c times
                                n_level^c, summed) -> nearest entry */
};

/* The table of grid g, built on first use (thread-safe, once per process; about 0.1 s for the
 * largest). Never NULL. */
const struct iq_lut *iq_lut_get(enum iq_grid g);

/* The entry nearest to the targets t[0 .. n_coord) rounded per coordinate. */
static inline int iq_lut_find(const struct iq_lut *L, const float *t) {
    int key = 0;
    for (int c = L->n_coord - 1; c >= 0; c--) {
        int k = 0;
        while (k < L->n_level - 1 && t[c] > L->cut[k]) k++;
        key = key * L->n_level + k;
    }
    return L->nearest[key];
}

/* Quantize a group of 8 values x as sign * db * magnitude on a magnitude grid (IQ2: one entry of
 * 8, IQ3: two entries of 4, idx[0] for values 0..3 and idx[1] for 4..7). *signs gets bit c set
 * where value c is stored negative. even: the format stores 7 sign bits and implies the 8th by
 * even parity; when x has an odd number of negatives, the sign of its smallest-magnitude value
 * is flipped and that value gets the smallest magnitude. db <= 0 (an all-zero sub-block) gives
 * valid indices. */
void iq_quantize_signed8(const struct iq_lut *L, const float *x, float db, int even, int idx[2], uint32_t *signs);

/* The scale dl that the IQ1 quantizers aim at for n values: IQ1_SCALE_PER_RMS times their root
 * mean square, so that about the middle half of a normal-looking sub-block rounds to 0 and the
 * rest to -1/+1 (the largest |x| does not set the scale: a 3-level grid clipped at the outliers
 * would round most values to 0). */
#define IQ1_SCALE_PER_RMS 1.25f
float iq1_scale_target(const float *x, int n);

/* Quantize a group of 8 values x as dl * (g + delta) on the IQ1 grid (g in -1/0/+1); returns the
 * entry and sets *err to the squared error. */
int iq1_quantize8(const struct iq_lut *L, const float *x, float dl, float delta, float *err);

/* IQ2_XS and IQ2_S: one fp16 d per block and a 4-bit scale s per 16 values, the half's values
 * being d * (0.5 + s) / 4 times grid magnitudes up to 43. d maps the largest half's max |x| to
 * s = 15; each half's s is rounded from its own max |x| (clamped to 0..15). Returns d's bits. */
uint16_t iq2_half_scales(const float *x, uint8_t s[16]);

#endif
