/* The repack step (matmul.h: weight_pack): GGUF rows -> the packed layouts of packed.h. Plain C:
 * it runs once per tensor at load, on the pool's threads (one range of row groups each, which
 * also places the pages on the threads' node when the caller's memory is first-touched here). */
#include <string.h>

#include "base.h"
#include "matmul.h"
#include "packed.h"
#include "quant.h"
#include "blocks/iq4_nl.h"
#include "blocks/iq4_xs.h"
#include "blocks/q5_0.h"
#include "blocks/q5_1.h"
#include "blocks/q2_k.h"
#include "blocks/q3_k.h"

bool weight_layout_supports(enum weight_layout layout, enum dtype type) {
    if (dtype_get((uint32_t)type) == NULL) return false;
    switch (layout) {
    case WEIGHT_LAYOUT_ROWS: return true;
    case WEIGHT_LAYOUT_Q_TILE16:
        return type == DTYPE_Q4_0 || type == DTYPE_Q4_1 || type == DTYPE_Q8_0 || type == DTYPE_Q4_K ||
               type == DTYPE_Q5_K || type == DTYPE_Q6_K || type == DTYPE_Q2_K || type == DTYPE_Q3_K ||
               type == DTYPE_IQ4_XS || type == DTYPE_Q5_0 || type == DTYPE_Q5_1 || type == DTYPE_IQ4_NL;
    case WEIGHT_LAYOUT_F_PAIR16: return type == DTYPE_F16 || type == DTYPE_BF16;
    case WEIGHT_LAYOUT_NONE: return false;
    }
    return false;
}

size_t weight_packed_bytes(enum weight_layout layout, enum dtype type, int64_t k, int64_t n) {
    NM_ASSERT(layout == WEIGHT_LAYOUT_Q_TILE16 || layout == WEIGHT_LAYOUT_F_PAIR16);
    NM_ASSERT(weight_layout_supports(layout, type));
    NM_ASSERT(k > 0 && n >= 0 && k % dtype_get((uint32_t)type)->blck_size == 0);
    return (size_t)pk_groups(n) * (size_t)pk_units(type, k) * pk_unit_bytes(type);
}

/* ---- placing one code ------------------------------------------------------------------ */

/* Nibble code v (0..15) of row r, column c (0..31) of a 32-column sub-block at p. */
static inline void put_nibble(uint8_t *p, int r, int c, unsigned v) {
    const int q = c / 4, i = c % 4;
    uint8_t *b = p + 64 * (q / 2) + 4 * r + i;
    *b = (uint8_t)(*b | ((v & 0xF) << (4 * (q & 1))));
}
static inline void put_byte(uint8_t *p, int r, int c, uint8_t v) { p[64 * (c / 4) + 4 * r + c % 4] = v; }
/* Crumb code v (0..3) of row r, column c of a 32-column sub-block at p. */
static inline void put_crumb(uint8_t *p, int r, int c, unsigned v) {
    const int q = c / 4;
    uint8_t *b = p + 64 * (q / 4) + 4 * r + c % 4;
    *b = (uint8_t)(*b | ((v & 3) << (2 * (q % 4))));
}
/* Set the high-bit mask bit of row r, column c in the sub-block's 8 masks at hi. */
static inline void put_hibit(uint8_t *hi, int r, int c) {
    const int bit = 4 * r + c % 4;
    uint8_t *m = hi + 8 * (c / 4); /* little-endian u64 */
    m[bit / 8] = (uint8_t)(m[bit / 8] | (1u << (bit % 8)));
}
static inline void put_u16(uint8_t *p, int idx, uint16_t v) { memcpy(p + 2 * idx, &v, 2); }

/* The 6-bit (scale, min) pair j of a Q4_K/Q5_K super-block (ggml get_scale_min_k4). */
static inline void scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Row r of unit u (source block pointer blk) into the unit at p. */
static void pack_one(enum dtype t, const uint8_t *blk, int r, uint8_t *p) {
    switch (t) {
    case DTYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)blk;
        for (int c = 0; c < 32; c++) put_nibble(p, r, c, c < 16 ? b->qs[c] & 0xF : b->qs[c - 16] >> 4);
        put_u16(p + PK_Q4_0_D, r, b->d);
        break;
    }
    case DTYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)blk;
        for (int c = 0; c < 32; c++) put_nibble(p, r, c, c < 16 ? b->qs[c] & 0xF : b->qs[c - 16] >> 4);
        put_u16(p + PK_Q4_1_D, r, b->d);
        put_u16(p + PK_Q4_1_M, r, b->m);
        break;
    }
    case DTYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)blk;
        for (int c = 0; c < 32; c++) put_byte(p, r, c, (uint8_t)(b->qs[c] + 128));
        put_u16(p + PK_Q8_0_D, r, b->d);
        break;
    }
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const bool five = t == DTYPE_Q5_K;
        const uint8_t *qs = five ? ((const block_q5_K *)blk)->qs : ((const block_q4_K *)blk)->qs;
        const uint8_t *scales = five ? ((const block_q5_K *)blk)->scales : ((const block_q4_K *)blk)->scales;
        for (int s = 0; s < 8; s++) {
            for (int c = 0; c < 32; c++) {
                put_nibble(p + 256 * s, r, c, (qs[32 * (s / 2) + c] >> (4 * (s & 1))) & 0xF);
                if (five && ((((const block_q5_K *)blk)->qh[c] >> s) & 1)) put_hibit(p + PK_K5_HI + 64 * s, r, c);
            }
            uint8_t sc, m;
            scale_min_k4(s, scales, &sc, &m);
            p[(five ? PK_K5_SC : PK_K4_SC) + 16 * s + r] = sc;
            p[(five ? PK_K5_MN : PK_K4_MN) + 16 * s + r] = m;
        }
        uint16_t d, dmin;
        memcpy(&d, blk, 2);
        memcpy(&dmin, blk + 2, 2);
        put_u16(p + (five ? PK_K5_D : PK_K4_D), r, d);
        put_u16(p + (five ? PK_K5_DMIN : PK_K4_DMIN), r, dmin);
        break;
    }
    case DTYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)blk;
        uint8_t v[QK_K];
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                v[128 * h + l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                v[128 * h + l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                v[128 * h + l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                v[128 * h + l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
        }
        for (int s = 0; s < 8; s++) {
            uint8_t *sub = p + PK_K6_SUB * s;
            for (int c = 0; c < 32; c++) {
                const unsigned code = v[32 * s + c];
                put_nibble(sub, r, c, code & 0xF);
                const int q = c / 4, j = q / 2, pos = 4 * r + c % 4;
                const unsigned two = (code >> 4) << (2 * (q & 1));
                uint8_t *hh = sub + 256 + 32 * j + (pos & 31);
                *hh = (uint8_t)(*hh | (two << (pos >= 32 ? 4 : 0)));
            }
        }
        for (int g = 0; g < 16; g++) p[PK_K6_SC + 16 * g + r] = (uint8_t)b->scales[g];
        put_u16(p + PK_K6_D, r, b->d);
        break;
    }
    case DTYPE_Q5_0:
    case DTYPE_Q5_1: {
        const bool one = t == DTYPE_Q5_1;
        const uint8_t *qs = one ? ((const block_q5_1 *)blk)->qs : ((const block_q5_0 *)blk)->qs;
        const uint8_t *qh = one ? ((const block_q5_1 *)blk)->qh : ((const block_q5_0 *)blk)->qh;
        for (int c = 0; c < 32; c++) {
            put_nibble(p, r, c, c < 16 ? qs[c] & 0xF : qs[c - 16] >> 4);
            if ((qh[c / 8] >> (c % 8)) & 1) put_hibit(p + PK_Q5_HI, r, c);
        }
        uint16_t d;
        memcpy(&d, blk, 2);
        put_u16(p + PK_Q5_D, r, d);
        if (one) put_u16(p + PK_Q5_1_M, r, ((const block_q5_1 *)blk)->m);
        break;
    }
    case DTYPE_IQ4_NL: {
        const block_iq4_nl *b = (const block_iq4_nl *)blk;
        for (int c = 0; c < 32; c++) put_nibble(p, r, c, c < 16 ? b->qs[c] & 0xF : b->qs[c - 16] >> 4);
        put_u16(p + PK_NL_D, r, b->d);
        break;
    }
    case DTYPE_Q2_K:
    case DTYPE_Q3_K: {
        const bool three = t == DTYPE_Q3_K;
        const uint8_t *qs = three ? ((const block_q3_K *)blk)->qs : ((const block_q2_K *)blk)->qs;
        for (int s = 0; s < 8; s++)
            for (int c = 0; c < 32; c++) {
                put_crumb(p + PK_K2_SUB * s, r, c, qs[32 * (s / 4) + c] >> (2 * (s % 4)));
                if (three && ((((const block_q3_K *)blk)->hmask[c] >> s) & 1)) put_hibit(p + PK_K3_HI + 64 * s, r, c);
            }
        if (three) {
            const block_q3_K *b = (const block_q3_K *)blk;
            for (int g = 0; g < 16; g++) p[PK_K3_SC + 16 * g + r] = (uint8_t)(int8_t)(q3_k_scale6(b->scales, g) - 32);
            put_u16(p + PK_K3_D, r, b->d);
        } else {
            const block_q2_K *b = (const block_q2_K *)blk;
            for (int g = 0; g < 16; g++) p[PK_K2_SC + 16 * g + r] = b->scales[g];
            put_u16(p + PK_K2_D, r, b->d);
            put_u16(p + PK_K2_DMIN, r, b->dmin);
        }
        break;
    }
    case DTYPE_IQ4_XS: {
        const block_iq4_xs *b = (const block_iq4_xs *)blk;
        for (int s = 0; s < 8; s++) {
            for (int c = 0; c < 32; c++)
                put_nibble(p + 256 * s, r, c, c < 16 ? b->qs[16 * s + c] & 0xF : b->qs[16 * s + c - 16] >> 4);
            p[PK_XS_LS + 16 * s + r] = (uint8_t)(int8_t)(iq4_xs_scale6(b, s) - 32);
        }
        put_u16(p + PK_XS_D, r, b->d);
        break;
    }
    default: nm_bug(__FILE__, __LINE__, "pack_one: type without a packed layout");
    }
}

struct pack_job {
    enum dtype type;
    int64_t k, n;
    const uint8_t *src;
    size_t src_stride;
    uint8_t *dst;
};

static void pack_group(const struct pack_job *j, int64_t g) {
    const enum dtype t = j->type;
    const int64_t nu = pk_units(t, j->k);
    const size_t ub = pk_unit_bytes(t);
    uint8_t *gp = j->dst + (size_t)g * (size_t)nu * ub;
    memset(gp, 0, (size_t)nu * ub);
    const int rows = (int)NM_MIN((int64_t)PK_ROWS, j->n - g * PK_ROWS);
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = j->src + (size_t)(g * PK_ROWS + r) * j->src_stride;
        if (t == DTYPE_F16 || t == DTYPE_BF16) {
            for (int64_t c = 0; c < j->k; c++) {
                const int64_t u = c / 32;
                const int cc = (int)(c % 32);
                memcpy(gp + (size_t)u * ub + 64 * (cc / 2) + 4 * r + 2 * (cc % 2), row + 2 * c, 2);
            }
            continue;
        }
        const size_t bs = (size_t)dtype_get((uint32_t)t)->type_size;
        for (int64_t u = 0; u < nu; u++) pack_one(t, row + (size_t)u * bs, r, gp + (size_t)u * ub);
    }
}

static void pack_worker(void *ctx, int ith, int nth) {
    const struct pack_job *j = ctx;
    long lo, hi;
    pool_split((long)pk_groups(j->n), 1, ith, nth, &lo, &hi);
    for (long g = lo; g < hi; g++) pack_group(j, g);
}

void weight_pack(struct pool *pool, enum weight_layout layout, enum dtype type, int64_t k, int64_t n,
                 const void *src, size_t src_stride, void *dst, struct weight *out) {
    const size_t bytes = weight_packed_bytes(layout, type, k, n);
    NM_ASSERT(((uintptr_t)dst & 63) == 0 && out != NULL);
    NM_ASSERT(n == 0 || (src != NULL && src_stride >= dtype_row_size(type, k)));
    struct pack_job j = {.type = type, .k = k, .n = n, .src = src, .src_stride = src_stride, .dst = dst};
    if (pool) pool_run(pool, pack_worker, &j);
    else pack_worker(&j, 0, 1);
    *out = (struct weight){.layout = layout, .type = type, .k = k, .n = n, .row_bytes = 0, .bytes = bytes,
                           .data = dst};
}
