/* Userspace residency classifier: calibrated L1/L2/L3/DRAM load latencies on a buffer of the
 * owner core's node, then every line of a slice timed with RDTSCP and classed at the midpoints.
 * Where the TSC ticks in coarse steps (AMD), a padding chosen at calibration places the L2/L3
 * midpoint on a step edge (held.c).
 * Prefetchers are left as they are (userspace cannot switch them off), so lines are visited in an
 * order without a constant stride (held.c), which keeps the stride and stream prefetchers from
 * hiding misses; the driver's MEASURE (prefetchers off, IRQs off) is the stricter figure. */
#ifndef RESIDENCY_HELD_H
#define RESIDENCY_HELD_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double l1, l2, l3, dram; /* median cycles (TSC) per level */
    double t12, t23, t3d; /* thresholds: midpoints between neighbouring levels */
    int ordered; /* l1 <= l2 < l3 < dram: held and not held are separable */
    unsigned stride; /* one line timed per `stride` lines (the prefetchers bring the others) */
    unsigned tsc_step; /* TSC ticks per step (AMD guests ~26; 1 on Intel) */
    unsigned pad; /* cycles of padding after each timed load (held.c's vernier) */
    double separation; /* L3 lines above t23 less L2 lines above it, at that pad (0..1) */
} held_cal;

typedef struct {
    uint64_t lines, l1, l2, l3, dram; /* lines timed (slice lines / stride), by level */
    double p50; /* median cycles of the slice's lines */
} held_count;

/* Cache sizes of `cpu` from sysfs (bytes; 0 when unknown). */
size_t held_cache_bytes(int cpu, int level);
/* The scratch buffer held_calibrate needs for an L2 of l2_bytes (0: unknown). */
size_t held_scratch_bytes(size_t l2_bytes);
/* Run on the pinned owner core; scratch: node-local, first-touched, held_scratch_bytes() long.
 * stride: time the first line of every `stride` lines, here and in held_classify. */
void held_calibrate(
    held_cal* c, char* scratch, size_t scratch_bytes, size_t l2_bytes, unsigned stride);
void held_classify(const held_cal* c, const char* buf, size_t bytes, held_count* out);

#endif
