/* Userspace held-fraction measurement (see held.h). */
#include "held.h"

#include "sl.h"

#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

#define CAL_LINES 2048 /* 128 KiB: more than any L1D, far less than any L2 */
#define L1_LINES 256 /* 16 KiB: inside every L1D */
#define CAL_REPEATS 5

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

/* The visiting order: one fixed pseudo-random permutation of all the lines. Measured on Zen 3
 * with 2,048 flushed lines: a sequential walk, a constant stride of 37 lines, and a shuffled
 * order inside each page taken page by page all read as hits (median 73 TSC ticks, the same as
 * hot lines: the stream / region prefetchers ran ahead); the full permutation reads 294-319. */
static void walk_order(size_t lines, size_t* idx)
{
    for (size_t i = 0; i < lines; i++)
        idx[i] = i;
    uint32_t x = 0x9e3779b9u;
    for (size_t i = lines; i > 1; i--) { /* Fisher-Yates with a fixed xorshift seed */
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        const size_t j = x % i, t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

/* One load timed with RDTSCP. The window starts on a TSC tick edge: where the TSC advances in
 * coarse steps (AMD: the 100 MHz reference clock times the P0 ratio, ~24.5 ticks = 10 ns on the
 * Zen 3 guest), an unaligned window reads as either of two step counts at random, and an L2
 * hit (3-4 ns) and an L3 hit (~13 ns) overlap; from an edge, a load's time always falls in the
 * same step. Where the TSC ticks by 1 (Intel) the spin ends at once. */
static inline uint32_t time_load(const char* p)
{
    unsigned aux;
    const uint64_t prev = __rdtscp(&aux);
    uint64_t t0;
    while ((t0 = __rdtscp(&aux)) == prev)
        ;
    /* RDTSCP waits for earlier loads; the LFENCE after it keeps later ones from starting early */
    _mm_lfence();
    (void)*(const volatile uint8_t*)p;
    const uint64_t t1 = __rdtscp(&aux);
    _mm_lfence();
    return (uint32_t)(t1 - t0);
}

static int cmp_u32(const void* a, const void* b)
{
    const uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
    return (x > y) - (x < y);
}

static double median_walk(const char* buf, size_t lines, uint32_t* lat, const size_t* idx)
{
    for (size_t i = 0; i < lines; i++)
        lat[i] = time_load(buf + idx[i] * SL_CACHE_LINE);
    qsort(lat, lines, sizeof(*lat), cmp_u32);
    return lat[lines / 2];
}

static void touch(const char* buf, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += SL_CACHE_LINE)
        (void)*(const volatile uint8_t*)(buf + i);
}

static double median3(double* v, int n)
{
    return sl_quantile(v, n, 0.5);
}

void held_calibrate(held_cal* c, char* scratch, size_t scratch_bytes, size_t l2_bytes)
{
    const size_t cal_bytes = (size_t)CAL_LINES * SL_CACHE_LINE;
    char* cal = scratch;
    char* evict = scratch + cal_bytes;
    /* pushing the calibration lines out of L2 into L3 takes two L2s of other lines */
    size_t evict_bytes = 2 * (l2_bytes ? l2_bytes : (2u << 20));
    if (evict_bytes > scratch_bytes - cal_bytes)
        evict_bytes = scratch_bytes - cal_bytes;
    uint32_t* lat = malloc(sizeof(uint32_t) * CAL_LINES);
    size_t* idx = malloc(sizeof(size_t) * CAL_LINES);
    size_t* idx1 = malloc(sizeof(size_t) * L1_LINES);
    walk_order(CAL_LINES, idx);
    walk_order(L1_LINES, idx1);
    double l1[CAL_REPEATS], l2[CAL_REPEATS], l3[CAL_REPEATS], dr[CAL_REPEATS];
    for (int r = 0; r < CAL_REPEATS; r++) {
        touch(cal, (size_t)L1_LINES * SL_CACHE_LINE);
        touch(cal, (size_t)L1_LINES * SL_CACHE_LINE);
        l1[r] = median_walk(cal, L1_LINES, lat, idx1);
        /* 128 KiB touched twice: timing it from the start finds each line already pushed from
         * L1 to L2 by the ones after it (and each timed line pushes out an untimed one) */
        touch(cal, cal_bytes);
        touch(cal, cal_bytes);
        l2[r] = median_walk(cal, CAL_LINES, lat, idx);
        touch(cal, cal_bytes);
        touch(evict, evict_bytes);
        l3[r] = median_walk(cal, CAL_LINES, lat, idx);
        /* each line flushed just before it is timed: with the whole buffer flushed first, the
         * lines that prefetchers brought back beside earlier misses read as cache hits */
        for (size_t i = 0; i < CAL_LINES; i++) {
            const char* p = cal + idx[i] * SL_CACHE_LINE;
            _mm_clflush(p);
            _mm_mfence();
            lat[i] = time_load(p);
        }
        qsort(lat, CAL_LINES, sizeof(*lat), cmp_u32);
        dr[r] = lat[CAL_LINES / 2];
    }
    free(lat);
    free(idx);
    free(idx1);
    c->l1 = median3(l1, CAL_REPEATS);
    c->l2 = median3(l2, CAL_REPEATS);
    c->l3 = median3(l3, CAL_REPEATS);
    c->dram = median3(dr, CAL_REPEATS);
    c->t12 = (c->l1 + c->l2) / 2;
    c->t23 = (c->l2 + c->l3) / 2;
    c->t3d = (c->l3 + c->dram) / 2;
    /* L1 and L2 may read the same where the TSC ticks coarsely (Zen 3 guests: ~24.5 ticks); only
     * L2 < L3 < DRAM is needed to class a line as held */
    c->ordered = c->l1 <= c->l2 && c->l2 < c->l3 && c->l3 < c->dram;
}

void held_classify(const held_cal* c, const char* buf, size_t bytes, held_count* out)
{
    const size_t lines = bytes / SL_CACHE_LINE;
    uint32_t* lat = malloc(sizeof(uint32_t) * (lines ? lines : 1));
    size_t* idx = malloc(sizeof(size_t) * (lines ? lines : 1));
    walk_order(lines, idx);
    out->lines = lines;
    out->l1 = out->l2 = out->l3 = out->dram = 0;
    for (size_t i = 0; i < lines; i++)
        lat[i] = time_load(buf + idx[i] * SL_CACHE_LINE);
    free(idx);
    for (size_t i = 0; i < lines; i++) {
        const double d = lat[i];
        if (d <= c->t12)
            out->l1++;
        else if (d <= c->t23)
            out->l2++;
        else if (d <= c->t3d)
            out->l3++;
        else
            out->dram++;
    }
    qsort(lat, lines, sizeof(*lat), cmp_u32);
    out->p50 = lines ? lat[lines / 2] : 0;
    free(lat);
}
