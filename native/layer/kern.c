/* The stage's GEMV kernels, native/gemv's (one source each). On the dump's row-major rows as they
 * are: avx512 (gemv/avx512_rows.c, VDPBF16PS, the published AVX path: a worker streams exactly
 * its rows' bytes) and avx2 (gemv/avx2.c, FP32 FMA on bf16 weights widened in registers). On
 * 16-row VNNI blocks packed here: amx and avx512-vnni (gemv/kernels.c; AMX's layout for VDPBF16PS,
 * for comparison: a worker's rows are padded to whole blocks, which at 90 workers is up to ~1.6x
 * the bytes). scalar is the reference-like fallback; avx2 is the portable path, so the gate runs
 * on every x86-64 host. All take bf16 inputs: the BF16 mode rounds every GEMV input, and so does
 * the stage. */
#include "layer.h"
#include "../gemv/gemv.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const char* const l_gemv_names[] = { "scalar", "avx2", "avx512", "amx", "avx512-vnni", NULL };

#ifdef SL_AVX512_EMULATE
int l_avx512_emulated = 1; /* gemv's AVX-512 kernels on SIMDe (layer_avx512_emu, test-only) */
#else
int l_avx512_emulated = 0;
#endif
#ifdef SL_AMX_EMULATE
int l_amx_emulated = 1;
/* the emulator keeps one tile state per process: workers take turns (test builds only) */
static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
#else
int l_amx_emulated = 0;
#endif

int l_padded(int kernel) { return kernel == G_AVX512_VNNI || kernel == G_AMX; }

int l_rows_written(int kernel, int rows) { return l_padded(kernel) ? (rows + 15) / 16 * 16 : rows; }

size_t l_slice_bytes(int kernel, int rows, int cols)
{
    return (size_t)l_rows_written(kernel, rows) * (size_t)cols * 2;
}

void l_pack(int kernel, uint16_t* dst, const uint16_t* w, int r0, int rows, int cols)
{
    if (!l_padded(kernel)) {
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

/* per-thread fp32 copy of the bf16 inputs for the scalar kernel (avx2 widens in registers) */
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

static void gemv_scalar(
    const uint16_t* w, int rows, int cols, const float* x, int batch, float* y, int ldy)
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

static _Thread_local int amx_rows; /* A rows of the loaded tile config, 0 = none */

void l_kernel_thread_init(int kernel) { amx_rows = 0; }

void l_amx_keep_warm(void)
{
#ifndef SL_AMX_EMULATE /* the emulator's tiles are shared by the workers, under a lock */
    if (amx_rows)
        gemv_amx_keep_warm();
#endif
}

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
    case G_SCALAR:
        gemv_scalar(w, rows, cols, widen_x(x, (size_t)batch * cols), batch, y, ldy);
        break;
    case G_AVX2:
        gemv_avx2_bf16(w, rows, cols, x, batch, y, ldy);
        break;
    case G_AVX512:
        gemv_avx512_bf16_rows(w, rows, cols, x, batch, y, ldy);
        break;
    case G_AVX512_VNNI:
        gemv_avx512_bf16(w, (rows + 15) / 16, cols, x, batch, y, ldy);
        break;
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
