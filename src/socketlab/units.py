"""Units, one table: what a measured metric or a published value may be given in.

The published schema's unit enum is exactly this table's keys (tests/test_units.py); the report
converts with it, perf's scaled counts are read with it, and serving metrics emit only its units.
"""

from __future__ import annotations

#: unit -> (dimension, factor to the dimension's base unit); same dimension = convertible. A unit
#: with a dimension of its own ("W", "count") converts only to itself.
UNITS: dict[str, tuple[str, float]] = {
    "MB/s": ("bw", 1e6), "GB/s": ("bw", 1e9), "TB/s": ("bw", 1e12), "MHz": ("freq", 1e6),
    "GHz": ("freq", 1e9), "Gflop/s": ("flops", 1e9), "Tflop/s": ("flops", 1e12),
    "GFLOP/s": ("flops", 1e9), "TFLOP/s": ("flops", 1e12),
    "s": ("time", 1.0), "ms": ("time", 1e-3), "us": ("time", 1e-6), "µs": ("time", 1e-6),
    "ns": ("time", 1e-9),
    "B": ("bytes", 1.0), "KiB": ("bytes", 1024.0), "MiB": ("bytes", 1024.0**2),
    "GiB": ("bytes", 1024.0**3), "KB": ("bytes", 1e3), "MB": ("bytes", 1e6), "GB": ("bytes", 1e9),
    "fraction": ("frac", 1.0), "percent": ("frac", 0.01),
    **{u: (u, 1.0) for u in ("W", "C", "lines", "count", "1/s", "ratio", "tok/s", "req/s",
                             "B/cycle", "MiB/s", "Gbit/s", "bool")},
}  # fmt: skip


def convert(value: float, unit: str, to: str) -> float | None:
    """``value`` in ``unit`` expressed in ``to``; None when the units are not convertible."""
    if unit == to:
        return value
    a, b = UNITS.get(unit), UNITS.get(to)
    if a is None or b is None or a[0] != b[0]:
        return None
    return value * a[1] / b[1]


def cas_bytes(value: float, unit: str) -> float:
    """Bytes of a CAS count perf printed in ``unit``: scaled where sysfs gave the event a scale
    (the kernel aliases carry 64 B expressed in MiB), else a count of 64-byte lines."""
    scaled = convert(value, unit.strip(), "B")
    return value * 64 if scaled is None else scaled
