/* Order statistics over samples. */
#include "sl.h"

#include <math.h>
#include <stdlib.h>

int sl_cmp_double(const void* a, const void* b)
{
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

double sl_quantile(double* v, int n, double q)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(*v), sl_cmp_double);
    const double pos = q * (n - 1);
    const int lo = (int)floor(pos);
    const int hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

void sl_match_add(sl_match* m, double got, double want)
{
    m->err2 += (got - want) * (got - want);
    m->ref2 += want * want;
    m->dot += got * want;
    m->out2 += got * got;
}

double sl_match_rel_rms(const sl_match* m) { return sqrt(m->err2 / m->ref2); }

double sl_match_cosine(const sl_match* m) { return m->dot / sqrt(m->ref2 * m->out2); }

void sl_step_spans_us(const uint64_t* t0, const uint64_t* t1, int workers, int steps, double* us)
{
    const double ghz = sl_tsc_ghz();
    for (int s = 0; s < steps; s++) {
        uint64_t first = UINT64_MAX, last = 0;
        for (int i = 0; i < workers; i++) {
            const size_t at = (size_t)i * steps + s;
            first = t0[at] < first ? t0[at] : first;
            last = t1[at] > last ? t1[at] : last;
        }
        us[s] = (double)(last - first) / ghz * 1e-3;
    }
}
