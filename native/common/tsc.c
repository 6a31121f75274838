/* TSC timing calibrated against CLOCK_MONOTONIC. Spans across cores assume an invariant,
 * synchronised TSC; CPUID's answer is reported as tsc_invariant in every meta record. */
#include "sl.h"

#include <time.h>

double sl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double sl_tsc_ghz(void)
{
    static double ghz;
    if (ghz > 0)
        return ghz;
    /* 3 windows of 20 ms; keep the median so one preemption cannot skew the rate */
    double r[3];
    for (int i = 0; i < 3; i++) {
        const double t0 = sl_now_s();
        const uint64_t c0 = sl_rdtsc();
        double t1;
        do
            t1 = sl_now_s();
        while (t1 - t0 < 0.02);
        const uint64_t c1 = sl_rdtsc();
        r[i] = (double)(c1 - c0) / (t1 - t0) * 1e-9;
    }
    ghz = sl_quantile(r, 3, 0.5);
    return ghz;
}
