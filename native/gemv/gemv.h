/* gemv: row-partitioned BF16 GEMV/GEMM stage. Weights are row-major (avx2-bf16,
 * avx512-bf16-rows) or packed per 16-row block:
 *  - bf16 VNNI: line (block, k pair) = 16 rows x (W[r][2kp], W[r][2kp+1]) = 64 B; 16 such lines
 *    (32 k values) form exactly one AMX B tile, and VDPBF16PS consumes one line per step;
 *  - fp32: line (block, k) = 16 rows x W[r][k] = 64 B.
 * x is batch x cols (bf16 or fp32, row-major); y is batch x ldy fp32. */
#ifndef GEMV_H
#define GEMV_H

#include <stddef.h>
#include <stdint.h>

#define GEMV_BLOCK_ROWS 16
#define GEMV_MAX_BATCH 16

/* deterministic test matrix and activations, values already rounded to bf16 */
uint16_t gemv_weight(int row, int col);
uint16_t gemv_input(int b, int col);

/* pack rows [row0, row0 + 16*nblocks) of the generated W; rows >= rows_total are zero */
void pack_bf16_vnni(uint16_t* out, int row0, int nblocks, int rows_total, int cols);
void pack_fp32(float* out, int row0, int nblocks, int rows_total, int cols);
/* FP32 (double-accumulated) reference of y = W x for all rows, batch x rows */
void gemv_reference(double* y, int rows, int cols, int batch);

void gemv_avx512_bf16(
    const uint16_t* w, int nblocks, int cols, const uint16_t* x, int batch, float* y, int ldy);
/* avx2.c: W row-major (rows x cols bf16, no padding), x batch x cols bf16, cols a multiple of 16 */
void gemv_avx2_bf16(
    const uint16_t* w, int rows, int cols, const uint16_t* x, int batch, float* y, int ldy);
void pack_bf16_rowmajor(uint16_t* out, int row0, int rows, int cols);
/* avx512_rows.c: VDPBF16PS on W row-major (rows x cols bf16, no padding: the published AVX
 * path), x batch x cols bf16, cols a multiple of 32; writes y[b * ldy + r] for r < rows only */
void gemv_avx512_bf16_rows(
    const uint16_t* w, int rows, int cols, const uint16_t* x, int batch, float* y, int ldy);
void gemv_avx512_fp32(
    const float* w, int nblocks, int cols, const float* x, int batch, float* y, int ldy);
/* amx.c: load the tile config for this batch (per thread), then run; release at the end */
void gemv_amx_config(int batch);
void gemv_amx_bf16(
    const uint16_t* w, int nblocks, int cols, const uint16_t* x, int batch, float* y, int ldy);
void gemv_amx_release(void);
void gemv_amx_keep_warm(void); /* one TDPBF16PS on the loaded config (layer's spin-waits) */
/* emulated builds only (test hook) */
void gemv_amx_config_rows_override(int a_rows);

#endif
