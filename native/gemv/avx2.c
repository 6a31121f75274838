/* avx2-bf16: the portable BF16 GEMV (any x86-64 with AVX2 + FMA), shared by `gemv --kernel
 * avx2-bf16` and the layer stage's `--gemv avx2`. FP32 FMA on bf16 weights widened in registers.
 *
 * Widening without a shuffle: 16 row-major bf16 loaded as 8 dwords hold the pair (w[2i],
 * w[2i+1]) in dword i; `<< 16` makes w[2i] an fp32, `& 0xffff0000` makes w[2i+1] one. The bf16
 * input is widened the same way, so its halves line up with the weights' with no layout change
 * and no fp32 copy (an earlier version prepared an fp32 copy of x per call: in the layer stage
 * that cost ~20 % of a down GEMV on a 90-worker slice, and 24 KiB of L1 for a 6144-wide input).
 * Each weight line costs 1 load + 2 integer ops + 2 FMAs per input.
 *
 * Register blocking: R rows x NB inputs accumulators, 8 in all (2 FMA pipes x 4 cycles of
 * latency); the widened input stays in registers across the R rows, so its widening is paid
 * once per R rows. NB = 2 for pairs of inputs (4 rows), NB = 1 otherwise (8 rows). */
#include "gemv.h"
#include "sl.h"

#include <immintrin.h>

static SL_TARGET_AVX2 inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* R rows (row-major, cols wide) x NB inputs (bf16, cols wide) -> y[b * ldy + r] */
#define DEF_AVX2(R, NB)                                                                            \
    static SL_TARGET_AVX2 void avx2_r##R##_b##NB(                                                  \
        const uint16_t* w, int cols, const uint16_t* x, float* y, int ldy)                         \
    {                                                                                              \
        const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);                                    \
        __m256 acc[R][NB];                                                                         \
        for (int r = 0; r < R; r++)                                                                \
            for (int b = 0; b < NB; b++)                                                           \
                acc[r][b] = _mm256_setzero_ps();                                                   \
        for (int k = 0; k < cols; k += 16) {                                                       \
            __m256 xe[NB], xo[NB];                                                                 \
            for (int b = 0; b < NB; b++) {                                                         \
                const __m256i xv = _mm256_loadu_si256((const __m256i*)(x + (size_t)b * cols + k)); \
                xe[b] = _mm256_castsi256_ps(_mm256_slli_epi32(xv, 16));                            \
                xo[b] = _mm256_castsi256_ps(_mm256_and_si256(xv, hi));                             \
            }                                                                                      \
            for (int r = 0; r < R; r++) {                                                          \
                const __m256i v = _mm256_loadu_si256((const __m256i*)(w + (size_t)r * cols + k));  \
                const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));                   \
                const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));                    \
                for (int b = 0; b < NB; b++) {                                                     \
                    acc[r][b] = _mm256_fmadd_ps(we, xe[b], acc[r][b]);                             \
                    acc[r][b] = _mm256_fmadd_ps(wo, xo[b], acc[r][b]);                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < R; r++)                                                                \
            for (int b = 0; b < NB; b++)                                                           \
                y[(size_t)b * ldy + r] = hsum8(acc[r][b]);                                         \
    }

/* a table: one kernel per rows x inputs */
// clang-format off
DEF_AVX2(1, 1) DEF_AVX2(2, 1) DEF_AVX2(3, 1) DEF_AVX2(4, 1)
DEF_AVX2(5, 1) DEF_AVX2(6, 1) DEF_AVX2(7, 1) DEF_AVX2(8, 1)
DEF_AVX2(1, 2) DEF_AVX2(2, 2) DEF_AVX2(3, 2) DEF_AVX2(4, 2)

typedef void (*avx2_fn)(const uint16_t*, int, const uint16_t*, float*, int);
// clang-format on
static const avx2_fn by_rows_b1[9] = { 0, avx2_r1_b1, avx2_r2_b1, avx2_r3_b1, avx2_r4_b1,
    avx2_r5_b1, avx2_r6_b1, avx2_r7_b1, avx2_r8_b1 };
static const avx2_fn by_rows_b2[5] = { 0, avx2_r1_b2, avx2_r2_b2, avx2_r3_b2, avx2_r4_b2 };

void gemv_avx2_bf16(
    const uint16_t* w, int rows, int cols, const uint16_t* x, int batch, float* y, int ldy)
{
    for (int b0 = 0; b0 < batch;) {
        const int nb = batch - b0 >= 2 ? 2 : 1, rg = nb == 2 ? 4 : 8;
        const avx2_fn* fn = nb == 2 ? by_rows_b2 : by_rows_b1;
        const uint16_t* xb = x + (size_t)b0 * cols;
        float* yb = y + (size_t)b0 * ldy;
        for (int r = 0; r < rows; r += rg) {
            const int n = rows - r < rg ? rows - r : rg;
            fn[n](w + (size_t)r * cols, cols, xb, yb + r, ldy);
        }
        b0 += nb;
    }
}
