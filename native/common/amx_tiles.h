/* The tile intrinsics the AMX kernels use: the real ones, or (test builds with
 * -DSL_AMX_EMULATE) C functions from amx_emu/amx_emu.h with the same names and semantics.
 * The tile configuration is loaded only through sl_tile_loadconfig() below, in every build. */
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

_Static_assert(sizeof(sl_tilecfg) == 64, "LDTILECFG reads exactly 64 bytes");

static inline void sl_tile_shape(sl_tilecfg* cfg, int tile, int rows, int colsb)
{
    cfg->rows[tile] = (uint8_t)rows;
    cfg->colsb[tile] = (uint16_t)colsb;
}

/* The one tile-config loader. Its asm operand is the whole 64-byte struct, so the compiler
 * must keep every store to it. gcc 12's _tile_loadconfig() passes `*(const void**)cfg`, an
 * 8-byte memory reference: gcc then drops the stores to colsb[] and rows[] as dead, and
 * LDTILECFG loads stack garbage (#GP on hardware; the emulation cannot see it, as it never
 * sees the compiler's view of the operand). native/tilecfg/check.c checks the real objects. */
#if defined(SL_AMX_EMULATE)
static inline void sl_tile_loadconfig(const sl_tilecfg* cfg) { sl_emu_loadconfig(cfg); }
#elif defined(SL_TILECFG_LEGACY)
/* Only to demonstrate that the check catches the old loader (docs/benchmarks.md); never in a
 * build that measures anything. */
static inline __attribute__((always_inline)) void sl_tile_loadconfig(const sl_tilecfg* cfg)
{
    _tile_loadconfig(cfg);
}
#else
static inline __attribute__((always_inline)) void sl_tile_loadconfig(const sl_tilecfg* cfg)
{
    __asm__ volatile("ldtilecfg %0" ::"m"(*cfg));
}
#endif

#ifndef SL_AMX_EMULATE
/* STTILECFG into the whole struct (the check reads back what the hardware loaded) */
static inline __attribute__((always_inline)) void sl_tile_storeconfig(sl_tilecfg* out)
{
    __asm__ volatile("sttilecfg %0" : "=m"(*out));
}
#endif

#endif
