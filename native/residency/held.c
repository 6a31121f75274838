/* Userspace held-fraction measurement (see held.h). */
#include "held.h"

#include "sl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

#define CAL_LINES 4096 /* 256 KiB: more than any L1D, less than any L2 of these hosts */
#define L1_LINES 256 /* 16 KiB: inside every L1D */
#define CAL_REPEATS 5
#define PAD_MAX 96 /* cycles of padding tried: two 10 ns TSC steps at up to ~4.8 GHz */
#define PAD_STEP 4

size_t held_cache_bytes(int cpu, int level)
{
    for (int idx = 0; idx < 8; idx++) {
        char path[160], text[64];
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/level", cpu, idx);
        FILE* f = fopen(path, "r");
        if (!f)
            return 0;
        int lv = 0;
        const int got = fscanf(f, "%d", &lv);
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/type", cpu, idx);
        f = fopen(path, "r");
        if (!f || got != 1)
            continue;
        const int typed = fscanf(f, "%63s", text);
        fclose(f);
        if (lv != level || typed != 1 || text[0] == 'I') /* skip the instruction cache */
            continue;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/size", cpu, idx);
        f = fopen(path, "r");
        if (!f)
            return 0;
        unsigned long kib = 0;
        char unit = 'K';
        const int n = fscanf(f, "%lu%c", &kib, &unit);
        fclose(f);
        if (n < 1)
            return 0;
        return (size_t)kib * (unit == 'M' ? 1u << 20 : 1u << 10);
    }
    return 0;
}

/* The visiting order: a fixed pseudo-random permutation of all the lines, computed on the fly
 * (an index array would be 8 bytes per line walked through the same L2 as the slice it judges).
 * Measured on Zen 3 with 2,048 flushed lines: a sequential walk, a constant stride of 37 lines,
 * and a shuffled order inside each page taken page by page all read as hits (median 73 TSC
 * ticks, the same as hot lines: the stream / region prefetchers ran ahead); a permutation of the
 * whole buffer reads 294-319. The mix (odd multiplies and xor-shifts on k bits) is a bijection
 * of [0, 2^k); cycle-walking keeps it one on [0, lines). */
typedef struct {
    uint64_t lines, mask;
    unsigned shift;
} walk;

static walk walk_of(uint64_t lines)
{
    unsigned k = 1;
    while ((1ull << k) < lines)
        k++;
    return (walk) { lines, (1ull << k) - 1, k / 2 + 1 };
}

static inline uint64_t walk_mix(const walk* w, uint64_t x)
{
    x = (x * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) & w->mask;
    x ^= x >> w->shift;
    x = (x * 0xbf58476d1ce4e5b9ull) & w->mask;
    x ^= x >> w->shift;
    return x;
}

static inline uint64_t walk_at(const walk* w, uint64_t i)
{
    uint64_t x = walk_mix(w, i);
    while (x >= w->lines)
        x = walk_mix(w, x);
    return x;
}

/* One load timed with RDTSCP. The window starts on a TSC tick edge: where the TSC advances in
 * coarse steps (AMD: the 100 MHz reference clock times the P0 ratio, ~24.5-26 ticks = 10 ns on
 * the Zen 3 / Zen 4 guests), an unaligned window reads as either of two step counts at random;
 * from an edge, a load's time falls in a fixed step. `pad` dependent adds after the load (a
 * vernier, chosen in held_calibrate) then move the L2-hit and L3-hit end times to either side
 * of a step edge: unpadded, an L2 hit (3-4 ns) and an L3 hit (~12 ns) can share a step. Where
 * the TSC ticks by 1 (Intel) the spin ends at once and pad stays 0. */
static inline uint32_t time_load(const char* p, unsigned pad)
{
    unsigned aux;
    const uint64_t prev = __rdtscp(&aux);
    uint64_t t0;
    while ((t0 = __rdtscp(&aux)) == prev)
        ;
    /* RDTSCP waits for earlier loads; the LFENCE after it keeps later ones from starting early */
    _mm_lfence();
    uint64_t v = *(const volatile uint8_t*)p;
    for (unsigned i = 0; i < pad; i++)
        __asm__ volatile("add $1, %0" : "+r"(v)); /* a chain on the loaded value: 1 cycle each */
    __asm__ volatile("" ::"r"(v));
    const uint64_t t1 = __rdtscp(&aux);
    _mm_lfence();
    return (uint32_t)(t1 - t0);
}

/* Latencies are counted in a histogram (HIST_BINS ticks, the last bin open): the walk writes
 * 4 KiB, which stays in L1, instead of an array as large as the slice's line count. */
#define HIST_BINS 1024
typedef struct {
    uint32_t n[HIST_BINS];
    uint64_t total;
} hist;

/* Times the first line of each group of `stride` lines, groups in walk order. A timed miss
 * brings its neighbours in (adjacent-line and region prefetch), so timing every line counts
 * many misses as hits: on the Zen 4 guest, a 256 KiB slice evicted by scenario C read 12-50%
 * held timing every line, 2% timing one in 2, 0.1-2% one in 4 (the default). */
static void hist_walk(hist* h, const char* buf, uint64_t lines, unsigned stride, unsigned pad)
{
    const uint64_t groups = lines / stride;
    const walk w = walk_of(groups ? groups : 1);
    memset(h, 0, sizeof(*h));
    for (uint64_t i = 0; i < groups; i++) {
        const uint32_t t = time_load(buf + walk_at(&w, i) * stride * SL_CACHE_LINE, pad);
        h->n[t < HIST_BINS ? t : HIST_BINS - 1]++;
    }
    h->total = groups;
}

static double hist_median(const hist* h)
{
    uint64_t seen = 0;
    for (int b = 0; b < HIST_BINS; b++) {
        seen += h->n[b];
        if (2 * seen > h->total)
            return b;
    }
    return HIST_BINS - 1;
}

static double hist_above(const hist* h, double t)
{
    uint64_t above = 0;
    for (int b = 0; b < HIST_BINS; b++)
        above += b > t ? h->n[b] : 0;
    return h->total ? (double)above / (double)h->total : 0;
}

static void touch(const char* buf, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += SL_CACHE_LINE)
        (void)*(const volatile uint8_t*)(buf + i);
}

/* The TSC's step: the gcd of the non-zero differences of back-to-back reads (1 on Intel). */
static unsigned tsc_step(void)
{
    unsigned aux, g = 0;
    for (int i = 0; i < 256; i++) {
        const uint64_t a = __rdtscp(&aux), b = __rdtscp(&aux);
        unsigned d = (unsigned)(b - a);
        while (d) {
            const unsigned r = g % d;
            g = d;
            d = r;
        }
    }
    return g ? g : 1;
}

typedef struct {
    char *cal, *evict;
    size_t evict_bytes;
    unsigned stride;
} cal_bufs;

/* 128 KiB touched twice: timing it from the start finds each line already pushed from L1 to L2
 * by the ones after it (and each timed line pushes out an untimed one) */
static void in_l2(const cal_bufs* b)
{
    touch(b->cal, (size_t)CAL_LINES * SL_CACHE_LINE);
    touch(b->cal, (size_t)CAL_LINES * SL_CACHE_LINE);
}

/* pushing the calibration lines out of L2 into L3 takes two L2s of other lines */
static void in_l3(const cal_bufs* b)
{
    touch(b->cal, (size_t)CAL_LINES * SL_CACHE_LINE);
    touch(b->evict, b->evict_bytes);
}

/* How a pad separates L2 hits from L3 hits at the midpoint of the two medians: the share of L2
 * lines above it (*f2) and of L3 lines above it (*f3); both 1 when the medians share a step. */
static void separation(const cal_bufs* b, hist* h, unsigned pad, double* f2, double* f3)
{
    in_l2(b);
    hist_walk(h, b->cal, CAL_LINES, b->stride, pad);
    const double m2 = hist_median(h);
    in_l3(b);
    hist h3;
    hist_walk(&h3, b->cal, CAL_LINES, b->stride, pad);
    const double m3 = hist_median(&h3);
    *f2 = m3 > m2 ? hist_above(h, (m2 + m3) / 2) : 1;
    *f3 = m3 > m2 ? hist_above(&h3, (m2 + m3) / 2) : 1;
}

static double median_of(double* v, int n) { return sl_quantile(v, n, 0.5); }

size_t held_scratch_bytes(size_t l2_bytes)
{
    return (size_t)CAL_LINES * SL_CACHE_LINE + 2 * (l2_bytes ? l2_bytes : (2u << 20));
}

void held_calibrate(
    held_cal* c, char* scratch, size_t scratch_bytes, size_t l2_bytes, unsigned stride)
{
    const size_t cal_bytes = (size_t)CAL_LINES * SL_CACHE_LINE;
    cal_bufs b = { scratch, scratch + cal_bytes, 2 * (l2_bytes ? l2_bytes : (2u << 20)), stride };
    c->stride = stride;
    if (b.evict_bytes > scratch_bytes - cal_bytes)
        b.evict_bytes = scratch_bytes - cal_bytes;
    hist* h = malloc(sizeof(*h));
    c->tsc_step = tsc_step();
    /* The vernier, only where the TSC is coarse. An L2 line read as L3 costs the held fraction
     * directly, while L3 reads are blurred anyway (a timed miss also brings its neighbour in, the
     * adjacent-line prefetch): so among the pads that keep L2 hits under the midpoint (<= 1%
     * above it), the one that puts most L3 hits above it; else the best difference. Ties keep
     * the smaller pad. */
    const unsigned pad_max = c->tsc_step > 2 ? PAD_MAX : 0;
    double best_clean = -1, best_any = -2;
    unsigned pad_clean = 0, pad_any = 0;
    for (unsigned pad = 0; pad <= pad_max; pad += PAD_STEP) {
        double f2, f3;
        separation(&b, h, pad, &f2, &f3);
        if (f2 <= 0.01 && f3 > best_clean + 0.01) {
            best_clean = f3;
            pad_clean = pad;
        }
        if (f3 - f2 > best_any + 0.01) {
            best_any = f3 - f2;
            pad_any = pad;
        }
    }
    c->pad = best_clean > 0 ? pad_clean : pad_any;
    double l1[CAL_REPEATS], l2[CAL_REPEATS], l3[CAL_REPEATS], dr[CAL_REPEATS];
    for (int r = 0; r < CAL_REPEATS; r++) {
        touch(b.cal, (size_t)L1_LINES * SL_CACHE_LINE);
        touch(b.cal, (size_t)L1_LINES * SL_CACHE_LINE);
        hist_walk(h, b.cal, L1_LINES, 1, c->pad);
        l1[r] = hist_median(h);
        in_l2(&b);
        hist_walk(h, b.cal, CAL_LINES, b.stride, c->pad);
        l2[r] = hist_median(h);
        in_l3(&b);
        hist_walk(h, b.cal, CAL_LINES, b.stride, c->pad);
        l3[r] = hist_median(h);
        /* each line flushed just before it is timed: with the whole buffer flushed first, the
         * lines that prefetchers brought back beside earlier misses read as cache hits */
        const walk w = walk_of(CAL_LINES / stride);
        memset(h, 0, sizeof(*h));
        for (uint64_t i = 0; i < CAL_LINES / stride; i++) {
            const char* p = b.cal + walk_at(&w, i) * stride * SL_CACHE_LINE;
            _mm_clflush(p);
            _mm_mfence();
            const uint32_t t = time_load(p, c->pad);
            h->n[t < HIST_BINS ? t : HIST_BINS - 1]++;
        }
        h->total = CAL_LINES / stride;
        dr[r] = hist_median(h);
    }
    /* the separation the chosen pad gives, measured again after the repeats (printed) */
    double f2, f3;
    separation(&b, h, c->pad, &f2, &f3);
    c->separation = f3 - f2;
    free(h);
    c->l1 = median_of(l1, CAL_REPEATS);
    c->l2 = median_of(l2, CAL_REPEATS);
    c->l3 = median_of(l3, CAL_REPEATS);
    c->dram = median_of(dr, CAL_REPEATS);
    c->t12 = (c->l1 + c->l2) / 2;
    c->t23 = (c->l2 + c->l3) / 2;
    c->t3d = (c->l3 + c->dram) / 2;
    /* L1 and L2 may read the same where the TSC ticks coarsely; only L2 < L3 < DRAM is needed
     * to class a line as held */
    c->ordered = c->l1 <= c->l2 && c->l2 < c->l3 && c->l3 < c->dram;
}

void held_classify(const held_cal* c, const char* buf, size_t bytes, held_count* out)
{
    hist h; /* on the stack: 4 KiB that stay in L1 */
    hist_walk(&h, buf, bytes / SL_CACHE_LINE, c->stride, c->pad);
    out->lines = h.total; /* the lines timed */
    out->l1 = out->l2 = out->l3 = out->dram = 0;
    for (int b = 0; b < HIST_BINS; b++) {
        const double d = b;
        if (d <= c->t12)
            out->l1 += h.n[b];
        else if (d <= c->t23)
            out->l2 += h.n[b];
        else if (d <= c->t3d)
            out->l3 += h.n[b];
        else
            out->dram += h.n[b];
    }
    out->p50 = h.total ? hist_median(&h) : 0;
}
