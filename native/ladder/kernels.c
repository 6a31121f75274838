/* AVX-512 / AVX2 read kernels and the VDPBF16PS GEMV stream, with their references. */
#include "kernels.h"
#include "sl.h"

#include <immintrin.h>

const kernel_info kernel_table[K_COUNT] = {
    [K_AVX512_READ] = { "avx512-read", 256, 0.0, "avx512", 0, 0 },
    [K_AVX2_READ] = { "avx2-read", 256, 0.0, "avx2", 0, 0 },
    /* 32 bf16 weights per 64 B line, 2 flops each */
    [K_AVX512_BF16_GEMV] = { "avx512-bf16-gemv", 256, 1.0, "avx512bf16", 0, 0 },
    /* per 1 KiB B tile: 16 x 16 x 32 MACs = 16384 flops */
    [K_AMX_BF16_STREAM] = { "amx-bf16-stream", 4096, 16.0, "amx-bf16", 0, 0 },
    /* 64 flops per zmm VDPBF16PS (16 lanes x 2 bf16 pairs x multiply-add) */
    [K_AVX512_BF16_COMPUTE]
    = { "avx512-bf16-compute", 64, 0.0, "avx512bf16", 64.0 * LADDER_DP_ACCS* LADDER_DP_ITERS, 64 },
    /* 16 x 16 x 32 multiply-adds = 16384 flops per TDPBF16PS */
    [K_AMX_BF16_COMPUTE]
    = { "amx-bf16-compute", 64, 0.0, "amx-bf16", 16384.0 * 4 * LADDER_TDP_ITERS, 1 },
};

static uint16_t bf16_small_int(uint64_t i)
{
    /* -1, 0, 1 as bf16, so every fp32 partial sum stays an exact integer */
    static const uint16_t v[3] = { 0xbf80, 0x0000, 0x3f80 };
    return v[(i * 2654435761u >> 7) % 3];
}

void fill_buffer(kernel_id k, void* buf, size_t bytes)
{
    if (k == K_AVX512_READ || k == K_AVX2_READ) {
        uint64_t* q = buf;
        for (size_t i = 0; i < bytes / 8; i++)
            q[i] = i * 0x9e3779b97f4a7c15ull;
        return;
    }
    uint16_t* h = buf;
    for (size_t i = 0; i < bytes / 2; i++)
        h[i] = bf16_small_int(i);
}

/* the x pairs the GEMV stream broadcasts, cycling every 64 lines */
static float x_pair(size_t line, int half) { return ((line + (size_t)half) % 3) - 1.0f; }

double expected_full_sum(const void* buf, size_t bytes)
{
    const uint64_t* q = buf;
    uint64_t s = 0;
    for (size_t i = 0; i < bytes / 8; i++)
        s += q[i];
    return (double)(s & ((1ull << 48) - 1));
}

double expected_checksum(kernel_id k, const void* buf, size_t bytes, uint64_t passes)
{
    if (k == K_AVX512_READ || k == K_AVX2_READ) {
        const uint64_t* q = buf;
        uint64_t s = 0;
        /* avx512-read folds only each pass's last 256 B block (see run_avx512_read) */
        for (size_t i = k == K_AVX512_READ ? bytes / 8 - 32 : 0; i < bytes / 8; i++)
            s += q[i];
        /* kernels fold the 64-bit sum to its low 48 bits so the double is exact */
        return (double)((s * passes) & ((1ull << 48) - 1));
    }
    if (k == K_AVX512_BF16_COMPUTE) {
        /* accumulator i starts at i and gains 1*3 + 2*1 = 5 per lane per instruction */
        const double lane
            = LADDER_DP_ACCS * (LADDER_DP_ACCS - 1) / 2.0 + LADDER_DP_ACCS * 5.0 * LADDER_DP_ITERS;
        return 16.0 * lane * (double)passes;
    }
    if (k == K_AMX_BF16_COMPUTE) {
        /* per element and instruction: 32 pairs of A (1 or 2) x B (1/8 or 1/4): C4..C7 gain
         * 4, 8, 8, 16; 256 elements per tile */
        return 256.0 * (4 + 8 + 8 + 16) * LADDER_TDP_ITERS * (double)passes;
    }
    const uint16_t* h = buf;
    if (k == K_AVX512_BF16_GEMV) {
        double s = 0;
        for (size_t line = 0; line < bytes / 64; line++) {
            const uint16_t* w = h + line * 32;
            const float x0 = x_pair(line % 64, 0), x1 = x_pair(line % 64, 1);
            for (int lane = 0; lane < 16; lane++)
                s += sl_bf16_to_f32(w[2 * lane]) * x0 + sl_bf16_to_f32(w[2 * lane + 1]) * x1;
        }
        return s * (double)passes;
    }
    /* AMX: C[m][n] += sum_k A[m][k] * B[k][n] over every 1 KiB B tile; checksum = sum of C */
    uint16_t a[16][32];
    amx_stream_a_tile(a);
    double s = 0;
    for (size_t tile = 0; tile < bytes / 1024; tile++) {
        const uint16_t* b = h + tile * 512; /* 16 rows x 32 bf16, VNNI pairs */
        for (int m = 0; m < 16; m++)
            for (int kp = 0; kp < 16; kp++)
                for (int n = 0; n < 16; n++)
                    s += sl_bf16_to_f32(a[m][2 * kp]) * sl_bf16_to_f32(b[kp * 32 + 2 * n])
                        + sl_bf16_to_f32(a[m][2 * kp + 1]) * sl_bf16_to_f32(b[kp * 32 + 2 * n + 1]);
    }
    return s * (double)passes;
}

/* The timed loop is likwid load_avx512's: 4 independent 64 B loads per 256 B that nothing
 * consumes. Any consumer (even one add per 256 B) cost ~15-20% from L3 on this EPYC VM (103-105
 * vs 121-127 GB/s), so the loads sit in asm volatile (never elided) and only the last block of
 * each pass is folded into the checksum; verify_avx512_read checks every word. */
SL_TARGET_AVX512 double run_avx512_read(const void* buf, size_t bytes, uint64_t passes)
{
    __m512i acc = _mm512_setzero_si512();
    const char* const end = (const char*)buf + bytes;
    for (uint64_t p = 0; p < passes; p++) {
        __m512i r0, r1, r2, r3;
        const char* s = buf;
        do {
            __asm__ volatile("vmovdqa64 (%4), %0\n\t"
                             "vmovdqa64 64(%4), %1\n\t"
                             "vmovdqa64 128(%4), %2\n\t"
                             "vmovdqa64 192(%4), %3"
                             : "=v"(r0), "=v"(r1), "=v"(r2), "=v"(r3)
                             : "r"(s)
                             : "memory");
            s += 256;
        } while (s < end);
        acc = _mm512_add_epi64(
            acc, _mm512_add_epi64(_mm512_add_epi64(r0, r1), _mm512_add_epi64(r2, r3)));
    }
    const uint64_t sum = (uint64_t)_mm512_reduce_add_epi64(acc);
    return (double)(sum & ((1ull << 48) - 1));
}

/* every word of the buffer, 4 accumulators: the untimed pass before each repetition */
SL_TARGET_AVX512 double verify_avx512_read(const void* buf, size_t bytes)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    const char* const end = (const char*)buf + bytes;
    for (const char* s = buf; s < end; s += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void*)(s)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void*)(s + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void*)(s + 128)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void*)(s + 192)));
    }
    const __m512i t = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    const uint64_t sum = (uint64_t)_mm512_reduce_add_epi64(t);
    return (double)(sum & ((1ull << 48) - 1));
}

SL_TARGET_AVX2 double run_avx2_read(const void* buf, size_t bytes, uint64_t passes)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    const char* const end = (const char*)buf + bytes;
    for (uint64_t p = 0; p < passes; p++) {
        for (const char* s = buf; s < end; s += 256) {
            a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i*)(s)));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i*)(s + 32)));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i*)(s + 64)));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i*)(s + 96)));
            a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i*)(s + 128)));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i*)(s + 160)));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i*)(s + 192)));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i*)(s + 224)));
        }
    }
    const __m256i t = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i*)lanes, t);
    return (double)((lanes[0] + lanes[1] + lanes[2] + lanes[3]) & ((1ull << 48) - 1));
}

SL_TARGET_AVX512BF16 double run_avx512_bf16_gemv(const void* buf, size_t bytes, uint64_t passes)
{
    /* batch-1 GEMV over VNNI-packed weights: one broadcast x pair per 64 B line */
    _Alignas(64) uint32_t xb[64]; /* bf16 pair (x0 low, x1 high) per line */
    for (int i = 0; i < 64; i++)
        xb[i] = sl_f32_to_bf16(x_pair((size_t)i, 0))
            | (uint32_t)sl_f32_to_bf16(x_pair((size_t)i, 1)) << 16;
    const size_t lines = bytes / 64;
    double total = 0;
    for (uint64_t p = 0; p < passes; p++) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        const char* s = buf;
        for (size_t line = 0; line < lines; line += 4, s += 256) {
            const size_t j = line % 64;
            SL_DPBF16_BCAST(a0, _mm512_load_si512((const void*)s), &xb[j]);
            SL_DPBF16_BCAST(a1, _mm512_load_si512((const void*)(s + 64)), &xb[j + 1]);
            SL_DPBF16_BCAST(a2, _mm512_load_si512((const void*)(s + 128)), &xb[j + 2]);
            SL_DPBF16_BCAST(a3, _mm512_load_si512((const void*)(s + 192)), &xb[j + 3]);
        }
        total += (double)_mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    }
    return total;
}

/* zmm += VDPBF16PS(zmm, zmm): registers only, no memory operand */
#define DP(acc) __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))

SL_TARGET_AVX512BF16 double run_avx512_bf16_compute(const void* buf, size_t bytes, uint64_t passes)
{
    /* a = bf16 pairs (1, 2), b = (3, 1): every lane gains 5 per instruction, exactly */
    const __m512i a = _mm512_set1_epi32((int)(0x3f80u | 0x4000u << 16));
    const __m512i b = _mm512_set1_epi32((int)(0x4040u | 0x3f80u << 16));
    double total = 0;
    for (uint64_t p = 0; p < passes; p++) {
        /* 16 independent chains: enough to cover VDPBF16PS latency on both FMA ports */
        __m512 c0 = _mm512_set1_ps(0), c1 = _mm512_set1_ps(1), c2 = _mm512_set1_ps(2),
               c3 = _mm512_set1_ps(3), c4 = _mm512_set1_ps(4), c5 = _mm512_set1_ps(5),
               c6 = _mm512_set1_ps(6), c7 = _mm512_set1_ps(7), c8 = _mm512_set1_ps(8),
               c9 = _mm512_set1_ps(9), c10 = _mm512_set1_ps(10), c11 = _mm512_set1_ps(11),
               c12 = _mm512_set1_ps(12), c13 = _mm512_set1_ps(13), c14 = _mm512_set1_ps(14),
               c15 = _mm512_set1_ps(15);
        for (int it = 0; it < LADDER_DP_ITERS; it++) {
            DP(c0);
            DP(c1);
            DP(c2);
            DP(c3);
            DP(c4);
            DP(c5);
            DP(c6);
            DP(c7);
            DP(c8);
            DP(c9);
            DP(c10);
            DP(c11);
            DP(c12);
            DP(c13);
            DP(c14);
            DP(c15);
        }
        const __m512 s0 = _mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3));
        const __m512 s1 = _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7));
        const __m512 s2 = _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11));
        const __m512 s3 = _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15));
        /* integers below 2^24 throughout: every sum is exact */
        total += (double)_mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    }
    return total;
}

double measure_core_ghz(void)
{
    const double tsc = sl_tsc_ghz();
    double best = 0;
    for (int r = 0; r < 3; r++) {
        uint64_t x = 1, n = 1u << 15; /* 8 IMULs an iteration: 262,144 x 3 cycles */
        const uint64_t one = 1, t0 = sl_rdtsc();
        __asm__ volatile("1:\n\t"
                         "imul %2, %0\n\timul %2, %0\n\timul %2, %0\n\timul %2, %0\n\t"
                         "imul %2, %0\n\timul %2, %0\n\timul %2, %0\n\timul %2, %0\n\t"
                         "dec %1\n\tjnz 1b"
                         : "+r"(x), "+r"(n)
                         : "r"(one)
                         : "cc");
        const uint64_t t1 = sl_rdtsc();
        const double ghz = 3.0 * 8 * (1u << 15) / ((double)(t1 - t0) / tsc);
        best = ghz > best ? ghz : best;
    }
    return best;
}
