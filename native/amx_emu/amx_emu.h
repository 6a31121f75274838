/* Test-only software emulation of the AMX tile instructions the kernels use (ldtilecfg,
 * tilerelease, tilezero, tileloadd, tilestored, tdpbf16ps), following the pseudo-code in the
 * Intel SDM / intrinsics guide: 8 tiles of up to 16 rows x 64 bytes, shapes from the loaded
 * palette-1 configuration, bf16 products accumulated in fp32 pair by pair (a bf16 x bf16
 * product is exact in fp32, so FMA contraction cannot change a result). Shape mismatches and
 * invalid configs (reserved bytes set, rows/colsb half zero: what would fault on hardware)
 * abort, so a wrong tile config fails the test.
 * Included instead of <immintrin.h>'s tile intrinsics when SL_AMX_EMULATE is defined; the config
 * is loaded through amx_tiles.h's sl_tile_loadconfig(), never the compiler's
 * intrinsic. */
#ifndef SL_AMX_EMU_H
#define SL_AMX_EMU_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int configured;
    uint8_t rows[8];
    uint16_t colsb[8];
    _Alignas(64) unsigned char data[8][16][64];
} sl_emu_state;

static sl_emu_state sl_emu;

static inline void sl_emu_fault(const char* what, int t)
{
    fprintf(stderr, "amx_emu: fault: %s (tile %d)\n", what, t);
    abort();
}

static inline void sl_emu_check_tile(int t)
{
    if (!sl_emu.configured)
        sl_emu_fault("tile instruction before ldtilecfg", t);
    if (t < 0 || t > 7 || sl_emu.rows[t] == 0 || sl_emu.colsb[t] == 0)
        sl_emu_fault("tile not configured", t);
}

static inline void sl_emu_loadconfig(const void* cfgp)
{
    const unsigned char* cfg = (const unsigned char*)cfgp;
    memset(&sl_emu, 0, sizeof(sl_emu));
    if (cfg[0] == 0)
        return; /* palette 0 = init state */
    if (cfg[0] != 1)
        sl_emu_fault("palette other than 1", -1);
    /* bytes 2-15, 32-47 (colsb of tiles 8-15) and 56-63 (their rows) are reserved, must be 0 */
    for (int i = 2; i < 64; i++)
        if (((i < 16) || (i >= 32 && i < 48) || i >= 56) && cfg[i])
            sl_emu_fault("reserved byte of the tile config is not zero", -1);
    for (int t = 0; t < 8; t++) {
        uint16_t colsb;
        memcpy(&colsb, cfg + 16 + 2 * t, sizeof(colsb));
        const uint8_t rows = cfg[48 + t];
        if (rows > 16 || colsb > 64 || (colsb % 4) || (rows == 0) != (colsb == 0))
            sl_emu_fault("bad shape in config", t);
        sl_emu.rows[t] = rows;
        sl_emu.colsb[t] = colsb;
    }
    sl_emu.configured = 1;
}

static inline void sl_emu_release(void) { memset(&sl_emu, 0, sizeof(sl_emu)); }

static inline void sl_emu_zero(int t)
{
    sl_emu_check_tile(t);
    memset(sl_emu.data[t], 0, sizeof(sl_emu.data[t]));
}

static inline void sl_emu_loadd(int t, const void* base, long stride)
{
    sl_emu_check_tile(t);
    memset(sl_emu.data[t], 0, sizeof(sl_emu.data[t]));
    for (int r = 0; r < sl_emu.rows[t]; r++)
        memcpy(sl_emu.data[t][r], (const char*)base + (long)r * stride, sl_emu.colsb[t]);
}

static inline void sl_emu_stored(int t, void* base, long stride)
{
    sl_emu_check_tile(t);
    for (int r = 0; r < sl_emu.rows[t]; r++)
        memcpy((char*)base + (long)r * stride, sl_emu.data[t][r], sl_emu.colsb[t]);
}

static inline float sl_emu_bf16(const unsigned char* p)
{
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    const uint32_t bits = (uint32_t)h << 16;
    if ((bits & 0x7f800000u) == 0)
        return 0.0f; /* DAZ: denormal inputs read as zero */
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline void sl_emu_dpbf16ps(int c, int a, int b)
{
    sl_emu_check_tile(c);
    sl_emu_check_tile(a);
    sl_emu_check_tile(b);
    const int m_rows = sl_emu.rows[c], k_pairs = sl_emu.colsb[a] / 4, n_cols = sl_emu.colsb[c] / 4;
    if (sl_emu.rows[a] != m_rows)
        sl_emu_fault("tdpbf16ps: rows(A) != rows(C)", a);
    if (sl_emu.rows[b] != k_pairs)
        sl_emu_fault("tdpbf16ps: rows(B) != colsb(A)/4", b);
    if (sl_emu.colsb[b] != sl_emu.colsb[c])
        sl_emu_fault("tdpbf16ps: colsb(B) != colsb(C)", b);
    for (int m = 0; m < m_rows; m++) {
        float acc[16];
        memcpy(acc, sl_emu.data[c][m], sizeof(acc));
        for (int k = 0; k < k_pairs; k++)
            for (int n = 0; n < n_cols; n++) {
                acc[n] += sl_emu_bf16(&sl_emu.data[a][m][4 * k])
                    * sl_emu_bf16(&sl_emu.data[b][k][4 * n]);
                acc[n] += sl_emu_bf16(&sl_emu.data[a][m][4 * k + 2])
                    * sl_emu_bf16(&sl_emu.data[b][k][4 * n + 2]);
            }
        memcpy(sl_emu.data[c][m], acc, sizeof(acc));
        if (sl_emu.colsb[c] < 64)
            memset(sl_emu.data[c][m] + sl_emu.colsb[c], 0, 64 - sl_emu.colsb[c]);
    }
}

#define _tile_release() sl_emu_release()
#define _tile_zero(t) sl_emu_zero(t)
#define _tile_loadd(t, base, stride) sl_emu_loadd((t), (base), (long)(stride))
#define _tile_stream_loadd(t, base, stride) sl_emu_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) sl_emu_stored((t), (base), (long)(stride))
#define _tile_dpbf16ps(c, a, b) sl_emu_dpbf16ps((c), (a), (b))

#endif
