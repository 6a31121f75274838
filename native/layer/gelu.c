/* The stage's gelu_tanh(y) * mul (the act and pact phases), vectorised, at a cost that does not
 * depend on the input. libm's tanhf branches on |x| (7.9-13.2 ns per element across input
 * spreads here), so a gelu phase timed on one shape mispredicted another (issue 13). Here:
 *   0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
 * (the same function, without 1 + tanh's cancellation for negative x), exp as Cephes' expf:
 * n = round(t log2 e), r = t - n ln 2 in two parts, a degree-5 polynomial, times 2^n from the
 * exponent bits; t clamped to [-87, 88] so 2^n stays a normal float and 1 + e never overflows
 * (beyond it gelu is x or 0 to float precision). No branch, no table: every element takes the
 * same instructions. AVX-512 and AVX2 where the CPU has them (picked once, l_gelu_init), else
 * scalar; all three run the same operation sequence (every a * b + c an explicit FMA, so no
 * compiler contraction changes one of them), so they agree bit for bit. */
#include "layer.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define G_C2 1.5957691216057308f /* 2 sqrt(2/pi) */
#define G_A 0.044715f
#define E_LO -87.0f
#define E_HI 88.0f
#define E_LOG2E 1.44269504088896341f
#define E_LN2_HI 0.693359375f
#define E_LN2_LO -2.12194440e-4f
#define E_P0 1.9875691500e-4f
#define E_P1 1.3981999507e-3f
#define E_P2 8.3334519073e-3f
#define E_P3 4.1665795894e-2f
#define E_P4 1.6666665459e-1f
#define E_P5 5.0000001201e-1f

static float gelu1(float x)
{
    const float z = G_C2 * x * fmaf(G_A * x, x, 1.0f);
    float t = -z;
    t = t < E_LO ? E_LO : t > E_HI ? E_HI : t;
    const float n = rintf(t * E_LOG2E);
    float r = fmaf(-n, E_LN2_HI, t);
    r = fmaf(-n, E_LN2_LO, r);
    float p = E_P0;
    p = fmaf(p, r, E_P1);
    p = fmaf(p, r, E_P2);
    p = fmaf(p, r, E_P3);
    p = fmaf(p, r, E_P4);
    p = fmaf(p, r, E_P5);
    const float y = fmaf(p, r * r, r) + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return x / fmaf(y, scale, 1.0f);
}

static void gelu_scalar(float* out, const float* y, const float* mul, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = gelu1(y[i]) * mul[i];
}

#define GELU_BODY(V, SET1, MUL, FMA, FNMA, ADD, MIN, MAX, ROUND, CVT, SLLI, ADDI, CAST, DIV)       \
    do {                                                                                           \
        const V z = MUL(MUL(SET1(G_C2), x), FMA(MUL(SET1(G_A), x), x, SET1(1.0f)));                \
        const V t = MIN(MAX(MUL(z, SET1(-1.0f)), SET1(E_LO)), SET1(E_HI));                         \
        const V nf = ROUND(MUL(t, SET1(E_LOG2E)));                                                 \
        V r = FNMA(nf, SET1(E_LN2_HI), t);                                                         \
        r = FNMA(nf, SET1(E_LN2_LO), r);                                                           \
        V p = SET1(E_P0);                                                                          \
        p = FMA(p, r, SET1(E_P1));                                                                 \
        p = FMA(p, r, SET1(E_P2));                                                                 \
        p = FMA(p, r, SET1(E_P3));                                                                 \
        p = FMA(p, r, SET1(E_P4));                                                                 \
        p = FMA(p, r, SET1(E_P5));                                                                 \
        const V e = ADD(FMA(p, MUL(r, r), r), SET1(1.0f));                                         \
        const V scale = CAST(SLLI(ADDI(CVT(nf)), 23));                                             \
        g = DIV(x, FMA(e, scale, SET1(1.0f)));                                                     \
    } while (0)

#define R256(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define ADDI256(v) _mm256_add_epi32(v, _mm256_set1_epi32(127))
static SL_TARGET_AVX2 void gelu_avx2(float* out, const float* y, const float* mul, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(y + i);
        __m256 g;
        GELU_BODY(__m256, _mm256_set1_ps, _mm256_mul_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps,
            _mm256_add_ps, _mm256_min_ps, _mm256_max_ps, R256, _mm256_cvtps_epi32,
            _mm256_slli_epi32, ADDI256, _mm256_castsi256_ps, _mm256_div_ps);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(g, _mm256_loadu_ps(mul + i)));
    }
    gelu_scalar(out + i, y + i, mul + i, n - i);
}

#define R512(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define ADDI512(v) _mm512_add_epi32(v, _mm512_set1_epi32(127))
static SL_TARGET_AVX512 void gelu_avx512(float* out, const float* y, const float* mul, int n)
{
    for (int i = 0; i < n; i += 16) {
        /* the tail as a masked vector: the same operations as the full ones */
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(m, y + i);
        __m512 g;
        GELU_BODY(__m512, _mm512_set1_ps, _mm512_mul_ps, _mm512_fmadd_ps, _mm512_fnmadd_ps,
            _mm512_add_ps, _mm512_min_ps, _mm512_max_ps, R512, _mm512_cvtps_epi32,
            _mm512_slli_epi32, ADDI512, _mm512_castsi512_ps, _mm512_div_ps);
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, mul + i)));
    }
}

const char* const l_gelu_names[] = { "auto", "scalar", "avx2", "avx512", NULL };
static void (*gelu_fn)(float*, const float*, const float*, int) = gelu_scalar;

int l_gelu_init(int which)
{
    const char* why;
    if (which == L_GELU_AUTO)
        which = sl_have_avx512(&why) ? L_GELU_AVX512
            : sl_have_avx2(&why)     ? L_GELU_AVX2
                                     : L_GELU_SCALAR;
    if (which == L_GELU_AVX512 && !sl_have_avx512(&why))
        sl_unsupported("--gelu avx512: %s", why);
    if (which == L_GELU_AVX2 && !sl_have_avx2(&why))
        sl_unsupported("--gelu avx2: %s", why);
    gelu_fn = which == L_GELU_AVX512 ? gelu_avx512 : which == L_GELU_AVX2 ? gelu_avx2 : gelu_scalar;
    return which;
}

void l_gelu_mul(float* out, const float* y, const float* mul, int n) { gelu_fn(out, y, mul, n); }

float l_gelu_scalar(float x) { return gelu1(x); }
