"""proc_noise collector (the isolation issue's IRQ / context-switch sampler) -> rates per second.

Each record is one CPU over one interval. The metric ``irq_rate`` (1/s, mean over the recorded
CPUs and intervals) carries the kind in its ``interrupt`` dimension: ``device``, ``LOC`` (local
timer), ``other`` (IPIs, TLB shootdowns, ...) and ``context-switches``; ``irq_rate_max`` is the
worst CPU-interval.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from socketlab.parse.collectors import CollectorOutput, metric

KINDS = {
    "device_irqs_per_s": "device",
    "local_timer_irqs_per_s": "LOC",
    "other_irqs_per_s": "other",
    "ctx_switches_per_s": "context-switches",
}


def parse(records: list[dict[str, Any]], directory: Path) -> CollectorOutput:
    out = CollectorOutput()
    values: dict[str, list[float]] = {}
    cpus = set()
    for r in records:
        if "cpu" not in r:
            continue
        cpus.add(r["cpu"])
        for key, kind in KINDS.items():
            if isinstance(r.get(key), int | float):
                values.setdefault(kind, []).append(float(r[key]))
    for kind, vals in values.items():
        out.metrics.append(
            metric("irq_rate", statistics.fmean(vals), "1/s", interrupt=kind, cpus=len(cpus))
        )
        out.metrics.append(metric("irq_rate_max", max(vals), "1/s", interrupt=kind, cpus=len(cpus)))
    return out
