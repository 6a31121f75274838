/* ladder kernels: each streams `bytes` (a multiple of the kernel's block) `passes` times and
 * returns a checksum the caller compares with the expected value. */
#ifndef LADDER_KERNELS_H
#define LADDER_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    K_AVX512_READ,
    K_AVX2_READ,
    K_AVX512_BF16_GEMV,
    K_AMX_BF16_STREAM,
    K_AVX512_BF16_COMPUTE,
    K_AMX_BF16_COMPUTE,
    K_COUNT
} kernel_id;

/* One table of per-kernel work: rates are derived from it, never hard-coded per kernel. */
typedef struct {
    const char* name;
    size_t block; /* bytes per loop step: sizes are rounded down to it */
    double flops_per_byte; /* 0 for pure reads */
    const char* isa;
    /* compute-only kernels (registers / resident tiles): the buffer is not read; a pass is a
     * fixed number of instructions worth flops_per_pass, timed every `chunk` passes */
    double flops_per_pass;
    unsigned chunk;
} kernel_info;
extern const kernel_info kernel_table[K_COUNT];

/* The checksum is a double (integer valued, exact below 2^53) for every kernel. */
void fill_buffer(kernel_id k, void* buf, size_t bytes);
double expected_checksum(kernel_id k, const void* buf, size_t bytes, uint64_t passes);
double run_avx512_read(const void* buf, size_t bytes, uint64_t passes);
/* avx512-read's check of every word (untimed): equals expected_full_sum */
double verify_avx512_read(const void* buf, size_t bytes);
double expected_full_sum(const void* buf, size_t bytes);
double run_avx2_read(const void* buf, size_t bytes, uint64_t passes);
double run_avx512_bf16_gemv(const void* buf, size_t bytes, uint64_t passes);
/* amx.c: the tile config both AMX kernels load (8 tiles of 16 x 64 B); tilecfg_check calls it */
void ladder_amx_config(void);
/* amx.c: B tiles (1 KiB) streamed from buf against one resident A tile, 4 per 4 KiB */
double run_amx_bf16_stream(const void* buf, size_t bytes, uint64_t passes);
/* VDPBF16PS on 16 zmm accumulators, registers only: LADDER_DP_ITERS x 16 instructions a pass */
#define LADDER_DP_ITERS 1024
#define LADDER_DP_ACCS 16
double run_avx512_bf16_compute(const void* buf, size_t bytes, uint64_t passes);
/* amx.c: TDPBF16PS on resident tiles only, 2x2 blocking (A0,A1 x B0,B1 -> C4..C7),
 * LADDER_TDP_ITERS x 4 instructions a pass */
#define LADDER_TDP_ITERS 2048
double run_amx_bf16_compute(const void* buf, size_t bytes, uint64_t passes);
/* core clock in GHz from a chain of dependent 64-bit IMULs (3-cycle latency on every
 * Intel core since Core 2 and every AMD Zen), best of three ~1 ms windows */
double measure_core_ghz(void);
/* bf16 A tile used by the AMX stream (16 rows x 32 bf16), shared with the reference */
void amx_stream_a_tile(uint16_t a[16][32]);

#endif
