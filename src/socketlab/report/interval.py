"""The interval of a median over repetitions, and where it lies against a tolerance band. Pure.

A verdict from a median alone calls one noisy minute a deviation. The verdict comes instead from
a distribution-free interval of the median: the order statistics x(k) <= median <= x(n+1-k),
whose coverage is P(k <= B <= n-k) for B ~ Binomial(n, 1/2) (``scipy.stats.binom``). The
narrowest such interval that covers the median with LEVEL is taken; below 6 repetitions no
interval reaches 95 %, so the widest one (min-max) is taken and its coverage said: 75 % for the
published 3 repetitions, 50 % for 2, none for 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy.stats import binom

LEVEL = 0.95  #: the coverage asked of the median's interval
#: the fewest repetitions a verdict is drawn from (unless the published cell used fewer): with
#: 3 the min-max interval covers the median 75 % of the time; 2 give 50 %, 1 nothing
MIN_REPS = 3

INSIDE, OUTSIDE, STRADDLES = "inside", "outside", "straddles"


@dataclass(frozen=True)
class MedianInterval:
    low: float
    high: float
    level: float  #: the coverage of the median this interval has (0 for a single value)
    n: int

    def text(self, show: Callable[[float], str] = "{:g}".format, unit: str = "") -> str:
        """'168–175 GB/s (75%, 3 reps)'."""
        return (
            f"{show(self.low)}–{show(self.high)}{unit} ({self.level:.0%}, {self.n} "
            f"rep{'s' if self.n != 1 else ''})"
        )


def coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n+1-k)) for n values of a continuous distribution (1-based k)."""
    if n < 1 or k < 1 or 2 * k > n + 1:
        return 0.0
    return float(binom.cdf(n - k, n, 0.5) - binom.cdf(k - 1, n, 0.5))


def median_interval(values: Sequence[float], level: float = LEVEL) -> MedianInterval:
    """The narrowest symmetric order-statistic interval covering the median with ``level``,
    else min-max with the coverage it has."""
    x = sorted(float(v) for v in values)
    n = len(x)
    if n == 0:
        raise ValueError("median_interval of no values")
    k = 1
    for cand in range((n + 1) // 2, 0, -1):  # narrowest first
        if coverage(n, cand) >= level:
            k = cand
            break
    return MedianInterval(x[k - 1], x[n - k], coverage(n, k), n)


def placement(interval: MedianInterval, within: Callable[[float], bool], ref: float) -> str:
    """INSIDE when both ends are within the band (the band is one interval, so all between
    are); OUTSIDE when neither is and both lie on one side of ``ref`` (a point of the band: the
    published value); else STRADDLES."""
    lo, hi = within(interval.low), within(interval.high)
    if lo and hi:
        return INSIDE
    if not lo and not hi and (interval.low > ref or interval.high < ref):
        return OUTSIDE
    return STRADDLES
