/* The AMX tile unit's own ceilings (bench_gemm). Tile products and nothing else: each thread
 * loads two A and two B tiles once, then issues TDPBF16PS (or TDPBSSD) into four C tiles in a
 * loop, so no load, store or vector instruction competes with the products. With a buffer
 * (src, span bytes; bf16), the kernels' loop instead: every round loads the two A and two B tiles
 * afresh (1 KiB each, 64-byte rows, the next 4 KiB of the buffer, wrapping at span) in the order
 * the bf16 kernel issues them (kernels/x86-amx/amx_body.h), so a span that fits L1 or L2 gives
 * the best rate a 2 x 2 tile loop can reach with its tiles there. bench_gemm runs it on all of a
 * pool's threads at once: what that many cores' tile units give together on this machine (its
 * clock under AMX load, whether its vCPUs own their cores), to set the kernels' TOP/s against.
 * Built with the AMX flags; only called where kern_amx_available() said yes (the OS permission
 * included). */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

long bench_amx_probe(bool int8, long iters, const uint8_t *src, size_t span);

/* Runs iters rounds of 4 tile products (src: bf16 only, each round's tiles loaded from it, span
 * a multiple of 4 KiB); returns the ops done (2 per multiply-add). */
long bench_amx_probe(bool int8, long iters, const uint8_t *src, size_t span) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    static const uint8_t zeros[1024] __attribute__((aligned(64)));
    __asm__ volatile("" ::: "memory");
    __asm__ volatile("ldtilecfg %0" : : "m"(*(const uint8_t(*)[64])&cfg) : "memory");
    _tile_loadd(0, zeros, 64);
    _tile_loadd(1, zeros, 64);
    _tile_loadd(2, zeros, 64);
    _tile_loadd(3, zeros, 64);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    if (src) { /* bf16 only: the tile loop the bf16 kernel runs at prompt sizes */
        size_t o = 0;
        for (long i = 0; i < iters; i++) {
            const uint8_t *p = src + o;
            o = o + 4096 == span ? 0 : o + 4096;
            _tile_loadd(0, p, 64);
            _tile_loadd(2, p + 2048, 64);
            _tile_dpbf16ps(4, 0, 2);
            _tile_loadd(3, p + 3072, 64);
            _tile_dpbf16ps(5, 0, 3);
            _tile_loadd(1, p + 1024, 64);
            _tile_dpbf16ps(6, 1, 2);
            _tile_dpbf16ps(7, 1, 3);
        }
    } else if (int8)
        for (long i = 0; i < iters; i++) {
            _tile_dpbssd(4, 0, 2);
            _tile_dpbssd(5, 0, 3);
            _tile_dpbssd(6, 1, 2);
            _tile_dpbssd(7, 1, 3);
        }
    else
        for (long i = 0; i < iters; i++) {
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
            _tile_dpbf16ps(6, 1, 2);
            _tile_dpbf16ps(7, 1, 3);
        }
    uint8_t sink[1024] __attribute__((aligned(64)));
    _tile_stored(4, sink, 64);
    _tile_release();
    __asm__ volatile("" : : "r"(sink) : "memory");
    /* int8 (no src): 16 x 16 x 64 multiply-adds per product; bf16: 16 x 16 x 32 */
    return iters * 4 * 2 * 16 * 16 * (int8 && !src ? 64 : 32);
}
