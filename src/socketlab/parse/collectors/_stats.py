"""Small statistics shared by the collector parsers."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 1]."""
    s = sorted(values)
    if not s:
        raise ValueError("no values")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread(prefix: str, per_cpu: dict[str, float], unit: str) -> list[tuple[str, float, str]]:
    """mean, p5, min, max over CPUs of per-CPU values."""
    vals = list(per_cpu.values())
    if not vals:
        return []
    return [
        (f"{prefix}_mean", statistics.fmean(vals), unit),
        (f"{prefix}_p5", percentile(vals, 0.05), unit),
        (f"{prefix}_min", min(vals), unit),
        (f"{prefix}_max", max(vals), unit),
    ]
