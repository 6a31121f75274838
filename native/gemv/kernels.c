/* AVX-512 GEMV kernels over 16-row blocks. B accumulators per row block (one per batch row),
 * and P partial sums over k when B is small so the FMA latency chain is hidden. */
#include "gemv.h"
#include "sl.h"

#ifdef SL_AVX512_EMULATE
#include "avx512_emu.h" /* test-only: SIMDe, see native/avx512_emu/ */
#else
#include <immintrin.h>
#endif

#define PARTIALS(B) ((B) == 1 ? 8 : (B) == 2 ? 4 : (B) <= 4 ? 2 : 1)

/* P x B accumulators of 16 rows each, zeroed per block; summed over P and stored per batch row.
 * Shared by both kernels as text, so each still compiles to its own unrolled code. */
#define ACC_ZERO(acc, P, B)                                                                        \
    __m512 acc[P][B];                                                                              \
    for (int p = 0; p < P; p++)                                                                    \
        for (int b = 0; b < B; b++)                                                                \
    acc[p][b] = _mm512_setzero_ps()

#define ACC_STORE(acc, P, B, y, ldy, blk)                                                          \
    for (int b = 0; b < B; b++) {                                                                  \
        __m512 s = acc[0][b];                                                                      \
        for (int p = 1; p < P; p++)                                                                \
            s = _mm512_add_ps(s, acc[p][b]);                                                       \
        _mm512_storeu_ps(y + (size_t)b * ldy + blk * 16, s);                                       \
    }

#define DEF_BF16(B)                                                                                \
    static SL_TARGET_AVX512BF16 void bf16_b##B(                                                    \
        const uint16_t* w, int nblocks, int cols, const uint32_t* xp, float* y, int ldy)           \
    {                                                                                              \
        enum { P = PARTIALS(B) };                                                                  \
        const int kpairs = cols / 2;                                                               \
        for (int blk = 0; blk < nblocks; blk++) {                                                  \
            const uint16_t* lines = w + (size_t)blk * kpairs * 32;                                 \
            ACC_ZERO(acc, P, B);                                                                   \
            for (int kp = 0; kp < kpairs; kp += P)                                                 \
                for (int p = 0; p < P; p++) {                                                      \
                    const __m512i wl = _mm512_load_si512(lines + (size_t)(kp + p) * 32);           \
                    for (int b = 0; b < B; b++)                                                    \
                        SL_DPBF16_BCAST(acc[p][b], wl, &xp[(size_t)b * kpairs + kp + p]);          \
                }                                                                                  \
            ACC_STORE(acc, P, B, y, ldy, blk);                                                     \
        }                                                                                          \
    }

#define DEF_FP32(B)                                                                                \
    static SL_TARGET_AVX512 void fp32_b##B(                                                        \
        const float* w, int nblocks, int cols, const float* x, float* y, int ldy)                  \
    {                                                                                              \
        enum { P = PARTIALS(B) };                                                                  \
        for (int blk = 0; blk < nblocks; blk++) {                                                  \
            const float* lines = w + (size_t)blk * cols * 16;                                      \
            ACC_ZERO(acc, P, B);                                                                   \
            for (int k = 0; k < cols; k += P)                                                      \
                for (int p = 0; p < P; p++) {                                                      \
                    const __m512 wl = _mm512_load_ps(lines + (size_t)(k + p) * 16);                \
                    for (int b = 0; b < B; b++)                                                    \
                        acc[p][b] = _mm512_fmadd_ps(                                               \
                            wl, _mm512_set1_ps(x[(size_t)b * cols + k + p]), acc[p][b]);           \
                }                                                                                  \
            ACC_STORE(acc, P, B, y, ldy, blk);                                                     \
        }                                                                                          \
    }

#define FOR_BATCHES(X)                                                                             \
    X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)
FOR_BATCHES(DEF_BF16)
FOR_BATCHES(DEF_FP32)

#define CASE_BF16(B)                                                                               \
    case B:                                                                                        \
        bf16_b##B(w, nblocks, cols, (const uint32_t*)x, y, ldy);                                   \
        break;
#define CASE_FP32(B)                                                                               \
    case B:                                                                                        \
        fp32_b##B(w, nblocks, cols, x, y, ldy);                                                    \
        break;

void gemv_avx512_bf16(
    const uint16_t* w, int nblocks, int cols, const uint16_t* x, int batch, float* y, int ldy)
{
    switch (batch) {
        FOR_BATCHES(CASE_BF16) default : break;
    }
}

void gemv_avx512_fp32(
    const float* w, int nblocks, int cols, const float* x, int batch, float* y, int ldy)
{
    switch (batch) {
        FOR_BATCHES(CASE_FP32) default : break;
    }
}
