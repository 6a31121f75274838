/* Test data, packing into the 16-row block layouts, and the FP32 reference. */
#include "gemv.h"
#include "sl.h"

static uint32_t mix(uint32_t a, uint32_t b)
{
    uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca6bu;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    return h;
}

uint16_t gemv_weight(int row, int col)
{
    return sl_f32_to_bf16((float)mix((uint32_t)row, (uint32_t)col) * (2.0f / 4294967296.0f) - 1.0f);
}

uint16_t gemv_input(int b, int col)
{
    return sl_f32_to_bf16(
        (float)mix(0x51ed27u + (uint32_t)b, (uint32_t)col) * (2.0f / 4294967296.0f) - 1.0f);
}

void pack_bf16_vnni(uint16_t* out, int row0, int nblocks, int rows_total, int cols)
{
    const int kpairs = cols / 2;
    for (int blk = 0; blk < nblocks; blk++)
        for (int kp = 0; kp < kpairs; kp++) {
            uint16_t* line = out + ((size_t)blk * kpairs + kp) * 32;
            for (int r = 0; r < GEMV_BLOCK_ROWS; r++) {
                const int row = row0 + blk * GEMV_BLOCK_ROWS + r;
                line[2 * r] = row < rows_total ? gemv_weight(row, 2 * kp) : 0;
                line[2 * r + 1] = row < rows_total ? gemv_weight(row, 2 * kp + 1) : 0;
            }
        }
}

void pack_bf16_rowmajor(uint16_t* out, int row0, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols; k++)
            out[(size_t)r * cols + k] = gemv_weight(row0 + r, k);
}

void pack_fp32(float* out, int row0, int nblocks, int rows_total, int cols)
{
    for (int blk = 0; blk < nblocks; blk++)
        for (int k = 0; k < cols; k++) {
            float* line = out + ((size_t)blk * cols + k) * 16;
            for (int r = 0; r < GEMV_BLOCK_ROWS; r++) {
                const int row = row0 + blk * GEMV_BLOCK_ROWS + r;
                line[r] = row < rows_total ? sl_bf16_to_f32(gemv_weight(row, k)) : 0.0f;
            }
        }
}

void gemv_reference(double* y, int rows, int cols, int batch)
{
    for (int b = 0; b < batch; b++)
        for (int r = 0; r < rows; r++) {
            double s = 0;
            for (int k = 0; k < cols; k++)
                s += (double)sl_bf16_to_f32(gemv_weight(r, k)) * sl_bf16_to_f32(gemv_input(b, k));
            y[(size_t)b * rows + r] = s;
        }
}
