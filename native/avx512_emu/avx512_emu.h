/* Test-only: the AVX-512 (F/BW/BF16) kernels compiled against SIMDe's portable implementation
 * (Debian libsimde-dev, <simde/x86/avx512.h>) so their numerics are checked on any host, AVX-512
 * or not. Included instead of <immintrin.h> where SL_AVX512_EMULATE is defined (gemv/kernels.c,
 * gemv/avx512_rows.c); the binaries built this way (gemv_avx512_emu, layer_avx512_emu) are never
 * used for timing.
 *
 * SIMDE_NO_NATIVE: emulate even where the CPU has AVX-512, so the build and its results are the
 * same on every host. SIMDe 0.7.4 has _mm512_dpbf16_ps. It is not the SDM's exact sequence:
 * SIMDe adds the pair's even product, then the odd one (the SDM: odd, then even), and keeps bf16
 * denormals (hardware: DAZ). Both are below the FP32 checks' resolution on these data. */
#ifndef SL_AVX512_EMU_H
#define SL_AVX512_EMU_H

#ifndef SIMDE_NO_NATIVE
#define SIMDE_NO_NATIVE
#endif
#ifndef SIMDE_ENABLE_NATIVE_ALIASES
#define SIMDE_ENABLE_NATIVE_ALIASES
#endif
#include <simde/x86/avx512.h>

#include <stdint.h>
#include <string.h>

/* SIMDe 0.7.4 has simde_mm512_shuffle_f32x4 but no native alias for it */
#ifndef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm8) simde_mm512_shuffle_f32x4(a, b, imm8)
#endif

/* No target attributes: the compiler must not emit AVX-512 for the emulated code itself. */
#undef SL_TARGET_AVX512
#undef SL_TARGET_AVX512BF16
#define SL_TARGET_AVX512
#define SL_TARGET_AVX512BF16

/* acc += dpbf16(w, x): VDPBF16PS on two registers of 32 bf16 (gemv/avx512_rows.c) */
static inline __m512 sl_emu_dpbf16(__m512 acc, __m512i w, __m512i x)
{
    __m512bh a, b;
    memcpy(&a, &w, sizeof(a));
    memcpy(&b, &x, sizeof(b));
    return _mm512_dpbf16_ps(acc, a, b);
}

/* sl.h spells VDPBF16PS {1to16} as inline asm (what real hardware runs); here the same operation
 * through SIMDe: acc += dpbf16(w, the bf16 pair at xpair broadcast to every lane). */
static inline __m512 sl_emu_dpbf16_bcast(__m512 acc, __m512i w, const void* xpair)
{
    int32_t pair;
    memcpy(&pair, xpair, sizeof(pair));
    return sl_emu_dpbf16(acc, w, _mm512_set1_epi32(pair));
}
#undef SL_DPBF16_BCAST
#define SL_DPBF16_BCAST(acc, w, xpair) ((acc) = sl_emu_dpbf16_bcast((acc), (w), (xpair)))

#endif
