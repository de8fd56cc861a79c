/* The packed-layout matmul driver (matmul_internal.h): chooses the kernel family (VNNI, AMX, ref;
 * by m and the CPU, or forced), prepares the activations once per call (q8x, or f32/bf16 rows
 * zero-padded to whole 32-column units) and splits the row groups over the pool's threads. A
 * row's output never depends on that split: each kernel computes row r of a group in lane r. */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cpu.h"
#include "blocks/block.h"
#include "matmul_internal.h"

/* Row groups per block of the chunked path: its f32 partials for m activation rows stay small. */
#define PK_CHUNK_GROUPS 8

static enum kern_path g_path = KERN_PATH_AUTO;
void kern_matmul_force_path(enum kern_path path) { g_path = path; }

static bool isa_is_avx512(void) { return strcmp(kern_isa_get()->name, "avx512") == 0; }

bool kern_amx_available(void) {
    const struct cpu_features *f = cpu_features_get();
    return isa_is_avx512() && cpu_has_amx_int8(f) && cpu_has_amx_bf16(f);
}

int kern_matmul_amx_min_m(enum dtype type) {
    static int forced = -2;
    if (forced == -2) { /* NM_AMX_MIN_M: one switch point for every type, for measurements */
        const char *e = getenv("NM_AMX_MIN_M");
        forced = e ? atoi(e) : -1;
    }
    if (forced > 0) return forced;
    switch (type) { /* tests/bench/RESULTS.md: the m from which the tiles won at every larger m
                      * measured (4096x14336; F16/BF16: 2 threads, "Kernels: packed layouts, AMX";
                      * the int8 types: 16 threads, weights from cache and from DRAM, "Batched
                      * decode on the int8 tiles") */
    case DTYPE_BF16: return 6;
    case DTYPE_F16: return 12;
    case DTYPE_Q4_0:
    case DTYPE_Q4_1:
    case DTYPE_Q8_0:
    case DTYPE_Q4_K:
    case DTYPE_Q5_K:
    case DTYPE_Q6_K: return 12;
    case DTYPE_Q2_K: /* not measured apart: as the other packed int8 types */
    case DTYPE_Q3_K:
    case DTYPE_Q5_0:
    case DTYPE_Q5_1:
    case DTYPE_IQ4_NL:
    case DTYPE_IQ4_XS: return 12;
    default: return INT_MAX;
    }
}

static bool g_bf16_tiles = false;
void kern_matmul_allow_bf16_tiles(bool on) { g_bf16_tiles = on; }
bool kern_matmul_bf16_tiles_allowed(void) { return g_bf16_tiles; }

int kern_matmul_bf16_min_m(enum dtype type) {
    static int forced = -2;
    if (forced == -2) {
        const char *e = getenv("NM_AMX_BF16_MIN_M");
        forced = e ? atoi(e) : -1;
    }
    if (forced > 0) return forced;
    /* the weight's conversion to bf16 (~90 vector operations per 16 x 32 block) is paid once per
     * call and shared by the m / 16 activation tiles */
    (void)type;
    return 64;
}

typedef void (*pk_fn)(const struct pk_args *);
/* Which row-parallel chunks a kernel takes in one call (pk_args.chunk_end): none; chunks that end
 * on unit boundaries; or chunks that end on any 32-column block (a chunk may then share a unit
 * with the next, as attn_output's heads of 64 or 128 columns share a K-quant's 256-column unit). */
enum pk_chunks { PK_CHUNKS_NONE, PK_CHUNKS_UNITS, PK_CHUNKS_BLOCKS };
static pk_fn pk_choose(enum dtype t, int m, bool *amx, bool *bf, enum pk_chunks *chunks);

static uint64_t g_one_call_chunked; /* pk_one_call_chunked */
uint64_t pk_one_call_chunked(void) { return __atomic_load_n(&g_one_call_chunked, __ATOMIC_RELAXED); }

bool pk_takes_block_chunks(enum dtype t, int m) {
    bool amx, bf;
    enum pk_chunks chunks;
    pk_choose(t, m, &amx, &bf, &chunks);
    return chunks == PK_CHUNKS_BLOCKS;
}

bool pk_takes_rows(const struct weight *w, int m) {
    if (w->layout != WEIGHT_LAYOUT_ROWS || !block_codec_get(w->type) || !g_bf16_tiles) return false;
    bool amx, bf;
    enum pk_chunks chunks;
    pk_choose(w->type, m, &amx, &bf, &chunks);
    return bf;
}

/* The kernel for type t and m activation rows; *amx: it is the tile kernel (real or emulated);
 * *bf: it reads bf16 activations (the bf16 tiles: F16/BF16, or a quantized type allowed them);
 * *chunks: the row-parallel chunks it takes in one call (pk_args.chunk_end): the tiles, ending on
 * any block; the AVX-512 GEMV (m = 1) of every type but F16, ending on units; the AVX2 kernels
 * of the quantized types, ending on any block. Without AVX-512 the ISA's own kernel (avx2 or ref)
 * runs every m. */
static pk_fn pk_choose(enum dtype t, int m, bool *amx, bool *bf, enum pk_chunks *chunks) {
    const bool fl = t == DTYPE_F16 || t == DTYPE_BF16;
    const struct cpu_features *f = cpu_features_get();
    const bool amx_ok = isa_is_avx512() && (fl ? cpu_has_amx_bf16(f) : cpu_has_amx_int8(f));
    const bool bf_q = !fl && g_bf16_tiles && m >= kern_matmul_bf16_min_m(t); /* a quantized type on bf16 tiles */
    const enum pk_chunks gemv512 = m == 1 && t != DTYPE_F16 ? PK_CHUNKS_UNITS : PK_CHUNKS_NONE;
    const enum pk_chunks avx2 = fl ? PK_CHUNKS_NONE : PK_CHUNKS_BLOCKS;
    *amx = false;
    *bf = false;
    *chunks = PK_CHUNKS_NONE;
    switch (g_path) {
    case KERN_PATH_AUTO:
        if (amx_ok && bf_q && cpu_has_amx_bf16(f)) {
            *amx = *bf = true;
            *chunks = PK_CHUNKS_BLOCKS;
            return pk_gemm_amx;
        }
        if (amx_ok && m >= kern_matmul_amx_min_m(t)) {
            *amx = true;
            *chunks = PK_CHUNKS_BLOCKS;
            *bf = fl;
            return pk_gemm_amx;
        }
        if (isa_is_avx512()) {
            *chunks = gemv512;
            return kern_isa_get()->pk_gemm;
        }
        if (strcmp(kern_isa_get()->name, "avx2") == 0) {
            /* the planner packs a type for the avx2 path only where it has the kernel; a weight
             * packed anyway (a test's) runs on the reference */
            if (!kern_isa_avx2_has_packed(t)) return pk_gemm_ref;
            *chunks = avx2;
        }
        return kern_isa_get()->pk_gemm;
    case KERN_PATH_VNNI: {
        const struct kern_isa *isa = kern_isa_find("avx512", NULL);
        NM_ASSERT(isa != NULL); /* forced VNNI on a CPU without the avx512 path */
        *chunks = gemv512;
        return isa->pk_gemm;
    }
    case KERN_PATH_AVX2: {
        const struct kern_isa *isa = kern_isa_find("avx2", NULL);
        NM_ASSERT(isa != NULL); /* forced AVX2 on a CPU without the avx2 path */
        *chunks = avx2;
        return isa->pk_gemm;
    }
    case KERN_PATH_AMX:
        NM_ASSERT(amx_ok); /* forced AMX on a CPU (or OS) without it */
        *amx = true;
        *chunks = PK_CHUNKS_BLOCKS;
        *bf = fl || bf_q;
        return pk_gemm_amx;
    case KERN_PATH_AMX_EMU:
        NM_ASSERT(kern_isa_find("avx512", NULL) != NULL);
        *amx = true;
        *chunks = PK_CHUNKS_BLOCKS;
        *bf = fl || bf_q;
        return pk_gemm_amx_emu;
    case KERN_PATH_REF:
        *bf = bf_q; /* the twin of the bf16 tiles where they would run */
        return pk_gemm_ref;
    }
    return pk_gemm_ref;
}

struct pk_job {
    const struct weight *w;
    pk_fn fn;
    int m;
    int64_t n_groups, n_units;
    size_t unit_bytes, group_stride;
    const uint8_t *act; /* unchunked: activation row 0 at unit 0 */
    size_t act_stride;
    float *yf;
    double *yd;
    int64_t ldy;
    const struct kern_chunk *chunks;
    int n_chunks;
    int unit_cols;
    const uint8_t **cact; /* per chunk: activation row 0 at the chunk's first unit */
    size_t *cas;
    int32_t *chunk_end;   /* the chunks end to end over all of K, which the kernel takes in one
                             call (pk_args.chunk_end; pk_choose), else NULL */
    bool act_tiles;       /* the int8 tiles: act and each cact[c] in tile order (pk_act_tiles) */
    bool bf16_tiles;      /* a quantized type on the bf16 tiles (pk_args.bf16_tiles) */
    const struct block_codec *codec; /* a ROWS-layout block type (pk_args.codec) */
    /* float activations being converted (prep job) */
    const float *src;
    int64_t k, kpad;
    uint8_t *dst;
    bool to_bf16;
};

static void pk_range(const struct pk_job *j, long lo, long hi);

/* Row groups [lo, hi) of the job. */
static void pk_range(const struct pk_job *j, long lo, long hi) {
    const struct weight *w = j->w;
    const uint8_t *wd = w->data;
    if (!j->chunks) {
        struct pk_args a = {.type = w->type, .w = wd + (size_t)lo * j->group_stride, .group_stride = j->group_stride,
                            .n_groups = hi - lo, .n_units = j->n_units, .act = j->act, .act_stride = j->act_stride,
                            .m = j->m, .y = j->yf + lo * PK_ROWS, .ldy = j->ldy,
                            .n_rows = NM_MIN(w->n - lo * PK_ROWS, (int64_t)(hi - lo) * PK_ROWS),
                            .act_tiles = j->act_tiles, .bf16_tiles = j->bf16_tiles, .codec = j->codec};
        j->fn(&a);
        return;
    }
    if (j->chunk_end) { /* one call: the tile kernel adds each chunk's partial as it ends */
        const int64_t nr = NM_MIN(w->n - lo * PK_ROWS, (int64_t)(hi - lo) * PK_ROWS);
        for (int i = 0; i < j->m; i++) memset(j->yd + i * j->ldy + lo * PK_ROWS, 0, (size_t)nr * sizeof(double));
        struct pk_args a = {.type = w->type, .w = wd + (size_t)lo * j->group_stride, .group_stride = j->group_stride,
                            .n_groups = hi - lo, .n_units = j->n_units, .act = j->act, .act_stride = j->act_stride,
                            .m = j->m, .yd = j->yd + lo * PK_ROWS, .ldy = j->ldy, .n_rows = nr,
                            .chunk_end = j->chunk_end, .n_chunk_ends = j->n_chunks, .act_tiles = j->act_tiles,
                            .bf16_tiles = j->bf16_tiles, .codec = j->codec};
        j->fn(&a);
        return;
    }
    /* Chunked: each chunk's f32 partial is added in double by the kernel (pk_args.yd), per block
     * of row groups so the block's weight bytes of every chunk are read while its outputs stay
     * in cache. */
    for (long g0 = lo; g0 < hi; g0 += PK_CHUNK_GROUPS) {
        const long ng = NM_MIN((long)PK_CHUNK_GROUPS, hi - g0);
        const int64_t r0 = (int64_t)g0 * PK_ROWS, nr = NM_MIN(w->n - r0, (int64_t)ng * PK_ROWS);
        for (int i = 0; i < j->m; i++) memset(j->yd + i * j->ldy + r0, 0, (size_t)nr * sizeof(double));
        for (int c = 0; c < j->n_chunks; c++) {
            const struct kern_chunk *ch = &j->chunks[c];
            const int64_t u0 = ch->w0 / j->unit_cols, u1 = (ch->w1 + j->unit_cols - 1) / j->unit_cols;
            struct pk_args a = {.type = w->type, .w = wd + (size_t)g0 * j->group_stride + (size_t)u0 * j->unit_bytes,
                                .group_stride = j->group_stride, .n_groups = ng, .n_units = u1 - u0,
                                .act = j->cact[c], .act_stride = j->cas[c], .m = j->m, .yd = j->yd + r0,
                                .ldy = j->ldy, .n_rows = nr, .act_tiles = j->act_tiles, .bf16_tiles = j->bf16_tiles, .codec = j->codec};
            j->fn(&a);
        }
    }
}

/* Float activations to [m][kpad] f32 or bf16, zero-padded. */
static void pk_prep_worker(void *ctx, int ith, int nth) {
    const struct pk_job *j = ctx;
    long lo, hi;
    pool_split((long)j->m, 1, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        const float *s = j->src + i * j->k;
        if (j->to_bf16) {
            uint16_t *d = (uint16_t *)j->dst + i * j->kpad;
            kern_isa_get()->to_bf16(s, d, j->k);
            memset(d + j->k, 0, (size_t)(j->kpad - j->k) * sizeof *d);
        } else {
            float *d = (float *)j->dst + i * j->kpad;
            memcpy(d, s, (size_t)j->k * sizeof(float));
            memset(d + j->k, 0, (size_t)(j->kpad - j->k) * sizeof *d);
        }
    }
}

/* q8x rows (src, sstride bytes apart, nb blocks each) to the int8 tile order (packed.h,
 * PK_ACT_TILE_B): tile i at dst + i * tstride; rows past m zero. */
struct tiles_job {
    const uint8_t *src;
    size_t sstride;
    int m;
    int64_t nb;
    uint8_t *dst;
    size_t tstride;
};
static void tiles_worker(void *ctx, int ith, int nth) {
    const struct tiles_job *j = ctx;
    long lo, hi;
    pool_split((long)(j->m + 15) / 16, 1, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        uint8_t *tile = j->dst + (size_t)i * j->tstride;
        for (int r = 0; r < 16; r++) {
            const int row = (int)i * 16 + r;
            const block_q8x *x = row < j->m ? (const block_q8x *)(j->src + (size_t)row * j->sstride) : NULL;
            for (int64_t b = 0; b < j->nb; b++) {
                uint8_t *e = tile + (size_t)b * PK_ACT_TILE_B;
                float *d = (float *)(e + PK_ACT_TILE_D);
                int32_t *isum = (int32_t *)(e + PK_ACT_TILE_ISUM), *lo16 = (int32_t *)(e + PK_ACT_TILE_LO);
                float *di = (float *)(e + PK_ACT_TILE_DI);
                if (x) {
                    memcpy(e + 32 * r, x[b].qs, 32);
                    d[r] = x[b].d;
                    isum[r] = x[b].isum;
                    di[r] = x[b].d * (float)x[b].isum; /* (the VNNI kernel's product, x86-avx512/packed.c) */
                    int32_t s = 0;
                    for (int c = 0; c < 16; c++) s += x[b].qs[c];
                    lo16[r] = s;
                } else {
                    memset(e + 32 * r, 0, 32);
                    d[r] = 0.0f;
                    isum[r] = 0;
                    lo16[r] = 0;
                    di[r] = 0.0f;
                }
            }
        }
    }
}

/* The tile-order copy of nb blocks of m q8x rows (into dst, or the thread's NM_TBUF_ACT_TILES
 * buffer when dst is NULL); *tstride: bytes between its 16-row tiles. */
static uint8_t *pk_act_tiles(struct pool *pool, const uint8_t *src, size_t sstride, int m, int64_t nb, size_t *tstride,
                             uint8_t *dst) {
    *tstride = (size_t)nb * PK_ACT_TILE_B;
    struct tiles_job j = {.src = src, .sstride = sstride, .m = m, .nb = nb, .tstride = *tstride};
    j.dst = dst ? dst : nm_thread_buf(NM_TBUF_ACT_TILES, (size_t)(m + 15) / 16 * *tstride);
    if (pool && m > 16) pool_run(pool, tiles_worker, &j);
    else tiles_worker(&j, 0, 1);
    return j.dst;
}

/* What pk_prepare allocated for a job, freed by pk_release. */
struct pk_tmp {
    uint8_t **masked, **ctiled;
};

/* The job of one packed weight times x (pk_matmul's contract), up to its pool run: the kernel
 * chosen for m, the activations prepared (quantized, padded, in tile order), the chunks'
 * pointers; false when there is nothing to compute (m or n is 0). */
static bool pk_prepare(struct pool *pool, const struct weight *w, struct act *x, const struct kern_chunk *chunks,
                       int n_chunks, float *yf, double *yd, int64_t ldy, struct pk_job *out, struct pk_tmp *tmp) {
    NM_ASSERT(w != NULL && x != NULL);
    const enum dtype t = w->type;
    /* a ROWS-layout block type on the bf16 tiles (pk_takes_rows): groups of 16 GGUF rows */
    const struct block_codec *codec = w->layout == WEIGHT_LAYOUT_ROWS ? block_codec_get(t) : NULL;
    if (codec) {
        NM_ASSERT(w->row_bytes == dtype_row_size(t, w->k) && w->k % codec->info.blck_size == 0);
    } else {
        NM_ASSERT(w->layout == WEIGHT_LAYOUT_Q_TILE16 || w->layout == WEIGHT_LAYOUT_F_PAIR16);
        NM_ASSERT(weight_layout_supports(w->layout, w->type));
        NM_ASSERT(w->bytes == weight_packed_bytes(w->layout, w->type, w->k, w->n) && w->row_bytes == 0);
    }
    NM_ASSERT(x->k == w->k && x->m >= 0 && w->n >= 0 && ldy >= w->n && n_chunks >= 0);
    NM_ASSERT(x->m == 0 || x->f32 != NULL);
    NM_ASSERT(chunks ? yd != NULL : yf != NULL);
    *tmp = (struct pk_tmp){0};
    if (x->m == 0 || w->n == 0) return false;
    bool amx, bf;
    struct pk_job j = {.w = w, .m = x->m, .n_groups = pk_groups(w->n), .yf = yf, .yd = yd, .ldy = ldy,
                       .chunks = chunks, .n_chunks = n_chunks, .codec = codec};
    if (codec) {
        j.unit_cols = (int)codec->info.blck_size;
        j.unit_bytes = codec->info.type_size;
        j.n_units = w->k / j.unit_cols;
        j.group_stride = (size_t)PK_ROWS * w->row_bytes;
    } else {
        j.unit_cols = pk_unit_cols(t);
        j.unit_bytes = pk_unit_bytes(t);
        j.n_units = pk_units(t, w->k);
        j.group_stride = (size_t)j.n_units * j.unit_bytes;
    }
    enum pk_chunks takes_chunks;
    j.fn = pk_choose(t, x->m, &amx, &bf, &takes_chunks);
    NM_ASSERT(!codec || bf);
    const bool q8 = dtype_uses_q8x(t) && !bf; /* else f32 rows, or bf16 rows for the bf16 tiles */
    j.bf16_tiles = bf && dtype_uses_q8x(t);
    const int64_t kpad = j.n_units * j.unit_cols;
    uint8_t *prep = NULL;
    size_t esize; /* bytes per activation column (q8x: per 32 columns, 40) */
    if (q8) {
        NM_ASSERT(x->q8 != NULL);
        kern_act_quantize(pool, x);
        j.act = (const uint8_t *)x->q8;
        j.act_stride = (size_t)(w->k / QK8X) * sizeof(block_q8x);
        esize = 0;
    } else {
        esize = bf ? 2 : 4;
        if (!bf && kpad == w->k) {
            j.act = (const uint8_t *)x->f32;
        } else {
            prep = nm_thread_buf(NM_TBUF_ACT_ROWS, (size_t)x->m * (size_t)kpad * esize);
            j.src = x->f32, j.k = w->k, j.kpad = kpad, j.dst = prep, j.to_bf16 = bf;
            if (pool && (int64_t)x->m * w->k >= 32 * 1024) pool_run(pool, pk_prep_worker, &j);
            else pk_prep_worker(&j, 0, 1);
            j.act = prep;
        }
        j.act_stride = (size_t)kpad * esize;
    }
    /* Chunks that cover K end to end go to a kernel that takes them (pk_choose) in one call, with
     * neither pointers nor masked copies: each ending on a unit (PK_CHUNKS_UNITS, and unmasked),
     * or on any 32-column block (PK_CHUNKS_BLOCKS: a chunk's partial is then the sum of its blocks
     * [a0, a1), whichever unit they share with the chunks beside it, as a masked copy gives). */
    if (chunks) {
        const struct dtype_info *ti = dtype_get((uint32_t)t);
        bool one = takes_chunks != PK_CHUNKS_NONE && n_chunks > 0 && chunks[0].a0 == 0 &&
                   chunks[n_chunks - 1].a1 == w->k && j.n_units * j.unit_cols == w->k;
        for (int c = 0; c < n_chunks; c++) {
            const struct kern_chunk *ch = &chunks[c];
            NM_ASSERT(0 <= ch->w0 && ch->w0 <= ch->a0 && ch->a0 < ch->a1 && ch->a1 <= ch->w1 && ch->w1 <= w->k);
            NM_ASSERT(ch->w0 % j.unit_cols == 0 && (ch->w1 % j.unit_cols == 0 || ch->w1 == w->k));
            NM_ASSERT(ch->w0 % ti->blck_size == 0);
            one = one && ch->a1 % 32 == 0 && (c == 0 || ch->a0 == chunks[c - 1].a1) &&
                  (takes_chunks == PK_CHUNKS_BLOCKS || (ch->a0 == ch->w0 && ch->a1 == ch->w1));
        }
        if (one) {
            __atomic_fetch_add(&g_one_call_chunked, 1, __ATOMIC_RELAXED);
            j.chunk_end = malloc((size_t)n_chunks * sizeof *j.chunk_end);
            NM_ASSERT(j.chunk_end);
            for (int c = 0; c < n_chunks; c++) j.chunk_end[c] = (int32_t)(chunks[c].a1 / 32);
        }
    }
    /* Otherwise one call per chunk: activation pointers, masked copies where a chunk keeps a
     * sub-range of its units. */
    uint8_t **masked = NULL;
    if (chunks && !j.chunk_end) {
        j.cact = calloc((size_t)n_chunks + 1, sizeof *j.cact);
        j.cas = calloc((size_t)n_chunks + 1, sizeof *j.cas);
        masked = calloc((size_t)n_chunks + 1, sizeof *masked);
        NM_ASSERT(j.cact && j.cas && masked);
        for (int c = 0; c < n_chunks; c++) {
            const struct kern_chunk *ch = &chunks[c];
            const int64_t w1u = (ch->w1 + j.unit_cols - 1) / j.unit_cols * j.unit_cols;
#define COLB(cols) (q8 ? (size_t)((cols) / QK8X) * sizeof(block_q8x) : (size_t)(cols) * esize)
            if (ch->a0 == ch->w0 && ch->a1 == ch->w1) {
                j.cact[c] = j.act + COLB(ch->w0);
                j.cas[c] = j.act_stride;
                continue;
            }
            NM_ASSERT(!q8 || (ch->a0 % QK8X == 0 && ch->a1 % QK8X == 0));
            const size_t cs = (COLB(w1u - ch->w0) + 63) / 64 * 64;
            masked[c] = nm_alloc(cs * (size_t)x->m, 64, "masked chunk activations");
            for (int i = 0; i < x->m; i++)
                memcpy(masked[c] + (size_t)i * cs + COLB(ch->a0 - ch->w0), j.act + (size_t)i * j.act_stride + COLB(ch->a0),
                       COLB(ch->a1 - ch->a0));
#undef COLB
            j.cact[c] = masked[c];
            j.cas[c] = cs;
        }
    }
    /* ... and reads its activations in tile order: one copy for all of K, or one per chunk. */
    uint8_t **ctiled = NULL;
    if (amx && q8) {
        j.act_tiles = true;
        const int ublk = j.unit_cols / 32;
        if (!chunks || j.chunk_end) {
            NM_ASSERT(j.n_units * j.unit_cols == w->k);
            j.act = pk_act_tiles(pool, j.act, j.act_stride, x->m, j.n_units * ublk, &j.act_stride, NULL);
        } else {
            ctiled = calloc((size_t)n_chunks + 1, sizeof *ctiled);
            NM_ASSERT(ctiled);
            for (int c = 0; c < n_chunks; c++) {
                const int64_t u0 = chunks[c].w0 / j.unit_cols, u1 = (chunks[c].w1 + j.unit_cols - 1) / j.unit_cols;
                const size_t bytes = (size_t)(x->m + 15) / 16 * (size_t)((u1 - u0) * ublk) * PK_ACT_TILE_B;
                ctiled[c] = pk_act_tiles(pool, j.cact[c], j.cas[c], x->m, (u1 - u0) * ublk, &j.cas[c],
                                         nm_alloc(bytes, 64, "chunk activations in tile order"));
                j.cact[c] = ctiled[c];
            }
        }
    }
    tmp->masked = masked;
    tmp->ctiled = ctiled;
    *out = j;
    return true;
}

static void pk_release(struct pk_job *j, struct pk_tmp *tmp) {
    free(j->chunk_end);
    for (int c = 0; tmp->ctiled && c < j->n_chunks; c++) nm_free(tmp->ctiled[c]);
    free(tmp->ctiled);
    if (tmp->masked) { /* one call per chunk */
        for (int c = 0; c < j->n_chunks; c++) nm_free(tmp->masked[c]);
        free(tmp->masked);
        free(j->cact);
        free(j->cas);
    }
}

/* One pool run over the row groups of one or more jobs (several: pk_matmul_multi's weights),
 * numbered end to end; each group is computed by its own job (pk_range). The GEMV (m = 1) splits
 * them evenly once: each thread streams its own rows. Larger m claims them (pool_claim) in
 * batches of about a quarter of a thread's share, at most 16 groups, shrinking to 2 at the end.
 * Either way a row's value does not depend on which thread computed it. */
struct pk_run {
    const struct pk_job *jobs;
    int n;
    long start[PK_MULTI_MAX + 1]; /* the first group of each job in the joint numbering */
    bool claimed;                 /* claims (else the even split) */
    struct pool_claims claims;
};

static void pk_run_range(const struct pk_run *r, long lo, long hi) {
    for (int i = 0; i < r->n && lo < hi; i++) {
        const long a = NM_MAX(lo, r->start[i]), b = NM_MIN(hi, r->start[i + 1]);
        if (a < b) pk_range(&r->jobs[i], a - r->start[i], b - r->start[i]);
    }
}

static void pk_run_worker(void *ctx, int ith, int nth) {
    struct pk_run *r = ctx;
    long lo, hi;
    if (!r->claimed) {
        pool_split(r->start[r->n], 2, ith, nth, &lo, &hi);
        pk_run_range(r, lo, hi);
        return;
    }
    while (pool_claim(&r->claims, &lo, &hi)) pk_run_range(r, lo, hi);
}

static void pk_run_jobs(struct pool *pool, const struct pk_job *jobs, int n, int m) {
    struct pk_run r = {.jobs = jobs, .n = n};
    for (int i = 0; i < n; i++) r.start[i + 1] = r.start[i] + (long)jobs[i].n_groups;
    r.claimed = pool && m > 1;
    if (r.claimed) {
        const int nth = pool_size(pool);
        /* batches of an even count of groups: the bf16 tile kernel takes groups in pairs */
        pool_claims_init(&r.claims, r.start[n], NM_MIN(16L, r.start[n] / (4L * nth)), 2, nth);
    }
    if (pool) pool_run(pool, pk_run_worker, &r);
    else pk_run_worker(&r, 0, 1);
}

void pk_matmul(struct pool *pool, const struct weight *w, struct act *x, const struct kern_chunk *chunks,
               int n_chunks, float *yf, double *yd, int64_t ldy) {
    struct pk_job j;
    struct pk_tmp tmp;
    if (!pk_prepare(pool, w, x, chunks, n_chunks, yf, yd, ldy, &j, &tmp)) return;
    pk_run_jobs(pool, &j, 1, x->m);
    pk_release(&j, &tmp);
}

bool pk_multi_fits(const struct weight *a, const struct weight *b) {
    return a->layout != WEIGHT_LAYOUT_ROWS && a->layout == b->layout && a->type == b->type && a->k == b->k;
}

void pk_matmul_multi(struct pool *pool, int nw, const struct weight *const *w, struct act *x, float *const *y) {
    NM_ASSERT(nw >= 1 && nw <= PK_MULTI_MAX);
    for (int i = 1; i < nw; i++) NM_ASSERT(pk_multi_fits(w[0], w[i]));
    struct pk_job jobs[PK_MULTI_MAX];
    struct pk_tmp tmp;
    /* the activations are prepared once, for the first weight: the others read the same bytes
     * (same type, layout and k: the same kernel choice and preparation) */
    if (!pk_prepare(pool, w[0], x, NULL, 0, y[0], NULL, w[0]->n, &jobs[0], &tmp)) {
        for (int i = 1; i < nw; i++) pk_matmul(pool, w[i], x, NULL, 0, y[i], NULL, w[i]->n);
        return;
    }
    for (int i = 1; i < nw; i++) {
        jobs[i] = jobs[0];
        jobs[i].w = w[i];
        jobs[i].n_groups = pk_groups(w[i]->n);
        jobs[i].yf = y[i];
        jobs[i].ldy = w[i]->n;
    }
    pk_run_jobs(pool, jobs, nw, x->m);
    pk_release(&jobs[0], &tmp);
}
