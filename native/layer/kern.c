/* The stage's GEMV kernels. avx512 and amx are native/gemv's kernels (16-row VNNI blocks, packed
 * here from the dump's row-major matrices); scalar and avx2 are the portable path (FP32 FMA on
 * bf16 weights widened in registers) so the gate runs on every x86-64 host. All take bf16
 * inputs: the BF16 mode rounds every GEMV input, and so does the stage. */
#include "layer.h"
#include "../gemv/gemv.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const char* const l_gemv_names[] = { "scalar", "avx2", "avx512", "amx", NULL };

#ifdef SL_AMX_EMULATE
int l_amx_emulated = 1;
/* the emulator keeps one tile state per process: workers take turns (test builds only) */
static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
#else
int l_amx_emulated = 0;
#endif

static int padded(int kernel) { return kernel == G_AVX512 || kernel == G_AMX; }

int l_rows_written(int kernel, int rows) { return padded(kernel) ? (rows + 15) / 16 * 16 : rows; }

size_t l_slice_bytes(int kernel, int rows, int cols)
{
    return (size_t)l_rows_written(kernel, rows) * (size_t)cols * 2;
}

void l_pack(int kernel, uint16_t* dst, const uint16_t* w, int r0, int rows, int cols)
{
    if (!padded(kernel)) {
        memcpy(dst, w + (size_t)r0 * cols, (size_t)rows * cols * 2);
        return;
    }
    /* gemv.h: line (block, k pair) = 16 rows x (W[r][2kp], W[r][2kp+1]) */
    const int kpairs = cols / 2, nblocks = (rows + 15) / 16;
    for (int blk = 0; blk < nblocks; blk++)
        for (int kp = 0; kp < kpairs; kp++) {
            uint16_t* line = dst + ((size_t)blk * kpairs + kp) * 32;
            for (int r = 0; r < 16; r++) {
                const int row = blk * 16 + r;
                const uint16_t* src = w + (size_t)(r0 + row) * cols + 2 * kp;
                line[2 * r] = row < rows ? src[0] : 0;
                line[2 * r + 1] = row < rows ? src[1] : 0;
            }
        }
}

/* per-thread fp32 copy of the bf16 inputs for the portable kernels */
static _Thread_local float* xw;
static _Thread_local size_t xw_cap;

static float* widen_x(const uint16_t* x, size_t n)
{
    if (n > xw_cap) {
        free(xw);
        xw = aligned_alloc(64, (n + 16) * sizeof(float));
        xw_cap = n;
    }
    for (size_t i = 0; i < n; i++)
        xw[i] = sl_bf16_to_f32(x[i]);
    return xw;
}

static void gemv_scalar(const uint16_t* w, int rows, int cols, const float* x, int batch, float* y,
                        int ldy)
{
    for (int r = 0; r < rows; r++) {
        const uint16_t* wr = w + (size_t)r * cols;
        for (int b = 0; b < batch; b++) {
            const float* xb = x + (size_t)b * cols;
            float acc[8] = { 0 };
            int k = 0;
            for (; k + 8 <= cols; k += 8)
                for (int j = 0; j < 8; j++)
                    acc[j] += sl_bf16_to_f32(wr[k + j]) * xb[k + j];
            float s = 0;
            for (; k < cols; k++)
                s += sl_bf16_to_f32(wr[k]) * xb[k];
            for (int j = 0; j < 8; j++)
                s += acc[j];
            y[(size_t)b * ldy + r] = s;
        }
    }
}

static SL_TARGET_AVX2 inline __m256 load8_bf16(const uint16_t* p)
{
    const __m128i h = _mm_loadu_si128((const __m128i*)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static SL_TARGET_AVX2 float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* one weight row against up to 4 inputs per pass; cols % 8 == 0 (checked at start) */
static SL_TARGET_AVX2 void gemv_avx2(const uint16_t* w, int rows, int cols, const float* x,
                                     int batch, float* y, int ldy)
{
    for (int r = 0; r < rows; r++) {
        const uint16_t* wr = w + (size_t)r * cols;
        for (int b0 = 0; b0 < batch; b0 += 4) {
            const int nb = batch - b0 < 4 ? batch - b0 : 4;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const float* x0 = x + (size_t)b0 * cols;
            for (int k = 0; k < cols; k += 8) {
                const __m256 wv = load8_bf16(wr + k);
                a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + k), a0);
                if (nb > 1)
                    a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + cols + k), a1);
                if (nb > 2)
                    a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + 2 * (size_t)cols + k), a2);
                if (nb > 3)
                    a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + 3 * (size_t)cols + k), a3);
            }
            const __m256 acc[4] = { a0, a1, a2, a3 };
            for (int j = 0; j < nb; j++)
                y[(size_t)(b0 + j) * ldy + r] = hsum8(acc[j]);
        }
    }
}

static _Thread_local int amx_rows; /* A rows of the loaded tile config, 0 = none */

void l_kernel_thread_init(int kernel) { amx_rows = 0; }

void l_kernel_thread_done(int kernel)
{
#ifndef SL_AMX_EMULATE
    if (kernel == G_AMX && amx_rows)
        gemv_amx_release();
#endif
    amx_rows = 0;
}

void l_gemv(int kernel, const uint16_t* w, int rows, int cols, const uint16_t* x, int batch,
            float* y, int ldy)
{
    if (rows <= 0)
        return;
    switch (kernel) {
    case G_SCALAR: gemv_scalar(w, rows, cols, widen_x(x, (size_t)batch * cols), batch, y, ldy); break;
    case G_AVX2: gemv_avx2(w, rows, cols, widen_x(x, (size_t)batch * cols), batch, y, ldy); break;
    case G_AVX512: gemv_avx512_bf16(w, (rows + 15) / 16, cols, x, batch, y, ldy); break;
    case G_AMX:
#ifdef SL_AMX_EMULATE
        pthread_mutex_lock(&emu_lock);
        gemv_amx_config(batch);
        gemv_amx_bf16(w, (rows + 15) / 16, cols, x, batch, y, ldy);
        gemv_amx_release();
        pthread_mutex_unlock(&emu_lock);
#else
        /* the tile config holds A's row count: reload only when the batch shape changes */
        if (amx_rows != batch) {
            gemv_amx_config(batch);
            amx_rows = batch;
        }
        gemv_amx_bf16(w, (rows + 15) / 16, cols, x, batch, y, ldy);
#endif
        break;
    }
}
