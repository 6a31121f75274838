/* wakeup: pinned workers alternate a vector phase and a scalar phase with a barrier after each
 * (a layer-stage step without its data) and report how long steps stay slow after a disturbance.
 * The first vector phase after a pause in vector work runs slower while the unit wakes up, and
 * barrier coupling can hand that penalty back and forth between the workers (common/spin.c);
 * --spin fma512 keeps the unit busy while waiting. The workers check themselves: every worker's
 * vector and scalar results end bit-identical. */
#include "sl.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[]
    = "usage: wakeup --cpus LIST [options]\n"
      "Workers (one per listed CPU) alternate a vector phase and a scalar phase, each followed by\n"
      "a barrier, as native/layer's steps do. A step is slow above 1.6 x the p50 of the slowest\n"
      "worker's step times; slow steps at most 2 apart form a burst. With barrier coupling the\n"
      "vector unit's wake-up after a disturbance can pass between the workers for many steps.\n"
      "  --cpus LIST         workers in kernel cpulist syntax (at least 2 unless --uncoupled)\n"
      "  --work W            zmm-fma | zmm-dpbf16 | ymm-fma | scalar: the vector phase\n"
      "                      (default zmm-fma)\n"
      "  --vector-ns N       vector phase length, calibrated at the start (default 1400)\n"
      "  --scalar-ns N       scalar phase length (dependent adds), calibrated (default 1100)\n"
      "  --spin S            pause | fma512: how the barrier polls (default pause; fma512 adds a\n"
      "                      512-bit FMA per poll, as native/layer --spin)\n"
      "  --uncoupled         no barriers: each worker steps on its own\n"
      "  --gap-us G          every 500th step worker 0 runs G us of scalar work first: a\n"
      "                      disturbance on demand (reports the steps after each)\n"
      "  --steps N           steps (default 30000; the first 10% are excluded)\n"
      "  --debug unequal     worker 1 runs one more vector iteration in its last step: a planted\n"
      "                      error the workers' check must catch (exit 1)\n"
      "  --timeout S         exit 1 if the run takes longer (default 600; 0 = none)\n"
      "  --help              this text\n"
      "Output: JSON lines: meta, step_p50 / step_p99 (us), slow_share, burst_steps (the steps\n"
      "from first to last slow step of bursts 3 or more long), burst_max (the longest, steps),\n"
      "vector_p50 in fast and slow steps (us),\n"
      "with --gap-us gap_step_p50 (us, the step after a gap) and slow_share_after_gap (the 50\n"
      "steps after). Exit: 0 ok, 1 the workers' results differ, 2 usage error, 3 unsupported.\n";

enum { W_ZMM_FMA, W_ZMM_DPBF16, W_YMM_FMA, W_SCALAR };
static const char* const work_names[] = { "zmm-fma", "zmm-dpbf16", "ymm-fma", "scalar", NULL };
static const char* const spin_args[] = { "pause", "fma512", NULL };
static const char* const debug_names[] = { "unequal", NULL };
enum { GAP_EVERY = 500, AFTER_GAP = 50 };

typedef struct {
    int cpu, id;
    pthread_t thread;
    uint64_t *step, *vec; /* per step: TSC cycles of the whole step and of its vector phase */
    float vsum; /* the vector phase's last result */
    uint64_t ssum; /* the scalar phase's */
} worker;

static struct {
    int work, spin, uncoupled, steps, n, unequal, debug;
    double vector_ns, scalar_ns, gap_us, timeout;
    long vec_iters, scalar_iters, gap_iters;
    sl_cpus cpus;
    worker* w;
    sl_barrier bar;
    pthread_barrier_t ready;
} g;

/* a -> a * DECAY + (1 - DECAY), both exact: tends to 1 over ~2,000 iterations, so every count of
 * iterations gives its own bits (the workers' check) and nothing turns denormal */
#define DECAY (1.0f - 1.0f / 2048)

/* 8 independent accumulators: throughput-bound on the unit under test (one text for both
 * widths, as gemv/kernels.c does) */
#define FMA_STEPS(a, n, set1, fmadd)                                                               \
    for (int j = 0; j < 8; j++)                                                                    \
        a[j] = set1((float)j);                                                                     \
    for (long i = 0; i < (n); i++)                                                                 \
        for (int j = 0; j < 8; j++)                                                                \
    a[j] = fmadd(a[j], set1(DECAY), set1(1.0f - DECAY))

static SL_TARGET_AVX512 inline float zmm_sum(const __m512 a[8])
{
    __m512 s = a[0];
    for (int j = 1; j < 8; j++)
        s = _mm512_add_ps(s, a[j]);
    return _mm512_reduce_add_ps(s);
}

static SL_TARGET_AVX512 __attribute__((noinline)) float zmm_fma(long n)
{
    __m512 a[8];
    FMA_STEPS(a, n, _mm512_set1_ps, _mm512_fmadd_ps);
    return zmm_sum(a);
}

static SL_TARGET_AVX512BF16 __attribute__((noinline)) float zmm_dpbf16(long n)
{
    __m512 a[8];
    const __m512i x = _mm512_set1_epi32(0x3f003f00); /* bf16 pairs of 0.5 */
    for (int j = 0; j < 8; j++)
        a[j] = _mm512_setzero_ps();
    for (long i = 0; i < n; i++)
        for (int j = 0; j < 8; j++) /* grows by 0.5 per step: exact in fp32 for n < 2^24 */
            a[j] = _mm512_dpbf16_ps(a[j], (__m512bh)x, (__m512bh)x);
    return zmm_sum(a);
}

static SL_TARGET_AVX2 __attribute__((noinline)) float ymm_fma(long n)
{
    __m256 a[8];
    FMA_STEPS(a, n, _mm256_set1_ps, _mm256_fmadd_ps);
    float o[8], s = 0;
    for (int j = 0; j < 8; j++) {
        _mm256_storeu_ps(o, a[j]);
        for (int k = 0; k < 8; k++)
            s += o[k];
    }
    return s;
}

/* dependent adds: the core's clock, no vector unit */
static __attribute__((noinline)) uint64_t scalar_adds(long n)
{
    uint64_t v = 1;
    for (long i = 0; i < n; i++)
        __asm__ volatile("add $3, %0" : "+r"(v));
    return v;
}

static float vector_phase(long n)
{
    switch (g.work) {
    case W_ZMM_FMA:
        return zmm_fma(n);
    case W_ZMM_DPBF16:
        return zmm_dpbf16(n);
    case W_YMM_FMA:
        return ymm_fma(n);
    default:
        return (float)scalar_adds(8 * n);
    }
}

static void wait_all(int* sense)
{
    if (!g.uncoupled)
        sl_barrier_wait(&g.bar, sense);
}

static void* worker_main(void* arg)
{
    worker* w = arg;
    sl_pin_self(w->cpu);
    memset(w->step, 0, sizeof(uint64_t) * (size_t)g.steps);
    memset(w->vec, 0, sizeof(uint64_t) * (size_t)g.steps);
    int sense = 0;
    pthread_barrier_wait(&g.ready);
    for (int s = 0; s < g.steps; s++) {
        if (g.gap_iters && w->id == 0 && s % GAP_EVERY == GAP_EVERY / 2)
            w->ssum += scalar_adds(g.gap_iters);
        const uint64_t t0 = sl_rdtsc();
        w->vsum = vector_phase(g.vec_iters + (g.unequal && w->id == 1 && s == g.steps - 1));
        const uint64_t t1 = sl_rdtsc();
        wait_all(&sense);
        w->ssum += scalar_adds(g.scalar_iters);
        wait_all(&sense);
        w->step[s] = sl_rdtsc() - t0;
        w->vec[s] = t1 - t0;
    }
    return NULL;
}

/* iterations per ns of a phase on this thread: the fastest of 30 tries (the unit awake) */
static double per_ns(int vector)
{
    const long n = vector ? 2000 : 20000;
    double best = 1e30;
    for (int i = 0; i < 30; i++) {
        const uint64_t t0 = sl_rdtsc();
        volatile float f = vector ? vector_phase(n) : (float)scalar_adds(n);
        (void)f;
        const double ns = (sl_rdtsc() - t0) / sl_tsc_ghz();
        best = ns < best ? ns : best;
    }
    return n / best;
}

static void parse_args(int argc, char** argv)
{
    g.steps = 30000;
    g.vector_ns = 1400;
    g.scalar_ns = 1100;
    g.timeout = 600;
    const sl_opt opts[] = { { "cpus", required_argument, SL_CPUS(&g.cpus) },
        { "work", required_argument, SL_CHOICE(&g.work, work_names) },
        { "vector-ns", required_argument, SL_NUM(&g.vector_ns, 50, 1e7) },
        { "scalar-ns", required_argument, SL_NUM(&g.scalar_ns, 0, 1e7) },
        { "spin", required_argument, SL_CHOICE(&g.spin, spin_args) },
        { "uncoupled", no_argument, SL_SET(&g.uncoupled, 1), .letter = 'u' },
        { "gap-us", required_argument, SL_NUM(&g.gap_us, 0, 1e5) },
        { "steps", required_argument, SL_INT(&g.steps, 10, 100000000) },
        { "debug", required_argument, SL_CHOICE(&g.debug, debug_names), .seen = &g.unequal },
        { "timeout", required_argument, SL_TIMEOUT(&g.timeout) }, SL_OPT_END };
    sl_parse_options(argc, argv, usage, opts);
    if (!g.cpus.n)
        sl_usage_error("--cpus LIST is required (see --help)");
    if (g.cpus.n < 2 && !g.uncoupled)
        sl_usage_error(
            "--cpus %d CPU: coupling needs at least 2 workers (or --uncoupled)", g.cpus.n);
    if (g.unequal && g.cpus.n < 2)
        sl_usage_error("--debug unequal: needs at least 2 workers to compare");
    const char* why = "";
    if ((g.work == W_ZMM_FMA || g.spin == SL_SPIN_FMA512) && !sl_have_avx512(&why))
        sl_unsupported("--%s: %s", g.work == W_ZMM_FMA ? "work zmm-fma" : "spin fma512", why);
    if (g.work == W_ZMM_DPBF16 && !sl_have_avx512bf16(&why))
        sl_unsupported("--work zmm-dpbf16: %s", why);
    if (g.work == W_YMM_FMA && !sl_have_avx2(&why))
        sl_unsupported("--work ymm-fma: %s", why);
}

static void run(void)
{
    g.n = g.cpus.n;
    g.w = calloc((size_t)g.n, sizeof(*g.w));
    sl_pin_self(g.cpus.cpu[0]);
    g.vec_iters = (long)ceil(g.vector_ns * per_ns(1));
    const double scalar = per_ns(0);
    g.scalar_iters = (long)(g.scalar_ns * scalar);
    g.gap_iters = (long)(g.gap_us * 1e3 * scalar);
    sl_spin_set(g.spin, NULL);
    sl_barrier_init(&g.bar, g.n);
    pthread_barrier_init(&g.ready, NULL, (unsigned)g.n + 1);
    for (int i = 0; i < g.n; i++) {
        worker* w = &g.w[i];
        w->cpu = g.cpus.cpu[i];
        w->id = i;
        w->step = malloc(sizeof(uint64_t) * (size_t)g.steps);
        w->vec = malloc(sizeof(uint64_t) * (size_t)g.steps);
        if (pthread_create(&w->thread, NULL, worker_main, w))
            sl_fatal("pthread_create failed");
    }
    pthread_barrier_wait(&g.ready);
    sl_meta_begin(&g.cpus);
    sl_json_str("work", work_names[g.work]);
    sl_json_str("spin", sl_spin_names[g.spin]);
    sl_json_bool("coupled", !g.uncoupled);
    sl_json_num("vector_ns", g.vector_ns);
    sl_json_num("scalar_ns", g.scalar_ns);
    sl_json_int("vector_iters", g.vec_iters);
    sl_json_int("scalar_iters", g.scalar_iters);
    sl_json_num("gap_us", g.gap_us);
    sl_json_int("steps", g.steps);
    sl_json_int("page_size", sysconf(_SC_PAGESIZE)); /* no arena: registers and the stack */
    sl_json_end();
    for (int i = 0; i < g.n; i++)
        pthread_join(g.w[i].thread, NULL);
}

static void metric(const char* name, double v, const char* unit)
{
    sl_metric_begin(name, v, unit);
    sl_json_str("work", work_names[g.work]);
    sl_json_str("spin", sl_spin_names[g.spin]);
    sl_json_bool("coupled", !g.uncoupled);
    sl_json_int("workers", g.n);
    sl_json_end();
}

static double median_of(double* v, int n) { return n ? sl_quantile(v, n, 0.5) : 0; }

static int report(void)
{
    /* the same work on every worker, the same bits; worker 0's gaps add to its scalar sum, so
     * with gaps the others' scalar sums are compared with worker 1's */
    const int ref = g.gap_iters ? 1 : 0;
    for (int i = 0; i < g.n; i++)
        if (memcmp(&g.w[i].vsum, &g.w[0].vsum, sizeof(float)) || !isfinite(g.w[i].vsum)
            || (i && g.w[i].ssum != g.w[ref].ssum))
            sl_check_failed("worker %d's results differ from the others' (%g, %llu)", i,
                (double)g.w[i].vsum, (unsigned long long)g.w[i].ssum);
    const int skip = g.steps / 10, n = g.steps - skip;
    const double cyc_us = sl_tsc_ghz() * 1e3;
    double *st = malloc(sizeof(double) * (size_t)n), *tmp = malloc(sizeof(double) * (size_t)n);
    double* vec = malloc(sizeof(double) * (size_t)n);
    for (int s = 0; s < n; s++) { /* per step the slowest worker, as native/layer reports */
        uint64_t mx = 0, vx = 0;
        for (int i = 0; i < g.n; i++) {
            mx = g.w[i].step[skip + s] > mx ? g.w[i].step[skip + s] : mx;
            vx = g.w[i].vec[skip + s] > vx ? g.w[i].vec[skip + s] : vx;
        }
        st[s] = mx / cyc_us;
        vec[s] = vx / cyc_us;
    }
    memcpy(tmp, st, sizeof(double) * (size_t)n);
    const double p50 = sl_quantile(tmp, n, 0.5), p99 = sl_quantile(tmp, n, 0.99);
    int slow = 0, burst_steps = 0, burst_max = 0, run_len = 0, last = -10, nf = 0, ns = 0;
    double *vf = malloc(sizeof(double) * (size_t)n), *vs = malloc(sizeof(double) * (size_t)n);
    for (int s = 0; s <= n; s++) {
        const int is_slow = s < n && st[s] > 1.6 * p50;
        if (s < n)
            (is_slow ? (vs[ns++] = vec[s]) : (vf[nf++] = vec[s]));
        if (is_slow && s - last <= 2) {
            run_len += s - last;
        } else if (is_slow || s == n) { /* a burst ends: its span counts from 3 steps */
            if (run_len >= 3)
                burst_steps += run_len;
            burst_max = run_len > burst_max ? run_len : burst_max;
            run_len = is_slow;
        }
        if (is_slow) {
            slow++;
            last = s;
        }
    }
    metric("step_p50", p50, "us");
    metric("step_p99", p99, "us");
    metric("slow_share", (double)slow / n, "ratio");
    metric("burst_steps", burst_steps, "steps");
    metric("burst_max", burst_max, "steps");
    metric("vector_p50_fast", median_of(vf, nf), "us");
    metric("vector_p50_slow", median_of(vs, ns), "us");
    if (g.gap_iters) {
        int ng = 0, after = 0, after_slow = 0;
        for (int abs = GAP_EVERY / 2; abs < g.steps; abs += GAP_EVERY) {
            const int s = abs - skip; /* the step worker 0's gap delayed */
            if (s < 0)
                continue;
            tmp[ng++] = st[s];
            for (int k = 1; k <= AFTER_GAP && s + k < n; k++, after++)
                after_slow += st[s + k] > 1.6 * p50;
        }
        metric("gap_step_p50", median_of(tmp, ng), "us");
        metric("slow_share_after_gap", after ? (double)after_slow / after : 0, "ratio");
    }
    return 0;
}

int main(int argc, char** argv)
{
    sl_prog = "wakeup";
    parse_args(argc, argv);
    sl_watchdog(g.timeout);
    run();
    return report();
}
