/* The tile intrinsics the AMX kernels use: the real ones, or (test builds with
 * -DSL_AMX_EMULATE) C functions from amx_emu/amx_emu.h with the same names and semantics. */
#ifndef SL_AMX_TILES_H
#define SL_AMX_TILES_H

#include <stdint.h>

#ifdef SL_AMX_EMULATE
#include "amx_emu.h"
#else
#include <immintrin.h>
#endif

/* The 64-byte tile configuration (palette 1), Intel SDM vol. 1 ch. 3. */
typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) sl_tilecfg;

static inline void sl_tile_shape(sl_tilecfg* cfg, int tile, int rows, int colsb)
{
    cfg->rows[tile] = (uint8_t)rows;
    cfg->colsb[tile] = (uint16_t)colsb;
}

#endif
