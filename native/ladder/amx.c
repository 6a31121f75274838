/* amx-bf16-stream: 1 KiB B tiles streamed from the buffer against one resident A tile
 * (an M=16 GEMM weight stream, 4 TDPBF16PS per 4 KiB). Compiled with -mamx-tile -mamx-bf16,
 * or against amx_emu.h in the test build. The caller has checked sl_have_amx(). */
#include "amx_tiles.h"
#include "kernels.h"

#include <string.h>

void amx_stream_a_tile(uint16_t a[16][32])
{
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 32; k++)
            a[m][k] = ((m + k) % 3 == 0) ? 0x3f80 : ((m + k) % 3 == 1 ? 0xbf80 : 0x0000);
}

/* Both kernels: all eight tiles 16 rows x 64 bytes (palette 1) */
void ladder_amx_config(void)
{
    sl_tilecfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++)
        sl_tile_shape(&cfg, t, 16, 64);
    sl_tile_loadconfig(&cfg);
}

/* Both kernels accumulate in tiles 4-7: zeroed before a pass, stored and summed after it (the
 * sum keeps the work observable). Outside the TDPBF16PS loops; always inlined, so both compilers
 * emit the same code as when it was written out in each kernel. */
static inline __attribute__((always_inline)) void acc_zero(void)
{
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
}

static inline __attribute__((always_inline)) void acc_drain(float c[4][16][16], double* total)
{
    _tile_stored(4, c[0], 64);
    _tile_stored(5, c[1], 64);
    _tile_stored(6, c[2], 64);
    _tile_stored(7, c[3], 64);
    for (int t = 0; t < 4; t++)
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++)
                *total += c[t][m][n];
}

double run_amx_bf16_stream(const void* buf, size_t bytes, uint64_t passes)
{
    _Alignas(64) uint16_t a[16][32];
    amx_stream_a_tile(a);
    _Alignas(64) float c[4][16][16];
    double total = 0;
    ladder_amx_config();
    _tile_loadd(0, a, 64);
    for (uint64_t p = 0; p < passes; p++) {
        acc_zero();
        const char* const end = (const char*)buf + bytes;
        for (const char* s = buf; s < end; s += 4096) {
            _tile_loadd(1, s, 64);
            _tile_dpbf16ps(4, 0, 1);
            _tile_loadd(2, s + 1024, 64);
            _tile_dpbf16ps(5, 0, 2);
            _tile_loadd(3, s + 2048, 64);
            _tile_dpbf16ps(6, 0, 3);
            _tile_loadd(1, s + 3072, 64);
            _tile_dpbf16ps(7, 0, 1);
        }
        acc_drain(c, &total);
    }
    _tile_release();
    return total;
}

double run_amx_bf16_compute(const void* buf, size_t bytes, uint64_t passes)
{
    /* A0 = 1.0, A1 = 2.0, B0 = 0.125, B1 = 0.25 in every bf16 slot */
    static const uint16_t fill[4] = { 0x3f80, 0x4000, 0x3e00, 0x3e80 };
    _Alignas(64) uint16_t src[4][16][32];
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 32; k++)
                src[t][r][k] = fill[t];
    _Alignas(64) float c[4][16][16];
    double total = 0;
    ladder_amx_config();
    _tile_loadd(0, src[0], 64);
    _tile_loadd(1, src[1], 64);
    _tile_loadd(2, src[2], 64);
    _tile_loadd(3, src[3], 64);
    for (uint64_t p = 0; p < passes; p++) {
        acc_zero();
        /* 2x2 blocking: four independent accumulators, no memory traffic in the loop */
        for (int it = 0; it < LADDER_TDP_ITERS; it++) {
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
            _tile_dpbf16ps(6, 1, 2);
            _tile_dpbf16ps(7, 1, 3);
        }
        acc_drain(c, &total);
    }
    _tile_release();
    return total;
}
