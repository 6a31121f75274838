/* kvstream: decode attention for one query over L cached tokens, split by position over pinned
 * workers: tiled online softmax per head, per-worker partials (max, sum, acc), then each head
 * combined by one worker. Checked against a double-precision softmax reference. */
#include "sl.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[]
    = "usage: kvstream --tokens L --cpus LIST [options]\n"
      "One decode step of attention: q (heads x D, fp32) against K and V (heads x L x D, bf16),\n"
      "tokens split by position over the workers, each worker's KV in its own slice.\n"
      "  --tokens L          cached tokens (e.g. 8192, 32K)\n"
      "  --heads H           KV heads (default 8)\n"
      "  --head-dim D        multiple of 16 (default 128)\n"
      "  --cpus LIST         workers in kernel cpulist syntax (default: CPU 0)\n"
      "  --tile-kib T        K bytes per online-softmax tile in KiB (default 16)\n"
      "  --prefetch-kib P    software prefetch distance ahead of the K and V streams in KiB\n"
      "                      (default 0 = none)\n"
      "  --steps N           timed steps (default 200); --warmup N untimed first (default 10)\n"
      "  --max-rel-rms X     fail above this relative RMS error vs the reference (default 1e-4)\n"
      "  --min-cosine X      fail below this cosine similarity (default 0.99999)\n"
      "  --page MODE         4k | thp | hugetlb (default thp)\n"
      "  --timeout S         exit 1 if the run takes longer (default 600; 0 = none)\n"
      "  --spin S            auto | pause | fma512: how the step's two barriers poll (as layer\n"
      "                      --spin; auto = pause)\n"
      "  --help              this text\n"
      "Output: JSON lines; meta, then kv_bw (GB/s of K+V read at p50), step_p50, step_p99 (us),\n"
      "rel_rms_err, cosine. Exit: 0 ok, 1 check failed, 2 usage error, 3 unsupported here.\n";

typedef struct {
    int cpu, lo, hi; /* tokens [lo, hi) */
    pthread_t thread;
    sl_buf kv; /* K then V, heads x (hi-lo) x D bf16 each */
    size_t page_size;
    uint64_t *t0, *t1; /* this worker's part of g.t0, g.t1 */
} worker;

static struct {
    int tokens, heads, dim, steps, warmup, tile_tokens, n;
    int spin; /* SL_SPIN_*, or -1 (auto) until check_args */
    size_t prefetch;
    sl_page_mode page;
    sl_cpus cpus;
    worker* w;
    uint64_t *t0, *t1; /* steps TSC stamps per worker, worker-major */
    float* q; /* heads x D */
    float* part; /* workers x heads x (D + 2): acc..., max, sum */
    float* out; /* heads x D */
    pthread_barrier_t phase;
    sl_barrier step;
} g;

static uint16_t kv_value(int which, int h, int t, int d)
{
    uint32_t x = (uint32_t)which * 0x9e3779b1u ^ (uint32_t)h * 0x85ebca6bu
        ^ (uint32_t)t * 0xc2b2ae35u ^ (uint32_t)d * 0x27d4eb2fu;
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return sl_f32_to_bf16((float)x * (2.0f / 4294967296.0f) - 1.0f);
}

SL_TARGET_AVX512 static inline __m512 load_bf16x16(const uint16_t* p)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

/* partial attention of one head over this worker's tokens, online softmax tile by tile */
SL_TARGET_AVX512 static void attend(const worker* w, int h, float* part)
{
    const int D = g.dim, nt = w->hi - w->lo, nv = D / 16;
    const uint16_t* K = (const uint16_t*)w->kv.base + (size_t)h * nt * D;
    const uint16_t* V = K + (size_t)g.heads * nt * D;
    const float scale = 1.0f / sqrtf((float)D);
    __m512 qv[16], acc[16];
    for (int i = 0; i < nv; i++) {
        qv[i] = _mm512_mul_ps(_mm512_loadu_ps(g.q + (size_t)h * D + 16 * i), _mm512_set1_ps(scale));
        acc[i] = _mm512_setzero_ps();
    }
    float m = -INFINITY, l = 0;
    float s[4096];
    const size_t pf = g.prefetch / 2; /* in bf16 elements */
    for (int t0 = 0; t0 < nt; t0 += g.tile_tokens) {
        const int tn = nt - t0 < g.tile_tokens ? nt - t0 : g.tile_tokens;
        float tmax = m;
        for (int j = 0; j < tn; j++) {
            const uint16_t* k = K + (size_t)(t0 + j) * D;
            if (pf)
                for (int c = 0; c < D; c += 32)
                    _mm_prefetch((const char*)(k + pf + c), _MM_HINT_T0);
            __m512 d = _mm512_mul_ps(qv[0], load_bf16x16(k));
            for (int i = 1; i < nv; i++)
                d = _mm512_fmadd_ps(qv[i], load_bf16x16(k + 16 * i), d);
            s[j] = _mm512_reduce_add_ps(d);
            tmax = s[j] > tmax ? s[j] : tmax;
        }
        const float corr = expf(m - tmax);
        l *= corr;
        for (int i = 0; i < nv; i++)
            acc[i] = _mm512_mul_ps(acc[i], _mm512_set1_ps(corr));
        m = tmax;
        for (int j = 0; j < tn; j++) {
            const float p = expf(s[j] - m);
            l += p;
            const uint16_t* v = V + (size_t)(t0 + j) * D;
            if (pf)
                for (int c = 0; c < D; c += 32)
                    _mm_prefetch((const char*)(v + pf + c), _MM_HINT_T0);
            const __m512 pv = _mm512_set1_ps(p);
            for (int i = 0; i < nv; i++)
                acc[i] = _mm512_fmadd_ps(pv, load_bf16x16(v + 16 * i), acc[i]);
        }
    }
    for (int i = 0; i < nv; i++)
        _mm512_storeu_ps(part + 16 * i, acc[i]);
    part[D] = m;
    part[D + 1] = l;
}

static void combine(int h)
{
    const int D = g.dim;
    const size_t stride = (size_t)g.heads * (D + 2);
    float m = -INFINITY;
    for (int i = 0; i < g.n; i++) {
        const float* p = g.part + i * stride + (size_t)h * (D + 2);
        if (g.w[i].hi > g.w[i].lo && p[D] > m)
            m = p[D];
    }
    float l = 0;
    float* o = g.out + (size_t)h * D;
    for (int d = 0; d < D; d++)
        o[d] = 0;
    for (int i = 0; i < g.n; i++) {
        if (g.w[i].hi == g.w[i].lo)
            continue;
        const float* p = g.part + i * stride + (size_t)h * (D + 2);
        const float c = expf(p[D] - m);
        l += p[D + 1] * c;
        for (int d = 0; d < D; d++)
            o[d] += p[d] * c;
    }
    for (int d = 0; d < D; d++)
        o[d] /= l;
}

static void* worker_main(void* arg)
{
    worker* w = arg;
    const int me = (int)(w - g.w);
    int sense = 0;
    sl_pin_self(w->cpu);
    const int nt = w->hi - w->lo, D = g.dim;
    sl_alloc(&w->kv, (size_t)2 * g.heads * (nt ? nt : 1) * D * 2 + 4096, g.page);
    uint16_t* K = w->kv.base;
    uint16_t* V = K + (size_t)g.heads * nt * D;
    for (int h = 0; h < g.heads; h++)
        for (int t = 0; t < nt; t++)
            for (int d = 0; d < D; d++) {
                K[((size_t)h * nt + t) * D + d] = kv_value(0, h, w->lo + t, d);
                V[((size_t)h * nt + t) * D + d] = kv_value(1, h, w->lo + t, d);
            }
    double thp;
    w->page_size = sl_page_size_obtained(&w->kv, &thp);
    pthread_barrier_wait(&g.phase);
    float* part = g.part + (size_t)me * g.heads * (D + 2);
    for (int s = 0; s < g.warmup + g.steps; s++) {
        sl_barrier_wait(&g.step, &sense);
        const uint64_t t0 = sl_rdtsc();
        if (nt)
            for (int h = 0; h < g.heads; h++)
                attend(w, h, part + (size_t)h * (D + 2));
        sl_barrier_wait(&g.step, &sense);
        for (int h = me; h < g.heads; h += g.n)
            combine(h);
        const uint64_t t1 = sl_rdtsc();
        if (s >= g.warmup) {
            w->t0[s - g.warmup] = t0;
            w->t1[s - g.warmup] = t1;
        }
    }
    return NULL;
}

static void metric(const char* name, double v, const char* unit)
{
    sl_metric_begin(name, v, unit);
    sl_json_int("tokens", g.tokens);
    sl_json_int("heads", g.heads);
    sl_json_int("head_dim", g.dim);
    sl_json_num("tile_kib", g.tile_tokens * g.dim * 2 / 1024.0);
    sl_json_int("prefetch_kib", (long long)(g.prefetch / 1024));
    sl_json_int("workers", g.n);
    sl_json_end();
}

/* the flags that aren't in g */
typedef struct {
    const char* tokens_arg;
    size_t tile_bytes;
    double max_rel_rms, min_cosine, timeout;
} kv_args;

static void parse_args(int argc, char** argv, kv_args* a)
{
    g.heads = 8;
    g.dim = 128;
    g.steps = 200;
    g.warmup = 10;
    g.spin = -1;
    g.page = SL_PAGE_THP;
    g.cpus.n = 1;
    g.cpus.cpu[0] = 0;
    a->tile_bytes = 16384;
    a->max_rel_rms = 1e-4;
    a->min_cosine = 0.99999;
    a->timeout = 600;
    const sl_opt opts[] = { { "tokens", required_argument, SL_STR(&a->tokens_arg) },
        { "heads", required_argument, SL_INT(&g.heads, 1, 1024) },
        { "head-dim", required_argument, SL_INT(&g.dim, 16, 256) },
        { "cpus", required_argument, SL_CPUS(&g.cpus) },
        { "tile-kib", required_argument, SL_KIB(&a->tile_bytes, 0.0625, 65536) },
        { "prefetch-kib", required_argument, SL_KIB(&g.prefetch, 0, 65536) },
        { "steps", required_argument, SL_INT(&g.steps, 1, 100000000) },
        { "warmup", required_argument, SL_INT(&g.warmup, 0, 100000000) },
        { "max-rel-rms", required_argument, SL_MAX_REL_RMS(&a->max_rel_rms) },
        { "min-cosine", required_argument, SL_MIN_COSINE(&a->min_cosine) },
        { "page", required_argument, SL_PAGE(&g.page) },
        { "timeout", required_argument, SL_TIMEOUT(&a->timeout) },
        { "spin", required_argument, SL_CALL(sl_parse_spin, &g.spin) }, SL_OPT_END };
    sl_parse_options(argc, argv, usage, opts);
}

/* --tokens, the tile, and whether this host has AVX-512 */
static void check_args(const kv_args* a)
{
    if (!a->tokens_arg)
        sl_usage_error("--tokens is required (see --help)");
    const size_t tokens = sl_parse_size("--tokens", a->tokens_arg);
    if (tokens > (1u << 24))
        sl_usage_error("--tokens %zu: at most 16M", tokens);
    g.tokens = (int)tokens;
    if (g.dim % 16)
        sl_usage_error("--head-dim %d: must be a multiple of 16", g.dim);
    g.tile_tokens = (int)(a->tile_bytes / ((size_t)g.dim * 2));
    if (g.tile_tokens < 1 || g.tile_tokens > 4096)
        sl_usage_error("--tile-kib: a tile must hold 1..4096 tokens of %d B keys", g.dim * 2);
    const char* why = "";
    if (!sl_have_avx512(&why))
        sl_unsupported("kvstream needs AVX-512: %s", why);
    /* auto: pause. fma512 did not help for sure (128 tokens on 2 workers of a GNR guest, 8.7 us
     * steps: p99 0.82x, 0.98x and 0.93x of pause in three runs, p50 up to 1.04x; 512 tokens:
     * 1.02x); docs/benchmarks.md */
    g.spin = sl_spin_resolve(g.spin, SL_SPIN_PAUSE, false, NULL);
    sl_spin_set(g.spin, NULL);
}

/* the workers' token ranges, q, the partials and the output */
static void plan(void)
{
    g.n = g.cpus.n;
    g.w = calloc((size_t)g.n, sizeof(*g.w));
    g.t0 = calloc((size_t)g.n * g.steps, sizeof(uint64_t));
    g.t1 = calloc((size_t)g.n * g.steps, sizeof(uint64_t));
    for (int i = 0; i < g.n; i++) {
        g.w[i].cpu = g.cpus.cpu[i];
        g.w[i].lo = (int)((long long)g.tokens * i / g.n);
        g.w[i].hi = (int)((long long)g.tokens * (i + 1) / g.n);
        g.w[i].t0 = g.t0 + (size_t)i * g.steps;
        g.w[i].t1 = g.t1 + (size_t)i * g.steps;
    }
    g.q = malloc(sizeof(float) * (size_t)g.heads * g.dim);
    for (int h = 0; h < g.heads; h++)
        for (int d = 0; d < g.dim; d++)
            g.q[(size_t)h * g.dim + d] = sl_bf16_to_f32(kv_value(2, h, 0, d)) * 2.0f;
    g.part = aligned_alloc(64, sizeof(float) * ((size_t)g.n * g.heads * (g.dim + 2) + 16));
    g.out = aligned_alloc(64, sizeof(float) * ((size_t)g.heads * g.dim + 16));
}

/* the workers: set up (phase), the meta record, the timed steps */
static void run(void)
{
    pthread_barrier_init(&g.phase, NULL, (unsigned)g.n + 1);
    sl_barrier_init(&g.step, g.n);
    sl_tsc_ghz();
    for (int i = 0; i < g.n; i++)
        if (pthread_create(&g.w[i].thread, NULL, worker_main, &g.w[i]))
            sl_fatal("pthread_create failed");
    pthread_barrier_wait(&g.phase);
    size_t page_min = SIZE_MAX;
    for (int i = 0; i < g.n; i++)
        page_min = g.w[i].page_size < page_min ? g.w[i].page_size : page_min;
    const double kv_bytes = 2.0 * g.heads * (double)g.tokens * g.dim * 2;
    sl_meta_begin(&g.cpus);
    sl_json_int("tokens", g.tokens);
    sl_json_int("heads", g.heads);
    sl_json_int("head_dim", g.dim);
    sl_json_int("tile_tokens", g.tile_tokens);
    sl_json_int("prefetch_bytes", (long long)g.prefetch);
    sl_json_num("kv_bytes", kv_bytes);
    sl_json_int("steps", g.steps);
    sl_json_str("page_mode", sl_page_names[g.page]);
    sl_json_int("page_size", (long long)page_min);
    sl_json_str("spin", sl_spin_names[g.spin]);
    sl_json_end();
    for (int i = 0; i < g.n; i++)
        pthread_join(g.w[i].thread, NULL);
}

/* the reference (plain softmax in double over all tokens) against the output */
static void check_output(sl_match* match)
{
    double* sc = malloc(sizeof(double) * (size_t)g.tokens);
    double* o = malloc(sizeof(double) * (size_t)g.dim);
    const double scale = 1.0 / sqrt((double)g.dim);
    for (int h = 0; h < g.heads; h++) {
        double m = -INFINITY, l = 0;
        for (int t = 0; t < g.tokens; t++) {
            double s = 0;
            for (int d = 0; d < g.dim; d++)
                s += (double)g.q[(size_t)h * g.dim + d] * sl_bf16_to_f32(kv_value(0, h, t, d));
            sc[t] = s * scale;
            m = sc[t] > m ? sc[t] : m;
        }
        for (int d = 0; d < g.dim; d++)
            o[d] = 0;
        for (int t = 0; t < g.tokens; t++) {
            const double p = exp(sc[t] - m);
            l += p;
            for (int d = 0; d < g.dim; d++)
                o[d] += p * sl_bf16_to_f32(kv_value(1, h, t, d));
        }
        for (int d = 0; d < g.dim; d++)
            sl_match_add(match, g.out[(size_t)h * g.dim + d], o[d] / l);
    }
}

/* the metric records, then the numerics gate */
static int report(const kv_args* a)
{
    const double kv_bytes = 2.0 * g.heads * (double)g.tokens * g.dim * 2;
    sl_match match = { 0 };
    check_output(&match);
    const double rel_rms = sl_match_rel_rms(&match), cosine = sl_match_cosine(&match);
    double* us = malloc(sizeof(double) * (size_t)g.steps);
    sl_step_spans_us(g.t0, g.t1, g.n, g.steps, us);
    const double p50 = sl_quantile(us, g.steps, 0.5);
    metric("kv_bw", kv_bytes / (p50 * 1e3), "GB/s");
    metric("step_p50", p50, "us");
    metric("step_p99", sl_quantile(us, g.steps, 0.99), "us");
    metric("rel_rms_err", rel_rms, "ratio");
    metric("cosine", cosine, "ratio");
    if (!(rel_rms <= a->max_rel_rms) || !(cosine >= a->min_cosine))
        sl_check_failed("kvstream: rel RMS error %.3g (max %.3g), cosine %.9f (min %.9f) against "
                        "the double-precision reference",
            rel_rms, a->max_rel_rms, cosine, a->min_cosine);
    return 0;
}

int main(int argc, char** argv)
{
    sl_prog = "kvstream";
    kv_args a = { 0 };
    parse_args(argc, argv, &a);
    check_args(&a);
    sl_watchdog(a.timeout);
    plan();
    run();
    return report(&a);
}
