/* The AMX tile kernels (amx_body.h) with the real tile instructions. Built with -mamx-tile
 * -mamx-int8 -mamx-bf16 (and the AVX-512 flags), only this file; only called after CPUID and
 * the OS permission said AMX can run (matmul_pk.c).
 *
 * The tile configuration is loaded with our own ldtilecfg asm that names the whole 64-byte
 * config as its input and clobbers memory: GCC 12's _tile_loadconfig intrinsic declares only
 * the first 8 bytes as read, so at -O2 the stores filling rows/colsb could be dropped as dead and
 * the first tile instruction would fault (issue 4). test_kernels_amx runs this path. */
#include <immintrin.h>

#include "../x86-avx512/simd.h"

struct amx_tilecfg;
static inline void amx_ldtilecfg(const void *cfg) {
    __asm__ volatile("" ::: "memory");
    __asm__ volatile("ldtilecfg %0" : : "m"(*(const uint8_t(*)[64])cfg) : "memory");
}

#define AMX_FN pk_gemm_amx
#define AMX_FN_INT8 amx_int8
#define AMX_FN_BF16 amx_bf16
#define TILE_CFG(cfg) amx_ldtilecfg(cfg)
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_LOAD(t, p, s) _tile_loadd(t, p, (long)(s))
#define TILE_STORE(t, p, s) _tile_stored(t, p, (long)(s))
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define TILE_RELEASE() _tile_release()
#include "amx_body.h"
