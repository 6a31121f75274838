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
