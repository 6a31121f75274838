/* amx-bf16: C[batch x 16] += A[batch x 32 k] . B[16 k pairs x 16 rows x 2] per 16-row block;
 * the packed bf16 VNNI block layout is exactly a sequence of B tiles. Two row blocks share
 * each A tile load. Compiled with -mamx-tile -mamx-bf16, or against amx_emu.h for tests. */
#include "amx_tiles.h"
#include "gemv.h"

#include <string.h>

/* tile numbers must be literals: gcc's tile intrinsics paste them into the asm text */
#define T_A 0
#define T_B0 1
#define T_B1 2
#define T_C0 4
#define T_C1 5

void gemv_amx_config(int batch)
{
    sl_tilecfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette_id = 1;
    sl_tile_shape(&cfg, T_A, batch, 64); /* batch rows x 32 bf16 of x */
    sl_tile_shape(&cfg, T_B0, 16, 64); /* 16 k pairs x 16 rows x 2 bf16 */
    sl_tile_shape(&cfg, T_B1, 16, 64);
    sl_tile_shape(&cfg, T_C0, batch, 64); /* batch rows x 16 fp32 outputs */
    sl_tile_shape(&cfg, T_C1, batch, 64);
    sl_tile_loadconfig(&cfg);
}

#ifdef SL_AMX_EMULATE
/* test hook: reload the config with A's rows changed, so a shape error can be provoked */
void gemv_amx_config_rows_override(int a_rows)
{
    sl_tilecfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++)
        sl_tile_shape(&cfg, t, sl_emu.rows[t], sl_emu.colsb[t]);
    sl_tile_shape(&cfg, T_A, a_rows, 64);
    sl_tile_loadconfig(&cfg);
}
#endif

void gemv_amx_release(void) { _tile_release(); }

/* C0 += A . B0 on the loaded config's shapes: keeps the TMUL awake (native/layer's spin-waits);
 * harmless between GEMVs, which zero C0 before every use */
void gemv_amx_keep_warm(void) { _tile_dpbf16ps(T_C0, T_A, T_B0); }

void gemv_amx_bf16(
    const uint16_t* w, int nblocks, int cols, const uint16_t* x, int batch, float* y, int ldy)
{
    (void)batch; /* the shapes come from gemv_amx_config */
    const int kchunks = cols / 32;
    const size_t block_elems = (size_t)cols * 16; /* bf16 per packed 16-row block */
    const long xstride = (long)cols * 2, ystride = (long)ldy * 4;
    int blk = 0;
    for (; blk + 1 < nblocks; blk += 2) {
        const uint16_t* w0 = w + block_elems * blk;
        const uint16_t* w1 = w0 + block_elems;
        _tile_zero(T_C0);
        _tile_zero(T_C1);
        for (int kc = 0; kc < kchunks; kc++) {
            _tile_loadd(T_A, x + kc * 32, xstride);
            _tile_loadd(T_B0, w0 + (size_t)kc * 512, 64);
            _tile_dpbf16ps(T_C0, T_A, T_B0);
            _tile_loadd(T_B1, w1 + (size_t)kc * 512, 64);
            _tile_dpbf16ps(T_C1, T_A, T_B1);
        }
        _tile_stored(T_C0, y + blk * 16, ystride);
        _tile_stored(T_C1, y + (blk + 1) * 16, ystride);
    }
    if (blk < nblocks) {
        const uint16_t* w0 = w + block_elems * blk;
        _tile_zero(T_C0);
        for (int kc = 0; kc < kchunks; kc++) {
            _tile_loadd(T_A, x + kc * 32, xstride);
            _tile_loadd(T_B0, w0 + (size_t)kc * 512, 64);
            _tile_dpbf16ps(T_C0, T_A, T_B0);
        }
        _tile_stored(T_C0, y + blk * 16, ystride);
    }
}
