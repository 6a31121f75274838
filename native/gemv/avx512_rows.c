/* avx512-bf16-rows: VDPBF16PS on row-major bf16 rows, no 16-row padding (the layer stage's
 * `--gemv avx512`, the published AVX path: a worker streams exactly its rows' bytes). Each step
 * takes 32 columns: one W register per row, one x register per input, R x NB dot products into
 * R x NB accumulators of 16 partial sums each (the W chunk is loaded once for all NB inputs, the
 * x chunk once for all R rows). R = 8 for 1-2 inputs (8-16 independent chains hide VDPBF16PS's
 * latency), R = 4 for 3+ inputs in groups of 4 (16 accumulators + 8 operands of 32 zmm).
 * The R x NB horizontal sums are one transpose-reduce of 16 vectors (15 adds) instead of a
 * 4-step reduce each. cols must be a multiple of 32 (every shape's dims are). */
#include "gemv.h"
#include "sl.h"

#ifdef SL_AVX512_EMULATE
#include "avx512_emu.h" /* test-only: SIMDe, see native/avx512_emu/ */
#define DPBF16(acc, w, x) ((acc) = sl_emu_dpbf16((acc), (w), (x)))
#else
#include <immintrin.h>
/* inline asm, as sl.h's SL_DPBF16_BCAST: clang 16 crashes on casts to __m512bh */
#define DPBF16(acc, w, x) __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x))
#endif

/* gcc scalarizes the accumulator array only where every index is a constant by then */
#define UNROLL _Pragma("GCC unroll 16")

/* out lane 4 * (i % 4) + i / 4 = the sum of v[i]'s 16 lanes, for i < 16 */
static SL_TARGET_AVX512 inline __attribute__((always_inline)) __m512 reduce16(const __m512 v[16])
{
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++) /* 256-bit halves: t[i] = (v[2i] lo + hi, v[2i+1] lo + hi) */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
            _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* 128-bit block k of u[i]: 4 partials of v[4i + k] */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
            _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xdd));
    const __m512 x0 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    const __m512 x1 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    const __m512d a = _mm512_castps_pd(x0), b = _mm512_castps_pd(x1);
    return _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

/* R rows (row-major, cols wide) x NB inputs (bf16, cols wide) -> y[b * ldy + r] */
#define DEF_ROWS(R, NB)                                                                            \
    static SL_TARGET_AVX512BF16 void rows_r##R##_b##NB(                                            \
        const uint16_t* w, int cols, const uint16_t* x, float* y, int ldy)                         \
    {                                                                                              \
        enum { N = R * NB };                                                                       \
        __m512 acc[N]; /* constant indices only (loops unrolled first): kept in registers */       \
        UNROLL for (int i = 0; i < N; i++) acc[i] = _mm512_setzero_ps();                           \
        for (int k = 0; k < cols; k += 32) {                                                       \
            __m512i xv[NB], wv[R];                                                                 \
            for (int b = 0; b < NB; b++)                                                           \
                xv[b] = _mm512_loadu_si512((const void*)(x + (size_t)b * cols + k));               \
            for (int r = 0; r < R; r++)                                                            \
                wv[r] = _mm512_loadu_si512((const void*)(w + (size_t)r * cols + k));               \
            for (int r = 0; r < R; r++)                                                            \
                for (int b = 0; b < NB; b++)                                                       \
                    DPBF16(acc[r * NB + b], wv[r], xv[b]);                                         \
        }                                                                                          \
        __m512 v[16];                                                                              \
        UNROLL for (int i = 0; i < 16; i++) v[i] = i < N ? acc[i] : _mm512_setzero_ps();           \
        float s[16];                                                                               \
        _mm512_storeu_ps(s, reduce16(v));                                                          \
        for (int r = 0; r < R; r++)                                                                \
            for (int b = 0; b < NB; b++)                                                           \
                y[(size_t)b * ldy + r] = s[4 * ((r * NB + b) % 4) + (r * NB + b) / 4];             \
    }

/* a table: one kernel per rows x inputs */
// clang-format off
#define ROWS_TO_8(NB) DEF_ROWS(1, NB) DEF_ROWS(2, NB) DEF_ROWS(3, NB) DEF_ROWS(4, NB)            \
    DEF_ROWS(5, NB) DEF_ROWS(6, NB) DEF_ROWS(7, NB) DEF_ROWS(8, NB)
#define ROWS_TO_4(NB) DEF_ROWS(1, NB) DEF_ROWS(2, NB) DEF_ROWS(3, NB) DEF_ROWS(4, NB)
ROWS_TO_8(1)
ROWS_TO_8(2)
ROWS_TO_4(3)
ROWS_TO_4(4)
// clang-format on

typedef void (*rows_fn)(const uint16_t*, int, const uint16_t*, float*, int);
/* [NB - 1][rows]: R up to 8 for 1-2 inputs, up to 4 for 3-4 */
static const rows_fn by_rows[4][9] = {
    { 0, rows_r1_b1, rows_r2_b1, rows_r3_b1, rows_r4_b1, rows_r5_b1, rows_r6_b1, rows_r7_b1,
        rows_r8_b1 },
    { 0, rows_r1_b2, rows_r2_b2, rows_r3_b2, rows_r4_b2, rows_r5_b2, rows_r6_b2, rows_r7_b2,
        rows_r8_b2 },
    { 0, rows_r1_b3, rows_r2_b3, rows_r3_b3, rows_r4_b3 },
    { 0, rows_r1_b4, rows_r2_b4, rows_r3_b4, rows_r4_b4 },
};

void gemv_avx512_bf16_rows(
    const uint16_t* w, int rows, int cols, const uint16_t* x, int batch, float* y, int ldy)
{
    /* rows outer: each input group re-reads the group's R rows from L1 (L2 past ~8K columns),
     * so the slice streams from where it lives once per call */
    const int rg = batch <= 2 ? 8 : 4;
    for (int r = 0; r < rows; r += rg) {
        const int n = rows - r < rg ? rows - r : rg;
        for (int b0 = 0; b0 < batch; b0 += 4) {
            const int nb = batch - b0 < 4 ? batch - b0 : 4;
            by_rows[nb - 1][n](
                w + (size_t)r * cols, cols, x + (size_t)b0 * cols, y + (size_t)b0 * ldy + r, ldy);
        }
    }
}
